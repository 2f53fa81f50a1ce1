"""benchmarks/__main__.py, the one process CI runs every other benchmark's quick mode in: no benchmark is left out
of both it and the suite, and a name it does not know is refused in one sentence."""

from pathlib import Path

import pytest

from benchmarks.__main__ import ELSEWHERE, QUICK, main

ROOT = Path(__file__).resolve().parents[1]


def test_every_benchmark_runs_quick_in_ci_once():
    modules = {path.stem for path in (ROOT / "benchmarks").glob("*.py") if not path.stem.startswith("_")}
    assert set(QUICK) | set(ELSEWHERE) == modules
    assert not set(QUICK) & set(ELSEWHERE)
    for name, where in ELSEWHERE.items():
        assert f"benchmarks.{name}" in (ROOT / where).read_text(), (name, where)


def test_an_unknown_benchmark_is_refused_before_any_runs(capsys):
    with pytest.raises(SystemExit) as stopped:
        main(["--quick", "perf", "nonsense"])
    assert stopped.value.code == 2
    assert "no quick benchmark named nonsense" in capsys.readouterr().err
