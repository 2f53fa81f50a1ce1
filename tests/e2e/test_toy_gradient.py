"""The Toy example's section 4 in a real browser on a 1280×720 projector, in the default mode and in
presentation mode: the gradient table fits (no number behind a horizontal scroll), and a new learning rate
brings the library's loss after the step on screen, beside the control."""

import pytest
from playwright.sync_api import expect

from lmviz.core import toy
from lmviz.core.numbers import fmt
from tests.e2e.helpers import (
    ARTIFACTS,
    assert_no_error,
    metric,
    open_folds,
    overflowing_tables,
    settle,
    wait_until_still,
)

MODES = {"default": "", "presentation": "?present=1"}
TABLES = "[data-testid='stMain'] [data-testid='stDataFrame'], [data-testid='stMain'] [data-testid='stTable']"


@pytest.mark.parametrize("mode", MODES)
def test_the_gradient_table_fits_and_a_new_rate_shows_the_librarys_loss_after_the_step(projector, server, mode):
    projector.goto(f"{server}/toy{MODES[mode]}")
    settle(projector)
    if mode == "presentation":  # the mode folds the sidebar (its script clicks Collapse): measured once folded
        expect(projector.locator("[data-testid='stExpandSidebarButton']")).to_be_visible()
    wait_until_still(projector, "[data-testid='stSidebar']")
    assert open_folds(projector, "The gradient entry by entry") == 1  # folded (issue 39)
    gradient = projector.locator(TABLES, has_text="✓ -0.100000")  # row 0's true label, (0.5 − 1)/5
    expect(gradient).to_have_count(1)
    # centred: in its fold the table's edges fall between two pixels, and scrolled only just into view its last
    # 0.41 px was past the screen's edge
    gradient.evaluate("e => e.scrollIntoView({block: 'center'})")
    expect(gradient).to_be_in_viewport(ratio=1)
    panel = projector.locator(".st-key-result-panel").bounding_box()  # pinned: the table scrolls under it
    shown = 720 - (panel["y"] + panel["height"])
    assert gradient.bounding_box()["height"] <= shown, mode  # the whole table, its sum row too, on one screen
    assert overflowing_tables(projector) == [], mode
    box = gradient.bounding_box()
    assert box["x"] + box["width"] <= 1280

    slider = projector.get_by_role("slider", name="Learning rate η")  # a hidden input: focus and keys go to it
    control = projector.locator("[data-testid='stSlider']", has=slider)  # what the room sees of it
    after = metric(projector, "Loss after one step")
    expect(after).to_have_text(fmt(toy.one_step(None, 1.0)["loss_after"]))  # the page's default rate
    slider.scroll_into_view_if_needed()
    slider.focus()
    for rate, key in ((3.0, "ArrowRight"), (30.0, "End"), (0.1, "Home")):
        slider.press(key)
        expect(after).to_have_text(fmt(toy.one_step(None, rate)["loss_after"]), timeout=30_000)
        settle(projector)
        expect(control).to_be_in_viewport(ratio=1)  # the control and its result on one screen
        expect(after).to_be_in_viewport()
        expect(projector.locator(TABLES, has_text="p(label) after")).to_be_in_viewport()
    assert overflowing_tables(projector) == [], mode
    assert_no_error(projector)
    projector.screenshot(path=str(ARTIFACTS / f"toy-gradient-{mode}.png"))
