import copy
import math
import time

import streamlit as st

from lmviz.app import url_state
from lmviz.app.choosers import forget_trained_models, keep_trained_model
from lmviz.app.chrome import intro, stop_page, term, terms_linked
from lmviz.app.path import check_yourself
from lmviz.app.problems import show_problem
from lmviz.app.widgets import result_panel, show_chart, show_code
from lmviz.core.corpus import MAX_USER_TEXT_BYTES, corpus_from_text, generate_corpus
from lmviz.core.numbers import fmt
from lmviz.core.text import escape_markdown
from lmviz.course.questions.train import build_questions
from lmviz.figures import plots
from lmviz.lessons.training import (
    OBJECTIVES,
    PART_UNITS,
    PRESETS,
    UNIGRAM_ENTROPY,
    VALIDATION_ENTROPY,
    Trainer,
    compute_loss,
    corpus_tokenizer,
    loss_parts,
    make_batch,
)

SOURCES = ["lmviz's generated stories", "paste text", "upload a .txt file"]
# Between two drawings of the curve in a run: the browser draws each from scratch, and a chart replaced before it
# was drawn is never seen. The copy behind follows halfway (see draw).
REDRAW_SECONDS = 1.0
CURVE = "train-curve"  # the box where the curve's two copies lie one over the other (see draw)
# The later copy on top, its paper opaque once drawn (see-through until then); the one behind never takes the pointer.
# Streamlit hides a chart whenever it re-renders it until it has measured its width again, which is this box's: the
# hidden frames left the curve off the screen even between two drawings, so the copies stay shown.
CURVE_CSS = f"""<style>.st-key-{CURVE} {{ display: grid; grid-template-columns: 100%; }}
.st-key-{CURVE} > * {{ grid-area: 1 / 1; }}
.st-key-{CURVE} > :first-child {{ pointer-events: none; }}
.st-key-{CURVE} .js-plotly-plot {{ visibility: visible !important; }}
.st-key-{CURVE} .main-svg:first-of-type {{ background: var(--lmviz-background, Canvas) !important; }}</style>"""


@st.cache_data(show_spinner=False, max_entries=1)
def stories_example(seed: int) -> list[str]:
    return [s.text for s in generate_corpus(num_train=3, num_validation=0, seed=seed).train]


@st.cache_data(show_spinner=False, max_entries=4)
def vocabulary_size(user_text: str | None) -> int:
    """V of the tokenizer that pressing Train builds for this text; ValueError where it cannot train on it."""
    return len(corpus_tokenizer(corpus_from_text(user_text) if user_text is not None else None))


def questions_now(trainer: Trainer | None, objective: str, user_text: str | None) -> list:
    """On the model the page shows once it has trained; before, on the tokenizer Train would build."""
    if trainer is not None and trainer.step:
        return build_questions(trainer.objective, len(trainer.tokenizer), trainer.history)
    return build_questions(objective, vocabulary_size(user_text))


def read_user_text() -> str | None:
    # the way in only: a pasted or uploaded text (up to MAX_USER_TEXT_BYTES) is far too long for a link
    source = url_state.linked(url_state.choice("train_source", SOURCES[0], SOURCES), st.radio, "Training text", SOURCES,
                              horizontal=True)
    if source == "paste text":
        return st.text_area("Your text (at least 40 sentences; blank lines separate stories)", key="train_text",
                            max_chars=MAX_USER_TEXT_BYTES)
    if source == "upload a .txt file":
        upload = st.file_uploader(f"A .txt file, at most {MAX_USER_TEXT_BYTES // 1_000_000} MB", type=["txt"])
        if upload is None:
            return ""
        if upload.size > MAX_USER_TEXT_BYTES:
            st.error(f"The file is {upload.size / 1e6:.1f} MB; the limit is {MAX_USER_TEXT_BYTES // 1_000_000} MB.")
            return ""
        return upload.getvalue().decode("utf-8", errors="replace")
    return None


def show_headline(trainer: Trainer) -> None:
    """The step, the latest validation loss of each part and ln V, where the token loss starts, in the pinned
    result panel: from step 0, the untrained model, before anyone presses Train."""
    validation = trainer.latest_validation
    size = len(trainer.tokenizer)
    with headline.container():
        columns = st.columns(2 + len(validation))
        columns[0].metric("Step", trainer.step)
        for column, (part, value) in zip(columns[1:], validation.items()):
            column.metric(f"Validation loss: {part}", fmt(value))
        columns[-1].metric(f"Uniform guess: ln V = ln {size}", fmt(math.log(size)),
                           help=f"The loss of a model that gives each of the V = {size} tokens the same probability.")


def new_trainer(objective: str, preset: str, user_text: str | None) -> Trainer:
    """A fresh model for these settings, its step 0 recorded; ValueError, with a sentence for the learner, where
    it cannot train on the text."""
    corpus = corpus_from_text(user_text) if user_text is not None else None
    try:
        trainer = Trainer(objective, preset, corpus=corpus, device="auto")
    except ValueError as problem:  # e.g. next-sentence pairs need other stories to draw "not next" ones from
        if "nsp" not in objective:
            raise
        raise ValueError(f"{problem} Next-sentence prediction draws its not-next sentences from other stories: "
                         "paste more stories, separated by blank lines, or train the masked LM alone.") from problem
    trainer.record_start()
    return trainer


def line_explanations(trainer: Trainer) -> dict[str, str]:
    """What each reference line of the chart's legend is, by its name there (Trainer.reference_lines)."""
    size = len(trainer.tokenizer)
    said = {
        f"uniform guess: ln V = ln {size}": f"the loss of a model that gives each of the V = {size} tokens the same "
                                            f"probability, 1/{size}: about where an untrained model starts.",
        "uniform guess: ln 2": "the loss of a model that gives both answers, B follows A or not, p = 1/2: about where "
                               "the next-sentence curve starts.",
        UNIGRAM_ENTROPY: "−Σ f ln f, where f is each token's share of the training text (the corpus) and the sum "
                         "runs over its distinct tokens: the loss, on that text, of a model that knows how often "
                         "each token occurs but ignores the tokens around it (unigram: one token at a time). A "
                         "model that reads the context can go below it.",
        VALIDATION_ENTROPY: "where the validation curve levels off for a model that has learnt the generator "
                            "exactly. The training curve is measured on a different batch of stories at every "
                            "step; some batches happen to be easier than the validation stories, so the training "
                            "curve can dip below this line.",
    }
    shown = [label for lines in trainer.reference_lines.values() for label in lines]
    # tests/course/test_questions_training.py checks that every line of the legend is explained
    return {label: said[label] for label in shown if label in said}


def show_progress(trainer: Trainer, target_step: int) -> None:
    progress.progress(min(1.0, trainer.step / target_step),
                      text=f"step {trainer.step} of {target_step} — {trainer.history[-1].seconds:.0f} s")


def draw(trainer: Trainer) -> None:
    """The numbers and the curve as they are now. A chart whose data changes is a new element to Streamlit, which
    the browser draws from scratch, blank meanwhile: the curve left the screen at every update (in 3 of 8
    screenshots of a run), and for good on a busy machine. So the curve is two copies, one over the other, redrawn
    half a redraw apart (catch_up): the one being redrawn is see-through, and the other shows through it."""
    show_headline(trainer)
    figure = plots.training_curves(trainer.history, trainer.reference_lines, PART_UNITS)
    key = f"training_curves_{len(trainer.history)}"
    first = 1 if copies else 0  # the one behind is added first, in each run: the box keeps them in that order
    pending[:] = [(1 - first, copy.deepcopy(figure), key)]  # a copy: drawing a figure sets its size and title
    draw_copy(first, figure, key)
    drawn_at[:] = [time.monotonic()]


def draw_copy(which: int, figure, key: str) -> None:
    """Copy 0 (behind) or 1 (on top) of the curve, replacing this run's drawing of it, or added to the box."""
    key += "" if which else "_behind"
    if which < len(copies):
        with copies[which]:
            show_chart(figure, key)
    else:
        with curve_box:
            copies.append(show_chart(figure, key))


def catch_up(now: bool = False) -> None:
    """The copy the last drawing left out, once the other has had time to be drawn (or ``now``)."""
    if pending and (now or time.monotonic() - drawn_at[0] >= REDRAW_SECONDS / 2):
        draw_copy(*pending.pop())


def show_guesses(trainer: Trainer) -> None:
    record = trainer.latest_predictions
    if record is not None:
        with guesses.container():
            st.subheader(f"What the model guesses (step {record.step})")
            for line in record.predictions:
                st.text(line)


intro(
    f"A model starts knowing nothing: its {term('token', 'token')} loss, in {term('nats', 'nats')}, is about ln V, "
    "the loss of a uniform guess over its V "
    "tokens (and its next-sentence loss about ln 2, a uniform guess between two answers). Its "
    f"{term('perplexity', 'perplexity')}, e^loss, is the number of equally likely tokens that would leave it as "
    "unsure. Each training step "
    "shows it a batch of text, computes the loss with lmviz's own loss functions, and nudges the weights downhill."
)
with st.expander("What the model learns from: lmviz's generated stories"):
    st.markdown("lmviz writes short stories with a random generator of its own, so it knows the exact "
                "probability of every story it writes. Divided by the number of tokens, -log of it is the "
                f"stories' own {term('entropy', 'entropy')}: on average, no model that predicts each **next** "
                "token from the ones before it can score below it. A masked LM is not bound by it: it sees the "
                "words on both sides of a gap, which tell it more than the words before. Three examples:")
    for text in stories_example(0):
        st.text(text)

with result_panel():
    headline = st.empty()
# The controls left, the curve right, level with the buttons: on a 1280×720 projector the curve a click starts
# is on screen with the button, under the pinned panel.
controls, curve = st.columns([2, 3])
with controls:
    with st.container(horizontal=True):
        start = st.button("Train", type="primary")
        st.button("Stop", help="Stops after the current step; the model keeps what it learned.")
        reset = st.button("Start over")
        url_state.reset_button()
    progress = st.empty()
    objective = url_state.linked(url_state.choice("train_objective", next(iter(OBJECTIVES)), list(OBJECTIVES)),
                                 st.selectbox, "Objective", list(OBJECTIVES), format_func=OBJECTIVES.get)
    preset = url_state.linked(url_state.choice("train_preset", next(iter(PRESETS)), list(PRESETS)), st.selectbox,
                              "Model size", list(PRESETS),
                              format_func=lambda p: f"{p}: {PRESETS[p][1]} layers, width {PRESETS[p][0]}")
    steps = url_state.linked(url_state.number("train_steps", 300, 10, 5000), st.number_input, "Steps", min_value=10,
                             max_value=5000, step=50)
    user_text = read_user_text()
curve_box = curve.container(key=CURVE)
st.html(CURVE_CSS)
copies: list = []  # this run's drawings of the curve's two copies, behind then on top (see draw)
pending: list = []  # the copy that the last drawing left for later: (which, figure, key)
drawn_at: list = []  # when the last drawing was sent (time.monotonic())
guesses = st.empty()

settings = (objective, preset, user_text)
trainer: Trainer | None = st.session_state.get("trainer")
if trainer is not None:
    # Streamlit starts this run at once, while the run it replaces (Train, before Stop or any other click) may
    # still be inside a step: wait for that step, and end that run, so that what this run shows stays shown.
    trainer.stop()
if reset:
    st.session_state.pop("trainer", None)
    forget_trained_models()
    trainer = None
settings_changed = trainer is not None and st.session_state.get("trainer_settings") != settings
# An untrained model follows the settings; a trained one is kept until Train starts another.
if trainer is None or (settings_changed and (start or trainer.step == 0)):
    st.session_state.pop("trainer", None)
    trainer = None
    try:
        with st.spinner("Building the tokenizer and a fresh model…"):
            trainer = new_trainer(*settings)
    except ValueError as problem:
        if start:
            show_problem(problem, kind="error")
            stop_page()
        show_problem(f"Nothing to train yet: {problem}", headline, kind="caption")
    else:
        st.session_state.update(trainer=trainer, trainer_settings=settings)
elif settings_changed:
    controls.caption("The settings changed: pressing Train starts a new model from scratch.")

if trainer is not None and start:
    draw(trainer)  # at once: the panel's numbers were emptied when this run began
    target = trainer.step + int(steps)
    for record in trainer.run(int(steps)):
        show_progress(trainer, target)  # a Streamlit call at every step: a click ends this run within one step
        if record.step == target or time.monotonic() - drawn_at[0] >= REDRAW_SECONDS:
            draw(trainer)
        else:
            catch_up()
        if record.predictions:
            show_guesses(trainer)

if trainer is not None:
    if not start:
        draw(trainer)
        show_guesses(trainer)
    validation = trainer.latest_validation
    parts = ", ".join(f"{part} {fmt(value)}" for part, value in validation.items())
    total = f" (sum {fmt(sum(validation.values()))}, the number training lowers)" if len(validation) > 1 else ""
    if trainer.step:
        last = trainer.history[-1]
        st.markdown(f"**{OBJECTIVES[trainer.objective]}**, model size {trainer.preset}, on {trainer.device}: "
                    f"{last.step} steps in {last.seconds:.0f} s. Validation loss: {parts}{total}.")
    else:
        st.info(f"Step 0, the untrained model: validation loss {parts}{total}. Press Train. The smallest model "
                "shows a clear fall within a minute on a laptop.")
    st.caption(terms_linked("The chart's reference lines, as its legend names them: " + " ".join(
        f"“{label}” is {said}" for label, said in line_explanations(trainer).items())))
    if trainer.step:
        keep_trained_model(trainer)
        if trainer.objective == "clm":
            st.page_link("app_pages/your_sentence.py", label="Score a sentence with the model you trained",
                         icon=":material/edit_note:")
        else:
            st.page_link("app_pages/masked_lm.py", label="Mask a sentence for the BERT you trained",
                         icon=":material/theater_comedy:")

catch_up(now=not start)  # a run that trained has drawn both; in any other, the copy on top is the same chart
show_code(Trainer.train_step, compute_loss, loss_parts, make_batch)
try:
    questions = questions_now(trainer, objective, user_text)
except ValueError as problem:  # the text cannot be trained on: Train says so too, when pressed
    st.caption(escape_markdown(f"Check yourself: its questions need a text the model can train on. {problem}"))
else:
    check_yourself("train", questions)
