"""python -m lmviz clm: the same numbers as the page, as a table or JSON."""

import json
import os
import subprocess
import sys

import pytest

from lmviz.__main__ import main
from lmviz.analysis import analyse_clm

TEXT = "The capital of France is Paris."


def test_json_has_the_promised_fields_and_matches_the_analysis(bundled, capsys):
    assert main(["clm", TEXT, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    expected = analyse_clm(bundled, TEXT)
    assert data["model"] == "SmolLM2-135M-Instruct"
    assert data["tokens"] == expected.tokens and data["input_ids"] == expected.input_ids
    assert data["loss"] == expected.loss and data["perplexity"] == expected.perplexity
    for row, want in zip(data["rows"], expected.rows):
        assert (row["position"], row["target_id"], row["rank"]) == (want.position, want.target_id, want.rank)
        assert row["prob"] == want.prob and row["nll"] == want.nll


def test_table_prints_every_position_and_the_three_way_check(bundled, capsys):
    assert main(["clm", TEXT, "--bos"]) == 0
    out = capsys.readouterr().out
    expected = analyse_clm(bundled, TEXT, add_bos=True)
    assert f"loss (mean -log p)        {expected.loss:.5f}" in out
    assert "model's own loss" in out and "nn.CrossEntropyLoss" in out
    assert sum(1 for line in out.splitlines() if line.strip()[:1].isdigit()) == len(expected.rows)


@pytest.mark.parametrize("text, message", [("", "nothing to score"), ("Hi", "no next token")])
def test_bad_text_gives_one_sentence_and_exit_code_2(text, message, capsys):
    assert main(["clm", text]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_cli_runs_as_a_module_offline():
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    done = subprocess.run([sys.executable, "-m", "lmviz", "clm", "I love dogs not cats", "--json"],
                          capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert len(data["rows"]) == len(data["tokens"]) - 1
    assert abs(data["loss"] - sum(r["nll"] for r in data["rows"]) / len(data["rows"])) < 1e-6


@pytest.mark.parametrize("args, message", [(["--device", "cuda"], "no 'cuda' device"),
                                           (["--top-k", "0"], "at least 1")])
def test_bad_options_give_one_sentence(args, message, capsys):
    if "cuda" in args and __import__("torch").cuda.is_available():
        pytest.skip("this machine has a GPU")
    try:
        code = main(["clm", TEXT, *args])
    except SystemExit as exit_:  # argparse rejects the option itself
        code = exit_.code
    err = capsys.readouterr().err
    assert code == 2 and message in err and "Traceback" not in err
