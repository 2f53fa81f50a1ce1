"""lmviz.lessons.batches against Hugging Face GPT-2's own loss on padded batches and
against each sentence scored alone; then the "Batches and padding" page."""

import copy

import pytest
import torch
import torch.nn.functional as F
from transformers import DataCollatorForLanguageModeling

from lmviz.core.labels import IGNORE_INDEX
from lmviz.core.losses import perplexity
from lmviz.core.numbers import PERPLEXITY_DIGITS, fmt
from lmviz.core.text import boundary_token_note, end_token_id, escape_markdown, readable_token
from lmviz.errors import NothingToScore
from lmviz.lessons.batches import (
    DOCUMENT_MASK,
    MAX_BATCH_SENTENCES,
    NAIVE,
    POSITIONS_ONLY,
    batch_losses,
    count_items,
    encode_sentences,
    gradient_accumulation,
    labels_for,
    nll_under_labels,
    pack,
    packed_losses,
    pad_batch,
    reorderings,
    slots,
)
from tests.helpers import open_page, unescaped

PAD = 0  # the tiny GPT-2 has no pad token; 0 is never a real token in SENTENCES
EOS = 2
# start, words, EOS: lengths 8, 4 and 6, so the means over tokens and over sentences differ
SENTENCES = [[1, 5, 6, 7, 8, 9, 10, EOS], [1, 11, 12, EOS], [1, 3, 4, 5, 6, EOS]]


def hf_loss(model, ids, mask, labels, **kwargs) -> torch.Tensor:
    """The reference: GPT2LMHeadModel's own out.loss, positions counted from the first real token."""
    position_ids = torch.clamp(mask.cumsum(-1) - 1, min=0)
    with torch.no_grad():
        return model(input_ids=ids, attention_mask=mask, position_ids=position_ids, labels=labels, **kwargs).loss


def one_at_a_time(model, ids: list[int]) -> float:
    sentence = torch.tensor([ids])
    with torch.no_grad():
        return model(input_ids=sentence, labels=sentence).loss.item()


def test_pad_batch_puts_pads_on_the_side_asked():
    ids, mask = pad_batch([[7, 8, 9], [5]], PAD, "right")
    assert ids.tolist() == [[7, 8, 9], [5, PAD, PAD]] and mask.tolist() == [[1, 1, 1], [1, 0, 0]]
    ids, mask = pad_batch([[7, 8, 9], [5]], PAD, "left")
    assert ids.tolist() == [[7, 8, 9], [PAD, PAD, 5]] and mask.tolist() == [[1, 1, 1], [0, 0, 1]]


@pytest.mark.parametrize("sequences, side", [([[1, 2]], "middle"), ([], "right"), ([[1], []], "right")])
def test_pad_batch_refuses_bad_input(sequences, side):
    with pytest.raises(ValueError):
        pad_batch(sequences, PAD, side)


@pytest.mark.parametrize("side", ["right", "left"])
def test_labels_are_minus_100_exactly_at_the_pads(side):
    ids, mask = pad_batch(SENTENCES, PAD, side)
    labels = labels_for(ids, mask)
    assert torch.equal(labels == -100, mask == 0)
    assert torch.equal(labels[mask == 1], ids[mask == 1])


@pytest.mark.parametrize("side", ["right", "left"])
def test_batch_loss_is_the_models_own_loss_and_the_token_weighted_mean(tiny_gpt2, side):
    ids, mask = pad_batch(SENTENCES, PAD, side)
    labels = labels_for(ids, mask)
    result = batch_losses(tiny_gpt2, ids, mask, labels)
    reference = hf_loss(tiny_gpt2, ids, mask, labels).item()
    assert result.model_loss == pytest.approx(reference, abs=1e-6)
    assert result.token_weighted_mean == pytest.approx(reference, abs=1e-5)
    # the same from torch alone: the shifted labels, summed -log p over the counted ones
    with torch.no_grad():
        logits = tiny_gpt2(input_ids=ids, attention_mask=mask,
                           position_ids=torch.clamp(mask.cumsum(-1) - 1, min=0)).logits
    targets = labels[:, 1:]
    total = F.cross_entropy(logits[:, :-1].transpose(1, 2), targets, ignore_index=-100, reduction="sum")
    assert result.token_weighted_mean == pytest.approx((total / (targets != -100).sum()).item(), abs=1e-5)
    assert sum(result.sentence_counts) == count_items(labels) == int(result.counted.sum())


@pytest.mark.parametrize("side", ["right", "left"])
def test_each_nll_stands_under_the_label_it_scores(tiny_gpt2, side):
    ids, mask = pad_batch(SENTENCES, PAD, side)
    labels = labels_for(ids, mask)
    shown = nll_under_labels(batch_losses(tiny_gpt2, ids, mask, labels))
    with torch.no_grad():  # the reference: the logits at t - 1, -log softmax read at the label of t
        logits = tiny_gpt2(input_ids=ids, attention_mask=mask,
                           position_ids=torch.clamp(mask.cumsum(-1) - 1, min=0)).logits
    logp = torch.log_softmax(logits.double(), dim=-1)
    for b, row in enumerate(shown):
        for t, value in enumerate(row):
            label = int(labels[b, t])
            if t == 0 or label == IGNORE_INDEX:
                assert value is None, (b, t)
            else:
                assert value == pytest.approx(-logp[b, t - 1, label].item(), abs=1e-4), (b, t)
    # left padding: the first real token of each padded sentence is scored, predicted at the last pad
    firsts = [row[int(real.nonzero()[0])] for row, real in zip(shown, mask)]
    assert [v is not None for v in firsts] == [side == "left" and len(s) < ids.shape[1] for s in SENTENCES]


def test_right_padding_gives_each_sentence_its_one_at_a_time_loss(tiny_gpt2):
    ids, mask = pad_batch(SENTENCES, PAD, "right")
    result = batch_losses(tiny_gpt2, ids, mask, labels_for(ids, mask))
    alone = [one_at_a_time(tiny_gpt2, s) for s in SENTENCES]
    assert result.sentence_losses == pytest.approx(alone, abs=1e-5)
    assert result.sentence_counts == [len(s) - 1 for s in SENTENCES]
    assert not result.from_padding.any()


def test_left_padding_counts_one_prediction_made_at_a_pad(tiny_gpt2):
    ids, mask = pad_batch(SENTENCES, PAD, "left")
    result = batch_losses(tiny_gpt2, ids, mask, labels_for(ids, mask))
    width = ids.shape[1]
    # Hugging Face counts the last pad's prediction of the first real token, once per padded sentence
    assert result.sentence_counts == [len(s) - 1 + (len(s) < width) for s in SENTENCES]
    assert [torch.nonzero(row).flatten().tolist() for row in result.from_padding] == [
        [width - len(s) - 1] if len(s) < width else [] for s in SENTENCES]
    # without it, each sentence's real predictions give exactly its one-at-a-time loss
    real = result.counted & ~result.from_padding
    real_means = ((result.nll * real).sum(-1) / real.sum(-1)).tolist()
    assert real_means == pytest.approx([one_at_a_time(tiny_gpt2, s) for s in SENTENCES], abs=1e-5)


def test_mean_of_means_is_not_the_batch_loss_when_lengths_differ(tiny_gpt2):
    ids, mask = pad_batch(SENTENCES, PAD, "right")
    result = batch_losses(tiny_gpt2, ids, mask, labels_for(ids, mask))
    alone = [one_at_a_time(tiny_gpt2, s) for s in SENTENCES]
    assert result.mean_of_means == pytest.approx(sum(alone) / len(alone), abs=1e-5)
    weighted = sum(loss * (len(s) - 1) for loss, s in zip(alone, SENTENCES)) / sum(len(s) - 1 for s in SENTENCES)
    assert result.model_loss == pytest.approx(weighted, abs=1e-5)
    assert abs(result.mean_of_means - result.model_loss) > 1e-4


@pytest.mark.parametrize("side", ["right", "left"])
@pytest.mark.parametrize("micro_batch_size", [1, 2, 3])
def test_accumulation_with_num_items_in_batch_equals_the_full_batch(tiny_gpt2, side, micro_batch_size):
    ids, mask = pad_batch(SENTENCES, PAD, side)
    labels = labels_for(ids, mask)
    result = gradient_accumulation(tiny_gpt2, ids, mask, labels, micro_batch_size)
    assert result.summed == pytest.approx(hf_loss(tiny_gpt2, ids, mask, labels).item(), abs=1e-5)
    assert sum(result.micro_counts) == count_items(labels)
    for part, mean, share in zip(result.micro_batches, result.micro_means, result.micro_shares):
        assert mean == pytest.approx(hf_loss(tiny_gpt2, ids[part], mask[part], labels[part]).item(), abs=1e-6)
        summed = hf_loss(tiny_gpt2, ids[part], mask[part], labels[part], num_items_in_batch=count_items(labels))
        assert share == pytest.approx(summed.item(), abs=1e-6)


def test_averaging_micro_batch_means_reweights_the_sentences(tiny_gpt2):
    ids, mask = pad_batch(SENTENCES, PAD, "right")
    labels = labels_for(ids, mask)
    per_sentence = gradient_accumulation(tiny_gpt2, ids, mask, labels, 1)
    alone = [one_at_a_time(tiny_gpt2, s) for s in SENTENCES]
    assert per_sentence.averaged == pytest.approx(sum(alone) / len(alone), abs=1e-5)
    assert abs(per_sentence.averaged - per_sentence.summed) > 1e-4
    whole = gradient_accumulation(tiny_gpt2, ids, mask, labels, len(SENTENCES))
    assert whole.averaged == pytest.approx(whole.summed, abs=1e-6)


def test_pad_equal_to_eos_stops_the_real_eos_from_counting(tiny_gpt2):
    ids, mask = pad_batch(SENTENCES, EOS, "right")
    right = labels_for(ids, mask)
    wrong = labels_for(ids, mask, mask_by="pad_id", pad_id=EOS)
    last_real = torch.tensor([len(s) - 1 for s in SENTENCES])
    rows = torch.arange(len(SENTENCES))
    assert (right[rows, last_real] == EOS).all()  # built from the attention mask, the real EOS is a label
    assert (wrong[rows, last_real] == -100).all()  # built from the pad id, it is not
    assert count_items(right) - count_items(wrong) == len(SENTENCES)
    result = batch_losses(tiny_gpt2, ids, mask, wrong)
    assert result.model_loss == pytest.approx(hf_loss(tiny_gpt2, ids, mask, wrong).item(), abs=1e-6)
    assert result.sentence_counts == [len(s) - 2 for s in SENTENCES]


def test_labels_for_refuses_unclear_requests():
    ids, mask = pad_batch(SENTENCES, PAD, "right")
    with pytest.raises(ValueError, match="pad_id"):
        labels_for(ids, mask, mask_by="pad_id")
    with pytest.raises(ValueError, match="mask_by"):
        labels_for(ids, mask, mask_by="tokens")


def test_encode_sentences_frames_each_line_and_needs_two(tiny_tokenizer):
    sequences = encode_sentences(tiny_tokenizer, ["the cat sat", "", "  a dog ran to the park  "])
    start = end = tiny_tokenizer.eos_token_id
    assert [s[0] for s in sequences] == [start, start] and [s[-1] for s in sequences] == [end, end]
    assert sequences[0][1:-1] == tiny_tokenizer("the cat sat", add_special_tokens=False)["input_ids"]
    for lines, message in [(["", "  "], "no sentence"), (["the cat"], "only one sentence"),
                           (["a"] * (MAX_BATCH_SENTENCES + 1), "at most"),
                           (["the cat", "the cat " * 40], "Sentence 2 has 81 tokens; this page takes at most 64")]:
        with pytest.raises(NothingToScore, match=message):
            encode_sentences(tiny_tokenizer, lines)


# ---- the page, headless ----

def metrics_of(at) -> dict:
    return {m.label: m.value for m in at.metric}


def test_batches_page_shows_the_librarys_numbers(bundled):
    at = open_page("app_pages/batches.py")
    assert not at.exception and not at.error, (at.exception, [e.value for e in at.error])
    sequences = encode_sentences(bundled.tokenizer, at.text_area(key="batch_text").value.splitlines())
    pad, end = bundled.tokenizer.pad_token_id, end_token_id(bundled.tokenizer)
    ids, mask = pad_batch(sequences, pad, "right")
    expected = batch_losses(bundled.model, ids, mask, labels_for(ids, mask))
    shown = metrics_of(at)
    assert shown["The model's loss (out.loss)"] == fmt(expected.model_loss)
    assert shown["Token-weighted mean"] == fmt(expected.token_weighted_mean)
    assert shown["Mean of the sentences' means"] == fmt(expected.mean_of_means)
    assert shown["Mean of the sentences' means"] != shown["The model's loss (out.loss)"]
    assert shown["Batch loss (right padding)"] == fmt(expected.model_loss)  # the pinned headline
    sentences = at.dataframe[0].value
    assert sentences["mean loss"].tolist() == [fmt(v) for v in expected.sentence_losses]
    assert sentences["perplexity"].tolist() == [fmt(perplexity(v), PERPLEXITY_DIGITS) for v in expected.sentence_losses]
    assert sentences["length (tokens)"].tolist() == [len(s) for s in sequences]
    accumulation = gradient_accumulation(bundled.model, ids, mask, labels_for(ids, mask), 1)
    assert shown["(a) Mean of the micro-batch means"] == fmt(accumulation.averaged)
    assert shown["(b) Sum ÷ all counted tokens"] == fmt(accumulation.summed)
    assert float(shown["(b) Sum ÷ all counted tokens"]) == pytest.approx(float(shown["The full batch's loss"]),
                                                                       abs=1.1e-5)
    end_ids, end_mask = pad_batch(sequences, end, "right")
    bug = batch_losses(bundled.model, end_ids, end_mask, labels_for(end_ids, end_mask, mask_by="pad_id", pad_id=end))
    assert shown["Loss, labels that mask every pad id"] == fmt(bug.model_loss)
    # the collator the page names, run for real on the same sentences with the end token as its pad
    collator_tokenizer = copy.deepcopy(bundled.tokenizer)
    collator_tokenizer.pad_token = collator_tokenizer.convert_ids_to_tokens(end)
    collated = DataCollatorForLanguageModeling(collator_tokenizer, mlm=False)([{"input_ids": s} for s in sequences])
    assert torch.equal(collated["labels"], labels_for(end_ids, end_mask, mask_by="pad_id", pad_id=end))
    real_ends_lost = sum(int(collated["labels"][row, len(s) - 1] == IGNORE_INDEX) for row, s in enumerate(sequences))
    assert shown["End-of-text predictions lost"] == str(real_ends_lost) == str(len(sequences))
    assert "DataCollatorForLanguageModeling(mlm=False)" in " ".join(m.value for m in at.markdown)

    at.number_input(key="micro_batch_size").set_value(len(sequences)).run()  # one micro-batch: (a) = (b)
    assert not at.exception
    shown = metrics_of(at)
    full = float(shown["The full batch's loss"])
    assert float(shown["(a) Mean of the micro-batch means"]) == pytest.approx(full, abs=1.1e-5)
    assert float(shown["(b) Sum ÷ all counted tokens"]) == pytest.approx(full, abs=1.1e-5)


def test_batches_page_names_the_tokens_it_really_adds(bundled):
    """Each sentence is framed by the document separator of pre-training, not by the
    chat-turn markers that SmolLM2-Instruct's tokenizer calls bos and eos; the page says so."""
    tokenizer = bundled.tokenizer
    sequences = encode_sentences(tokenizer, ["The cat sat on the mat.", "Mat the on cat sat the."])
    separator = tokenizer.convert_tokens_to_ids("<|endoftext|>")
    assert {s[0] for s in sequences} == {s[-1] for s in sequences} == {separator}
    assert tokenizer.eos_token_id != separator  # <|im_end|>: what a page must not call the end of a document
    at = open_page("app_pages/batches.py")
    caption = next(c.value for c in at.caption if escape_markdown("pre-training document") in c.value)
    assert escape_markdown(boundary_token_note(tokenizer, separator)) in caption
    assert escape_markdown(f"ends with {readable_token(tokenizer, separator)}.") in caption
    assert escape_markdown("eos_token is " + readable_token(tokenizer, tokenizer.eos_token_id)) in caption


def test_the_reordering_caption_appears_only_for_reordered_words(bundled):
    at = open_page("app_pages/batches.py")
    reorder = [c.value for c in at.caption if "in another order" in c.value]
    losses = at.dataframe[0].value["mean loss"].tolist()
    assert reorder == [f"Sentence 2 has the words of sentence 1 in another order: its mean loss per token is higher, "
                       f"{losses[1]} against {losses[0]}."]
    at.text_area(key="batch_text").input("The cat sat on the mat.\nA dog ran to the park.").run()
    assert not at.exception and not [c.value for c in at.caption if "in another order" in c.value]
    assert reorderings(["a b c.", "C, b a!", "a b c d", "A b C"]) == [(0, 1), (1, 3)]


@pytest.mark.parametrize("text, message", [("\n   \n", "no sentence"), ("Only this one.", "only one sentence")])
def test_batches_page_explains_too_few_sentences(text, message):
    at = open_page("app_pages/batches.py")
    at.text_area(key="batch_text").input(text).run()
    assert not at.exception
    said = [unescaped(w.value) for w in at.warning]
    assert said == [f"A batch needs at least two sentences, one per line; there is {message}."]
    assert not at.metric and not at.dataframe


def test_batches_page_takes_markup_as_plain_text():
    at = open_page("app_pages/batches.py")
    at.text_area(key="batch_text").input("**bold** $x^2$ <b>hi</b>\n:red[b] [x](y) _under_").run()
    assert not at.exception and not at.error
    assert at.dataframe[0].value["sentence"].tolist() == ["1: **bold** $x^2$ <b>hi</b>", "2: :red[b] [x](y) _under_"]


def test_batches_grids_show_the_padded_batch_one_position_a_row(bundled):
    """Section 2: each grid of each padding, one row per position and one column per sentence, read back against
    the batch built here by hand: pads on the side asked, -100 on the pads, and the -log p under the labels."""
    tokenizer = bundled.tokenizer
    at = open_page("app_pages/batches.py")
    sequences = encode_sentences(tokenizer, at.text_area(key="batch_text").value.splitlines())
    width, pad = max(map(len, sequences)), tokenizer.pad_token_id
    padded = {"right": [s + [pad] * (width - len(s)) for s in sequences],
              "left": [[pad] * (width - len(s)) + s for s in sequences]}
    real = {"right": [[t < len(s) for t in range(width)] for s in sequences],
            "left": [[t >= width - len(s) for t in range(width)] for s in sequences]}
    expected = {
        "tokens": lambda side: [[readable_token(tokenizer, i) for i in row] for row in padded[side]],
        "input_ids": lambda side: padded[side],
        "attention_mask": lambda side: [[int(r) for r in row] for row in real[side]],
        "labels": lambda side: [[i if r else IGNORE_INDEX for i, r in zip(ids, rs)]
                                for ids, rs in zip(padded[side], real[side])],
    }
    for view in ["tokens", "input_ids", "attention_mask", "labels", "-log p"]:
        at.radio(key="batch_grid").set_value(view).run()
        assert not at.exception
        grids = {side: at.dataframe[n + 1].value for n, side in enumerate(["right", "left"])}
        for side, grid in grids.items():
            assert grid.index.tolist() == list(range(width)) and grid.index.name == "position"
            assert grid.columns.tolist() == [f"sentence {n + 1}" for n in range(len(sequences))]
            if view in expected:
                assert grid.T.values.tolist() == expected[view](side), (view, side)
        if view == "-log p":  # right padding: each sentence's shown -log p average to its mean loss in section 1
            means = at.dataframe[0].value["mean loss"].tolist()
            for column, mean, ids in zip(grids["right"].columns, means, sequences):
                values = [float(v) for v in grids["right"][column] if v != ""]
                assert len(values) == len(ids) - 1
                assert sum(values) / len(values) == pytest.approx(float(mean), abs=1e-4)
            # left padding scores one more label per short sentence: its first real token, predicted at a pad
            assert [sum(v != "" for v in grids["left"][c]) for c in grids["left"].columns] == [
                len(s) - 1 + (len(s) < width) for s in sequences]


def test_batches_tables_are_key_tables_in_presentation_mode():
    """In presentation mode every table of the page is an st.table, at the body text's size, none an st.dataframe
    drawn at 0.875 rem."""
    at = open_page("app_pages/batches.py")
    at.session_state["present"] = True
    at.run()
    assert not at.exception
    assert len(at.dataframe) == 0 and len(at.table) == 7  # section 6 packs the sentences in a seventh


# Packing

PACKED_TEXTS = ["I love dogs.", "The cat sat on the mat.", "Paris is in France."]


def separate_nll(model, sequences) -> list[float | None]:
    """Each sentence scored in a forward of its own, the reference a packed row must reproduce: -log p under each
    label, None under each sentence's first token."""
    under = []
    for sequence in sequences:
        ids = torch.tensor([sequence])
        with torch.no_grad():
            logits = model(ids, use_cache=False).logits[0]
        nll = F.cross_entropy(logits[:-1], ids[0, 1:], reduction="none").tolist()
        under += [None, *nll]
    return under


def close(a: list, b: list, tolerance: float) -> bool:
    return all((x is None) == (y is None) and (x is None or abs(x - y) <= tolerance) for x, y in zip(a, b, strict=True))


def test_packed_labels_and_positions_are_transformers_flattening_collators(bundled):
    from transformers import DataCollatorWithFlattening

    sequences = encode_sentences(bundled.tokenizer, PACKED_TEXTS)
    theirs = DataCollatorWithFlattening(return_tensors="pt")([{"input_ids": s} for s in sequences])
    for way in (POSITIONS_ONLY, DOCUMENT_MASK):
        ids, positions, labels, documents = pack(sequences, way)
        assert ids == theirs["input_ids"][0].tolist()
        assert labels == theirs["labels"][0].tolist()
        assert positions == theirs["position_ids"][0].tolist()
        assert documents == [d for d, s in enumerate(sequences) for _ in s]
    ids, positions, labels, _ = pack(sequences, NAIVE)
    assert labels == ids and positions == list(range(len(ids)))


def test_the_document_mask_gives_each_sentence_its_separate_loss_and_the_padded_batchs(bundled):
    """The packed row with a document mask scores every token as the sentence's own forward does, to float32's
    rounding of another kernel (the largest gap measured: 5.2e-5 on a -log p of 13.3, 4e-6 relative), so its loss is
    the padded batch's token-weighted loss. If the forward passed an attention mask or used a cache, transformers
    would build no document mask and this test would fail: the next one shows those gaps are above 1e-2."""
    model = bundled.model
    sequences = encode_sentences(bundled.tokenizer, PACKED_TEXTS)
    packed = packed_losses(model, sequences, DOCUMENT_MASK)
    assert close(packed.nll, separate_nll(model, sequences), 1e-4)
    ids, mask = pad_batch(sequences, bundled.tokenizer.pad_token_id or 0, "right")
    padded = batch_losses(model, ids, mask, labels_for(ids, mask))
    assert packed.loss == pytest.approx(padded.token_weighted_mean, abs=5e-5)
    assert packed.counted == int(padded.counted.sum()) == sum(len(s) - 1 for s in sequences)


@pytest.mark.parametrize("silent_switch", [{"attention_mask": "ones"}, {"use_cache": True}])
def test_a_mask_of_ones_or_a_cache_silently_drops_the_document_mask(bundled, silent_switch):
    """transformers 5.24's caveat, as the page says it: the same inputs with an attention mask of ones, or with a
    cache, let the sentences attend to each other, and the scores move far beyond float32's rounding."""
    model = bundled.model
    sequences = encode_sentences(bundled.tokenizer, PACKED_TEXTS)
    ids, positions, labels, _ = pack(sequences, DOCUMENT_MASK)
    row = {"input_ids": torch.tensor([ids]), "position_ids": torch.tensor([positions]), "use_cache": False}
    if "attention_mask" in silent_switch:
        row["attention_mask"] = torch.ones_like(row["input_ids"])
    row.update({k: v for k, v in silent_switch.items() if k != "attention_mask"})
    with torch.no_grad():
        logits = model(**row).logits[0]
    nll = F.cross_entropy(logits[:-1], torch.tensor(ids[1:]), reduction="none")
    reference = separate_nll(model, sequences)
    second = len(sequences[0])  # the second sentence's tokens: the first one has nothing before it to see
    gaps = [abs(nll[t - 1].item() - reference[t]) for t in range(second + 1, len(ids)) if reference[t] is not None]
    assert max(gaps) > 1e-2


def test_naive_packing_scores_each_next_sentences_first_token_and_a_different_loss(bundled):
    model = bundled.model
    sequences = encode_sentences(bundled.tokenizer, PACKED_TEXTS)
    naive, positions_only = (packed_losses(model, sequences, way) for way in (NAIVE, POSITIONS_ONLY))
    reference = separate_nll(model, sequences)
    assert naive.counted == len(naive.input_ids) - 1  # every next token, the boundaries' too
    starts = [sum(map(len, sequences[:d])) for d in range(1, len(sequences))]
    assert all(naive.nll[t] is not None and reference[t] is None for t in starts)
    assert not close(naive.nll, reference, 1e-2) and abs(naive.loss - positions_only.loss) > 1e-3
    assert positions_only.counted == sum(len(s) - 1 for s in sequences)
    assert not close(positions_only.nll, reference, 1e-2)  # its labels are right, its attention is not
    # naive: the model's own loss is the mean of the L − 1 next-token scores
    assert naive.loss == pytest.approx(sum(x for x in naive.nll if x is not None) / naive.counted, abs=1e-5)


def test_packing_wastes_no_slot_and_padding_wastes_the_difference():
    sequences = [[1, 2, 3], [4, 5, 6, 7, 8], [9, 10]]
    counted = slots(sequences)
    assert (counted.tokens, counted.padded, counted.padding, counted.packed) == (10, 15, 5, 10)
    with pytest.raises(ValueError, match="way must be one of"):
        pack(sequences, "zigzag")


def test_the_batches_page_packs_its_sentences_as_the_references_do(bundled):
    """Section 6's metrics: the document mask's loss is the sentences' separate forwards' token-weighted mean, the
    naive one a plain forward of the concatenated ids with the model's own loss; and the page names the
    transformers version whose rule it relies on."""
    import transformers

    at = open_page("app_pages/batches.py")
    assert not at.exception, at.exception
    shown = {m.label: m.value for m in at.metric}
    sentences = [line for line in at.text_area(key="batch_text").value.splitlines() if line.strip()]
    sequences = encode_sentences(bundled.tokenizer, sentences)
    separate = [v for v in separate_nll(bundled.model, sequences) if v is not None]
    assert shown["Packed, document mask"] == fmt(sum(separate) / len(separate))
    assert shown["Padded batch"] == fmt(sum(separate) / len(separate))
    ids = torch.tensor([[i for s in sequences for i in s]])
    with torch.no_grad():
        naive = bundled.model(ids, labels=ids, use_cache=False).loss.item()
    assert shown["Packed naively"] == fmt(naive)
    assert shown["Packed, positions only"] not in (shown["Packed, document mask"], shown["Packed naively"])
    said = " ".join(c.value for c in at.caption)
    assert f"transformers {transformers.__version__} builds the document mask itself" in said
    tokens, width = sum(map(len, sequences)), max(map(len, sequences))
    assert any(f"{len(sequences)} rows × {width} positions = {len(sequences) * width} slots for {tokens} tokens"
               in m.value for m in at.markdown)
