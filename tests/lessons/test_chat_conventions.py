"""Which tokens each library counts, reproduced here independently of lmviz.lessons.chat_loss.

TRL's rules, as its source has them (huggingface/trl, trl/trainer/sft_trainer.py and dpo_trainer.py, read at
commit f2cd577): for a conversational prompt-completion example, SFTTrainer's tokenize_fn renders the prompt
with add_generation_prompt=True and the whole conversation without it, and its completion_mask is 0 for the
prompt's length and 1 for every token after it; with completion_only_loss (None, the default, means "on" for a
prompt-completion dataset) build_labels sets -100 where the mask is 0. For a plain conversation ("messages")
example no mask applies, so labels = input_ids. DPOTrainer's tokenize_fn cuts chosen_ids / rejected_ids after the
same prompt and sums log p over the completion_mask. assistant_only_loss=True needs a {% generation %} block
(has_generation_markers: r"\\{%-?\\s*generation\\s*-?%\\}"); for a template without one TRL swaps in a copy it
ships, and stops with a ValueError for any other template, SmolLM2's among them."""

import copy
import dataclasses
import re
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from lmviz.lessons.chat_loss import (
    ANSWER,
    COMPLETION,
    EVERY,
    analyse_sft,
    chat_tokens,
    compare_answers,
    completion_labels,
    difference_sentence,
    end_of_turn_sentence,
    generation_block_sentence,
    has_generation_block,
    special_tokens,
    template_sentence,
    typed_sentence,
)
from lmviz.models.loading import LoadedModel
from tests.lessons.test_chat_loss import GEMMA_LIKE, PLAIN, SMOLLM2_TAGGED, messages, with_template

USER, ANSWER_TEXT, OTHER = "What is the capital of France?", "The capital of France is Paris.", \
    "The capital of France is Berlin."
# TRL's own test for the block, copied from trl.chat_template_utils.has_generation_markers
TRL_GENERATION_MARKERS = re.compile(r"\{%-?\s*generation\s*-?%\}")
# Written here, for the tiny word-level tokenizer (which writes no token for a newline): a template that writes
# nothing after the answer, one that writes a plain word there ("and"), and Gemma's with a word after its end of turn
NOTHING_AFTER = "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}{% if not loop.last %}\n{% endif %}" \
                "{% endfor %}{% if add_generation_prompt %}\nassistant: {% endif %}"
WORD_AFTER = "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }} and\n{% endfor %}" \
             "{% if add_generation_prompt %}assistant: {% endif %}"
GEMMA_WORD_AFTER_END = GEMMA_LIKE.replace("<end_of_turn>\n", "<end_of_turn> and\n")


def trl_completion_only(tokenizer, conversation: list[dict]) -> tuple[list[int], list[int]]:
    """TRL's SFT labels for {"prompt": conversation[:-1], "completion": conversation[-1:]}: the ids and labels."""
    prompt_ids = tokenizer.apply_chat_template(conversation[:-1], tokenize=True, return_dict=True,
                                               add_generation_prompt=True)["input_ids"]
    ids = tokenizer.apply_chat_template(conversation, tokenize=True, return_dict=True)["input_ids"]
    mask = [0] * len(prompt_ids) + [1] * (len(ids) - len(prompt_ids))
    return ids, [token if bit else -100 for token, bit in zip(ids, mask)]


def trl_dpo_logps(loaded, prompt: list[dict], answer: str) -> tuple[float, int]:
    """DPOTrainer's summed log p of one answer: the tokens after the generation prompt, from the model's logits."""
    tokenizer = loaded.tokenizer
    prompt_ids = tokenizer.apply_chat_template(prompt, tokenize=True, return_dict=True,
                                               add_generation_prompt=True)["input_ids"]
    ids = tokenizer.apply_chat_template(prompt + [{"role": "assistant", "content": answer}], tokenize=True,
                                        return_dict=True)["input_ids"]
    mask = torch.tensor([0] * len(prompt_ids) + [1] * (len(ids) - len(prompt_ids)))[1:]  # shifted, as TRL does
    with torch.no_grad():
        logits = loaded.model(input_ids=torch.tensor([ids])).logits[0, :-1].float()  # (T-1, V)
    per_token = F.log_softmax(logits, dim=-1).gather(-1, torch.tensor(ids[1:])[:, None])[:, 0]  # (T-1,)
    return (per_token * mask).sum().item(), int(mask.sum())


def own_loss(loaded, ids, labels) -> float:
    with torch.no_grad():
        return loaded.model(input_ids=torch.tensor([ids]), labels=torch.tensor([labels])).loss.item()


@pytest.fixture(scope="module")
def default(bundled):
    return analyse_sft(bundled, USER, ANSWER_TEXT)


# --- TRL's completion-only labels, beside lmviz's ------------------------------------------------------

def test_trls_completion_only_labels_are_reproduced(bundled, default):
    ids, labels = trl_completion_only(bundled.tokenizer, messages(USER, ANSWER_TEXT))
    chat = default.chat
    assert chat.input_ids == ids and chat.completion_labels == labels and chat.labels_for(COMPLETION) == labels
    # the newline after <|im_end|> is TRL's ninth label; lmviz's eight stop at <|im_end|>
    assert bundled.tokenizer.decode([i for i in labels if i != -100]) == "The capital of France is Paris.<|im_end|>\n"
    assert (default.counted_completion, default.counted_answer) == (9, 8)


def docs_losses() -> list[float]:
    """The six losses at the end of the CLI reference's sft example, in its order."""
    reference = Path("docs/reference/cli.md").read_text()
    block = reference[reference.index("answer-only loss (lmviz: the answer and its end of turn, 8 labels)"):]
    block = block[:block.index("```")]
    return [float(line.split()[-1]) for line in block.splitlines() if line.strip()]


def test_both_losses_are_the_models_own_with_those_labels(bundled, default):
    ids, trl = trl_completion_only(bundled.tokenizer, messages(USER, ANSWER_TEXT))
    reference = own_loss(bundled, ids, trl)
    assert default.loss_completion == pytest.approx(reference, abs=1e-5)
    assert default.loss_completion_model == pytest.approx(reference, abs=1e-5)
    assert default.loss_answer == pytest.approx(own_loss(bundled, ids, default.chat.labels), abs=1e-5)
    # the figures docs/reference/cli.md shows, to float32's spread between CPUs: two machines, each with the weights
    # in aligned memory (lmviz.models.loading), gave 0.3152925 and 0.3152984 for TRL's 9 labels
    shown = docs_losses()
    computed = [default.loss_answer, default.loss_answer_model, default.loss_completion,
                default.loss_completion_model, default.loss_all, default.loss_all_model]
    assert len(shown) == len(computed) == 6
    assert computed == pytest.approx(shown, abs=2e-5)
    assert default.loss(COMPLETION) == (default.loss_completion, default.loss_completion_model, 9)
    assert default.loss(ANSWER) == (default.loss_answer, default.loss_answer_model, 8)


def test_trls_default_on_a_conversation_dataset_counts_every_token(bundled, default):
    ids = bundled.tokenizer.apply_chat_template(messages(USER, ANSWER_TEXT), tokenize=True,
                                                return_dict=True)["input_ids"]
    assert default.chat.labels_for(EVERY) == ids  # no mask applies: labels = input_ids
    assert default.loss_all == pytest.approx(own_loss(bundled, ids, ids), abs=1e-5)
    assert default.loss(EVERY)[2] == len(ids) - 1  # every token but the first is predicted


@pytest.mark.parametrize("system", [None, "Answer in one word."])
@pytest.mark.parametrize("user, answer", [(USER, "Paris."), ("Say hi", "Hi!"), ("2+2?", "4, of course.")])
def test_trls_split_on_other_conversations(bundled, user, answer, system):
    result = analyse_sft(bundled, user, answer, system)
    ids, labels = trl_completion_only(bundled.tokenizer, messages(user, answer, system))
    assert result.chat.completion_labels == labels
    assert result.loss_completion == pytest.approx(own_loss(bundled, ids, labels), abs=1e-5)
    # TRL counts lmviz's labels and the one newline the template writes after the end of the turn
    assert result.counted_completion == result.counted_answer + 1


@pytest.mark.parametrize("template, markers, extra", [
    (GEMMA_LIKE, ("<start_of_turn>", "<end_of_turn>"), 0),  # its newline after <end_of_turn> is no token here
    (PLAIN, (), 0),
    (GEMMA_WORD_AFTER_END, ("<start_of_turn>", "<end_of_turn>"), 1),  # "and" after <end_of_turn>: TRL counts it
], ids=["gemma-like", "plain", "a word after the end of turn"])
def test_another_template_gets_trls_split_too(tiny_gpt2, tiny_tokenizer, template, markers, extra):
    tokenizer = with_template(tiny_tokenizer, template, markers=markers)
    ids, labels = trl_completion_only(tokenizer, messages("the cat sat", "on a mat"))
    loaded = LoadedModel(tiny_gpt2, tokenizer, "tiny-gpt2", "test", "cpu", "float32", 0.0)
    result = analyse_sft(loaded, "the cat sat", "on a mat")
    assert result.chat.input_ids == ids and result.chat.completion_labels == labels
    assert result.loss_completion == pytest.approx(own_loss(loaded, ids, labels), abs=1e-5)
    assert result.loss_completion_model == pytest.approx(own_loss(loaded, ids, labels), abs=1e-5)
    assert result.counted_completion == result.counted_answer + extra


def test_completion_labels_by_hand():
    assert completion_labels([5, 6, 7, 8, 9], 3) == [-100, -100, -100, 8, 9]


# --- DPO's summed log-probabilities --------------------------------------------------------------------

def test_trls_dpo_sums_are_reproduced(bundled):
    compared = compare_answers(bundled, USER, ANSWER_TEXT, OTHER)
    for score, answer in ((compared.chosen, ANSWER_TEXT), (compared.rejected, OTHER)):
        logps, count = trl_dpo_logps(bundled, messages(USER, answer)[:1], answer)
        assert score.sum_logp_completion == pytest.approx(logps, abs=1e-4)
        assert score.counted_completion == count == score.counted + 1
        # the newline adds its own log p: TRL's sum is a little lower than lmviz's
        assert score.sum_logp_completion < score.sum_logp


# --- assistant_only_loss and the tokenizer's special tokens --------------------------------------------

def test_smollm2s_template_has_no_generation_block(bundled, tiny_tokenizer):
    assert TRL_GENERATION_MARKERS.search(bundled.tokenizer.chat_template) is None
    assert has_generation_block(bundled.tokenizer) is False and chat_tokens(
        bundled.tokenizer, USER, ANSWER_TEXT).has_generation_block is False
    tagged = copy.deepcopy(bundled.tokenizer)
    tagged.chat_template = SMOLLM2_TAGGED
    assert has_generation_block(tagged) and chat_tokens(tagged, USER, ANSWER_TEXT).has_generation_block
    trimmed = with_template(tiny_tokenizer, "{%- generation -%}{{ messages[0]['content'] }}{%- endgeneration -%}")
    assert has_generation_block(trimmed) == bool(TRL_GENERATION_MARKERS.search(trimmed.chat_template))


def test_the_sentence_on_assistant_only_loss_follows_the_template(bundled):
    plain = generation_block_sentence(chat_tokens(bundled.tokenizer, USER, ANSWER_TEXT), "SmolLM2")
    assert "SmolLM2's chat template has no such block" in plain
    tagged = copy.deepcopy(bundled.tokenizer)
    tagged.chat_template = SMOLLM2_TAGGED
    assert "has a {% generation %} block" in generation_block_sentence(chat_tokens(tagged, USER, ANSWER_TEXT), "X")


def test_special_tokens_are_the_tokenizers_not_the_templates(bundled):
    tokenizer = bundled.tokenizer
    flagged = [tokenizer.convert_ids_to_tokens(i) for i, t in tokenizer.added_tokens_decoder.items() if t.special]
    assert list(special_tokens(tokenizer)) == flagged and len(flagged) == 17
    assert set(tokenizer.all_special_tokens) <= set(flagged)
    chat = chat_tokens(tokenizer, USER, ANSWER_TEXT)
    written = [t for t in flagged if t in tokenizer.chat_template]  # the template's text names two of the 17
    assert sorted(chat.special_written) == sorted(written) == ["<|im_end|>", "<|im_start|>"]
    sentence = template_sentence(chat, "SmolLM2")
    assert "<|im_start|> and <|im_end|>: 2 of the 17 special tokens of its tokenizer" in sentence
    assert "grey" not in sentence and "marker" not in sentence


def test_typed_special_tokens_are_named_for_what_they_are(bundled):
    chat = chat_tokens(bundled.tokenizer, "Hi <repo_name> <|im_start|>", ANSWER_TEXT)
    sentence = typed_sentence(chat, "SmolLM2")
    # <repo_name> is one of the 17 that the template never writes: "markers this template uses" was false of it
    assert "<repo_name> and <|im_start|>, special tokens of SmolLM2's tokenizer" in sentence
    assert "marker" not in sentence and "opens no turn" in sentence
    # an added token that is not special is a control token where the template writes it; typed, it cannot be
    # written as text by these tokenizers (chat_tokens refuses it), so its words are checked on a record made here
    added = dataclasses.replace(chat, markers_typed=["<turn>", "<|im_start|>"])
    assert typed_sentence(added, "X") == (
        "The messages contain <|im_start|>, a special token of X's tokenizer; and <turn>, a token the tokenizer "
        "added for its chat template to write. Typed text is read as plain characters, as transformers does with "
        "sanitize_control_tokens=True: each stays characters and opens no turn.")


# --- the end of the turn, in words built from what was found ------------------------------------------

def test_the_end_of_turn_sentence_fits_each_template(bundled, tiny_tokenizer):
    smollm2 = end_of_turn_sentence(chat_tokens(bundled.tokenizer, USER, ANSWER_TEXT))
    assert smollm2.startswith("The answer ends with <|im_end|>, the first special token the template writes after")
    gemma = end_of_turn_sentence(chat_tokens(with_template(tiny_tokenizer, GEMMA_LIKE), "the cat", "sat"))
    assert gemma.startswith("The answer ends with <end_of_turn>, the first special token")
    word = chat_tokens(with_template(tiny_tokenizer, WORD_AFTER, markers=()), "the cat", "sat")
    assert word.end_of_turn_is_control is False and [word.tokens[p] for p in word.end_of_turn_positions] == ["and"]
    words = end_of_turn_sentence(word)
    assert words.startswith("The template writes no special token") and "marker" not in words
    assert ", and, as the end of the turn" in words  # a plain word, never called a marker
    nothing = chat_tokens(with_template(tiny_tokenizer, NOTHING_AFTER, markers=()), "the cat", "sat")
    assert nothing.end_of_turn_positions == [] and nothing.end_of_turn_is_control is False
    assert end_of_turn_sentence(nothing).startswith("The template writes nothing after the answer")
    for chat in (word, nothing):  # no "marker tokens ()" with an empty list, whatever the template
        assert "()" not in template_sentence(chat, "tiny") + end_of_turn_sentence(chat)


def test_the_difference_sentence_names_the_extra_tokens(bundled, tiny_tokenizer):
    chat = chat_tokens(bundled.tokenizer, USER, ANSWER_TEXT)
    assert difference_sentence(chat) == ("TRL's completion-only labels also count ⏎, which the template writes after "
                                         "<|im_end|>: a model that stops at <|im_end|> never writes it, so lmviz's "
                                         "labels leave it out.")
    nothing = chat_tokens(with_template(tiny_tokenizer, NOTHING_AFTER, markers=()), "the cat", "sat")
    ids, labels = trl_completion_only(with_template(tiny_tokenizer, NOTHING_AFTER, markers=()),
                                      messages("the cat", "sat"))
    assert nothing.completion_labels == labels and nothing.labels == labels  # nothing after the answer: the same
    assert difference_sentence(nothing) == "Here TRL's completion-only labels and lmviz's count the same tokens."
    after_end = chat_tokens(with_template(tiny_tokenizer, GEMMA_WORD_AFTER_END), "the cat", "sat")
    assert difference_sentence(after_end).startswith("TRL's completion-only labels also count and, which the "
                                                     "template writes after <end_of_turn>")


def test_where_trls_split_cannot_be_told_no_completion_loss_is_made_up(tiny_gpt2, tiny_tokenizer):
    """A template whose generation prompt is not the start of the conversation it writes: TRL would only warn
    ("Mismatch between tokenized prompt and the start of tokenized prompt+completion"); lmviz offers no split."""
    mismatched = PLAIN.replace("assistant: {% endif %}", "bird {% endif %}")
    tokenizer = with_template(tiny_tokenizer, mismatched, markers=())
    ids, _ = trl_completion_only(tokenizer, messages("the cat sat", "on a mat"))
    prompt = tokenizer.apply_chat_template(messages("the cat sat", "on a mat")[:1], add_generation_prompt=True)
    assert ids[:len(prompt["input_ids"])] != prompt["input_ids"]
    result = analyse_sft(LoadedModel(tiny_gpt2, tokenizer, "tiny-gpt2", "test", "cpu", "float32", 0.0),
                         "the cat sat", "on a mat")
    assert result.chat.completion_start is None and result.chat.labels_for(COMPLETION) is None
    assert result.loss(COMPLETION) == (None, None, None) and result.sum_logp_completion is None
    assert result.loss(ANSWER)[0] == result.loss_answer  # lmviz's own labels do not depend on the split
