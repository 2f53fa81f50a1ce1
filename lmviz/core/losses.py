"""The four pre-training objectives: causal LM, masked LM, next-sentence
prediction, and the combined BERT loss.

Every function takes logits (never a model, never a tokenizer) and returns
``(loss, info)``: ``loss`` is a differentiable scalar tensor, ``info`` a dict
with the same summary keys as language_modeling_losses.py, the module lmviz grew
from (``loss``, ``accuracy``, ...),
plus the per-position detail the pages draw:

    target_ids    the id each position is asked to predict (-100 where nothing)
    target_probs  p(target) at each position (0.0 where nothing counts)
    nll           -log p(target) at each position (0.0 where nothing counts)
    counted       bool, which positions enter the mean
    predictions   the arg-max id at each position

All of them reduce to one cross-entropy over the counted positions, computed
in float32 from ``log_softmax`` (never ``softmax().log()``, which underflows
to log(0) = -inf for unlikely tokens).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from lmviz.core.labels import IGNORE_INDEX, IS_NEXT_HF


def _at_least_float32(logits: torch.Tensor) -> torch.Tensor:
    """Half-precision log-probabilities lose the digits the pages show, so
    fp16/bf16 logits are upcast (as Hugging Face does); float64 stays float64."""
    return logits.float() if logits.dtype in (torch.float16, torch.bfloat16) else logits


def token_cross_entropy(logits: torch.Tensor, labels: torch.Tensor, ignore_index: int = IGNORE_INDEX):
    """Cross-entropy at every position, keeping the per-position values.

    logits: (..., V), labels: (...). Returns (loss, detail) where loss is the
    mean of -log p(label) over positions whose label is not ``ignore_index``
    (exactly what ``F.cross_entropy(..., ignore_index=...)`` computes).
    """
    if logits.shape[:-1] != labels.shape:
        raise ValueError(
            f"logits {tuple(logits.shape)} and labels {tuple(labels.shape)} do not match: "
            "logits must have one more (vocabulary) dimension than labels."
        )
    if labels.dtype.is_floating_point or labels.dtype == torch.bool:
        raise ValueError(f"labels must be integer token ids; got dtype {labels.dtype}.")
    counted = labels != ignore_index
    if not bool(counted.any()):
        raise ValueError("No position counts towards the loss (every label is ignored), so the mean is undefined.")
    vocab_size = logits.shape[-1]
    if bool(((labels[counted] < 0) | (labels[counted] >= vocab_size)).any()):
        raise ValueError(f"labels must be between 0 and {vocab_size - 1} (or {ignore_index} to ignore a position).")
    logits = _at_least_float32(logits)
    safe_labels = labels.masked_fill(~counted, 0)  # any valid index; these positions are zeroed below
    log_probs = torch.log_softmax(logits, dim=-1)  # (..., V)
    target_log_probs = log_probs.gather(-1, safe_labels.unsqueeze(-1)).squeeze(-1)  # (...)
    nll = torch.where(counted, -target_log_probs, torch.zeros_like(target_log_probs))
    loss = nll.sum() / counted.sum()
    with torch.no_grad():
        predictions = logits.argmax(dim=-1)
        detail = {
            "target_ids": labels.masked_fill(~counted, ignore_index),
            "target_probs": torch.where(counted, target_log_probs.exp(), 0.0).detach(),
            "nll": nll.detach(),
            "counted": counted,
            "predictions": predictions,
            "accuracy": float(((predictions == labels) & counted).sum() / counted.sum()),
        }
    return loss, detail


def perplexity(loss: float) -> float:
    """exp(loss); infinite rather than an OverflowError past float range."""
    return math.exp(loss) if loss < 709.0 else math.inf


def _check_ids_match_logits(logits: torch.Tensor, ids: torch.Tensor, ids_name: str) -> None:
    if logits.dim() != 3:
        raise ValueError(f"logits must be (batch, seq_len, vocab_size); got shape {tuple(logits.shape)}.")
    if ids.shape != logits.shape[:2]:
        raise ValueError(
            f"{ids_name} {tuple(ids.shape)} does not match logits {tuple(logits.shape)}: "
            f"expected {ids_name} of shape {tuple(logits.shape[:2])}."
        )


def _check_clm_inputs(logits, input_ids, labels, attention_mask) -> None:
    """Shapes that clm_loss can work with, or one sentence saying which does not fit."""
    _check_ids_match_logits(logits, input_ids, "input_ids")
    for name, tensor in (("labels", labels), ("attention_mask", attention_mask)):
        if tensor is not None and tensor.shape != input_ids.shape:
            raise ValueError(f"{name} {tuple(tensor.shape)} and input_ids {tuple(input_ids.shape)} "
                             "must have the same shape.")


def _require_a_target(labels: torch.Tensor, ignore_index: int) -> None:
    if not bool((labels != ignore_index).any()):
        raise ValueError(
            "There is no next token to predict: a causal LM needs at least two tokens "
            "(or a beginning-of-sequence token before the first word)."
        )


def clm_loss(
    logits: torch.Tensor,
    input_ids: torch.Tensor,
    shift_labels: bool = True,
    attention_mask: torch.Tensor | None = None,
    labels: torch.Tensor | None = None,
    ignore_index: int = IGNORE_INDEX,
):
    """Causal-LM (next-token) loss, as GPT, Llama and Hugging Face compute it.

    logits: (B, T, V). input_ids: (B, T).
    labels: (B, T), default ``input_ids``; -100 marks positions that never count.
    attention_mask: (B, T), 0 at padding; a padding token is never a target
        and a padding position never predicts.
    shift_labels: position t is scored on token t+1 (the usual case). We shift
        the labels, not the logits, and pad them with -100 so the result keeps
        shape (B, T): every input position has a row, the last one predicts nothing.
        With ``shift_labels=False`` the labels are taken as already aligned.
    """
    _check_clm_inputs(logits, input_ids, labels, attention_mask)
    labels = input_ids if labels is None else labels
    if attention_mask is not None:
        labels = labels.masked_fill(attention_mask == 0, ignore_index)  # a padding token is never a target
    if shift_labels:
        # (B, T) -> (B, T): labels[t] becomes the token at t+1, the last position gets -100
        labels = F.pad(labels[:, 1:], (0, 1), value=ignore_index)
    if attention_mask is not None:
        # A padding position predicts nothing, not even the first real token after left padding.
        # (Hugging Face's models count that one prediction, so with left padding their loss differs.)
        labels = labels.masked_fill(attention_mask == 0, ignore_index)
    _require_a_target(labels, ignore_index)
    loss, detail = token_cross_entropy(logits, labels, ignore_index)
    info = {
        "loss": loss.item(),
        "perplexity": perplexity(loss.item()),
        "num_tokens": int(detail["counted"].sum()),
        **detail,
    }
    return loss, info


def mlm_loss(
    logits: torch.Tensor,
    input_ids: torch.Tensor,
    masked_positions: torch.Tensor | None,
    labels: torch.Tensor | None = None,
    ignore_index: int = IGNORE_INDEX,
):
    """Masked-LM loss: cross-entropy at the selected positions only.

    logits: (B, T, V), computed by the model from the *masked* input.
    input_ids: (B, T), the *original* tokens (what the model must recover).
    masked_positions: (B, T) bool, True at the positions selected for prediction
        (whether they became [MASK], a random token, or were kept).
        ``None`` means: take them from ``labels != -100`` (Hugging Face style).
    labels: (B, T), default ``input_ids``.
    """
    _check_ids_match_logits(logits, input_ids, "input_ids")
    if masked_positions is None and labels is None:
        raise ValueError("Say which positions are masked: give masked_positions, or labels with -100 elsewhere.")
    if labels is None:
        labels = input_ids
    elif labels.shape != input_ids.shape:
        raise ValueError(f"labels {tuple(labels.shape)} and input_ids {tuple(input_ids.shape)} "
                         "must have the same shape.")
    if masked_positions is None:
        masked_positions = labels != ignore_index
    if masked_positions.shape != input_ids.shape:
        raise ValueError(
            f"masked_positions {tuple(masked_positions.shape)} and input_ids {tuple(input_ids.shape)} "
            "must have the same shape."
        )
    if not bool(masked_positions.any()):
        raise ValueError(
            "No position is masked, so the masked-LM loss has nothing to average "
            "(the module lmviz grew from returned NaN here). Select at least one position."
        )
    mlm_labels = labels.masked_fill(~masked_positions.bool(), ignore_index)
    loss, detail = token_cross_entropy(logits, mlm_labels, ignore_index)
    num_masked = int(detail["counted"].sum())
    info = {
        "loss": loss.item(),
        "num_masked": num_masked,
        "masking_rate": num_masked / input_ids.numel(),
        **detail,
    }
    return loss, info


def flip_nsp_labels(labels: torch.Tensor) -> torch.Tensor:
    """Convert NSP labels between the flipped convention of the module lmviz grew from
    (1 = B follows A) and Hugging Face's (0 = B follows A). The conversion is its own inverse."""
    return 1 - labels


def nsp_loss(logits: torch.Tensor, labels: torch.Tensor, is_next_label: int = IS_NEXT_HF):
    """Next-sentence-prediction loss, a binary classification of each pair.

    logits: (B, 2), one score per class (class i is label i), as in
        BertForPreTraining; or (B, 1), a single score for label 1, scored
        with a sigmoid (binary cross-entropy). Both give the same loss when
        the single logit equals logit[1] - logit[0].
    labels: (B,), 0 or 1.
    is_next_label: which label means "B follows A". Hugging Face uses 0
        (``IS_NEXT_HF``), the module lmviz grew from used 1 (``IS_NEXT_FLIPPED``). It only changes
        how the info is reported (``p_is_next``, ``num_positive``), not the loss.
    """
    if logits.dim() != 2 or logits.shape[-1] not in (1, 2) or labels.shape != logits.shape[:1]:
        raise ValueError(
            f"NSP expects logits (batch, 2) or (batch, 1) and labels (batch,); "
            f"got logits {tuple(logits.shape)} and labels {tuple(labels.shape)}."
        )
    if labels.dtype.is_floating_point or not bool(((labels == 0) | (labels == 1)).all()):
        raise ValueError(f"NSP labels must be the integers 0 or 1; got {labels.tolist()}.")
    if is_next_label not in (0, 1):
        raise ValueError(f"is_next_label must be 0 or 1; got {is_next_label}.")
    logits = _at_least_float32(logits)
    if logits.shape[-1] == 1:
        score = logits.squeeze(-1)  # the logit of label 1
        loss = F.binary_cross_entropy_with_logits(score, labels.float())
        # sigmoid(s) = softmax([0, s])[1]: a single logit is a 2-logit head whose first logit is 0
        log_probs = torch.stack([F.logsigmoid(-score), F.logsigmoid(score)], dim=-1)  # (B, 2)
    else:
        loss = F.cross_entropy(logits, labels)
        log_probs = torch.log_softmax(logits, dim=-1)  # (B, 2)
    with torch.no_grad():
        probs = log_probs.detach().exp()
        predictions = probs.argmax(dim=-1)
        target_log_probs = log_probs.detach().gather(-1, labels.unsqueeze(-1)).squeeze(-1)
        info = {
            "loss": loss.item(),
            "accuracy": float((predictions == labels).float().mean()),
            "num_positive": int((labels == is_next_label).sum()),
            "num_negative": int((labels != is_next_label).sum()),
            "is_next_label": is_next_label,
            "probs": probs,
            "p_is_next": probs[:, is_next_label],
            "target_probs": target_log_probs.exp(),
            "nll": -target_log_probs,
            "predictions": predictions,
        }
    return loss, info


def bert_loss(
    mlm_logits: torch.Tensor,
    nsp_logits: torch.Tensor,
    input_ids: torch.Tensor,
    masked_positions: torch.Tensor | None,
    nsp_labels: torch.Tensor,
    mlm_weight: float = 1.0,
    nsp_weight: float = 1.0,
    labels: torch.Tensor | None = None,
    is_next_label: int = IS_NEXT_HF,
):
    """BERT's pre-training loss: mlm_weight * L_MLM + nsp_weight * L_NSP.

    With both weights 1 this is what ``BertForPreTraining(...).loss`` returns.
    """
    if nsp_logits.shape[:1] != input_ids.shape[:1]:
        raise ValueError(f"The MLM batch has {input_ids.shape[0]} sequences but the NSP batch has "
                         f"{nsp_logits.shape[0]} (nsp_logits {tuple(nsp_logits.shape)}); they must be the same pairs.")
    mlm_value, mlm_info = mlm_loss(mlm_logits, input_ids, masked_positions, labels)
    nsp_value, nsp_info = nsp_loss(nsp_logits, nsp_labels, is_next_label)
    total = mlm_weight * mlm_value + nsp_weight * nsp_value
    info = {
        "total_loss": total.item(),
        "mlm_weight": mlm_weight,
        "nsp_weight": nsp_weight,
        "mlm_info": mlm_info,
        "nsp_info": nsp_info,
    }
    return total, info
