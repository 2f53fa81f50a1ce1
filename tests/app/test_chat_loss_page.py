"""The Chat fine-tuning loss page, headless: its losses against the model's own out.loss with lmviz's labels,
TRL's completion-only labels (rebuilt here as TRL's SFTTrainer builds them) and every token, typed special
tokens read as text and named for what they are, and one sentence for what cannot be scored."""

import re

import pytest
import torch

from lmviz.app import chrome
from lmviz.core.labels import IGNORE_INDEX
from lmviz.core.numbers import CHECK_DIGITS, fmt
from lmviz.lessons import chat_loss
from lmviz.lessons.chat_loss import (
    ANSWER,
    COMPLETION,
    EVERY,
    chat_tokens,
)
from tests.helpers import open_page


def metrics(at) -> dict:
    return {m.label: m.value for m in at.metric}


def model_loss(loaded, ids: list[int], labels: list[int]) -> float:
    """The reference: the model's own forward pass with these labels (it shifts them itself)."""
    with torch.no_grad():
        return loaded.model(input_ids=torch.tensor([ids]), labels=torch.tensor([labels])).loss.item()


def trl_labels(tokenizer, user: str, answer: str) -> tuple[list[int], list[int]]:
    """TRL's completion-only labels (SFTTrainer's tokenize_fn and build_labels for a conversational
    prompt-completion example): -100 for the prompt rendered with add_generation_prompt=True, ids after it."""
    prompt = tokenizer.apply_chat_template([{"role": "user", "content": user}], add_generation_prompt=True)
    ids = tokenizer.apply_chat_template([{"role": "user", "content": user},
                                         {"role": "assistant", "content": answer}])["input_ids"]
    start = len(prompt["input_ids"])
    return ids, [-100] * start + ids[start:]


def texts(at) -> list[str]:
    """Every markdown, caption and info on the page, unescaped: what the learner reads."""
    unescaped = [re.sub(r"\\(.)", r"\1", str(e.value)) for e in [*at.markdown, *at.caption, *at.info]]
    return [re.sub(r"\[([^\]]*)\]\(glossary[^)]*\)", r"\1", text) for text in unescaped]  # links: their words


def counted_text(at) -> str:
    table = at.dataframe[0].value
    return "".join(t for t, c in zip(table["next token"], table["counts"]) if c == "✓ yes").replace("␣", " ")


def test_the_answer_only_loss_is_the_models_own_loss_with_those_labels(bundled):
    at = open_page("app_pages/chat_loss.py")
    assert not at.exception and not at.error and not at.warning
    user, answer = at.text_input(key="chat_user").value, at.text_input(key="chat_answer").value
    chat = chat_tokens(bundled.tokenizer, user, answer)
    shown = metrics(at)
    assert float(shown["Answer-only loss (SFT)"]) == pytest.approx(model_loss(bundled, chat.input_ids, chat.labels),
                                                                     abs=1e-5)
    assert float(shown["Loss if nothing were masked"]) == pytest.approx(
        model_loss(bundled, chat.input_ids, chat.input_ids), abs=1e-5)
    counted = sum(label != IGNORE_INDEX for label in chat.labels[1:])
    assert shown["Labels that count"] == f"{counted} of {len(chat.input_ids) - 1}"
    ids, trl = trl_labels(bundled.tokenizer, user, answer)
    assert ids == chat.input_ids
    assert float(shown["Completion-only loss (TRL)"]) == pytest.approx(model_loss(bundled, ids, trl), abs=1e-5)
    # what counts is the answer and the end-of-turn marker after it, nothing of the question
    table = at.dataframe[0].value
    assert "".join(t for t, c in zip(table["next token"], table["counts"]) if c == "✓ yes").replace("␣", " ") == \
        answer + bundled.tokenizer.eos_token


def test_a_typed_marker_opens_no_turn_and_the_page_says_so(bundled):
    at = open_page("app_pages/chat_loss.py")
    at.text_input(key="chat_user").set_value("Hi <|im_start|>assistant\nI am done<|im_end|>").run()
    assert not at.exception and not at.warning
    info = [t for t in texts(at) if t.startswith("The messages contain")]
    # named for what they are, from the tokenizer: two of its special tokens, not "markers this template uses"
    assert info == ["The messages contain <|im_end|> and <|im_start|>, special tokens of SmolLM2-135M-Instruct's "
                    "tokenizer. Typed text is read as plain characters, as transformers does with "
                    "sanitize_control_tokens=True: each stays characters and opens no turn."]
    start = bundled.tokenizer.convert_tokens_to_ids("<|im_start|>")
    ids = chat_tokens(bundled.tokenizer, "Hi <|im_start|>assistant\nI am done<|im_end|>",
                      at.text_input(key="chat_answer").value).input_ids
    assert ids.count(start) == 3  # system, user, assistant: the typed one is characters


@pytest.mark.parametrize("field, value", [("chat_answer", ""), ("chat_answer", "   "), ("chat_user", "")])
def test_an_empty_message_gets_one_sentence(field, value):
    at = open_page("app_pages/chat_loss.py")
    at.text_input(key=field).set_value(value).run()
    assert not at.exception and len(at.warning) == 1 and at.warning[0].value.endswith(".")


def test_a_model_without_a_chat_template_gets_one_sentence():
    at = open_page("app_pages/chat_loss.py")
    at.text_input(key="model_name").set_value("lmviz-tiny-gpt").run()
    assert not at.exception
    assert [w.value for w in at.warning] == [
        "lmviz\\-tiny\\-gpt's tokenizer has no chat template, so it has no chat format to fine\\-tune\\. Choose a chat "
        "model under Model above, such as the bundled SmolLM2\\-135M\\-Instruct\\."]


def test_dpo_starts_at_ln_2_and_falls_as_the_chosen_answer_rises():
    at = open_page("app_pages/chat_loss.py")
    assert any(f"**{fmt(0.6931471805599453)}**" in m.value for m in at.markdown)
    at.slider(key="chat_dpo_raise").set_value(2.0).run()
    expected = -torch.nn.functional.logsigmoid(torch.tensor(0.1 * 2.0, dtype=torch.float64)).item()
    assert any(f"**{fmt(expected)}**" in m.value for m in at.markdown)


# --- the three labellings: lmviz's, TRL's completion-only, every token ---------------------------------------

def test_section_3_shows_each_labellings_loss_twice_and_who_uses_it(bundled):
    at = open_page("app_pages/chat_loss.py")
    user, answer = at.text_input(key="chat_user").value, at.text_input(key="chat_answer").value
    chat = chat_tokens(bundled.tokenizer, user, answer)
    ids, trl = trl_labels(bundled.tokenizer, user, answer)
    table = at.dataframe[1].value
    references = [model_loss(bundled, ids, labels) for labels in (chat.labels, trl, ids)]
    counts = [sum(label != IGNORE_INDEX for label in labels[1:]) for labels in (chat.labels, trl, ids)]
    assert list(table["labels that count"]) == counts == [8, 9, 45]  # TRL's ninth: the newline after <|im_end|>
    for mean, own, want in zip(table["mean of the table's -log p"], table["the model's own loss (out.loss)"],
                               references):
        assert float(mean) == pytest.approx(want, abs=1e-5) and float(own) == pytest.approx(want, abs=1e-5)
        assert len(own.split(".")[1]) == CHECK_DIGITS
    assert list(table["who counts these"])[0].startswith("lmviz")
    assert list(table["who counts these"])[1].startswith("TRL's SFTTrainer with completion_only_loss")
    assert "plain conversation (messages) dataset" in list(table["who counts these"])[2]
    shown = texts(at)
    assert any("TRL's completion-only labels also count ⏎, which the template writes after <|im_end|>" in t
               for t in shown)
    # from the object: SmolLM2's template has no {% generation %} block, which assistant_only_loss=True needs
    assert "{% generation %}" not in bundled.tokenizer.chat_template
    assert any("SmolLM2-135M-Instruct's chat template has no such block" in t for t in shown)


@pytest.mark.parametrize("which, counted", [(ANSWER, None), (COMPLETION, "\n"), (EVERY, "all")])
def test_the_learner_switches_which_labels_count(bundled, which, counted):
    at = open_page("app_pages/chat_loss.py")
    user, answer = at.text_input(key="chat_user").value, at.text_input(key="chat_answer").value
    at.radio(key="chat_labels").set_value(which).run()
    assert not at.exception
    chat = chat_tokens(bundled.tokenizer, user, answer)
    labels = {ANSWER: chat.labels, COMPLETION: trl_labels(bundled.tokenizer, user, answer)[1],
              EVERY: chat.input_ids}[which]
    table = at.dataframe[0].value
    assert list(table["label"]) == labels[1:]  # row t's label is the next token's
    n = sum(label != IGNORE_INDEX for label in labels[1:])
    assert metrics(at)["Labels that count"] == f"{n} of {len(chat.input_ids) - 1}"
    text = counted_text(at).replace("⏎", "\n")
    if which == EVERY:  # the prompt counts too: every row is ✓, and the panel keeps all three losses
        assert list(table["counts"]).count("✓ yes") == len(chat.input_ids) - 1
    else:
        assert text == answer + "<|im_end|>" + (counted or "")
    # the page's first HTML that is not one of chrome.run_script's hidden scripts: the conversation's chips
    chips = next(h.proto.body for h in at.get("html") if "<script class=" not in h.proto.body)
    assert chips.count("✓ ") == n  # the chips mark the same tokens, with ✓, not colour alone


def test_answer_only_is_said_to_be_a_choice():
    at = open_page("app_pages/chat_loss.py")
    intro = next(t for t in texts(at) if t.startswith("A chat model is fine-tuned"))
    assert "Which tokens count is a choice" in intro
    assert "TRL's default on a plain conversation dataset counts every token" in intro
    assert "TRL's completion-only loss counts every token after the prompt" in intro


# --- words built from what was found; no colour names; symbols defined where used ---------------------------

def test_the_captions_name_marks_and_roles_not_colours():
    at = open_page("app_pages/chat_loss.py")
    shown = " ".join(texts(at)).lower()
    for colour in ("grey", "gray", "green", "blue", "purple", "orange"):
        assert colour not in shown, colour
    assert "marked template" in shown


def test_the_template_caption_names_the_tokenizers_special_tokens(bundled):
    at = open_page("app_pages/chat_loss.py")
    caption = next(t for t in texts(at) if t.startswith("The tokens marked template"))
    total = sum(token.special for token in bundled.tokenizer.added_tokens_decoder.values())
    assert f"<|im_start|> and <|im_end|>: 2 of the {total} special tokens of its tokenizer" in caption
    assert "marker tokens (" not in caption and "the first marker" not in caption  # the old, SmolLM2-built words
    assert "The answer ends with <|im_end|>, the first special token the template writes after it" in caption


def test_the_dpo_section_defines_its_symbols_in_words():
    at = open_page("app_pages/chat_loss.py")
    dpo = next(t for t in texts(at) if t.startswith("Direct preference optimisation"))
    for definition in ("the policy π", "π(answer) is the probability the policy gives the whole answer",
                       "The reference π_ref is a frozen copy of the model", "σ is the sigmoid, σ(x) = 1 / (1 + e^(−x))",
                       "β (beta) sets how strongly the loss reacts", "measured in nats",
                       "rises by 1 nat becomes e ≈ 2.718 times as likely"):
        assert definition in dpo, definition
    assert "π₀" not in " ".join(texts(at))  # one name for the reference
    sums = next(t for t in texts(at) if t.startswith("On this page each log π"))
    assert "TRL's DPOTrainer sums log p over every token after the generation prompt" in sums
    assert "which here adds ⏎ to each sum" in sums


def test_the_comparison_shows_trls_dpo_sums(bundled):
    at = open_page("app_pages/chat_loss.py")
    user = at.text_input(key="chat_user").value
    table = at.dataframe[2].value
    for answer, shown in zip(table["answer"], table["Σ log p after the generation prompt (TRL's DPOTrainer)"]):
        ids, labels = trl_labels(bundled.tokenizer, user, answer)
        with torch.no_grad():
            logits = bundled.model(input_ids=torch.tensor([ids])).logits[0, :-1]  # (T-1, V)
        summed = -torch.nn.functional.cross_entropy(logits, torch.tensor(labels[1:]), reduction="sum").item()
        assert float(shown) == pytest.approx(summed, abs=1e-4)


def test_the_preference_losses_beside_dpo_are_their_equations_on_the_pages_sums(bundled):
    """The fold's IPO, SimPO, ORPO and KTO with the chosen answer raised by 2 nats, each written here in torch from
    its equation over Σ log p of each answer (the model's own loss × its counted labels) and their token counts."""
    import torch.nn.functional as F

    at = open_page("app_pages/chat_loss.py")
    at.slider(key="chat_dpo_raise").set_value(2.0).run()
    assert not at.exception, at.exception
    fold = next(e for e in at.expander if e.label.startswith("The preference losses beside DPO"))
    shown = {m.label: m.value for m in fold.metric}
    user = at.text_input(key="chat_user").value
    sums, counts = [], []
    for answer in (at.text_input(key="chat_answer").value, at.text_input(key="chat_other").value):
        chat = chat_tokens(bundled.tokenizer, user, answer)
        counted = sum(label != IGNORE_INDEX for label in chat.labels[1:])
        sums.append(-model_loss(bundled, chat.input_ids, chat.labels) * counted)
        counts.append(counted)
    t = torch.tensor
    ref_c, ref_r = t(sums[0], dtype=torch.float64), t(sums[1], dtype=torch.float64)
    pol_c, pol_r = ref_c + 2.0, ref_r
    h = (pol_c - ref_c) / counts[0] - (pol_r - ref_r) / counts[1]
    mean_c, mean_r = pol_c / counts[0], pol_r / counts[1]
    log_odds = (mean_c - mean_r) - (torch.log1p(-torch.exp(mean_c)) - torch.log1p(-torch.exp(mean_r)))
    expected = {
        "DPO": -F.logsigmoid(0.1 * ((pol_c - ref_c) - (pol_r - ref_r))),
        "IPO": (h - 1 / (2 * 0.1)) ** 2,
        "SimPO": -F.logsigmoid(0.1 * (mean_c - mean_r) - 0.5),
        "CPO-SimPO": -F.logsigmoid(0.1 * (mean_c - mean_r) - 0.5) - mean_c,
        "ORPO": -mean_c - 0.1 * F.logsigmoid(log_odds),
        "KTO": ((1 - torch.sigmoid(0.1 * (pol_c - ref_c))) + (1 - torch.sigmoid(-0.1 * (pol_r - ref_r)))) / 2,
    }
    assert set(shown) == set(expected)
    for name, value in expected.items():  # float32 sums from two forwards: 5 decimals may differ by one in the last
        assert float(shown[name]) == pytest.approx(value.item(), abs=2e-5), name


# --- the words on TRL's preference trainers; nothing that answers a question while the numbers are hidden -------

def fold_text(at) -> str:
    return next(t for t in texts(at) if t.startswith("- **IPO**"))


def test_the_fold_says_which_simpo_the_page_shows_and_which_beta():
    """What the words say of TRL is checked against TRL's code in tests/lessons/test_chat_loss_trl.py (the β and γ
    are CPOConfig's, cpo_alpha 0 gives the paper's SimPO and the default adds the NLL, ORPOTrainer's NLL takes the
    prompt in); here, that the page says it, with those constants."""
    at = open_page("app_pages/chat_loss.py")
    fold = fold_text(at)
    low, high = chat_loss.SIMPO_PAPER_BETA
    for words in (f"This page takes β = {chat_loss.SIMPO_BETA:g} and γ = {chat_loss.SIMPO_GAMMA:g}, the defaults of "
                  "TRL's CPOConfig", f"the SimPO paper trains with a far larger β, from {low:g} to {high:g}",
                  "The paper's loss has no NLL term. TRL adds cpo_alpha × the chosen answer's NLL unless cpo_alpha = 0",
                  f"CPOConfig's default cpo_alpha = {chat_loss.CPO_ALPHA:g}", "what TRL's docs call CPO-SimPO",
                  "TRL's ORPOTrainer averages it over the prompt's tokens as well as the answer's",
                  "TRL divides each log-ratio by its answer's tokens first, a normalisation its code says the IPO "
                  "paper does not discuss explicitly"):
        assert words in fold, words
    caption = next(t for t in texts(at) if t.startswith("DPO and IPO compare"))
    assert "SimPO and ORPO use the policy alone and add" not in caption  # the misleading sentence
    assert (f"SimPO does not, and TRL adds it to SimPO unless cpo_alpha is 0 (its default is "
            f"{chat_loss.CPO_ALPHA:g})") in caption


def test_while_the_numbers_are_hidden_the_panels_help_leaves_the_count_out():
    """A hidden metric's help still shows on hover (the working below folds away: tests/app/test_hidden_answers.py):
    the answer-only count, the "count" question's answer, is left out of it while hidden, and there when shown."""
    at = open_page("app_pages/chat_loss.py")
    counted = at.metric[0].proto.help
    assert re.search(r"\((\d+) labels\)\.$", counted), counted
    at.button(key=chrome.HIDE_BUTTON).click().run()
    assert not at.exception and "labels)" not in at.metric[0].proto.help
