"""Three students change RL fine-tuning's seed at the same moment, on a server that takes one step at a time
(LMVIZ_STEPS_AT_ONCE=1): while a student's step waits, their page says how many steps are ahead of theirs, and in
the end each sees their own group (the library's, for their seed), not another's."""

import re
import time

import pytest
from playwright.sync_api import expect

from lmviz.lessons.grpo import contains_number, rewards, sample_group
from scripts.live_server import ROOT, SETTLED, environment_set, running_server
from tests.e2e.helpers import ARTIFACTS, assert_no_error, metric, settle

PROMPT = "What is 7 + 5? Reply with just the number."  # the page's defaults: 8 answers, 12 tokens, temperature 1
SEEDS = (1, 2, 3)
AHEAD = re.compile(r"\d+ steps? (is|are) ahead of yours")
BOUND_S = 300  # the three groups and steps on two busy cores: far more than they take


@pytest.fixture(scope="module")
def one_step_server(chromium_path):
    with environment_set({"LMVIZ_STEPS_AT_ONCE": "1"}), \
            running_server(ROOT / "artifacts" / "streamlit-one-step.log") as url:
        yield url


def rewarded(bundled, seed: int) -> str:
    group = sample_group(bundled, PROMPT, 8, seed, 1.0, 12)
    return f"{int(sum(rewards(group, contains_number(12))))} of 8"


def test_three_students_changing_the_seed_at_once_each_see_their_place_then_their_own_group(
        browser, one_step_server, bundled):
    expected = {seed: rewarded(bundled, seed) for seed in SEEDS}
    contexts = [browser.new_context(viewport={"width": 1280, "height": 720}) for _ in SEEDS]
    tabs = [context.new_page() for context in contexts]
    try:
        for tab in tabs:  # one update, not three: the queue and the groups are the point, and the group is the same
            tab.goto(f"{one_step_server}/grpo?grpo_updates=1")
        for tab in tabs:
            settle(tab, timeout=BOUND_S * 1000)
        for tab, seed in zip(tabs, SEEDS):  # typed one after the other, as fast as a browser can
            box = tab.get_by_role("spinbutton", name="Seed", exact=True)
            box.fill(str(seed))
            box.press("Enter")
        saw_place, ran = [False] * len(tabs), [False] * len(tabs)
        deadline = time.monotonic() + BOUND_S
        while not all(ran[n] and tab.evaluate(SETTLED) for n, tab in enumerate(tabs)):
            assert time.monotonic() < deadline, "the three steps did not come"
            for n, tab in enumerate(tabs):
                ran[n] |= not tab.evaluate(SETTLED)  # the run the new seed started
                if not saw_place[n] and tab.get_by_text(AHEAD).count() > 0:
                    saw_place[n] = True
                    tab.screenshot(path=str(ARTIFACTS / f"class-steps-waiting-{n + 1}.png"))
            time.sleep(0.1)
        # the first in line never waits; the two behind it were told their place at some moment
        assert sum(saw_place) >= 2, saw_place
        for tab, seed in zip(tabs, SEEDS):
            expect(metric(tab, "Rewarded answers")).to_have_text(expected[seed])
            expect(tab.get_by_role("spinbutton", name="Seed", exact=True)).to_have_value(str(seed))
            expect(tab.get_by_role("spinbutton", name="Updates μ", exact=True)).to_have_value("1")
            assert_no_error(tab)
    finally:
        for context in contexts:
            context.close()
