"""python -m lmviz clm, next, sft, step and grpo: the same numbers as the pages, as a table or JSON."""

import json
import math
import os
import re
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from lmviz.__main__ import main
from lmviz.core.numbers import fmt, fmt_gap, fmt_grad, fmt_norm, fmt_prob, fmt_signed
from lmviz.core.text import readable_token
from lmviz.core.trl import TRL
from lmviz.errors import BadInput, NoChatTemplate
from lmviz.lessons.causal_lm import analyse_clm
from lmviz.lessons.chat_loss import analyse_sft
from lmviz.lessons.gradient_step import (
    adamw_first_step,
    check_learning_rate,
    check_steps,
    logit_gradient,
    output_matrix,
    sgd_steps,
)
from lmviz.lessons.grpo import (
    LOSS_TYPES,
    POPULATION_STD,
    SAMPLE_STD,
    SCALINGS,
    advantages,
    at_most_tokens,
    contains_number,
    contains_word,
    group_loss,
    grpo_step,
    overlong_penalty,
    prompt_ids,
    rewards,
    sample_group,
)
from lmviz.lessons.next_token import distribution, if_true_next, next_token_logits, sample_token
from lmviz.live.store import IDLE_HOURS, Store
from lmviz.models.loading import TINY_GPT, load_causal_lm
from tests.helpers import one_sentence

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


# --- next: the distribution of the next token -------------------------------------------------------

PREFIX = "The capital of France is"


def test_next_json_has_the_promised_fields_and_matches_the_library(bundled, capsys):
    assert main(["next", PREFIX, "--json", "--top-k", "5", "--temperature", "0.7"]) == 0
    data = json.loads(capsys.readouterr().out)
    result = next_token_logits(bundled, PREFIX)
    expected = distribution(result, bundled.tokenizer, 0.7, 5)
    assert data["model"] == "SmolLM2-135M-Instruct" and data["temperature"] == 0.7
    assert data["input_ids"] == result.input_ids and data["tokens"] == result.tokens
    assert [c["token_id"] for c in data["top"]] == [c.token_id for c in expected.top]
    for got, want in zip(data["top"], expected.top):
        assert {"token", "token_id", "logit", "prob", "nll", "rank"} <= set(got)
        assert got["token"] == want.token and got["rank"] == want.rank
        assert got["prob"] == pytest.approx(want.prob, rel=1e-5) and got["nll"] == pytest.approx(want.nll, abs=1e-5)
    assert data["greedy"]["token_id"] == int(result.logits.argmax()) == data["top"][0]["token_id"]
    assert data["everything_else"]["count"] == result.vocab_size - 5
    assert data["everything_else"]["prob"] + sum(c["prob"] for c in data["top"]) == pytest.approx(1.0, abs=1e-9)


def test_next_table_lists_the_top_tokens_a_sample_and_a_true_next_word(bundled, capsys):
    assert main(["next", PREFIX, "--top-k", "3", "--seed", "4", "--true-next", "Paris"]) == 0
    out = capsys.readouterr().out
    result = next_token_logits(bundled, PREFIX)
    true = if_true_next(result, bundled.tokenizer, "Paris")
    sampled = sample_token(result.logits, 1.0, 4)
    assert sum(1 for line in out.splitlines() if line.strip()[:1].isdigit()) == 3
    assert "everything else (49,149 tokens)" in out and "greedy: ␣Paris" in out
    assert f"sampled with seed 4: {readable_token(bundled.tokenizer, sampled)} (id {sampled})" in out
    assert f"p = {fmt_prob(true.prob)}, rank 1, loss -log p = {fmt(true.nll)}" in out


# --- sft: the answer-only loss of a chat --------------------------------------------------------------

QUESTION, ANSWER = "What is the capital of France?", "Paris."


def test_sft_json_has_the_promised_fields_and_matches_the_library(bundled, capsys):
    assert main(["sft", QUESTION, ANSWER, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    expected = analyse_sft(bundled, QUESTION, ANSWER)
    assert data["model"] == "SmolLM2-135M-Instruct"
    assert data["input_ids"] == expected.chat.input_ids and data["tokens"] == expected.chat.tokens
    assert data["labels"] == expected.chat.labels and data["labels"].count(-100) == len(data["labels"]) - 3
    assert (data["counted_answer"], data["counted_all"]) == (3, len(data["input_ids"]) - 1)
    assert [r["target_id"] for r in data["rows"]] == [i for i in data["labels"] if i != -100]
    assert bundled.tokenizer.decode([r["target_id"] for r in data["rows"]]) == "Paris.<|im_end|>"
    assert data["loss_answer"] == pytest.approx(expected.loss_answer, abs=1e-6)
    assert data["loss_answer"] == pytest.approx(sum(r["nll"] for r in data["rows"]) / 3, abs=1e-6)
    assert data["loss_all"] == pytest.approx(expected.loss_all, abs=1e-6)
    # TRL's completion-only labels: the answer, <|im_end|> and the newline after it
    assert bundled.tokenizer.decode([i for i in data["completion_labels"] if i != -100]) == "Paris.<|im_end|>\n"
    assert data["counted_completion"] == 4 and data["loss_completion"] == expected.loss_completion
    assert data["loss_completion_model"] == pytest.approx(data["loss_completion"], abs=1e-5)
    assert data["sum_logp_completion"] == expected.sum_logp_completion


def test_sft_table_marks_the_counted_positions_and_three_losses(bundled, capsys):
    assert main(["sft", QUESTION, ANSWER, "--system", "Answer in one word."]) == 0
    out = capsys.readouterr().out
    expected = analyse_sft(bundled, QUESTION, ANSWER, system="Answer in one word.")
    assert sum(1 for line in out.splitlines() if line.endswith("  counted")) == 3
    lines = {line.rsplit(None, 1)[0]: line.rsplit(None, 1)[1] for line in out.splitlines()[-6:]}
    assert lines["answer-only loss (lmviz: the answer and its end of turn, 3 labels)"] == fmt(expected.loss_answer)
    assert lines["completion-only loss (TRL: all after the generation prompt, 4 labels)"] == \
        fmt(expected.loss_completion)
    every = f"loss over every prediction (labels = input_ids, all {expected.counted_all})"
    assert lines[every] == fmt(expected.loss_all)


def test_sft_counts_predictions_not_tokens(bundled, capsys):
    """T tokens make T - 1 predictions: the old table printed "tokens: 46" over "every token (45 tokens)", and
    called the answer and its <|im_end|> "the answer only (8 tokens)"."""
    assert main(["sft", "What is the capital of France?", "The capital of France is Paris."]) == 0
    out = capsys.readouterr().out
    expected = analyse_sft(bundled, "What is the capital of France?", "The capital of France is Paris.")
    tokens = len(expected.chat.input_ids)
    assert out.splitlines()[0].endswith(f"tokens: {tokens}   predictions: {tokens - 1}   counted (answer only): 8")
    assert expected.counted_all == tokens - 1 == 45
    assert "tokens)" not in out and "answer only (" not in out
    assert "the answer and its end of turn, 8 labels" in out and "all after the generation prompt, 9 labels" in out


def test_the_dtype_help_states_the_real_default(monkeypatch, capsys):
    from lmviz.__main__ import _parser
    from lmviz.models.settings import default_dtype

    for low_memory, default in (("", "float32"), ("1", "bfloat16")):
        monkeypatch.setenv("LMVIZ_LOW_MEMORY", low_memory)
        assert default_dtype() == default  # what load_causal_lm uses when --dtype is not given
        for command in ("clm", "next", "sft", "step", "grpo"):
            with pytest.raises(SystemExit):
                _parser().parse_args([command, "--help"])
            helped = " ".join(capsys.readouterr().out.split())
            assert "default: float32, or bfloat16 when $LMVIZ_LOW_MEMORY is set" in helped
            assert f"(here: {default})" in helped and "default float32" not in helped


@pytest.mark.parametrize("args, message", [
    (["next", ""], "nothing to continue"),
    (["next", PREFIX, "--temperature", "5"], "temperature must be a number from 0.1 to 2"),
    (["next", PREFIX, "--temperature", "nan"], "temperature must be a number from 0.1 to 2"),
    (["next", PREFIX, "--top-k", "60000"], "K must be a whole number"),
    (["sft", "", ANSWER], "user message is empty"),
    (["sft", QUESTION, "  "], "answer is empty"),
    (["sft", QUESTION, "All work and no play. " * 4600], "more than the 1,024 scored in one text"),
])
def test_bad_next_and_sft_input_gives_one_sentence_and_exit_code_2(args, message, capsys):
    assert main(args) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    assert err.strip().splitlines()[-1].startswith("lmviz: ")


def test_next_and_sft_run_as_a_module_offline():
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    done = subprocess.run([sys.executable, "-m", "lmviz", "sft", QUESTION, ANSWER, "--json"],
                          capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert data["loss_answer"] == pytest.approx(sum(r["nll"] for r in data["rows"]) / data["counted_answer"], abs=1e-6)
    done = subprocess.run([sys.executable, "-m", "lmviz", "next", "anna and ben went to the", "--json",
                           "--model", "lmviz-tiny-gpt", "--top-k", "3"], capture_output=True, text=True, env=env,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    assert [c["rank"] for c in json.loads(done.stdout)["top"]] == [1, 2, 3]


def test_sft_with_a_model_without_a_chat_template_says_so():
    done = subprocess.run([sys.executable, "-m", "lmviz", "sft", "anna went", "to the park", "--model",
                           "lmviz-tiny-gpt"], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines()[-1] == (
        "lmviz: This model's tokenizer has no chat template, so it has no chat format to fine-tune: "
        "choose a chat model such as the bundled SmolLM2-135M-Instruct.")


# --- step: the gradient with respect to the logits, and steps of SGD or AdamW -------------------------

STORY, OTHER_STORY = "anna and ben went to the park .", "ben felt happy ."
TIMINGS = ("seconds", "step_seconds")  # how long the run took: the one thing two runs need not share


@pytest.fixture(scope="module")
def tiny_gpt():
    return load_causal_lm(TINY_GPT)


def as_printed(result) -> dict:
    """``result.to_dict()`` as JSON gives it back (tuples as lists), without its timings."""
    return {key: value for key, value in json.loads(json.dumps(result.to_dict())).items() if key not in TIMINGS}


def step_json(capsys, *args) -> dict:
    assert main(["step", STORY, "--model", TINY_GPT, "--json", *args]) == 0
    return json.loads(capsys.readouterr().out)


def test_step_json_equals_the_library_on_the_tiny_gpt(tiny_gpt, capsys):
    data = step_json(capsys, "--lr", "0.003", "--steps", "3", "--other", OTHER_STORY)
    assert set(data) == {"gradient", "sgd"}
    gradient = {k: v for k, v in data["gradient"].items() if k not in TIMINGS}
    assert gradient == as_printed(logit_gradient(tiny_gpt, STORY))
    steps = {k: v for k, v in data["sgd"].items() if k not in TIMINGS}
    assert steps == as_printed(sgd_steps(tiny_gpt, STORY, 0.003, 3, OTHER_STORY))
    assert (steps["lr"], steps["steps"], len(steps["losses"])) == (0.003, 3, 4)
    # two computations of the loss before any step: the gradient's (autograd's input) and the steps' first
    assert steps["losses"][0] == pytest.approx(gradient["loss"], abs=1e-6)


def test_step_table_prints_the_gradient_the_tokens_and_the_loss_before_and_after(tiny_gpt, capsys):
    assert main(["step", STORY, "--model", TINY_GPT, "--steps", "2", "--other", OTHER_STORY]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    gradient, result = logit_gradient(tiny_gpt, STORY), sgd_steps(tiny_gpt, STORY, 1e-3, 2, OTHER_STORY)
    assert f"loss before               {fmt(result.losses[0])}" in lines
    assert f"loss after 1 step         {fmt(result.losses[1])}" in lines
    assert result.losses[1] < result.losses[0] and "raised the loss" not in out
    for step, loss in enumerate(result.losses):  # the loss per step
        assert any(line.split()[:2] == [str(step), fmt(loss)] for line in lines), step
    fields = [line.split() for line in lines if line.strip()]
    for row in gradient.rows:  # p(label), (p − 1)/N, autograd's entry, ‖row‖, row sum, gap
        want = [fmt_prob(row.prob), fmt_grad(row.label_entry), fmt_grad(row.autograd_label_entry),
                fmt_grad(row.row_norm), fmt_gap(row.autograd_row_sum), fmt_gap(row.max_difference)]
        assert any(f[0] == str(row.position) and f[3:9] == want for f in fields), row.position
    for row in result.text.rows:  # p(label) and -log p before and after the step
        want = [fmt_prob(row.prob_before), fmt_prob(row.prob_after), fmt(row.nll_before), fmt(row.nll_after)]
        assert any(f[0] == str(row.position) and f[-4:] == want for f in fields), row.position
    other = result.other
    assert (f"its loss: {fmt(other.loss_before)} before, {fmt(other.loss_after)} after 1 step, "
            f"{fmt(other.loss_last)} after 2") in lines
    assert f"loss (mean -log p)        {fmt(gradient.loss)}" in lines


@pytest.mark.parametrize("args, check", [
    (["--lr", "0"], lambda: check_learning_rate(0.0)),
    (["--lr", "-1"], lambda: check_learning_rate(-1.0)),
    (["--lr", "nan"], lambda: check_learning_rate(math.nan)),
    (["--lr", "1e9"], lambda: check_learning_rate(1e9)),
    (["--steps", "0"], lambda: check_steps(0)),
    (["--steps", "21"], lambda: check_steps(21)),
])
def test_a_bad_learning_rate_or_number_of_steps_gives_the_librarys_sentence(args, check, capsys):
    with pytest.raises(BadInput) as problem:
        check()
    assert main(["step", STORY, "--model", TINY_GPT, *args]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err == f"lmviz: {problem.value}\n"
    assert str(problem.value).count(". ") == 0 and str(problem.value).endswith(".")  # one sentence


def test_step_with_adamw_gives_its_first_step_on_the_output_matrix(tiny_gpt, capsys):
    data = step_json(capsys, "--optimizer", "adamw", "--lr", "0.01")
    expected = adamw_first_step(tiny_gpt, STORY, 0.01)
    assert set(data) == {"gradient", "adamw"}
    assert {k: v for k, v in data["adamw"].items() if k not in TIMINGS} == as_printed(expected)
    assert data["adamw"]["matrix"] == output_matrix(tiny_gpt.model)[0]
    assert main(["step", STORY, "--model", TINY_GPT, "--optimizer", "adamw", "--lr", "0.01"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert f"loss before               {fmt(expected.loss_before)}" in lines
    assert f"loss after AdamW's step   {fmt(expected.loss_after)}" in lines
    assert any(f"their |Δw| / lr: mean {fmt(expected.ratio_mean)}," in line for line in lines)
    for weight in expected.samples:
        assert [weight.token[:14], str(weight.column), fmt_gap(weight.gradient), fmt_gap(weight.sgd_update),
                fmt_gap(weight.update), fmt(weight.ratio)] in [line.split() for line in lines]


def test_step_with_adamw_says_what_eps_does_and_counts_each_band_with_its_memory_in_mib(tiny_gpt, capsys):
    """Issue 39: the table said "lr · sign(g), whatever g's size" and gave m and v's 2**20 bytes as MB."""
    expected = adamw_first_step(tiny_gpt, STORY)
    assert main(["step", STORY, "--model", TINY_GPT, "--optimizer", "adamw"]) == 0
    out = capsys.readouterr().out
    assert f"m and v take {expected.state_bytes / 2**20:,.1f} MiB" in out and " MB" not in out
    assert "whatever g's size" not in out and "only where |g| is far above eps; about lr · g / eps" in out
    for band in expected.bands:
        assert (f"|g| {band.gradient}: {band.weights:,} weights ({band.weights / expected.weights:.1%}), step "
                f"{band.step}, mean |Δw| / lr {fmt(band.ratio_mean)}") in out.splitlines()


@pytest.mark.parametrize("args", [["--steps", "3"], ["--other", OTHER_STORY]])
def test_adamw_takes_one_step_and_scores_no_other_text(args, capsys):
    assert main(["step", STORY, "--model", TINY_GPT, "--optimizer", "adamw", *args]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and err.startswith("lmviz: ") and "--optimizer sgd" in err


def test_step_with_clipping_and_a_schedule_equals_the_library_and_prints_them(tiny_gpt, capsys):
    data = step_json(capsys, "--lr", "0.1", "--steps", "3", "--max-norm", "0.5", "--warmup", "1")
    steps = {k: v for k, v in data["sgd"].items() if k not in TIMINGS}
    assert steps == as_printed(sgd_steps(tiny_gpt, STORY, 0.1, 3, max_norm=0.5, warmup=1))
    assert steps["rates"][0] == 0 and steps["max_norm"] == 0.5 and len(steps["clip_factors"]) == 3
    assert main(["step", STORY, "--model", TINY_GPT, "--lr", "0.1", "--steps", "3", "--max-norm", "0.5",
                 "--warmup", "1"]) == 0
    out = capsys.readouterr().out
    assert "rates, 1 warm-up steps then a cosine to 0: " + " ".join(f"{r:.3g}" for r in steps["rates"]) in out
    assert "gradient clipped at ‖g‖ = 0.5, each step's factor: " in out


@pytest.mark.parametrize("args, words", [(["--max-norm", "0"], "above 0"), (["--warmup", "3", "--steps", "3"],
                                                                             "fewer than the 3 steps"),
                                         (["--optimizer", "adamw", "--max-norm", "1"], "--optimizer sgd")])
def test_a_bad_clip_or_warmup_gives_one_sentence(args, words, capsys):
    assert main(["step", STORY, "--model", TINY_GPT, *args]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and words in err


def test_next_with_label_smoothing_and_a_z_loss_is_pytorchs(bundled, capsys):
    assert main(["next", PREFIX, "--json", "--true-next", "Paris", "--label-smoothing", "0.1", "--z-loss",
                 "1e-4"]) == 0
    data = json.loads(capsys.readouterr().out)
    logits = next_token_logits(bundled, PREFIX).logits.double().unsqueeze(0)
    label = torch.tensor([data["true_next"]["token_id"]])
    smoothed = torch.nn.functional.cross_entropy(logits, label, label_smoothing=0.1).item()
    z = 1e-4 * torch.logsumexp(logits, -1).item() ** 2
    assert data["loss_options"]["cross_entropy"] == pytest.approx(smoothed, abs=1e-9)
    assert data["loss_options"]["total"] == pytest.approx(smoothed + z, abs=1e-9)
    assert main(["next", PREFIX, "--true-next", "Paris", "--soft-cap", "-1"]) == 2
    assert "A soft-cap must be a number above 0" in capsys.readouterr().err


def test_the_docs_step_example_is_what_the_command_prints(capsys):
    """docs/reference/cli.md shows the end of the tiny GPT's table: those lines, as this command prints them."""
    docs = (Path(__file__).resolve().parent.parent / "docs" / "reference" / "cli.md").read_text()
    section = docs[docs.index("## step:"):docs.index("## prepare:")]
    command = "python -m lmviz step \"anna and ben went to the park .\" --model lmviz-tiny-gpt --steps 3 --device cpu"
    assert f"{command}\n" in section
    shown = re.search(r"```text\n(.*?)```", section, re.S).group(1).splitlines()
    assert main(shlex.split(command)[3:]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert printed[-len(shown):] == shown


# --- grpo: a group of answers, their advantages, and one step on the GRPO loss ---------------------------

ARITHMETIC = "What is 7 + 5? Reply with just the number."
# 3 answers of 4 tokens: on the bundled model, seed 0, the first of them ('The most simple answer') says "answer"
SMALL = ["--group", "3", "--max-new-tokens", "4", "--reward", "word:answer"]
# every option away from its default, so that each is seen to reach the library
OPTIONS = {"--scale": "population std", "--lr": "0.002", "--loss-type": "luspo", "--level": "sequence",
           "--epsilon": "0.1", "--epsilon-high": "0.28", "--beta": "0.1", "--updates": "2"}


@pytest.fixture(scope="module")
def small_group(bundled):
    """The library's own group, rewards and advantages for SMALL."""
    group = sample_group(bundled, ARITHMETIC, 3, seed=0, temperature=1.0, max_new_tokens=4)
    scores = rewards(group, contains_word("answer"))
    assert len(set(scores)) == 2, scores  # some right, some wrong: a group that teaches something
    return group, scores, {how: advantages(scores, how) for how in SCALINGS}


def grpo_out(capsys, *args) -> str:
    assert main(["grpo", ARITHMETIC, *args]) == 0
    return capsys.readouterr().out


def test_grpo_json_equals_the_library_with_every_option_set(bundled, small_group, capsys):
    group, scores, scaled = small_group
    data = json.loads(grpo_out(capsys, *SMALL, "--json", *(word for pair in OPTIONS.items() for word in pair),
                               "--no-kl-ratio"))
    step = grpo_step(bundled, group, scaled[POPULATION_STD].advantages, lr=0.002, loss_type="luspo", level="sequence",
                     epsilon_low=0.1, epsilon_high=0.28, beta=0.1, updates=2, kl_bias_correction=False)
    assert set(data) == {"group", "reward_rule", "rewards", "advantages", "scale", "step"}
    assert {k: v for k, v in data["group"].items() if k not in TIMINGS} == as_printed(group)
    assert data["reward_rule"] == {"name": "contains_word('answer')",
                                   "description": "1 if the answer contains the word 'answer', else 0"}
    assert data["rewards"] == scores and data["scale"] == "population std"
    assert data["advantages"] == {how: as_printed(a) for how, a in scaled.items()}
    assert {k: v for k, v in data["step"].items() if k not in TIMINGS} == as_printed(step)
    assert (data["step"]["lr"], data["step"]["loss_type"], data["step"]["level"], data["step"]["epsilon_low"],
            data["step"]["epsilon_high"], data["step"]["beta"]) == (0.002, "luspo", "sequence", 0.1, 0.28, 0.1)
    assert len(data["step"]["updates"]) == 2 and data["step"]["kl_bias_correction"] is False
    # π_old, the first update's own log π, is what the answers were drawn with
    for logps, answer in zip(data["step"]["answer_logps_before"], data["group"]["answers"]):
        assert logps == pytest.approx(math.fsum(answer["logp_old"]), abs=1e-3)


def test_grpo_table_shows_the_group_the_advantages_and_the_step(bundled, small_group, capsys):
    group, scores, scaled = small_group
    out = grpo_out(capsys, *SMALL)
    # the defaults: sample std, TRL's loss type and KL weighting and its one update, 0.001, ...
    step = grpo_step(bundled, group, scaled[SAMPLE_STD].advantages, kl_bias_correction=TRL.use_bias_correction_kl)
    lines = out.splitlines()
    fields = [line.split() for line in lines]
    assert lines[0].startswith(f"model: SmolLM2-135M-Instruct   device: cpu   prompt: {ARITHMETIC!r} "
                               f"({len(group.prompt_ids)} tokens with the chat template)")
    assert "reward rule contains_word('answer'): 1 if the answer contains the word 'answer', else 0" in lines
    for i, (answer, reward) in enumerate(zip(group.answers, scores)):
        row = next(line for line in lines if line.endswith(f"  {answer.text!r}"))
        assert row.split()[:4] == [str(i + 1), str(len(answer.ids)), "finished" if answer.finished else "cut",
                                   f"{reward:.0f}"]
    # the arithmetic, against Python's statistics module
    mean, squares = statistics.fmean(scores), math.fsum((r - statistics.fmean(scores)) ** 2 for r in scores)
    population, sample = statistics.pstdev(scores), statistics.stdev(scores)
    assert f"advantages: mean = (1 + 0 + 0) / 3 = {fmt(mean)}; Σ (R − mean)² = {fmt(squares)}" in lines
    assert (f"  population std = √({fmt(squares)} / 3) = {fmt(population)}; sample std = √({fmt(squares)} / 2) = "
            f"{fmt(sample)}") in lines
    for i, r in enumerate(scores):
        want = [str(i + 1), f"{r:.0f}", *(fmt_signed(x) for x in (r - mean, r - mean, (r - mean) / population,
                                                                  (r - mean) / sample))]
        assert want in fields, i
    assert "the step uses the advantages scaled by: sample std" in lines and "teaches nothing" not in out
    for kind in LOSS_TYPES:  # the loss before the step, each way
        assert [kind, fmt(step.before.losses[kind].loss)] + (["(the", "step's)"] if kind == TRL.loss_type else []) \
            in fields
    after, kind = step.after, TRL.loss_type
    assert (f"after the last update: {after.clipped_count} of {after.clip_total} tokens clipped (clip fraction "
            f"{fmt(after.clip_fraction)}), mean KL to the reference {fmt(after.mean_kl)}, {kind} loss "
            f"{fmt(step.before.losses[kind].loss)} → {fmt(after.losses[kind].loss)}") in lines
    assert after.clipped_count > 0 and after.mean_kl > 0  # the step moved the ratios
    for i, (a, old, new) in enumerate(zip(step.advantages, step.answer_logps_before, step.answer_logps_after)):
        assert [str(i + 1), fmt_signed(a), fmt(old), fmt(new), fmt_signed(new - old)] in fields, i
    assert any(f"‖g‖ = {fmt_norm(step.grad_norm)}, " in line for line in lines)
    # docs/reference/cli.md shows this command's group and advantages: those lines, as it prints them
    docs = (Path(__file__).resolve().parent.parent / "docs" / "reference" / "cli.md").read_text()
    section = docs[docs.index("## grpo:"):docs.index("## prepare:")]
    assert f'python -m lmviz grpo "{ARITHMETIC}" {shlex.join(SMALL)}\n' in section
    shown = re.search(r"```text\n(.*?)```", section, re.S).group(1).splitlines()
    start = lines.index(shown[0])
    assert lines[start:start + len(shown)] == shown


def test_grpo_shows_clip_higher_cispo_and_the_overlong_penalty_at_update_2(bundled, small_group, capsys):
    """Two updates at a rate that moves the ratios: the lines are the library's, counted here from the ratios."""
    group, scores, scaled = small_group
    lines = grpo_out(capsys, *SMALL, "--updates", "2", "--lr", "0.01", "--overlong-cache", "2").splitlines()
    step = grpo_step(bundled, group, scaled[SAMPLE_STD].advantages, lr=0.01, updates=2,
                     kl_bias_correction=TRL.use_bias_correction_kl)
    second = step.updates[1].start
    between = sum(t.advantage > 0 and 1.2 < t.ratio <= 1.28 for answer in second.tokens for t in answer)
    assert (f"  at update 2, clip-higher with ε_high = 0.28 above ε_low = 0.2 would release {between} token(s) with "
            "A > 0 that the symmetric clip holds") in lines
    held = sum(t.takes_clipped for answer in second.tokens for t in answer)
    assert held > 0  # lr 0.01 moves the ratios past the clip: CISPO has tokens to push
    assert any(line.startswith(f"  at update 2, CISPO (ε_max = 5): PPO's clip holds {held} of {second.token_count} "
                               f"tokens (gradient 0); CISPO pushes {held} of them") for line in lines)
    table = lines[lines.index("DAPO's soft overlong penalty, L_max = 4, L_cache = 2 (shown, not used by the step):")
                  + 2:]
    for row, answer, reward in zip(table, group.answers, scores):
        n = len(answer.ids)
        penalty = 0.0 if n <= 2 else (2 - n) / 2  # DAPO's eq. 13 with L_max 4, L_cache 2 (no answer passes 4)
        assert row.split()[1:4] == [str(n), fmt_signed(penalty), fmt_signed(reward + penalty)]

def test_grpo_warns_when_every_reward_is_equal(bundled, capsys):
    group = sample_group(bundled, ARITHMETIC, 2, seed=0, temperature=1.0, max_new_tokens=2)
    scores = rewards(group, contains_number(12))  # two tokens are too few to reach "12"
    assert advantages(scores).teaches_nothing and scores == [0.0, 0.0]
    lines = grpo_out(capsys, "--group", "2", "--max-new-tokens", "2").splitlines()  # the default rule: number:12
    assert "reward rule contains_number(12): 1 if the answer contains the number 12, else 0" in lines
    assert ("every answer has the reward 0: every R − mean is 0, so every advantage is 0 and so is the gradient of "
            "the clipped terms. This group teaches nothing; try another seed, a larger group, a higher temperature "
            "or another rule.") in lines


def test_grpo_with_a_model_without_a_chat_template_says_so(tiny_gpt, capsys):
    with pytest.raises(NoChatTemplate) as problem:
        prompt_ids(tiny_gpt.tokenizer, ARITHMETIC)
    assert main(["grpo", ARITHMETIC, "--model", TINY_GPT]) == 2
    out, err = capsys.readouterr()
    assert out == "" and "Traceback" not in err and err.count("lmviz: ") == 1
    assert err.strip().splitlines()[-1] == f"lmviz: {problem.value}"


@pytest.mark.parametrize("args, check", [
    (["--group", "1"], lambda loaded: sample_group(loaded, ARITHMETIC, size=1)),
    (["--group", "17"], lambda loaded: sample_group(loaded, ARITHMETIC, size=17)),
    (["--temperature", "0"], lambda loaded: sample_group(loaded, ARITHMETIC, temperature=0.0)),
    (["--max-new-tokens", "65"], lambda loaded: sample_group(loaded, ARITHMETIC, max_new_tokens=65)),
    (["--seed", "-1"], lambda loaded: sample_group(loaded, ARITHMETIC, seed=-1)),
    (["--lr", "0"], lambda loaded: check_learning_rate(0.0)),
    (["--epsilon", "1"], lambda loaded: group_loss([[0.0]], [[0.0]], [0.0], epsilon_low=1.0)),
    (["--epsilon-high", "-0.1"], lambda loaded: group_loss([[0.0]], [[0.0]], [0.0], epsilon_high=-0.1)),
    (["--beta", "-1"], lambda loaded: group_loss([[0.0]], [[0.0]], [0.0], beta=-1.0)),
    (["--reward", "number:twelve"], lambda loaded: contains_number("twelve")),
    (["--reward", "word:two words"], lambda loaded: contains_word("two words")),
    (["--reward", "tokens:0"], lambda loaded: at_most_tokens("0")),
    (["--overlong-cache", "13"], lambda loaded: overlong_penalty([], 12, 13)),
])
def test_a_bad_grpo_option_gives_the_librarys_sentence_before_the_model_loads(bundled, args, check, monkeypatch,
                                                                              capsys):
    with pytest.raises(BadInput) as problem:
        check(bundled)
    monkeypatch.setattr("lmviz.__main__.load_causal_lm", lambda *a, **k: pytest.fail("the model was loaded"))
    assert main(["grpo", ARITHMETIC, *args]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err == f"lmviz: {problem.value}\n"
    assert str(problem.value).count(". ") == 0 and str(problem.value).endswith(".")  # one sentence


@pytest.mark.parametrize("args, message", [
    (["--reward", "nonsense"], "The reward is number:N (the answer contains the number N), word:W (it contains the "
                               "word W) or tokens:N (it is at most N tokens long), for example number:12; got "
                               "'nonsense'."),
    (["--reward", "length:5"], "got 'length:5'."),
    (["--loss-type", "ppo"], "invalid choice: 'ppo'"),
    (["--group", "eight"], "invalid int value: 'eight'"),
])
def test_a_grpo_option_it_cannot_read_is_one_sentence(args, message, monkeypatch, capsys):
    monkeypatch.setattr("lmviz.__main__.load_causal_lm", lambda *a, **k: pytest.fail("the model was loaded"))
    try:
        code = main(["grpo", ARITHMETIC, *args])
    except SystemExit as exit_:  # argparse rejects the option itself
        code = exit_.code
    out, err = capsys.readouterr()
    assert code == 2 and out == "" and message in err and "Traceback" not in err
    assert err.strip().splitlines()[-1].startswith(("lmviz: ", "python -m lmviz grpo: error: "))


def test_live_sweep_closes_a_forgotten_room_deletes_its_sentences_and_says_so(tmp_path, monkeypatch, capsys):
    url = f"sqlite:///{tmp_path / 'live.sqlite3'}"
    monkeypatch.setenv("LMVIZ_LIVE_DB", url)
    monkeypatch.delenv("LMVIZ_LIVE_KEEP_HOURS", raising=False)
    then = time.time() - IDLE_HOURS * 3600 - 60  # the teacher forgot to end it
    with Store(url) as store:
        fresh = store.open_room()  # first: opening a room sweeps too, and this test is of the command's sweep
        code = store.open_room(now=then)
        for n in range(2):
            store.add_sentence(code, store.join(code, now=then), f"Sentence {n}.", 1.0, now=then + 40 * n)
    assert main(["live", "sweep"]) == 0
    assert capsys.readouterr().out.strip() == (
        f"Swept the live class's database: 1 room idle for {IDLE_HOURS:g} hours closed and 2 sentences of theirs "
        "deleted; 0 rooms closed more than 24 hours ago deleted, with their questions and answers.")
    with Store(url) as store:
        assert not store.room(code).is_open and store.sentences(code, approved_only=False) == []
        assert store.room(fresh).is_open
    monkeypatch.setenv("LMVIZ_LIVE_KEEP_HOURS", "soon")
    assert main(["live", "sweep"]) == 2
    refusal = capsys.readouterr().err.strip().removeprefix("lmviz: ")
    assert "LMVIZ_LIVE_KEEP_HOURS" in refusal and one_sentence(refusal)
