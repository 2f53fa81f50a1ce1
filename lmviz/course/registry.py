"""The lesson registry: every lesson declared once, in the path's order. Home, the app's navigation, the lesson
header and footer, and every test that means "every page" (the public-server scan, the bad-input surfaces, the
browser smoke tests) are made from it. Pure Python: app.py builds its navigation from it before torch is imported.

A lesson's stem names its files: app_pages/<stem>.py, lmviz/course/questions/<stem>.py, docs/lessons/<stem>.md
(see docs/development/adding-a-lesson.md).

A learner's progress is the set of questions they answered (or revealed), as "url_path/key" strings. It lives
in their session, and travels in the "previous / next" links as ``?answered=``, so that a bookmarked link brings
a learner back to their place with it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from lmviz.course.glossary import link

ANSWERED_PARAM = "answered"


@dataclass(frozen=True)
class TextBox:
    """A box where the learner types text that reaches a model, which every case of tests/data/bad_inputs.jsonl
    is sent through: ``surfaces`` are the names of the ways into it there ("expected"), ``key`` its widget key."""

    surfaces: tuple[str, ...]
    widget: Literal["text_area", "text_input"]
    key: str
    max_chars: int


@dataclass(frozen=True)
class Lesson:
    stem: str  # the file name of its page, its questions and its docs page
    url_path: str  # also the lesson's name in progress keys
    title: str  # short: the navigation's
    heading: str  # the page's title, and its link on Home
    icon: str
    learn: str  # "You will learn ...", completed
    section: str  # the heading it is listed under on Home
    home: str  # what Home says of it: Markdown, with [[word|glossary entry]] for a link to the glossary
    computation: str  # the lmviz module that computes its numbers (named, not imported: it may import torch)
    questions: tuple[str, ...]  # the keys of the questions lmviz.course.questions.<stem> builds
    model: Literal["causal", "bert"] | None = None  # the kind of model it scores with
    model_box: bool = False  # whether the learner may name the model (a hub id, a folder) on the page
    text_boxes: tuple[TextBox, ...] = ()  # the boxes the bad-input scan drives (not yet: second boxes such as
    # Sentence B of Next sentence, Chat's system message and other answer)

    @property
    def page(self) -> str:
        """The page's file, as st.Page and st.page_link take it."""
        return f"app_pages/{self.stem}.py"

    def key(self, question: str) -> str:
        return f"{self.url_path}/{question}"


CAUSAL = "Causal language models (GPT, Llama)"

PATH = (
    Lesson("toy_example", "toy", "Toy example", "Toy example: the loss of one sentence, by hand",
           ":material/calculate:",
           "how one sentence's loss is computed by hand: labels, -log p, the mean, perplexity", "Start here",
           "A 10-word vocabulary and the sentence *I love dogs not cats*: the [[labels|label]] are the input shifted "
           "by one place, the probability of each true next word is picked out of a table, and the loss is the mean "
           "of their negative logarithms, **0.86302**. Change the probabilities and watch the loss follow.",
           "lmviz.core.toy", ("nll", "uniform", "largest", "gradient", "rises", "smoothed")),
    Lesson("your_sentence", "sentence", "Your sentence", "Your sentence: a real model's loss, token by token",
           ":material/edit_note:",
           "how a real model's loss is the mean of one -log p per predicted token, and which tokens cost the most",
           CAUSAL,
           "Predict each next [[token|token]] from the ones before it: each token but the last is asked for the one "
           "after it, so each token but the first is a label, scored by -log p. The first is scored too when a "
           "[[start-of-text token|BOS / EOS]] is put before it.",
           "lmviz.lessons.causal_lm", ("highest", "count", "perplexity"), "causal", model_box=True,
           text_boxes=(TextBox(("your-sentence from a link",), "text_area", "text", 2000),
            TextBox(("your-sentence compare",), "text_area", "sentence_b", 2000))),
    # after Your sentence: its -log p per token are what this lesson counts per byte instead
    Lesson("bits_per_byte", "bpb", "Bits per byte", "Bits per byte: comparing models whose tokenizers differ",
           ":material/straighten:",
           "how a loss per token becomes a loss per byte, which compares models whose tokenizers differ, and how a "
           "text longer than a model reads at once is scored in windows", CAUSAL,
           "A loss per [[token|token]] depends on how the tokenizer cuts the text; counted per byte of its "
           "[[UTF-8|UTF-8]] it does not: [[bits per byte|bits per byte]], the number that compares two models whose "
           "tokenizers differ. lm-evaluation-harness's and nanochat's ways of counting side by side, the bug of "
           "counting a token's bytes after decoding it, several models on one text, and a text longer than the "
           "model reads at once, scored in [[windows|window]] three ways.",
           "lmviz.lessons.bits_per_byte", ("bpb", "better", "lost"), "causal", model_box=True,
           text_boxes=(TextBox(("bpb",), "text_area", "bpb_text", 2000),)),
    Lesson("next_token", "next-token", "Next token", "Next token: where the probabilities come from",
           ":material/casino:",
           "where a position's probabilities come from: scores, softmax, temperature, and -log p of the true token",
           CAUSAL,
           "The model's scores for every token that could come next, the [[softmax|softmax]] that turns them into "
           "probabilities, the [[temperature|temperature]] and [[greedy|greedy decoding]] or [[sampled|sampling]] "
           "choices of a generator, and -log p "
           "of the true next token: the loss of one position.",
           "lmviz.lessons.next_token", ("greedy", "nll", "temperature"), "causal", model_box=True,
           text_boxes=(TextBox(("next-token",), "text_area", "next_text", 2000),)),
    # after Next token: the gradient is softmax − one-hot, and Next token is where the logits and the softmax
    # over the whole vocabulary are taught
    Lesson("gradient_step", "step", "One step of learning", "One step of learning: the gradient and an optimizer step",
           ":material/trending_down:",
           "what the loss does: its gradient with respect to each logit, and how one step of SGD or AdamW changes "
           "the model", CAUSAL,
           "The loss's [[gradient|gradient]] with respect to each position's [[logits|logit]], (p − 1)/N at the "
           "label and p/N everywhere else, checked against [[autograd|autograd]]; one step of [[SGD|SGD]] on every "
           "weight at a [[learning rate|learning rate]] you choose, what it does to your text and to another, a few "
           "more steps, and [[AdamW|AdamW]]'s first step, the size of the learning rate whatever the gradient's.",
           "lmviz.lessons.gradient_step", ("label_entry", "row_sum", "rises"), "causal", model_box=True,
           text_boxes=(TextBox(("gradient-step",), "text_area", "step_text", 1000),
                       TextBox(("gradient-step other",), "text_input", "step_other", 1000))),
    Lesson("chat_loss", "chat-loss", "Chat fine-tuning loss", "Chat fine-tuning: which tokens the loss counts",
           ":material/forum:",
           "how fine-tuning a chat model can score every token it predicts or, by choice, only the answer and its "
           "end-of-turn token", CAUSAL,
           "A conversation written out by a chat model's [[chat template|chat template]], and the loss "
           "[[supervised fine-tuning|SFT]] trains it with. Counting only the answer is a choice, not what "
           "fine-tuning always does: lmviz counts the answer's tokens and its [[end-of-turn token|end-of-turn "
           "token]] (with anything the template writes between the two), and puts [[-100|-100 / ignore_index]] on "
           "every other label. Then two answers compared, and the preference loss ([[DPO|DPO]]) built from the "
           "same numbers.",
           "lmviz.lessons.chat_loss", ("count", "compare", "simpo"), "causal", model_box=True,
           text_boxes=(TextBox(("chat-loss question",), "text_input", "chat_user", 1000),
            TextBox(("chat-loss answer",), "text_input", "chat_answer", 1000))),
    # after Chat fine-tuning loss: its summed log-probabilities and DPO are what the policy ratio and the reward
    # model's Bradley-Terry loss are built from
    Lesson("grpo", "grpo", "RL fine-tuning (GRPO)",
           "RL fine-tuning (GRPO): rewards, PPO's clip, the KL and the reward model",
           ":material/emoji_events:",
           "how reinforcement learning fine-tunes a model from rewards: a group's advantages, the clipped ratio, the "
           "KL to a reference, the ways the loss is averaged, and the reward model's loss", CAUSAL,
           "Sample a group of answers to one prompt, give each a [[reward|reward]] by a rule you can read, and "
           "compare each with its group: its [[advantage|advantage]]. Then [[GRPO|GRPO]]'s loss, token by token: "
           "the [[ratio|ratio]] of the new [[policy|policy]]'s probability to the old one's, [[PPO|PPO]]'s "
           "[[clip|clip]], the [[KL|KL divergence]] to a reference, the ways the literature averages it, and a few "
           "updates of training on the same group, where the clip and the KL act. Last, the [[reward model|reward "
           "model]]'s loss, and [[DPO|DPO]] as that same loss.",
           "lmviz.lessons.grpo", ("advantage", "rloo", "first_ratio", "second_update_clipped", "weights",
                                  "bradley_terry"),
           "causal", model_box=True,
           text_boxes=(TextBox(("grpo prompt",), "text_input", "grpo_prompt", 500),)),
    # after RL fine-tuning: its seeded sampler and its step on a private copy are what on-policy distillation uses
    Lesson("distillation", "distill", "Distillation",
           "Distillation: a student learns a teacher's whole distribution",
           ":material/school:",
           "how a student model learns a teacher's whole distribution at each token: forward and reverse KL, the "
           "generalized JSD and its jumps at both ends, τ², hard against soft, and on-policy distillation", CAUSAL,
           "A [[teacher model|teacher model]]'s distribution at each token, not one true token, is what the "
           "[[student model|student model]] learns: here one chat model with and without a context. The "
           "[[forward KL|forward KL]] and [[reverse KL|reverse KL]], the [[generalized JSD|JSD]] between them and "
           "where it jumps, [[τ²|temperature in distillation]], hard against soft [[distillation|distillation]], and "
           "an [[on-policy|on-policy]] step.",
           "lmviz.lessons.distillation", ("direction", "beta_one", "t_squared"), "causal", model_box=True,
           text_boxes=(TextBox(("distillation answer",), "text_input", "distill_answer", 500),)),
    Lesson("batches", "batches", "Batches and padding", "Batches and padding: where real training loss gets subtle",
           ":material/view_agenda:",
           "how sentences of different lengths share one batch, and why its loss is a mean over tokens", CAUSAL,
           "[[Padding|padding]], [[-100|-100 / ignore_index]] labels, and why the batch's loss is a mean over "
           "tokens, not over sentences.",
           "lmviz.lessons.batches", ("count", "means", "ignored", "packed"), "causal",
           text_boxes=(TextBox(("batches",), "text_area", "batch_text", 2000),)),
    Lesson("masked_lm", "masked-lm", "Masked LM", "Masked LM: BERT's fill-in-the-blanks loss",
           ":material/theater_comedy:",
           "how BERT selects tokens to predict, hides most of them, and is scored at every selected one, hidden or "
           "not", "BERT",
           "Select about 15 % of the tokens (80 % of them become [[[MASK]|[CLS] / [SEP] / [MASK]]], 10 % a random "
           "token, 10 % stay as they were) and predict the original at each selected position, the unchanged ones "
           "too; no other position is scored.",
           "lmviz.lessons.bert", ("count", "mean", "kept"), "bert", model_box=True,
           text_boxes=(TextBox(("masked-lm",), "text_area", "mlm_text", 1000),
            TextBox(("masked-lm compare",), "text_area", "mlm_text_b", 1000))),
    Lesson("next_sentence", "nsp", "Next sentence", "Next-sentence prediction: does B follow A?",
           ":material/compare_arrows:", "how BERT's second task turns two scores into p(B follows A) and a loss",
           "BERT", "Decide whether sentence B follows sentence A.",
           "lmviz.lessons.bert", ("probability", "loss"), "bert", model_box=True,
           text_boxes=(TextBox(("nsp",), "text_input", "nsp_a", 500),)),
    Lesson("bert_loss", "bert-loss", "BERT pre-training loss", "BERT's pre-training loss: masked LM + next sentence",
           ":material/functions:", "how BERT's two losses add up to the one it is trained on", "BERT",
           "Both at once: the masked-LM loss and the next-sentence loss, added.",
           "lmviz.lessons.bert", ("total", "larger"), "bert", model_box=True,
           text_boxes=(TextBox(("bert-loss",), "text_input", "bert_b", 500),)),
    Lesson("train", "train", "Train", "Train: watch a model learn", ":material/monitoring:",
           "what a loss curve shows: where an untrained model starts and how far training takes it", "Training",
           "Pre-train a tiny GPT or BERT from scratch and watch its loss fall from about ln V, a uniform guess; for "
           "next-token prediction, toward the stories' own [[entropy|entropy]], which no model beats on average.",
           "lmviz.lessons.training", ("start", "perplexity"),
           text_boxes=(TextBox(("train alone", "train among ordinary text"), "text_area", "train_text", 1_000_000),)),
)

_LINK = re.compile(r"\[\[(.+?)\|(.+?)\]\](?!\])")


def home_markdown(lesson: Lesson, query: str = "") -> str:
    """What Home says of ``lesson``, its [[word|entry]] marks turned into links to the glossary."""
    return _LINK.sub(lambda mark: link(mark.group(1), mark.group(2), query), lesson.home)


def sections() -> dict[str, list[Lesson]]:
    """The lessons under Home's headings, in the path's order."""
    grouped: dict[str, list[Lesson]] = {}
    for lesson in PATH:
        grouped.setdefault(lesson.section, []).append(lesson)
    return grouped


def total_questions() -> int:
    return sum(len(lesson.questions) for lesson in PATH)


def all_keys() -> set[str]:
    return {lesson.key(question) for lesson in PATH for question in lesson.questions}


def neighbours(lesson: Lesson) -> tuple[Lesson | None, Lesson | None]:
    """The lessons before and after ``lesson`` on the path (None at either end)."""
    at = PATH.index(lesson)
    return (PATH[at - 1] if at > 0 else None), (PATH[at + 1] if at + 1 < len(PATH) else None)


def read_progress(code: str | None) -> set[str]:
    """The answered keys a link carries; anything that is not one of the path's keys is ignored."""
    return set((code or "").split(",")) & all_keys()


def progress_code(answered: set[str]) -> str:
    """``answered`` as a link carries it: the path's keys only, in the path's order."""
    return ",".join(lesson.key(q) for lesson in PATH for q in lesson.questions if lesson.key(q) in answered)


def next_to_study(answered: set[str]) -> Lesson | None:
    """The first lesson with a question not yet answered; None when every one is."""
    return next((lesson for lesson in PATH if any(lesson.key(q) not in answered for q in lesson.questions)), None)


def find(url_path: str) -> Lesson:
    """The lesson of that url path (its name in progress keys); KeyError when there is none."""
    for lesson in PATH:
        if lesson.url_path == url_path:
            return lesson
    raise KeyError(url_path)
