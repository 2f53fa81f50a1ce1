"""The lesson path: the teaching pages in the order the home page lists them, what each one
teaches, and the keys of its check-yourself questions (pure Python: app.py builds its
navigation from it before torch is imported).

A learner's progress is the set of questions they answered (or revealed), as "step/key"
strings. It lives in their session, and travels in the "previous / next" links as
``?answered=``, so that a bookmarked link brings a learner back to their place with it.
"""

from __future__ import annotations

from dataclasses import dataclass

ANSWERED_PARAM = "answered"


@dataclass(frozen=True)
class Step:
    page: str  # the page's file, as st.Page and st.page_link take it
    url_path: str  # also the step's name in progress keys
    title: str
    icon: str
    learn: str  # "You will learn ...", completed
    questions: tuple[str, ...]  # the keys of the questions its library module builds

    def key(self, question: str) -> str:
        return f"{self.url_path}/{question}"


PATH = (
    Step("app_pages/toy_example.py", "toy", "Toy example", ":material/calculate:",
         "how one sentence's loss is computed by hand: labels, -log p, the mean, perplexity",
         ("nll", "uniform", "largest")),
    Step("app_pages/your_sentence.py", "sentence", "Your sentence", ":material/edit_note:",
         "how a real model's loss is the mean of one -log p per token, and which tokens cost the most",
         ("highest", "count", "perplexity")),
    Step("app_pages/next_token.py", "next-token", "Next token", ":material/casino:",
         "where a position's probabilities come from: scores, softmax, temperature, and -log p of the true token",
         ("greedy", "nll", "temperature")),
    Step("app_pages/chat_loss.py", "chat-loss", "Chat fine-tuning loss", ":material/forum:",
         "why fine-tuning a chat model scores only the answer's tokens",
         ("count", "compare")),
    Step("app_pages/batches.py", "batches", "Batches and padding", ":material/view_agenda:",
         "how sentences of different lengths share one batch, and why its loss is a mean over tokens",
         ("count", "means", "ignored")),
    Step("app_pages/masked_lm.py", "masked-lm", "Masked LM", ":material/theater_comedy:",
         "how BERT hides tokens and is scored only where it had to guess",
         ("count", "mean", "kept")),
    Step("app_pages/next_sentence.py", "nsp", "Next sentence", ":material/compare_arrows:",
         "how BERT's second task turns two scores into p(B follows A) and a loss",
         ("probability", "loss")),
    Step("app_pages/bert_loss.py", "bert-loss", "BERT pre-training loss", ":material/functions:",
         "how BERT's two losses add up to the one it is trained on",
         ("total", "larger")),
    Step("app_pages/train.py", "train", "Train", ":material/monitoring:",
         "what a loss curve shows: where an untrained model starts and how far training takes it",
         ("start", "perplexity")),
)
STEPS = {step.page: step for step in PATH}


def total_questions() -> int:
    return sum(len(step.questions) for step in PATH)


def all_keys() -> set[str]:
    return {step.key(question) for step in PATH for question in step.questions}


def neighbours(step: Step) -> tuple[Step | None, Step | None]:
    """The steps before and after ``step`` on the path (None at either end)."""
    at = PATH.index(step)
    return (PATH[at - 1] if at > 0 else None), (PATH[at + 1] if at + 1 < len(PATH) else None)


def read_progress(code: str | None) -> set[str]:
    """The answered keys a link carries; anything that is not one of the path's keys is ignored."""
    return set((code or "").split(",")) & all_keys()


def progress_code(answered: set[str]) -> str:
    """``answered`` as a link carries it: the path's keys only, in the path's order."""
    return ",".join(step.key(q) for step in PATH for q in step.questions if step.key(q) in answered)


def next_to_study(answered: set[str]) -> Step | None:
    """The first step with a question not yet answered; None when every one is."""
    return next((step for step in PATH if any(step.key(q) not in answered for q in step.questions)), None)
