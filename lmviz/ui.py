"""Streamlit helpers shared by the pages (the only lmviz module that imports Streamlit):
escaping, "Show the code", and the model loaders every page shares (one copy per process)."""

from __future__ import annotations

import html
import inspect
import logging
import re
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Callable

import streamlit as st

from lmviz.analysis import NotEnoughMemory, analyse_clm
from lmviz.bundled import prepare_bundled
from lmviz.classroom import RESULT_PANEL, chart_font_px
from lmviz.deployment import allowed_models, chars_per_minute, default_dtype, local_paths_allowed
from lmviz.masking import Branch
from lmviz.models import (DEFAULT_MODEL, DTYPES, TINY_BERT, TINY_GPT, LoadedModel, ModelLoadError, available_devices,
                          bert_candidates, check_visitor_name, load_bert, load_causal_lm)
from lmviz.palettes import BLACK, MLM_BRANCH_COLOURS, fill_css
from lmviz.prepare import cached_models
from lmviz.serving import PROCESS_CHARS_IN_FLIGHT, Batcher, FairShare
from lmviz.text import escape_markdown

log = logging.getLogger(__name__)


def result_panel():
    """The container for a page's headline result, pinned under the header (see
    lmviz.classroom.PAGE_CSS). Create it before the controls, fill it once computed."""
    return st.container(key=RESULT_PANEL)


# Tokens drawn as chips that wrap at any width (sizes in rem: presentation mode enlarges them too).
CHIP_ROW = "display:flex;flex-wrap:wrap;align-items:center;margin:0.4rem 0"
CHIP = "display:inline-block;padding:0.1rem 0.45rem;border-radius:0.3rem;white-space:pre-wrap;overflow-wrap:anywhere"
# Each masked-LM branch has a border and a text mark as well as its colour, so that none depends on
# seeing the colour: (border, what the chip says), {token} the original, {shown} what the model reads.
BRANCH_MARKS = {
    Branch.NOT_SELECTED: ("2px solid transparent", "{shown}"),
    Branch.MASKED: (f"2px dashed {BLACK}", "{shown}"),
    Branch.RANDOM: (f"4px double {BLACK}", "{token}→{shown}"),
    Branch.KEPT: (f"2px solid {BLACK}", "✓ {shown}"),
}
BRANCH_MEANINGS = {Branch.NOT_SELECTED: "read as it is, no loss", Branch.MASKED: "replaced by the mask token",
                   Branch.RANDOM: "replaced by a random one", Branch.KEPT: "selected, left as it is"}


STACKED_CHIP = ("display:inline-flex;flex-direction:column;align-items:center;padding:0.15rem 0.45rem;"
                "border-radius:0.3rem;line-height:1.3;")


def stacked_chip(top: str, bottom: str, background: str, hover: str = "", border: str = "none") -> str:
    """A token chip, ``top`` over ``bottom`` (both already HTML-escaped): a token and its number."""
    title = f' title="{html.escape(hover)}"' if hover else ""
    return (f'<span style="{STACKED_CHIP}border:{border};{fill_css(background)}"{title}>'
            f'<span class="lmviz-token" style="white-space:pre-wrap;overflow-wrap:anywhere">{top}</span>'
            f'<span class="lmviz-nll" style="font-size:0.8em;font-variant-numeric:tabular-nums">{bottom}</span></span>')


def chip_row(chips: list[str], css_class: str = "lmviz-sentence", gap: str = "0.3rem") -> str:
    return f'<div class="{css_class}" style="{CHIP_ROW};gap:{gap}">{"".join(chips)}</div>'


def branch_chip(branch: Branch, token: str, shown: str) -> str:
    """What a masked LM reads at one position, marked by its branch (HTML, the text escaped)."""
    border, mark = BRANCH_MARKS[branch]
    text = html.escape(mark.format(token=token, shown=shown))
    return f'<span style="{CHIP};border:{border};{fill_css(MLM_BRANCH_COLOURS[branch])}">{text}</span>'


def show_masked_tokens(rows, mask_token: str) -> None:
    """The masked input, chip by chip (rows: lmviz.bert_analysis.MlmRow), and the legend of the four marks."""
    st.html(chip_row([branch_chip(r.branch, r.token, r.shown) for r in rows]))
    examples = {Branch.NOT_SELECTED: ("original", "original"), Branch.MASKED: ("original", mask_token),
                Branch.RANDOM: ("original", "random"), Branch.KEPT: ("original", "original")}
    st.html(chip_row([f"<span>{branch_chip(branch, *examples[branch])} {html.escape(f'{branch.words}: {meaning}')}</span>"
                      for branch, meaning in BRANCH_MEANINGS.items()], "lmviz-legend", gap="1rem"))


def show_chart(figure, key: str) -> None:
    """A Plotly figure with text readable from the back of the room: at least 14 px,
    18 px in presentation mode (axis titles, ticks, labels and annotations alike)."""
    size = chart_font_px()
    figure.update_layout(font={"size": size}, hoverlabel={"font_size": size}, legend_font_size=size)
    figure.update_xaxes(title_font_size=size, tickfont_size=size)
    figure.update_yaxes(title_font_size=size, tickfont_size=size)
    figure.update_annotations(font_size=size)
    st.plotly_chart(figure, key=key)


def show_code(*functions, label: str = "Show the code") -> None:
    """An expander with the real source of the lmviz functions that made the numbers."""
    with st.expander(label):
        for function in functions:
            st.caption(f"{function.__module__}.{function.__qualname__}")
            st.code(inspect.getsource(function), language="python")


@st.cache_data(ttl=600, show_spinner=False)
def _usual_berts() -> list[str]:
    return bert_candidates()  # may wait for a check that the hub answers: kept for ten minutes


def _bert_choices() -> list[str]:
    """The BERTs to offer: the usual ones, then every other BERT `python -m lmviz prepare` cached here
    (read from the cache folder at every run: cheap, and never out of date)."""
    usual = _usual_berts()
    return usual + [name for name in _cached_here("bert") if name not in usual]


def _cached_here(kind: str) -> list[str]:
    """Hub models of this kind in this machine's Hugging Face cache (they load offline), that this
    deployment offers."""
    allowed = allowed_models()
    return [m.name for m in cached_models() if m.kind == kind and (allowed is None or m.name in allowed)]


@st.cache_resource(show_spinner=False, max_entries=3)
def _load_bert_once(name: str, device: str):
    return load_bert(name, device=device)


# The models this session trained on the Train page, kept in its session state: they belong to it alone.
_TRAINED_KEYS = {"clm": "trained_clm", "bert": "trained_bert"}


def keep_trained_model(trainer) -> None:
    """Hands the Train page's model (a lmviz.training.Trainer's) to the other pages of this session."""
    kind = "clm" if trainer.objective == "clm" else "bert"
    st.session_state[_TRAINED_KEYS[kind]] = trainer.as_loaded_model()


def trained_causal_lm() -> LoadedModel | None:
    return st.session_state.get(_TRAINED_KEYS["clm"])


def trained_bert() -> LoadedModel | None:
    return st.session_state.get(_TRAINED_KEYS["bert"])


def forget_trained_models() -> None:
    for key in _TRAINED_KEYS.values():
        st.session_state.pop(key, None)


def choose_bert():
    """A BERT model picker shared by the BERT pages: bert-base-uncased where it can
    be had, else lmviz's own tiny BERT; one copy per process. Returns a LoadedModel."""
    trained = trained_bert()
    choices = _bert_choices() + ([trained.name] if trained is not None else [])
    with st.expander("Model", expanded=False):
        name = st.selectbox("BERT model", choices, key="bert_choice",
                            help="bert-base-uncased is offered when it is cached here or the hub can be reached.")
        folders = _folders_allowed()
        custom = "" if allowed_models() else st.text_input(
            f"…or a hub id{' / local folder' if folders else ''} of a BertForPreTraining model",
            key="bert_custom").strip()
    if trained is not None and name == trained.name and not custom:
        st.caption(escape_markdown(f"Model: {trained.name}, {trained.source}."))
        return trained
    loaded = _bert_or_tiny(custom or name, folders)
    st.caption(escape_markdown(f"Model: {loaded.name}, {loaded.source}. Device: {loaded.device}."))
    return loaded


def _bert_or_tiny(name: str, folders_allowed: bool) -> LoadedModel:
    """The BERT named, or with one sentence saying why not, lmviz's tiny BERT; the page stops when neither loads."""
    try:
        with st.spinner(f"Loading {escape_markdown(name)}…"):
            return _load_bert_once(check_visitor_name(name, folders_allowed), "auto")
    except Exception as error:  # also what a model folder or download throws: one sentence, not a traceback
        st.error(escape_markdown(problem_for_visitor(name, error)))
    if name == TINY_BERT:
        st.stop()
    st.info(f"Using lmviz's own tiny BERT, {TINY_BERT}, instead.")
    return _bert_or_tiny(TINY_BERT, folders_allowed)


@st.cache_resource(show_spinner=False, max_entries=3)
def get_model(name: str, device: str, dtype: str, token: str | None):
    """One copy of a causal LM per process, shared by every session and page (never modified)."""
    return load_causal_lm(name, device=device, dtype=dtype, token=token)


# on_release: a batcher dropped from the cache ends its thread, which would otherwise keep the model alive
@st.cache_resource(show_spinner=False, max_entries=3, on_release=lambda batcher: batcher.close())
def get_batcher(name: str, device: str, dtype: str, token: str | None):
    """Gathers the requests of all sessions that arrive together into one forward pass."""
    return Batcher(get_model(name, device, dtype, token))


@st.cache_resource(show_spinner=False)
def _fair_share() -> FairShare:
    """One per process: every session's texts count against the same limits."""
    return FairShare(chars_per_minute(), PROCESS_CHARS_IN_FLIGHT)


def fair_share(*texts: str | None):
    """A context manager around a page's forward pass on the visitor's ``texts``, put where a cached result
    would not reach (one already computed costs the server nothing): lmviz.serving.FairShare's limits for
    this session. Its TooMuchText is a NothingToScore, which every page already shows as a sentence."""
    from streamlit.runtime.scriptrunner import get_script_run_ctx  # (Streamlit's own name for this session)

    context = get_script_run_ctx()
    return _fair_share().admit(context.session_id if context else "", [text for text in texts if text])


# Where the whole error of a failed load goes instead of the page: the server's log.
DETAIL = "details in the server's log"
_EXCEPTION_CLASS = r"\b[A-Z]\w*(?:Error|Exception|Warning)\b"
# An absolute path, or one in a home folder: not a hub id's "owner/name" (after a letter), nor a URL's path
# (after ":", "/" or a host name's letter); the … is a path already shortened.
_PATH = re.compile(r"(?<![\w.:/~…-])~?/(?:[^\s'\"`,;()<>]*[^\s'\"`,;()<>.])?|\b[A-Za-z]:\\[^\s'\"`,;()<>]*")


def problem_for_visitor(name: str, error: BaseException) -> str:
    """What a visitor is told of a model that could not be loaded: lmviz's sentence without what it would
    reveal of the server (absolute paths, the home folder and with it the user name, exception classes, the
    library's own detail), on every server alike; the whole error goes to the server's log. A folder keeps
    its last part ("…/my-model"): enough for the teacher who typed it to recognise it."""
    if isinstance(error, ModelLoadError) and error.__cause__ is None:  # lmviz's own refusal: its sentence is all
        log.info("Did not load the model %r: %s", name, error)
    else:
        log.warning("Could not load the model %r", name, exc_info=error)
    said = str(error) if isinstance(error, ModelLoadError) else f"Could not load {name!r} ({DETAIL})."
    said = _without_causes(said, error)
    said = re.sub(rf"\(\s*{_EXCEPTION_CLASS}[^()]*\)", f"({DETAIL})", said)  # detail not found in the causes
    said = re.sub(rf"{_EXCEPTION_CLASS}:?\s*", "", said)
    home = str(Path.home())
    said = said.replace(home, "~") if len(home) > 1 else said
    said = " ".join(_PATH.sub(_last_part, said).split())  # one line: a library's message can have several
    return said if said.endswith((".", "!", "?")) else f"{said}."


def _without_causes(said: str, error: BaseException) -> str:
    """``said`` with the text of the exceptions that caused ``error`` replaced by DETAIL (lmviz's own
    ModelLoadError sentences are kept: a message quotes them on purpose)."""
    cause = error.__cause__ or error.__context__
    while cause is not None:
        if not isinstance(cause, ModelLoadError):
            whole = str(cause).strip()
            first = whole.splitlines()[0] if whole else ""
            for detail in (f"{type(cause).__name__}: {whole}", f"{type(cause).__name__}: {first}", whole, first):
                if len(detail) > 3:  # "" or "0" would match anywhere
                    said = said.replace(detail, "\0")
        cause = cause.__cause__ or cause.__context__
    return re.sub(r"\(\s*\0\s*\)|\0", f"({DETAIL})", said)


def _last_part(path: re.Match) -> str:
    parts = re.split(r"[/\\]", path.group().rstrip("/\\"))
    return f"…/{parts[-1]}" if len(parts) > 1 and parts[-1] not in ("", "~") else "…"


def _folders_allowed() -> bool:
    """lmviz.deployment.local_paths_allowed for this run: where this server listens (Streamlit's
    server.address; unset means every interface) and whether this request came through a proxy."""
    proxied = any(header in st.context.headers for header in ("X-Forwarded-For", "Forwarded", "X-Real-Ip"))
    return local_paths_allowed(st.get_option("server.address"), proxied)


def load_with_progress(name: str, device: str, dtype: str, token: str | None) -> tuple[Batcher | None, str]:
    """(the model's batcher, ""), or (None, one sentence saying why the model could not be loaded)."""
    shown = escape_markdown(name)
    try:
        name = check_visitor_name(name, _folders_allowed())  # before anything reads the disk with the name
        if name == DEFAULT_MODEL:
            bar = st.progress(0.0, text=f"Preparing {shown}…")
            prepare_bundled(lambda fraction, message: bar.progress(fraction, text=message))
            bar.empty()
        from lmviz.hub import waiting_sentence  # (here: the one function of ui.py that needs it)

        # A download under way for another page makes this one wait (one at a time, lmviz.hub): said in the
        # spinner, which shows only while the load takes time (the sentence cannot be updated from inside the
        # cached loader: Streamlit would replay it on every later cache hit).
        with st.spinner(f"Loading {shown}… {escape_markdown(waiting_sentence(name))}".rstrip()):
            return get_batcher(name, device, dtype, token), ""
    except Exception as error:  # also what a model folder or download throws: one sentence, not a traceback
        return None, problem_for_visitor(name, error)


# What a causal-LM page scores with when the model it asks for cannot be loaded: the bundled model
# (absent where only requirements.txt was installed, as on a host), then lmviz's own tiny GPT, in assets/.
CAUSAL_FALLBACKS = (DEFAULT_MODEL, TINY_GPT)


def causal_lm_or_fallback(name: str, device: str, dtype: str, token: str | None) -> Batcher:
    """``name``'s batcher; when it cannot be loaded, the first of CAUSAL_FALLBACKS that this deployment
    offers and that loads, with a sentence saying why; the page stops after the sentence when none loads."""
    allowed = allowed_models()
    fallbacks = [m for m in CAUSAL_FALLBACKS if m != name and (allowed is None or m in allowed)]
    batcher, problem = load_with_progress(name, device, dtype, token)
    for fallback in fallbacks:
        if batcher is not None:
            break
        batcher, _ = load_with_progress(fallback, device, dtype, None)
        if batcher is not None:
            st.warning(escape_markdown(f"{problem} This page uses {fallback} ({batcher.loaded.source}) instead."),
                       icon=":material/swap_horiz:")
    if batcher is None:
        st.error(escape_markdown(problem))
        st.stop()
    return batcher


def default_causal_lm():
    """The bundled model's batcher, shared by every page and session (or a fallback: causal_lm_or_fallback)."""
    return causal_lm_or_fallback(DEFAULT_MODEL, "auto", default_dtype(), None)


@dataclass
class CausalChoice:
    """The causal LM a page scores with (see choose_causal_lm)."""

    loaded: LoadedModel
    analyse: Callable  # (text, add_bos=, top_k=) -> lmviz.analysis.ClmAnalysis
    dtype: str
    token: str | None
    shared: bool  # one copy for every session (its requests batched); False: this session's trained model

    @property
    def cache_key(self) -> tuple:
        """What a cache of this model's results is keyed on (never reused by another model)."""
        return self.loaded.name, self.loaded.identity, self.loaded.device, self.loaded.dtype

    def on_cpu(self) -> CausalChoice:
        """The same shared model on the CPU, for when the GPU runs out of memory (or a fallback)."""
        batcher = causal_lm_or_fallback(self.loaded.name, "cpu", self.dtype, self.token)
        return CausalChoice(batcher.loaded, batcher.analyse, self.dtype, self.token, shared=True)


def _model_settings(asked: str) -> tuple[str, str, str, str | None]:
    """The "Model" expander: (model name, device, dtype, access token)."""
    allowed = allowed_models()
    with st.expander("Model", expanded=False):
        if allowed:  # a public deployment: a fixed list, whatever the link asks for
            name = st.selectbox("Model", allowed, index=allowed.index(asked) if asked in allowed else 0,
                                key="model_name")
            if asked not in allowed:
                st.info(escape_markdown(f"The link asked for {asked!r}, which this deployment does not offer."))
        else:
            folder = " or a local folder" if _folders_allowed() else ""  # offered only where it can be loaded
            name = st.text_input(
                f"Model: the bundled default, lmviz-tiny-gpt or a Hugging Face hub id (e.g. gpt2){folder}",
                value=asked, key="model_name",
            ).strip() or DEFAULT_MODEL
            cached = _cached_here("causal")
            if cached:
                st.caption(escape_markdown(f"On this machine, so offline too: {', '.join(cached)}."))
        if allowed:  # a public deployment keeps its own dtype: another would load a second copy of each model
            st.caption(f"Weights: {default_dtype()}, as this deployment is set up.")
            return name, "auto", default_dtype(), None
        left, right = st.columns(2)
        device = left.selectbox("Device", ["auto", *available_devices()],
                                help="auto: the GPU when there is one, else the CPU")
        dtype = right.selectbox("Weights dtype", list(DTYPES), index=list(DTYPES).index(default_dtype()),
                                help="bfloat16 halves the memory; the loss is always computed in float32")
        token = st.text_input("Hugging Face access token (only for gated models such as Llama 2)",
                              type="password") or None
    return name, device, dtype, token


def choose_causal_lm() -> CausalChoice:
    """The causal-LM picker of the pages that score text: the bundled model, lmviz's tiny GPT, a hub id or a
    folder (only the deployment's list when it has one), the model this session trained, and the link's
    ?model=, kept in the link. A model that cannot be loaded gets one sentence, and the bundled one is used
    instead; the page stops when none can be."""
    name, device, dtype, token = _model_settings(st.query_params.get("model", DEFAULT_MODEL))
    st.query_params["model"] = name
    trained = trained_causal_lm()
    if trained is not None and st.toggle("Use the model you trained on the Train page", key="use_trained"):
        # this session's own model: scored directly, never batched with other sessions' requests
        return CausalChoice(trained, partial(analyse_clm, trained), "float32", None, shared=False)
    batcher = causal_lm_or_fallback(name, device, dtype, token)
    return CausalChoice(batcher.loaded, batcher.analyse, dtype, token, shared=True)


def scored_with_cpu_fallback(choice: CausalChoice, score: Callable) -> tuple[CausalChoice, object]:
    """(choice, score(choice)); when a shared model runs out of GPU memory, the same again on the CPU,
    with one sentence saying so. Other errors (NothingToScore, NotEnoughMemory on the CPU) go to the page."""
    try:
        return choice, score(choice)
    except NotEnoughMemory as problem:
        if not problem.device.startswith("cuda") or not choice.shared:
            raise
        st.info(escape_markdown(f"{problem} This text is scored on the CPU instead."))
    choice = choice.on_cpu()
    return choice, score(choice)


def warn_unknown_words(loaded, check, use_known_text: Callable, key: str) -> None:
    """Above a BERT page's result, when its model does not know most of the text's words
    (check: lmviz.bert_analysis.UnknownWords): which words, and the two ways out, a text it
    knows (one click, ``use_known_text``) or a model that knows English. A loss over letters
    spelled out one by one says little, and the page must not let it pass for a real one."""
    if not check.most:
        return
    from lmviz.classroom import term  # (imported here, beside the one function of ui.py that needs them)
    from lmviz.models import BERT_HUB_ID

    shown = 5  # enough to see the pattern, short enough for the pinned panel on a 720-pixel projector
    words = ", ".join(f"“{escape_markdown(w)}”" for w in check.words[:shown])
    if len(check.words) > shown:
        words += f" and {len(check.words) - shown} more"
    english = "" if loaded.name == BERT_HUB_ID else (
        f", or a model that knows English: {BERT_HUB_ID} under Model, after `python -m lmviz prepare` (once, online)")
    st.warning(
        f"**{escape_markdown(loaded.name)}, with {len(loaded.tokenizer):,} tokens, does not know most of these "
        f"words** ({check.num_unknown} of {check.num_words}: {words}): the numbers below come from "
        f"{term('WordPiece', 'WordPiece ##')} pieces and letters, not words. Use a text it knows{english}.")
    st.button("Use a text it knows", key=key, on_click=use_known_text,
              help="Text from lmviz's own generated stories, the words this model was trained on")
