"""RL fine-tuning (GRPO) at 1280×720: its tables fit in both modes, its panel shows the library's numbers, and the
token / sequence toggle's result is in the pinned panel, on screen with the toggle."""

import pytest
from playwright.sync_api import expect

from lmviz.core.trl import TRL
from lmviz.lessons.grpo import (
    DEFAULT_UPDATES,
    SAMPLE_STD,
    SEQUENCE,
    advantages,
    contains_number,
    grpo_step,
    rewards,
)
from tests.e2e.helpers import assert_no_error, metric, open_folds, overflowing_tables, settle


def clipped(step) -> str:
    """The panel's count: at the second update, in tokens or (one ratio per answer) answers."""
    second = step.updates[1].start
    return f"{second.clipped_count} of {second.clip_total} {second.clip_unit}s"


def page_step(bundled, group, adv, **settings):
    """The page's defaults: TRL's loss type and KL weighting, DEFAULT_UPDATES updates at lr 1e-3."""
    return grpo_step(bundled, group, adv, 1e-3, TRL.loss_type, updates=DEFAULT_UPDATES,
                     kl_bias_correction=TRL.use_bias_correction_kl, **settings)


@pytest.fixture(scope="module")
def default_group(default_grpo_group):
    group = default_grpo_group
    return group, advantages(rewards(group, contains_number(12)), SAMPLE_STD).advantages


@pytest.mark.parametrize("present", ["", "?present=1"])
def test_the_pages_tables_fit_and_its_panel_is_the_librarys(projector, server, bundled, default_group, present):
    projector.goto(f"{server}/grpo{present}")
    settle(projector, timeout=240_000)
    group, adv = default_group
    expect(metric(projector, "Rewarded answers")).to_have_text("2 of 8")
    expect(metric(projector, "Clipped at update 2")).to_have_text(clipped(page_step(bundled, group, adv)))
    assert open_folds(projector) >= 4  # the token, weight and answer tables are folded (issue 39)
    expect(projector.locator("[data-testid='stMain'] :is([data-testid=stDataFrame], [data-testid=stTable])",
                             has_text="∂ clip")).to_have_count(2)  # the first update's and the second's
    assert overflowing_tables(projector) == []
    assert_no_error(projector)


def test_the_sequence_level_toggle_changes_the_clipped_count_in_the_panel_in_view(projector, server, bundled,
                                                                                  default_group):
    projector.goto(f"{server}/grpo")
    settle(projector, timeout=240_000)
    group, adv = default_group
    token_level, sequence_level = (page_step(bundled, group, adv, level=level) for level in ("token", SEQUENCE))
    assert clipped(token_level) != clipped(sequence_level)  # else the toggle would show nothing here
    toggle = projector.get_by_text("One ratio per answer (GSPO)")
    toggle.scroll_into_view_if_needed()
    toggle.click()
    shown = metric(projector, "Clipped at update 2")
    expect(shown).to_have_text(clipped(sequence_level), timeout=240_000)
    expect(shown).to_be_in_viewport(ratio=1)
    expect(toggle).to_be_in_viewport()
    assert_no_error(projector)
