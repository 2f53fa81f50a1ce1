"""What several test modules share. They import it from here, never from one another: a test module
then runs alone, and moving or renaming a test never breaks another module."""

import dataclasses
import json
import math
import re
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from streamlit.testing.v1 import AppTest

from lmviz.core import toy
from lmviz.core.text import WORD_JOINER
from lmviz.course.registry import PATH

TINY_VOCAB = 50  # the vocabulary of the tiny models conftest.py builds

# Hostile and odd texts; each names what every surface that reads it must give ("scored" or "sentence").
BAD_INPUTS = [json.loads(line)
              for line in (Path(__file__).parent / "data" / "bad_inputs.jsonl").read_text().splitlines()]

APP = str(Path(__file__).resolve().parent.parent / "app.py")
# every page app.py registers (the lesson path's, and the others it names), so that a new page cannot escape the tests
PAGES = [step.page for step in PATH] + re.findall(r'st\.Page\("(app_pages/[^"]+\.py)"', Path(APP).read_text())


def open_page(page: str, timeout: float = 120) -> AppTest:
    """One page of the app, headless (Streamlit's AppTest), opened as a visitor does: home first."""
    # 120 s: RL fine-tuning's first visit samples a group and takes three updates on it, tens of seconds on two
    # cores that other tests share
    at = AppTest.from_file(APP, default_timeout=timeout)
    at.run()
    return at.switch_page(page).run()


# Each page as it first opens, rendered once per test process: see default_page
_FIRST_VIEWS: dict[str, AppTest] = {}


def default_page(page: str) -> AppTest:
    """``page`` as ``open_page`` opens it, rendered once per test process and shared by every test that only reads
    its first view (a lesson's first view was rendered again by about fifteen tests: its wording, its glossary links,
    its colours, its questions, its link). A test that uses a widget, runs the page again or changes the environment
    opens its own with ``open_page``; the shared one is checked unchanged at each use."""
    if page not in _FIRST_VIEWS:
        _FIRST_VIEWS[page] = open_page(page, timeout=300)  # One step of learning's first view takes three steps
        _FIRST_VIEWS[page].lmviz_first_view = _FIRST_VIEWS[page]._tree
    at = _FIRST_VIEWS[page]
    assert at._tree is at.lmviz_first_view, f"a test ran the shared first view of {page} again: use open_page"
    return at


def one_sentence(message: str) -> bool:
    """One line, ending with a full stop, with no sentence ending inside it ("0.1" and "e.g." are not)."""
    return "\n" not in message and message.endswith(".") and not re.search(r"[.!?] [A-Z]", message[:-1])


LABELS = [1, 4, 5, 6, 7]  # the VOCAB indices of "I love dogs not cats", written out for the references


def by_hand(edits: dict) -> dict:
    """What the Toy example page must show for the article's table with ``edits`` ({row: {word: value}}):
    plain Python, not lmviz."""
    table = [row[:] for row in toy.PROBABILITIES]
    for row, cells in edits.items():
        for word, value in cells.items():
            table[row][toy.VOCAB.index(word)] = value
    rows = [[p / sum(row) for p in row] for row in table]  # the page rescales every row to sum to 1
    p_label = [rows[t][LABELS[t]] for t in range(5)]
    nll = [math.inf if p == 0 else -math.log(p) for p in p_label]
    loss = sum(nll) / 5
    reference = F.cross_entropy(torch.tensor(rows, dtype=torch.float64).log(), torch.tensor(LABELS)).item()
    assert loss == reference or loss == pytest.approx(reference, rel=1e-12)
    return {"rows": rows, "p_label": p_label, "nll": nll, "loss": loss,
            "greedy": [row.index(max(row)) for row in rows]}


def answer_question(at: AppTest, key: str, given=None, reveal: bool = False) -> AppTest:
    """Give a check-yourself question ("step/key") an answer (typed text, or a choice) and press Check,
    or press Show the answer."""
    if given is not None:
        boxes = [box for box in at.text_input if box.key == f"quiz-answer-{key}"]
        (boxes[0] if boxes else at.radio(key=f"quiz-answer-{key}")).set_value(given)
    button = "Show the answer" if reveal else "Check"
    return at.button(key=f"FormSubmitter:quiz-{key}-{button}").click().run()


def verdicts(at: AppTest) -> dict[str, list[str]]:
    """What the check-yourself questions said, by kind: right, wrong, not an answer, revealed (unescaped)."""
    plain = lambda elements: [unescaped(e.value) for e in elements]  # noqa: E731
    return {"right": plain(at.success), "wrong": plain(at.error), "not an answer": plain(at.warning),
            "revealed": [v for v in plain(at.info) if v.startswith("The answer: ")]}


def unescaped(markdown: str) -> str:
    """A message as the reader sees it: lmviz.core.text.escape_markdown's backslashes removed, and the invisible
    word joiners it puts in a bare address so that it is not made a link."""
    return re.sub(r"\\(.)", r"\1", markdown).replace(WORD_JOINER, "")


class Clock:
    """A clock a test sets by hand (``clock.now = ...``), for code that takes ``clock=``, such as FairShare."""

    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


# Texts whose tokens hold byte pieces (lmviz.app.byte_pieces), for the lessons whose pages can show them: lesson
# url_path -> (the widget's kind, its key, the text). With the bundled model: an emoji and Chinese cut into bytes; the
# Korean that some of its most likely next tokens begin; an emoji in one of GRPO's 8 answers at its default seed.
BYTE_PIECE_TEXTS = {
    "sentence": ("text_area", "text", "I love 🍕 and 我们."),
    "bpb": ("text_area", "bpb_text", "I love 🍕 and 我们."),
    "next-token": ("text_area", "next_text", "Japanese: 日本語. Chinese: 中文. Korean:"),
    "grpo": ("text_input", "grpo_prompt", "Reply with one emoji."),
}


def with_byte_pieces(lesson) -> AppTest:
    """The lesson's page (lmviz.course.registry's Lesson) on its BYTE_PIECE_TEXTS text."""
    kind, key, text = BYTE_PIECE_TEXTS[lesson.url_path]
    at = open_page(lesson.page)
    getattr(at, kind)(key=key).set_value(text)
    return at.run(timeout=300)


def table_rows(question) -> list[dict[str, str]]:
    """A question's table (what a phone in a live class shows under it) as one dict per row, by its header."""
    header, *rows = question.table
    return [dict(zip(header, row)) for row in rows]


def config_field(config: type, name: str) -> dataclasses.Field:
    """A config class's dataclass field (TRL's and transformers' configs), read without an instance:
    TrainingArguments' __post_init__ looks for devices."""
    for field in dataclasses.fields(config):
        if field.name == name:
            return field
    raise KeyError(f"{config.__name__} has no field {name}")


def config_default(config: type, name: str):
    """A config class's default for ``name`` (its default_factory's value, where it has one)."""
    field = config_field(config, name)
    return field.default_factory() if field.default is dataclasses.MISSING else field.default
