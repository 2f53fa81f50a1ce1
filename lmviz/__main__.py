"""Command line:

    python -m lmviz clm "TEXT" [--model ID] [--bos] [--json]
    python -m lmviz mlm "TEXT" [--seed N] [--json]
    python -m lmviz nsp "SENTENCE A" "SENTENCE B" [--not-next] [--json]
    python -m lmviz next "PREFIX" [--model ID] [--temperature T] [--top-k K] [--seed N] [--true-next WORD] [--json]
    python -m lmviz sft "USER" "ANSWER" [--system TEXT] [--model ID] [--json]
    python -m lmviz step "TEXT" [--lr 1e-3] [--optimizer sgd|adamw] [--steps N] [--other "TEXT"] [--model ID] [--json]
    python -m lmviz grpo "PROMPT" [--group G] [--seed S] [--temperature T] [--max-new-tokens N]
        [--reward number:12|word:Paris|tokens:5] [--scale "sample std"|"population std"|mean] [--lr 1e-3]
        [--loss-type grpo|bnpo|dr_grpo|dapo|luspo] [--level token|sequence] [--epsilon 0.2] [--epsilon-high E]
        [--beta 0.04] [--updates MU] [--kl-ratio|--no-kl-ratio] [--model ID] [--json]
    python -m lmviz bpb "TEXT" [--model ID ...] [--end] [--window N --stride S] [--json]
    python -m lmviz distill "QUESTION" "ANSWER" [--context TEXT] [--teacher ID] [--beta B] [--temperature T] [--hard]
        [--on-policy [--group G] [--seed S] [--lr LR] [--max-new-tokens N]] [--model ID] [--json]
    python -m lmviz prepare [MODEL ...] [--only] [--list]
    python -m lmviz live sweep

``next``: the model's distribution for the token after PREFIX (top K, everything else, greedy;
a seeded sample with --seed; the loss of one true next word with --true-next).
``sft``: the conversation written by the model's chat template, lmviz's answer-only labels, and the
loss with those labels, with TRL's completion-only labels and with every token counted.
``step``: the gradient of TEXT's mean loss with respect to each position's logits, by the formula and by
autograd; then N steps of SGD on every weight (TEXT's and --other's tokens before and after, the loss per
step), or with --optimizer adamw AdamW's first step on the output matrix. The shared weights are not changed.
``grpo``: G answers to PROMPT sampled with the chat template, each scored by the reward rule; the advantages
three ways; the GRPO loss at the first update under each loss type; MU SGD updates on the same group on a copy of
the weights (each one's loss, ‖g‖, clipped count and mean KL), and after the last the clip fraction, the mean KL
and each answer's Σ log π before and after.
``bpb``: TEXT's bits per byte: each predicted token's bytes (read from its piece, and counted after decoding it),
its -ln p in nats and bits, and the sums under lm-evaluation-harness's convention and nanochat's; with --end, the
end-of-text token after the text; with several --model, one line per model; with --window, the text scored in
lm-evaluation-harness's rolling windows, in the strided windows of Hugging Face's perplexity guide (--stride) and
in one pass, each token's context length and -ln p in each.
``distill``: ANSWER scored by the teacher (the model after --context, its system message) and the student (the same
model without it): at each answer token both models' top tokens, the forward KL, the reverse KL and the generalized
JSD at β, at temperature T; the loss with and without T², the β sweep with its jumps at 0 and 1, and the gradient's
size under each convention; with --hard, the cross-entropy on the teacher's greedy answer beside the soft loss;
with --on-policy, G answers the student draws, each token's advantage −(log π_S − log π_T), and the student's KL to
the teacher before and after one SGD step on a copy of the weights.
``prepare``: before class, while online, download the models the pages offer (and MODEL ...), check
that each loads offline, and print where each is and its size; ``--list`` prints what loads offline now.
Bad input prints one sentence on stderr and exits with code 2.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import asdict

from lmviz.core.loss_options import BadOption, LossOptions, with_options
from lmviz.core.numbers import CHECK_DIGITS, PERPLEXITY_DIGITS, fmt, fmt_gap, fmt_grad, fmt_norm, fmt_prob, fmt_signed
from lmviz.core.text import readable_token
from lmviz.core.trl import TRL
from lmviz.errors import BadInput, ChatTemplateError, ModelLoadError, NotEnoughMemory, NothingToScore
from lmviz.lessons import distillation
from lmviz.lessons.bert import analyse_mlm, analyse_nsp
from lmviz.lessons.bits_per_byte import DEFAULT_STRIDE, BadWindow, bits_per_byte, guide_average, rankings, windowed
from lmviz.lessons.chat_loss import analyse_sft
from lmviz.lessons.gradient_step import (
    MAX_LEARNING_RATE,
    MAX_STEPS,
    SIGN_LIKE,
    STEP_MAX_TOKENS,
    adamw_first_step,
    check_learning_rate,
    check_max_norm,
    check_steps,
    check_warmup,
    logit_gradient,
    sgd_steps,
)
from lmviz.lessons.grpo import (
    DEFAULT_BETA,
    DEFAULT_EPSILON,
    LOSS_TYPES,
    MAX_GROUP,
    MAX_NEW_TOKENS,
    MAX_UPDATES,
    MEAN,
    MIN_GROUP,
    POPULATION_STD,
    SAMPLE_STD,
    SCALINGS,
    SEQUENCE,
    TOKEN,
    advantages,
    at_most_tokens,
    check_clip,
    check_sampling,
    check_updates,
    cispo,
    clip_higher,
    contains_number,
    contains_word,
    grpo_step,
    overlong_penalty,
    overlong_shaped,
    rewards,
    sample_group,
)
from lmviz.lessons.next_token import (
    DEFAULT_TOP_K,
    distribution,
    if_true_next,
    next_token_logits,
    sample_token,
)
from lmviz.models.loading import DEFAULT_MODEL, DTYPES, TINY_BERT, load_bert, load_causal_lm
from lmviz.models.settings import default_dtype
from lmviz.serving.scoring import explaining_out_of_memory, score_text


def _progress(fraction: float, message: str) -> None:
    print(f"[{fraction:4.0%}] {message}", file=sys.stderr)


def _number(value: float) -> float | str:
    """JSON has no inf or NaN: write them as strings rather than invalid JSON."""
    return value if math.isfinite(value) else str(value)


def _finite(value):
    """JSON has no inf or NaN: such floats are written as strings, anywhere in the data."""
    if isinstance(value, float):
        return _number(value)
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def _as_json(result) -> str:
    return json.dumps(_finite(result.to_dict()), ensure_ascii=False, indent=2)


def _as_table(result) -> str:
    lines = [f"model: {result.model}   device: {result.device}   tokens: {len(result.tokens)}"]
    if result.truncated_from:
        lines.append(f"(text cut to the first {len(result.tokens)} of {result.truncated_from} tokens)")
    lines.append(f"{'pos':>4}  {'input':<16} {'target':<16} {'id':>7}  {'p(target)':>10}  {'-log p':>9}  {'rank':>6}")
    for row in result.rows:
        lines.append(f"{row.position:>4}  {row.input_token[:16]:<16} {row.target_token[:16]:<16} {row.target_id:>7}  "
                     f"{fmt_prob(row.prob):>10}  {fmt(row.nll):>9}  {row.rank:>6}")
    lines += [
        f"loss (mean -log p)        {fmt(result.loss)}",
        f"  log-softmax, gather     {fmt(result.loss, CHECK_DIGITS)}",
        f"  model's own loss        {fmt(result.loss_model, CHECK_DIGITS)}",
        f"  nn.CrossEntropyLoss     {fmt(result.loss_cross_entropy, CHECK_DIGITS)}",
        f"  largest difference      {fmt_gap(result.max_difference)}",
        f"perplexity exp(loss)      {fmt(result.perplexity, PERPLEXITY_DIGITS)}",
    ]
    return "\n".join(lines)


def _positive_int(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number of at least 1, not {text!r}")
    return int(text)


def _mlm_table(result) -> str:
    lines = [f"model: {result.model}   selected {result.num_selected} of {result.num_eligible} tokens",
             f"{'pos':>4}  {'token':<14} {'branch':<13} {'model reads':<14} {'label':>6}  {'p(orig)':>10}  "
             f"{'-log p':>9}"]
    for r in result.rows:
        p = fmt_prob(r.prob) if r.prob is not None else ""
        nll = fmt(r.nll) if r.nll is not None else ""
        lines.append(f"{r.position:>4}  {r.token[:14]:<14} {r.branch.words:<13} {r.shown[:14]:<14} {r.label:>6}  "
                     f"{p:>10}  {nll:>9}")
    lines += [f"masked-LM loss            {fmt(result.loss)}",
              f"  lmviz mlm_loss          {fmt(result.loss, CHECK_DIGITS)}",
              f"  model's own loss        {fmt(result.loss_model, CHECK_DIGITS)}"]
    return "\n".join(lines)


def _nsp_table(result) -> str:
    return "\n".join([
        f"model: {result.model}",
        "tokens:   " + " ".join(result.tokens),
        "segments: " + " ".join(str(s) for s in result.segment_ids),
        f"logits [B follows A, B from elsewhere]: {fmt(result.logits[0])} {fmt(result.logits[1])}",
        f"softmax:                                {fmt(result.probs[0])} {fmt(result.probs[1])}",
        f"label {result.label} (Hugging Face: 0 = B follows A)",
        f"NSP loss                  {fmt(result.loss_two_logits)}",
        f"  2-logit cross-entropy   {fmt(result.loss_two_logits, CHECK_DIGITS)}",
        f"  1-logit binary CE       {fmt(result.loss_one_logit, CHECK_DIGITS)}",
        f"  model's own loss        {fmt(result.loss_model, CHECK_DIGITS)}",
    ])


def _next_data(loaded, args) -> dict:
    """The JSON of ``next``: the promised fields (model, input_ids, tokens, temperature, top, greedy), and more."""
    result = next_token_logits(loaded, args.text, add_bos=args.bos)
    dist = distribution(result, loaded.tokenizer, args.temperature, args.top_k)
    data = {"model": result.model, "text": result.text, "input_ids": result.input_ids, "tokens": result.tokens,
            "truncated_from": result.truncated_from, "temperature": dist.temperature,
            "top": [asdict(c) for c in dist.top], "greedy": asdict(dist.greedy),
            "everything_else": {"prob": dist.rest_prob, "count": dist.rest_count}}
    if args.seed is not None:
        token_id = sample_token(result.logits, args.temperature, args.seed)
        data["sampled"] = {"seed": args.seed, "token_id": token_id, "token": readable_token(loaded.tokenizer, token_id)}
    if args.true_next is not None:
        data["true_next"] = asdict(if_true_next(result, loaded.tokenizer, args.true_next))
        options = LossOptions(args.label_smoothing, args.z_loss, args.soft_cap, args.shift)
        if options != LossOptions():
            chosen = with_options(result.logits.double().unsqueeze(0), [data["true_next"]["token_id"]], options)
            data["loss_options"] = asdict(chosen)
    return data


def _next_table(data: dict) -> str:
    lines = [f"model: {data['model']}   tokens: {len(data['tokens'])}   temperature: {data['temperature']:g}",
             "prefix: " + "".join(data["tokens"]),
             f"{'rank':>6}  {'token':<16} {'id':>7}  {'logit':>10}  {'p':>10}  {'-log p':>9}"]
    if data["truncated_from"]:
        lines.insert(1, f"(only the last {len(data['tokens'])} of {data['truncated_from']} tokens were read)")
    for c in data["top"]:
        lines.append(f"{c['rank']:>6}  {c['token'][:16]:<16} {c['token_id']:>7}  {fmt(c['logit']):>10}  "
                     f"{fmt_prob(c['prob']):>10}  {fmt(c['nll']):>9}")
    rest = data["everything_else"]
    lines += [f"everything else ({rest['count']:,} tokens): p = {fmt_prob(rest['prob'])}",
              f"greedy: {data['greedy']['token']} (id {data['greedy']['token_id']})"]
    if "sampled" in data:
        lines.append(f"sampled with seed {data['sampled']['seed']}: {data['sampled']['token']} "
                     f"(id {data['sampled']['token_id']})")
    if "true_next" in data:
        true = data["true_next"]
        lines += [f"if the true next token is {true['token']} (id {true['token_id']}): p = {fmt_prob(true['prob'])}, "
                  f"rank {true['rank']}, loss -log p = {fmt(true['nll'])}"] + ([true["note"]] if true["note"] else [])
    if "loss_options" in data:
        chosen, row = data["loss_options"], data["loss_options"]["rows"][0]
        lines += [f"with label smoothing {chosen['options']['label_smoothing']:g}, z-loss "
                  f"{chosen['options']['z_loss']:g}, soft-cap {chosen['options']['soft_cap']}, shift "
                  f"{chosen['options']['shift']:g}: cross-entropy {fmt(chosen['cross_entropy'])} + z-loss "
                  f"{fmt(chosen['z_loss'])} = {fmt(chosen['total'])}",
                  f"  entropy H {fmt(row['entropy'])}, log Z {fmt(row['log_z'])}, mean -log p over all "
                  f"{chosen['classes']:,} tokens {fmt(row['uniform'])}"]
    return "\n".join(lines)


def _sft_data(result) -> dict:
    """The JSON of ``sft``: ``rows`` are the counted positions only; ``labels`` covers every token."""
    chat = result.chat
    return {"model": result.model, "text": chat.text, "input_ids": chat.input_ids, "tokens": chat.tokens,
            "roles": chat.roles, "labels": chat.labels, "rows": [asdict(r) for r in result.rows if r.counted],
            "loss_answer": result.loss_answer, "loss_all": result.loss_all,
            "counted_answer": result.counted_answer, "counted_all": result.counted_all,
            "loss_answer_model": result.loss_answer_model, "loss_all_model": result.loss_all_model,
            "sum_logp_answer": result.sum_logp_answer, "answer_positions": chat.answer_positions,
            "end_of_turn_positions": chat.end_of_turn_positions, "default_system": chat.default_system,
            "markers_typed": chat.markers_typed, "completion_labels": chat.completion_labels,
            "loss_completion": result.loss_completion, "loss_completion_model": result.loss_completion_model,
            "counted_completion": result.counted_completion, "sum_logp_completion": result.sum_logp_completion}


def _sft_table(result) -> str:
    chat = result.chat
    # T tokens make T - 1 predictions (the first token is never predicted): the counts below are of predictions
    lines = [f"model: {result.model}   tokens: {len(chat.input_ids)}   predictions: {result.counted_all}   "
             f"counted (answer only): {result.counted_answer}",
             f"{'pos':>4}  {'input':<14} {'target':<14} {'role':<9} {'label':>7}  {'p(target)':>10}  {'-log p':>9}"]
    for r in result.rows:
        lines.append(f"{r.position:>4}  {r.input_token[:14]:<14} {r.target_token[:14]:<14} {r.target_role:<9} "
                     f"{r.label:>7}  {fmt_prob(r.prob):>10}  {fmt(r.nll):>9}" + ("  counted" if r.counted else ""))
    if chat.markers_typed:
        lines.append("typed as plain text, not as the template's markers: " + " ".join(chat.markers_typed))
    losses = [(f"answer-only loss (lmviz: the answer and its end of turn, {result.counted_answer} labels)",
               fmt(result.loss_answer)),
              ("  model's own loss, these labels", fmt(result.loss_answer_model, CHECK_DIGITS))]
    if result.loss_completion is not None:
        losses += [(f"completion-only loss (TRL: all after the generation prompt, {result.counted_completion} "
                    "labels)", fmt(result.loss_completion)),
                   ("  model's own loss, these labels", fmt(result.loss_completion_model, CHECK_DIGITS))]
    losses += [(f"loss over every prediction (labels = input_ids, all {result.counted_all})", fmt(result.loss_all)),
               ("  model's own loss, labels = input_ids", fmt(result.loss_all_model, CHECK_DIGITS))]
    width = max(len(name) for name, _ in losses) + 3
    return "\n".join(lines + [f"{name:<{width}}{value}" for name, value in losses])


def _check_step(args) -> None:
    """The step's options, checked before the model is loaded: the library's own sentences, and AdamW's limits."""
    check_learning_rate(args.lr)
    check_steps(args.steps)
    check_max_norm(args.max_norm)
    check_warmup(args.warmup, args.steps)
    if args.optimizer == "adamw" and (args.steps != 1 or args.other is not None or args.max_norm is not None
                                      or args.warmup is not None):
        raise BadInput("AdamW's first step is one step on the output matrix, and scores no other text: "
                       "--steps, --other, --max-norm and --warmup go with --optimizer sgd.")


def _step_results(loaded, args) -> tuple:
    """(the gradient with respect to the logits, the steps: SgdSteps or AdamFirstStep)."""
    def compute():
        gradient = logit_gradient(loaded, args.text, add_bos=args.bos)
        if args.optimizer == "adamw":
            return gradient, adamw_first_step(loaded, args.text, args.lr, add_bos=args.bos)
        return gradient, sgd_steps(loaded, args.text, args.lr, args.steps, args.other, add_bos=args.bos,
                                   progress=_progress, max_norm=args.max_norm, warmup=args.warmup)
    return explaining_out_of_memory(loaded, compute, lambda: f"The {loaded.device} ran out of memory for this text.")


def _cut(tokens: int, truncated_from: int | None, what: str = "text") -> list[str]:
    if not truncated_from:
        return []
    why = (f"a step keeps every layer's activations for the backward pass, so it takes at most {STEP_MAX_TOKENS}"
           if tokens == STEP_MAX_TOKENS else "the model's own limit")
    return [f"({what} cut to the first {tokens} of {truncated_from} tokens: {why})"]


def _gradient_table(gradient) -> list[str]:
    n, v = gradient.count, gradient.vocab_size
    lines = [f"model: {gradient.model}   device: {gradient.device}   tokens: {len(gradient.tokens)}   "
             f"labels N: {n}   vocabulary V: {v:,}", *_cut(len(gradient.tokens), gradient.truncated_from),
             "the gradient of the mean loss with respect to the logits: (p − 1)/N at the label, p/N elsewhere",
             f"{'pos':>4}  {'input':<14} {'label':<14} {'p(label)':>10}  {'(p − 1)/N':>10}  {'autograd':>10}  "
             f"{'‖row‖':>10}  {'row sum':>8}  {'gap':>8}  largest others: p/N"]
    for r in gradient.rows:
        others = ", ".join(f"“{token}” {fmt_grad(value)}" for token, _, value in r.others)
        lines.append(f"{r.position:>4}  {r.input_token[:14]:<14} {r.target_token[:14]:<14} {fmt_prob(r.prob):>10}  "
                     f"{fmt_grad(r.label_entry):>10}  {fmt_grad(r.autograd_label_entry):>10}  "
                     f"{fmt_grad(r.row_norm):>10}  {fmt_gap(r.autograd_row_sum):>8}  {fmt_gap(r.max_difference):>8}  "
                     f"{others}")
    return lines + [
        "row sum: autograd's row, its V entries added; gap: the largest |formula − autograd| over the row",
        f"the last token, {gradient.last_token} ({gradient.last_position}), has no label: autograd's gradient there "
        f"is {fmt_gap(gradient.last_row_max)} in every entry",
        f"autograd vs the formula over all {n} × {v:,} entries: largest difference {fmt_gap(gradient.max_difference)}; "
        f"rows sum to 0 within {fmt_gap(gradient.max_row_sum)}",
        f"loss (mean -log p)        {fmt(gradient.loss)}"]


def _sgd_table(result) -> list[str]:
    changes, losses, lr = result.text, result.losses, f"{result.lr:g}"
    lines = [f"one step of SGD at lr = {lr} on every weight ({result.weights:,} weights): w ← w − lr · g",
             f"{'pos':>4}  {'input':<14} {'label':<14} {'p before':>10}  {'p after':>10}  {'-log p before':>13}  "
             f"{'-log p after':>12}"]
    for r in changes.rows:
        lines.append(f"{r.position:>4}  {r.input_token[:14]:<14} {r.target_token[:14]:<14} "
                     f"{fmt_prob(r.prob_before):>10}  {fmt_prob(r.prob_after):>10}  {fmt(r.nll_before):>13}  "
                     f"{fmt(r.nll_after):>12}")
    risen = sum(r.prob_after > r.prob_before for r in changes.rows)
    lines += [f"{risen} of the {len(changes.rows)} labels became more likely",
              f"loss before               {fmt(losses[0])}",
              f"loss after 1 step         {fmt(losses[1])}"]
    if not math.isfinite(losses[-1]):
        lines.append(f"at lr = {lr} the loss is no longer a finite number after the steps: they broke the model. "
                     "Try a smaller learning rate.")
    elif result.loss_rose:
        lines.append(f"at lr = {lr} the first step raised the loss: the rate is too large, and the step overshot "
                     "the valley it was meant to go down into.")
    lines += [f"the loss per step at lr = {lr} (‖g‖: the gradient's length over every weight, taken by that step)",
              f"{'step':>4}  {'loss':>10}  {'‖g‖':>10}", f"{0:>4}  {fmt(losses[0]):>10}"]
    lines += [f"{step:>4}  {fmt(loss):>10}  {fmt_norm(norm):>10}"
              for step, (loss, norm) in enumerate(zip(losses[1:], result.grad_norms), start=1)]
    if result.warmup is not None:
        lines.append(f"rates, {result.warmup} warm-up steps then a cosine to 0: "
                     + " ".join(f"{r:.3g}" for r in result.rates))
    if result.max_norm is not None:
        lines.append(f"gradient clipped at ‖g‖ = {result.max_norm:g}, each step's factor: "
                     + " ".join(f"{f:.4g}" for f in result.clip_factors))
    if result.other is not None:
        moved, last = result.other, f"after {result.steps}"
        lines += [f"another text, scored before and after, never learnt: {moved.text}",
                  *_cut(len(moved.tokens), moved.truncated_from, "the other text"),
                  f"{'pos':>4}  {'input':<14} {'label':<14} {'p before':>10}  {'after 1 step':>12}  {last:>12}"]
        lines += [f"{r.position:>4}  {r.input_token[:14]:<14} {r.target_token[:14]:<14} "
                  f"{fmt_prob(r.prob_before):>10}  {fmt_prob(r.prob_after):>12}  {fmt_prob(r.prob_last):>12}"
                  for r in moved.rows]
        lines.append(f"its loss: {fmt(moved.loss_before)} before, {fmt(moved.loss_after)} after 1 step, "
                     f"{fmt(moved.loss_last)} {last}")
    return lines


def _adamw_table(adam) -> list[str]:
    lr = f"{adam.lr:g}"
    lines = [f"AdamW's first step at lr = {lr}, weight decay λ = {adam.weight_decay:g}, betas {adam.betas}, "
             f"eps {adam.eps:g}, on {adam.description}",
             f"{adam.shape[0]:,} × {adam.shape[1]:,} = {adam.weights:,} weights, every other weight left as it is; "
             f"m and v take {adam.state_bytes / 2**20:,.1f} MiB",
             "at the first step m̂ = g and v̂ = g², so the step is lr · g / (|g| + eps): ±lr, the sign of g, only where "
             "|g| is far above eps; about lr · g / eps where it is far below",
             *[f"|g| {band.gradient}: {band.weights:,} weights ({band.weights / adam.weights:.1%}), step "
               f"{band.step}, mean |Δw| / lr {fmt(band.ratio_mean)}" for band in adam.bands],
             f"weights with |g| ≥ {SIGN_LIKE} · eps: {adam.sign_like:,} of {adam.weights:,}; their |Δw| / lr: mean "
             f"{fmt(adam.ratio_mean)}, "
             f"from {fmt(adam.ratio_min)} to {fmt(adam.ratio_max)}, for |g| from {fmt_gap(adam.gradient_min)} "
             f"to {fmt_gap(adam.gradient_max)}",
             f"|Δw| / lr over every weight: mean {fmt(adam.ratio_mean_all)}",
             "the weights with the largest |g|, the median |g|, the smallest sign-like |g| and the smallest |g| "
             "(each once):",
             f"{'token (row)':<14} {'column':>6}  {'gradient g':>10}  {'SGD −lr·g':>10}  {'AdamW Δw':>10}  "
             f"{'|Δw| / lr':>10}"]
    lines += [f"{w.token[:14]:<14} {w.column:>6}  {fmt_gap(w.gradient):>10}  {fmt_gap(w.sgd_update):>10}  "
              f"{fmt_gap(w.update):>10}  {fmt(w.ratio):>10}" for w in adam.samples]
    return lines + [f"loss before               {fmt(adam.loss_before)}",
                    f"loss after AdamW's step   {fmt(adam.loss_after)}"]


def _step_output(gradient, steps, optimizer: str, as_json: bool) -> str:
    if as_json:
        data = {"gradient": gradient.to_dict(), optimizer: steps.to_dict()}
        return json.dumps(_finite(data), ensure_ascii=False, indent=2)
    table = _adamw_table if optimizer == "adamw" else _sgd_table
    return "\n".join(_gradient_table(gradient) + [""] + table(steps))


# --- grpo: a group of answers, their rewards and advantages, and one step on the GRPO loss -----------------

DEFAULT_REWARD = "number:12"  # the lesson's default: "What is 7 + 5?" is right when it says 12
REWARD_RULES = {"number": contains_number, "word": contains_word, "tokens": at_most_tokens}


def _reward_rule(text: str):
    """The rule ``--reward`` names, KIND:VALUE; the rule's own sentence when VALUE does not fit it."""
    kind, colon, value = text.partition(":")
    if not colon or kind not in REWARD_RULES:
        raise BadInput("The reward is number:N (the answer contains the number N), word:W (it contains the word W) "
                       f"or tokens:N (it is at most N tokens long), for example number:12; got {text!r}.")
    return REWARD_RULES[kind](value)


def _epsilon_high(args) -> float:
    return args.epsilon if args.epsilon_high is None else args.epsilon_high


def _check_grpo(args):
    """The options, checked before the model is loaded, with the library's own sentences; returns the reward rule."""
    check_sampling(args.group, args.seed, args.temperature, args.max_new_tokens)
    check_learning_rate(args.lr)
    check_clip(args.epsilon, _epsilon_high(args), args.level, args.beta)
    check_updates(args.updates)
    if args.overlong_cache is not None:
        overlong_penalty([], args.max_new_tokens, args.overlong_cache)  # its own sentence for a cache it cannot take
    return _reward_rule(args.reward)


def _grpo_results(loaded, args, rule) -> tuple:
    """(the group, its rewards, its advantages by scaling, the step on those of ``--scale``)."""
    def compute():
        group = sample_group(loaded, args.prompt, args.group, args.seed, args.temperature, args.max_new_tokens)
        scores = rewards(group, rule)
        scaled = {how: advantages(scores, how) for how in SCALINGS}
        step = grpo_step(loaded, group, scaled[args.scale].advantages, args.lr, args.loss_type, args.level,
                         args.epsilon, _epsilon_high(args), args.beta, args.updates, args.kl_ratio)
        return group, scores, scaled, step
    return explaining_out_of_memory(loaded, compute, lambda: f"The {loaded.device} ran out of memory for this group.")


def _reward(value: float) -> str:
    return fmt(value, 0) if value.is_integer() else fmt(value)


def _grpo_table(rule, group, scores, scaled, step, scale: str) -> list[str]:
    n, used = group.size, scaled[scale]
    lines = [f"model: {group.model}   device: {group.device}   prompt: {group.prompt!r} "
             f"({len(group.prompt_ids)} tokens with the chat template)",
             f"G = {n} answers drawn at temperature {group.temperature:g} with seed {group.seed}, each up to "
             f"{group.max_new_tokens} new tokens, in {group.seconds:.1f} s",
             f"reward rule {rule.name}: {rule.description}",
             f"{'answer':>6}  {'tokens':>6}  {'end':<8}  {'reward':>6}  text"]
    lines += [f"{i + 1:>6}  {len(a.ids):>6}  {'finished' if a.finished else 'cut':<8}  {_reward(r):>6}  {a.text!r}"
              for i, (a, r) in enumerate(zip(group.answers, scores))]
    squares = math.fsum(used.squares)
    population, sample = scaled[POPULATION_STD], scaled[SAMPLE_STD]
    lines += [f"tokens: what the loss counts, the stopping token included; finished: it drew a stopping token; "
              f"cut: it reached the {group.max_new_tokens}-token limit",
              "",
              f"advantages: mean = ({' + '.join(_reward(r) for r in scores)}) / {n} = {fmt(used.mean)}; "
              f"Σ (R − mean)² = {fmt(squares)}",
              f"  population std = √({fmt(squares)} / {population.divisor}) = {fmt(population.std)}; "
              f"sample std = √({fmt(squares)} / {sample.divisor}) = {fmt(sample.std)}",
              "  mean: A = R − mean; population std, sample std: A = (R − mean) / std",
              f"{'answer':>6}  {'reward':>6}  {'R − mean':>9}  {'mean':>9}  {'population std':>14}  "
              f"{'sample std':>10}"]
    lines += [f"{i + 1:>6}  {_reward(r):>6}  {fmt_signed(d):>9}  {fmt_signed(scaled[MEAN].advantages[i]):>9}  "
              f"{fmt_signed(population.advantages[i]):>14}  {fmt_signed(sample.advantages[i]):>10}"
              for i, (r, d) in enumerate(zip(scores, used.deviations))]
    lines.append(f"the step uses the advantages scaled by: {scale}")
    if used.teaches_nothing:
        lines.append(f"every answer has the reward {_reward(scores[0])}: every R − mean is 0, so every advantage is 0 "
                     "and so is the gradient of the clipped terms. This group teaches nothing; try another seed, a "
                     "larger group, a higher temperature or another rule.")
    before, after = step.before, step.after
    lines += ["", "the loss at the first update (π_θ = π_old = π_ref: every ratio 1, nothing clipped, KL 0), by loss "
                  "type:"]
    lines += [f"  {kind:<8} {fmt(before.losses[kind].loss):>9}" + ("   (the step's)" if kind == step.loss_type else "")
              for kind in LOSS_TYPES]
    epsilons = (f"ε = {step.epsilon_low:g}" if step.epsilon_low == step.epsilon_high
                else f"ε_low = {step.epsilon_low:g}, ε_high = {step.epsilon_high:g}")
    lines += ["",
              f"{len(step.updates)} update(s) of SGD on the same group at lr = {step.lr:g} on every weight "
              f"({step.weights:,} weights) down the {step.loss_type} loss, ratios per {step.level}, {epsilons}, "
              f"β = {step.beta:g}, KL {'× ratio' if step.kl_bias_correction else 'plain k3'}, {step.seconds:.1f} s:"]
    lines += [f"  update {u.number}: loss {fmt(u.loss)}, ‖g‖ = {fmt_norm(u.grad_norm)}, {u.start.clipped_count} of "
              f"{u.start.clip_total} {u.start.clip_unit}s clipped, mean KL {fmt(u.start.mean_kl)}"
              for u in step.updates]
    if len(step.updates) > 1:
        lines += _update_2_variants(step.updates[1].start)
    lines += [f"after the last update: {after.clipped_count} of {after.clip_total} {after.clip_unit}s clipped (clip "
              f"fraction {fmt(after.clip_fraction)}), mean KL to the reference {fmt(after.mean_kl)}, {step.loss_type} "
              f"loss {fmt(before.losses[step.loss_type].loss)} → {fmt(after.losses[step.loss_type].loss)}",
              f"each answer's Σ log π over its tokens (log p of drawing it again at temperature "
              f"{group.temperature:g}), before and after the step:",
              f"{'answer':>6}  {'A':>9}  {'Σ log π before':>14}  {'after':>10}  {'change':>9}"]
    lines += [f"{i + 1:>6}  {fmt_signed(a):>9}  {fmt(old):>14}  {fmt(new):>10}  {fmt_signed(new - old):>9}"
              for i, (a, old, new) in enumerate(zip(step.advantages, step.answer_logps_before,
                                                    step.answer_logps_after))]
    return lines


def _update_2_variants(second) -> list[str]:
    """What clip-higher and CISPO change at update 2, the first where the ratios have moved."""
    lines = []
    found = clip_higher(second)
    if found is not None:
        lines.append(f"  at update 2, clip-higher with ε_high = {found.epsilon_high:g} above ε_low = "
                     f"{second.epsilon_low:g} {'releases' if found.own else 'would release'} {len(found.released)} "
                     f"{second.clip_unit}(s) with A > 0 that the symmetric clip holds")
    if second.level == TOKEN:
        result = cispo(second)
        held = sum(t.takes_clipped for answer in second.tokens for t in answer)
        lines.append(f"  at update 2, CISPO (ε_max = {result.epsilon_max:g}): PPO's clip holds {held} of "
                     f"{second.token_count} tokens (gradient 0); CISPO pushes {result.kept_by_cispo} of them and "
                     f"caps {result.capped}")
    return lines


def _overlong_lines(group, scores, cache: int) -> list[str]:
    """DAPO's soft overlong penalty on each answer, shown beside its reward (the step uses the rewards alone)."""
    shaped = overlong_shaped(group, scores, cache)
    lines = [f"DAPO's soft overlong penalty, L_max = {group.max_new_tokens}, L_cache = {cache} (shown, not used "
             "by the step):", f"{'answer':>6}  {'tokens':>6}  {'penalty':>9}  {'R + penalty':>11}  {'sample std':>10}"]
    lines += [f"{i + 1:>6}  {n:>6}  {fmt_signed(q):>9}  {fmt_signed(r):>11}  {fmt_signed(a):>10}"
              for i, (n, q, r, a) in enumerate(zip(shaped.lengths, shaped.penalties, shaped.rewards,
                                                   shaped.advantages.advantages))]
    return lines


def _grpo_output(rule, group, scores, scaled, step, args) -> str:
    if args.json:
        data = {"group": group.to_dict(), "reward_rule": {"name": rule.name, "description": rule.description},
                "rewards": scores, "advantages": {how: a.to_dict() for how, a in scaled.items()},
                "scale": args.scale, "step": step.to_dict()}
        return json.dumps(_finite(data), ensure_ascii=False, indent=2)
    lines = _grpo_table(rule, group, scores, scaled, step, args.scale)
    if args.overlong_cache is not None:
        lines += [""] + _overlong_lines(group, scores, args.overlong_cache)
    return "\n".join(lines)


# what load_causal_lm uses when --dtype is not given: lmviz.models.settings.default_dtype(), read when the parser
# is built, so that the help says what this run would use
_DTYPE_HELP = "default: float32, or bfloat16 when $LMVIZ_LOW_MEMORY is set (here: {})"


def _per_byte_lines(result) -> list[str]:
    lines = [f"{'convention':<42} {'tokens':>6} {'Σ nats':>11} {'bytes':>6} {'bytes/token':>11} {'bits/byte':>10} "
             f"{'byte ppl':>9}"]
    for sums in (result.harness, result.nanochat, result.decoded):
        if sums is not None:
            lines.append(f"{sums.convention:<42} {sums.tokens:>6} {fmt(sums.nats):>11} {sums.bytes:>6} "
                         f"{sums.bytes_per_token:>11.4f} {fmt(sums.bits_per_byte):>10} "
                         f"{fmt(sums.byte_perplexity, PERPLEXITY_DIGITS):>9}")
    return lines


def _bpb_table(result) -> list[str]:
    lines = [f"model: {result.model}   prefix: {result.prefix}   window: {result.window} ({result.windows} "
             f"window{'s' if result.windows > 1 else ''})",
             f"{'pos':>4}  {'token':<16} {'bytes (hex)':<24} {'bytes':>5} {'decoded':>7} {'context':>7} "
             f"{'-ln p':>9} {'bits':>9}"]
    for row in result.rows:
        raw = "(special)" if row.special else ("-" if row.raw is None else row.raw)
        lines.append(f"{row.position:>4}  {row.token[:16]:<16} {raw[:24]:<24} "
                     f"{'-' if row.byte_count is None else row.byte_count:>5} {row.decoded_byte_count:>7} "
                     f"{row.context:>7} {fmt(row.nll):>9} {fmt(row.bits):>9}")
    lines += _per_byte_lines(result)
    lines.append(f"words (re.split(r'\\s+', text)): {result.harness.words}   word perplexity: "
                 f"{fmt(result.harness.word_perplexity, PERPLEXITY_DIGITS)}")
    if result.nanochat is None:
        lines.append("This tokenizer's tokens are not the text's bytes: only the document's bytes are defined.")
    return lines


def _windowed_lines(scored) -> list[str]:
    ways = [w for w in (scored.harness, scored.strided, scored.whole) if w is not None]
    lines = [f"windows of {scored.window} tokens, stride {scored.stride} (the guide's)",
             f"{'pos':>4}  {'token':<16} " + " ".join(f"{w.name[:21]:>21}" for w in ways),
             f"{'':>4}  {'':<16} " + " ".join(f"{'context':>8} {'-ln p':>12}" for _ in ways)]
    for t in range(1, len(scored.tokens)):
        cells = [f"{'-' if w.context[t] is None else w.context[t]:>8} "
                 f"{'not scored' if w.nll[t] is None else fmt(w.nll[t]):>12}" for w in ways]
        lines.append(f"{t:>4}  {scored.tokens[t][:16]:<16} " + " ".join(cells))
    for w in ways:
        lines.append(f"{w.name:<22} windows {len(w.windows):>3}  scored {w.scored:>5}  Σ nats {fmt(w.nats):>11}  "
                     f"mean {fmt(w.mean)}  lost context {len(w.lost_context()):>4}  never scored "
                     f"{len(w.never_scored())}")
    lines.append("the guide's own average (its window means weighted by labels − 1): "
                 f"{fmt(guide_average(scored.strided))}")
    return lines


def _bpb_output(args) -> str:
    results, scored = [], None
    for name in args.model or [DEFAULT_MODEL]:
        loaded = load_causal_lm(name, device=args.device, dtype=args.dtype, progress=_progress)
        results.append(bits_per_byte(loaded, args.text, end_token=args.end))
        if args.window is not None and scored is None:
            scored = windowed(loaded, args.text, args.window, args.stride)
    if args.json:
        data = {"models": [r.to_dict() for r in results], "windows": scored and scored.to_dict()}
        if len(results) > 1:
            data["best_by_token"], data["best_by_byte"] = rankings(results)
        return json.dumps(_finite(data), ensure_ascii=False, indent=2)
    lines = [line for result in results for line in (*_bpb_table(result), "")]
    if len(results) > 1:
        by_token, by_byte = rankings(results)
        lines += [f"best to worst by loss per token: {', '.join(by_token)}",
                  f"best to worst by bits per byte:  {', '.join(by_byte)}", ""]
    if scored is not None:
        lines += _windowed_lines(scored)
    return "\n".join(lines).rstrip()


def _distill_output(loaded, args) -> str:
    teacher = None if args.teacher is None else load_causal_lm(args.teacher, device=args.device, dtype=args.dtype,
                                                               progress=_progress)
    result = distillation.score_answer(loaded, args.question, args.context, args.answer, args.beta,
                                       args.temperature, teacher)
    hard = distillation.hard_and_soft(loaded, args.question, args.context, args.beta, args.temperature) \
        if args.hard else None
    policy = distillation.on_policy_step(loaded, args.question, args.context, args.group, args.seed, args.lr,
                                         args.max_new_tokens) if args.on_policy else None
    if args.json:
        data = {"answer": result.to_dict(), "hard_and_soft": hard and asdict(hard),
                "on_policy": policy and policy.to_dict()}
        return json.dumps(_finite(data), ensure_ascii=False, indent=2)
    lines = [f"student: {result.model}   teacher: {result.teacher}   β = {result.beta:g}   τ = {result.temperature:g}",
             f"{'pos':>4}  {'token':<14} {'p teacher':>10} {'p student':>10} {'KL(T‖S)':>9} {'KL(S‖T)':>9} "
             f"{'JSD_β':>9}  teacher's top / student's top"]
    for p in result.positions:
        tops = " ".join(f"{t}:{fmt_prob(q)}" for t, q in p.teacher_top[:2]) + " / " + \
            " ".join(f"{t}:{fmt_prob(q)}" for t, q in p.student_top[:2])
        lines.append(f"{p.position:>4}  {p.token[:14]:<14} {fmt_prob(p.p_teacher):>10} {fmt_prob(p.p_student):>10} "
                     f"{fmt(p.forward_kl):>9} {fmt(p.reverse_kl):>9} {fmt(p.jsd):>9}  {tops}")
    lines += [f"loss: mean JSD_β      {fmt(result.loss)}   × τ² = {fmt(result.loss_t_squared)}",
              f"mean KL(T‖S)          {fmt(result.forward_kl)}",
              f"mean KL(S‖T)          {fmt(result.reverse_kl)}",
              f"‖∂loss/∂student logits‖: {fmt_norm(result.gradient_norm)} without τ², "
              f"{fmt_norm(result.gradient_norm_t_squared)} with; {fmt_norm(result.gradient_norm_at_1)} at τ = 1",
              "β sweep (TRL's / the formula alone): " + ", ".join(f"{b:g}: {fmt(trl)} / {fmt(formula)}"
                                                                 for b, trl, formula in result.sweep)]
    if hard:
        lines += [f"teacher's greedy answer: {hard.teacher_answer!r}",
                  f"hard (cross-entropy on it) {fmt(hard.hard)}   soft (JSD_β on its tokens) {fmt(hard.soft)}"]
    if policy:
        lines.append(f"on-policy: {policy.size} answers, seed {policy.seed}, lr {policy.lr:g}")
        for a in policy.answers:
            lines.append(f"  {a.text!r}: advantages " + " ".join(fmt_signed(x, 2) for x in a.advantages))
        lines.append(f"  loss {fmt(policy.loss)}  ‖g‖ {fmt_norm(policy.grad_norm)}  student's KL(S‖T) per token: "
                     f"{fmt(policy.kl_before)} before, {fmt(policy.kl_after)} after")
    return "\n".join(lines)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m lmviz", description="How a language model's loss is computed.")
    commands = parser.add_subparsers(dest="command", required=True)
    clm = commands.add_parser("clm", help="per-token causal-LM loss of a text")
    clm.add_argument("text")
    clm.add_argument("--model", default=DEFAULT_MODEL,
                     help=f"hub id or local folder (default: the bundled {DEFAULT_MODEL})")
    clm.add_argument("--bos", action="store_true", help="prepend the start-of-text token so the first word is scored")
    clm.add_argument("--top-k", type=_positive_int, default=5, help="how many guesses to keep per position")
    clm.add_argument("--dtype", default=None, choices=list(DTYPES), help=_DTYPE_HELP.format(default_dtype()))
    mlm = commands.add_parser("mlm", help="BERT-style masking of a text and the masked-LM loss")
    mlm.add_argument("text")
    mlm.add_argument("--seed", type=int, default=0)
    mlm.add_argument("--mask-prob", type=float, default=0.15)
    mlm.add_argument("--mask-one", action="store_true", help="mask one position if none is selected")
    nsp = commands.add_parser("nsp", help="next-sentence prediction for a pair of sentences")
    nsp.add_argument("sentence_a")
    nsp.add_argument("sentence_b")
    nsp.add_argument("--not-next", action="store_true", help="label the pair as B not following A")
    for command, default in ((mlm, TINY_BERT), (nsp, TINY_BERT)):
        command.add_argument("--model", default=default, help=f"BERT hub id or folder (default: lmviz's own {default})")
    nxt = commands.add_parser("next", help="the model's distribution for the next token after a prefix")
    nxt.add_argument("text")
    nxt.add_argument("--bos", action="store_true", help="prepend the start-of-text token")
    nxt.add_argument("--temperature", type=float, default=1.0,
                     help="divide the logits by T (0.1 to 2) before the softmax")
    nxt.add_argument("--top-k", type=_positive_int, default=DEFAULT_TOP_K, help="how many tokens to list")
    nxt.add_argument("--seed", type=int, default=None, help="also draw one token, reproducibly, with this seed")
    nxt.add_argument("--true-next", default=None, metavar="WORD", help="the loss if the text continued with WORD")
    nxt.add_argument("--label-smoothing", type=float, default=0.0, metavar="E",
                     help="with --true-next: the loss with label smoothing E, as cross_entropy(label_smoothing=E)")
    nxt.add_argument("--z-loss", type=float, default=0.0, metavar="C", help="with --true-next: add C·(log Z)²")
    nxt.add_argument("--soft-cap", type=float, default=None, metavar="C",
                     help="with --true-next: cap the logits at C·tanh(z/C) first")
    nxt.add_argument("--shift", type=float, default=0.0, help="with --true-next: add this to every logit first")
    sft = commands.add_parser("sft", help="a chat template's conversation and its fine-tuning loss, with lmviz's "
                              "answer-only labels, TRL's completion-only labels and every token counted")
    sft.add_argument("user")
    sft.add_argument("answer")
    sft.add_argument("--system", default=None, help="a system message (default: none, or the template's own)")
    step = commands.add_parser("step", help="the gradient of a text's loss with respect to the logits, and steps of "
                               "SGD (or AdamW's first step) on a copy of the weights")
    step.add_argument("text")
    step.add_argument("--bos", action="store_true", help="prepend the start-of-text token")
    step.add_argument("--lr", type=float, default=1e-3,
                      help=f"the learning rate, above 0 and at most {MAX_LEARNING_RATE:g} (default: 0.001)")
    step.add_argument("--optimizer", default="sgd", choices=("sgd", "adamw"),
                      help="sgd: steps on every weight; adamw: AdamW's first step on the output matrix")
    step.add_argument("--steps", type=int, default=1, help=f"how many SGD steps, 1 to {MAX_STEPS} (default: 1)")
    step.add_argument("--other", default=None, metavar="TEXT",
                      help="another text, scored before and after the SGD steps, never learnt")
    step.add_argument("--max-norm", type=float, default=None, metavar="C",
                      help="clip each step's gradient to this norm over every weight (clip_grad_norm_)")
    step.add_argument("--warmup", type=int, default=None, metavar="W",
                      help="a warm-up of W steps, then a cosine decay of the rate to 0 (W below --steps)")
    grpo = commands.add_parser("grpo", help="a group of sampled answers, their rewards and advantages, the GRPO loss "
                               "four ways and one step on it, on a copy of the weights")
    grpo.add_argument("prompt")
    grpo.add_argument("--group", type=int, default=8, metavar="G",
                      help=f"how many answers to sample, {MIN_GROUP} to {MAX_GROUP} (default: 8)")
    grpo.add_argument("--seed", type=int, default=0,
                      help="the seed of the draws: the same seed, the same group (default: 0)")
    grpo.add_argument("--temperature", type=float, default=1.0,
                      help="sample from softmax(logits / T), 0.1 to 2 (default: 1)")
    grpo.add_argument("--max-new-tokens", type=int, default=12, metavar="N",
                      help=f"each answer's token limit, 1 to {MAX_NEW_TOKENS} (default: 12)")
    grpo.add_argument("--reward", default=DEFAULT_REWARD, metavar="RULE",
                      help=f"number:N, word:W or tokens:N (at most N tokens) (default: {DEFAULT_REWARD})")
    grpo.add_argument("--scale", default=SAMPLE_STD, choices=SCALINGS,
                      help=f"the advantages the step uses: R − mean divided by this std, or not (mean) "
                           f"(default: {SAMPLE_STD})")
    grpo.add_argument("--lr", type=float, default=1e-3,
                      help=f"the learning rate, above 0 and at most {MAX_LEARNING_RATE:g} (default: 0.001)")
    grpo.add_argument("--loss-type", default=TRL.loss_type, choices=LOSS_TYPES,
                      help=f"TRL's loss_type (default: {TRL.loss_type}, TRL's)")
    grpo.add_argument("--updates", type=int, default=TRL.num_iterations, metavar="MU",
                      help=f"updates on the same group, TRL's num_iterations; the clip and the KL act from the "
                           f"second on (default: {TRL.num_iterations}, TRL's; at most {MAX_UPDATES})")
    grpo.add_argument("--kl-ratio", action=argparse.BooleanOptionalAction, default=TRL.use_bias_correction_kl,
                      help="multiply the KL estimate k3 by the ratio, TRL's use_bias_correction_kl (default: "
                           f"{'on' if TRL.use_bias_correction_kl else 'off'}, TRL's; --no-kl-ratio: DeepSeekMath's "
                           "plain k3)")
    grpo.add_argument("--level", default=TOKEN, choices=(TOKEN, SEQUENCE),
                      help=f"one ratio per token, or one per answer (GSPO) (default: {TOKEN})")
    grpo.add_argument("--epsilon", type=float, default=DEFAULT_EPSILON,
                      help=f"the clip: the ratio is kept within 1 − ε and 1 + ε (default: {DEFAULT_EPSILON:g})")
    grpo.add_argument("--epsilon-high", type=float, default=None, metavar="E",
                      help="the clip's upper ε, as DAPO's clip-higher (default: --epsilon)")
    grpo.add_argument("--beta", type=float, default=DEFAULT_BETA,
                      help=f"the KL term's weight β (default: {DEFAULT_BETA:g})")
    grpo.add_argument("--overlong-cache", type=int, default=None, metavar="C",
                      help="also show DAPO's soft overlong penalty with L_cache = C tokens before --max-new-tokens "
                           "(the step uses the rewards without it)")
    bpb = commands.add_parser("bpb", help="a text's bits per byte, two conventions, the decoding bug, several models, "
                              "and windows")
    bpb.add_argument("text")
    bpb.add_argument("--model", action="append", default=None, metavar="ID",
                     help=f"hub id or local folder; repeat it to compare models (default: the bundled {DEFAULT_MODEL})")
    bpb.add_argument("--dtype", default=None, choices=list(DTYPES), help=_DTYPE_HELP.format(default_dtype()))
    bpb.add_argument("--end", action="store_true", help="put the end-of-text token after the text")
    bpb.add_argument("--window", type=_positive_int, default=None, metavar="N",
                     help="also score the text in windows of N tokens, three ways (the first --model's)")
    bpb.add_argument("--stride", type=_positive_int, default=DEFAULT_STRIDE, metavar="S",
                     help=f"the perplexity guide's stride, at most N (default: {DEFAULT_STRIDE})")
    distill = commands.add_parser("distill", help="an answer scored by a teacher (the model with a context) and a "
                                  "student (without it): KLs, the generalized JSD, τ², hard vs soft, on-policy")
    distill.add_argument("question")
    distill.add_argument("answer")
    distill.add_argument("--context", default=distillation.DEFAULT_CONTEXT,
                         help="the teacher's system message, which the student does not see")
    distill.add_argument("--teacher", default=None, metavar="ID",
                         help="another model with the same tokenizer as the teacher (default: the --model itself, "
                              "after the context)")
    distill.add_argument("--beta", type=float, default=distillation.DEFAULT_BETA,
                         help="0: forward KL, 1: reverse KL, between: the generalized JSD (default: 0.5)")
    distill.add_argument("--temperature", type=float, default=distillation.DEFAULT_TEMPERATURE,
                         help="τ, dividing both models' logits (default: 1)")
    distill.add_argument("--hard", action="store_true", help="also the teacher's greedy answer, hard vs soft")
    distill.add_argument("--on-policy", action="store_true", help="also answers the student draws and one step")
    distill.add_argument("--group", type=int, default=distillation.DEFAULT_GROUP, metavar="G")
    distill.add_argument("--seed", type=int, default=distillation.DEFAULT_SEED)
    distill.add_argument("--lr", type=float, default=distillation.DEFAULT_RATE)
    distill.add_argument("--max-new-tokens", type=int, default=distillation.DEFAULT_NEW_TOKENS, metavar="N")
    for command in (clm, nxt, sft, step, grpo, distill):
        if command is not clm:
            command.add_argument("--model", default=DEFAULT_MODEL,
                                 help=f"hub id or local folder (default: the bundled {DEFAULT_MODEL})")
            command.add_argument("--dtype", default=None, choices=list(DTYPES),
                                 help=_DTYPE_HELP.format(default_dtype()))
    for command in (clm, mlm, nsp, nxt, sft, step, grpo, bpb, distill):
        command.add_argument("--json", action="store_true", help="print JSON instead of a table")
        command.add_argument("--device", default="auto", help="auto (GPU when present), cpu, cuda, mps")
    prepare = commands.add_parser("prepare", help="before class, while online: download and check the models")
    prepare.add_argument("models", nargs="*", metavar="MODEL", help="hub ids or local folders, besides the defaults")
    prepare.add_argument("--only", action="store_true", help="only the MODELs named, not the defaults")
    prepare.add_argument("--list", action="store_true", help="list what the hub cache holds that loads offline")
    live = commands.add_parser("live", help="the live class's database (LMVIZ_LIVE_DB)")
    live_commands = live.add_subparsers(dest="live_command", required=True)
    live_commands.add_parser("sweep", help="close the rooms idle for hours, deleting their sentences, and delete "
                                           "what closed long ago: what every server does each minute, for cron")
    return parser


def _run(args):
    if args.command == "bpb":
        return _bpb_output(args)
    if args.command in ("next", "sft", "step", "grpo", "distill"):
        if args.command == "step":
            _check_step(args)
        rule = _check_grpo(args) if args.command == "grpo" else None
        loaded = load_causal_lm(args.model, device=args.device, dtype=args.dtype, progress=_progress)
        if args.command == "grpo":
            return _grpo_output(rule, *_grpo_results(loaded, args, rule), args)
        if args.command == "distill":
            return _distill_output(loaded, args)
        if args.command == "step":
            return _step_output(*_step_results(loaded, args), args.optimizer, args.json)
        if args.command == "next":
            data = _next_data(loaded, args)
            return json.dumps(_finite(data), ensure_ascii=False, indent=2) if args.json else _next_table(data)
        result = analyse_sft(loaded, args.user, args.answer, system=args.system)
        return json.dumps(_finite(_sft_data(result)), ensure_ascii=False, indent=2) if args.json else _sft_table(result)
    if args.command == "clm":
        loaded = load_causal_lm(args.model, device=args.device, dtype=args.dtype, progress=_progress)
        result = score_text(loaded, args.text, add_bos=args.bos, top_k=args.top_k)
        return _as_json(result) if args.json else _as_table(result)
    loaded = load_bert(args.model, device=args.device)
    if args.command == "mlm":
        result = analyse_mlm(loaded, args.text, seed=args.seed, mask_prob=args.mask_prob,
                             min_selected=1 if args.mask_one else 0)
        return _as_json(result) if args.json else _mlm_table(result)
    result = analyse_nsp(loaded, args.sentence_a, args.sentence_b, b_follows_a=not args.not_next)
    return _as_json(result) if args.json else _nsp_table(result)


def _live_sweep() -> int:
    """``live sweep``: one sweep of the database LMVIZ_LIVE_DB names, what it did in one sentence."""
    from lmviz.live.codes import LiveProblem
    from lmviz.live.store import IDLE_HOURS, Store

    try:
        with Store() as store:
            swept = store.sweep()
            hours = store.keep_hours
    except LiveProblem as problem:
        print(f"lmviz: {problem}", file=sys.stderr)
        return 2
    def count(n: int, thing: str) -> str:
        return f"{n} {thing}" if n == 1 else f"{n} {thing}s"

    print(f"Swept the live class's database: {count(swept.closed, 'room')} idle for {IDLE_HOURS:g} hours closed "
          f"and {count(swept.sentences, 'sentence')} of theirs deleted; {count(swept.deleted, 'room')} closed more "
          f"than {hours:g} hours ago deleted, with their questions and answers.")
    return 0


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "live":
        return _live_sweep()
    if args.command == "prepare":  # prints its own table and one sentence per model it could not prepare
        from lmviz.models import offline

        return offline.list_cached() if args.list else offline.run(args.models, only=args.only)
    try:
        print(_run(args))
    except (ModelLoadError, NothingToScore, BadInput, BadWindow, distillation.BadSetting,
            ChatTemplateError, BadOption) as problem:
        print(f"lmviz: {problem}", file=sys.stderr)
        return 2
    except NotEnoughMemory as problem:
        on_gpu = problem.device.startswith("cuda")
        smaller = "a smaller --group or a lower --max-new-tokens" if args.command == "grpo" else "a shorter text"
        print(f"lmviz: {problem} Try {smaller}{', or --device cpu' if on_gpu else ''}.", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
