"""Issue 39: the browser's light or dark choice applies and the menu offers both (a bright room takes Light), every
colour a page sets keeps its text readable in either theme, and the glossary's definitions reach the script that
shows them over the page (tests/e2e/test_room_and_keyboard.py drives both in a browser)."""

import json
import re
import tomllib
from pathlib import Path

import pytest

from lmviz.app.chrome import GLOSSARY_POPOVER, THEME_BACKGROUND, glossary_entries
from lmviz.course.glossary import TERMS, anchor
from lmviz.course.registry import PATH
from lmviz.figures.palettes import contrast_ratio
from tests.helpers import APP, default_page

CONFIG = tomllib.loads((Path(APP).parent / ".streamlit" / "config.toml").read_text())
RULE = re.compile(r"\{([^}]*)\}")  # a CSS rule's declarations, in a Styler's style sheet


def test_the_browsers_choice_of_theme_applies_and_the_menu_offers_light_and_dark():
    """base = "light" outranked a browser set to dark; toolbarMode = "minimal" hid the menu where the theme is
    chosen. "viewer" shows it without the developer's entries."""
    assert "base" not in CONFIG.get("theme", {})
    assert CONFIG["client"]["toolbarMode"] == "viewer"


def test_every_glossary_definition_reaches_the_script_that_shows_it():
    """Streamlit's sanitizer drops a script whose text has a "<" before a letter, a digit or "/": the byte pieces'
    definition ("<F0 9F>") took the whole script with it, and a glossary link opened a new tab again."""
    assert not re.search(r"<[/\w]", glossary_entries() + GLOSSARY_POPOVER + THEME_BACKGROUND)
    assert json.loads(glossary_entries()) == {anchor(term): [term, text] for term, (_, text) in TERMS.items()}


def declarations(rule: str) -> dict[str, str]:
    return {name.strip(): value.strip() for name, _, value in (part.partition(":") for part in rule.split(";"))
            if value}


def coloured_cells(page: str) -> list[dict[str, str]]:
    """The declarations of every table cell the page colours (a pandas Styler's rules)."""
    at = default_page(page)
    assert not at.exception
    sheets = [frame.proto.arrow_data.styler.styles for frame in at.dataframe]
    rules = [declarations(rule) for sheet in sheets for rule in RULE.findall(sheet)]
    return [rule for rule in rules if "color" in rule or "background-color" in rule]


@pytest.mark.parametrize("page", [lesson.page for lesson in PATH])
def test_a_coloured_cell_sets_its_text_and_its_background_both(page):
    """A table cell styled with one colour took the theme's for the other: in the dark theme Toy example's true
    labels were light text on a light cell, its greedy picks dark text on a dark one. Each sets both, at WCAG's 4.5:1.
    Toy example colours its true labels and its greedy picks, at least."""
    cells = coloured_cells(page)
    for rule in cells:
        assert contrast_ratio(rule["color"], rule["background-color"]) >= 4.5, (page, rule)
    if page == "app_pages/toy_example.py":
        assert len({tuple(sorted(rule.items())) for rule in cells}) >= 2
