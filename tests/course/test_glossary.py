"""Every term of the glossary is one click away where a page first uses it; every lesson declares the terms its
page uses (lmviz.course.glossary.LESSON_TERMS), each with an entry; and the entries are true of the loaded models
and of the libraries they name."""

import math
import re

import pytest
import torch
import torch.nn.functional as F
from streamlit.testing.v1 import AppTest

from lmviz.course.glossary import LESSON_TERMS, TERMS, anchor, link
from lmviz.course.registry import PATH
from tests.helpers import APP, PAGES, default_page, open_page

# on text with \[ \] unescaped: "[[MASK]](glossary#…)"
LINK = re.compile(r"\[(.*?)\]\(glossary(?:\?[^#)]*)?#([a-z0-9-]+)\)")


def first_uses(text: str) -> dict[str, int]:
    """term -> where in ``text`` one of its words first appears (whole words; "label" not in "labelled"). A word
    inside a longer term's use is that term's use only ("reward" in "reward model"), as link_first_uses links it."""
    hits = []
    for term, (words, _) in TERMS.items():
        # any case for Latin words only: σ (sigmoid) in any case would also be Σ, a sum
        hits += [(term, m.start(), m.end()) for w in words
                 for m in re.finditer(rf"(?<![\w\\-]){re.escape(w)}(?![\w-])", text,
                                      flags=re.IGNORECASE if w.isascii() and w.islower() else 0)]
    found = {}
    for term, start, end in hits:
        inside_longer = any(other != term and s <= start and end <= e and e - s > end - start for other, s, e in hits)
        if not inside_longer:
            found[term] = min(start, found.get(term, start))
    return found


def linked_spans(text: str) -> list[tuple[int, int, str]]:
    return [(m.start(), m.end(), m.group(2)) for m in LINK.finditer(text)]


def test_in_presentation_mode_the_glossary_opens_in_presentation_mode_too():
    at = AppTest.from_file(APP, default_timeout=60)
    at.query_params["present"] = "1"
    at.run()
    assert "(glossary?present=1#token)" in in_order(at)


@pytest.mark.parametrize("page", [p for p in PAGES if not p.endswith("glossary.py")])
def test_each_terms_first_use_links_to_the_glossary(page):
    at = default_page(page)
    assert not at.exception
    text = in_order(at).replace("\\[", "[").replace("\\]", "]")  # link() escapes the brackets of [MASK]
    for lesson in PATH:  # a page's name is a name, not a use of its words ("Next token" on Home's progress line)
        text = text.replace(lesson.title, "·" * len(lesson.title))
    spans = linked_spans(text)
    unlinked = []
    for term, where in first_uses(text).items():
        if not any(start <= where < end and target == anchor(term) for start, end, target in spans):
            unlinked.append(f"{term!r} at …{text[max(0, where - 40):where + 20]!r}")
    assert not unlinked, "first uses not linked to the glossary:\n" + "\n".join(unlinked)


def in_order(at) -> str:
    """Markdown and captions in page order (depth-first through columns, containers and expanders)."""
    parts = []

    def walk(node):
        kind = getattr(node, "type", None)
        if kind in ("markdown", "caption"):
            parts.append(str(node.value))
        for child in getattr(node, "children", {}).values():
            walk(child)

    walk(at.main)
    return "\n".join(parts)


def test_links_point_at_real_entries():
    assert link("logits", "logit") == "[logits](glossary#logit)"
    assert link("logits", "logit", "?present=1") == "[logits](glossary?present=1#logit)"
    assert link("[MASK]", "[CLS] / [SEP] / [MASK]") == "[\\[MASK\\]](glossary#cls-sep-mask)"
    assert len({anchor(t) for t in TERMS}) == len(TERMS)
    with pytest.raises(KeyError):
        link("tensor", "tensor")


# --- each lesson's declared terms ---------------------------------------------------------------------------------

# the words the pages use that a classroom rehearsal found undefined (issue 28): each must have an entry
REHEARSAL_TERMS = {"chat template", "end-of-turn token", "SFT", "DPO", "policy", "reference model", "sigmoid",
                   "β (beta)", "greedy decoding", "sampling", "seed", "binary cross-entropy", "unigram entropy",
                   "MLM weight / NSP weight", "nats"}


def test_every_lesson_declares_its_terms_and_every_declared_term_has_an_entry():
    assert set(LESSON_TERMS) == {lesson.url_path for lesson in PATH}
    missing = {(lesson, t) for lesson, terms in LESSON_TERMS.items() for t in terms if t not in TERMS}
    assert not missing, f"declared terms without a glossary entry: {sorted(missing)}"
    assert REHEARSAL_TERMS <= set(TERMS)
    assert REHEARSAL_TERMS <= {t for terms in LESSON_TERMS.values() for t in terms}  # and a page uses each


# Terms a page says only for some texts, each checked on such a text in the test file named.
SAID_FOR_SOME_TEXTS = {"byte piece": "tests/app/test_byte_pieces.py"}


def shown_in_full(lesson) -> AppTest:
    """The lesson's page with what it shows only after a step: Train's legend explanations need a trained model."""
    if lesson.url_path != "train":
        return default_page(lesson.page)
    at = open_page(lesson.page)
    at.number_input(key="train_steps").set_value(10)
    next(b for b in at.button if b.label == "Train").click().run(timeout=300)
    return at


@pytest.mark.parametrize("lesson", PATH, ids=[lesson.url_path for lesson in PATH])
def test_each_page_links_the_terms_its_lesson_declares_and_declares_the_terms_it_uses(lesson):
    at = shown_in_full(lesson)
    assert not at.exception
    text = in_order(at).replace("\\[", "[").replace("\\]", "]")
    declared = set(LESSON_TERMS[lesson.url_path])
    linked = {target for _, _, target in linked_spans(text)}
    not_linked = sorted(t for t in declared - set(SAID_FOR_SOME_TEXTS) if anchor(t) not in linked)
    assert not not_linked, f"{lesson.url_path} declares these terms but never links them: {not_linked}"
    undeclared = sorted(set(first_uses(text)) - declared)
    assert not undeclared, f"{lesson.url_path} uses these glossary terms without declaring them: {undeclared}"


def test_a_greek_letter_is_matched_as_written():
    """σ (sigmoid) must not match Σ (a sum), which the Next token page writes everywhere."""
    assert "sigmoid" not in first_uses("Σ e^(z/T) over the whole vocabulary")
    assert first_uses("−log σ(β · m)").keys() >= {"sigmoid", "β (beta)"}


# --- the entries are true -----------------------------------------------------------------------------------------

def definition(term: str) -> str:
    return TERMS[term][1]


def test_log_softmax_is_accurate_to_float32_rounding_not_exact(bundled):
    """Issue 28: the entry said log_softmax "stays exact". In float32 it differs from float64 on SmolLM2's logits."""
    assert "stays exact" not in definition("log-probability")
    assert "accurate to float32's rounding, not exact" in definition("log-probability")
    ids = bundled.tokenizer("The capital of France is", add_special_tokens=False)["input_ids"]
    with torch.no_grad():
        logits = bundled.model(input_ids=torch.tensor([ids])).logits[0, -1]  # (V,) float32
    gap = (torch.log_softmax(logits.float(), -1).double() - torch.log_softmax(logits.double(), -1)).abs().max()
    assert 0 < gap.item() < 1e-4
    tiny = torch.tensor([0.0, -200.0])  # p = e^-200 is 0 in float32, its log_softmax is finite
    assert torch.softmax(tiny, -1)[1] == 0 and math.isfinite(torch.log_softmax(tiny, -1)[1].item())


def test_the_start_and_end_tokens_are_the_document_separator_not_smollm2s_bos_and_eos(bundled):
    """Issue 28: the entry said the pages read bos_token and eos_token; they add <|endoftext|>, which is neither
    for SmolLM2-Instruct (its bos_token and eos_token are chat-turn markers)."""
    from lmviz.core.text import end_token_id, start_token_id

    entry, tokenizer = definition("BOS / EOS"), bundled.tokenizer
    assert "the pages read them from the tokenizer in use" not in entry
    separator = tokenizer.convert_tokens_to_ids("<|endoftext|>")
    assert start_token_id(tokenizer) == end_token_id(tokenizer) == separator
    assert separator not in (tokenizer.bos_token_id, tokenizer.eos_token_id)
    assert (tokenizer.bos_token, tokenizer.eos_token) == ("<|im_start|>", "<|im_end|>")
    assert "<|endoftext|>" in entry and "<|im_start|> and <|im_end|>" in entry


def test_hugging_faces_labels_are_unshifted_and_the_model_shifts_them(bundled):
    """Issue 28: the entry gave only the shifted sense of "label"."""
    assert "labels = input_ids" in definition("label") and "shifts them by one place" in definition("label")
    ids = torch.tensor([bundled.tokenizer("The capital of France is Paris.")["input_ids"]])
    with torch.no_grad():
        out = bundled.model(input_ids=ids, labels=ids)
    shifted = F.cross_entropy(out.logits[0, :-1].float(), ids[0, 1:])
    assert out.loss.item() == pytest.approx(shifted.item(), abs=1e-5)


def test_the_chat_entries_are_true_of_smollm2s_template(bundled):
    tokenizer = bundled.tokenizer
    written = tokenizer.apply_chat_template([{"role": "user", "content": "Hi"},
                                             {"role": "assistant", "content": "Hello!"}], tokenize=False)
    assert isinstance(tokenizer.chat_template, str) and "{%" in tokenizer.chat_template  # a Jinja template
    assert "Hello!<|im_end|>" in written and "<|im_end|>" in definition("end-of-turn token")
    # generation stops at the end-of-turn token
    assert bundled.model.generation_config.eos_token_id == tokenizer.convert_tokens_to_ids("<|im_end|>")


def test_sigmoid_binary_cross_entropy_and_dpo_entries_agree_with_torch():
    a, b = torch.tensor(0.3, dtype=torch.float64), torch.tensor(-1.2, dtype=torch.float64)
    assert torch.softmax(torch.stack([a, b]), 0)[1].item() == pytest.approx(torch.sigmoid(b - a).item(), rel=1e-12)
    assert torch.sigmoid(torch.tensor(0.0)).item() == 0.5
    for label in (0.0, 1.0):  # binary cross-entropy on s = b - a is the two-way cross-entropy of [a, b]
        bce = F.binary_cross_entropy_with_logits(b - a, torch.tensor(label, dtype=torch.float64))
        two_way = F.cross_entropy(torch.stack([a, b])[None], torch.tensor([int(label)]))
        assert bce.item() == pytest.approx(two_way.item(), rel=1e-12)
    # before any training the policy is the reference: every log-ratio is 0, the DPO loss -log σ(0) = ln 2
    assert -F.logsigmoid(torch.tensor(0.1 * 0.0)).item() == pytest.approx(math.log(2))
    assert "−log σ(0) = ln 2" in definition("reference model")
    assert "0.1 by default" in definition("β (beta)")  # TRL's DPOConfig: beta: float = 0.1


def test_the_rl_entries_agree_with_the_library_and_torch():
    from lmviz.lessons.grpo import DEFAULT_EPSILON, MEAN, SAMPLE_STD, advantages, bradley_terry, clip_terms

    # advantage: R − mean, ÷ the std in GRPO as published; equal rewards give 0 and teach nothing
    rewards = torch.tensor([1.0, 1.0, 0.0, 0.0, 0.0], dtype=torch.float64)
    assert advantages(rewards.tolist(), MEAN).advantages == pytest.approx((rewards - rewards.mean()).tolist())
    assert advantages(rewards.tolist(), SAMPLE_STD).advantages == pytest.approx(
        ((rewards - rewards.mean()) / rewards.std()).tolist())
    same = advantages([1.0, 1.0, 1.0])
    assert same.advantages == [0.0] * 3 and same.teaches_nothing and "teaches nothing" in definition("advantage")
    # first order only, as RL fine-tuning's page says and counts (tests/app/test_grpo_page.py)
    assert "To first order, for a small enough step, an answer's own term pushes" in definition("advantage")
    assert "a step of finite size can move it against its advantage" in definition("advantage")
    # ratio and clip: before the first update every ratio is exactly 1; where the clipped term is the smaller one
    # autograd's gradient of the token's term is 0; TRL's default ε is the library's
    logp = torch.tensor([[-1.0, -2.0, -0.5]], dtype=torch.float64)
    mask = torch.ones_like(logp)
    first = clip_terms(logp.clone().requires_grad_(), logp, torch.tensor([1.0]), mask)
    assert first["ratio"].tolist() == [[1.0, 1.0, 1.0]] and "exactly 1" in definition("ratio")
    moved = logp.clone().requires_grad_()
    terms = clip_terms(moved + torch.tensor([[0.5, 0.0, 0.0]]), logp, torch.tensor([1.0]), mask)  # ratio e^0.5 > 1.2
    terms["loss"].sum().backward()
    assert terms["takes_clipped"].tolist() == [[True, False, False]] and moved.grad[0, 0].item() == 0.0
    assert moved.grad[0, 1].item() != 0.0 and "gradient is 0" in definition("clip")
    assert f"ε = {DEFAULT_EPSILON:g} by default in TRL" in definition("clip")
    # the KL entry's k3: never negative, 0 where the policy and the reference agree
    gap = torch.linspace(-5, 5, 101, dtype=torch.float64)
    k3 = torch.exp(gap) - gap - 1
    assert (k3 >= 0).all() and k3[50].item() == 0.0 and "never negative" in definition("KL divergence")
    # Bradley–Terry: −log σ(r_chosen − r_rejected)
    assert bradley_terry(2.0, 0.5).loss == pytest.approx(-F.logsigmoid(torch.tensor(1.5, dtype=torch.float64)).item())
    assert "−log σ(r_chosen − r_rejected)" in definition("Bradley–Terry")


def test_the_standard_deviation_entry_is_what_torch_numpy_and_trl_compute():
    import numpy
    from trl.trainer.utils import nanstd

    from lmviz.core.numbers import fmt

    entry = definition("standard deviation")
    rewards = [1.0, 0.0]
    sample, population = torch.tensor(rewards).std().item(), numpy.std(rewards)  # each library's default
    assert sample == pytest.approx(math.sqrt(0.5)) and population == pytest.approx(0.5)
    assert f"population std is {fmt(population)} and the sample std {fmt(sample)}" in entry
    assert "torch.std takes the sample one by default (correction=1)" in entry
    assert "numpy.std the population one (ddof=0)" in entry
    assert "as TRL's GRPO advantages do" in entry
    assert nanstd(torch.tensor(rewards)).item() == pytest.approx(sample)  # the std GRPOTrainer divides by


def test_the_unigram_entropy_is_the_best_context_free_loss():
    from lmviz.core.corpus import unigram_entropy

    tokens = [["a", "b", "a", "c"], ["a", "b"]]
    flat = [t for s in tokens for t in s]
    share = {t: flat.count(t) / len(flat) for t in set(flat)}
    entropy = unigram_entropy(tokens)
    assert entropy == pytest.approx(-sum(f * math.log(f) for f in share.values()))
    assert entropy == pytest.approx(sum(-math.log(share[t]) for t in flat) / len(flat))  # the loss of those shares
    other = {"a": 0.4, "b": 0.4, "c": 0.2}  # any other context-free guess costs more on the same text
    assert sum(-math.log(other[t]) for t in flat) / len(flat) > entropy


def test_the_bert_weights_entry_is_what_bert_loss_computes(tiny_bert_loaded):
    from lmviz.core.corpus import generate_corpus
    from lmviz.lessons.bert import analyse_bert_loss

    story = generate_corpus(num_train=0, num_validation=1, seed=0).validation[0].sentences
    one = analyse_bert_loss(tiny_bert_loaded, story[0], story[1], True, 0, 1.0, 1.0)
    weighed = analyse_bert_loss(tiny_bert_loaded, story[0], story[1], True, 0, 0.5, 2.0)
    assert one.total == pytest.approx(one.total_model, abs=1e-5)  # BertForPreTraining: both weights 1
    assert weighed.total == pytest.approx(0.5 * weighed.mlm_loss + 2.0 * weighed.nsp_loss, rel=1e-6)
    assert "total = MLM weight × the masked-LM" in definition("MLM weight / NSP weight")


def test_the_byte_piece_entry_is_true_of_utf8_and_smollm2s_tokenizer(bundled):
    from lmviz.core.text import readable_token

    entry, tokenizer = definition("byte piece"), bundled.tokenizer
    assert "🍕 is F0 9F 8D 95" in entry and "🍕".encode("utf-8").hex(" ").upper() == "F0 9F 8D 95"
    ids = tokenizer(" 🍕", add_special_tokens=False)["input_ids"]
    shown = [readable_token(tokenizer, i) for i in ids]
    assert shown == ["<20 F0 9F>", "<8D>", "<95>"] and "<20 F0 9F>, <8D> and <95>" in entry
    assert [len(c.encode("utf-8")) for c in "aé我🍕"] == [1, 2, 3, 4] and "in 1 to 4 bytes" in entry
