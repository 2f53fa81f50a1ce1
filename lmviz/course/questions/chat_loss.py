"""Chat fine-tuning loss's check-yourself questions, from the analysis on the learner's screen
(lmviz.lessons.chat_loss.analyse_sft).

Plain Python (no torch): the page passes in what it computed; a question's expected answer is always that."""

from __future__ import annotations

from typing import TYPE_CHECKING

from lmviz.core.labels import IGNORE_INDEX
from lmviz.core.numbers import fmt
from lmviz.core.trl import PREFERENCE
from lmviz.course.quiz import Question

if TYPE_CHECKING:  # the records' types only: importing the lesson would import torch
    from lmviz.lessons.chat_loss import PreferenceLosses, SftAnalysis

# A chat token's role as the page names it: the assistant's tokens are the answer
ROLE_WORDS = {"system": "system", "user": "user", "assistant": "answer", "template": "template"}


def build_questions(result: SftAnalysis, preference: PreferenceLosses | None = None) -> list[Question]:
    """Chat fine-tuning loss's check-yourself questions, from the analysis on the learner's screen, and SimPO's
    from section 5's preference losses where the page could compute them."""
    questions = [_count_question(result), _compare_question(result)]
    return questions if preference is None else [*questions, _simpo_question(preference)]


def _simpo_question(preference: PreferenceLosses) -> Question:
    chosen, rejected = preference.chosen_mean_logp, preference.rejected_mean_logp
    beta, gamma = PREFERENCE.cpo_beta, PREFERENCE.simpo_gamma
    inside = beta * (chosen - rejected) - gamma
    return Question(
        "simpo", f"The chosen answer's mean log p per token is {fmt(chosen)} and the rejected one's {fmt(rejected)}. "
                 f"SimPO compares them with no reference model: with TRL's β = {beta:g} and margin γ = {gamma:g}, "
                 "what is its preference term −log σ(β · (chosen − rejected) − γ)?", preference.simpo,
        reason=f"β · ({fmt(chosen)} − ({fmt(rejected)})) − γ = {fmt(inside)}, and −log σ({fmt(inside)}) = "
               f"{fmt(preference.simpo)}. Dividing each log π by its answer's tokens keeps a long answer from winning "
               "by length alone. That term is the SimPO paper's whole loss; TRL's CPOTrainer adds cpo_alpha = "
               f"{PREFERENCE.cpo_alpha:g} × the chosen answer's NLL, {fmt(-chosen)}, by default: "
               f"{fmt(preference.cpo_simpo)}, which TRL's docs call CPO-SimPO.",
        hint="take the difference, times β, minus γ, then −log σ of it, with σ(x) = 1 / (1 + e^−x); the fold of "
             "section 5 on the preference losses beside DPO writes SimPO out.")


def _count_question(result: SftAnalysis) -> Question:
    chat, masked = result.chat, result.counted_all - result.counted_answer
    end = " ".join(chat.tokens[p] for p in chat.end_of_turn_positions)
    # built from what was found: a template may write nothing after the answer, and then nothing ends its turn
    ends = (f", and so does what ends its turn, {end}" if end else
            " (the template writes nothing after the answer, so no end-of-turn token counts)")
    return Question(
        "count", "How many labels count in lmviz's answer-only loss (are not -100)?", result.counted_answer,
        digits=0,
        reason=f"The answer's {len(chat.answer_positions)} tokens count{ends}: {result.counted_answer} labels; the "
               f"other {masked} of the {result.counted_all} positions have label {IGNORE_INDEX} and add nothing.",
        hint="with Which labels count on its first choice, the answer and its end-of-turn token, count the rows "
             "marked ✓ yes in the table of section 2, Inputs and labels (its toggle, Only the positions that count, "
             "keeps just those).",
        table=(("position", "input token", "next token", "its role"),
               *((str(row.position), row.input_token, row.target_token, ROLE_WORDS[row.target_role])
                 for row in result.rows)))


def _compare_question(result: SftAnalysis) -> Question:
    answer_only, every = fmt(result.loss_answer), fmt(result.loss_all)
    # decided on the numbers as the panel shows them: the learner compares those
    choice = "equal" if answer_only == every else "above" if float(answer_only) > float(every) else "below"
    masked = [row.nll for row in result.rows if not row.counted]
    if not masked:
        why = "every position counts here, so both means are over the same -log p."
    else:
        effect = {"above": f"pulls the mean over every token down, to {every}",
                  "below": f"pulls the mean over every token up, to {every}",
                  "equal": f"leaves the mean over every token at {every}"}[choice]
        why = (f"the other {len(masked)} positions, outside the answer, average -log p = "
               f"{fmt(sum(masked) / len(masked))}, so taking them in {effect}.")
    return Question(
        "compare", "Is lmviz's answer-only loss above or below the loss over every token (if nothing were masked)?",
        choice, choices=("above", "below", "equal"),
        reason=f"The answer-only loss, {answer_only}, is the mean -log p of the {result.counted_answer} counted "
               f"positions; {why}",
        hint="compare the two numbers in the panel at the top, Answer-only loss (SFT) and Loss if nothing were "
             "masked; section 3, The loss with each choice of labels, says what each averages.")
