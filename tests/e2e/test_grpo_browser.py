"""RL fine-tuning (GRPO) at 1280×720: its tables fit in both modes, its panel shows the library's numbers, and the
token / sequence toggle's result is in the pinned panel, on screen with the toggle."""

import pytest
from playwright.sync_api import expect

from lmviz.lessons.grpo import SAMPLE_STD, SEQUENCE, advantages, contains_number, grpo_step, rewards, sample_group
from tests.e2e.helpers import assert_no_error, metric, overflowing_tables, settle

PROMPT = "What is 7 + 5? Reply with just the number."


def clipped(step) -> str:
    return f"{step.after.clipped_count} of {step.after.token_count}"


@pytest.fixture(scope="module")
def default_group(bundled):
    group = sample_group(bundled, PROMPT, 8, 0, 1.0, 12)
    return group, advantages(rewards(group, contains_number(12)), SAMPLE_STD).advantages


@pytest.mark.parametrize("present", ["", "?present=1"])
def test_the_pages_tables_fit_and_its_panel_is_the_librarys(projector, server, bundled, default_group, present):
    projector.goto(f"{server}/grpo{present}")
    settle(projector, timeout=240_000)
    group, adv = default_group
    expect(metric(projector, "Rewarded answers")).to_have_text("2 of 8")
    expect(metric(projector, "Clipped after the step")).to_have_text(clipped(grpo_step(bundled, group, adv, 1e-3)))
    assert overflowing_tables(projector) == []
    assert_no_error(projector)


def test_the_sequence_level_toggle_changes_the_clipped_count_in_the_panel_in_view(projector, server, bundled,
                                                                                  default_group):
    projector.goto(f"{server}/grpo")
    settle(projector, timeout=240_000)
    group, adv = default_group
    token_level, sequence_level = (grpo_step(bundled, group, adv, 1e-3, level=level) for level in ("token", SEQUENCE))
    assert clipped(token_level) != clipped(sequence_level)  # else the toggle would show nothing here
    toggle = projector.get_by_text("One ratio per answer (sequence level, GSPO)")
    toggle.scroll_into_view_if_needed()
    toggle.click()
    shown = metric(projector, "Clipped after the step")
    expect(shown).to_have_text(clipped(sequence_level), timeout=240_000)
    expect(shown).to_be_in_viewport(ratio=1)
    expect(toggle).to_be_in_viewport()
    assert_no_error(projector)
