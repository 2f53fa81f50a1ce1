import math

import pandas as pd
import streamlit as st

from lmviz.app import url_state
from lmviz.app.choosers import choose_causal_lm, scored_with_cpu_fallback
from lmviz.app.chrome import intro, key_table, result_or_stop, term
from lmviz.app.path import check_yourself
from lmviz.app.problems import show_problem
from lmviz.app.steps import step_status
from lmviz.app.training import cached_adamw, cached_gradient, cached_sgd_steps
from lmviz.app.widgets import result_panel, show_chart, show_code
from lmviz.core.numbers import NORM_DIGITS, fmt, fmt_gap, fmt_grad, fmt_norm, fmt_prob
from lmviz.core.text import escape_markdown, quotable
from lmviz.course.questions.gradient_step import build_questions
from lmviz.errors import BadInput, NotEnoughMemory, NothingToScore, OtherTextUnusable
from lmviz.figures import plots
from lmviz.lessons.gradient_step import (
    ADAM_EPS,
    DEFAULT_OTHER,
    DEFAULT_RATE,
    DEFAULT_STEPS,
    DEFAULT_TEXT,
    MAX_STEPS,
    SIGN_LIKE,
    STEP_MAX_TOKENS,
    TRAINER_FUSED_FROM_TORCH,
    TRAINER_MAX_GRAD_NORM,
    TRAINER_OPTIMIZER,
    TRAINER_SCHEDULE,
    TRAINER_WARMUP_STEPS,
    adamw_first_step,
    logit_gradient,
    sgd_steps,
)

MAX_CHARS = 1000
# A log scale: each rate about three times the one before. 1e-3 lowers the default sentence's loss on
# SmolLM2 (2.567 → 1.855), 1e-2 makes it rise (9.78): both ends of what a learner should see are in it.
RATES = (1e-5, 3e-5, 1e-4, 3e-4, 1e-3, 3e-3, 1e-2, 3e-2, 1e-1)


# ‖g‖ as the page gives it, and as the Trainer's clipping gets it
NORM_HELP = ("The length of the gradient over every weight of the model, at the first step, summed in float64 and "
             f"given to {NORM_DIGITS} significant digits. torch.nn.utils.clip_grad_norm_, which transformers' Trainer "
             "calls, sums in float32 and can differ in the next digit.")


def plural(count: int, word: str) -> str:
    return f"{count} {word}{'s' if count != 1 else ''}"


def row_in_words(row, count: int) -> str:
    """A row of the gradient: its label, p, -log p, its length and the length's bounds."""
    low = (1 - row.prob) / count
    return (f"“{row.target_token}” at position {row.position} (p = {fmt_prob(row.prob)}, -log p = {fmt(row.nll)}): "
            f"‖row‖ = {fmt_grad(row.row_norm)}, between {fmt_grad(low)} and {fmt_grad(math.sqrt(2) * low)}")


def largest_other(row, count: int) -> str:
    """The other token the model gives most probability at the row's position, with that probability."""
    token, _, entry = row.others[0]  # the formula's entry p/N
    return f"of 1 − p = {fmt_prob(1 - row.prob)}, “{token}” has p = {fmt_prob(entry * count)}"


def longest_and_shortest_rows(gradient) -> str:
    """Section 2's sentences: the longest row and the most surprising label, the shortest row and the most
    confident label, each pair named apart when they differ (a row's length depends on how the wrong probability
    is spread, not on p alone)."""
    n, rows = gradient.count, gradient.rows
    longest, surprising = max(rows, key=lambda r: r.row_norm), max(rows, key=lambda r: r.nll)
    shortest, confident = min(rows, key=lambda r: r.row_norm), max(rows, key=lambda r: r.prob)
    if longest is surprising:
        words = [f"The most surprising label has the longest row: {row_in_words(longest, n)}."]
    else:
        words = [f"The longest row is {row_in_words(longest, n)} ({largest_other(longest, n)}). The most "
                 f"surprising label is another, {row_in_words(surprising, n)}: its wrong probability is spread more "
                 f"thinly ({largest_other(surprising, n)})."]
    if shortest is confident:
        words.append(f"The most confident label has the shortest row: {row_in_words(shortest, n)}.")
    else:
        words.append(f"The shortest row is {row_in_words(shortest, n)}; the most confident label is "
                     f"{row_in_words(confident, n)}.")
    return " ".join(words) + (" As p(label) nears 1 both bounds near 0: a label the model already gets right adds "
                              "almost nothing to the gradient.")


def show_adamw(adam, lr: float) -> None:
    """Section 6: AdamW's first step, lr · g / (|g| + eps), by band of |g| and on a few weights."""
    st.markdown(escape_markdown(
        "AdamW keeps two running averages per weight, m of g and v of g², and steps by lr · m̂ / (√v̂ + eps). At the "
        f"first step m̂ = g and v̂ = g², so the step is lr · g / (|g| + eps), with eps = {ADAM_EPS:g}: about ±lr, the "
        "sign of g whatever its size, where |g| is far above eps; lr/2 where |g| = eps; and about lr · g / eps, "
        "proportional to g as SGD's step is, where |g| is far below eps. Here on "
        f"{adam.description} ({adam.shape[0]:,} × {adam.shape[1]:,} = {adam.weights:,} weights; m and v take "
        f"{adam.state_bytes / 2**20:,.0f} MiB), at lr = {lr:g}, weight decay λ = {adam.weight_decay:g}:"))
    key_table(pd.DataFrame({
        "gradient |g|": [band.gradient for band in adam.bands],
        "weights": [f"{band.weights:,}" for band in adam.bands],
        "share": [f"{band.weights / adam.weights:.1%}" for band in adam.bands],
        "AdamW's step": [band.step for band in adam.bands],
        "mean |Δw| / lr": [fmt(band.ratio_mean) for band in adam.bands],
    }), "adamw-bands.csv", hide_index=True)
    share = adam.sign_like / adam.weights
    st.markdown(escape_markdown(
        f"The step is ±lr, the sign of g, for {'only ' if share < 0.5 else ''}{share:.1%} of the weights: those "
        f"with |g| ≥ {SIGN_LIKE:,} eps moved by |Δw| / lr = {fmt(adam.ratio_mean)} on average (from "
        f"{fmt(adam.ratio_min)} to {fmt(adam.ratio_max)}: the decay λ · |w| and eps), though their gradients ranged "
        f"from {fmt_gap(adam.gradient_min)} to {fmt_gap(adam.gradient_max)}. Half of the weights have |g| ≤ "
        f"{fmt_gap(adam.gradient_median)}, {adam.gradient_median / ADAM_EPS:.1f} eps; over all {adam.weights:,} "
        f"weights |Δw| / lr averages {fmt(adam.ratio_mean_all)}. The loss went {fmt(adam.loss_before)} → "
        f"{fmt(adam.loss_after)}."))
    key_table(pd.DataFrame({
        "weight": [w.chosen_as for w in adam.samples],
        "token (row)": [w.token for w in adam.samples],
        "g": [fmt_gap(w.gradient) for w in adam.samples],
        "|g| / eps": [fmt_gap(w.gradient_in_eps) for w in adam.samples],
        "SGD: −lr·g": [fmt_gap(w.sgd_update) for w in adam.samples],
        "AdamW: Δw": [fmt_gap(w.update) for w in adam.samples],
        "|Δw| / lr": [fmt(w.ratio) for w in adam.samples],
    }), "adamw-first-step.csv", hide_index=True)


intro(
    f"The loss says how wrong the model is; its {term('gradient', 'gradient')} says which way to change every "
    "number of the model to make it less wrong, and training takes a small step that way: the "
    f"{term('optimizer step', 'optimizer step')}. Here is that step on your text and a real model: the gradient "
    f"with respect to each position's {term('logits', 'logit')}, one step of {term('SGD', 'SGD')} on every weight "
    f"at a {term('learning rate', 'learning rate')} you choose, what the step does to another text, a few more "
    f"steps, and {term('AdamW', 'AdamW')}'s first step. The model every visitor shares is never changed: each step "
    "works on a copy of the weights made for it, and freed after.")

scorer = choose_causal_lm()
panel = result_panel()
url_state.reset_button()
text = url_state.linked(url_state.text("step_text", DEFAULT_TEXT, MAX_CHARS), st.text_area,
                        "Your text (the step learns it)", max_chars=MAX_CHARS)
rate, count, other_box = st.columns([2, 1, 3])
lr = url_state.linked(url_state.choice("step_lr", DEFAULT_RATE, RATES), rate.select_slider, "Learning rate", RATES,
                      format_func=lambda r: f"{r:g}",
                      help="How far each step moves every weight along the gradient: w ← w − lr · g.")
steps = url_state.linked(url_state.number("step_count", DEFAULT_STEPS, 1, MAX_STEPS), count.number_input, "Steps", 1,
                         MAX_STEPS, help="The first step is shown in detail; the loss is drawn after each.")
other = url_state.linked(url_state.text("step_other", DEFAULT_OTHER, MAX_CHARS), other_box.text_input,
                         "Another text, scored before and after (never learnt)", max_chars=MAX_CHARS)

def stepped():
    """The scorer that took them, the gradient, the steps, and why the other text was left out of them (or None)."""
    chosen, gradient = scored_with_cpu_fallback(scorer, lambda s: cached_gradient(s, s.cache_key, text))
    with panel, step_status(f"Taking {plural(steps, 'step')} of SGD on a copy of the weights…", "sgd") as report:
        try:
            chosen, result = scored_with_cpu_fallback(
                chosen, lambda s: cached_sgd_steps(s, s.cache_key, text, float(lr), int(steps), other, report))
            unusable = None
        except OtherTextUnusable as problem:  # said in section 4; the steps on your text are still shown
            unusable = problem
            chosen, result = scored_with_cpu_fallback(
                chosen, lambda s: cached_sgd_steps(s, s.cache_key, text, float(lr), int(steps), None, report))
    return chosen, gradient, result, unusable


scorer, gradient, result, other_problem = result_or_stop(  # in the pinned panel: on screen with the box
    stepped, (NothingToScore, BadInput), "Try a shorter text.", panel)

losses = result.losses
with panel:
    before, first, last, norm = st.columns(4)
    before.metric("Loss before", fmt(losses[0]))
    first.metric("After 1 step", fmt(losses[1]))
    last.metric(f"After {result.steps} steps" if result.steps > 1 else "Gradient norm ‖g‖",
                fmt(losses[-1]) if result.steps > 1 else fmt_norm(result.grad_norms[0]),
                help=None if result.steps > 1 else NORM_HELP)
    if result.steps > 1:
        norm.metric("Gradient norm ‖g‖, step 1", fmt_norm(result.grad_norms[0]), help=NORM_HELP)
    if not math.isfinite(losses[-1]):
        st.warning(f"At lr = {lr:g} the loss is no longer a finite number after the steps: they broke the model. "
                   "Try a smaller learning rate.", icon=":material/trending_up:")
    elif result.loss_rose:  # a result, not a problem: the lesson of too large a rate
        st.info(f"At lr = {lr:g} the first step raised the loss, {fmt(losses[0])} → {fmt(losses[1])}: the "
                   "rate is too large, and the step overshot the valley it was meant to go down into.",
                   icon=":material/trending_up:")

loaded = scorer.loaded
cut = (f" Only its first {len(gradient.tokens)} of {gradient.truncated_from} tokens are used: a step keeps every "
       f"layer's activations for the backward pass, so it takes at most {STEP_MAX_TOKENS} tokens."
       if gradient.truncated_from else "")
st.caption(escape_markdown(
    f"Model: {loaded.name}, {loaded.source}. Device: {loaded.device}, weights {loaded.dtype}. One step changes "
    f"{result.weights:,} weights; {plural(result.steps, 'step')} took {sum(result.step_seconds):.1f} s.{cut}"))

N, V = gradient.count, gradient.vocab_size
st.subheader("1. The gradient of the loss with respect to the logits")
st.markdown(
    f"The loss is the mean of -{term('log p', 'log-probability')} over the N = {N} {term('labels', 'label')}, "
    f"where p = {term('softmax', 'softmax')}(z) at each position. At position t, -log p(label) = −z[label] + "
    f"log Σ e^z, so its derivative with respect to a logit z[v] is p(v) − 1 for the label and p(v) for every "
    f"other {term('token', 'token')}; the mean divides by N. Each row of the gradient has V = {V:,} entries: the "
    "label's is "
    "**(p − 1)/N**, negative (the loss falls as the label's logit rises), every other is **p/N**, positive (it "
    "falls as those logits fall), and they add up to 0: adding one number to every logit of a position changes "
    "none of its probabilities.")
key_table(pd.DataFrame({
    "position": [r.position for r in gradient.rows],
    "label (next token)": [r.target_token for r in gradient.rows],
    "p(label)": [fmt_prob(r.prob) for r in gradient.rows],
    "label: (p − 1)/N": [fmt_grad(r.label_entry) for r in gradient.rows],
    "autograd": [fmt_grad(r.autograd_label_entry) for r in gradient.rows],
    "largest others: p/N": [", ".join(f"“{tok}” {fmt_grad(g)}" for tok, _, g in r.others) for r in gradient.rows],
    "row sum": [fmt_gap(r.autograd_row_sum) for r in gradient.rows],
    "gap": [fmt_gap(r.max_difference) for r in gradient.rows],
}), "gradient-rows.csv", hide_index=True)
st.caption("Row sum: " + term("autograd", "autograd") + escape_markdown(
    "'s row, its V entries added. Gap: the largest |formula − autograd| over the row. "
    f"The position of the last token, {gradient.last_token} ({gradient.last_position}), has no label: it is in no "
    f"term of the loss, and autograd's gradient there is {fmt_gap(gradient.last_row_max)} in every entry. Autograd's "
    f"own gradient of the same loss (torch.autograd on F.cross_entropy) differs from the formula by at most "
    f"{fmt_gap(gradient.max_difference)} over all {N} × {V:,} entries; its rows add up to 0 within "
    f"{fmt_gap(gradient.max_row_sum)} (float32 rounding)."))

st.subheader("2. Where the gradient is largest")
show_chart(plots.push_and_loss_bars([r.target_token for r in gradient.rows], [r.row_norm for r in gradient.rows],
                                    [r.nll for r in gradient.rows]), key="push_bars")
st.markdown(escape_markdown(
    "A row's length, ‖row‖, is how fast the loss changes as that position's logits change. It grows as p(label) "
    "falls, and as the wrong probability gathers on fewer tokens.\n\n" + longest_and_shortest_rows(gradient)))
with st.expander("Why a row's length lies between (1 − p)/N and √2 · (1 − p)/N"):  # folded (issue 39): a derivation
    st.markdown(escape_markdown(
        "With p = p(label) and p_v the other tokens' probabilities, ‖row‖ = √((1 − p)² + Σ p_v²) / N. The p_v add "
        "up to 1 − p, so Σ p_v² lies between 0 (spread thinly over many tokens) and (1 − p)² (all on one): ‖row‖ "
        "lies between (1 − p)/N and √2 · (1 − p)/N."))
st.subheader(f"3. One step of SGD at lr = {lr:g}")
st.markdown(
    "The gradient with respect to the logits flows back through every layer "
    f"({term('backpropagation', 'backpropagation')}) to a gradient g "
    f"for each of the model's {result.weights:,} weights; one step of SGD sets **w ← w − lr · g** for every one of "
    "them at once. The step changes weights, not logits: the logits change because the weights they are computed "
    "from did. Then the text is scored again:")
changes = result.text
risen = sum(r.prob_after > r.prob_before for r in changes.rows)
st.markdown(escape_markdown(
    f"{risen} of the {len(changes.rows)} labels became more likely. The loss went {fmt(changes.loss_before)} → "
    f"{fmt(changes.loss_after)}: " + ("it fell." if changes.loss_after < changes.loss_before else
                                      "it rose, the step was too large.")))
with st.expander("Each label's p and -log p before and after the step (a table)"):  # folded (issue 39)
    key_table(pd.DataFrame({
        "position": [r.position for r in changes.rows],
        "label (next token)": [r.target_token for r in changes.rows],
        "p(label) before": [fmt_prob(r.prob_before) for r in changes.rows],
        "p(label) after": [fmt_prob(r.prob_after) for r in changes.rows],
        "-log p before": [fmt(r.nll_before) for r in changes.rows],
        "-log p after": [fmt(r.nll_after) for r in changes.rows],
    }), "sgd-step.csv", hide_index=True)

st.subheader("4. What else the step changes")
if other_problem is not None:
    show_problem(other_problem)
else:
    moved = result.other
    st.markdown(escape_markdown(
        f"The step learnt only your text, yet it changed weights in every layer, and with them the model's other "
        "beliefs. "
        f"“{quotable(moved.text)}”, never learnt, went {fmt(moved.loss_before)} → {fmt(moved.loss_after)} after one "
        f"step ({fmt(moved.loss_last)} after {result.steps})."))
    with st.expander("The other text's labels one by one: p before and after the steps (a table)"):  # folded
        key_table(pd.DataFrame({
            "label (next token)": [r.target_token for r in moved.rows],
            "p(label) before": [fmt_prob(r.prob_before) for r in moved.rows],
            "after 1 step": [fmt_prob(r.prob_after) for r in moved.rows],
            f"after {result.steps}": [fmt_prob(r.prob_last) for r in moved.rows],
        }), "other-text.csv", hide_index=True)

st.subheader("5. A few more steps")
show_chart(plots.loss_per_step(losses),
           key="loss_per_step")
st.caption(escape_markdown(
    f"The loss of your text before the first step and after each of {plural(result.steps, 'step')} at "
    f"lr = {lr:g}: " + " → ".join(fmt(v) for v in losses) + ". " +
    ("Steps on one text make the model memorise it: at a rate small enough its loss heads towards 0, which says "
     "nothing about any other text." if losses[-1] < losses[0] else
     "It did not fall: at this rate the steps overshoot. At a smaller rate, steps on one text make the model "
     "memorise it, its loss heading towards 0.")))

CLIPS = ("off", 10.0, 1.0, 0.1)  # 1.0: transformers' Trainer's max_grad_norm
WARMUPS = ("off", 0, 1, 2, 5)
with st.expander("A trainer's options for these steps: gradient clipping, and a warm-up then a cosine decay"):
    clip_column, warmup_column = st.columns(2)
    clip = url_state.linked(url_state.choice("step_max_norm", "off", CLIPS), clip_column.select_slider,
                            "Clip the gradient's norm at", CLIPS, format_func=str)
    warmup = url_state.linked(url_state.choice("step_warmup", "off", WARMUPS), warmup_column.select_slider,
                              "Warm-up steps, then a cosine decay", WARMUPS, format_func=str)
    st.markdown(
        f"**Clipping** by the global norm (`torch.nn.utils.clip_grad_norm_`, transformers' Trainer clips at "
        f"{TRAINER_MAX_GRAD_NORM:g} by default): when ‖g‖ over every weight is above the limit, every entry of g is "
        "multiplied by c = limit / (‖g‖ + 10⁻⁶), so the gradient keeps its direction and its length becomes the "
        "limit. With SGD, as here, that is a smaller rate for the step. The Trainer's own optimizer is AdamW "
        f"(`optim=\"{TRAINER_OPTIMIZER}\"` with torch {TRAINER_FUSED_FROM_TORCH} or later, as here), which divides "
        "each gradient by its own running size √v̂, so the factor "
        "c cancels except against ε: at the first step lr · c·g / (c·|g| + ε) = lr · g / (|g| + ε/c), as if ε were 1/c "
        "times larger: each weight's first step is multiplied by (|g| + ε) / (|g| + ε/c), nearly 1 where |g| is far "
        "above ε/c, and nearly c only where |g| is far below ε.\n\n"
        "**A warm-up then a cosine decay** (transformers' `get_cosine_schedule_with_warmup`): the rate climbs from 0 "
        f"to lr = {lr:g} over the warm-up steps, then falls along half a cosine towards 0 at the end of the "
        f"{result.steps} steps. The Trainer's default is neither: `lr_scheduler_type=\"{TRAINER_SCHEDULE}\"` "
        f"with `warmup_steps={TRAINER_WARMUP_STEPS}`, a rate that falls in a straight line from lr at the first step "
        "towards 0 after the last.")
    if clip == "off" and warmup == "off":
        st.caption("Turn either on to take the same steps with it, beside the steps above.")
    else:
        try:
            with step_status("Taking the steps with these options…", "sgd") as report:
                scorer, trained = scored_with_cpu_fallback(scorer, lambda s: cached_sgd_steps(
                    s, s.cache_key, text, float(lr), int(steps), None, report,
                    max_norm=None if clip == "off" else float(clip), warmup=None if warmup == "off" else int(warmup)))
        except (NothingToScore, BadInput, NotEnoughMemory) as problem:
            show_problem(problem)
        else:
            before_column, plain_column, with_column = st.columns(3)
            before_column.metric("Loss before", fmt(trained.losses[0]))
            plain_column.metric(f"After {plural(result.steps, 'step')}, plain", fmt(losses[-1]))
            with_column.metric(f"After {plural(result.steps, 'step')}, with these options", fmt(trained.losses[-1]))
            table = {"step": list(range(1, trained.steps + 1)), "rate": [f"{r:.3g}" for r in trained.rates],
                     "‖g‖": [fmt_norm(n) for n in trained.grad_norms]}
            if trained.max_norm is not None:
                table["clip factor"] = [f"{f:.4g}" for f in trained.clip_factors]
                table["‖g‖ after clipping"] = [fmt_norm(n * f) for n, f in zip(trained.grad_norms,
                                                                                trained.clip_factors)]
            table["loss after the step"] = [fmt(v) for v in trained.losses[1:]]
            key_table(pd.DataFrame(table), "step-options.csv", hide_index=True)
            if trained.max_norm is not None:
                clipped = sum(f < 1 for f in trained.clip_factors)
                st.caption(f"{clipped} of the {trained.steps} steps were clipped. A clipped step moves every weight "
                           "by rate × factor × its gradient: with plain SGD, clipping is a smaller rate for that "
                           "step, chosen by the gradient's length. ‖g‖ is summed in float64; "
                           "torch.nn.utils.clip_grad_norm_ sums in float32, so its ‖g‖ and factor can differ from "
                           f"these after the first {NORM_DIGITS} significant digits.")
            if trained.warmup is not None and trained.warmup > 0:
                st.caption(f"The first step's rate is 0 (t / warm-up at t = 0), so it changes no weight: the loss "
                           f"after it is the loss before, {fmt(trained.losses[1])}.")

st.subheader("6. AdamW's first step")
if url_state.linked(url_state.flag("step_adamw"), st.toggle, "Compute AdamW's first step on the output matrix",
                   help="Another forward and backward pass. AdamW keeps m and v, each the size of the weights it "
                        "steps: for the whole model they would add twice its size to the step's memory, so it steps "
                        "one matrix."):
    try:
        with step_status("One AdamW step on a copy of the output matrix…", "adamw"):
            scorer, adam = scored_with_cpu_fallback(scorer, lambda s: cached_adamw(s, s.cache_key, text, float(lr)))
    except NotEnoughMemory as problem:
        show_problem(f"{problem} Try a shorter text.")
    else:
        show_adamw(adam, lr)

show_code(logit_gradient, sgd_steps, adamw_first_step)
check_yourself("step", build_questions(gradient, result))
