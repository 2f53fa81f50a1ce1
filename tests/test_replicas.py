"""scripts/replicas.py's HAProxy configuration: valid for HAProxy itself, affinity on or off, and the compose
file's copy still the one the template gives."""

import subprocess
from urllib.parse import urlsplit

import pytest
import yaml

from scripts.live_server import free_port
from scripts.replicas import COOKIE, ROOT, haproxy_path, render_config

LOOPBACK = {"r1": "127.0.0.1:8601", "r2": "127.0.0.1:8602"}


def backend_lines(config: str) -> list[str]:
    lines = config.split("backend replicas\n", 1)[1].split("\n\n", 1)[0].splitlines()
    return [line.strip() for line in lines if line.strip() and not line.strip().startswith("#")]


def test_affinity_is_a_cookie_naming_each_replica():
    lines = backend_lines(render_config("127.0.0.1:8600", LOOPBACK, "127.0.0.1:8604"))
    assert f"cookie {COOKIE} insert indirect nocache httponly" in lines
    assert [line for line in lines if line.startswith("server ")] == [
        "server r1 127.0.0.1:8601 cookie r1", "server r2 127.0.0.1:8602 cookie r2"]
    assert "http-check send meth GET uri /_stcore/health" in lines and "http-check expect status 200" in lines


def test_without_affinity_no_cookie_is_set_or_read():
    lines = backend_lines(render_config("127.0.0.1:8600", LOOPBACK, "127.0.0.1:8604", affinity=False))
    assert not [line for line in lines if "cookie" in line]
    assert "balance roundrobin" in lines


@pytest.mark.parametrize("affinity", [True, False])
def test_haproxy_accepts_the_configuration(tmp_path, affinity):
    if haproxy_path() is None:
        pytest.skip("haproxy is not installed (apt-get install haproxy)")
    path = tmp_path / "haproxy.cfg"
    path.write_text(render_config("127.0.0.1:8600", LOOPBACK, "127.0.0.1:8604", affinity))
    checked = subprocess.run([haproxy_path(), "-c", "-f", str(path)], capture_output=True, text=True, timeout=30)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "WARNING" not in checked.stdout + checked.stderr


def test_the_compose_files_configuration_is_the_templates():
    """deploy/compose/haproxy.cfg is written by the command its compose file names; re-written, it is unchanged."""
    compose = yaml.safe_load((ROOT / "deploy" / "compose" / "docker-compose.yml").read_text())
    assert sorted(compose["services"]) == ["app1", "app2", "db", "haproxy"]
    # the live class: both replicas share one PostgreSQL, whose user and database are the URL's
    db = compose["services"]["db"]
    for app in ("app1", "app2"):
        written = compose["services"][app]["environment"]["LMVIZ_LIVE_DB"]
        url = urlsplit(written.replace("${LMVIZ_LIVE_DB_PASSWORD}", "pw"))  # as compose fills it in
        assert (url.scheme, url.hostname, url.port, url.path) == ("postgresql", "db", 5432, "/lmviz")
        assert url.username == db["environment"]["POSTGRES_USER"] and "/" + db["environment"]["POSTGRES_DB"] == url.path
        assert compose["services"][app]["depends_on"]["db"]["condition"] == "service_healthy"
    assert "ports" not in db  # reached by the replicas only
    assert compose["services"]["app1"]["build"]["context"] == "../.."
    assert "./haproxy.cfg:/usr/local/etc/haproxy/haproxy.cfg:ro" in compose["services"]["haproxy"]["volumes"]
    assert set(compose["services"]["haproxy"]["depends_on"]) == {"app1", "app2"}
    expected = render_config(":8080", {"r1": "app1:8501", "r2": "app2:8501"}, ":8404", resolver="127.0.0.11:53")
    assert (ROOT / "deploy" / "compose" / "haproxy.cfg").read_text() == expected


def test_haproxys_log_keeps_no_client_address_and_no_query_string(tmp_path):
    """A live class's join link carries its room code and a phone's token in the query string, and lmviz keeps no
    student's address: HAProxy's line for a request has neither (docs/teachers/live-class.md says so)."""
    import http.server
    import threading
    import time
    import urllib.request

    if haproxy_path() is None:
        pytest.skip("haproxy is not installed (apt-get install haproxy)")

    class Ok(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, *args):
            pass

    backend = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Ok)
    threading.Thread(target=backend.serve_forever, daemon=True).start()
    front = free_port()
    path = tmp_path / "haproxy.cfg"
    path.write_text(render_config(f"127.0.0.1:{front}", {"r1": f"127.0.0.1:{backend.server_address[1]}"},
                                  f"127.0.0.1:{free_port()}"))
    proxy = subprocess.Popen([haproxy_path(), "-db", "-f", str(path)], stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True)
    output: list[str] = []  # everything HAProxy prints, read while it runs

    def read_output():
        for line in proxy.stdout:
            output.append(line)

    threading.Thread(target=read_output, daemon=True).start()
    answered = False
    try:
        deadline = time.monotonic() + 60  # 20 s was once too short on a machine busy with other tests
        while time.monotonic() < deadline and proxy.poll() is None:  # until the health check has found it up
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{front}/join?room=QWXYZ&p=TOKEN-SECRET", timeout=2).read()
                answered = True
                break
            except OSError:
                time.sleep(0.2)
        # HAProxy writes a request's line when the stream ends, which can come after the client has read the
        # answer: it is stopped only once the line is there (stopped at once, it once never wrote it, in CI).
        while answered and time.monotonic() < deadline and not any("GET /join" in line for line in output):
            time.sleep(0.1)
    finally:
        proxy.terminate()
        try:
            proxy.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proxy.kill()
        backend.shutdown()
    lines = [line for line in output if "GET /join" in line]
    assert answered and lines and " 200 " in lines[-1], output  # the request was answered, and logged
    assert not any(word in line for line in lines for word in ("QWXYZ", "TOKEN-SECRET", "127.0.0.1", "?")), lines
