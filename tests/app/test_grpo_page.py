"""The RL fine-tuning (GRPO) page, headless: its group, advantages and step are the library's on the same settings,
its advantages agree with torch.std's, a group that teaches nothing is said to, the reward-model section scores
the Chat page's own pair, and what cannot be sampled gets one sentence."""

import math
import re
from pathlib import Path

import pytest
import torch

from lmviz.app import chrome
from lmviz.app.chrome import RESULT_PANEL
from lmviz.core.numbers import fmt, fmt_norm
from lmviz.core.trl import CISPO_EPSILON_MAX, DAPO_EPSILON_HIGH, TRL
from lmviz.course.questions.grpo import SPLIT_GENERATION
from lmviz.course.registry import find
from lmviz.lessons.chat_loss import DEFAULT_BETA as DPO_BETA
from lmviz.lessons.chat_loss import DEFAULT_CHOSEN, DEFAULT_QUESTION, DEFAULT_REJECTED, compare_answers
from lmviz.lessons.grpo import (
    SAMPLE_STD,
    advantages,
    answer_ratios,
    contains_number,
    grpo_step,
    moved_against_advantage,
    rewards,
)
from tests.helpers import default_page, open_page

PAGE = "app_pages/grpo.py"


def metrics(at) -> dict:
    return {m.label: m.value for m in at.metric}


def texts(at) -> list[str]:
    """Every markdown, caption and info on the page (or in one block of it), unescaped, links as their words: what
    the learner reads."""
    unescaped = [re.sub(r"\\(.)", r"\1", str(e.value)) for e in [*at.markdown, *at.caption, *at.info]]
    return [re.sub(r"\[([^\]]*)\]\(glossary[^)]*\)", r"\1", text) for text in unescaped]


def table(at, column: str):
    """The page's first table with that column."""
    return next(d.value for d in at.dataframe if column in d.value.columns)


def pinned(at):
    """The pinned result panel: the container lmviz.app.widgets.result_panel keys."""
    blocks = list(at.main.children.values())
    while blocks:
        block = blocks.pop()
        if getattr(block.proto, "id", "").endswith(f"-{RESULT_PANEL}"):
            return block
        blocks += list(getattr(block, "children", {}).values())
    raise AssertionError("no pinned panel")


@pytest.fixture(scope="module")
def first_view():
    at = default_page(PAGE)
    assert not at.exception and not at.error and not at.warning
    return at


def test_the_default_group_is_the_librarys_with_2_of_8_rewarded(first_view, default_grpo_group):
    group = default_grpo_group
    scores = rewards(group, contains_number(12))
    assert metrics(first_view)["Rewarded answers"] == f"{int(sum(scores))} of 8" == "2 of 8"  # issue 31's 2 of 8


def test_the_advantages_are_r_minus_the_mean_over_torchs_std(first_view, default_grpo_group):
    group = default_grpo_group
    r = torch.tensor(rewards(group, contains_number(12)), dtype=torch.float64)
    sample = "÷ sample std (TRL)"
    shown = table(first_view, sample)
    for column, reference in (("R − mean (Dr. GRPO)", r - r.mean()),
                              ("÷ population std", (r - r.mean()) / r.std(correction=0)),
                              (sample, (r - r.mean()) / r.std()),
                              ("RLOO: R − mean of the others", r - (r.sum() - r) / (len(r) - 1))):
        assert [float(v) for v in shown[column]] == pytest.approx(reference.tolist(), abs=5e-6)
    # the arithmetic written out: mean 2/8, Σ (R − mean)² = 1.5, √(1.5 / 8) and √(1.5 / 7)
    said = next(t for t in texts(first_view) if t.startswith("mean = "))
    assert "= 0.25000" in said and "√(1.50000 / 8) = 0.43301" in said and "√(1.50000 / 7) = 0.46291" in said
    # RLOO with 2 right of 8: +0.857143 for a right answer, −0.285714 for a wrong one (8/7 × (R − mean))
    assert sorted({float(v) for v in shown["RLOO: R − mean of the others"]}) == pytest.approx([-0.285714, 0.857143],
                                                                                            abs=5e-6)


@pytest.fixture(scope="module")
def default_step(bundled, default_grpo_group):
    """The page's defaults: TRL's loss type and KL weighting, 3 updates at lr 1e-3, DeepSeekMath's β."""
    group = default_grpo_group
    adv = advantages(rewards(group, contains_number(12)), SAMPLE_STD).advantages
    return grpo_step(bundled, group, adv, 1e-3, TRL.loss_type, updates=3,
                     kl_bias_correction=TRL.use_bias_correction_kl)


def test_the_updates_are_the_librarys_and_the_clip_acts_from_the_second(first_view, default_step):
    step = default_step
    second = step.updates[1].start
    shown = metrics(first_view)
    # the measure of done: on the default group at the default rate, the clip holds tokens at update 2
    assert second.clipped_count > 0 and second.clip_fraction > 0
    assert shown["Clipped at update 2"] == f"{second.clipped_count} of {second.clip_total} tokens"
    rewarded = [i for i, a in enumerate(step.advantages) if a > 0]
    change = sum(step.answer_logps_after[i] - step.answer_logps_before[i] for i in rewarded) / len(rewarded)
    assert float(shown["log π change, rewarded"]) == pytest.approx(change, abs=2e-5)
    assert change > 0 > float(shown["log π change, others"])
    first = table(first_view, "∂ clip")  # answer 1 at the first update: ratios 1, nothing clipped
    assert set(first["r"]) == {"1.00000"} and set(first["min takes"]) == {"r·A"}
    assert set(first["β·KL"]) == {"0.00000"} and set(first["∂ KL"]) == {"0.000000"}
    updates = table(first_view, "clip fraction")
    assert list(updates["update"]) == [1, 2, 3]
    assert list(updates["clipped"]) == [f"{u.start.clipped_count} of {u.start.clip_total} tokens" for u in step.updates]
    # ‖g‖ to 4 significant digits (fmt_norm), and a CPU's float32 backward pass varies in the fourth from run to run
    assert [float(v) for v in updates["‖g‖"]] == pytest.approx([u.grad_norm for u in step.updates], rel=1e-3)
    assert [float(v) for v in updates["mean KL"]] == pytest.approx([u.start.mean_kl for u in step.updates], abs=5e-6)
    later = [d.value for d in first_view.dataframe if "∂ KL" in d.value.columns][1]  # update 2
    assert list(later["min takes"]) == ["clip(r)·A" if t.takes_clipped else "r·A" for t in second.tokens[0]]
    assert list(updates["low"]) == [u.start.clipped_low for u in step.updates]
    assert list(updates["high"]) == [u.start.clipped_high for u in step.updates]
    answers = table(first_view, "p(answer) before")
    assert [float(v) for v in answers["after 3"]] == pytest.approx(step.answer_logps_after, abs=5e-6)
    assert float(answers["after"][0]) == pytest.approx(math.exp(step.answer_logps_after[0]), rel=1e-3)


def test_the_page_says_which_controls_change_the_first_update(first_view, default_step):
    said = next(t for t in texts(first_view) if t.startswith("Which control changes which update"))
    assert f"‖g‖ = {fmt_norm(default_step.updates[0].grad_norm)} whatever they are" in said
    plain = next(t for t in texts(first_view) if t.startswith("At the first update π_θ is π_old"))
    assert "always 0" not in plain and f"num_iterations = {TRL.num_iterations}" in plain


def rewarded_between(loss, low: float, high: float) -> list:
    """DAPO's clip-higher, from the ratios: the tokens with A > 0 and 1 + low < r ≤ 1 + high."""
    return [t for answer in loss.tokens for t in answer if t.advantage > 0 and 1 + low < t.ratio <= 1 + high]


def test_clip_higher_releases_the_rewarded_tokens_between_the_bounds_and_the_count_falls_by_them(first_view,
                                                                                                default_step):
    second = default_step.updates[1].start  # update 2's ratios do not depend on the clip: update 1's are all 1
    between = rewarded_between(second, 0.2, DAPO_EPSILON_HIGH)
    assert between  # on the default group, DAPO's 0.28 releases a token the symmetric clip holds
    said = next(t for t in texts(first_view) if t.startswith("Here ε high = ε: the clip is symmetric"))
    assert f"would release {len(between)} token" in said and "(answer " in said
    at = open_page(PAGE)
    at.number_input(key="grpo_epsilon_high").set_value(DAPO_EPSILON_HIGH).run(timeout=300)
    assert not at.exception
    assert metrics(at)["Clipped at update 2"] == f"{second.clipped_count - len(between)} of {second.clip_total} tokens"
    said = next(t for t in texts(at) if t.startswith("DAPO's clip-higher: with ε high = 0.28 above ε = 0.2"))
    assert f"releases {len(between)} token" in said
    updates = table(at, "clip fraction")
    assert list(updates["high"])[1] == second.clipped_high - len(between)
    assert list(updates["low"])[1] == second.clipped_low


def test_cispos_gradients_are_trls_cispo_term_beside_ppos(first_view, default_step):
    """TRL's loss_type "cispo": −clamp(r, max=ε_high).detach()·A·log π_θ over the group's token count, so each
    token's gradient is −min(r, ε_max)·A / N; PPO's clipped term's, averaged as dapo (the page's default), is 0
    where the clip holds."""
    second = default_step.updates[1].start
    shown = table(first_view, "∂ CISPO")
    count = second.token_count
    expected = [-min(t.ratio, CISPO_EPSILON_MAX) * t.advantage / count for t in second.tokens[0]]
    assert [float(v) for v in shown["∂ CISPO"]] == pytest.approx(expected, rel=1e-3, abs=1e-9)
    assert [float(v) for v in shown["∂ PPO (dapo)"]] == pytest.approx(
        [t.surrogate_gradient for t in second.tokens[0]], rel=1e-3, abs=1e-9)
    held = sum(t.takes_clipped for answer in second.tokens for t in answer)
    said = next(t for t in texts(first_view) if t.startswith("TRL's loss type cispo, CISPO"))
    assert f"PPO's clip holds {held} of the {count} tokens" in said and f"CISPO pushes {held} of them" in said


def test_the_overlong_penalty_is_dapos_equation_on_each_answers_tokens(first_view, default_grpo_group):
    group = default_grpo_group
    scores = rewards(group, contains_number(12))
    limit, cache = 12, 4  # the page's token limit and L_cache

    def equation_13(n: int) -> float:  # DAPO's paper: 0, then ((L_max − L_cache) − |y|) / L_cache, then −1
        return 0.0 if n <= limit - cache else ((limit - cache) - n) / cache if n <= limit else -1.0

    penalties = [equation_13(len(answer.ids)) for answer in group.answers]  # TRL counts the end token
    assert min(penalties) < 0  # the default group has an answer cut at the limit
    shown = table(first_view, "R + penalty")
    assert [float(v) for v in shown["penalty"]] == pytest.approx(penalties, abs=5e-6)
    assert [float(v) for v in shown["R + penalty"]] == pytest.approx([r + q for r, q in zip(scores, penalties)],
                                                                      abs=5e-6)
    shaped = torch.tensor([r + q for r, q in zip(scores, penalties)], dtype=torch.float64)
    assert [float(v) for v in shown["÷ sample std (TRL)"]] == pytest.approx(
        ((shaped - shaped.mean()) / shaped.std()).tolist(), abs=5e-6)


def test_an_overlong_cache_of_0_has_no_slope_and_one_above_the_limit_gets_a_sentence():
    at = open_page(PAGE)
    at.number_input(key="grpo_overlong_cache").set_value(0).run(timeout=300)
    assert not at.exception
    assert set(table(at, "R + penalty")["penalty"]) == {"0.00000"}  # eq. 13: no answer passes the 12-token limit
    said = next(t for t in texts(at) if t.startswith("DAPO (Yu et al. 2025, eq. 13)"))
    assert "no slope" in said and "gets −1" not in said
    at.number_input(key="grpo_overlong_cache").set_value(13).run(timeout=300)
    assert not at.exception and any("L_cache must be at most the limit of 12 tokens" in t for t in texts(at))


def test_trls_defaults_set_the_controls_to_grpoconfigs_and_the_clip_never_acts():
    at = open_page(PAGE)
    next(b for b in at.button if b.label == f"TRL's defaults (TRL {TRL.version})").click().run(timeout=300)
    assert not at.exception
    state = {key: at.session_state[key] for key in ("grpo_loss_type", "grpo_beta", "grpo_epsilon",
                                                    "grpo_epsilon_high", "grpo_updates", "grpo_sequence",
                                                    "grpo_kl_ratio", "grpo_scale")}
    assert state == {"grpo_loss_type": TRL.loss_type, "grpo_beta": TRL.beta, "grpo_epsilon": TRL.epsilon,
                     "grpo_epsilon_high": TRL.epsilon, "grpo_updates": TRL.num_iterations,
                     "grpo_sequence": TRL.importance_sampling_level != "token", "grpo_kl_ratio": True,
                     "grpo_scale": SAMPLE_STD}
    assert TRL.num_iterations == 1 and "Clipped after the update" in metrics(at)  # μ = 1: the clip never acts

def test_one_update_says_the_clip_never_acts():
    at = open_page(PAGE)
    at.number_input(key="grpo_updates").set_value(1).run(timeout=180)
    assert not at.exception
    assert any("With one update the clip and the KL never act" in info.value for info in at.info)
    assert "Clipped after the update" in metrics(at)


def test_a_group_whose_rewards_are_all_equal_teaches_nothing_and_the_step_moves_nothing():
    at = open_page(PAGE)
    at.slider(key="grpo_group").set_value(2)
    at.number_input(key="grpo_limit").set_value(4)
    at.radio(key="grpo_rule").set_value("is at most N tokens long").run()
    at.text_input(key="grpo_rule_2").set_value("64").run(timeout=120)
    assert not at.exception and not at.warning
    # in the pinned panel (issue 49), on screen with the prompt and the rule, not two screens below them
    said = [info.value for info in pinned(at).info]
    assert len(said) == 1 and "This group teaches nothing" in said[0] and "every advantage is 0" in said[0]
    assert metrics(at)["log π change, rewarded"] == "0.00000"  # every advantage 0, the KL's gradient 0
    at.button(key=chrome.HIDE_BUTTON).click().run(timeout=120)  # hidden: the advantage question's 0 goes
    said = [info.value for info in pinned(at).info]
    assert len(said) == 1 and "This group teaches nothing" in said[0] and "advantage is 0" not in said[0]


@pytest.mark.parametrize(("key", "value"), [("grpo_prompt", ""), ("grpo_rule_0", "twelve")])
def test_what_cannot_be_scored_gets_one_sentence_in_place_of_the_result(key, value):
    at = open_page(PAGE)
    at.text_input(key=key).set_value(value).run()
    assert not at.exception and not at.metric
    assert len(at.warning) == 1 and at.warning[0].value.endswith(".")


def test_a_model_without_a_chat_template_gets_one_sentence():
    at = open_page(PAGE)
    at.text_input(key="model_name").set_value("lmviz-tiny-gpt").run()
    assert not at.exception and not at.metric
    assert [w.value for w in at.warning] == [
        "lmviz\\-tiny\\-gpt's tokenizer has no chat template, so it cannot be asked a question as a chat model is\\. "
        "Choose a chat model under Model above, such as the bundled SmolLM2\\-135M\\-Instruct\\."]


def dpo_sentence(at) -> str:
    return next(t for t in texts(at) if t.startswith("DPO has no reward model"))


def test_the_reward_model_section_scores_the_chat_pages_defaults_before_it_is_opened(first_view, bundled):
    pair = compare_answers(bundled, DEFAULT_QUESTION, DEFAULT_CHOSEN, DEFAULT_REJECTED)
    said = dpo_sentence(first_view)
    assert f"Σ log π_ref {pair.chosen.sum_logp:.5f} and {pair.rejected.sum_logp:.5f}" in said
    # raised by 1: r_chosen = 0.1, r_rejected = 0, and −log σ(0.1) by hand
    assert f"−log σ(0.10000) = {math.log1p(math.exp(-DPO_BETA)):.5f}" in said and "difference 0.0e+00" in said
    bradley_terry = next(t for t in texts(first_view) if t.startswith("−log σ(2.00000 − 0.50000)"))
    assert f"= {math.log1p(math.exp(-1.5)):.5f}" in bradley_terry


def test_the_reward_model_section_scores_the_pair_typed_on_the_chat_page(bundled):
    at = open_page("app_pages/chat_loss.py")
    at.text_input(key="chat_other").set_value("Berlin, I think.").run()
    at.slider(key="chat_dpo_raise").set_value(2.0).run()
    at = at.switch_page(PAGE).run(timeout=120)
    assert not at.exception
    said = dpo_sentence(at)
    pair = compare_answers(bundled, DEFAULT_QUESTION, DEFAULT_CHOSEN, "Berlin, I think.")
    assert "“Berlin, I think.” rejected" in said and f"and {pair.rejected.sum_logp:.5f})" in said
    assert f"−log σ(0.20000) = {math.log1p(math.exp(-2 * DPO_BETA)):.5f}" in said


def test_the_three_names_of_the_lesson_are_one():
    """The sidebar's title, the page's heading, the docs page's heading and the site's navigation (issue 49)."""
    lesson = find("grpo")
    assert lesson.heading.startswith(f"{lesson.title}: ")
    root = Path(__file__).resolve().parents[2]
    assert (root / "docs" / "lessons" / "grpo.md").read_text().splitlines()[0] == f"# {lesson.heading}"
    assert f"- {lesson.title}: lessons/grpo.md" in (root / "mkdocs.yml").read_text()


def test_the_panel_names_the_rule_in_force_and_says_when_the_prompt_has_outrun_it():
    at = open_page(PAGE)
    said = texts(pinned(at))
    assert any("Scored by the rule contains_number(12): 1 if the answer contains the number 12, else 0." in c
               and "does not follow the prompt." in c for c in said), said
    at.text_input(key="grpo_prompt").set_value("What is 6 + 6? Reply with just the number.").run(timeout=300)
    assert not at.exception
    assert any("this is the default question's rule; set the one your prompt needs" in c for c in texts(pinned(at)))


def test_rloos_ratio_is_not_gspos_and_the_page_gives_both(first_view, default_step):
    said = next(t for t in texts(first_view) if t.startswith("RLOO (the column"))
    assert "π_θ(answer) / π_old(answer) = e^(Σ log π_θ − Σ log π_old), the product of its tokens' ratios" in said
    assert "That is not GSPO's, which section 3's toggle One ratio per answer takes" in said
    assert "(section 3's toggle One ratio per answer takes it)" not in said  # issue 49: it takes GSPO's, not RLOO's
    one = answer_ratios(default_step.updates[1].start)[0]  # answer 1, the one shown by default
    n = len(one.log_ratios)
    both = next(t for t in texts(first_view) if t.startswith("This answer's one ratio at update 2"))
    assert f"/ {n}) = {fmt(one.gspo)}" in both and f") = {fmt(one.rloo)}, GSPO's to the power {n}." in both
    assert fmt(one.gspo) != fmt(one.rloo)


def test_the_words_on_what_moves_the_ratio_the_kl_and_cispo(first_view, default_step):
    plain = next(t for t in texts(first_view) if t.startswith("At the first update π_θ is π_old"))
    assert plain.endswith(SPLIT_GENERATION) and "as TRL's GSPO recipe does" not in plain
    assert "the first update on a later group starts with a KL above 0" in plain
    cispo = next(t for t in texts(first_view) if t.startswith("TRL's loss type cispo, CISPO"))
    assert "cap is the form of ScaleRL (arXiv 2510.13786), the paper TRL's help for epsilon_high cites" in cispo
    assert "MiniMax-M1's paper writes the weight clipped on both sides" in cispo
    against = [i + 1 for i in moved_against_advantage(default_step)]
    moved = next(t for t in texts(first_view) if t.startswith("p(answer) = e^(Σ log π)"))
    assert "To first order, for a small enough step, a positive advantage raises it" in moved
    assert (f"here answer{'s' if len(against) > 1 else ''} {', '.join(map(str, against))} moved that way."
            if against else "here none did.") in moved
