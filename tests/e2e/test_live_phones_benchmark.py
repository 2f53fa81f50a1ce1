"""benchmarks/live_phones.py in quick mode (2 real browsers, 4 protocol clients): every phone joins, sees the
question and answers once; the projector counts each answer; and the protocol client's answer says to the server
what the real browser's said (the same page, fragment, widgets and kinds of value)."""

import re
import subprocess
import sys

from scripts.live_server import ROOT


def test_quick_counts_every_phone_once_and_its_clients_speak_as_the_browser_does(chromium_path):
    done = subprocess.run([sys.executable, "-m", "benchmarks.live_phones", "--quick"], cwd=ROOT,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    rows = dict(re.findall(r"^\| (.+?) \| (.+?) \|$", done.stdout, re.M))
    assert rows["phones joined and waiting (real browsers + protocol clients)"] == "6 (2 + 4)"
    assert rows["answers stored / distinct phones / the projector's count"] == "6 / 6 / 6", done.stdout
    assert rows["a protocol client's answer says what a browser's does"] == "yes", done.stdout
    p50, p95 = map(float, rows["tap → counted on the projector p50 / p95 (s)"].split(" / "))
    assert 0 < p50 <= p95
    float(rows["server CPU per waiting phone (cores)"])  # a number (its size is measured, never tested here)
