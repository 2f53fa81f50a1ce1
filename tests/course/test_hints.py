"""Every check-yourself hint that points somewhere on its page (a section, its title, its table or chart, the
panel at the top, a slider, a toggle, a line) points at something that is there, in each mode the learner can
put the page in. The questions are the ones the page itself builds, read as it calls check_yourself; the page's
layout is read from the same run's element tree."""

import re
from dataclasses import dataclass, field

import pytest

from lmviz.app import path
from lmviz.course.registry import PATH
from tests.helpers import answer_question, open_page


def checked(key):
    return lambda at: at.checkbox(key=key).check().run()


def toggled(key, on=True):
    return lambda at: at.toggle(key=key).set_value(on).run()


def chosen(key, value, kind="radio"):
    return lambda at: getattr(at, kind)(key=key).set_value(value).run()


# lesson stem -> the modes of its page that change what is on it: (name, the steps that put the page in it)
MODES = {
    "your_sentence": [("predict first", [checked("sentence_predict")]),
                      ("predict first, answered", [checked("sentence_predict"),
                                                   lambda at: answer_question(at, "sentence/highest", reveal=True)]),
                      ("compared", [checked("sentence_compare")]),
                      ("predict first, compared", [checked("sentence_predict"), checked("sentence_compare")])],
    "next_token": [("a token chosen", [lambda at: at.selectbox(key="next_true").select_index(1).run()])],
    "chat_loss": [("only the positions that count", [toggled("chat_only_counted")])],
    "masked_lm": [("chosen tokens", [chosen("mlm_mode", "the tokens I choose (fill in the blank)"),
                                     chosen("mlm_positions", [1, 2], kind="multiselect")]),
                  ("chosen tokens, compared", [chosen("mlm_mode", "the tokens I choose (fill in the blank)"),
                                               chosen("mlm_positions", [1, 2], kind="multiselect"),
                                               toggled("mlm_compare")]),
                  ("every position", [toggled("mlm_only_selected", False)])],
    "next_sentence": [("B does not follow", [chosen("nsp_follows", "no")])],
}
POINTERS = re.compile(r"\b(section|table|chart|panel|slider|toggle|Step \d|paragraph|line|caption)", re.I)


@dataclass
class Layout:
    """A page as the learner sees it: the sections in order (the text before the first one under ""), each
    with the kinds of element in it; and every widget's label by kind."""

    sections: dict[str, set[str]] = field(default_factory=lambda: {"": set()})
    texts: list[str] = field(default_factory=list)
    labels: dict[str, list[str]] = field(default_factory=dict)

    def section(self, number: str) -> tuple[str, set[str]] | None:
        return next(((title, kinds) for title, kinds in self.sections.items()
                     if re.match(rf"(?:Step )?{number}[.:]? ", title)), None)


def layout_of(at) -> Layout:
    page, current = Layout(), ""

    def visit(node):
        nonlocal current
        for child in getattr(node, "children", {}).values():
            kind = getattr(child, "type", "")
            if kind == "subheader":
                current = child.value
                page.sections[current] = set()
            elif kind in ("dataframe", "table"):
                page.sections[current].add("table")
            elif kind in ("plotly_chart", "vega_lite_chart", "arrow_vega_lite_chart"):
                page.sections[current].add("chart")
            elif kind == "metric":
                page.sections[current].add("metric")
            elif kind in ("markdown", "caption", "latex", "text"):
                page.sections[current].add("text")
                page.texts.append(str(child.value))
            label = getattr(child, "label", None)
            if isinstance(label, str) and label:
                page.labels.setdefault(kind, []).append(label)
            visit(child)

    visit(at.main)
    return page


def unmet(hint: str, page: Layout) -> list[str]:
    """What ``hint`` points at that is not on ``page``; and a hint that seems to point somewhere in a way this
    test cannot read is reported too, so that a new kind of pointer is never passed unread."""
    problems, read = [], False
    for number in re.findall(r"\bsection (\d+)", hint):
        read = True
        if page.section(number) is None:
            problems.append(f"no section {number}")
    for what, number in re.findall(r"\b(table|chart) of section (\d+)", hint) + [
            (what, number) for number, what in re.findall(r"\b(?:section|Step) (\d+)'s (table|chart)", hint)]:
        read = True
        found = page.section(number)
        if found is not None and what not in found[1]:
            problems.append(f"section {number} ({found[0]}) has no {what}")
    for number, quoted in re.findall(r"\bsection (\d+), ([A-Z][^;(]*)", hint):
        found = page.section(number)
        title = found[0].split(" ", 1)[1].split(":")[0] if found else ""
        if found is not None and not quoted.startswith(title):
            problems.append(f"section {number} is called {found[0]!r}, not {quoted!r}")
    if re.search(r"\bpanel at the top\b", hint):
        read = True
        if "metric" not in page.sections[""]:
            problems.append("no panel of results at the top")
        named = re.search(r"panel at the top, (.+?) and (.+?)[;.]", hint)
        for name in named.groups() if named else ():
            if not any(label.startswith(name) for label in page.labels.get("metric", [])):
                problems.append(f"the panel has no {name!r}")
    for names in re.findall(r"\bthe ([A-Z][^();]*?) sliders?\b", hint):
        read = True
        for name in names.split(" and "):
            if not any(label.startswith(name) for label in page.labels.get("slider", [])):
                problems.append(f"no slider {name!r}")
    for name in re.findall(r"\btoggle, ([A-Z][^,)]*)", hint):
        read = True
        if not any(label.startswith(name) for label in page.labels.get("toggle", [])):
            problems.append(f"no toggle {name!r}")
    for quoted in re.findall(r"\bthe line '([^']+?)(?: \.\.\.)?'", hint):
        read = True
        if not any(text.startswith(quoted) for text in page.texts):
            problems.append(f"no line {quoted!r}")
    if re.search(r"\bthe (?:✓ cells of the |rows of the )?table\b(?! of)", hint):
        read = True
        if not any("table" in kinds for kinds in page.sections.values()):
            problems.append("no table on the page")
    if re.search(r"\bthe paragraph at the top\b", hint):
        read = True
        if "text" not in page.sections[""]:
            problems.append("no paragraph at the top")
    if POINTERS.search(hint) and not read:
        problems.append("points somewhere this test cannot read")
    return problems


def test_the_reader_finds_what_is_missing():
    page = Layout(sections={"": {"metric", "text"}, "1. Tokens": {"text"}, "2. Inputs and labels: ids": {"table"}},
                  labels={"metric": ["Loss"], "slider": ["Temperature T"]})
    assert unmet("section 2, Inputs and labels, and the table of section 2; the panel at the top.", page) == []
    assert unmet("the chart of section 1 and section 3", page) == ["no section 3", "section 1 (1. Tokens) has no chart"]
    assert unmet("see section 2, Labels", page) == ["section 2 is called '2. Inputs and labels: ids', not 'Labels'"]
    assert unmet("move the MLM weight and Temperature T sliders", page) == ["no slider 'MLM weight'"]
    assert unmet("the chart below", page) == ["points somewhere this test cannot read"]
    assert unmet("use the natural logarithm", page) == []


def pages_and_modes():
    for lesson in PATH:
        yield pytest.param(lesson, [], id=f"{lesson.stem}")
        for name, steps in MODES.get(lesson.stem, []):
            yield pytest.param(lesson, steps, id=f"{lesson.stem}, {name}")


@pytest.mark.parametrize("lesson, steps", list(pages_and_modes()))
def test_every_hint_points_at_something_on_the_page_in_this_mode(lesson, steps, monkeypatch):
    asked = []
    original = path.check_yourself

    def recording(step_name, questions, heading="Check yourself"):
        asked.extend(questions)
        original(step_name, questions, heading)

    monkeypatch.setattr(path, "check_yourself", recording)
    at = open_page(lesson.page)
    for step in steps:
        asked.clear()
        at = step(at)
    assert not at.exception, at.exception
    assert asked, f"{lesson.stem}: no questions asked"
    page = layout_of(at)
    wrong = {question.key: unmet(question.hint, page) for question in asked}
    assert not any(wrong.values()), {key: problems for key, problems in wrong.items() if problems}


def test_every_mode_is_a_registered_lesson():
    assert set(MODES) <= {lesson.stem for lesson in PATH}
