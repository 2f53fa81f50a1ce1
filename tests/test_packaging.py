"""pyproject.toml: `pip install -e .` gives an importable lmviz and an `lmviz` command."""

import importlib
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_the_lmviz_command_is_the_clis_main_and_the_dependencies_are_the_apps():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    module, function = project["project"]["scripts"]["lmviz"].split(":")
    assert callable(getattr(importlib.import_module(module), function))
    assert project["tool"]["setuptools"]["dynamic"]["dependencies"]["file"] == ["requirements.txt"]
    assert project["tool"]["setuptools"]["packages"] == ["lmviz"]
