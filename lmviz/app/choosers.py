"""The model pickers of the pages: which causal LM or BERT a page scores with, the fallbacks when it
cannot be loaded, and the model the Train page hands to the other pages of a session."""

from __future__ import annotations

from typing import Callable, TypeVar

import streamlit as st

from lmviz.app import url_state
from lmviz.app.caches import get_batcher, load_bert_once, process_fair_share, session_id, usual_berts
from lmviz.app.chrome import stop_page
from lmviz.app.live_access import came_through_proxy
from lmviz.app.problems import problem_for_visitor, show_problem
from lmviz.core.text import escape_markdown
from lmviz.errors import NotEnoughMemory
from lmviz.models.bundled import prepare_bundled
from lmviz.models.loading import (
    BERT_HUB_ID,
    DEFAULT_MODEL,
    DTYPES,
    TINY_BERT,
    TINY_GPT,
    LoadedModel,
    available_devices,
    check_visitor_name,
)
from lmviz.models.offline import cached_models
from lmviz.models.settings import allowed_models, default_dtype, local_paths_allowed
from lmviz.serving.batcher import Batcher
from lmviz.serving.scorer import CausalScorer

T = TypeVar("T")


def _bert_choices() -> list[str]:
    """The BERTs to offer: the usual ones, then every other BERT `python -m lmviz prepare` cached here
    (read from the cache folder at every run: cheap, and never out of date)."""
    usual = usual_berts()
    return usual + [name for name in _cached_here("bert") if name not in usual]


def english_bert_offered() -> bool:
    """Whether the BERT pages' Model list offers bert-base-uncased here now (cached here, or the hub answers)."""
    return BERT_HUB_ID in usual_berts()


def _cached_here(kind: str) -> list[str]:
    """Hub models of this kind in this machine's Hugging Face cache (they load offline), that this
    deployment offers."""
    allowed = allowed_models()
    return [m.name for m in cached_models() if m.kind == kind and (allowed is None or m.name in allowed)]


# The models this session trained on the Train page, kept in its session state: they belong to it alone.
_TRAINED_KEYS = {"clm": "trained_clm", "bert": "trained_bert"}


def keep_trained_model(trainer) -> None:
    """Hands the Train page's model (a lmviz.lessons.training.Trainer's) to the other pages of this session."""
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
    with st.expander("Model", expanded=False), url_state.kept_on_reset():
        name = url_state.linked(url_state.choice("bert_choice", choices[0], choices), st.selectbox, "BERT model",
                                choices, help="bert-base-uncased is offered when it is cached here or the hub can be "
                                              "reached.")
        folders = _folders_allowed()
        custom = "" if allowed_models() else url_state.linked(
            url_state.text("bert_custom", "", MAX_NAME_CHARS), st.text_input,
            f"…or a hub id{' / local folder' if folders else ''} of a BertForPreTraining model").strip()
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
            return load_bert_once(check_visitor_name(name, folders_allowed), "auto")
    except Exception as error:  # also what a model folder or download throws: one sentence, not a traceback
        show_problem(problem_for_visitor(name, error), kind="error")
    if name == TINY_BERT:
        stop_page()
    st.info(f"Using lmviz's own tiny BERT, {TINY_BERT}, instead.")
    return _bert_or_tiny(TINY_BERT, folders_allowed)


def _folders_allowed() -> bool:
    """lmviz.models.settings.local_paths_allowed for this run: where this server listens (Streamlit's
    server.address; unset means every interface) and whether this request came through a proxy."""
    return local_paths_allowed(st.get_option("server.address"), came_through_proxy())


def load_with_progress(name: str, device: str, dtype: str, token: str | None) -> tuple[Batcher | None, str]:
    """(the model's batcher, ""), or (None, one sentence saying why the model could not be loaded)."""
    shown = escape_markdown(name)
    try:
        name = check_visitor_name(name, _folders_allowed())  # before anything reads the disk with the name
        if name == DEFAULT_MODEL:
            bar = st.progress(0.0, text=f"Preparing {shown}…")
            prepare_bundled(lambda fraction, message: bar.progress(fraction, text=message))
            bar.empty()
        from lmviz.models.hub import waiting_sentence  # (here: the one function of ui.py that needs it)

        # A download under way for another page makes this one wait (one at a time, lmviz.models.hub): said in the
        # spinner, which shows only while the load takes time (the sentence cannot be updated from inside the
        # cached loader: Streamlit would replay it on every later cache hit).
        with st.spinner(f"Loading {shown}… {escape_markdown(waiting_sentence(name))}".rstrip()):
            return get_batcher(name, device, dtype, token), ""
    except Exception as error:  # also what a model folder or download throws: one sentence, not a traceback
        return None, problem_for_visitor(name, error)


# What a causal-LM page scores with when the model it asks for cannot be loaded: the bundled model
# (absent where only requirements.txt was installed, as on a host), then lmviz's own tiny GPT, in assets/.
CAUSAL_FALLBACKS = (DEFAULT_MODEL, TINY_GPT)
MAX_NAME_CHARS = 300  # a hub id (owner/name) or a folder's path, as a link carries it: longer names no model


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
            show_problem(f"{problem} This page uses {fallback} ({batcher.loaded.source}) instead.",
                         icon=":material/swap_horiz:")
    if batcher is None:
        show_problem(problem, kind="error")
        stop_page()
    return batcher


def default_scorer() -> CausalScorer:
    """The bundled model, shared by every page and session (or a fallback: causal_lm_or_fallback)."""
    return _shared(causal_lm_or_fallback(DEFAULT_MODEL, "auto", default_dtype(), None), default_dtype(), None)


def unchosen_scorer() -> CausalScorer:
    """What choose_causal_lm gives a page opened with no ?model= in its link and nothing chosen under its Model
    expander: the bundled model (the deployment's first when it does not offer that), on "auto", in the default
    dtype. For a page with no picker of its own that scores as a causal-LM page does: the join page scores a
    student's sentence with it, as Your sentence would."""
    allowed = allowed_models()
    name = DEFAULT_MODEL if not allowed or DEFAULT_MODEL in allowed else allowed[0]
    return _shared(causal_lm_or_fallback(name, "auto", default_dtype(), None), default_dtype(), None)


def _shared(batcher: Batcher, dtype: str, token: str | None) -> CausalScorer:
    return CausalScorer(batcher.loaded, batcher, process_fair_share(), session_id(), dtype, token)


def on_cpu(scorer: CausalScorer) -> CausalScorer:
    """The same shared model on the CPU, for when the GPU runs out of memory (or a fallback)."""
    return _shared(causal_lm_or_fallback(scorer.loaded.name, "cpu", scorer.dtype, scorer.token), scorer.dtype,
                   scorer.token)


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


def choose_causal_lm() -> CausalScorer:
    """The causal-LM picker of the pages that score text: the bundled model, lmviz's tiny GPT, a hub id or a
    folder (only the deployment's list when it has one), the model this session trained, and the link's
    ?model=, kept in the link. A model that cannot be loaded gets one sentence, and the bundled one is used
    instead; the page stops when none can be."""
    name, device, dtype, token = _model_settings(st.query_params.get("model", DEFAULT_MODEL))
    st.query_params["model"] = name
    trained = trained_causal_lm()
    if trained is not None and st.toggle("Use the model you trained on the Train page", key="use_trained"):
        # this session's own model: scored in its own thread, never batched with other sessions' requests
        return CausalScorer(trained, None, process_fair_share(), session_id(), "float32", None)
    return _shared(causal_lm_or_fallback(name, device, dtype, token), dtype, token)


def comparable_causal_lms(chosen: str) -> list[str]:
    """The causal LMs a page can score the same text with beside ``chosen``, each offline: the bundled model,
    lmviz's tiny GPT, and every causal LM `python -m lmviz prepare` cached here; only those this deployment
    offers. The first is the bundled model, or lmviz's tiny GPT beside it: a second tokenizer any install has."""
    allowed = allowed_models()
    names = dict.fromkeys([*CAUSAL_FALLBACKS, *_cached_here("causal"), *(allowed or [])])
    return [name for name in names if name != chosen and (allowed is None or name in allowed)]


def other_causal_lm(name: str, like: CausalScorer) -> CausalScorer | str:
    """``name``'s shared copy in ``like``'s dtype, or the one sentence saying why it cannot be loaded."""
    batcher, problem = load_with_progress(name, "auto", like.dtype, None)
    return problem if batcher is None else _shared(batcher, like.dtype, None)


def stop_without_chat_template(scorer: CausalScorer, why: str) -> None:
    """On a page that needs a chat model: when the scorer's tokenizer has no chat template, one sentence saying so
    (``why``: what the page cannot do without one) and the page stops. When it stands in for a model that could not
    be loaded (choose_causal_lm keeps the one asked for in the link), it does not advise a model that is not here."""
    loaded = scorer.loaded
    if getattr(loaded.tokenizer, "chat_template", None):
        return
    fell_back = loaded.name != st.query_params["model"]
    advice = ("The model asked for could not be loaded here (see above), and no chat model could take its place."
              if fell_back else "Choose a chat model under Model above, such as the bundled SmolLM2-135M-Instruct.")
    st.warning(escape_markdown(f"{loaded.name}'s tokenizer has no chat template, so {why}. {advice}"))
    stop_page()


def scored_with_cpu_fallback(scorer: CausalScorer, score: Callable[[CausalScorer], T]) -> tuple[CausalScorer, T]:
    """(scorer, score(scorer)); when a shared model runs out of GPU memory, the same again on the CPU,
    with one sentence saying so. Other errors (NothingToScore, NotEnoughMemory on the CPU) go to the page."""
    try:
        return scorer, score(scorer)
    except NotEnoughMemory as problem:
        if not problem.device.startswith("cuda") or not scorer.shared:
            raise
        show_problem(f"{problem} This text is scored on the CPU instead.", kind="info")
    scorer = on_cpu(scorer)
    return scorer, score(scorer)
