"""The install routes agree: requirements.txt (PyPI's torch; `pip install -e .` and this project's machines),
requirements-cpu.txt (PyPI plus PyTorch's CPU-only torch: the Docker image) and Pipfile (the same, for
Streamlit Community Cloud, which reads it before requirements.txt). Every pin is `==`, a package pinned in two
files has the same version in both (torch's `+cpu` label aside), and the Dockerfile installs the route the
README names for it."""

import re
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parent.parent
CPU_INDEX = "https://download.pytorch.org/whl/cpu"
PIP_FILES = ["requirements.txt", "requirements-cpu.txt", "requirements-dev.txt"]


class BadPin(ValueError):
    pass


def pinned(line: str, where: str) -> tuple[str, Version]:
    """(canonical name, version) of a requirement that names exactly one version with ==."""
    requirement = Requirement(line)
    specs = list(requirement.specifier)
    if len(specs) != 1 or specs[0].operator != "==" or "*" in specs[0].version:
        raise BadPin(f"{where}: {line!r} is not pinned to one version with ==")
    return canonicalize_name(requirement.name), Version(specs[0].version)


def read_pip_file(path: Path) -> tuple[dict[str, Version], list[str]]:
    """({name: version}, option lines) of a pip requirements file, its -r includes followed."""
    pins, options = {}, []
    for number, raw in enumerate(path.read_text().splitlines(), 1):
        line = raw.split(" #")[0].strip()
        if line.startswith("-r "):
            included, included_options = read_pip_file(path.parent / line[3:].strip())
            pins, options = merge(pins, included, str(path)), options + included_options
        elif line.startswith("-"):
            options.append(line)
        elif line and not line.startswith("#"):
            name, version = pinned(line, f"{path.name}:{number}")
            pins = merge(pins, {name: version}, f"{path.name}:{number}")
    return pins, options


def merge(pins: dict[str, Version], more: dict[str, Version], where: str) -> dict[str, Version]:
    """Both sets of pins; one file may name a package twice only with the same release (torch, torch+cpu)."""
    merged = dict(pins)
    for name, version in more.items():
        if name in merged and merged[name].public != version.public:
            raise BadPin(f"{where}: {name} pinned to both {merged[name]} and {version}")
        if name not in merged or version.local:  # the line with the label is the stricter one pip must satisfy
            merged[name] = version
    return merged


def read_pipfile(path: Path) -> tuple[dict[str, Version], dict]:
    """({name: version}, the parsed TOML) of a Pipfile's [packages]."""
    data = tomllib.loads(path.read_text())
    pins = {}
    for name, value in data["packages"].items():
        spec = value if isinstance(value, str) else value["version"]
        key, version = pinned(f"{name}{spec}", f"{path.name} [packages]")
        pins[key] = version
    return pins, data


ROUTES = {name: read_pip_file(ROOT / name)[0] for name in PIP_FILES} | {"Pipfile": read_pipfile(ROOT / "Pipfile")[0]}


@pytest.mark.parametrize(("first", "second"), [(a, b) for a in ROUTES for b in ROUTES if a < b])
def test_every_package_named_in_two_files_has_the_same_version_in_both(first, second):
    for name in ROUTES[first].keys() & ROUTES[second].keys():
        assert ROUTES[first][name].public == ROUTES[second][name].public, (name, first, second)


def test_the_cpu_routes_install_exactly_the_apps_packages_with_the_cpu_torch():
    app = ROUTES["requirements.txt"]
    assert not app["torch"].local  # PyPI's torch: what `pip install -e .` and this project's machines take
    for route in ("requirements-cpu.txt", "Pipfile"):
        assert ROUTES[route].keys() == app.keys(), route
        assert ROUTES[route]["torch"].local == "cpu", route


def test_the_cpu_routes_name_pytorchs_cpu_index_for_torch():
    assert f"--extra-index-url {CPU_INDEX}" in read_pip_file(ROOT / "requirements-cpu.txt")[1]
    data = read_pipfile(ROOT / "Pipfile")[1]
    sources = {source["name"]: source["url"] for source in data["source"]}
    assert sources[data["packages"]["torch"]["index"]] == CPU_INDEX
    assert data["source"][0]["url"] == "https://pypi.org/simple"  # the default source: everything else


def test_requirements_txt_stays_plain_lines_for_pyproject():
    """setuptools reads requirements.txt as one requirement a line: an option or -r there breaks pip install -e ."""
    pins, options = read_pip_file(ROOT / "requirements.txt")
    assert pins and not options


def test_the_dockerfile_installs_the_cpu_route_and_the_readme_says_so():
    dockerfile = (ROOT / "Dockerfile").read_text()
    installed = re.findall(r"pip install [^&\n]*-r (\S+)", dockerfile)
    assert installed == ["requirements-cpu.txt"]
    copied = re.search(r"^COPY (requirements[^\n]*) \./?$", dockerfile, re.MULTILINE).group(1).split()
    assert set(copied) == {"requirements-cpu.txt", "requirements.txt"}  # the file and the one it includes
    hosting = (ROOT / "docs" / "hosting" / "index.md").read_text()
    docker_paragraph = re.search(r"\*\*Docker\*\*.*?(?:\n\n|\Z)", hosting, re.DOTALL)
    assert docker_paragraph and "requirements-cpu.txt" in docker_paragraph.group(0)


@pytest.mark.parametrize("line", ["torch>=2.13.0", "torch", "torch==2.*", "torch==2.13.0,<3"])
def test_a_pin_that_is_not_one_exact_version_is_refused(line):
    with pytest.raises(BadPin):
        pinned(line, "test")


def test_a_file_naming_two_releases_of_one_package_is_refused(tmp_path):
    (tmp_path / "base.txt").write_text("torch==2.13.0\n")
    (tmp_path / "cpu.txt").write_text(f"--extra-index-url {CPU_INDEX}\n-r base.txt\ntorch==2.12.0+cpu\n")
    with pytest.raises(BadPin, match="torch pinned to both"):
        read_pip_file(tmp_path / "cpu.txt")


def test_an_included_file_keeps_the_cpu_label_whichever_line_comes_first(tmp_path):
    (tmp_path / "base.txt").write_text("torch==2.13.0\nnumpy==2.4.6\n")
    (tmp_path / "cpu.txt").write_text("torch==2.13.0+cpu\n-r base.txt\n")
    pins, _ = read_pip_file(tmp_path / "cpu.txt")
    assert pins == {"torch": Version("2.13.0+cpu"), "numpy": Version("2.4.6")}
