"""lmviz.lessons.gradient_step against references computed here: autograd on the model's own logits,
torch.optim.SGD and torch.optim.AdamW on independent deep copies; and the shared model untouched."""

import copy
import inspect
import math
import re
import threading
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from transformers import GPT2Config, GPT2LMHeadModel

from lmviz.core.numbers import NORM_DIGITS, fmt
from lmviz.course.glossary import TERMS
from lmviz.errors import BadInput, LearnerError, NothingToScore, OtherTextUnusable
from lmviz.lessons.causal_lm import analyse_clm
from lmviz.lessons.gradient_step import (
    ADAM_BETAS,
    ADAM_EPS,
    MAX_STEPS,
    SIGN_LIKE,
    SQUARES_CHUNK,
    STEP_BANDS,
    adamw_first_step,
    cosine_rates,
    logit_gradient,
    output_matrix,
    private_copy,
    sgd_steps,
    squared_norm,
)
from lmviz.models.loading import TINY_GPT, LoadedModel, load_causal_lm
from tests.helpers import TINY_VOCAB, one_sentence

PARIS, BERLIN = "The capital of France is Paris.", "The capital of France is Berlin."
ONCE = "Once upon a time, a little girl lived in a small village near the dark forest."
STORY, OTHER_STORY = "anna and ben went to the park. they saw a big red ball.", "the dog ran to the tree."


@pytest.fixture(scope="module")
def tiny():
    return load_causal_lm(TINY_GPT)


TEXTS = {"tiny": STORY, "bundled": PARIS}  # lmviz's tiny GPT on one of its stories, SmolLM2 on the sentence


def ids_of(loaded, text: str) -> torch.Tensor:
    return torch.tensor(loaded.tokenizer(text, add_special_tokens=False)["input_ids"])


def logits_of(model, ids: torch.Tensor) -> torch.Tensor:
    return model(input_ids=ids[None]).logits[0]


def mean_loss(model, ids: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits_of(model, ids)[:-1], ids[1:])


def snapshot(model) -> dict:
    """Every tensor of the model, copied, with the Parameter objects and their flags."""
    return {"tensors": {name: t.clone() for name, t in model.state_dict().items()},
            "objects": [(name, p, p.requires_grad) for name, p in model.named_parameters()]}


def assert_untouched(model, before: dict) -> None:
    after = model.state_dict()
    assert after.keys() == before["tensors"].keys()
    assert all(torch.equal(after[name], t) for name, t in before["tensors"].items())  # bitwise, every weight
    assert [(name, p, p.requires_grad) for name, p in model.named_parameters()] == before["objects"]
    assert all(p.grad is None for p in model.parameters())


# --- the private module ---------------------------------------------------------------------------------

def test_a_private_copy_shares_the_storage_but_not_the_parameters(bundled):
    shared = bundled.model
    private = private_copy(shared, trainable=lambda name: name == "model.norm.weight")
    pairs = list(zip(shared.named_parameters(), private.named_parameters(), strict=True))
    assert all(a == b for (a, _), (b, _) in pairs)
    assert all(p is not q and p.data_ptr() == q.data_ptr() for (_, p), (_, q) in pairs)  # no weight copied
    assert private.get_output_embeddings().weight is private.get_input_embeddings().weight  # still tied
    assert [name for name, q in private.named_parameters() if q.requires_grad] == ["model.norm.weight"]
    assert all(a is b for a, b in zip(shared.buffers(), private.buffers(), strict=True))
    assert not private.training


# --- 1. the gradient with respect to the logits ---------------------------------------------------------

@pytest.mark.parametrize("model", TEXTS)
def test_the_formula_is_autograds_gradient(request, model):
    loaded, text = request.getfixturevalue(model), TEXTS[model]
    before = snapshot(loaded.model)
    result = logit_gradient(loaded, text, top=3)
    ids = ids_of(loaded, text)
    with torch.no_grad():
        logits = logits_of(loaded.model, ids).requires_grad_(True)  # (T, V), the reference's own forward pass
    loss = F.cross_entropy(logits[:-1], ids[1:])
    (grad,) = torch.autograd.grad(loss, logits)
    count = len(ids) - 1
    exact = (torch.softmax(logits.detach()[:-1].double(), -1) - F.one_hot(ids[1:], logits.shape[-1])) / count

    assert result.input_ids == ids.tolist() and result.count == count == len(result.rows)
    assert result.loss == pytest.approx(loss.item(), abs=1e-6)
    assert result.loss == pytest.approx(analyse_clm(loaded, text).loss, abs=1e-6)  # float32 means of the same nll
    # Both float32 gradients are softmax(z) − one-hot over N, computed from the same logits; an entry is at
    # most 1/N, so float32 rounding (6e-8 relative) keeps them within 1e-7 of each other
    assert result.max_difference <= 1e-7
    assert result.exact_difference == pytest.approx((exact - grad[:-1].double()).abs().max().item(), rel=1e-6)
    for row in result.rows:
        t = row.position
        label = ids[t + 1].item()
        g = grad[t]
        assert row.target_id == label and row.target_token == result.tokens[t + 1]
        assert row.autograd_label_entry == g[label].item()
        assert row.label_entry == pytest.approx(g[label].item(), abs=1e-7)
        assert row.label_entry < 0
        assert row.label_entry == pytest.approx((row.prob - 1) / count, abs=1e-6)
        assert row.prob == pytest.approx(math.exp(-F.cross_entropy(logits[t], ids[t + 1]).item()), rel=1e-6)
        others = g.detach().clone()
        others[label] = -math.inf
        largest = others.topk(3)
        assert [i for _, i, _ in row.others] == largest.indices.tolist()
        assert [v for _, _, v in row.others] == pytest.approx(largest.values.tolist(), abs=1e-7)
        p = torch.softmax(logits[t].detach().double(), -1)[largest.indices]
        # p / N up to float32's rounding of the softmax (exact_difference: 1.4e-6 on SmolLM2)
        assert [v for _, _, v in row.others] == pytest.approx((p / count).tolist(), abs=1e-5)
        assert row.autograd_row_sum == pytest.approx(g.double().sum().item(), abs=1e-12)
        # the sum of V float32 probabilities is 1 up to the rounding of V terms (observed 2e-6 on SmolLM2's 49 152)
        assert abs(row.row_sum) < 1e-5 and abs(row.autograd_row_sum) < 1e-5
        # ‖row‖ is the exact row's (float64 softmax of the float32 logits); autograd's float32 softmax over V entries
        # is off from it by up to 2.4e-5 relative on SmolLM2's, and by a few of float32's steps in p (6e-8 below 1)
        # where p is near 1: 3.7 of them, observed on the tiny GPT
        assert row.row_norm == pytest.approx(torch.linalg.vector_norm(g, dtype=torch.float64).item(), rel=1e-4,
                                             abs=3e-7 / count)
        # ‖row‖ = √((1 − p)² + Σ_others p_v²) / N, and so between (1 − p)/N and √2 · (1 − p)/N (section 2). Where
        # p is near 1, float32's p has an absolute error of ~6e-8, and so has 1 − p: hence abs=1e-7 (observed 9e-10)
        p_all = torch.softmax(logits[t].detach().double(), -1)
        p_label, others_squared = p_all[label].item(), (p_all.square().sum() - p_all[label] ** 2).item()
        exact = math.sqrt((1 - p_label) ** 2 + others_squared) / count
        assert row.row_norm == pytest.approx(exact, rel=1e-5, abs=1e-7)
        low = (1 - row.prob) / count
        assert low - 1e-7 <= row.row_norm <= math.sqrt(2) * low + 1e-7
    assert result.last_row_max == 0.0 and torch.count_nonzero(grad[-1]) == 0  # exactly: no loss term reads it
    assert result.last_position == count and result.last_token == result.tokens[-1]
    assert_untouched(loaded.model, before)


def test_the_longest_row_need_not_be_the_most_surprising_labels(bundled):
    """Issue 39: the page named the longest row's label "the most surprising". A row's length depends on how the
    wrong probability is spread: on this sentence "␣lived" (-log p 5.34, 0.91 of the rest on "␣named") has a longer
    row than "␣upon" (-log p 10.16, its wrong probability spread over more tokens)."""
    result = logit_gradient(bundled, ONCE, top=1)
    longest, surprising = max(result.rows, key=lambda r: r.row_norm), max(result.rows, key=lambda r: r.nll)
    assert (longest.target_token, surprising.target_token) == ("␣lived", "␣upon")
    assert longest.nll < surprising.nll and longest.row_norm > surprising.row_norm
    # the spread: Σ_others p_v² / (1 − p)², the concentration, is larger where the row is longer
    n = result.count

    def concentration(row):
        return ((row.row_norm * n) ** 2 - (1 - row.prob) ** 2) / (1 - row.prob) ** 2
    assert concentration(longest) > concentration(surprising)


def test_the_gradient_is_of_the_text_as_the_other_pages_tokenize_it(tiny):
    result = logit_gradient(tiny, "anna and ben", add_bos=True, top=2)
    scored = analyse_clm(tiny, "anna and ben", add_bos=True)
    assert result.bos_added and result.input_ids == scored.input_ids and result.tokens == scored.tokens
    assert [row.nll for row in result.rows] == pytest.approx([row.nll for row in scored.rows], abs=1e-6)
    assert all(len(row.others) == 2 for row in result.rows)
    cut = logit_gradient(tiny, STORY, max_tokens=5)
    assert cut.count == 4 and cut.truncated_from == len(ids_of(tiny, STORY))


# --- 2. SGD ---------------------------------------------------------------------------------------------

def reference_sgd(loaded, text: str, lr: float, steps: int, other: str):
    """torch.optim.SGD on a deep copy of the whole model: losses before and after each step, the gradient
    norms (every weight's gradient in one float64 vector), the per-token -log p of both texts before and after
    the first step, and the names of the parameters the first step left bitwise unchanged."""
    model = copy.deepcopy(loaded.model).requires_grad_(True)
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    ids, other_ids = ids_of(loaded, text), ids_of(loaded, other)

    def nll(which):
        with torch.no_grad():
            return F.cross_entropy(logits_of(model, which)[:-1], which[1:], reduction="none")

    record = {"nll": [nll(ids)], "other": [nll(other_ids)], "losses": [], "norms": []}
    for step in range(steps):
        optimizer.zero_grad()
        loss = mean_loss(model, ids)
        loss.backward()
        record["losses"].append(loss.item())
        every_gradient = torch.cat([p.grad.reshape(-1) for p in model.parameters()]).double()
        record["norms"].append(every_gradient.square().sum().sqrt().item())
        optimizer.step()
        if step == 0:
            shared = dict(loaded.model.named_parameters())
            record["unchanged"] = [name for name, p in model.named_parameters() if torch.equal(p, shared[name])]
        record["nll"].append(nll(ids))
        record["other"].append(nll(other_ids))
    record["losses"].append(record["nll"][-1].mean().item())
    return record


@pytest.mark.parametrize("lr", [1e-3, 0.1])
def test_sgd_steps_are_torch_optim_sgd_on_a_copy(tiny, lr):
    before = snapshot(tiny.model)
    seen = []
    result = sgd_steps(tiny, STORY, lr, steps=3, other_text=OTHER_STORY, progress=lambda f, words: seen.append(f))
    reference = reference_sgd(tiny, STORY, lr, 3, OTHER_STORY)
    # Each weight is w − lr·g from the same float32 forward and backward pass, as torch.optim.SGD's
    # param.add_(g, alpha=-lr): the same arithmetic (observed: identical to the last bit). 1e-5 relative
    # leaves room only for a math library that splits a sum differently from one call to the next, and is
    # far below what a step changes (here 5% of the loss or more)
    assert result.losses == pytest.approx(reference["losses"], rel=1e-5)
    # the same float32 gradients (see above), their squares summed in float64 both ways
    assert result.grad_norms == pytest.approx(reference["norms"], rel=1e-9)
    assert result.loss_rose == (reference["losses"][1] > reference["losses"][0])
    assert result.weights == sum(p.numel() for p in tiny.model.parameters())
    for change, scored in ((result.text, reference["nll"]), (result.other, reference["other"])):
        nll_before, nll_after, nll_last = scored[0], scored[1], scored[-1]
        assert [r.nll_before for r in change.rows] == pytest.approx(nll_before.tolist(), rel=1e-5)
        assert [r.nll_after for r in change.rows] == pytest.approx(nll_after.tolist(), rel=1e-5)
        assert [r.prob_after for r in change.rows] == pytest.approx(torch.exp(-nll_after).tolist(), rel=1e-5)
        assert [r.prob_last for r in change.rows] == pytest.approx(torch.exp(-nll_last).tolist(), rel=1e-5)
        assert (change.loss_before, change.loss_after, change.loss_last) == pytest.approx(
            (nll_before.mean().item(), nll_after.mean().item(), nll_last.mean().item()), rel=1e-5)
    assert result.other.loss_before == pytest.approx(analyse_clm(tiny, OTHER_STORY).loss, abs=1e-6)
    assert seen == pytest.approx([1 / 3, 2 / 3, 1])
    assert len(result.step_seconds) == 3 and result.seconds >= sum(result.step_seconds)
    assert_untouched(tiny.model, before)


def test_one_sgd_step_on_smollm2_is_torch_optim_sgd_on_a_copy(bundled):
    before = snapshot(bundled.model)
    result = sgd_steps(bundled, PARIS, 1e-3, other_text=BERLIN)
    reference = reference_sgd(bundled, PARIS, 1e-3, 1, BERLIN)
    assert result.losses == pytest.approx(reference["losses"], rel=1e-5)  # as on the tiny GPT, above
    # ‖g‖ summed in float64: a float32 norm of the same gradient is 31.36349, off by 3.6e-5 relative
    assert result.grad_norms == pytest.approx(reference["norms"], rel=1e-9)
    assert reference["unchanged"] == []  # "it changed weights in every layer" (section 4): every tensor moved
    assert result.losses[1] < result.losses[0] and not result.loss_rose
    assert [r.nll_after for r in result.other.rows] == pytest.approx(reference["other"][1].tolist(), rel=1e-5)
    assert [r.prob_last for r in result.text.rows] == [r.prob_after for r in result.text.rows]  # one step: the same
    assert_untouched(bundled.model, before)


def reference_trainer_steps(loaded, text: str, lr: float, steps: int, max_norm: float | None, warmup: int | None):
    """torch.optim.SGD with torch.nn.utils.clip_grad_norm_ and transformers' cosine schedule with warm-up, on a deep
    copy: the losses before and after each step, each step's rate, and clip_grad_norm_'s total norm."""
    from transformers import get_cosine_schedule_with_warmup

    model = copy.deepcopy(loaded.model).requires_grad_(True)
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    schedule = get_cosine_schedule_with_warmup(optimizer, warmup or 0, steps) if warmup is not None else None
    ids = ids_of(loaded, text)
    record = {"losses": [], "rates": [], "norms": []}
    for _ in range(steps):
        optimizer.zero_grad()
        loss = mean_loss(model, ids)
        loss.backward()
        record["losses"].append(loss.item())
        if max_norm is not None:
            record["norms"].append(torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm).item())
        record["rates"].append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        if schedule is not None:
            schedule.step()
    with torch.no_grad():
        record["losses"].append(mean_loss(model, ids).item())
    return record


def test_the_trainers_defaults_the_page_states_are_the_installed_transformers():
    """The clipping norm, and (issue 49) the optimizer, its weight decay and the schedule: linear, no warm-up."""
    from transformers import TrainingArguments

    from lmviz.lessons.gradient_step import (
        TRAINER_FUSED_FROM_TORCH,
        TRAINER_MAX_GRAD_NORM,
        TRAINER_OPTIMIZER,
        TRAINER_SCHEDULE,
        TRAINER_WARMUP_STEPS,
        TRAINER_WEIGHT_DECAY,
    )

    fields = TrainingArguments.__dataclass_fields__
    assert fields["max_grad_norm"].default == TRAINER_MAX_GRAD_NORM
    assert fields["optim"].default == TRAINER_OPTIMIZER and fields["weight_decay"].default == TRAINER_WEIGHT_DECAY
    # the fused default holds from torch 2.8 (training_args.py), and this torch is one
    import transformers.training_args as training_args

    assert "if is_torch_greater_or_equal_than_2_8:" in inspect.getsource(training_args)
    from packaging.version import Version

    assert Version(torch.__version__).release >= Version(TRAINER_FUSED_FROM_TORCH).release
    assert (fields["lr_scheduler_type"].default, fields["warmup_steps"].default) == (TRAINER_SCHEDULE,
                                                                                     TRAINER_WARMUP_STEPS)
    assert "warmup_ratio" not in fields  # transformers 5 folded it into warmup_steps (a float below 1 is a ratio)
    assert (f'`lr_scheduler_type="{TRAINER_SCHEDULE}"` with `warmup_steps={TRAINER_WARMUP_STEPS}`, a rate that falls '
            "in a straight line from $\\eta$ at the first step towards 0 after the last") in DOCS
    assert f'AdamW (`optim="{TRAINER_OPTIMIZER}"`, `torch.optim.AdamW` with `fused=True`, from torch' in DOCS


def test_the_linear_schedule_the_docs_describe_is_transformers():
    """Rate lr at the first step, falling in a straight line, towards 0 after the last (lr / S at the last)."""
    from transformers import get_linear_schedule_with_warmup

    optimizer = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=1e-3)
    schedule, rates = get_linear_schedule_with_warmup(optimizer, 0, 4), []
    for _ in range(4):
        rates.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        schedule.step()
    assert rates == pytest.approx([1e-3, 7.5e-4, 5e-4, 2.5e-4]) and optimizer.param_groups[0]["lr"] == 0


def test_clipping_shrinks_adamws_first_step_far_less_than_the_gradient(bundled):
    """Issue 49: the docs' "multiplies it by about 0.032" is not a step 31 times smaller with AdamW, the Trainer's
    optimizer. Clipping by k is AdamW with eps / k at the first step; on the default sentence, torch.optim.AdamW's
    first step on the tied embedding, with the gradient as it is and clipped as clip_grad_norm_ clips it."""
    from lmviz.lessons.gradient_step import TRAINER_MAX_GRAD_NORM, TRAINER_WEIGHT_DECAY

    # the identity, on gradients from 1e-12 to 1: lr · k·g / (k·|g| + eps) = lr · g / (|g| + eps / k)
    k, lr = 0.03, 1e-3
    grad = torch.logspace(-12, 0, 97, dtype=torch.float64)
    steps = []
    for scale, eps in ((k, ADAM_EPS), (1.0, ADAM_EPS / k)):
        weight = torch.zeros_like(grad, requires_grad=True)
        weight.grad = grad * scale
        torch.optim.AdamW([weight], lr=lr, eps=eps, weight_decay=0.0).step()
        steps.append(weight.detach().clone())
    assert torch.allclose(*steps, rtol=1e-12, atol=0)
    # the default sentence: the whole model's gradient, its norm as clip_grad_norm_ takes it (float32) and as lmviz does
    model, ids = copy.deepcopy(bundled.model).requires_grad_(True), ids_of(bundled, PARIS)
    mean_loss(model, ids).backward()
    torch_norm = torch.nn.utils.get_total_norm([p.grad for p in model.parameters()]).item()
    lmviz_norm = sgd_steps(bundled, PARIS, 1e-3).grad_norms[0]
    # "they agree to the 4 significant digits shown and differ in the fifth": the page's help says it can
    assert f"{torch_norm:.{NORM_DIGITS}g}" == f"{lmviz_norm:.{NORM_DIGITS}g}" and NORM_DIGITS == 4
    assert f"{torch_norm:.5g}" != f"{lmviz_norm:.5g}"
    assert ("sums in float32, and on the default sentence the two agree to the 4 significant digits shown and differ "
            "in the fifth") in DOCS
    factor = min(1.0, TRAINER_MAX_GRAD_NORM / (torch_norm + 1e-6))  # clip_grad_norm_'s
    matrix = model.get_output_embeddings().weight
    moved = []
    for scale in (1.0, factor):
        weight = torch.nn.Parameter(matrix.detach().clone())
        weight.grad = matrix.grad * scale
        torch.optim.AdamW([weight], lr=1e-3, weight_decay=TRAINER_WEIGHT_DECAY).step()
        moved.append(((weight.detach() - matrix.detach()).abs() / 1e-3).double().mean().item())
    plain, clipped = moved
    assert (f"SmolLM2's gradient on the default sentence is about {torch_norm:.0f} long, so transformers' default "
            f"`max_grad_norm` of {TRAINER_MAX_GRAD_NORM:.1f} multiplies it by about {factor:.3f}") in DOCS
    assert (f"moves its weights by |Δw| / lr = {plain:.3f} on average unclipped and {clipped:.3f} clipped: "
            f"{plain / clipped:.1f} times less, not {1 / factor:.0f}.") in DOCS
    assert f"(at the Trainer's weight decay, {TRAINER_WEIGHT_DECAY:g})" in DOCS


@pytest.mark.parametrize("max_norm, warmup", [(1.0, None), (None, 2), (0.5, 1), (1e6, None)])
def test_clipped_and_scheduled_steps_are_torch_optims_with_clip_grad_norm_and_transformers_schedule(
        tiny, max_norm, warmup):
    before = snapshot(tiny.model)
    result = sgd_steps(tiny, STORY, 0.1, steps=5, max_norm=max_norm, warmup=warmup)
    reference = reference_trainer_steps(tiny, STORY, 0.1, 5, max_norm, warmup)
    assert result.rates == pytest.approx(reference["rates"], abs=1e-15)
    # clip_grad_norm_ sums its norm in float32 and lmviz in float64: the factors agree to float32's rounding
    assert result.losses == pytest.approx(reference["losses"], rel=1e-5)
    if max_norm is None:
        assert result.clip_factors == [] and result.max_norm is None
    else:
        assert result.grad_norms == pytest.approx(reference["norms"], rel=1e-5)
        expected = [min(1.0, max_norm / (n + 1e-6)) for n in reference["norms"]]
        assert result.clip_factors == pytest.approx(expected, rel=1e-5)
        assert (max(result.clip_factors) < 1) == (max_norm < 1e6)  # the story's gradient is longer than 1
    assert_untouched(tiny.model, before)


def test_the_schedule_warms_up_from_zero_then_decays_to_nearly_zero():
    rates = cosine_rates(1e-3, 10, 3)
    assert rates[:3] == pytest.approx([0.0, 1e-3 / 3, 2e-3 / 3]) and rates[3] == pytest.approx(1e-3)
    assert all(a > b for a, b in zip(rates[3:], rates[4:])) and 0 < rates[-1] < 1e-4
    assert cosine_rates(1e-3, 4, 0)[0] == pytest.approx(1e-3)


@pytest.mark.parametrize("max_norm, warmup, words", [(0.0, None, "above 0"), (math.inf, None, "above 0"),
                                                     (-1.0, None, "above 0"), (None, 5, "fewer than the 5 steps"),
                                                     (None, -1, "from 0 to 4"), (None, 1.5, "whole number")])
def test_settings_a_trainer_refuses_get_a_sentence(tiny, max_norm, warmup, words):
    with pytest.raises(BadInput, match=words):
        sgd_steps(tiny, STORY, 0.1, steps=5, max_norm=max_norm, warmup=warmup)


def test_a_rate_too_large_makes_the_loss_rise_and_says_so(bundled):
    result = sgd_steps(bundled, PARIS, 1e-2)  # the step itself is checked against torch.optim.SGD above
    assert result.losses[1] > result.losses[0] and result.loss_rose  # (at 1e-3 it fell: see above)


# --- 3. AdamW's first step ------------------------------------------------------------------------------

def reference_adamw(loaded, text: str, lr: float, weight_decay: float):
    """torch.optim.AdamW on the output matrix of a deep copy: (weight before, gradient, weight after,
    optimizer state, loss after)."""
    model = copy.deepcopy(loaded.model)
    matrix = model.get_output_embeddings().weight.requires_grad_(True)
    mean_loss(model, ids_of(loaded, text)).backward()
    optimizer = torch.optim.AdamW([matrix], lr=lr, weight_decay=weight_decay)
    weight, grad = matrix.detach().clone(), matrix.grad.clone()
    optimizer.step()
    with torch.no_grad():
        loss_after = mean_loss(model, ids_of(loaded, text)).item()
    return weight, grad, matrix.detach(), optimizer.state[matrix], loss_after


@pytest.mark.parametrize("model, lr, weight_decay",
                         [("bundled", 1e-3, 0.01), ("tiny", 1e-3, 0.01), ("tiny", 1e-2, 0.1)])
def test_adamws_first_step_is_torch_optim_adamw_on_a_copy_and_sign_like(request, model, lr, weight_decay):
    loaded, text = request.getfixturevalue(model), TEXTS[model]
    before = snapshot(loaded.model)
    result = adamw_first_step(loaded, text, lr=lr, weight_decay=weight_decay)
    weight, grad, after, state, loss_after = reference_adamw(loaded, text, lr, weight_decay)
    name, tied, _ = output_matrix(loaded.model)
    assert (result.matrix, result.tied) == (name, tied)
    assert result.shape == tuple(weight.shape) and result.weights == weight.numel()
    assert result.loss_before == pytest.approx(analyse_clm(loaded, text).loss, abs=1e-6)
    # the reference's new matrix is within float32 rounding of lmviz's: both change a weight by ≈ lr, and
    # compute it in a different order (PyTorch divides √v by √(1 − β2) before adding eps), so the losses agree
    # to 1e-5 relative
    assert result.loss_after == pytest.approx(loss_after, rel=1e-5)
    assert result.loss_after < result.loss_before
    assert result.state_bytes == state["exp_avg"].nbytes + state["exp_avg_sq"].nbytes
    assert result.gradient_bytes == grad.nbytes
    update = after - weight
    sign_like = grad.abs() >= SIGN_LIKE * ADAM_EPS
    ratio = update.abs()[sign_like] / lr
    assert result.sign_like == int(sign_like.sum()) > 0
    # |Δw| / lr is computed from float32 weights of size ≤ ~1, whose rounding (6e-8) is 6e-5 of lr = 1e-3
    assert (result.ratio_min, result.ratio_mean, result.ratio_max) == pytest.approx(
        (ratio.min().item(), ratio.double().mean().item(), ratio.max().item()), abs=2e-4)
    # the first step's property, on torch's own update: −lr·sign(g) − lr·λ·w, up to eps's 0.1% and rounding
    decay = lr * weight_decay * weight
    assert torch.all((update + decay + lr * grad.sign())[sign_like].abs() <= 1e-3 * lr + 2e-7)
    assert result.gradient_max == grad.abs().max().item()
    assert result.gradient_max / result.gradient_min > 100  # gradients of very different sizes, one step size
    # every weight, not only the sign-like ones: Δw = −lr·g/(|g| + eps) − lr·λ·w, up to float32 rounding
    assert torch.all((update + decay + lr * grad / (grad.abs() + ADAM_EPS)).abs() <= 1e-5 * lr + 2e-7)
    magnitude, moved = grad.abs().view(-1), (update.abs() / lr).view(-1)
    assert result.gradient_median == pytest.approx(magnitude.sort().values[(magnitude.numel() - 1) // 2].item(),
                                                   rel=1e-5)
    assert [(band.gradient, band.step) for band in result.bands] == [band[2:] for band in STEP_BANDS]
    for band, (low, high, *_) in zip(result.bands, STEP_BANDS, strict=True):
        inside = (magnitude >= low) & (magnitude < high)
        assert band.weights == int(inside.sum())
        assert band.ratio_mean == pytest.approx(moved[inside].double().mean().item(), abs=2e-4)  # as above
    assert sum(band.weights for band in result.bands) == result.weights
    assert result.bands[0].weights == result.sign_like
    assert result.ratio_mean_all == pytest.approx(moved.double().mean().item(), abs=2e-4)
    flat_update, flat_grad, flat_weight = update.view(-1), grad.view(-1), weight.view(-1)
    chosen = {"largest |g|": magnitude.max().item(), "median |g|": result.gradient_median,
              f"smallest |g| ≥ {SIGN_LIKE:,} eps": result.gradient_min, "smallest |g|": magnitude.min().item()}
    names = [sample.chosen_as for sample in result.samples]  # in this order, a weight picked twice named once
    assert names == [name for name in chosen if name in names] and len(set(names)) == len(names) >= 3
    for sample in result.samples:
        flat = sample.row * weight.shape[1] + sample.column
        assert abs(sample.gradient) == pytest.approx(chosen[sample.chosen_as], rel=1e-5)
        assert sample.gradient_in_eps == abs(sample.gradient) / ADAM_EPS
        assert sample.gradient == pytest.approx(flat_grad[flat].item(), rel=1e-5)
        assert sample.weight == flat_weight[flat].item()
        assert sample.update == pytest.approx(flat_update[flat].item(), abs=2e-7)
        assert sample.update == pytest.approx(sample.adam_part + sample.decay_part, abs=2e-7)
        assert sample.sgd_update == pytest.approx(-lr * sample.gradient)
    assert result.samples[0].gradient == pytest.approx(flat_grad[flat_grad.abs().argmax()].item(), rel=1e-5)
    assert_untouched(loaded.model, before)


def torch_default(optimizer, name: str):
    return inspect.signature(optimizer).parameters[name].default


def plain(text: str) -> str:
    """A text with its whitespace normalised, so that rewrapping a paragraph changes nothing."""
    return re.sub(r"\s+", " ", text)


DOCS = plain((Path(__file__).resolve().parents[2] / "docs" / "lessons" / "gradient_step.md").read_text())


def test_adamws_first_step_is_the_sign_of_g_only_far_above_eps_as_the_glossary_and_the_bands_say():
    """Issue 39: the glossary said AdamW's first step is "about η × the sign of the gradient for every weight,
    whatever the gradient's size". torch.optim.AdamW's own first step, on gradients from 1e-14 to 10 (float64, from
    weights of 0 without decay, so that Δw is the step alone): lr·g/(|g| + eps), the sign only far above eps."""
    adamw = torch.optim.AdamW
    assert (ADAM_BETAS, ADAM_EPS) == (torch_default(adamw, "betas"), torch_default(adamw, "eps"))
    lr, eps = 1e-3, ADAM_EPS
    grad = torch.logspace(-14, 1, 301, dtype=torch.float64) * torch.tensor([1.0, -1.0]).repeat(151)[:301]
    weight = torch.zeros_like(grad, requires_grad=True)
    weight.grad = grad.clone()
    adamw([weight], lr=lr, weight_decay=0.0).step()
    step = -weight.detach() / lr  # Δw / (−lr): the step in units of lr, in the direction of −g
    assert torch.all(step.sign() == grad.sign())
    assert torch.allclose(step, grad / (grad.abs() + eps), rtol=1e-12, atol=0)
    size, magnitude = step.abs(), grad.abs()
    far_above, below, far_below = magnitude >= SIGN_LIKE * eps, magnitude < eps, magnitude <= eps / SIGN_LIKE
    band = ~far_above & ~below
    assert all(mask.any() for mask in (far_above, band, below, far_below))
    # the bands' words (STEP_BANDS), which the page shows: each checked here
    assert [band[:2] for band in STEP_BANDS] == [(SIGN_LIKE * eps, math.inf), (eps, SIGN_LIKE * eps), (0.0, eps)]
    assert [band[3] for band in STEP_BANDS] == ["±lr, the sign of g (within 0.1 %)", "from lr/2 to lr",
                                                "below lr/2; about lr · |g| / eps far below eps"]
    assert torch.all((size[far_above] - 1).abs() <= 1e-3)  # "±lr, the sign of g (within 0.1 %)"
    assert torch.all((size[band] >= 0.5 - 1e-12) & (size[band] < 1))  # "from lr/2 to lr"
    assert torch.all(size[below] < 0.5)  # "below lr/2; about lr · |g| / eps far below eps"
    assert torch.allclose(size[far_below], magnitude[far_below] / eps, rtol=1e-3, atol=0)
    # the glossary's entry says the same, and torch's defaults as torch has them
    entry = TERMS["AdamW"][1]
    assert "for every weight, whatever" not in entry
    assert "η × g / (|g| + ε): about η × the sign of g where |g| is far above ε" in entry
    assert "about η × g / ε, proportional to g, where |g| is far below ε" in entry

    def written(x: float) -> str:  # 1e-3, as the entry writes it
        return f"{x:.0e}".replace("e-0", "e-")
    defaults = {name: torch_default(adamw, name) for name in ("lr", "betas", "eps", "weight_decay")}
    assert (f"torch.optim.AdamW's defaults: lr {written(defaults['lr'])}, betas {defaults['betas']}, eps "
            f"{written(defaults['eps'])}, weight_decay {written(defaults['weight_decay'])}.") in entry
    assert (torch_default(torch.optim.SGD, "lr"), torch_default(torch.optim.SGD, "momentum")) == (1e-3, 0)
    assert "torch.optim.SGD does this, with lr = 1e-3 and no momentum by default." in TERMS["SGD"][1]
    assert "torch.optim.SGD and torch.optim.AdamW both default to 1e-3." in TERMS["learning rate"][1]


def test_the_docs_figures_for_adamws_first_step_and_the_longest_row_are_the_computations(bundled):
    """docs/lessons/gradient_step.md quotes the default sentence's AdamW bands and the story's rows: these, as
    computed; and the tied matrix's row of a token absent from the text is Σ_t p_t(v) h_t / N, as it says."""
    assert f"‖g‖ over every weight to {NORM_DIGITS} significant digits" in DOCS  # as fmt_norm writes it
    adam = adamw_first_step(bundled, PARIS)
    share = adam.sign_like / adam.weights
    assert share < 0.5 and adam.bands[2].weights / adam.weights > 0.1  # the glossary's "many" far below eps
    assert (f"only {100 * share:.1f} % of SmolLM2's tied embedding's weights have |g| ≥ 1000 ε, and |Δw| / lr "
            f"averages {adam.ratio_mean_all:.3f} over all of them") in DOCS
    assert f"(from $10^{{-5}}$ to about {adam.gradient_max:.0f} on the default sentence)" in DOCS
    assert adam.gradient_min >= SIGN_LIKE * ADAM_EPS == 1e-5
    rows = logit_gradient(bundled, ONCE, top=1).rows
    lived, upon = max(rows, key=lambda r: r.row_norm), max(rows, key=lambda r: r.nll)
    (named, _, entry), count = lived.others[0], len(rows)
    assert (f'longest row is "{lived.target_token}"\'s ($-\\log p = {lived.nll:.2f}$, and '
            f'{entry * count / (1 - lived.prob):.2f} of its wrong probability on "{named}"), not '
            f'"{upon.target_token}"\'s ($-\\log p = {upon.nll:.2f}$') in DOCS
    # the row of a token absent from the text: the output's part alone, Σ_t p_t(v) h_t / N
    model, ids = copy.deepcopy(bundled.model), ids_of(bundled, PARIS)
    matrix, hidden = model.get_output_embeddings().weight.requires_grad_(True), []
    model.get_output_embeddings().register_forward_hook(lambda module, args, out: hidden.append(args[0][0].detach()))
    logits = logits_of(model, ids)
    F.cross_entropy(logits[:-1], ids[1:]).backward()
    absent = torch.ones(matrix.shape[0], dtype=torch.bool)
    absent[ids] = False
    probs = torch.softmax(logits[:-1].detach().double(), -1)  # (N, V)
    h = hidden[0][:-1].double()  # (N, hidden size): what the output matrix multiplies
    expected = probs.T[absent] @ h / (len(ids) - 1)  # (absent rows, hidden size)
    # the terms' sizes added: the model's float32 softmax over V is off by up to ~2.4e-5 relative (see above)
    scale = probs.T[absent] @ h.abs() / (len(ids) - 1)
    assert torch.all((matrix.grad[absent].double() - expected).abs() <= 1e-4 * scale + 1e-20)


def test_a_model_that_does_not_tie_steps_its_output_matrix(tiny_tokenizer):
    torch.manual_seed(0)
    config = GPT2Config(vocab_size=TINY_VOCAB, n_positions=64, n_embd=16, n_layer=2, n_head=2,
                        tie_word_embeddings=False)
    untied = LoadedModel(GPT2LMHeadModel(config).eval(), tiny_tokenizer, "untied", "built in the test", "cpu",
                         "float32", 0.0)
    assert output_matrix(untied.model)[:2] == ("lm_head.weight", False)
    before = snapshot(untied.model)
    result = adamw_first_step(untied, "the cat sat on a mat")
    assert result.matrix == "lm_head.weight" and not result.tied and "does not share" in result.description
    assert result.loss_after == pytest.approx(reference_adamw(untied, "the cat sat on a mat", 1e-3, 0.01)[-1],
                                              rel=1e-5)
    assert_untouched(untied.model, before)


# --- 4. two sessions at once ----------------------------------------------------------------------------

def test_a_session_stepping_leaves_another_sessions_scores_unchanged(tiny):
    texts = [OTHER_STORY, "ben saw a bird.", STORY]
    expected = [analyse_clm(tiny, text) for text in texts]
    first = sgd_steps(tiny, STORY, 1.0, steps=3)  # the largest rate: the weights it makes are far from the shared ones
    stepping, done, calls, problems = threading.Event(), threading.Event(), [], []

    def step():
        try:
            while not done.is_set():
                calls.append(sgd_steps(tiny, STORY, 1.0, steps=3).losses)
                stepping.set()
        except Exception as error:  # reported by the main thread
            problems.append(error)
            stepping.set()

    thread = threading.Thread(target=step)
    thread.start()
    stepping.wait(timeout=60)
    scored = []
    try:
        while len(calls) < 5 and not problems:  # scoring while at least four more calls step
            scored += [analyse_clm(tiny, text) for text in texts]
    finally:
        done.set()
        thread.join(timeout=60)
    assert not problems and len(scored) >= len(texts)
    for result, reference in zip(scored, expected * len(scored)):
        assert result.loss == reference.loss  # to the last digit
        assert [row.nll for row in result.rows] == [row.nll for row in reference.rows]
    assert all(losses == first.losses for losses in calls)  # every call started from the same, unchanged model
    assert abs(first.losses[1] - first.losses[0]) > 1  # and its private weights moved far from the shared ones


# --- bad input ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("lr", [0, 0.0, -1e-3, math.nan, math.inf, -math.inf, 10.0, 1e9, True, "0.001", None])
def test_a_learning_rate_it_cannot_use_is_one_sentence(tiny, lr):
    for call in (lambda: sgd_steps(tiny, STORY, lr), lambda: adamw_first_step(tiny, STORY, lr=lr)):
        with pytest.raises(BadInput) as raised:
            call()
        assert isinstance(raised.value, LearnerError) and isinstance(raised.value, ValueError)
        message = str(raised.value)
        assert message.startswith("The learning rate must be a number above 0 and at most 1") and one_sentence(message)


@pytest.mark.parametrize("steps", [0, -1, MAX_STEPS + 1, 1.5, True])
def test_a_number_of_steps_it_cannot_use_is_one_sentence(tiny, steps):
    with pytest.raises(BadInput, match="The number of steps must be a whole number from 1 to ") as raised:
        sgd_steps(tiny, STORY, 1e-3, steps=steps)
    assert one_sentence(str(raised.value))


@pytest.mark.parametrize("weight_decay", [-0.01, 1.5, math.nan])
def test_a_weight_decay_it_cannot_use_is_one_sentence(tiny, weight_decay):
    with pytest.raises(BadInput, match="The weight decay must be a number from 0 to 1") as raised:
        adamw_first_step(tiny, STORY, weight_decay=weight_decay)
    assert one_sentence(str(raised.value))


@pytest.mark.parametrize("call", [logit_gradient, lambda loaded, text: sgd_steps(loaded, text, 1e-3),
                                  lambda loaded, text: sgd_steps(loaded, STORY, 1e-3, other_text=text),
                                  adamw_first_step])
def test_a_text_with_nothing_to_predict_says_so(tiny, call):
    for text in ("   ", "anna"):  # blank, and a single token
        with pytest.raises(NothingToScore):
            call(tiny, text)


@pytest.mark.parametrize("text", ["", "   ", "anna"])  # empty, blank, a single token
def test_only_the_other_text_unusable_is_its_own_error_and_the_steps_alone_still_run(tiny, text):
    """A page can tell a bad second text from a bad first one, and take the steps without the second."""
    with pytest.raises(OtherTextUnusable) as raised:
        sgd_steps(tiny, STORY, 1e-3, other_text=text)
    assert str(raised.value).startswith("The other text cannot be scored. ")
    with pytest.raises(NothingToScore) as first:  # the first text's problem comes first, and is not the other's
        sgd_steps(tiny, "   ", 1e-3, other_text=text)
    assert not isinstance(first.value, OtherTextUnusable)
    assert sgd_steps(tiny, STORY, 1e-3).other is None


@pytest.mark.parametrize("size", [1, SQUARES_CHUNK - 1, 3 * SQUARES_CHUNK + 7])
def test_the_squared_norm_a_chunk_at_a_time_is_the_float64_norms_square(size):
    """Against torch's norm with every number cast to float64 first, on numbers of very different sizes."""
    generator = torch.Generator().manual_seed(size)
    tensor = torch.randn(size, generator=generator) * torch.logspace(-8, 2, size)
    reference = torch.linalg.vector_norm(tensor, dtype=torch.float64).item() ** 2
    assert squared_norm(tensor) == pytest.approx(reference, rel=1e-12)
    assert squared_norm(tensor.view(1, -1)) == pytest.approx(reference, rel=1e-12)  # any shape


def test_the_pages_options_fold_is_torch_optims_clipped_and_scheduled_steps(bundled):
    """One step of learning's fold at clipping 1.0 and one warm-up step, against torch.optim.SGD with
    clip_grad_norm_ and transformers' cosine schedule on a copy; a warm-up as long as the steps gets a sentence."""
    from tests.helpers import open_page, unescaped

    at = open_page("app_pages/gradient_step.py")
    at.select_slider(key="step_max_norm").set_value(1.0)
    at.select_slider(key="step_warmup").set_value(1)
    at.run(timeout=600)
    assert not at.exception, at.exception
    fold = next(e for e in at.expander if e.label.startswith("A trainer's options for these steps"))
    shown = {m.label: m.value for m in fold.metric}
    steps = at.number_input(key="step_count").value
    reference = reference_trainer_steps(bundled, at.text_area(key="step_text").value, at.select_slider(
        key="step_lr").value, steps, 1.0, 1)
    assert shown[f"After {steps} steps, with these options"] == fmt(reference["losses"][-1])
    table = fold.dataframe[0].value
    assert table["rate"].tolist() == [f"{r:.3g}" for r in reference["rates"]]
    assert table["clip factor"].tolist() == [f"{min(1.0, 1.0 / (n + 1e-6)):.4g}" for n in reference["norms"]]
    assert table["loss after the step"].tolist()[0] == fmt(reference["losses"][0])  # a rate of 0 changes nothing
    assert f"{steps} of the {steps} steps were clipped" in [c.value for c in fold.caption][0]

    at.select_slider(key="step_warmup").set_value(5).run(timeout=600)
    assert not at.exception, at.exception
    fold = next(e for e in at.expander if e.label.startswith("A trainer's options for these steps"))
    assert any(f"fewer than the {steps} steps; got 5." in unescaped(w.value) for w in fold.warning)
