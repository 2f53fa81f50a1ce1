"""One step of learning at 1280×720: its tables fit, the learning rate's result is on screen with the slider, and a
rate too large says so in the pinned panel."""

import pytest
from playwright.sync_api import expect

from lmviz.core.numbers import fmt
from lmviz.lessons.gradient_step import sgd_steps
from tests.e2e.helpers import assert_no_error, metric, open_folds, overflowing_tables, settle

TEXT, OTHER = "The capital of France is Paris.", "The capital of France is Berlin."


@pytest.mark.parametrize("present", ["", "?present=1"])
def test_the_pages_tables_fit_and_its_numbers_are_the_librarys(projector, server, bundled, present):
    projector.goto(f"{server}/step{present}")
    settle(projector)
    expected = sgd_steps(bundled, TEXT, 1e-3, 3, OTHER)
    expect(metric(projector, "Loss before")).to_have_text(fmt(expected.losses[0]))
    expect(metric(projector, "After 1 step")).to_have_text(fmt(expected.losses[1]))
    expect(metric(projector, "After 3 steps")).to_have_text(fmt(expected.losses[3]))
    assert open_folds(projector) >= 2  # sections 3 and 4 fold their tables (issue 39)
    assert overflowing_tables(projector) == []
    assert_no_error(projector)


@pytest.mark.parametrize("present", ["", "&present=1"])
def test_adamws_band_and_weight_tables_fit(projector, server, present):
    """Section 6's two tables (issue 39 added the bands of |g| and each weight's |g| / eps) within 1280×720."""
    projector.goto(f"{server}/step?step_adamw=1{present}")
    settle(projector, timeout=300_000)
    expect(projector.get_by_text("mean |Δw| / lr").first).to_be_attached()
    assert overflowing_tables(projector) == []
    assert_no_error(projector)


def test_a_rate_too_large_raises_the_loss_and_the_panel_says_so_with_the_slider_in_view(projector, server, bundled):
    projector.goto(f"{server}/step")
    settle(projector)
    slider = projector.get_by_role("slider", name="Learning rate")
    slider.focus()
    slider.press("ArrowRight")
    slider.press("ArrowRight")  # 1e-3 → 3e-3 → 1e-2
    expected = sgd_steps(bundled, TEXT, 1e-2, 3, OTHER)
    after = metric(projector, "After 1 step")
    expect(after).to_have_text(fmt(expected.losses[1]), timeout=180_000)
    assert expected.loss_rose
    said = projector.locator(".st-key-result-panel").get_by_text("the first step raised the loss")
    expect(said).to_be_in_viewport()
    expect(after).to_be_in_viewport(ratio=1)
    expect(projector.locator("[data-testid='stSlider']", has=slider)).to_be_in_viewport()
