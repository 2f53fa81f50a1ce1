"""Every lesson page keeps its inputs in its link (lmviz.app.url_state), so that a link, a bookmark or a browser
that reconnects to another replica (a fresh session, started from the URL) lands on the same result: a link opens
the page with its inputs and the same numbers as the same inputs set by hand; setting them by hand writes them to
the link; a value a widget would not take is ignored, the page starting from its defaults; and every input a lesson
page draws, and every text box the registry declares, is in its link unless it is listed here with the reason."""

import math

import pytest
from streamlit.testing.v1 import AppTest

from lmviz.app.url_state import LINK_NAMES, RESET_KEY, number_text
from lmviz.course.registry import PATH
from lmviz.lessons.chat_loss import COMPLETION
from lmviz.lessons.grpo import DAPO, MEAN
from tests.helpers import APP, by_hand, default_page, open_page

STEMS = [lesson.stem for lesson in PATH]
WIDGETS = ("text_area", "text_input", "number_input", "slider", "select_slider", "checkbox", "toggle", "radio",
           "selectbox", "multiselect")
TEXT_WIDGETS = ("text_area", "text_input")
CHOSEN = "the tokens I choose (fill in the blank)"  # Masked LM's second way of masking

# The inputs a lesson page draws that its link does not keep, and why.
NOT_KEPT = {
    "present": "presentation mode, kept as ?present= by lmviz.app.chrome",
    "hide-switch": "the headline numbers hidden from the room, kept as ?hide=1 by lmviz.app.chrome while they are",
    "model_name": "the causal LM, kept as ?model= by lmviz.app.choosers",
    "next_true": "the true next token, kept as ?next= (its token id) by the Next token page itself",
    "grpo_answer": "which answer's tokens are shown: a view of the group, whose choices are the group's answers",
    "bpb_others": "the models scored beside the chosen one: which load offline differs from one machine to the next "
                  "(what `python -m lmviz prepare` fetched), so a link could not bring the same choice to another",
    "distill_position": "which position's sums are written out: a view of the table, whose choices are the answer's "
                        "tokens",
}
NOT_KEPT_PREFIXES = {
    "quiz-answer-": "check-yourself answers: a learner's progress travels in the lesson links' ?answered=",
    "sentence_to_next-": "the position a link to Next token opens: the link's own, not an input of the page",
}
# the Model expander's settings (lmviz.app.choosers), which have no key; an access token is never put in a link
UNKEYED = {"Device", "Weights dtype", "Hugging Face access token (only for gated models such as Llama 2)"}
# The Train page's own text, pasted or uploaded (up to 10 MB), is far too long for a link: only how it is given is.
TEXT_NOT_KEPT = {"train_text"}

# For each lesson, links that set its inputs away from their defaults (as the widgets take them; toy_edits: the
# cells of the Toy example's table, {row: {word: p}}). Between them they set every input the page keeps, those
# drawn only once another input shows them included.
LINKS = {
    "toy_example": [{"toy_edits": {1: {"love": 0.9}, 4: {"cats": 0.25, "</s>": 0.5}}, "toy_learning_rate": 3.0,
                     "toy_smoothing": 0.2, "toy_z_loss": 1e-3, "toy_shift": -5.0, "toy_soft_cap": 5.0}],
    "your_sentence": [
        {"text": "I love dogs not cats.", "bos": True, "sentence_top": True, "sentence_compare": True,
         "sentence_b": "I love cats not dogs."},
        {"text": "I love dogs not cats.", "sentence_predict": True},
    ],
    "next_token": [{"next_text": "The cat sat on the", "next_bos": True, "next_temperature": 0.5, "next_seed": 7}],
    "gradient_step": [{"step_text": "I love dogs not cats.", "step_lr": 0.01, "step_count": 2,
                       "step_other": "I love cats.", "step_adamw": True}],
    "chat_loss": [{"chat_user": "Name a colour.", "chat_answer": "Blue.", "chat_system": "Be brief.",
                   "chat_labels": COMPLETION, "chat_only_counted": True, "chat_other": "Red.", "chat_dpo_raise": 1.5}],
    "grpo": [{"grpo_prompt": "What is 2 + 2? Reply with just the number.", "grpo_group": 3, "grpo_seed": 1,
              "grpo_temperature": 0.7, "grpo_limit": 4, "grpo_rule": "contains the word", "grpo_rule_1": "four",
              "grpo_scale": MEAN, "grpo_lr": 0.01, "grpo_loss_type": DAPO, "grpo_epsilon": 0.3, "grpo_beta": 0.1,
              "grpo_sequence": True, "grpo_r_chosen": 1.0, "grpo_r_rejected": 1.5}],
    "bits_per_byte": [{"bpb_text": "I love 🍕 and 我们.", "bpb_end": True, "bpb_window": 8, "bpb_stride": 4}],
    "distillation": [{"distill_question": "What is 2 + 2?", "distill_context": "The answer is 4.",
                      "distill_answer": "4", "distill_beta": 0.25, "distill_tau": 2.0, "distill_t2": True}],
    "batches": [{"batch_text": "The cat sat.\nA dog ran to the park.", "batch_grid": "labels", "micro_batch_size": 2}],
    "masked_lm": [
        {"mlm_text": "max ate cheese at the station .", "mlm_rate": 0.3, "mlm_seed": 5, "mlm_share_0": 60,
         "mlm_share_1": 20, "mlm_only_selected": False},
        {"mlm_text": "max ate cheese at the station .", "mlm_mode": CHOSEN, "mlm_positions": [3],
         "mlm_compare": True, "mlm_text_b": "max ate bread at the station ."},
    ],
    "next_sentence": [{"nsp_a": "max went to the park .", "nsp_b": "umar ate cheese at the station .",
                       "nsp_follows": "no"}],
    "bert_loss": [{"bert_a": "max went to the park .", "bert_b": "umar ate cheese at the station .",
                   "bert_follows": "no", "bert_mlm_weight": 0.5, "bert_nsp_weight": 1.5, "bert_seed": 3}],
    "train": [{"train_objective": "mlm", "train_preset": "small", "train_steps": 100},
              {"train_source": "paste text"}],
}
LINK_CASES = [(stem, n) for stem in STEMS for n in range(len(LINKS.get(stem, [{}])))]
# the links that show a second box, for the text-box rule
SHOWN_BY = {"sentence_b": {"sentence_compare": True},
            "mlm_text_b": {"mlm_mode": CHOSEN, "mlm_positions": [1], "mlm_compare": True}}

# What else a box's link sets so that the page has less to compute: the box is read the same way. RL fine-tuning's
# 500-character prompt with the default group (8 answers of 12 tokens, 3 updates) took 41 s of a loaded run.
CHEAPER_WITH = {"grpo_prompt": {"grpo_group": 2, "grpo_limit": 4, "grpo_updates": 1}}


def param(key: str) -> str:
    return LINK_NAMES.get(key, key)


def as_link(value) -> str:
    """An input's value as a link writes it, by hand."""
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, list):
        return ",".join(map(str, value))
    if isinstance(value, dict):  # the Toy example's cells
        return ",".join(f"{row}:{word}:{p:g}" for row, cells in value.items() for word, p in cells.items())
    return value


def link_of(inputs: dict) -> dict[str, str]:
    return {param(key): as_link(value) for key, value in inputs.items()}


def opened_from(page: str, link: dict[str, str]) -> AppTest:
    """The page opened from a link that carries ``link``, as a reconnecting browser opens it: a new session."""
    at = AppTest.from_file(APP, default_timeout=120)
    for name, value in link.items():
        at.query_params[name] = value
    at.run()
    return at.switch_page(page).run()


def query(at: AppTest) -> dict[str, str]:
    return {name: value[-1] if isinstance(value, list) else value for name, value in at.query_params.items()}


def metrics(at: AppTest) -> dict[str, str]:
    return {m.label: m.value for m in at.metric}


def inputs(at: AppTest) -> list:
    return [widget for kind in WIDGETS for widget in getattr(at, kind)]


def widget(at: AppTest, key: str):
    return next((w for w in inputs(at) if w.key == key), None)


def lesson(stem: str):
    return next(step for step in PATH if step.stem == stem)


def first_view(stem: str) -> tuple[dict[str, str], dict[str, str], frozenset[str]]:
    """What the page shows with no link: its link as written back, its metrics, and its text boxes' keys."""
    at = default_page(lesson(stem).page)
    assert not at.exception, at.exception
    return query(at), metrics(at), frozenset(w.key for kind in TEXT_WIDGETS for w in getattr(at, kind))


def set_by_hand(at: AppTest, inputs_: dict) -> AppTest:
    """Each input set in its widget (the Toy example's cells typed into its table), a run after each round: an
    input shown only once another is set is set in the next round."""
    left = dict(inputs_)
    if "toy_edits" in left:
        at.session_state["toy_table_0"] = {"edited_rows": left.pop("toy_edits"), "added_rows": [],
                                           "deleted_rows": []}
    for _ in range(len(inputs_) + 1):
        for key in [key for key in left if widget(at, key) is not None]:
            widget(at, key).set_value(left.pop(key))
        at.run()
        assert not at.exception, at.exception
        if not left:
            return at
    raise AssertionError(f"no widget for {sorted(left)}")


def test_every_lesson_has_a_link_that_sets_its_inputs():
    """A new lesson is covered once it says here which link sets its inputs: the tests below run on it."""
    assert set(LINKS) == set(STEMS)
    assert all(links and all(links) for links in LINKS.values())


@pytest.mark.parametrize("stem", STEMS)
def test_every_input_a_lesson_page_draws_is_in_its_link(stem):
    """The rule: each input widget on the page as it opens, unless NOT_KEPT says why not, is written to the link
    with its value."""
    at = default_page(lesson(stem).page)
    assert not at.exception, at.exception
    link = query(at)
    for w in inputs(at):
        if w.key is None:
            assert w.label in UNKEYED, f"{stem}: the input {w.label!r} has no key, so no link can keep it"
        elif w.key not in NOT_KEPT and not w.key.startswith(tuple(NOT_KEPT_PREFIXES)):
            assert link.get(param(w.key)) == as_link(w.value), f"{stem}: {w.key} is not in the link as it is"


BOXES = [(lesson, box) for lesson in PATH for box in lesson.text_boxes if box.key not in TEXT_NOT_KEPT]


@pytest.mark.parametrize(("step", "box"), BOXES, ids=[box.key for _, box in BOXES])
def test_every_registered_text_box_is_read_from_the_link_and_cut_to_its_limit(step, box):
    """The registry's text boxes (lmviz.course.registry.TextBox): a link longer than the box takes is cut to the box's
    max_chars, with one sentence saying so."""
    too_long = "a " * box.max_chars
    at = opened_from(step.page, {param(box.key): too_long, **link_of(SHOWN_BY.get(box.key, {})),
                                 **link_of(CHEAPER_WITH.get(box.key, {}))})
    assert not at.exception, at.exception
    assert getattr(at, box.widget)(key=box.key).value == too_long[:box.max_chars]
    assert f"The text in the link was cut to its first {box.max_chars} characters." in [i.value for i in at.info]
    assert query(at)[param(box.key)] == too_long[:box.max_chars]


@pytest.mark.parametrize(("stem", "n"), LINK_CASES)
def test_a_link_opens_the_page_on_the_result_its_inputs_give_by_hand_and_reset_puts_it_back(stem, n):
    """Opened from the link, the page's inputs are the link's (it writes the link back as it came) and its numbers
    are those of the same inputs set by hand, which differ from the defaults'; and setting them by hand writes them
    to the link. Then on both pages "Reset this page" (lmviz.app.url_state.reset_button), which every lesson page
    has, shows what the page shows with no link: its inputs (every one written back to the link) and its numbers.
    (One test for both: the reset needs the same two pages, and each took a few seconds to compute.)"""
    page, chosen = lesson(stem).page, LINKS[stem][n]
    link = link_of(chosen)
    linked = opened_from(page, link)
    assert not linked.exception, linked.exception
    assert {name: query(linked).get(name) for name in link} == link
    for key, value in chosen.items():
        if key != "toy_edits":
            assert widget(linked, key).value == value, key

    by_hand_page = set_by_hand(open_page(page), chosen)
    assert {name: query(by_hand_page).get(name) for name in link} == link
    assert metrics(linked) == metrics(by_hand_page)
    default_link, default_metrics, _ = first_view(stem)
    assert metrics(linked) != default_metrics or any(
        value != default_link.get(name) for name, value in link.items())  # Train's source: no metric to change

    for changed in (linked, by_hand_page):
        assert query(changed) != default_link
        changed.button(key=RESET_KEY).click().run()
        assert not changed.exception, changed.exception
        assert query(changed) == default_link
        assert metrics(changed) == default_metrics


def test_the_toy_examples_link_gives_the_loss_of_its_table():
    """The Toy example's cells from a link, against the loss worked out in plain Python (tests.helpers.by_hand)."""
    edits = LINKS["toy_example"][0]["toy_edits"]
    at = opened_from("app_pages/toy_example.py", link_of({"toy_edits": edits}))
    assert not at.exception
    expected = by_hand(edits)["loss"]
    assert metrics(at)["Loss: mean(-log p)"] == f"{expected:.5f}" != "0.86302"
    assert math.isfinite(expected)
    # and Reset puts the article's numbers back, in the table and in the link
    next(b for b in at.button if b.label == "Reset to the article's numbers").click().run()
    assert metrics(at)["Loss: mean(-log p)"] == "0.86302" and query(at)["toy_edits"] == ""


@pytest.mark.parametrize("malformed", ["nonsense", "-1e999", ""])
@pytest.mark.parametrize("stem", STEMS)
def test_a_value_a_widget_would_not_take_is_ignored(stem, malformed):
    """Every input the page keeps, but its text boxes (where any text is a text), given a malformed value: the page
    opens without an exception on its defaults, and writes them back to the link."""
    default_link, default_metrics, texts = first_view(stem)
    kept = [name for name in default_link if name not in {param(key) for key in texts} | {"model"}]
    at = opened_from(lesson(stem).page, {name: malformed for name in kept})
    assert not at.exception, at.exception
    assert query(at) == default_link
    assert metrics(at) == default_metrics


def test_numbers_are_written_as_short_as_reads_back_exactly():
    assert [number_text(v) for v in (0.001, 3e-05, 12, 1.0, 0.15)] == ["0.001", "3e-05", "12", "1", "0.15"]
    assert float(number_text(1.0000001)) == 1.0000001
