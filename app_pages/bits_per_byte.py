import pandas as pd
import streamlit as st

from lmviz.app import url_state
from lmviz.app.byte_pieces import explain_byte_pieces
from lmviz.app.choosers import choose_causal_lm, comparable_causal_lms, other_causal_lm, scored_with_cpu_fallback
from lmviz.app.chrome import intro, key_table, result_or_stop, term, text_table
from lmviz.app.path import check_yourself
from lmviz.app.problems import show_problem
from lmviz.app.widgets import metric_row, result_panel, show_chart, show_code
from lmviz.core.numbers import PERPLEXITY_DIGITS, fmt
from lmviz.core.text import escape_markdown, quotable
from lmviz.course.glossary import TERMS
from lmviz.course.questions.bits_per_byte import build_questions
from lmviz.errors import NotEnoughMemory, NothingToScore
from lmviz.figures import plots
from lmviz.lessons.bits_per_byte import (
    DEFAULT_STRIDE,
    DEFAULT_WINDOW,
    LN2,
    MIN_WINDOW,
    BadWindow,
    bits_per_byte,
    guide_average,
    harness_windows,
    harness_words,
    per_byte,
    rankings,
    score_windows,
    strided_windows,
    toy_per_byte,
    windowed,
)
from lmviz.lessons.causal_lm import length_limit
from lmviz.serving.scorer import CausalScorer

MAX_CHARS = 2000
DEFAULT_TEXT = ("The library opens at nine in the morning and closes at six in the evening. Visitors can borrow up "
                "to five books at a time 📚, and most books may be kept for three weeks. Its sister library in Tokyo "
                "(東京) lends manga too.")
END_LABEL = "End with the end-of-text token, as a pre-training document does"
LARGEST_WINDOW = 256  # the window slider's end: past it, a paragraph fits one window and nothing is shown
LN2_SHOWN = fmt(LN2)
BERT_TOKENS = "[CLS] / [SEP] / [MASK]"  # the glossary's entry for the tokens a BERT-style tokenizer adds
REPLACEMENT = "\ufffd"  # U+FFFD, what a decoder writes for bytes that are no character
SOURCES = {
    "harness": "https://github.com/EleutherAI/lm-evaluation-harness",
    "nanochat": "https://github.com/karpathy/nanochat",
    "nanochat#693": "https://github.com/karpathy/nanochat/pull/693",
    "nanochat 2ce972a": "https://github.com/karpathy/nanochat/commit/2ce972a3696b92b0ed1c74ed2af7b6c465b50b0d",
    "autoresearch#384": "https://github.com/karpathy/autoresearch/issues/384",
    "guide": "https://huggingface.co/docs/transformers/perplexity",
}


@st.cache_data(show_spinner=False, max_entries=128)
def get_bits_per_byte(_scorer: CausalScorer, model_key: tuple, text: str, end_token: bool):
    """Per text, per model: the teacher's text scored once for the whole class."""
    return _scorer.run(lambda loaded: bits_per_byte(loaded, text, end_token), text)


@st.cache_data(show_spinner=False, max_entries=64)
def get_windowed(_scorer: CausalScorer, model_key: tuple, text: str, window: int, stride: int):
    return _scorer.run(lambda loaded: windowed(loaded, text, window, stride), text)


def headline(panel, result) -> None:
    sums = result.harness
    with panel:
        row = metric_row()
        row.metric("Bits per byte", fmt(sums.bits_per_byte), width="content",
                   help="Σ −ln p ÷ (ln 2 × the text's bytes), lm-evaluation-harness's count (section 2).")
        row.metric("Loss per token (nats)", fmt(sums.nats_per_token), width="content")
        row.metric("Bytes per token", fmt(sums.bytes_per_token), width="content")
        row.metric("Byte perplexity: 2^bpb", fmt(sums.byte_perplexity, PERPLEXITY_DIGITS), width="content")
        row.metric("Tokens predicted", sums.tokens, width="content")


def token_table(result) -> pd.DataFrame:
    """One row per predicted token: its bytes as read from its piece, its -ln p in nats and in bits."""
    table = {
        "position": [r.position for r in result.rows],
        "token": [r.token for r in result.rows],
        "its bytes (hex)": ["(special: no text)" if r.special else ("not bytes" if r.raw is None else r.raw)
                            for r in result.rows],
        "bytes": ["" if r.byte_count is None else str(r.byte_count) for r in result.rows],
        "-ln p (nats)": [fmt(r.nll) for r in result.rows],
        "-log₂ p (bits)": [fmt(r.bits) for r in result.rows],
    }
    if result.windows > 1:
        table["context length"] = [r.context for r in result.rows]
    return pd.DataFrame(table)


def arithmetic(result) -> str:
    """The identity, with this text's numbers, one line per step: checkable by hand."""
    s = result.harness
    return "\n".join([
        f"- Σ −ln p = **{fmt(s.nats)}** nats over **{s.tokens}** predicted tokens: {fmt(s.nats)} ÷ {s.tokens} = "
        f"**{fmt(s.nats_per_token)}** nats per token, ÷ ln 2 ({LN2_SHOWN}) = **{fmt(s.bits_per_token)}** bits per "
        "token",
        f"- the text is **{s.bytes}** bytes in UTF-8, `len(text.encode(\"utf-8\"))`: {s.bytes} ÷ {s.tokens} = "
        f"**{fmt(s.bytes_per_token)}** bytes per token",
        f"- bits per byte = (nats per token) ÷ (ln 2 × bytes per token) = {fmt(s.nats_per_token)} ÷ ({LN2_SHOWN} × "
        f"{fmt(s.bytes_per_token)}) = **{fmt(s.bits_per_byte)}**, the same as {fmt(s.nats)} ÷ "
        f"({LN2_SHOWN} × {s.bytes})",
        f"- {term('byte perplexity', 'byte perplexity')} = 2^bpb = 2^{fmt(s.bits_per_byte)} = "
        f"**{fmt(s.byte_perplexity, PERPLEXITY_DIGITS)}**",
        f"- {term('word perplexity', 'word perplexity')} = e^(Σ −ln p ÷ words) = e^({fmt(s.nats)} ÷ {s.words}) = "
        f"**{fmt(s.word_perplexity, PERPLEXITY_DIGITS)}**, the words counted as lm-evaluation-harness does (section 2)",
    ])


def conventions_table(result) -> pd.DataFrame:
    rows = [(result.harness, "every token of the text, the first after the prefix token",
             "the whole document: len(text.encode(\"utf-8\"))")]
    if result.nanochat is not None:
        rows.append((result.nanochat, "every predicted token but the special ones",
                     "each of those tokens' own bytes; a special token 0"))
    return pd.DataFrame({
        "convention": [s.convention for s, _, _ in rows],
        "−ln p summed over": [over for _, over, _ in rows],
        "bytes counted": [counted for _, _, counted in rows],
        "tokens": [s.tokens for s, _, _ in rows],
        "Σ −ln p": [fmt(s.nats) for s, _, _ in rows],
        "bytes": [s.bytes for s, _, _ in rows],
        "bits per byte": [fmt(s.bits_per_byte) for s, _, _ in rows],
        "word perplexity": ["" if s.word_perplexity is None else fmt(s.word_perplexity, PERPLEXITY_DIGITS)
                            for s, _, _ in rows],
    })


def conventions_sentences(result, end_token: bool) -> list[str]:
    said = []
    text = result.text
    if harness_words(text) != len(text.split()):
        said.append(f"lm-evaluation-harness counts {harness_words(text)} words in this text where there are "
                    f"{len(text.split())}: `re.split(r\"\\s+\", text)` leaves an empty piece where the text begins "
                    "or ends with a space or a line break, and counts it.")
    if result.as_run is not None:
        said.append(as_run_sentence(result))
    if result.nanochat is None:
        said.append(f"{result.model}'s tokenizer is not byte-level: its tokens are not pieces of the text's bytes, so "
                    "no token has bytes of its own, and nanochat's count is not defined. Only the whole document's "
                    "bytes, lm-evaluation-harness's count, are.")
        return said
    if end_token:
        end = result.rows[-1]
        counted_in = (result.nanochat.nats + end.nll) / (LN2 * result.nanochat.bytes)
        said.append(f"The end token {end.token} costs {fmt(end.nll)} nats. nanochat gives a special token 0 bytes and "
                    f"leaves its −ln p out of the sum; lm-evaluation-harness never puts one after a text. Counted in "
                    f"over the same bytes, it would make the bits per byte {fmt(counted_in)} instead of "
                    f"{fmt(result.nanochat.bits_per_byte)}.")
    else:
        said.append(f"Here the two agree: the tokens of the text are exactly its bytes. Tick “{END_LABEL}” to see "
                    "how each treats a special token.")
    return said


def decoding_bug(result) -> None:
    if result.decoded is None:
        st.markdown(escape_markdown(f"{result.model}'s tokenizer is not byte-level, so its tokens have no bytes of "
                                    "their own to count either way."))
        return
    differ = [r for r in result.rows if not r.special and r.byte_count != r.decoded_byte_count]
    right, wrong = result.nanochat, result.decoded
    if not differ:
        st.markdown(f"Every token of this text decodes to its own bytes, so both counts agree: {right.bytes} bytes. "
                    f"A {term('byte piece', 'byte piece')} would not: type an emoji or a Chinese character.")
        return
    with st.expander(f"The {len(differ)} tokens whose two counts differ"):
        text_table(pd.DataFrame({
            "token": [r.token for r in differ],
            "its bytes (hex)": [r.raw for r in differ],
            "bytes": [r.byte_count for r in differ],
            "decoded alone": [quotable(r.decoded) for r in differ],
            "U+FFFD written": [r.decoded.count(REPLACEMENT) for r in differ],
            "bytes of the decoded text": [r.decoded_byte_count for r in differ],
        }), hide_index=True)
    # the tokenizer's own decode, which the count uses, against Python's, which the sentence above the table
    # describes and nanochat's used (tiktoken/core.py, Encoding.decode: bytes.decode("utf-8", errors="replace"))
    unlike_python = sum(r.decoded != bytes.fromhex(r.raw).decode("utf-8", errors="replace") for r in differ)
    first = differ[0]
    lower = 1 - wrong.bits_per_byte / right.bits_per_byte
    st.markdown(
        escape_markdown(
            f"{result.model}'s tokenizer decodes "
            + ("each of these tokens as Python does" if not unlike_python
               else f"{unlike_python} of these {len(differ)} tokens otherwise than Python does")
            + f": the first, <{first.raw}>, decodes to “{quotable(first.decoded)}”, "
              f"{first.decoded.count(REPLACEMENT)} U+FFFD, {first.decoded_byte_count} bytes where the token holds "
              f"{first.byte_count}. ")
        + f"Counted from each token's piece, the predicted tokens hold **{right.bytes}** bytes: bits per byte "
        f"**{fmt(right.bits_per_byte)}**. Counted after decoding each token, **{wrong.bytes}** bytes: bits "
        f"per byte **{fmt(wrong.bits_per_byte)}**, {lower * 100:.1f} % lower. The model predicted the same "
        "tokens with the same −ln p; only the count of bytes grew, so the bug flatters the model, the more the more "
        "of a text is emoji or CJK.")
    st.markdown(
        f"That second count is nanochat's own until its commit [2ce972a]({SOURCES['nanochat 2ce972a']}) of July "
        "2026: its `scripts/tok_train.py` built the `token_bytes` table its `evaluate_bpb` divides by from "
        "`len(tokenizer.decode([token_id]).encode(\"utf-8\"))`, 0 for a special token, and its decode writes "
        f"U+FFFD as Python's does ([nanochat#693]({SOURCES['nanochat#693']})). "
        f"autoresearch still counted so when [autoresearch#384]({SOURCES['autoresearch#384']}) was filed.")


def as_run_sentence(result) -> str:
    """What lm-evaluation-harness 0.4.13 scores that lmviz does not (lmviz.lessons.bits_per_byte.harness_encoding),
    and the bits per byte it gives for it: for a tokenizer whose defaults add special tokens."""
    window = (f", scored here in lmviz's windows of {result.window:,} tokens where it reads {result.harness_window:,} "
              "at once" if result.window != result.harness_window else "")
    added = ", ".join(term(t, BERT_TOKENS) if t in TERMS[BERT_TOKENS][0] else escape_markdown(t) for t in result.added)
    return (escape_markdown(
        f"lm-evaluation-harness 0.4.13 encodes the text as {result.model}'s tokenizer does by default, not as lmviz "
        f"does: {result.as_run.tokens} tokens where lmviz has {result.harness.tokens}, ") + added
        + escape_markdown(f" among them, which lmviz's have not. It scores them all{window}: "
                          f"{fmt(result.as_run.bits_per_byte)} bits per byte, where lmviz gives "
                          f"{fmt(result.harness.bits_per_byte)}."))


def compare_models(scorer: CausalScorer, result, text: str, end_token: bool) -> list:
    """The other models the learner picks, each scored on the same text; the table and what the rankings say."""
    options = comparable_causal_lms(result.model)
    if not options:
        st.caption("No other model is available here to compare with.")
        return [result]
    chosen = st.multiselect("Also score the text with", options, default=options[:1], key="bpb_others",
                            help="Models that load offline here: the bundled one, lmviz's tiny GPT, and any that "
                                 "`python -m lmviz prepare` downloaded.")
    results = [result]
    for name in chosen:
        other = other_causal_lm(name, scorer)
        if isinstance(other, str):
            show_problem(other)
            continue
        try:
            results.append(get_bits_per_byte(other, other.cache_key, text, end_token))
        except (NothingToScore, NotEnoughMemory) as problem:
            show_problem(f"{name}: {problem}")
    if len(results) < 2:
        return results
    text_table(pd.DataFrame({
        "model": [r.model for r in results],
        "tokenizer": ["byte-level" if r.reads_bytes else "not byte-level" for r in results],
        "tokens": [r.harness.tokens for r in results],
        "bytes per token": [fmt(r.harness.bytes_per_token) for r in results],
        "loss per token (nats)": [fmt(r.harness.nats_per_token) for r in results],
        "bits per byte": [fmt(r.harness.bits_per_byte) for r in results],
        "gives the text back": ["yes" if r.keeps_text else "no" for r in results],
    }), hide_index=True)
    by_token, by_byte = rankings(results)
    ranked = escape_markdown(f"Best first, by loss per token: {', '.join(by_token)}. By bits per byte: "
                             f"{', '.join(by_byte)}. ")
    ranked += ("They agree on this text; they need not. " if by_token == by_byte
               else "**They disagree on this text.** ")
    st.markdown(ranked + escape_markdown(
        "Bits per byte charges every model for the same bytes of the same text, whatever its tokens; byte "
        "perplexity (2^bpb) and word perplexity (e^(Σ −ln p ÷ words)) divide each model's Σ −ln p by counts that no "
        "tokenizer changes either, so all three rank the models alike. A loss per token divides by each "
        "tokenizer's own count, and a tokenizer that cuts the text into fewer, longer tokens has more to predict at "
        "each.") + (" None of the three is fair to a tokenizer that does not give the text back: it is never asked "
                    "to predict what it drops (below)." if not all(r.keeps_text for r in results) else ""))
    best, other = (next(r for r in results if r.model == name) for name in by_byte[:2])
    tie = best.harness.bits_per_byte * LN2 * other.harness.bytes_per_token
    st.markdown(escape_markdown(
        f"To tie with {best.model} by bits per byte, {other.model} would need a loss per token of "
        f"{fmt(best.harness.bits_per_byte)} × {LN2_SHOWN} × {fmt(other.harness.bytes_per_token)} bytes per "
        f"token = {fmt(tie)} nats; it has {fmt(other.harness.nats_per_token)}. A model that read this text one "
        f"byte per token, and were exactly as good as {best.model}, would have a loss per token of only "
        f"{fmt(best.harness.bits_per_byte * LN2)} nats: per token, the two would look nothing alike."))
    for r in results:
        if not r.keeps_text:
            why = [said for said, holds in (("it lowercased the letters", r.lowercases),
                                            (f"{r.unknown_tokens} of its tokens are its unknown token, each standing "
                                             "for text it does not know", r.unknown_tokens > 0)) if holds]
            st.caption(escape_markdown(
                f"{r.model}'s tokenizer does not give this text back: decoding its tokens does not return the "
                f"text as typed{' (' + '; '.join(why) + ')' if why else ''}. It was never asked to predict what it "
                "dropped, so its bits per byte flatters it on this text."))
    for r in results[1:]:  # the page's own model says so in section 2
        if r.as_run is not None:
            st.caption(as_run_sentence(r))
    return results


def windows_section(scorer: CausalScorer, text: str):
    longest = min(LARGEST_WINDOW, length_limit(scorer.loaded.model)[0])
    left, right = st.columns(2)
    window = url_state.linked(url_state.number("bpb_window", DEFAULT_WINDOW, MIN_WINDOW, LARGEST_WINDOW), left.slider,
                              "Window: tokens read at once", min_value=MIN_WINDOW, max_value=max(longest, MIN_WINDOW))
    # the stride slider's end does not follow the window: a slider whose bounds change is a new widget to
    # Streamlit, and it came back at 1 whenever the window moved
    chosen = url_state.linked(url_state.number("bpb_stride", DEFAULT_STRIDE, 1, LARGEST_WINDOW), right.slider,
                              "Stride of the perplexity guide's windows", min_value=1,
                              max_value=max(longest, MIN_WINDOW))
    stride = min(chosen, window)
    if stride < chosen:
        right.caption(f"A stride is at most its window: {stride} is used.")
    try:
        scored = get_windowed(scorer, scorer.cache_key, text, window, stride)
    except (BadWindow, NothingToScore, NotEnoughMemory) as problem:
        show_problem(problem)
        return None
    ways = [w for w in (scored.whole, scored.harness, scored.strided) if w is not None]
    text_bytes = len(text.encode("utf-8"))
    st.dataframe(pd.DataFrame({
        "scored as": [w.name for w in ways],
        "windows": [len(w.windows) for w in ways],
        "tokens scored": [w.scored for w in ways],
        "Σ −ln p": [fmt(w.nats) for w in ways],
        "mean −ln p": [fmt(w.mean) for w in ways],
        "bits per byte": [fmt(w.nats / (LN2 * text_bytes)) if w.scored == len(scored.tokens) - 1 else
                          "not every token scored" for w in ways],
        "tokens that lost context": [len(w.lost_context()) for w in ways],
        "never scored": [len(w.never_scored()) for w in ways],
    }), hide_index=True)
    tokens = len(scored.tokens) - 1
    later = [scored.harness.context[w.first] for w in scored.harness.windows[1:]]
    said = [f"lm-evaluation-harness reads {window} tokens at a time: the first window scores its {min(window, tokens)} "
            f"tokens from the prefix on; each next one scores up to {window} more, reading them with the one token "
            f"before them, so that its first has a context of 1; the last, when it scores fewer, reaches back to read "
            f"{window} tokens, so that its first has more."
            + (f" Here the windows after the first begin with a context of {', '.join(map(str, later))}." if later
               else " Here the text fits the first window.")]
    said.append(f"The perplexity guide's window holds {window} tokens of which the last is only a "
                f"{term('label', 'label')}, so a token "
                f"has at most {window - 1} of context; windows start every {stride} tokens, and each scores only the "
                "tokens after the previous window's end"
                + (f", which keep at least {window - stride} tokens of context from the overlap." if stride < window
                   else ". With a stride equal to the window they do not overlap, and the first token of each window "
                        f"after the first is never scored: {len(scored.strided.never_scored())} tokens here."))
    said.append(f"All three ways read the text after {escape_markdown(scored.tokens[0])}, the prefix token lmviz puts "
                "before it as lm-evaluation-harness does, so that its first token can be scored too; the guide's own "
                "loop puts no prefix of its own and reads the text as the tokenizer encodes it by default, "
                + ("with nothing before it, so that there the text's first token is never predicted."
                   if not scored.before else f"after {escape_markdown(', '.join(scored.before))}.")
                + " lm-evaluation-harness's windows and one pass score every token of the text once"
                + (", and so does the guide's loop." if stride < window else "."))
    if stride < window:
        said.append(f"The guide's own average weights each window's mean by its labels less one, which is right for "
                    f"the first window only (the model's shift drops the first label of a window whose labels begin at "
                    f"its first token, and only the first window's do): it reports "
                    f"{fmt(guide_average(scored.strided))}, where the tokens it scored average "
                    f"{fmt(scored.strided.mean)}.")
    else:
        said.append(f"Without overlap each window's labels begin at its first token, whose label the model's shift "
                    f"drops, so the guide's own average, which weights each window's mean by its labels less one, is "
                    f"the mean of the tokens it scored: {fmt(guide_average(scored.strided))}.")
    if scored.whole is None:
        said.append(f"The text's {tokens} tokens do not fit the {scored.longest:,} lmviz reads at once with this "
                    "model, so there is no single pass to compare with.")
    else:
        said.append(f"In one pass each of the {tokens} tokens is predicted from every token before it: nothing is "
                    "lost.")
    st.markdown("\n".join(f"- {s}" for s in said))  # numbers and the page's own words: no text typed
    show_chart(plots.context_lengths({w.name: w.context for w in ways}), key="bpb_context_lengths")
    with st.expander("Each token's context length and −ln p, three ways"):
        columns = {"position": list(range(1, tokens + 1)), "token": scored.tokens[1:]}
        for w in ways:
            columns[f"{w.name}: context"] = ["" if c is None else str(c) for c in w.context[1:]]
            columns[f"{w.name}: −ln p"] = ["not scored" if x is None else fmt(x) for x in w.nll[1:]]
        key_table(pd.DataFrame(columns), "lmviz_windows.csv", hide_index=True)
    return scored


intro(
    f"A model's loss per {term('token', 'token')} depends on its tokenizer: one that cuts a text into fewer, longer "
    "tokens has more to predict at each, so a higher loss per token, and may still be the better model. Counted per "
    f"byte of the text's {term('UTF-8', 'UTF-8')} instead, every tokenizer is charged for the same bytes: "
    f"{term('bits per byte', 'bits per byte')}, Σ −{term('log p', 'log-probability')} ÷ (ln 2 × bytes)."
)

scorer = choose_causal_lm()
panel = result_panel()
url_state.reset_button()
text = url_state.linked(url_state.text("bpb_text", DEFAULT_TEXT, MAX_CHARS), st.text_area, "Your text",
                        max_chars=MAX_CHARS)
end_token = url_state.linked(url_state.flag("bpb_end"), st.checkbox, END_LABEL,
                             help="The token between pre-training documents: a special token, which stands for no "
                                  "text. Section 2 shows what each convention does with it.")

scorer, result = result_or_stop(
    lambda: scored_with_cpu_fallback(scorer, lambda s: get_bits_per_byte(s, s.cache_key, text, end_token)),
    (NothingToScore,), "Try a shorter text.", panel)
headline(panel, result)
loaded = scorer.loaded
read_at_once = (f" The text is longer than the {result.window:,} tokens lmviz reads at once with this model: it is "
                f"scored in {result.windows} {term('windows', 'window')}, as lm-evaluation-harness does (section 5)."
                if result.windows > 1 else "")
if result.harness_window == result.window:
    their_window = (f" lm-evaluation-harness 0.4.13 reads it {result.harness_window:,} tokens at a time too "
                    f"({result.harness_window_from}).")
else:
    shorter = "here than there" if result.window < result.harness_window else "there than here"
    their_window = (f" lmviz reads at most {result.window:,} tokens of it at once: {result.window_reason}. "
                    f"lm-evaluation-harness 0.4.13 reads {result.harness_window:,} ({result.harness_window_from}), so "
                    f"a text longer than {min(result.window, result.harness_window):,} tokens is read in shorter "
                    f"windows {shorter}.")
st.caption(escape_markdown(
    f"Model: {loaded.name}, {loaded.source}. The text is read after {result.prefix} (id {result.prefix_id}), the "
    "token lm-evaluation-harness puts before a text (the tokenizer's ") + term("BOS", "BOS / EOS")
    + ", else its EOS), so that its first token is predicted too." + read_at_once + escape_markdown(their_window))

st.subheader("1. From nats per token to bits per byte")
st.markdown(f"Each predicted token with the bytes of text it stands for, read from its piece of the vocabulary, and "
            f"its −ln p in {term('nats', 'nats')} and in bits (−log₂ p = −ln p ÷ ln 2):")
key_table(token_table(result), "lmviz_bits_per_byte.csv", hide_index=True)
explain_byte_pieces([r.token for r in result.rows])
st.markdown(arithmetic(result))
toy = toy_per_byte()
st.caption(f"By hand, on the Toy example: Σ −ln p = {fmt(toy.nats)} nats over the {toy.bytes} bytes of “I love dogs "
           f"not cats” is {fmt(toy.nats)} ÷ ({LN2_SHOWN} × {toy.bytes}) = {fmt(toy.bits_per_byte)} bits per byte; "
           f"its {term('perplexity', 'perplexity')} per word, e^({fmt(toy.nats)} ÷ {toy.words}), is "
           f"{fmt(toy.word_perplexity, PERPLEXITY_DIGITS)}.")

st.subheader("2. Two conventions, side by side")
st.markdown(f"[lm-evaluation-harness]({SOURCES['harness']}) puts a prefix token before the text "
            f"({term('BOS', 'BOS / EOS')} here) so that every token of it is predicted, and divides by the bytes of "
            "the whole document. "
            f"[nanochat]({SOURCES['nanochat']}) divides by the bytes of the tokens it predicts, each its own, and "
            "leaves out a special token, which it counts as 0 bytes, from both sums.")
text_table(conventions_table(result), hide_index=True)
st.markdown("\n".join(f"- {s}" for s in conventions_sentences(result, end_token)))

st.subheader("3. Counting a token's bytes after decoding it: the bug")
st.markdown("A token that holds part of a character cannot be decoded alone to that part. Python's "
            "`bytes.decode(\"utf-8\", errors=\"replace\")` writes U+FFFD “�”, three bytes in UTF-8, in its place: "
            "one for the start of a character that the token cuts short, and one for each byte of a character begun "
            "in an earlier token. Counting each token's bytes after decoding it counts bytes the text does not have:")
decoding_bug(result)

st.subheader("4. The same text, several models")
compared = compare_models(scorer, result, text, end_token)

st.subheader("5. Texts longer than the window")
st.markdown(f"A model reads a limited number of tokens at once, so a longer text is scored in "
            f"{term('windows', 'window')}, and a token sees only the tokens before it in its own window: its "
            f"{term('context length', 'context length')} is shorter than its position, and its −ln p usually higher. "
            f"Set a small window to see it on a paragraph; the {term('stride', 'stride')} is the "
            f"[perplexity guide]({SOURCES['guide']})'s.")
scored = windows_section(scorer, text)

show_code(bits_per_byte, per_byte, harness_windows, strided_windows, score_windows, guide_average)
check_yourself("bpb", build_questions(result, compared, scored))
