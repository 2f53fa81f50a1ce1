"""The chat page's preference losses against TRL 1.16.0's own code, run without a model: each trainer's loss method
called on a stand-in object (types.SimpleNamespace) that carries the attributes the method reads, with a bigram table
in place of the model, and compared with lmviz.lessons.chat_loss's number to float precision. And the page's and the
glossary's words about TRL, each read from TRL's source.

TRL is a test requirement only (requirements-dev.txt); the app never imports it.
"""

import inspect
import os
import types
from collections import defaultdict
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")  # trl.experimental warns on import, once per process

from trl import DPOConfig, DPOTrainer, KTOConfig, KTOTrainer  # noqa: E402
from trl.experimental.cpo import CPOConfig, CPOTrainer  # noqa: E402
from trl.experimental.orpo import ORPOConfig, ORPOTrainer  # noqa: E402

from lmviz.course.glossary import TERMS  # noqa: E402
from lmviz.lessons import chat_loss  # noqa: E402
from lmviz.lessons.chat_loss import dpo_loss, preference_losses  # noqa: E402
from tests.helpers import config_default  # noqa: E402

VOCAB = 13
PROMPT = [3, 7, 1, 4]
CHOSEN, REJECTED = [5, 9, 2, 11, 6], [8, 12, 10]  # of different lengths: TRL pads the shorter one
ACCELERATOR = types.SimpleNamespace(device=torch.device("cpu"), gather_for_metrics=lambda x: x, gather=lambda x: x)


class Bigram:
    """A stand-in for a causal LM: the logits after a token are its row of a fixed random table. Called as TRL's
    trainers call a model: ``.logits`` for CPO and ORPO; with ``fused_lm_head=True`` (DPO, KTO) the fields of TRL's
    FusedCausalLMOutput (trl/trainer/utils.py): log p of each next label, 0 where the label is -100, shape (B, T-1)."""

    def __init__(self, seed: int):
        self.table = torch.randn(VOCAB, VOCAB, generator=torch.Generator().manual_seed(seed), dtype=torch.float64) * 2

    def __call__(self, input_ids, attention_mask=None, labels=None, fused_lm_head=False, **_):
        logits = self.table[input_ids]  # (B, T, V)
        if not fused_lm_head:
            return types.SimpleNamespace(logits=logits)
        targets = labels[:, 1:]  # (B, T-1)
        log_p = torch.log_softmax(logits[:, :-1], -1).gather(-1, targets.clamp(min=0)[..., None])[..., 0]
        zeros = torch.zeros_like(log_p)
        return types.SimpleNamespace(log_probs=log_p * (targets != -100), entropy=zeros, mean_logits=zeros,
                                     is_top1=zeros.bool())

    def summed_logp(self, prompt: list[int], answer: list[int]) -> float:
        """Σ log p of the answer's tokens after the prompt, written apart from TRL: a summed cross-entropy."""
        ids = torch.tensor(prompt + answer)
        return -F.cross_entropy(self.table[ids[:-1]], ids[1:], reduction="none")[len(prompt) - 1:].sum().item()


POLICY, REFERENCE = Bigram(0), Bigram(1)


def stand_in(trainer: type, methods: tuple[str, ...], **attributes) -> types.SimpleNamespace:
    """An object with the attributes a trainer's loss code reads, and its methods bound to it (static ones as they
    are): no model loaded, no TrainingArguments built."""
    self = types.SimpleNamespace(accelerator=ACCELERATOR, model=types.SimpleNamespace(training=False),
                                 aux_loss_enabled=False, _metrics=defaultdict(lambda: defaultdict(list)),
                                 _total_train_tokens=0, **attributes)
    for name in methods:
        static = isinstance(inspect.getattr_static(trainer, name), staticmethod)
        setattr(self, name, getattr(trainer, name) if static else types.MethodType(getattr(trainer, name), self))
    return self


def padded(rows: list[list[int]], value: int) -> torch.Tensor:
    width = max(map(len, rows))
    return torch.tensor([row + [value] * (width - len(row)) for row in rows])


def lessons(z0: float = 0.0, prompt: list[int] = PROMPT):
    """lmviz's preference losses on the pair, from the two models' sums (the first answer chosen), DPOConfig's β."""
    sums = [model.summed_logp(prompt, answer) for model in (POLICY, REFERENCE) for answer in (CHOSEN, REJECTED)]
    return preference_losses(*sums, len(CHOSEN), len(REJECTED), config_default(DPOConfig, "beta"), z0)


# --- DPO and IPO: DPOTrainer._compute_loss ---------------------------------------------------------------------

def dpo_trainers_loss(loss_type: str) -> float:
    """DPOTrainer's loss on the pair, the reference's sums given as precomputed (precompute_ref_log_probs)."""
    rows = [PROMPT + CHOSEN, PROMPT + REJECTED]
    completion = padded([[0] * len(PROMPT) + [1] * len(answer) for answer in (CHOSEN, REJECTED)], 0)
    inputs = {"input_ids": padded(rows, 0), "attention_mask": padded([[1] * len(row) for row in rows], 0),
              "completion_mask": completion,
              "ref_chosen_logps": torch.tensor([REFERENCE.summed_logp(PROMPT, CHOSEN)], dtype=torch.float64),
              "ref_rejected_logps": torch.tensor([REFERENCE.summed_logp(PROMPT, REJECTED)], dtype=torch.float64)}
    trainer = stand_in(DPOTrainer, (), beta=config_default(DPOConfig, "beta"), loss_types=[loss_type],
                       loss_weights=[1.0], precompute_ref_logps=True, ld_alpha=config_default(DPOConfig, "ld_alpha"),
                       use_weighting=False, f_divergence_type=config_default(DPOConfig, "f_divergence_type"))
    return DPOTrainer._compute_loss(trainer, POLICY, inputs, return_outputs=False).item()


def test_dpo_is_dpotrainers_sigmoid_loss():
    sums = [model.summed_logp(PROMPT, answer) for model in (POLICY, REFERENCE) for answer in (CHOSEN, REJECTED)]
    assert dpo_loss(*sums, beta=config_default(DPOConfig, "beta")).loss == pytest.approx(dpo_trainers_loss("sigmoid"),
                                                                                    rel=1e-12)


def test_ipo_is_dpotrainers_ipo_loss():
    assert chat_loss.DEFAULT_BETA == config_default(DPOConfig, "beta")  # the β the page gives IPO
    assert lessons().ipo == pytest.approx(dpo_trainers_loss("ipo"), rel=1e-12)


def test_the_ipo_normalisation_is_trls_and_its_comment_says_the_paper_does_not_discuss_it():
    """The page and the glossary credit the per-token means to TRL, not to Azar et al., as TRL's IPO branch says."""
    source = " ".join(inspect.getsource(DPOTrainer._compute_loss).replace("#", " ").split())
    assert "This length normalization is not explicitly discussed in the IPO paper" in source
    assert "the results reported in the paper correspond to this normalized form" in source
    assert ("a normalisation its code says the IPO paper does not discuss explicitly, and that the paper's results "
            "use (confirmed with its authors)") in TERMS["IPO"][1]
    assert "each divided by its answer's tokens, the loss" not in TERMS["IPO"][1]  # the credit the issue found


# --- SimPO and CPO-SimPO: CPOTrainer.get_batch_loss_metrics -------------------------------------------------------

def pair_batch(prompt: list[int] = PROMPT) -> dict:
    """CPOTrainer's and ORPOTrainer's tokenize_row fields for one pair: the prompt's labels -100, the answer's its
    ids."""
    batch = {}
    for side, answer in (("chosen", CHOSEN), ("rejected", REJECTED)):
        batch[f"{side}_input_ids"] = torch.tensor([prompt + answer])
        batch[f"{side}_attention_mask"] = torch.ones(1, len(prompt + answer), dtype=torch.long)
        batch[f"{side}_labels"] = torch.tensor([[-100] * len(prompt) + answer])
    return batch


def cpo_trainers_loss(cpo_alpha: float) -> float:
    trainer = stand_in(CPOTrainer, ("concatenated_forward", "concatenated_inputs", "get_batch_logps", "cpo_loss"),
                       loss_type="simpo", beta=config_default(CPOConfig, "beta"), cpo_alpha=cpo_alpha,
                       simpo_gamma=config_default(CPOConfig, "simpo_gamma"), alpha=config_default(CPOConfig, "alpha"),
                       label_smoothing=config_default(CPOConfig, "label_smoothing"), is_encoder_decoder=False,
                       pad_token_id=0)
    return CPOTrainer.get_batch_loss_metrics(trainer, POLICY, pair_batch())[0].item()


def test_simpo_is_cpotrainers_simpo_loss_with_cpo_alpha_0():
    """The SimPO paper's loss, with no NLL term: CPOConfig(loss_type="simpo", cpo_alpha=0.0), TRL's docs' SimPO."""
    assert (chat_loss.SIMPO_BETA, chat_loss.SIMPO_GAMMA) == (config_default(CPOConfig, "beta"),
                                                             config_default(CPOConfig, "simpo_gamma"))
    assert lessons().simpo == pytest.approx(cpo_trainers_loss(0.0), rel=1e-12)


def test_cpo_simpo_is_cpotrainers_simpo_loss_with_its_default_cpo_alpha():
    """CPOConfig's default cpo_alpha adds cpo_alpha × the chosen answer's NLL: what the page calls CPO-SimPO."""
    assert chat_loss.CPO_ALPHA == config_default(CPOConfig, "cpo_alpha") != 0
    ours = lessons()
    assert ours.cpo_simpo == pytest.approx(cpo_trainers_loss(config_default(CPOConfig, "cpo_alpha")), rel=1e-12)
    assert ours.cpo_simpo - ours.simpo == pytest.approx(chat_loss.CPO_ALPHA * -ours.chosen_mean_logp, rel=1e-12)


def test_the_simpo_paper_beta_the_page_quotes_is_not_cpoconfigs():
    """The page and the glossary say that the page's β is CPOConfig's and that the SimPO paper's range differs."""
    low, high = chat_loss.SIMPO_PAPER_BETA
    assert not low <= config_default(CPOConfig, "beta") <= high
    assert f"its paper trains with β from {low:g} to {high:g}" in TERMS["SimPO"][1]
    assert f"CPOConfig has β {config_default(CPOConfig, 'beta'):g}" in TERMS["SimPO"][1]
    assert "unless cpo_alpha is set to 0" in TERMS["SimPO"][1] and "no NLL term" in TERMS["SimPO"][1]


# --- ORPO: ORPOTrainer.get_batch_loss_metrics --------------------------------------------------------------------

FLOAT32 = 1e-6  # ORPOTrainer.odds_ratio_loss casts the mean log-probabilities to float32 before the log odds

def orpo_trainers_loss(prompt: list[int]) -> float:
    trainer = stand_in(ORPOTrainer, ("concatenated_forward", "concatenated_inputs", "get_batch_logps",
                                     "odds_ratio_loss"),
                       beta=config_default(ORPOConfig, "beta"), is_encoder_decoder=False, padding_value=0)
    return ORPOTrainer.get_batch_loss_metrics(trainer, POLICY, pair_batch(prompt))[0].item()


def test_orpo_is_orpotrainers_loss_where_the_prompt_adds_no_prediction():
    """ORPOTrainer's NLL runs over the prompt and the answer; with a one-token prompt, which is never predicted,
    that is the answer's NLL alone, and the two agree."""
    assert chat_loss.ORPO_LAMBDA == config_default(ORPOConfig, "beta")
    assert lessons(prompt=PROMPT[:1]).orpo == pytest.approx(orpo_trainers_loss(PROMPT[:1]), rel=FLOAT32)


def test_orpotrainers_nll_takes_in_the_prompt_as_the_page_says():
    """With a longer prompt ORPOTrainer's loss is the lesson's with its NLL averaged over every predicted token,
    the prompt's too: what the page and the glossary say it leaves out."""
    ours = lessons()
    ids = torch.tensor(PROMPT + CHOSEN)
    every = F.cross_entropy(POLICY.table[ids[:-1]], ids[1:]).item()  # mean -log p over all predictions
    assert orpo_trainers_loss(PROMPT) == pytest.approx(ours.orpo + ours.chosen_mean_logp + every, rel=FLOAT32)
    assert every != pytest.approx(-ours.chosen_mean_logp, rel=1e-2)
    assert "ORPOTrainer averages the NLL over the prompt's tokens as well as the answer's" in TERMS["ORPO"][1]


# --- KTO: KTOTrainer._compute_loss ----------------------------------------------------------------------------

def kto_trainers_loss(kl_shift: float) -> tuple[float, float]:
    """KTOTrainer's loss with the chosen answer desirable and the rejected one undesirable. Its reference point
    comes from mismatched pairs (each prompt with the other example's answer): their reference sums are the
    policy's less ``kl_shift``, so that the policy's mean log-ratio on them is ``kl_shift``. Returns the loss and
    the z0 TRL's rule gives, the mean clamped at 0."""
    other_prompt = [2, 6]
    rows, kl_rows = [PROMPT + CHOSEN, PROMPT + REJECTED], [PROMPT + REJECTED, other_prompt + CHOSEN]
    kl_prompts = [PROMPT, other_prompt]

    def masks(prompts, rows):
        return (padded([[1] * len(row) for row in rows], 0),
                padded([[0] * len(p) + [1] * (len(row) - len(p)) for p, row in zip(prompts, rows)], 0))

    attention, completion = masks([PROMPT, PROMPT], rows)
    kl_attention, kl_completion = masks(kl_prompts, kl_rows)
    kl_policy = [POLICY.summed_logp(p, row[len(p):]) for p, row in zip(kl_prompts, kl_rows)]
    inputs = {"input_ids": padded(rows, 0), "attention_mask": attention, "completion_mask": completion,
              "KL_input_ids": padded(kl_rows, 0), "KL_attention_mask": kl_attention,
              "KL_completion_mask": kl_completion, "label": torch.tensor([True, False]),
              "ref_logps": torch.tensor([REFERENCE.summed_logp(PROMPT, a) for a in (CHOSEN, REJECTED)],
                                        dtype=torch.float64),
              "ref_KL_logps": torch.tensor(kl_policy, dtype=torch.float64) - kl_shift}
    trainer = stand_in(KTOTrainer, ("_compute_kl_logps",), beta=config_default(KTOConfig, "beta"), calculate_KL=True,
                       loss_type=config_default(KTOConfig, "loss_type"), precompute_ref_logps=True,
                       desirable_weight=config_default(KTOConfig, "desirable_weight"),
                       undesirable_weight=config_default(KTOConfig, "undesirable_weight"))
    return KTOTrainer._compute_loss(trainer, POLICY, inputs, return_outputs=False).item(), max(kl_shift, 0.0)


@pytest.mark.parametrize("kl_shift", [0.0, 0.75, -0.75])
def test_kto_is_ktotrainers_loss_with_its_reference_point_clamped_at_0(kl_shift):
    assert (chat_loss.KTO_BETA, chat_loss.KTO_DESIRABLE_WEIGHT, chat_loss.KTO_UNDESIRABLE_WEIGHT) == (
        config_default(KTOConfig, "beta"), config_default(KTOConfig, "desirable_weight"),
        config_default(KTOConfig, "undesirable_weight"))
    theirs, z0 = kto_trainers_loss(kl_shift)
    assert lessons(z0=z0).kto == pytest.approx(theirs, rel=1e-12)
    if kl_shift < 0:  # a negative mean is clamped: the lesson with z0 below 0 would differ
        assert lessons(z0=kl_shift).kto != pytest.approx(theirs, rel=1e-6)


def test_the_lessons_docs_say_of_trl_what_these_tests_check():
    """docs/lessons/chat_loss.md's sentences on the preference losses, with the numbers of TRL's configs and the
    paper's β the lesson quotes (lines joined, so that a phrase cut at a line's end is still found)."""
    docs = " ".join((Path(__file__).resolve().parents[2] / "docs/lessons/chat_loss.md").read_text().split())
    low, high = chat_loss.SIMPO_PAPER_BETA
    for words in ("its code says the IPO paper does not discuss that normalisation explicitly",
                  f"The page takes CPOConfig's β, {config_default(CPOConfig, 'beta'):g}; the SimPO paper trains with "
                  f"β from {low:g} to {high:g}",
                  f"unless `cpo_alpha` is 0, and CPOConfig's default is {config_default(CPOConfig, 'cpo_alpha')}: "
                  "TRL's docs call that CPO-SimPO", "TRL's ORPOTrainer averages it over the prompt's tokens as well"):
        assert words in docs, words
