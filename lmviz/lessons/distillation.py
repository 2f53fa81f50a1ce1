"""Distillation: a student learns a teacher's whole distribution at each position, not one true token.

Here the teacher and the student are one chat model (context distillation): the teacher reads a privileged context
(a system message the learner edits: instructions, worked examples, the reference answer) before the question; the
student reads the question alone. Both score the same answer tokens, and the loss compares their distributions over
the whole vocabulary at each answer position (TRL's generalized_jsd_loss, GKD's eq. 1):

    forward KL(p_T ‖ p_S) = Σ_v p_T(v) (log p_T(v) − log p_S(v))   mass-covering: costly where p_T > 0 and p_S ≈ 0
    reverse KL(p_S ‖ p_T) = Σ_v p_S(v) (log p_S(v) − log p_T(v))   mode-seeking: costly where p_S > 0 and p_T ≈ 0
    JSD_β = β KL(p_T ‖ M) + (1 − β) KL(p_S ‖ M),  M = β p_T + (1 − β) p_S

JSD_β tends to 0 as β goes to 0 or to 1 (M becomes one of the two), but TRL defines β = 0 as the forward KL and β = 1
as the reverse KL, so the loss jumps at both ends (``jsd_formula`` is the formula alone, ``generalized_jsd`` TRL's).
A temperature τ divides both models' logits. Where τ is large against the gaps between a position's logits, the
loss's gradient shrinks about as 1/τ², and Hinton's distillation multiplies the loss by τ² to keep its size
(DistilBERT does; TRL's trainers do not); at smaller τ no such rule holds, and the loss can even grow with τ.

``hard_and_soft`` puts hard distillation (the cross-entropy of the student on the teacher's greedy answer: SFT on
teacher text) beside the soft loss on the same tokens. ``on_policy_step`` samples answers from the student, lets the
teacher score them, and takes one SGD step on a private copy with each token's advantage −(log π_S − log π_T):
log π_S − log π_T at the drawn token is a one-sample estimate of the reverse KL at that position, whose exact value
is the sum over the whole vocabulary (Thinking Machines' on-policy distillation). The shared model never changes.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, field

import torch

from lmviz.core.text import readable_token, valid_text
from lmviz.core.trl import DISTILLATION
from lmviz.errors import BadInput, ChatTemplateError, NoChatTemplate, NothingToScore
from lmviz.lessons.causal_lm import length_limit, seconds_since
from lmviz.lessons.gradient_step import check_learning_rate, descend, private_copy, return_freed_memory
from lmviz.lessons.grpo import check_sampling, draw_answers, group_logprobs, stop_ids

DEFAULT_QUESTION = "What is the capital of Australia?"
DEFAULT_CONTEXT = ("You answer in one short sentence. The capital of Australia is Canberra, not Sydney, which is "
                   "its largest city.")
DEFAULT_ANSWER = "The capital of Australia is Canberra."
# β: the experimental GKDConfig's 0.5, the JSD itself (DistillationConfig's 1.0 is the reverse KL, one end of the
# sweep); τ: DistillationConfig's
DEFAULT_BETA, DEFAULT_TEMPERATURE = DISTILLATION.gkd_beta, DISTILLATION.temperature
MIN_TEMPERATURE, MAX_TEMPERATURE = 0.5, 4.0
TOP = 5  # the likeliest tokens shown per position, of each model
TERMS = 4  # the largest terms of each sum written out per position
MAX_ANSWER_TOKENS = 64
# the rate: torch.optim.SGD's default; on the default question 0.006 already overshoots (the KL rises)
DEFAULT_GROUP, DEFAULT_SEED, DEFAULT_RATE, DEFAULT_NEW_TOKENS = 4, 0, 1e-3, 12
# β values the page's sweep shows: both ends, and how close to each the formula comes to 0
BETA_SWEEP = (0.0, 1e-6, 0.01, 0.1, 0.25, 0.5, 0.75, 0.9, 0.99, 1 - 1e-6, 1.0)


BadSetting = BadInput  # a β, temperature, teacher, rate or group the lesson cannot use: the lessons' one such error


# ---------------------------------------------------------------------------------------------- the divergences

def log_probs(logits: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """log_softmax(logits / τ) in float32, or in float64 for float64 logits. logits: (..., V)."""
    return torch.log_softmax(logits.to(torch.promote_types(logits.dtype, torch.float32)) / temperature, dim=-1)


def kl(p_log: torch.Tensor, q_log: torch.Tensor) -> torch.Tensor:
    """KL(p ‖ q) = Σ_v p(v) (log p(v) − log q(v)) at each position, from log-probabilities (..., V) -> (...).
    A term with p(v) = 0 is 0."""
    p = p_log.exp()
    return torch.where(p > 0, p * (p_log - q_log), torch.zeros_like(p)).sum(-1)


def forward_kl(teacher_log: torch.Tensor, student_log: torch.Tensor) -> torch.Tensor:
    """KL(p_T ‖ p_S): the teacher's expectation of how much less likely the student finds each token."""
    return kl(teacher_log, student_log)


def reverse_kl(teacher_log: torch.Tensor, student_log: torch.Tensor) -> torch.Tensor:
    """KL(p_S ‖ p_T): the student's expectation of how much less likely the teacher finds each token."""
    return kl(student_log, teacher_log)


def mixture_log(teacher_log: torch.Tensor, student_log: torch.Tensor, beta: float) -> torch.Tensor:
    """log M, M = β p_T + (1 − β) p_S, by logsumexp (a term with weight 0 drops out)."""
    parts = [log + math.log(weight) for log, weight in ((teacher_log, beta), (student_log, 1 - beta)) if weight > 0]
    return torch.logsumexp(torch.stack(parts), dim=0)


def jsd_formula(teacher_log: torch.Tensor, student_log: torch.Tensor, beta: float) -> torch.Tensor:
    """GKD's eq. 1 for any β in [0, 1]: β KL(p_T ‖ M) + (1 − β) KL(p_S ‖ M). It is 0 at β = 0 and at β = 1, where M is
    one of the two distributions and the other's weight is 0."""
    m = mixture_log(teacher_log, student_log, beta)
    return beta * kl(teacher_log, m) + (1 - beta) * kl(student_log, m)


def generalized_jsd(teacher_log: torch.Tensor, student_log: torch.Tensor, beta: float) -> torch.Tensor:
    """TRL's generalized JSD at each position: the forward KL at β = 0, the reverse KL at β = 1, eq. 1 between."""
    if beta == 0:
        return forward_kl(teacher_log, student_log)
    if beta == 1:
        return reverse_kl(teacher_log, student_log)
    return jsd_formula(teacher_log, student_log, beta)


def check_beta_and_temperature(beta: float, temperature: float) -> None:
    if not isinstance(beta, (int, float)) or not 0 <= beta <= 1:
        raise BadSetting(f"β must be a number from 0 to 1; it is {beta!r}.")
    if not isinstance(temperature, (int, float)) or not MIN_TEMPERATURE <= temperature <= MAX_TEMPERATURE:
        raise BadSetting(f"The temperature must be a number from {MIN_TEMPERATURE:g} to {MAX_TEMPERATURE:g}; it is "
                         f"{temperature!r}.")


def distillation_loss(student_logits: torch.Tensor, teacher_logits: torch.Tensor, beta: float = DEFAULT_BETA,
                      temperature: float = DEFAULT_TEMPERATURE, t_squared: bool = False) -> torch.Tensor:
    """The mean over positions of the generalized JSD between softmax(teacher_logits / τ) and softmax(student_logits /
    τ), times τ² when ``t_squared`` (Hinton's factor). logits: (N, V), one row per answer token."""
    check_beta_and_temperature(beta, temperature)
    per_position = generalized_jsd(log_probs(teacher_logits, temperature), log_probs(student_logits, temperature),
                                   beta)
    return per_position.mean() * (temperature ** 2 if t_squared else 1.0)


# ---------------------------------------------------------------------------------------------- the conversations

def chat_prompt(tokenizer, question: str, context: str | None = None) -> list[int]:
    """The question as a conversation, after ``context`` as its system message when given, written by the chat
    template up to the start of the assistant's turn. Typed control tokens stay characters."""
    if not getattr(tokenizer, "chat_template", None):
        raise NoChatTemplate("This model's tokenizer has no chat template, so it cannot be given a context as a chat "
                             "model is: choose a chat model such as the bundled SmolLM2-135M-Instruct.")
    messages = ([{"role": "system", "content": valid_text(context)}] if context and context.strip() else []) + \
        [{"role": "user", "content": valid_text(question)}]
    try:
        return list(tokenizer.apply_chat_template(messages, add_generation_prompt=True,
                                                  sanitize_control_tokens=True)["input_ids"])
    except Exception as error:  # jinja2's TemplateError, or raise_exception() called by the template itself
        said = (str(error).strip().splitlines() or [type(error).__name__])[0].rstrip(".")
        raise ChatTemplateError(f"This model's chat template refuses this conversation: {said}.") from error


def answer_ids(loaded, answer: str) -> list[int]:
    """The answer's tokens as the assistant's turn holds them, then the token that ends the turn."""
    if not answer or not answer.strip():
        raise NothingToScore("The answer is empty: type the answer both models score.")
    ids = loaded.tokenizer(valid_text(answer), add_special_tokens=False, split_special_tokens=True)["input_ids"]
    if len(ids) > MAX_ANSWER_TOKENS:
        raise NothingToScore(f"The answer is {len(ids)} tokens long; this lesson scores at most {MAX_ANSWER_TOKENS}. "
                             "Shorten it.")
    return ids + stop_ids(loaded)[:1]


def _answer_logits(model, prompt: list[int], answer: list[int]) -> torch.Tensor:
    """(A, V) float32 logits at the positions that predict each of the answer's A tokens after ``prompt``."""
    device = next(model.parameters()).device
    ids = torch.tensor([prompt + answer], device=device)
    logits = model(input_ids=ids, logits_to_keep=len(answer) + 1).logits[0]  # (A + 1, V), the prompt's last on
    return logits[:-1].float()


def _check_length(loaded, *sequences: list[int]) -> None:
    limit = length_limit(loaded.model)[0]
    longest = max(len(s) for s in sequences)
    if longest > limit:
        raise NothingToScore(f"The conversation is {longest:,} tokens long; this model reads at most {limit:,}: "
                             "shorten the context.")


# ---------------------------------------------------------------------------------------------- one answer, scored

@dataclass
class Term:
    """One vocabulary entry's term in a position's sum."""

    token: str
    p_teacher: float
    p_student: float
    term: float


@dataclass
class Position:
    """One answer token, as the teacher and the student see it."""

    position: int  # in the answer, from 0
    token: str
    token_id: int
    p_teacher: float  # of this token, at τ = 1
    p_student: float
    teacher_top: list = field(default_factory=list)  # [(token, p)], likeliest first, at τ = 1
    student_top: list = field(default_factory=list)
    forward_kl: float = 0.0  # at τ
    reverse_kl: float = 0.0
    jsd: float = 0.0  # TRL's generalized JSD at β, τ
    forward_terms: list = field(default_factory=list)  # the largest terms of the forward KL's sum (Term)
    reverse_terms: list = field(default_factory=list)


@dataclass
class Distillation:
    model: str  # the student's
    teacher: str  # the teacher's: the same model, or another with the same tokenizer
    question: str
    context: str
    answer: str
    teacher_prompt: list[str]  # readable tokens of each conversation up to the answer
    student_prompt: list[str]
    answer_ids: list[int]
    positions: list[Position]
    beta: float
    temperature: float
    loss: float  # mean of the positions' JSD_β, without τ²
    loss_t_squared: float  # the same × τ²
    loss_at_1: float  # the same loss at τ = 1, for scale
    forward_kl: float  # means over the answer, at τ
    reverse_kl: float
    sweep: list  # [(β, TRL's JSD_β, the formula's JSD_β)], means over the answer
    gradient_norm: float  # ‖∂loss/∂student logits‖ without τ²
    gradient_norm_t_squared: float
    gradient_norm_at_1: float  # the same loss at τ = 1, for scale
    device: str
    seconds: float

    def to_dict(self) -> dict:
        return asdict(self)


def _top(tokenizer, log_p: torch.Tensor, k: int = TOP) -> list:
    values, ids = log_p.topk(k)
    return [(readable_token(tokenizer, i), p) for i, p in zip(ids.tolist(), values.exp().tolist())]


def _largest_terms(tokenizer, p_log: torch.Tensor, q_log: torch.Tensor, teacher_first: bool) -> list[Term]:
    """The TERMS largest terms p(v) (log p(v) − log q(v)) in size of KL(p ‖ q) at one position (V,)."""
    p = p_log.exp()
    terms = torch.where(p > 0, p * (p_log - q_log), torch.zeros_like(p))
    ids = terms.abs().topk(TERMS).indices.tolist()
    teacher, student = (p_log, q_log) if teacher_first else (q_log, p_log)
    return [Term(readable_token(tokenizer, i), teacher[i].exp().item(), student[i].exp().item(), terms[i].item())
            for i in ids]


def check_same_tokenizer(student, teacher) -> None:
    """A teacher and a student are compared token by token only where one token id means the same text to both."""
    if teacher.tokenizer.get_vocab() != student.tokenizer.get_vocab():
        raise BadSetting(f"{teacher.name}'s tokenizer is not {student.name}'s: the same text is cut into other tokens, "
                         "so the two models' distributions are over different vocabularies and cannot be compared "
                         "token by token. Choose a teacher with the same tokenizer.")


def score_answer(loaded, question: str, context: str, answer: str, beta: float = DEFAULT_BETA,
                 temperature: float = DEFAULT_TEMPERATURE, teacher=None) -> Distillation:
    """The teacher (``loaded`` after ``context``, or ``teacher``, another model with the same tokenizer) and the
    student (``loaded`` without the context) on the same answer: each position's distributions, KLs and JSD_β, the
    loss with and without τ², the β sweep, and the size of the loss's gradient with respect to the student's logits
    under each convention."""
    check_beta_and_temperature(beta, temperature)
    teacher = loaded if teacher is None else teacher
    check_same_tokenizer(loaded, teacher)
    if teacher is loaded and (not context or not context.strip()):
        raise NothingToScore("The teacher's context is empty: type what the teacher knows and the student does not.")
    if not question or not question.strip():
        raise NothingToScore("The question is empty: type what both models are asked.")
    tokenizer = loaded.tokenizer
    teacher_prompt, student_prompt = chat_prompt(teacher.tokenizer, question, context), chat_prompt(tokenizer, question)
    answer = answer_ids(loaded, answer)
    _check_length(loaded, student_prompt + answer)
    _check_length(teacher, teacher_prompt + answer)
    start = time.perf_counter()
    with torch.inference_mode():
        teacher_logits = _answer_logits(teacher.model, teacher_prompt, answer).cpu()  # (A, V)
        student_logits = _answer_logits(loaded.model, student_prompt, answer).cpu()
    seconds = seconds_since(start, loaded.device)
    teacher_logits, student_logits = teacher_logits.clone(), student_logits.clone()
    t1, s1 = log_probs(teacher_logits), log_probs(student_logits)
    t, s = log_probs(teacher_logits, temperature), log_probs(student_logits, temperature)
    forward, reverse, jsd = forward_kl(t, s), reverse_kl(t, s), generalized_jsd(t, s, beta)
    positions = []
    for n, token_id in enumerate(answer):
        positions.append(Position(
            position=n, token=readable_token(tokenizer, token_id), token_id=token_id,
            p_teacher=t1[n, token_id].exp().item(), p_student=s1[n, token_id].exp().item(),
            teacher_top=_top(tokenizer, t1[n]), student_top=_top(tokenizer, s1[n]),
            forward_kl=forward[n].item(), reverse_kl=reverse[n].item(), jsd=jsd[n].item(),
            forward_terms=_largest_terms(tokenizer, t[n], s[n], teacher_first=True),
            reverse_terms=_largest_terms(tokenizer, s[n], t[n], teacher_first=False)))
    sweep = [(b, generalized_jsd(t, s, b).mean().item(), jsd_formula(t, s, b).mean().item()) for b in BETA_SWEEP]
    loss_at_1 = generalized_jsd(t1, s1, beta).mean().item()
    norms = {}
    for name, tau, squared in (("plain", temperature, False), ("squared", temperature, True), ("one", 1.0, False)):
        logits = student_logits.clone().requires_grad_(True)
        distillation_loss(logits, teacher_logits, beta, tau, squared).backward()
        norms[name] = logits.grad.norm().item()
    loss = jsd.mean().item()
    return Distillation(
        model=loaded.name, teacher=teacher.name, question=question, context=context,
        answer=tokenizer.decode(answer[:-1]),
        teacher_prompt=[readable_token(tokenizer, i) for i in teacher_prompt],
        student_prompt=[readable_token(tokenizer, i) for i in student_prompt], answer_ids=answer,
        positions=positions, beta=float(beta), temperature=float(temperature), loss=loss,
        loss_t_squared=loss * temperature ** 2, loss_at_1=loss_at_1, forward_kl=forward.mean().item(),
        reverse_kl=reverse.mean().item(),
        sweep=sweep, gradient_norm=norms["plain"], gradient_norm_t_squared=norms["squared"],
        gradient_norm_at_1=norms["one"], device=loaded.device, seconds=seconds)


# ---------------------------------------------------------------------------------------------- hard and soft

@dataclass
class HardAndSoft:
    """Hard distillation (the student's cross-entropy on the teacher's greedy answer) beside the soft loss on the
    same tokens."""

    teacher_answer: str
    tokens: list[str]
    hard: float  # mean −log p_S(the teacher's token)
    soft: float  # mean JSD_β between the two distributions at those tokens, at τ, without τ²
    teacher_nll: float  # mean −log p_T(its own greedy token): how sure the teacher was


def greedy_answer(model, prompt: list[int], stops: list[int], max_new_tokens: int = DEFAULT_NEW_TOKENS) -> list[int]:
    """The model's greedy answer after ``prompt``, its stopping token included when reached (with the cache)."""
    device = next(model.parameters()).device
    out = model(input_ids=torch.tensor([prompt], device=device), use_cache=True)
    drawn = []
    for _ in range(max_new_tokens):
        token = out.logits[0, -1].argmax().item()
        drawn.append(token)
        if token in stops:
            break
        out = model(input_ids=torch.tensor([[token]], device=device), cache=out.cache, use_cache=True)
    return drawn


def hard_and_soft(loaded, question: str, context: str, beta: float = DEFAULT_BETA,
                  temperature: float = DEFAULT_TEMPERATURE, max_new_tokens: int = DEFAULT_NEW_TOKENS,
                  teacher=None) -> HardAndSoft:
    """The teacher's greedy answer (``loaded`` after ``context``, or ``teacher``), and on its tokens the student's
    cross-entropy (hard) and the soft loss JSD_β at τ."""
    check_beta_and_temperature(beta, temperature)
    teacher = loaded if teacher is None else teacher
    check_same_tokenizer(loaded, teacher)
    tokenizer = loaded.tokenizer
    teacher_prompt, student_prompt = chat_prompt(teacher.tokenizer, question, context), chat_prompt(tokenizer, question)
    stops = stop_ids(loaded)
    with torch.inference_mode():
        answer = greedy_answer(teacher.model, teacher_prompt, stops, max_new_tokens)
        teacher_logits = _answer_logits(teacher.model, teacher_prompt, answer).cpu()
        student_logits = _answer_logits(loaded.model, student_prompt, answer).cpu()
    targets = torch.tensor(answer)
    return HardAndSoft(
        teacher_answer=tokenizer.decode([i for i in answer if i not in stops]),
        tokens=[readable_token(tokenizer, i) for i in answer],
        hard=torch.nn.functional.cross_entropy(student_logits, targets).item(),
        soft=distillation_loss(student_logits, teacher_logits, beta, temperature).item(),
        teacher_nll=torch.nn.functional.cross_entropy(teacher_logits, targets).item())


# ---------------------------------------------------------------------------------------------- on-policy

@dataclass
class Sampled:
    """One answer the student drew, as both models score it."""

    text: str
    ids: list[int]  # the drawn tokens, the stopping token included when one was drawn
    tokens: list[str]
    logp_student: list[float]  # log π_S of each drawn token (what it was drawn with, τ = 1)
    logp_teacher: list[float]  # log π_T of the same tokens, after the context
    advantages: list[float]  # −(log π_S − log π_T) per token: minus a one-sample estimate of the reverse KL there
    reverse_kl_before: list[float]  # KL(p_S ‖ p_T) exactly, summed over the whole vocabulary, at each of its positions
    reverse_kl_after: list[float]  # the same, with the student after the step


@dataclass
class OnPolicy:
    model: str
    size: int
    seed: int
    lr: float
    answers: list[Sampled]
    loss: float  # −mean over tokens of (advantage × log π_S): what the step descends
    grad_norm: float
    kl_before: float  # the mean over every drawn token of the exact reverse KL, before and after the step
    kl_after: float
    seconds: float
    device: str

    def to_dict(self) -> dict:
        return asdict(self)


def check_on_policy(size: int, seed: int, lr: float, max_new_tokens: int) -> None:
    """The answers are drawn as RL fine-tuning's group is (at τ = 1), and the step is One step of learning's."""
    check_sampling(size, seed, 1.0, max_new_tokens)
    check_learning_rate(lr)


def _reverse_kls(student, student_prompt: list[int], answers: list[list[int]],
                 teacher: list[torch.Tensor]) -> list[list[float]]:
    """KL(p_S ‖ p_T) over the whole vocabulary at each position of each answer; ``teacher``: each answer's (A, V)
    log-probabilities under the teacher, computed once for before and after the step."""
    return [reverse_kl(t, log_probs(_answer_logits(student, student_prompt, answer))).tolist()
            for answer, t in zip(answers, teacher)]


def on_policy_loss(logp_student: torch.Tensor, logp_teacher: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """−mean over the drawn tokens of A·log π_S, A = −(log π_S − log π_T) held fixed: its gradient is the policy
    gradient with each token's one-sample estimate of the reverse KL, log π_S − log π_T, as its negative reward.
    (G, L) tensors; mask 1 on real tokens."""
    advantage = -(logp_student.detach() - logp_teacher)
    return -(advantage * logp_student * mask).sum() / mask.sum()


def on_policy_step(loaded, question: str, context: str, size: int = DEFAULT_GROUP, seed: int = DEFAULT_SEED,
                   lr: float = DEFAULT_RATE, max_new_tokens: int = DEFAULT_NEW_TOKENS, teacher=None) -> OnPolicy:
    """``size`` answers the student draws (seeded, τ = 1), the teacher's log-probabilities of their tokens, and one
    SGD step at ``lr`` on a private copy of the weights on ``on_policy_loss``; each answer's reverse KL to the teacher
    at each position, before and after the step. The teacher: ``loaded`` after ``context``, or ``teacher``."""
    check_on_policy(size, seed, lr, max_new_tokens)
    teacher = loaded if teacher is None else teacher
    check_same_tokenizer(loaded, teacher)
    tokenizer = loaded.tokenizer
    teacher_prompt, student_prompt = chat_prompt(teacher.tokenizer, question, context), chat_prompt(tokenizer, question)
    _check_length(teacher, teacher_prompt + [0] * max_new_tokens)
    stops = stop_ids(loaded)
    start = time.perf_counter()
    with torch.inference_mode():
        drawn, _ = draw_answers(loaded.model, student_prompt, size, 1.0, max_new_tokens, stops,
                                torch.Generator().manual_seed(seed))
    answers = []
    for row in drawn.tolist():
        end = next((n + 1 for n, i in enumerate(row) if i in stops), len(row))
        answers.append(row[:end])
    with torch.no_grad():
        teacher_logp, _ = group_logprobs(teacher.model, teacher_prompt, answers)
        teacher_log = [log_probs(_answer_logits(teacher.model, teacher_prompt, answer)) for answer in answers]
        before = _reverse_kls(loaded.model, student_prompt, answers, teacher_log)
    module = private_copy(loaded.model)
    student, mask = group_logprobs(module, student_prompt, answers)
    loss = on_policy_loss(student, teacher_logp, mask)
    rows_s, rows_t = [r[:len(a)] for r, a in zip(student.detach().tolist(), answers)], \
        [r[:len(a)] for r, a in zip(teacher_logp.tolist(), answers)]
    norm = descend(module, loss, lr)
    with torch.no_grad():
        after = _reverse_kls(module, student_prompt, answers, teacher_log)
    del module
    return_freed_memory()
    sampled = [Sampled(text=tokenizer.decode([i for i in a if i not in stops]), ids=a,
                       tokens=[readable_token(tokenizer, i) for i in a], logp_student=s, logp_teacher=t,
                       advantages=[tt - ss for ss, tt in zip(s, t)], reverse_kl_before=b, reverse_kl_after=f)
               for a, s, t, b, f in zip(answers, rows_s, rows_t, before, after)]
    every = sum(len(a) for a in answers)
    return OnPolicy(model=loaded.name, size=size, seed=seed, lr=float(lr), answers=sampled, loss=loss.item(),
                    grad_norm=norm, kl_before=sum(map(sum, before)) / every, kl_after=sum(map(sum, after)) / every,
                    seconds=seconds_since(start, loaded.device), device=loaded.device)
