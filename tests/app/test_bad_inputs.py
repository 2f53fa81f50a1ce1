"""Every case of tests/data/bad_inputs.jsonl through the CLI and the pages that take text. Each case
names, for every surface it goes through, what that surface must give: "scored" (the normal result,
every number finite), "scored, warned" (the result, under one sentence saying the BERT in use does not
know most of the words) or "sentence" (one clear sentence, and no result). Never a traceback, a NaN, a
blank page or live markup."""

import json
import math
import re

import pytest
from streamlit.testing.v1 import AppTest

from lmviz.__main__ import main
from lmviz.app.url_state import RESET_KEY
from lmviz.course.registry import PATH, TextBox
from tests.helpers import APP, open_page
from tests.helpers import BAD_INPUTS as CASES

IDS = [c["case"] for c in CASES]
# the hostile inputs' markup, where it would still be live: not preceded by Markdown's escaping backslash (the link
# is the case's own, to http://x: a page's links to its sources are its own Markdown)
LIVE_MARKUP = [re.compile(p) for p in (r"(?<!\\)<script", r"(?<!\\)<img", r"(?<!\\)\*(?<!\\)\*bold", r"(?<!\\)\$x\^2",
                                       r"(?<!\\):red\[", r"(?<!\\)\](?<!\\)\(http://x\)", "\u202e")]
# A lone surrogate cannot come from a browser (it decodes invalid URL bytes and typed text to valid
# Unicode) and AppTest cannot even encode one into a URL or a widget: the CLI tests cover it.
PAGE_CASES = [c for c in CASES if c["case"] != "lone surrogate"]
PAGE_IDS = [c["case"] for c in PAGE_CASES]

# surface -> how the test drives it (the names are the keys of each case's "expected")
CLI = {"cli clm": ["clm"], "cli mlm --mask-one": ["mlm", "--mask-one"]}


def second_version_on_your_sentence(at: AppTest, text: str):
    at.checkbox(key="sentence_compare").check().run()
    at.text_area(key="sentence_b").input(text[:2000])


def second_version_on_masked_lm(at: AppTest, text: str):
    """The first version's first token masked (the story the page starts with), then the second box."""
    at.radio(key="mlm_mode").set_value("the tokens I choose (fill in the blank)").run()
    at.multiselect(key="mlm_positions").set_value([1]).run()
    at.toggle(key="mlm_compare").set_value(True).run()
    at.text_area(key="mlm_text_b").input(text[:1000])


def typed(box: TextBox):
    """The plain way into a box: the text typed into it, cut to the box's own limit."""
    return lambda at, text: getattr(at, box.widget)(key=box.key).input(text[:box.max_chars])


# Boxes reached another way than by typing into them alone; every other registered box is typed into.
# your-sentence from a link and train are driven by their own tests below, with what they need around the text.
BY_OTHER_MEANS = {"your-sentence from a link", "train alone", "train among ordinary text"}


def small_group_on_grpo(at: AppTest, text: str):
    """The prompt typed with a group of 2 answers of 4 tokens and one update: every case samples a group and takes a
    step (three updates took twice as long, and tell no more of how the prompt is read)."""
    at.slider(key="grpo_group").set_value(2)
    at.number_input(key="grpo_limit").set_value(4)
    at.number_input(key="grpo_updates").set_value(1)
    at.text_input(key="grpo_prompt").input(text[:500])


def in_one_step(fill):
    """``fill`` on One step of learning with one step, not the page's three: every case still takes a step, and the
    later steps tell no more of how the text is read (three took about three times as long)."""
    def fill_for_one_step(at: AppTest, text: str):
        at.number_input(key="step_count").set_value(1)
        fill(at, text)
    return fill_for_one_step


SPECIAL = {"batches": lambda at, text: at.text_area(key="batch_text").input(text[:1000] + "\nThe cat sat."),
           "grpo prompt": small_group_on_grpo}
ONE_STEP = {"gradient-step"}  # One step of learning's own box; its other text's box is in SECOND_BOXES


def how_to_fill(surface: str, box: TextBox):
    fill = SPECIAL.get(surface, typed(box))
    return in_one_step(fill) if surface in ONE_STEP else fill


def compared(at: AppTest) -> list[str]:
    return [m.value for m in at.metric if m.label == COMPARED]


def moved_by_the_step(at: AppTest) -> list[str]:
    """One step of learning's section 4: the other text's loss before and after the step."""
    return [m.value for m in at.markdown if "never learnt, went" in m.value]


def typed_as_the_other_text(at: AppTest, text: str):
    at.text_input(key="step_other").input(text[:1000])


# the boxes of a second text (the "Compare with another version" boxes; One step of learning's other text):
# "scored" is what the page shows of it ("scored, warned": under the sentence that the BERT does not know most of
# the second version's words), "sentence" one sentence in its place; either way the first text's result stays on
# the page
SECOND_BOXES = {"your-sentence compare": ("app_pages/your_sentence.py", second_version_on_your_sentence, compared),
                "masked-lm compare": ("app_pages/masked_lm.py", second_version_on_masked_lm, compared),
                "gradient-step other": ("app_pages/gradient_step.py",
                                        in_one_step(typed_as_the_other_text), moved_by_the_step)}
# every other box of every registered lesson: (its page, how the test fills it)
TEXT_PAGES = {surface: (lesson.page, how_to_fill(surface, box))
              for lesson in PATH for box in lesson.text_boxes for surface in box.surfaces
              if surface not in BY_OTHER_MEANS and surface not in SECOND_BOXES}
COMPARED = "Difference: second − first"  # the comparison's own metric
TRAIN = ["train alone", "train among ordinary text"]
PAGES = ["your-sentence from a link", *TEXT_PAGES, *SECOND_BOXES, *TRAIN]
# the library's functions that tests/lessons/test_next_token.py and tests/lessons/test_chat_loss.py drive with
# every case
LIBRARY = ["next_token_logits", "analyse_sft question", "analyse_sft answer"]


def test_every_registered_text_box_is_a_surface_of_this_test():
    """A lesson's text box, declared in the registry, is driven here without any list to edit."""
    registered = {surface for lesson in PATH for box in lesson.text_boxes for surface in box.surfaces}
    assert registered == set(PAGES)


def test_every_case_names_the_outcome_of_each_of_its_surfaces():
    """A surface missing from a case, or misspelt, would otherwise be looked up in vain or never checked."""
    for case in CASES:
        surfaces = set(CLI) | set(LIBRARY) | (set(PAGES) if case in PAGE_CASES else set())
        assert set(case["expected"]) == surfaces, case["case"]
        assert set(case["expected"].values()) <= {"scored", "scored, warned", "sentence"}, case["case"]


def finite(value) -> bool:
    """No NaN or infinity anywhere in the CLI's JSON. JSON has neither, so the CLI writes them as the
    strings "nan", "inf" and "-inf": those count too."""
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, str):
        return value not in ("nan", "inf", "-inf")
    if isinstance(value, dict):
        return all(finite(v) for v in value.values())
    if isinstance(value, list):
        return all(finite(v) for v in value)
    return True


@pytest.mark.parametrize("case", CASES, ids=IDS)
@pytest.mark.parametrize("surface", list(CLI))
def test_cli(case, surface, capsys):
    command, *options = CLI[surface]
    code = main([command, case["text"], "--json", *options])
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    if case["expected"][surface] == "scored":
        assert code == 0, err
        result = json.loads(out)
        assert isinstance(result["loss"], float) and finite(result)
    else:
        assert code == 2 and out == "", out
        assert err.count("lmviz: ") == 1 and err.strip().splitlines()[-1].startswith("lmviz: "), err


# What a BERT page says above its numbers when the model does not know most of the words
UNKNOWN_WORDS = "does not know most of these words"


def assert_outcome(at: AppTest, expected: str):
    """The page gave ``expected``: its result (metrics, and no warning or error beside them); its result
    with exactly one warning, that the model does not know most of the words ("scored, warned"); or one
    warning or error and no result."""
    assert not at.exception, at.exception
    said = [e.value for e in at.error] + [w.value for w in at.warning]
    if expected.startswith("scored"):
        warned = expected == "scored, warned"
        assert at.metric and len(said) == warned, said
        assert not warned or UNKNOWN_WORDS in at.warning[0].value, said
        assert_finite_metrics(at)
    else:
        assert len(said) == 1 and not at.metric, (said, [m.value for m in at.metric])
    assert_no_live_markup(at)


def assert_finite_metrics(at: AppTest):
    assert not [m.value for m in at.metric if any(bad in m.value.lower() for bad in ("nan", "inf", "∞"))]


def assert_no_live_markup(at: AppTest):
    for element in list(at.markdown) + list(at.caption) + list(at.info) + list(at.warning) + list(at.error):
        assert not any(raw.search(element.value) for raw in LIVE_MARKUP), element.value


@pytest.mark.parametrize("case", PAGE_CASES, ids=PAGE_IDS)
def test_your_sentence_page_from_a_link(case):
    at = AppTest.from_file(APP, default_timeout=120)
    at.query_params["text"] = case["text"]
    at.run()
    assert_outcome(at.switch_page("app_pages/your_sentence.py").run(), case["expected"]["your-sentence from a link"])


def elements_named(node, kind: str) -> list:
    """Every element of the kind (AppTest's class name, e.g. "Status") under node, at any depth."""
    found = [node] if type(node).__name__ == kind else []
    for child in getattr(node, "children", {}).values():
        found += elements_named(child, kind)
    return found


def test_a_page_stopped_by_bad_input_still_ends_its_first_drawing_and_shows_the_way_on():
    """Bad input from a link on a session's first visit: the sentence, the lesson's Previous / Next links under it,
    and no "Loading this lesson" status left beside it, then or on the next run (with st.stop(), every element after
    it raised again: neither the links nor the status's removal were drawn)."""
    at = AppTest.from_file(APP, default_timeout=120)
    at.query_params["text"] = ""
    at.run()
    at = at.switch_page("app_pages/your_sentence.py").run()
    for run in range(2):
        assert not at.exception, at.exception
        assert len(at.warning) == 1 and "nothing to score" in at.warning[0].value, run
        assert [link.proto.label for link in at.get("page_link")] == [  # the top's, then the footer's
            "Next lesson: Bits per byte", "Previous: Toy example", "Next: Bits per byte"]
        assert elements_named(at.main, "Status") == [], run
        at.run()


# One opened page per surface and test process, put back to where the lesson starts by its own "Reset this page"
# before each case, as a learner who resets and types again: a page opened afresh for each of the 210 cases cost a
# second or two each (the home page drawn, then the lesson's first view).
_OPENED: dict[str, AppTest] = {}


def reset_page(surface: str, page: str) -> AppTest:
    """``page`` as it starts: the surface's page reset, or a new one for its first case and after an exception."""
    at = _OPENED.get(surface)
    if at is None or at.exception:
        at = _OPENED[surface] = open_page(page)
        return at
    at.button(key=RESET_KEY).click().run()
    assert not at.exception, at.exception
    return at


@pytest.mark.parametrize("case", PAGE_CASES, ids=PAGE_IDS)
@pytest.mark.parametrize("surface", list(TEXT_PAGES))
def test_text_taking_pages(case, surface):
    page, fill = TEXT_PAGES[surface]
    at = reset_page(surface, page)
    fill(at, case["text"])
    assert_outcome(at.run(timeout=120), case["expected"][surface])


@pytest.mark.parametrize("case", PAGE_CASES, ids=PAGE_IDS)
@pytest.mark.parametrize("surface", list(SECOND_BOXES))
def test_second_version_boxes(case, surface):
    page, fill, second_result = SECOND_BOXES[surface]
    at = reset_page(surface, page)
    fill(at, case["text"])
    at.run(timeout=120)
    assert not at.exception, at.exception
    said = [e.value for e in at.error] + [w.value for w in at.warning]
    shown = second_result(at)
    assert at.metric  # the first text's result
    if case["expected"][surface].startswith("scored"):
        warned = case["expected"][surface] == "scored, warned"
        assert shown and len(said) == warned, said
        assert not warned or UNKNOWN_WORDS in said[0], said
        assert_finite_metrics(at)
    else:
        assert len(said) == 1 and not shown, (said, shown)  # as the main box: one warning
    assert_no_live_markup(at)


# Enough ordinary text to train on (45 sentences, in stories of five); a bad case goes in the middle,
# inside a training story (the first story is held out for validation).
ORDINARY = [f"The student reads page {i} of the book." for i in range(45)]


def among_ordinary(text: str) -> str:
    return " ".join([*ORDINARY[:22], text, *ORDINARY[22:]])


@pytest.mark.parametrize("case", PAGE_CASES, ids=PAGE_IDS)
@pytest.mark.parametrize("surface", TRAIN)
def test_train_page_with_pasted_text(case, surface):
    at = open_page("app_pages/train.py")
    at.radio(key="train_source").set_value("paste text").run()
    at.text_area(key="train_text").input(among_ordinary(case["text"]) if surface == TRAIN[1] else case["text"]).run()
    at.number_input(key="train_steps").set_value(10)
    next(b for b in at.button if b.label == "Train").click().run(timeout=300)  # "Train"
    assert not at.exception, at.exception
    assert_no_live_markup(at)
    if case["expected"][surface] == "sentence":  # too little text to train on: one sentence that says so
        said = [e.value for e in at.error]
        assert len(said) == 1 and "sentences" in said[0], said
        assert "trainer" not in at.session_state
        return
    assert not at.error, [e.value for e in at.error]
    history = at.session_state["trainer"].history
    assert len(history) == 11 and all(math.isfinite(r.validation_loss) for r in history[:1])
    assert all(math.isfinite(r.train_loss) for r in history[1:])
    assert any("Validation loss" in m.value for m in at.markdown)


@pytest.mark.parametrize("model", ["x" * 5000, "../../../etc", "https://evil.example/model", "gpt2\n<script>"])
def test_a_malformed_model_in_the_link_is_explained(model, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    at = AppTest.from_file(APP, default_timeout=120)
    at.query_params["model"] = model
    at.run()
    at.switch_page("app_pages/your_sentence.py").run()
    assert not at.exception, at.exception
    assert not at.error and len(at.warning) == 1 and at.metric  # one sentence, then the bundled model's result
    assert_finite_metrics(at)
    assert_no_live_markup(at)
