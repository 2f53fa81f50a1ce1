"""Building BERT's training inputs, showing every random choice.

``create_mlm_mask`` picks the positions a masked LM must predict and what it
sees there; ``create_nsp_pairs`` builds the sentence pairs for next-sentence
prediction. Both draw from a seeded ``torch.Generator`` so that the same seed
gives the same result on every rerun of a page, and both return, beside the
tensors a model needs, the choices they made.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from lmviz.core.labels import IGNORE_INDEX, IS_NEXT_HF, Branch
from lmviz.core.text import pad_right


@dataclass(frozen=True)
class MlmMask:
    """The result of ``create_mlm_mask``.

    It unpacks like the pair of the module lmviz grew from:
    ``masked_input_ids, masked_positions = create_mlm_mask(...)``.
    """

    masked_input_ids: torch.Tensor  # (B, T) what the model sees
    masked_positions: torch.Tensor  # (B, T) bool, the positions it is scored on
    branch: torch.Tensor  # (B, T) Branch values
    labels: torch.Tensor  # (B, T) original id where selected, -100 elsewhere (Hugging Face's labels)

    def __iter__(self):
        return iter((self.masked_input_ids, self.masked_positions))


def _new_generator(seed: int | None, generator: torch.Generator | None) -> torch.Generator:
    """The caller's generator, else one seeded with ``seed`` (None: a fresh random seed).
    Draws happen on the CPU whatever the tensors' device, so a seed gives the same mask on a GPU."""
    if generator is not None:
        return generator
    new = torch.Generator()
    if seed is None:
        new.seed()
    else:
        new.manual_seed(int(seed))
    return new


def _check_probability(name: str, value: float) -> None:
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"{name} must be between 0 and 1; got {value}.")


def replacement_pool(vocab_size: int, mask_token_id: int, special_token_ids=()) -> torch.Tensor:
    """The ids a "random token" is drawn from: the vocabulary without the special
    tokens and [MASK]. (Hugging Face's collator and the original BERT draw from
    the whole vocabulary, special tokens included.)"""
    ids = torch.arange(vocab_size)
    return ids[~torch.isin(ids, torch.tensor(sorted({*special_token_ids, mask_token_id})))]


def create_mlm_mask(
    input_ids: torch.Tensor,
    mask_token_id: int,
    vocab_size: int,
    mask_prob: float = 0.15,
    random_replace_prob: float = 0.1,
    keep_original_prob: float = 0.1,
    special_token_ids: tuple[int, ...] | list[int] = (),
    attention_mask: torch.Tensor | None = None,
    seed: int | None = 0,
    generator: torch.Generator | None = None,
    min_selected: int = 0,
) -> MlmMask:
    """BERT-style masking.

    Each position that is neither a special token nor padding is selected with
    probability ``mask_prob``. A selected position becomes [MASK] with
    probability 1 - random_replace_prob - keep_original_prob (0.8 by default),
    a random token with probability ``random_replace_prob`` and stays unchanged
    with probability ``keep_original_prob``. One uniform number per position
    decides the branch, so the three shares are exactly the ones asked for.
    (Hugging Face's collator draws twice, the second time with 0.5 = 0.1 / 0.2
    of what is left after [MASK]; the probabilities are the same.)
    min_selected: select more positions (at random among the eligible) in any
    row that got fewer; a short sentence at 15 % often gets none, and a masked
    LM has nothing to learn from a row with no selected position.
    Random tokens are drawn from ``replacement_pool``.
    Which positions can be selected: every one except the ids listed in
    ``special_token_ids``, [MASK], and where ``attention_mask`` is 0. With the
    defaults (no special ids, no attention mask) [CLS], [SEP] and [PAD] can be
    selected like any word: pass ``tokenizer.all_special_ids`` and the attention
    mask, as lmviz's pages and training do.
    """
    if input_ids.dim() != 2:
        raise ValueError(f"input_ids must be (batch, seq_len); got shape {tuple(input_ids.shape)}.")
    if attention_mask is not None and attention_mask.shape != input_ids.shape:
        raise ValueError(
            f"attention_mask {tuple(attention_mask.shape)} and input_ids {tuple(input_ids.shape)} "
            "must have the same shape."
        )
    for name, value in (("mask_prob", mask_prob), ("random_replace_prob", random_replace_prob),
                        ("keep_original_prob", keep_original_prob)):
        _check_probability(name, value)
    if random_replace_prob + keep_original_prob > 1.0 + 1e-9:
        raise ValueError(
            f"random_replace_prob + keep_original_prob must be at most 1 (the rest becomes [MASK]); "
            f"got {random_replace_prob} + {keep_original_prob}."
        )
    gen = _new_generator(seed, generator)
    ids = input_ids.cpu()
    # [MASK] itself is never selected nor drawn as a "random" token, even if the caller did not list it
    never = torch.tensor(sorted({*special_token_ids, mask_token_id}), dtype=ids.dtype)
    eligible = ~torch.isin(ids, never)
    if attention_mask is not None:
        eligible &= attention_mask.cpu().bool()

    selected = (torch.rand(ids.shape, generator=gen) < mask_prob) & eligible
    order = torch.rand(ids.shape, generator=gen)  # the order in which extra positions are taken
    for row in range(ids.shape[0]):
        missing = min_selected - int(selected[row].sum())
        if missing > 0:
            candidates = (eligible[row] & ~selected[row]).nonzero().squeeze(-1)
            extra = candidates[order[row, candidates].argsort()[:missing]]
            selected[row, extra] = True
    branch_draw = torch.rand(ids.shape, generator=gen)
    mask_share = 1.0 - random_replace_prob - keep_original_prob
    to_mask = selected & (branch_draw < mask_share)
    to_random = selected & (branch_draw >= mask_share) & (branch_draw < mask_share + random_replace_prob)
    to_keep = selected & ~to_mask & ~to_random

    pool = replacement_pool(vocab_size, mask_token_id, special_token_ids)
    random_ids = pool[torch.randint(len(pool), ids.shape, generator=gen)]

    masked_input_ids = ids.clone()
    masked_input_ids[to_mask] = mask_token_id
    masked_input_ids[to_random] = random_ids[to_random]
    branch = torch.full(ids.shape, Branch.NOT_SELECTED)
    branch[to_mask], branch[to_random], branch[to_keep] = Branch.MASKED, Branch.RANDOM, Branch.KEPT
    device = input_ids.device
    return MlmMask(
        masked_input_ids=masked_input_ids.to(device),
        masked_positions=selected.to(device),
        branch=branch.to(device),
        labels=ids.masked_fill(~selected, IGNORE_INDEX).to(device),
    )


@dataclass(frozen=True)
class NspPairs:
    """The result of ``create_nsp_pairs``; unpacks like the triple of the module lmviz grew from
    ``input_ids, segment_ids, labels``."""

    input_ids: torch.Tensor  # (P, L) [CLS] A [SEP] B [SEP], right-padded
    segment_ids: torch.Tensor  # (P, L) 0 for [CLS] A [SEP], 1 for B [SEP] (token_type_ids)
    attention_mask: torch.Tensor  # (P, L) 0 at padding
    labels: torch.Tensor  # (P,) next_sentence_label
    sentence_a: list[int]  # index of sentence A in the input list, per pair
    sentence_b: list[int]  # index of sentence B in the input list, per pair

    def __iter__(self):
        return iter((self.input_ids, self.segment_ids, self.labels))


def _negative_candidates(a_index: int, num_sentences: int, doc_ids: list | None) -> list[int]:
    """Sentences that do not follow sentence ``a_index``, taken from the B places
    (odd indices) only: when A is a span of several sentences, as in BERT, a
    not-next B drawn from the A places would often be longer than any true B,
    and a model could tell the two labels apart by length alone. Of those, the
    ones from other documents when documents are known (as BERT did), else any
    but A's true successor."""
    b_places = range(1, num_sentences, 2)
    if doc_ids is not None:
        return [j for j in b_places if doc_ids[j] != doc_ids[a_index]]
    return [j for j in b_places if j != a_index + 1]


def create_nsp_pairs(
    sentences: list[list[int]],
    cls_token_id: int,
    sep_token_id: int,
    pad_token_id: int,
    doc_ids: list | None = None,
    is_next_label: int = IS_NEXT_HF,
    seed: int | None = 0,
    generator: torch.Generator | None = None,
) -> NspPairs:
    """Sentence pairs for next-sentence prediction.

    sentences: token-id lists in reading order; sentence 2i+1 follows sentence 2i.
    doc_ids: optional, the document each sentence comes from; negatives are
        then drawn from other documents.
    For each A = sentences[2i] the result holds two pairs: the true next
    sentence (label ``is_next_label``) and a real sentence from elsewhere in
    the corpus (the other label). The module lmviz grew from filled B with random token ids
    instead, which no real text looks like and a model spots from the tokens alone.
    The special ids come from the caller's tokenizer.
    """
    if len(sentences) < 2:
        raise ValueError("Next-sentence prediction needs at least two sentences: an A and a B that follows it.")
    if doc_ids is not None and len(doc_ids) != len(sentences):
        raise ValueError(f"doc_ids has {len(doc_ids)} entries for {len(sentences)} sentences.")
    gen = _new_generator(seed, generator)
    rows, segments, labels, a_indices, b_indices = [], [], [], [], []
    for a in range(0, len(sentences) - 1, 2):
        candidates = _negative_candidates(a, len(sentences), doc_ids)
        if not candidates:
            raise ValueError("There is no sentence from elsewhere to use as a negative (not-next) example.")
        negative = candidates[int(torch.randint(len(candidates), (1,), generator=gen))]
        for b, label in ((a + 1, is_next_label), (negative, 1 - is_next_label)):
            sa, sb = list(sentences[a]), list(sentences[b])
            rows.append([cls_token_id, *sa, sep_token_id, *sb, sep_token_id])
            segments.append([0] * (len(sa) + 2) + [1] * (len(sb) + 1))
            labels.append(label)
            a_indices.append(a)
            b_indices.append(b)
    padded, attention_mask = pad_right(rows, pad_token_id)
    return NspPairs(
        input_ids=torch.tensor(padded),
        segment_ids=torch.tensor(pad_right(segments, 0)[0]),
        attention_mask=torch.tensor(attention_mask),
        labels=torch.tensor(labels),
        sentence_a=a_indices,
        sentence_b=b_indices,
    )
