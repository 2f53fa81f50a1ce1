"""Where a step's time goes, and the step against one forward and backward pass of the same tokens, in one run.

    python -m benchmarks.step_parts [--quick] [--repeats 3]

On the bundled SmolLM2-135M, in float32 on the CPU (and on a CUDA device when there is one):

1. One step of learning's SGD step (lmviz.lessons.gradient_step) on texts of 16 and 256 tokens, in its parts:
   the private copy of the model, the forward pass with its graph, the backward pass with the update in it
   (``descend``), and the re-scoring after the step; beside them, the reference: one forward and backward pass of
   the same tokens (cross-entropy's mean, every weight's gradient kept, nothing updated), and the ratio issue 38
   sets at most 1.5: (forward + backward with the update) ÷ the reference. The copy and the re-scoring are not
   in the ratio (the step is "the gradient and the update").
2. RL fine-tuning's update on the lesson's default group (lmviz.lessons.grpo, benchmarks.grpo's prompt and
   seed, G = 8, 32 tokens): one update (the group's forward, the loss's terms, the backward with the update)
   against one forward and backward of the group as TRL runs it (its _get_per_token_logps: the padded group,
   logits kept for the answer tokens only, log-softmax at the tokens, the masked mean); and the group's sampling
   against model.generate drawing the same number of new tokens with its key/value cache.

Each time is the median of ``--repeats`` runs, the parts interleaved, after a warm-up; the load average is printed.
--quick (for CI) runs 16 tokens, one repeat, and a group of 2 with 4 tokens: it proves the script works.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.nn.functional as F

from benchmarks.gradient_step import LR, load_average, text_of_length, warm
from benchmarks.grpo import PROMPT, SEED, TEMPERATURE
from lmviz.lessons.causal_lm import make_request
from lmviz.lessons.gradient_step import _logits, _token_nll, descend, private_copy
from lmviz.lessons.grpo import clip_terms, group_logprobs, sample_group
from lmviz.models.loading import DEFAULT_MODEL, load_causal_lm

LENGTHS = (16, 256)
GROUP, LIMIT = 8, 32


def timed(call, device: str) -> float:
    start = time.perf_counter()
    call()
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    return time.perf_counter() - start


def sgd_parts(loaded, ids: torch.Tensor) -> dict:
    """One SGD step's parts, in seconds, and the reference forward and backward."""
    device, parts, kept = loaded.device, {}, {}
    parts["copy"] = timed(lambda: kept.update(module=private_copy(loaded.model)), device)
    parts["forward"] = timed(
        lambda: kept.update(loss=F.cross_entropy(_logits(kept["module"], ids)[:-1], ids[1:])), device)
    parts["backward + update"] = timed(lambda: descend(kept["module"], kept.pop("loss"), LR), device)
    parts["re-scoring"] = timed(lambda: _token_nll(kept.pop("module"), ids), device)
    reference = private_copy(loaded.model)
    parts["forward + backward (reference)"] = timed(
        lambda: F.cross_entropy(_logits(reference, ids)[:-1], ids[1:]).backward(), device)
    return parts


def trl_forward_backward(module, prompt: list[int], answers: list[list[int]]) -> None:
    """One forward and backward of the group as TRL's _get_per_token_logps and its masked mean run it."""
    device = next(module.parameters()).device
    width = max(len(a) for a in answers)
    ids = torch.tensor([prompt + a + [0] * (width - len(a)) for a in answers], device=device)
    mask = torch.tensor([[1] * len(a) + [0] * (width - len(a)) for a in answers], device=device)
    attention = torch.cat([torch.ones(len(answers), len(prompt), dtype=mask.dtype, device=device), mask], dim=1)
    logits = module(input_ids=ids, attention_mask=attention, logits_to_keep=width + 1).logits[:, :-1]
    logps = torch.log_softmax(logits.float() / TEMPERATURE, -1).gather(-1, ids[:, len(prompt):, None])[..., 0]
    (-(logps * mask).sum() / mask.sum()).backward()


def grpo_parts(loaded, group) -> dict:
    device, parts = loaded.device, {}
    prompt, answers = group.prompt_ids, [a.ids for a in group.answers]
    advantage = torch.linspace(-1, 1, len(answers), device=device)

    def update():
        module = private_copy(loaded.model)
        logp, mask = group_logprobs(module, prompt, answers, TEMPERATURE)
        old = logp.detach()
        loss = (clip_terms(logp, old, advantage, mask, 0.2, 0.2, "token", old, 0.04, False)["loss"] * mask).sum() \
            / mask.sum()
        descend(module, loss, LR)
    parts["one update"] = timed(update, device)
    parts["forward + backward as TRL (reference)"] = timed(
        lambda: trl_forward_backward(private_copy(loaded.model), prompt, answers), device)
    return parts


def sampling_parts(loaded, size: int, limit: int) -> dict:
    parts, kept = {}, {}
    parts["sample_group"] = timed(lambda: kept.update(group=sample_group(loaded, PROMPT, size, SEED, TEMPERATURE,
                                                                          limit)), loaded.device)
    group = kept["group"]
    new_tokens = max(len(a.ids) for a in group.answers)
    ids = torch.tensor([group.prompt_ids] * size, device=loaded.device)
    parts["model.generate (reference)"] = timed(lambda: loaded.model.generate(
        ids, attention_mask=torch.ones_like(ids), do_sample=True, temperature=TEMPERATURE, top_k=0, top_p=1.0,
        max_new_tokens=new_tokens, min_new_tokens=new_tokens, use_cache=True,
        pad_token_id=loaded.tokenizer.eos_token_id), loaded.device)
    return parts, group


def medians(runs: list[dict]) -> dict:
    return {name: statistics.median(run[name] for run in runs) for name in runs[0]}


def report(title: str, parts: dict, step: list[str], reference: str, target: float) -> None:
    print(f"\n{title}")
    print("| part | ms |\n|---|---:|")
    for name, seconds in parts.items():
        print(f"| {name} | {1000 * seconds:.0f} |")
    ratio = sum(parts[name] for name in step) / parts[reference]
    print(f"| ({' + '.join(step)}) ÷ {reference} | **{ratio:.2f}** (target ≤ {target:g}) |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="16 tokens, one repeat, a group of 2 (for CI)")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    lengths, repeats, (size, limit) = ((16,), 1, (2, 4)) if args.quick else (LENGTHS, args.repeats, (GROUP, LIMIT))
    devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    print(f"{DEFAULT_MODEL}, float32, torch {torch.__version__}, {torch.get_num_threads()} CPU threads; "
          f"load average {load_average()} at the start." + ("" if len(devices) > 1 else " No CUDA device: the GPU "
                                                            "is not measured."))
    for device in devices:
        loaded = load_causal_lm(DEFAULT_MODEL, device=device, dtype="float32")
        warm(loaded)
        for length in lengths:
            ids = torch.tensor(make_request(loaded, text_of_length(loaded, length)).ids, device=loaded.device)
            sgd_parts(loaded, ids)  # warm-up
            parts = medians([sgd_parts(loaded, ids) for _ in range(repeats)])
            report(f"{device}: one SGD step, {length} tokens", parts, ["forward", "backward + update"],
                   "forward + backward (reference)", 1.5)
        sampled, group = sampling_parts(loaded, size, limit)  # also the warm-up of the group's calls
        grpo_parts(loaded, group)
        runs = [(sampling_parts(loaded, size, limit)[0], grpo_parts(loaded, group)) for _ in range(repeats)]
        tokens = sum(len(a.ids) for a in group.answers)
        report(f"{device}: GRPO, one update on a group of {size} ({tokens} answer tokens)",
               medians([g for _, g in runs]), ["one update"], "forward + backward as TRL (reference)", 1.5)
        report(f"{device}: GRPO, sampling the group", medians([s for s, _ in runs]), ["sample_group"],
               "model.generate (reference)", 1.2)
        del loaded
    print(f"\nload average {load_average()} at the end.")


if __name__ == "__main__":
    main()
