"""The loss chat models are fine-tuned with: supervised fine-tuning (SFT), and which tokens it counts.

A chat model is trained on conversations written out by its chat template (for SmolLM2:
``<|im_start|>user\\n...<|im_end|>\\n<|im_start|>assistant\\n...<|im_end|>\\n``). Which tokens count
in the loss is a choice, made by the labels (-100, ``ignore_index``, where a token does not count):

- lmviz's answer-only labels (``chat_tokens``): the assistant's answer and the end-of-turn token that
  stops it, nothing else.
- TRL's completion-only loss (``completion_only_loss``, its default for a prompt-completion dataset):
  every token after the prompt rendered with ``add_generation_prompt=True``, which for ChatML also
  takes in the newline after ``<|im_end|>`` (``completion_labels``). TRL's DPOTrainer sums its
  log-probabilities over the same tokens.
- TRL's default for a plain conversation (``messages``) dataset: every token, labels = input ids.
- TRL's ``assistant_only_loss=True`` counts what a ``{% generation %}`` block of the template marks
  (``has_generation_block``); SmolLM2's template has none.

Which tokens are the answer and which is the end-of-turn token is read from the template itself,
never from token strings typed here: the conversation is rendered once with a placeholder for
each message, so the template's own text around each message is known (``chat_pieces``); the
end-of-turn is the template's first control token after the answer. Text typed by the learner
is always read as plain text: a typed ``<|im_start|>`` stays characters and opens no turn, as
``apply_chat_template(..., sanitize_control_tokens=True)`` encodes it.

With a model: p and -log p at every position (``analyse_sft``), the loss with each of the three
labellings; two answers compared (``compare_answers``), and the DPO loss built from summed
log-probabilities (``dpo_loss``). The page's check-yourself questions are made from the analysis
(lmviz.course.questions.chat_loss).
"""

from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass

import torch

from lmviz.core.labels import IGNORE_INDEX
from lmviz.core.text import readable_token, valid_text
from lmviz.core.trl import PREFERENCE
from lmviz.errors import BadInput, ChatTemplateError, NoChatTemplate, NothingToScore
from lmviz.lessons.causal_lm import length_limit

TEMPLATE = "template"  # the role of text the chat template writes itself (markers, role names, newlines)
# The three labellings a page can show, in its order: lmviz's, TRL's completion-only, every token
ANSWER, COMPLETION, EVERY = "answer", "completion", "every"
DEFAULT_BETA = PREFERENCE.dpo_beta  # TRL's DPOConfig default
# The Chat page's conversation until the learner types their own; RL fine-tuning's reward-model section starts
# from the same pair
DEFAULT_QUESTION = "What is the capital of France?"
DEFAULT_CHOSEN = "The capital of France is Paris."
DEFAULT_REJECTED = "The capital of France is Berlin."
# A placeholder per message: private-use characters that no template changes and no one types
_SENTINEL = "\U000f0010{}\U000f0011"
_SENTINEL_RE = re.compile("\U000f0010(\\d+)\U000f0011")
# TRL's test for a {% generation %} block (trl.chat_template_utils.has_generation_markers), trim marks allowed
_GENERATION_BLOCK = re.compile(r"\{%-?\s*generation\s*-?%\}")


@dataclass
class ChatTokens:
    """A conversation as its chat template writes it, token by token, with the answer-only labels."""
    text: str  # the rendered conversation
    input_ids: list[int]
    tokens: list[str]  # readable
    roles: list[str]  # per token: "system", "user", "assistant" or "template"
    labels: list[int]  # input_ids where the token counts, -100 elsewhere (not shifted: the model shifts them)
    answer_positions: list[int]  # the answer's tokens
    end_of_turn_positions: list[int]  # what the template writes right after the answer, up to its end-of-turn token
    default_system: str | None  # a system message the template adds when none is given (SmolLM2 has one)
    markers_typed: list[str]  # the template's control tokens found in typed text: read as plain characters
    completion_start: int | None  # where TRL's completion-only mask starts: the prompt's tokens rendered
    #                               with add_generation_prompt=True (None where they are not a prefix)
    same_as_transformers: bool | None  # input_ids == apply_chat_template(..., sanitize_control_tokens=True)
    completion_labels: list[int] | None  # TRL's completion-only labels: -100 up to completion_start, ids after
    end_of_turn_is_control: bool  # the counted end of turn ends at a control token (not a stand-in: see below)
    special_tokens: list[str]  # the tokenizer's special tokens (added tokens flagged special), in id order
    special_written: list[str]  # those of them the template wrote in this conversation, in order of appearance
    has_generation_block: bool  # the template has {% generation %}, which TRL's assistant_only_loss=True needs

    @property
    def counted(self) -> list[int]:
        return [p for p, label in enumerate(self.labels) if label != IGNORE_INDEX]

    def labels_for(self, which: str) -> list[int] | None:
        """The labels of one labelling: ANSWER (lmviz's), COMPLETION (TRL's, None where it cannot be
        told), EVERY (labels = input ids: the prompt counts too)."""
        return {ANSWER: self.labels, COMPLETION: self.completion_labels, EVERY: self.input_ids}[which]


# --- the template, read with placeholders --------------------------------------------------------

def _check_template(tokenizer) -> None:
    if not getattr(tokenizer, "chat_template", None):
        raise NoChatTemplate("This model's tokenizer has no chat template, so it has no chat format to fine-tune: "
                             "choose a chat model such as the bundled SmolLM2-135M-Instruct.")


def _render(tokenizer, messages: list[dict], add_generation_prompt: bool = False) -> str:
    try:
        return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=add_generation_prompt)
    except Exception as error:  # jinja2's TemplateError, or raise_exception() called by the template itself
        said = (str(error).strip().splitlines() or [type(error).__name__])[0].rstrip(".")
        raise ChatTemplateError(f"This model's chat template refuses this conversation: {said}.") from error


def _messages(user: str, answer: str, system: str | None) -> list[dict]:
    system_message = [] if system is None else [{"role": "system", "content": system}]
    return system_message + [{"role": "user", "content": user}, {"role": "assistant", "content": answer}]


def _split_at_placeholders(tokenizer, messages: list[dict]) -> list[str]:
    """The template's own text between the messages: render with placeholders and cut there."""
    marked = [{**m, "content": _SENTINEL.format(n)} for n, m in enumerate(messages)]
    parts = _SENTINEL_RE.split(_render(tokenizer, marked))  # [text, "0", text, "1", ..., text]
    if [int(n) for n in parts[1::2]] != list(range(len(messages))):
        raise ChatTemplateError("This model's chat template does not write each message once and in order, "
                                "so lmviz cannot tell which tokens belong to which message.")
    return parts[0::2]


def chat_pieces(tokenizer, messages: list[dict]) -> list[tuple[str, str]]:
    """The rendered conversation as (text, role) pieces: the template's text and each message's text."""
    _check_template(tokenizer)
    between = _split_at_placeholders(tokenizer, messages)
    rendered = _render(tokenizer, messages)
    for written in (lambda text: text, str.strip):  # templates write a message as it is, or trimmed (Gemma, Llama 3)
        contents = [written(m["content"]) for m in messages]
        if "".join(p for pair in zip(between, contents + [""]) for p in pair) == rendered:
            pieces = [(between[0], TEMPLATE)]
            for message, content, after in zip(messages, contents, between[1:]):
                pieces += [(content, message["role"]), (after, TEMPLATE)]
            return pieces
    raise ChatTemplateError("This model's chat template changes the text of the messages (more than trimming "
                            "spaces), so lmviz cannot tell which tokens belong to which message.")


def _with_default_system(tokenizer, pieces: list[tuple[str, str]], messages: list[dict]) -> tuple[list, str | None]:
    """Where no system message is given, some templates write their own (SmolLM2: "You are a helpful
    AI assistant named SmolLM..."). Found by comparing with a rendering that has a system placeholder:
    the text that stands where the placeholder stood is the template's default system message."""
    try:
        before, after = _split_at_placeholders(tokenizer, [{"role": "system", "content": ""}, *messages])[:2]
    except ChatTemplateError:  # a template that refuses system messages has no default one either
        return pieces, None
    opening = pieces[0][0]
    if len(opening) <= len(before) + len(after) or not (opening.startswith(before) and opening.endswith(after)):
        return pieces, None
    default = opening[len(before):len(opening) - len(after)]
    return [(before, TEMPLATE), (default, "system"), (after, TEMPLATE), *pieces[1:]], default


# --- tokens: the template's markers as markers, typed text as text --------------------------------

def control_tokens(tokenizer) -> tuple[str, ...]:
    """The tokens only the template may write, as transformers' sanitize_control_tokens defines them:
    the special tokens, and the added tokens the template's text contains (or those the tokenizer
    lists as chat_control_tokens)."""
    listed = getattr(tokenizer, "chat_control_tokens", None)
    template = tokenizer.chat_template
    return tuple(token.content for token in tokenizer.added_tokens_decoder.values()
                 if token.special or (token.content in listed if listed is not None
                                      else token.content in template and not token.content.isspace()))


def special_tokens(tokenizer) -> tuple[str, ...]:
    """The tokenizer's special tokens: every added token flagged special (SmolLM2 has 17, of which its
    chat template writes two), in id order. Wider than all_special_tokens, which lists only the named
    ones (bos_token, eos_token, ...)."""
    return tuple(token.content for _, token in sorted(tokenizer.added_tokens_decoder.items()) if token.special)


def has_generation_block(tokenizer) -> bool:
    """Whether the chat template marks what the assistant writes with {% generation %}: what
    transformers' return_assistant_tokens_mask, and so TRL's assistant_only_loss=True, reads."""
    return bool(_GENERATION_BLOCK.search(tokenizer.chat_template or ""))


def _typed_markers(pieces: list[tuple[str, str]], typed: list[bool],
                   controls: tuple[str, ...]) -> list[tuple[int, int]]:
    """(start, end) in the rendered text of every control token inside typed text."""
    if not controls:
        return []
    pattern = re.compile("|".join(map(re.escape, sorted(controls, key=len, reverse=True))))  # longest first
    spans, start = [], 0
    for (text, _), is_typed in zip(pieces, typed):
        if is_typed:
            spans += [(start + m.start(), start + m.end()) for m in pattern.finditer(text)]
        start += len(text)
    return spans


def _encode_run(tokenizer, text: str, as_text: bool, first: bool) -> tuple[list[int], list[tuple[int, int]]]:
    """ids and character offsets of one run of the rendered text. A run after the first is encoded
    after a newline that is then dropped, as transformers does, so that a SentencePiece tokenizer
    does not add the space it puts at the start of a text."""
    def encode(piece):
        try:
            out = tokenizer(piece, add_special_tokens=False, split_special_tokens=as_text, return_offsets_mapping=True)
        except NotImplementedError as error:  # offsets need a "fast" (Rust) tokenizer
            raise ChatTemplateError("This model's tokenizer cannot tell which characters each token comes from, "
                                    "so lmviz cannot tell which tokens belong to which message.") from error
        return out["input_ids"], [tuple(o) for o in out["offset_mapping"]]
    if not first:
        newline = tokenizer("\n", add_special_tokens=False)["input_ids"]
        ids, offsets = encode("\n" + text)
        if ids[:len(newline)] == newline:
            return ids[len(newline):], [(s - 1, e - 1) for s, e in offsets[len(newline):]]
    return encode(text)


def _encode(tokenizer, text: str, markers: list[tuple[int, int]]) -> tuple[list[int], list[tuple[int, int]]]:
    """The rendered text's ids and offsets: cut only around typed control tokens, which are read as text."""
    cuts = [0, *[c for span in markers for c in span], len(text)]
    ids, offsets = [], []
    for n, (start, end) in enumerate(zip(cuts, cuts[1:])):
        if start == end:
            continue
        run_ids, run_offsets = _encode_run(tokenizer, text[start:end], as_text=n % 2 == 1, first=start == 0)
        marker_id = tokenizer.convert_tokens_to_ids(text[start:end])
        if n % 2 == 1 and marker_id in run_ids and marker_id != tokenizer.unk_token_id:  # an unknown word is no turn
            raise ChatTemplateError(f"This tokenizer cannot write {text[start:end]!r} as plain text, "
                                    "so typing it would open a turn: remove it from the message.")
        ids += run_ids
        offsets += [(s + start, e + start) for s, e in run_offsets]
    return ids, offsets


def _roles(pieces: list[tuple[str, str]], offsets: list[tuple[int, int]]) -> list[str]:
    """Each token's role: that of the message it overlaps (a token that straddles a message and the
    template's text belongs to the message), else "template"."""
    spans, start = [], 0
    for text, role in pieces:
        spans.append((start, start + len(text), role))
        start += len(text)
    roles = []
    for s, e in offsets:
        inside = [role for a, b, role in spans if role != TEMPLATE and (a < max(e, s + 1) and s < b)]
        roles.append(inside[0] if inside else TEMPLATE)
    return roles


# --- which tokens count -----------------------------------------------------------------------------

def end_of_turn_positions(ids: list[int], roles: list[str], control_ids: set[int]) -> list[int]:
    """What the template writes right after the answer, up to and including its first control token
    (ChatML's <|im_end|>, Gemma's <end_of_turn>, an EOS): the token the model must learn to write
    to stop. What follows it (ChatML's newline) is never generated, so it does not count."""
    last = max(p for p, role in enumerate(roles) if role == "assistant")
    after = []
    for p in range(last + 1, len(ids)):
        if roles[p] != TEMPLATE:
            break
        after.append(p)
        if ids[p] in control_ids:
            return after
    return after[:1]  # a template without a control token after the answer: its first token ends the turn


def completion_labels(input_ids: list[int], completion_start: int) -> list[int]:
    """TRL's completion-only labels: -100 for the prompt (the tokens of the prompt rendered with
    add_generation_prompt=True), the token itself for every token after it, to the very end: with
    ChatML that is the answer, <|im_end|> and the newline the template writes after it."""
    return [IGNORE_INDEX] * completion_start + input_ids[completion_start:]


def answer_only_labels(input_ids: list[int], counted: list[int]) -> list[int]:
    """Hugging Face's labels for the answer-only loss: the token itself where it counts, -100
    (ignore_index) everywhere else. They are not shifted: the model shifts them by one inside."""
    counted = set(counted)
    return [token_id if p in counted else IGNORE_INDEX for p, token_id in enumerate(input_ids)]


def _clean(text: str | None) -> str | None:
    """Typed text as a template can take it: no lone surrogate, none of lmviz's placeholder characters."""
    return None if text is None else valid_text(text).replace("\U000f0010", "").replace("\U000f0011", "")


def _check_messages(user: str, answer: str, system: str | None) -> tuple[str, str, str | None]:
    if not user or not user.strip():
        raise NothingToScore("The user message is empty: type a question or a request.")
    if not answer or not answer.strip():
        raise NothingToScore("The answer is empty, so there is nothing to score: type the assistant's answer.")
    system = None if system is None or not system.strip() else system  # a blank system message is none
    return _clean(user), _clean(answer), _clean(system)


def chat_tokens(tokenizer, user: str, answer: str, system: str | None = None) -> ChatTokens:
    """The conversation (system?, user, assistant answer) written by the tokenizer's own chat
    template, token by token, with each token's role and the answer-only labels."""
    user, answer, system = _check_messages(user, answer, system)
    _check_template(tokenizer)
    messages = _messages(user, answer, system)
    pieces = chat_pieces(tokenizer, messages)
    typed = [role != TEMPLATE for _, role in pieces]
    default_system = None
    if system is None:
        pieces, default_system = _with_default_system(tokenizer, pieces, messages)
        if default_system is not None:  # the opening piece became three, all written by the template
            typed = [False, False, False, *typed[1:]]
    text = "".join(t for t, _ in pieces)
    controls = control_tokens(tokenizer)
    markers = _typed_markers(pieces, typed, controls)
    ids, offsets = _encode(tokenizer, text, markers)
    roles = _roles(pieces, offsets)
    if "assistant" not in roles:
        raise NothingToScore("The answer gives this tokenizer no token to score: type a few words.")
    control_ids = {tokenizer.convert_tokens_to_ids(c) for c in controls}
    answer_positions = [p for p, role in enumerate(roles) if role == "assistant"]
    end_of_turn = end_of_turn_positions(ids, roles, control_ids)
    completion_start = _completion_start(tokenizer, messages[:-1], ids)
    specials = special_tokens(tokenizer)
    tokens = [readable_token(tokenizer, i) for i in ids]
    special_ids = {tokenizer.convert_tokens_to_ids(t) for t in specials}
    return ChatTokens(
        text=text, input_ids=ids, tokens=tokens, roles=roles,
        labels=answer_only_labels(ids, answer_positions + end_of_turn), answer_positions=answer_positions,
        end_of_turn_positions=end_of_turn, default_system=default_system,
        markers_typed=sorted({text[s:e] for s, e in markers}),
        completion_start=completion_start,
        same_as_transformers=_same_as_transformers(tokenizer, messages, ids),
        completion_labels=None if completion_start is None else completion_labels(ids, completion_start),
        end_of_turn_is_control=bool(end_of_turn) and ids[end_of_turn[-1]] in control_ids,
        special_tokens=list(specials),
        # ids, not strings: a special token typed in a message is characters, and is not one of these
        special_written=list(dict.fromkeys(tokens[p] for p, i in enumerate(ids) if i in special_ids)),
        has_generation_block=has_generation_block(tokenizer))


def _completion_start(tokenizer, prompt: list[dict], ids: list[int]) -> int | None:
    """TRL's completion-only loss counts every token after the prompt rendered with
    add_generation_prompt=True (for ChatML that also counts the newline after <|im_end|>)."""
    try:
        prompt_ids = tokenizer.apply_chat_template(prompt, add_generation_prompt=True,
                                                   sanitize_control_tokens=True)["input_ids"]
    except Exception:  # a template or tokenizer transformers cannot sanitize: no comparison to offer
        return None
    return len(prompt_ids) if ids[:len(prompt_ids)] == prompt_ids else None


def _same_as_transformers(tokenizer, messages: list[dict], ids: list[int]) -> bool | None:
    try:
        return tokenizer.apply_chat_template(messages, sanitize_control_tokens=True)["input_ids"] == ids
    except Exception:  # as above
        return None


# --- in words: each sentence built from what was found, for the page ----------------------------------------

def _counted_positions(labels: list[int]) -> set[int]:
    return {p for p, label in enumerate(labels) if label != IGNORE_INDEX}


def completion_extra(chat: ChatTokens) -> list[int]:
    """The positions TRL's completion-only labels count and lmviz's do not (ChatML: the newline after <|im_end|>)."""
    if chat.completion_labels is None:
        return []
    return sorted(_counted_positions(chat.completion_labels) - _counted_positions(chat.labels))


def _listed(items: list[str]) -> str:
    """a; a and b; a, b and c."""
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def template_sentence(chat: ChatTokens, name: str) -> str:
    """Which of the tokenizer's special tokens the template wrote here, from the tokens themselves."""
    total = len(chat.special_tokens)
    if not chat.special_written:
        return (f"The tokens marked template were written by {name}'s chat template, not typed; none of them is one "
                f"of the {total} special tokens of its tokenizer.")
    count = len(chat.special_written)
    return (f"The tokens marked template were written by {name}'s chat template, not typed. Among them "
            f"{'is' if count == 1 else 'are'} {_listed(chat.special_written)}: {count} of the {total} special tokens "
            "of its tokenizer, the only ones this conversation uses.")


def end_of_turn_sentence(chat: ChatTokens) -> str:
    """What ends the answer's turn, in the words that fit what lmviz found after the answer."""
    end = [chat.tokens[p] for p in chat.end_of_turn_positions]
    if not end:
        return ("The template writes nothing after the answer, so lmviz's labels count the answer's own tokens "
                "only: no token of the template teaches the model to stop.")
    if not chat.end_of_turn_is_control:
        return (f"The template writes no special token (nor any token added for it) after the answer, so lmviz "
                f"counts the first token it writes there, {end[0]}, as the end of the turn: what the model must learn "
                "to write to stop.")
    # a control token is one of the tokenizer's special tokens, or an added token its chat template writes
    what = ("the first special token the template writes after it" if end[-1] in chat.special_tokens else
            "the first token the template writes after it that the tokenizer added for its chat template")
    if len(end) == 1:
        return (f"The answer ends with {end[0]}, {what}: the end-of-turn token, which the model must learn to write "
                "in order to stop. lmviz counts it with the answer.")
    return (f"After the answer the template writes {' '.join(end)}; lmviz counts them, up to {end[-1]}, {what}: "
            "the end-of-turn token, which the model must learn to write in order to stop.")


def typed_sentence(chat: ChatTokens, name: str) -> str:
    """The tokens only the template may write that the learner typed, named for what they are."""
    special = [t for t in chat.markers_typed if t in chat.special_tokens]
    added = [t for t in chat.markers_typed if t not in chat.special_tokens]
    what = []
    if special:
        what.append(f"{_listed(special)}, {'a special token' if len(special) == 1 else 'special tokens'} of "
                    f"{name}'s tokenizer")
    if added:
        what.append(f"{_listed(added)}, {'a token' if len(added) == 1 else 'tokens'} the tokenizer added for its "
                    "chat template to write")
    return (f"The messages contain {'; and '.join(what)}. Typed text is read as plain characters, as transformers "
            "does with sanitize_control_tokens=True: each stays characters and opens no turn.")


def difference_sentence(chat: ChatTokens) -> str:
    """How TRL's completion-only labels differ from lmviz's, from the two sets of positions."""
    ours, trl = _counted_positions(chat.labels), _counted_positions(chat.completion_labels)
    extra, missing = sorted(trl - ours), sorted(ours - trl)
    if not extra and not missing:
        return "Here TRL's completion-only labels and lmviz's count the same tokens."
    words, shown = [], " ".join(chat.tokens[p] for p in extra)
    it = "it" if len(extra) == 1 else "them"
    if extra and chat.end_of_turn_positions and min(extra) > chat.end_of_turn_positions[-1]:
        last = chat.tokens[chat.end_of_turn_positions[-1]]
        words.append(f"TRL's completion-only labels also count {shown}, which the template writes after {last}: a "
                     f"model that stops at {last} never writes {it}, so lmviz's labels leave {it} out.")
    elif extra:
        words.append(f"TRL's completion-only labels also count {shown}, which lmviz's do not.")
    if missing:
        words.append(f"lmviz's labels count {' '.join(chat.tokens[p] for p in missing)}, which TRL's leave in the "
                     "prompt.")
    return " ".join(words)


def generation_block_sentence(chat: ChatTokens, name: str) -> str:
    """TRL's assistant_only_loss=True reads a {% generation %} block of the template: say whether this one has it."""
    if chat.has_generation_block:
        return (f"{name}'s chat template has a {{% generation %}} block, so TRL's assistant_only_loss=True can use it "
                "as it is: it counts the tokens that block marks (not computed on this page).")
    return (f"TRL's assistant_only_loss=True counts the tokens that a {{% generation %}} block of the chat template "
            f"marks. {name}'s chat template has no such block, so TRL cannot use it as it is for that option: it "
            "swaps in a marked copy only for the model families it ships one for, and otherwise stops with an error.")


# --- with the model: p, -log p, and the losses ---------------------------------------------------

@dataclass
class SftRow:
    position: int  # the input token's index t: this row scores the token at t + 1
    input_token: str
    target_token: str
    target_id: int
    target_role: str
    label: int  # labels[t + 1]: the target's id where it counts, -100 where it does not
    counted: bool
    prob: float  # p(target | tokens up to t)
    nll: float  # -log p(target)
    rank: int


@dataclass
class SftAnalysis:
    model: str
    chat: ChatTokens
    rows: list[SftRow]  # every position but the last: len(input_ids) - 1
    loss_answer: float  # mean -log p over the counted rows: the answer-only (SFT) loss
    loss_all: float  # mean -log p over every row: the loss if the prompt is not masked
    counted_answer: int
    counted_all: int
    loss_answer_model: float  # the model's own loss function with labels = chat.labels
    loss_all_model: float  # ... with labels = input_ids
    sum_logp_answer: float  # Σ log p over the counted tokens = log p(answer + end-of-turn | prompt)
    device: str
    # TRL's completion-only labelling (chat.completion_labels); None where the prompt's tokens are not a
    # prefix of the conversation's, so that TRL's split cannot be told
    loss_completion: float | None = None  # mean -log p over every token after the generation prompt
    counted_completion: int | None = None
    loss_completion_model: float | None = None  # the model's own loss function with those labels
    sum_logp_completion: float | None = None  # Σ log p over them: what TRL's DPOTrainer sums for an answer

    def loss(self, which: str) -> tuple[float | None, float | None, int | None]:
        """(lmviz's mean, the model's own loss, labels that count) of one labelling (ANSWER, COMPLETION, EVERY)."""
        return {ANSWER: (self.loss_answer, self.loss_answer_model, self.counted_answer),
                COMPLETION: (self.loss_completion, self.loss_completion_model, self.counted_completion),
                EVERY: (self.loss_all, self.loss_all_model, self.counted_all)}[which]

    def to_dict(self) -> dict:
        return asdict(self)


def _check_length(loaded, chat: ChatTokens) -> None:
    """Not cut like a text on Your sentence: a cut conversation would lose its answer, which is what counts."""
    limit = length_limit(loaded.model)[0]  # its reason, for a page to show: length_limit(model)[1]
    if len(chat.input_ids) > limit:
        raise BadInput(f"The conversation is {len(chat.input_ids):,} tokens once the chat template is applied, "
                       f"more than the {limit:,} scored in one text: shorten the messages.")


def score_tokens(logits: torch.Tensor, input_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """-log p and rank of every next token. logits: (T, V), input_ids: (T,) -> (T-1,), (T-1,).
    Position t is scored on the token at t+1, from log_softmax (never log(softmax), which underflows)."""
    log_p = torch.log_softmax(logits[:-1].float(), dim=-1)  # (T-1, V)
    target_log_p = log_p.gather(-1, input_ids[1:, None])  # (T-1, 1)
    return -target_log_p[:, 0], (log_p > target_log_p).sum(-1) + 1


def answer_and_all_token_losses(nll: torch.Tensor, labels: list[int]) -> tuple[float, float]:
    """nll: (T-1,), -log p of the token at t+1 at each position t. The answer-only loss is their mean
    where the label counts; forgetting to mask the prompt gives the mean over every position."""
    # (T-1,): the labels shift by one, as inside the model: row t is scored on token t+1
    counted = torch.tensor(labels[1:], device=nll.device) != IGNORE_INDEX
    return nll[counted].mean().item(), nll.mean().item()


def analyse_sft(loaded, user: str, answer: str, system: str | None = None) -> SftAnalysis:
    """One conversation through ``loaded`` (a lmviz.models.loading.LoadedModel): p and -log p of every token,
    the answer-only loss, TRL's completion-only loss and the all-token loss, each also from the model's own
    loss function."""
    chat = chat_tokens(loaded.tokenizer, user, answer, system)
    _check_length(loaded, chat)
    ids = torch.tensor(chat.input_ids, device=loaded.device)  # (T,)
    with torch.inference_mode():
        logits = loaded.model(input_ids=ids[None]).logits[0]  # (T, V)
        nll, rank = score_tokens(logits, ids)  # (T-1,), (T-1,)
        own_answer, own_all = (_model_loss(loaded.model, logits, labels) for labels in (chat.labels, chat.input_ids))
        trl = chat.completion_labels
        own_completion = None if trl is None else _model_loss(loaded.model, logits, trl)
    loss_answer, loss_all = answer_and_all_token_losses(nll, chat.labels)
    rows = _rows(chat, nll.tolist(), rank.tolist())
    result = SftAnalysis(
        model=loaded.name, chat=chat, rows=rows, loss_answer=loss_answer, loss_all=loss_all,
        counted_answer=sum(r.counted for r in rows), counted_all=len(rows), loss_answer_model=own_answer,
        loss_all_model=own_all, sum_logp_answer=-sum(r.nll for r in rows if r.counted), device=loaded.device)
    if trl is not None:
        result.loss_completion = answer_and_all_token_losses(nll, trl)[0]
        result.loss_completion_model, result.counted_completion = own_completion, _counted(trl)
        result.sum_logp_completion = -_summed(nll, trl)
    return result


def _counted(labels: list[int]) -> int:
    """How many predictions a labelling scores: the labels after the first (the first token is never predicted)."""
    return sum(label != IGNORE_INDEX for label in labels[1:])


def _summed(nll: torch.Tensor, labels: list[int]) -> float:
    """Σ -log p over the rows whose (shifted) label counts. nll: (T-1,)."""
    counted = torch.tensor(labels[1:], device=nll.device) != IGNORE_INDEX  # (T-1,)
    return nll[counted].sum().item()


def _model_loss(model, logits: torch.Tensor, labels: list[int]) -> float:
    """What out.loss is for these labels: the model's own loss function (it shifts the labels)."""
    labels = torch.tensor([labels], device=logits.device)  # (1, T)
    return model.loss_function(logits=logits[None], labels=labels, vocab_size=logits.shape[-1]).item()


def _rows(chat: ChatTokens, nll: list[float], rank: list[int]) -> list[SftRow]:
    return [SftRow(position=t, input_token=chat.tokens[t], target_token=chat.tokens[t + 1],
                   target_id=chat.input_ids[t + 1], target_role=chat.roles[t + 1], label=chat.labels[t + 1],
                   counted=chat.labels[t + 1] != IGNORE_INDEX, prob=math.exp(-nll[t]), nll=nll[t], rank=rank[t])
            for t in range(len(chat.input_ids) - 1)]


# --- two answers, and the preference loss built on them --------------------------------------------

@dataclass
class AnswerScore:
    answer: str
    counted: int  # the answer's tokens and its end-of-turn token
    sum_logp: float  # Σ log p over them: log p(answer | prompt) under the model
    sum_nll: float  # -sum_logp
    mean_nll: float  # sum_nll / counted: the answer-only loss
    counted_completion: int | None = None  # every token after the generation prompt (TRL's DPOTrainer's)
    sum_logp_completion: float | None = None  # Σ log p over those: the sum TRL's DPOTrainer uses


@dataclass
class AnswerComparison:
    chosen: AnswerScore
    rejected: AnswerScore
    chosen_analysis: SftAnalysis
    rejected_analysis: SftAnalysis
    margin: float  # chosen.sum_logp - rejected.sum_logp: > 0 when the model prefers the chosen answer
    preferred: str  # "chosen", "rejected" or "neither", by summed log-probability
    probability_ratio: float  # exp(|margin|): how many times likelier the preferred answer is
    preferred_by_mean: str  # the same by mean -log p, which does not favour short answers


def answer_score(analysis: SftAnalysis, answer: str) -> AnswerScore:
    return AnswerScore(answer=answer, counted=analysis.counted_answer, sum_logp=analysis.sum_logp_answer,
                       sum_nll=-analysis.sum_logp_answer, mean_nll=analysis.loss_answer,
                       counted_completion=analysis.counted_completion,
                       sum_logp_completion=analysis.sum_logp_completion)


def _which(difference: float) -> str:
    return "chosen" if difference > 0 else "rejected" if difference < 0 else "neither"


def compare_answers(loaded, user: str, chosen: str, rejected: str, system: str | None = None) -> AnswerComparison:
    """The same prompt with two answers: which one the model finds likelier, and by how much."""
    a, b = (analyse_sft(loaded, user, answer, system) for answer in (chosen, rejected))
    first, second = answer_score(a, chosen), answer_score(b, rejected)
    margin = first.sum_logp - second.sum_logp
    return AnswerComparison(
        chosen=first, rejected=second, chosen_analysis=a, rejected_analysis=b, margin=margin,
        preferred=_which(margin), probability_ratio=math.exp(abs(margin)) if abs(margin) < 709 else math.inf,
        preferred_by_mean=_which(second.mean_nll - first.mean_nll))


@dataclass
class DpoLoss:
    beta: float
    policy_chosen_logps: float
    policy_rejected_logps: float
    reference_chosen_logps: float
    reference_rejected_logps: float
    chosen_logratio: float  # log π(chosen) - log π_ref(chosen): how much training raised the chosen answer
    rejected_logratio: float  # the same for the rejected answer
    margin: float  # chosen_logratio - rejected_logratio
    chosen_reward: float  # beta * chosen_logratio, TRL's rewards/chosen
    rejected_reward: float  # beta * rejected_logratio, TRL's rewards/rejected
    loss: float  # -log sigmoid(beta * margin)


def _check_dpo_inputs(beta: float, *logps: float) -> None:
    if isinstance(beta, bool) or not isinstance(beta, (int, float)) or not 0 < beta < math.inf:
        raise BadInput(f"beta must be a number above 0; got {beta!r}.")
    if not all(isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) for x in logps):
        raise BadInput("Each log-probability must be a finite number.")


def minus_log_sigmoid(x: float) -> float:
    """-log σ(x) = log(1 + e^(-x)), written so that neither branch overflows."""
    return math.log1p(math.exp(-x)) if x >= 0 else -x + math.log1p(math.exp(x))


def dpo_loss(policy_chosen_logps: float, policy_rejected_logps: float, reference_chosen_logps: float,
             reference_rejected_logps: float, beta: float = DEFAULT_BETA) -> DpoLoss:
    """DPO (Rafailov et al., 2023) on one pair, from summed answer log-probabilities:
    -log σ(β ((log π(y_w) - log π_ref(y_w)) - (log π(y_l) - log π_ref(y_l)))).
    With policy = reference every log-ratio is 0 and the loss is ln 2: training starts there."""
    _check_dpo_inputs(beta, policy_chosen_logps, policy_rejected_logps, reference_chosen_logps,
                      reference_rejected_logps)
    chosen_logratio = policy_chosen_logps - reference_chosen_logps
    rejected_logratio = policy_rejected_logps - reference_rejected_logps
    margin = chosen_logratio - rejected_logratio
    return DpoLoss(beta, policy_chosen_logps, policy_rejected_logps, reference_chosen_logps,
                   reference_rejected_logps, chosen_logratio, rejected_logratio, margin,
                   beta * chosen_logratio, beta * rejected_logratio, minus_log_sigmoid(beta * margin))


def dpo_from_comparisons(policy: AnswerComparison, reference: AnswerComparison, beta: float = DEFAULT_BETA) -> DpoLoss:
    """The DPO loss of one pair scored by two models (or one model twice: then it is ln 2)."""
    return dpo_loss(policy.chosen.sum_logp, policy.rejected.sum_logp,
                    reference.chosen.sum_logp, reference.rejected.sum_logp, beta)


# --- the preference losses beside DPO, from the same sums and token counts ---------------------------------

# TRL's defaults (lmviz.core.trl). TRL computes SimPO in its CPOTrainer, with CPOConfig(loss_type="simpo"), and adds
# cpo_alpha × the chosen answer's NLL to it, skipped only at cpo_alpha = 0 (trl/experimental/cpo/cpo_trainer.py,
# concatenated_forward and get_batch_loss_metrics: losses.mean() + self.cpo_alpha * policy_nll_loss). CPOConfig's
# cpo_alpha is 1.0 by default. TRL's docs (docs/source/cpo_trainer.md in its repository, not in the wheel) call
# loss_type="simpo" with cpo_alpha=0.0 SimPO, and with a non-zero cpo_alpha CPO-SimPO
SIMPO_BETA, SIMPO_GAMMA, CPO_ALPHA = PREFERENCE.cpo_beta, PREFERENCE.simpo_gamma, PREFERENCE.cpo_alpha
# The β the SimPO paper's own runs use (Meng et al. 2024; its authors' README, princeton-nlp/SimPO: 2.0 or 2.5 in the
# preprint, 10 for later models), far above CPOConfig's 0.1, which the page takes: a fact about the paper, not TRL
SIMPO_PAPER_BETA = (2.0, 10.0)
ORPO_LAMBDA = PREFERENCE.orpo_beta
KTO_BETA = PREFERENCE.kto_beta
KTO_DESIRABLE_WEIGHT, KTO_UNDESIRABLE_WEIGHT = PREFERENCE.kto_desirable_weight, PREFERENCE.kto_undesirable_weight


def sigmoid(x: float) -> float:
    return 1 / (1 + math.exp(-x)) if x >= 0 else math.exp(x) / (1 + math.exp(x))


@dataclass
class PreferenceLosses:
    """IPO, SimPO, ORPO and KTO on one pair, each from the sums of log p and the token counts DPO uses."""

    chosen_mean_logratio: float  # (log π − log π_ref)(chosen) / its tokens: TRL's IPO takes per-token means
    rejected_mean_logratio: float
    ipo_margin: float  # the difference of the two: what IPO pulls towards 1/(2β)
    ipo: float  # (ipo_margin − 1/(2β))², β the page's DPO β
    chosen_mean_logp: float  # log π(chosen) / its tokens: SimPO's and ORPO's length-normalised log-probability
    rejected_mean_logp: float
    simpo: float  # −log σ(β_S (chosen_mean_logp − rejected_mean_logp) − γ): the SimPO paper's loss, no NLL term;
    #               TRL's CPOTrainer with loss_type="simpo" and cpo_alpha=0
    cpo_simpo: float  # simpo + α·(−chosen_mean_logp): the same with CPOConfig's default cpo_alpha, CPO-SimPO
    log_odds: float  # log(odds(chosen) / odds(rejected)), odds(y) = p / (1 − p), p = e^(mean log p)
    orpo: float  # −chosen_mean_logp + λ·(−log σ(log_odds)); TRL's ORPOTrainer averages its NLL over the prompt too
    z0: float  # KTO's reference point
    kto_chosen: float  # w_D·(1 − σ(β_K (r_chosen − z0))), r = log π − log π_ref summed
    kto_rejected: float  # w_U·(1 − σ(β_K (z0 − r_rejected)))
    kto: float  # the mean of the two: one desirable and one undesirable example


def preference_losses(policy_chosen_logps: float, policy_rejected_logps: float, reference_chosen_logps: float,
                      reference_rejected_logps: float, chosen_tokens: int, rejected_tokens: int,
                      beta: float = DEFAULT_BETA, z0: float = 0.0) -> PreferenceLosses:
    """The four losses TRL offers beside DPO's, on one pair:

    - IPO (Azar et al. 2023; DPOConfig loss_type="ipo"): (h − 1/(2β))², h the difference of the answers'
      log-ratios, each divided by its answer's tokens as TRL's DPOTrainer does (its code says the paper does not
      discuss this normalisation explicitly); a squared distance to a target, where DPO's sigmoid keeps pushing.
    - SimPO (Meng et al. 2024; CPOConfig loss_type="simpo"): −log σ(β (mean log π(chosen) − mean log π(rejected))
      − γ), no reference model, a margin γ, no NLL term. TRL's CPOTrainer adds α × the chosen answer's NLL unless
      cpo_alpha = 0; with CPOConfig's default α that is CPO-SimPO.
    - ORPO (Hong et al. 2024): the chosen answer's NLL + λ·(−log σ(log odds ratio)), no reference model; the NLL is
      over the answer's tokens here, where TRL's ORPOTrainer averages it over the prompt's as well.
    - KTO (Ethayarajh et al. 2024): each answer on its own against a reference point z0 (TRL estimates it from
      mismatched prompt–answer pairs, clamped at 0): 1 − σ(β (r − z0)) for a desirable one, 1 − σ(β (z0 − r)) for
      an undesirable one, r = log π − log π_ref summed over the answer.
    """
    _check_dpo_inputs(beta, policy_chosen_logps, policy_rejected_logps, reference_chosen_logps,
                      reference_rejected_logps, z0)
    if not all(isinstance(n, int) and n > 0 for n in (chosen_tokens, rejected_tokens)):
        raise BadInput("Each answer needs at least one token.")
    if max(policy_chosen_logps, policy_rejected_logps) >= 0:
        raise BadInput("The policy's log π of each answer must be below 0, as a probability below 1 has: raised this "
                       "far, the first answer's would not be.")
    chosen_ratio = (policy_chosen_logps - reference_chosen_logps) / chosen_tokens
    rejected_ratio = (policy_rejected_logps - reference_rejected_logps) / rejected_tokens
    margin = chosen_ratio - rejected_ratio
    chosen_mean, rejected_mean = policy_chosen_logps / chosen_tokens, policy_rejected_logps / rejected_tokens
    simpo = minus_log_sigmoid(SIMPO_BETA * (chosen_mean - rejected_mean) - SIMPO_GAMMA)

    def log_odds_of(mean_logp: float) -> float:  # log(p / (1 − p)) with p = e^mean_logp < 1
        return mean_logp - math.log(-math.expm1(mean_logp))

    log_odds = log_odds_of(chosen_mean) - log_odds_of(rejected_mean)
    kto_chosen = KTO_DESIRABLE_WEIGHT * (1 - sigmoid(
        KTO_BETA * (policy_chosen_logps - reference_chosen_logps - z0)))
    kto_rejected = KTO_UNDESIRABLE_WEIGHT * (1 - sigmoid(
        KTO_BETA * (z0 - (policy_rejected_logps - reference_rejected_logps))))
    return PreferenceLosses(
        chosen_mean_logratio=chosen_ratio, rejected_mean_logratio=rejected_ratio, ipo_margin=margin,
        ipo=(margin - 1 / (2 * beta)) ** 2, chosen_mean_logp=chosen_mean, rejected_mean_logp=rejected_mean,
        simpo=simpo, cpo_simpo=simpo + CPO_ALPHA * -chosen_mean, log_odds=log_odds,
        orpo=-chosen_mean + ORPO_LAMBDA * minus_log_sigmoid(log_odds), z0=z0, kto_chosen=kto_chosen,
        kto_rejected=kto_rejected, kto=(kto_chosen + kto_rejected) / 2)
