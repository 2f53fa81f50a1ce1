"""Where the probabilities come from: the model's scores for the next token, and what is done with them.

One forward pass gives the logits at the last position of a prefix: one score per token of the
vocabulary. Everything else on the "Next token" page is computed from those kept logits, without
running the model again, except the figure Your sentence shows for a chosen true next token, which
comes from that page's own pass over the continued text:

- ``softmax_with_temperature``: logits ÷ T, then softmax: the distribution a generator draws from;
- ``distribution``: the top K tokens (logit, probability, -log p, rank) and "everything else";
- ``greedy_token`` (the arg-max) and ``sample_token`` (a seeded draw), and ``append_token`` to
  continue the prefix with the chosen token, one step at a time;
- ``if_true_next``: if the text really continued with token X, the loss this position would add
  in training: -log p(X) at T = 1, in float64 and in float32 (training's arithmetic);
  ``row_in_whole_text`` finds the same position in "Your sentence"'s analysis of the continued text,
  whose own forward pass gives the figure that page shows;
- ``hand_digits``: how many decimals the worked softmax needs for a learner to get p back by hand;
- ``build_questions``: the page's check-yourself questions, from the same kept logits.

Argument checks live in the ``_check_*`` helpers, so that the functions a page shows with
"Show the code" hold only the computation.
"""

from __future__ import annotations

import inspect
import math
from dataclasses import dataclass
from decimal import Decimal

import torch

from lmviz.core.numbers import LOSS_DIGITS, fmt, fmt_prob
from lmviz.core.text import readable_token, start_token_id, valid_text
from lmviz.errors import BadInput, NothingToScore
from lmviz.lessons.causal_lm import length_limit

MIN_TEMPERATURE, MAX_TEMPERATURE = 0.1, 2.0
DEFAULT_TOP_K = 20


@dataclass
class NextTokenLogits:
    """The model's scores for the token that follows ``input_ids``: all that the page needs, kept
    so that another temperature, another K or another sample needs no new forward pass."""
    model: str
    text: str  # the prefix as the model read it (decoded from input_ids)
    input_ids: list[int]
    tokens: list[str]  # input_ids, readable
    logits: torch.Tensor  # (V,) float32 on the CPU: the scores at the last position
    bos_added: bool
    truncated_from: int | None  # the prefix's token count when only its last tokens were read
    device: str

    @property
    def vocab_size(self) -> int:
        return self.logits.shape[-1]


@dataclass
class Candidate:
    """One token of the vocabulary as a possible next token, at one temperature."""
    token: str  # readable
    token_id: int
    logit: float  # the model's raw score z (before dividing by T)
    scaled_logit: float  # z / T, what the softmax exponentiates
    prob: float  # softmax(z / T) at this token
    nll: float  # -log prob: at T = 1 the loss this position adds if this token is the true next one
    rank: int  # 1 = the highest logit (dividing by T never changes the order)


@dataclass
class Distribution:
    temperature: float
    top: list[Candidate]  # the K most likely, most likely first
    rest_prob: float  # "everything else": the summed probability of the other V - K tokens
    rest_count: int  # V - K
    greedy: Candidate  # the arg-max: what greedy decoding picks, at any temperature
    log_normalizer: float  # log Σ_j exp(z_j / T): p_i = exp(z_i / T - log_normalizer)
    vocab_size: int


@dataclass
class TrueNext:
    """If the text continued with this token: what training would charge this position."""
    token: str
    token_id: int
    logit: float
    prob: float  # p(token) at T = 1, as in training
    nll: float  # -log p: the loss this position would add, in float64
    # The same from the same logits in float32, as training and the model's own loss compute it: the page
    # reports nll_float32 - nll, float32's rounding for this text, rather than a bound that holds for one V only.
    nll_float32: float
    rank: int
    typed: str | None  # the text the word was read as (with the separating space added), when given as a word
    pieces: list[str]  # that text's tokens (only the first is the next token)
    note: str | None  # one sentence when the word is several tokens


# --- reading the prefix and running the model -----------------------------------------------------

def _prefix_ids(tokenizer, text: str, add_bos: bool) -> list[int]:
    """The prefix's token ids, read as lmviz.core.text.encode reads a text (typed special tokens stay
    text). Unlike a text to score, one token is enough: the model predicts what follows it."""
    if not text or not text.strip():
        raise NothingToScore("There is nothing to continue: the text is empty, so type the beginning of a sentence.")
    ids = tokenizer(valid_text(text), add_special_tokens=False, split_special_tokens=True)["input_ids"]
    if not ids:
        raise NothingToScore("The tokenizer reads no token in this text: type a few words.")
    return [start_token_id(tokenizer), *ids] if add_bos else ids


def _keep_last(ids: list[int], limit: int, bos_added: bool) -> tuple[list[int], int | None]:
    """A prefix longer than the model reads: keep its end, which is what the next token follows
    (and the start token, when one was added)."""
    if len(ids) <= limit:
        return ids, None
    return ([ids[0], *ids[len(ids) - limit + 1:]] if bos_added else ids[-limit:]), len(ids)


def next_token_logits(loaded, text: str, add_bos: bool = False) -> NextTokenLogits:
    """The scores ``loaded`` (a lmviz.models.loading.LoadedModel) gives every token to follow ``text``."""
    ids = _prefix_ids(loaded.tokenizer, text, add_bos)
    return next_token_logits_from_ids(loaded, ids, bos_added=add_bos)


def next_token_logits_from_ids(loaded, ids: list[int], bos_added: bool = False) -> NextTokenLogits:
    """The same from token ids (a prefix continued one token at a time, see ``append_token``)."""
    if not ids:
        raise NothingToScore("There is nothing to continue: the prefix has no token.")
    for token_id in ids:
        _check_token_id(token_id, loaded.model.config.vocab_size)
    ids, truncated_from = _keep_last(list(ids), length_limit(loaded.model)[0], bos_added)
    logits = _last_position_logits(loaded, ids)  # (V,)
    return NextTokenLogits(
        model=loaded.name, text=loaded.tokenizer.decode(ids), input_ids=ids,
        tokens=[readable_token(loaded.tokenizer, i) for i in ids], logits=logits,
        bos_added=bos_added, truncated_from=truncated_from, device=loaded.device)


def _last_position_logits(loaded, ids: list[int]) -> torch.Tensor:
    input_ids = torch.tensor([ids], device=loaded.device)  # (1, T)
    # Only the last position's scores are needed: models that can (logits_to_keep) skip the
    # (T, V) projection of the others, which is most of the memory of a long prefix.
    keep = {"logits_to_keep": 1} if "logits_to_keep" in inspect.signature(loaded.model.forward).parameters else {}
    with torch.inference_mode():
        logits = loaded.model(input_ids=input_ids, **keep).logits  # (1, T or 1, V)
    return logits[0, -1].float().cpu()  # (V,) float32: the digits the page shows, whatever the weights' dtype


# --- from logits to probabilities -----------------------------------------------------------------

def _check_temperature(temperature: float) -> None:
    is_number = isinstance(temperature, (int, float)) and not isinstance(temperature, bool)
    if not is_number or not MIN_TEMPERATURE <= temperature <= MAX_TEMPERATURE:
        raise BadInput(f"The temperature must be a number from {MIN_TEMPERATURE} to {MAX_TEMPERATURE:g}; "
                       f"got {temperature!r}.")


def softmax_with_temperature(logits: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """p = softmax(logits / T). logits: (V,) -> (V,), summing to 1.

    T < 1 sharpens the distribution (the largest logit takes more of the mass), T > 1 flattens it;
    T = 1 is the model's own distribution, the one training scores.
    """
    _check_temperature(temperature)
    # float64 (from the float32 logits): the probabilities of 49 152 tokens then add up to 1 in every
    # digit a page shows; in float32 "everything else" drifts by 1e-5
    return torch.softmax(logits.double() / temperature, dim=-1)  # (V,)


def rank_of(logits: torch.Tensor, token_id: int) -> int:
    """1 + how many tokens score higher: 1 is the model's favourite. logits: (V,)."""
    return int((logits > logits[token_id]).sum()) + 1


def _check_top_k(top_k: int, vocab_size: int) -> None:
    if isinstance(top_k, bool) or not isinstance(top_k, int) or not 1 <= top_k <= vocab_size:
        raise BadInput(f"K must be a whole number from 1 to the vocabulary size, {vocab_size:,}; got {top_k!r}.")


def distribution(result: NextTokenLogits, tokenizer, temperature: float = 1.0,
                 top_k: int = DEFAULT_TOP_K) -> Distribution:
    """The K most likely next tokens at temperature T, and everything else summed."""
    _check_temperature(temperature)
    _check_top_k(top_k, result.vocab_size)
    scaled = result.logits.double() / temperature  # (V,), float64 as in softmax_with_temperature
    log_p = torch.log_softmax(scaled, dim=-1)  # (V,): -log p from log_softmax, never log(softmax), which underflows
    top_log_p, top_ids = log_p.topk(top_k)  # (K,), (K,)
    # the rest, summed in log space as well: 1 - sum(top) would lose the digits of a small remainder
    rest_log_p = log_p.scatter(0, top_ids, -math.inf).logsumexp(0)
    top = [_candidate(result.logits, scaled, log_p, int(i), tokenizer) for i in top_ids]
    return Distribution(
        temperature=temperature, top=top, rest_prob=rest_log_p.exp().item(), rest_count=result.vocab_size - top_k,
        greedy=_candidate(result.logits, scaled, log_p, greedy_token(result.logits), tokenizer),
        log_normalizer=torch.logsumexp(scaled, 0).item(), vocab_size=result.vocab_size)


def _candidate(logits, scaled, log_p, token_id: int, tokenizer) -> Candidate:
    return Candidate(token=readable_token(tokenizer, token_id), token_id=token_id, logit=logits[token_id].item(),
                     scaled_logit=scaled[token_id].item(), prob=log_p[token_id].exp().item(),
                     nll=-log_p[token_id].item(), rank=rank_of(logits, token_id))


MOST_HAND_DIGITS = 12  # a float64 z/T near 20 holds about 14 decimals; more would show rounding noise


def hand_digits(candidate: Candidate, log_normalizer: float) -> int | None:
    """The fewest decimals (the page's usual 5 or more) for z/T and log Σ e^(z/T) from which a learner gets the
    page's p back by hand: e^(z/T written out − log Σ written out), rounded as the page rounds p. Rounding both
    to 5 decimals moves their difference by up to 1e-5, and p by as much relative to itself, which can change
    its sixth decimal. None if even MOST_HAND_DIGITS decimals do not give it back."""
    wanted = fmt_prob(candidate.prob)
    for digits in range(LOSS_DIGITS, MOST_HAND_DIGITS + 1):
        if fmt_prob(math.exp(hand_exponent(candidate.scaled_logit, log_normalizer, digits))) == wanted:
            return digits
    return None


def hand_exponent(scaled_logit: float, log_normalizer: float, digits: int) -> float:
    """z/T − log Σ e^(z/T), each first written out with ``digits`` decimals, subtracted exactly as written."""
    return float(Decimal(fmt(scaled_logit, digits)) - Decimal(fmt(log_normalizer, digits)))


# --- choosing the next token ----------------------------------------------------------------------

def greedy_token(logits: torch.Tensor) -> int:
    """Greedy decoding: the token with the highest logit (the same at every temperature). logits: (V,)."""
    return int(torch.argmax(logits))


def _check_seed(seed: int) -> None:
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**63:
        raise BadInput(f"The seed must be a whole number of at least 0; got {seed!r}.")


def sample_token(logits: torch.Tensor, temperature: float = 1.0, seed: int = 0) -> int:
    """One draw from softmax(logits / T), reproducible: the same seed gives the same token."""
    _check_seed(seed)
    probs = softmax_with_temperature(logits, temperature)  # (V,)
    generator = torch.Generator().manual_seed(seed)  # its own generator: the draw never depends on other code
    return int(torch.multinomial(probs, num_samples=1, generator=generator))


def _check_token_id(token_id: int, vocab_size: int) -> None:
    if isinstance(token_id, bool) or not isinstance(token_id, int) or not 0 <= token_id < vocab_size:
        raise BadInput(f"A token id must be a whole number from 0 to {vocab_size - 1:,}; got {token_id!r}.")


def append_token(result: NextTokenLogits, tokenizer, token_id: int) -> tuple[list[int], str]:
    """The prefix continued with ``token_id``: its ids and its text. Generating is this, repeated:
    score the new prefix (next_token_logits_from_ids), choose, append."""
    _check_token_id(token_id, result.vocab_size)
    ids = [*result.input_ids, token_id]
    return ids, tokenizer.decode(ids)


# --- "if the true next token is X": the loss of this position -------------------------------------

def if_true_next(result: NextTokenLogits, tokenizer, target: int | str) -> TrueNext:
    """If the text continued with ``target`` (a token id, or a typed word whose first token is
    taken), what training would charge this position: -log p(target) at T = 1."""
    token_id, typed, pieces, note = _target_token(result, tokenizer, target)
    log_p = torch.log_softmax(result.logits.double(), dim=-1)  # (V,): T = 1, as in training
    return TrueNext(token=readable_token(tokenizer, token_id), token_id=token_id,
                    logit=result.logits[token_id].item(), prob=log_p[token_id].exp().item(),
                    nll=-log_p[token_id].item(),
                    nll_float32=-torch.log_softmax(result.logits.float(), -1)[token_id].item(),
                    rank=rank_of(result.logits, token_id), typed=typed, pieces=pieces, note=note)


def row_in_whole_text(result: NextTokenLogits, token_id: int, analysis):
    """The row of ``analysis`` (lmviz.lessons.causal_lm.analyse_clm's, or the batched path's, of the prefix
    continued with ``token_id``: what Your sentence shows for that text) that predicts ``token_id`` after exactly
    this prefix's tokens. None when the whole text reads as other tokens (the new token merges with the last one,
    or the prefix was cut here to its end and there to its beginning): no position there is this one."""
    n = len(result.input_ids)
    if analysis.input_ids[:n + 1] != [*result.input_ids, token_id] or len(analysis.rows) < n:
        return None
    row = analysis.rows[n - 1]  # row t predicts input t + 1
    return row if row.target_id == token_id else None


def _target_token(result: NextTokenLogits, tokenizer, target) -> tuple[int, str | None, list[str], str | None]:
    """(token id, the text encoded, the word's tokens, a sentence about them) for an id or a word."""
    if not isinstance(target, str):
        _check_token_id(target, result.vocab_size)
        return target, None, [readable_token(tokenizer, target)], None
    encoded, ids = continuation_ids(result, tokenizer, target)
    pieces = [readable_token(tokenizer, i) for i in ids]
    note = None
    if len(ids) > 1:
        note = (f"{target.strip()!r} is {len(ids)} tokens for this tokenizer ({' + '.join(pieces)}): "
                f"the next token is only its first, {pieces[0]}.")
    return ids[0], encoded, pieces, note


def continuation_ids(result: NextTokenLogits, tokenizer, word: str) -> tuple[str, list[int]]:
    """The text that continues the prefix and its tokens, for a typed ``word``.

    A word that starts with a letter or digit gets the space that separates words, unless the
    prefix already ends with one ("is" + "Paris" reads " Paris"). The word is tokenized in place
    (prefix + word, less the prefix's tokens), because many tokenizers write the space into the
    word's first token; where the word would merge with the prefix's last token, it is tokenized alone.
    """
    if not word or not word.strip():
        raise BadInput("Type a word, or pick a token from the list.")
    prefix = result.input_ids[1:] if result.bos_added else result.input_ids
    prefix_text = tokenizer.decode(prefix)
    word = valid_text(word)
    if word[0].isalnum() and prefix_text and not prefix_text[-1].isspace():
        word = " " + word
    whole = tokenizer(prefix_text + word, add_special_tokens=False, split_special_tokens=True)["input_ids"]
    ids = whole[len(prefix):] if whole[:len(prefix)] == prefix else []
    ids = ids or tokenizer(word, add_special_tokens=False, split_special_tokens=True)["input_ids"]
    _check_known(tokenizer, word, ids, result.vocab_size)
    return word, ids


def _check_known(tokenizer, word: str, ids: list[int], vocab_size: int) -> None:
    unknown = tokenizer.unk_token_id
    if not ids or ids[0] >= vocab_size or (unknown is not None and ids[0] == unknown):
        raise BadInput(f"This model's tokenizer cannot write {word.strip()!r} as tokens of its vocabulary "
                       "(it would read it as an unknown token): type another word.")


# --- check yourself -----------------------------------------------------------------------------------

def other_temperature(temperature: float) -> float:
    """The temperature the questions ask about: twice this one, or half where twice is off the slider."""
    return round(2 * temperature if 2 * temperature <= MAX_TEMPERATURE else temperature / 2, 6)


def question_inputs(result: NextTokenLogits, tokenizer, shown: Distribution,
                    true_next: TrueNext | None) -> tuple[Distribution, TrueNext, bool]:
    """What the page's questions (lmviz.course.questions.next_token) are made from, besides ``shown``: the same
    logits at the other temperature they ask about (its greedy token is all they read), the true next token
    (the learner's, else the second most likely standing in for it), and whether the learner chose it."""
    at_other = distribution(result, tokenizer, other_temperature(shown.temperature), top_k=1)
    stand_in = true_next or if_true_next(result, tokenizer, shown.top[min(1, len(shown.top) - 1)].token_id)
    return at_other, stand_in, true_next is not None
