"""lmviz.lessons.bits_per_byte against independent references: the identity bpb = (nats/token) / (ln 2 × bytes/token)
by hand, the toy example's numbers, the bytes of a text, the model's own loss, nanochat's evaluate_bpb and
lm-evaluation-harness's rolling windows and the perplexity guide's strided loop, each written here from its
documented procedure."""

import dataclasses
import json
import math
import re
from pathlib import Path

import pytest
import torch
from tokenizers import ByteLevelBPETokenizer
from transformers import PreTrainedTokenizerFast
from transformers.convert_slow_tokenizer import bytes_to_unicode

from lmviz.__main__ import main
from lmviz.core.text import token_bytes
from lmviz.errors import NothingToScore
from lmviz.lessons.bits_per_byte import (
    BadWindow,
    added_by_default,
    bits_per_byte,
    decoded_bytes,
    guide_average,
    harness_max_length,
    harness_prefix_id,
    harness_windows,
    harness_words,
    rankings,
    reads_bytes,
    strided_windows,
    toy_per_byte,
    windowed,
)
from lmviz.lessons.causal_lm import MAX_TOKENS

# Scripts whose characters UTF-8 writes in 1 to 4 bytes, emoji with joiners and skin tones, and combining marks
SCRIPTS = [
    "The capital of France is Paris.",
    "Ça coûte 5 € — naïve café, façade.",
    "Москва — столица России.",
    "東京は日本の首都です。北京是中国的首都。",
    "서울은 한국의 수도입니다.",
    "القاهرة هي عاصمة مصر.",
    "नई दिल्ली भारत की राजधानी है।",
    "🍕🍕 👩‍👩‍👧‍👦 👍🏽 🇫🇷 — emoji with joiners, tones and flags",
    "e\u0301 and é, Å and Å; tabs\tand\nline breaks\r\n",
    "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𝟙𝟚𝟛 and 𓀀 outside the basic plane",
]
TEXT = "Bits per byte: 東京 is Tokyo, and 🍕 is pizza.\n"
PARAGRAPH = ("The library opens at nine in the morning and closes at six in the evening. Visitors can borrow up to "
             "five books at a time, and most books may be kept for three weeks.")


@pytest.fixture(scope="module")
def lmviz_tiny():
    """lmviz's tiny GPT, the page's second model: WordPiece, whose defaults put [CLS] and [SEP] around a text."""
    from lmviz.models.loading import TINY_GPT, load_causal_lm

    return load_causal_lm(TINY_GPT)


@pytest.fixture(scope="module")
def trained_byte_level():
    """A second byte-level BPE tokenizer, trained here on a few lines (its merges differ from SmolLM2's)."""
    backend = ByteLevelBPETokenizer()
    backend.train_from_iterator(SCRIPTS[:3] * 20, vocab_size=300, min_frequency=2, special_tokens=["<|endoftext|>"])
    return PreTrainedTokenizerFast(tokenizer_object=backend._tokenizer, bos_token="<|endoftext|>",
                                   eos_token="<|endoftext|>")


def test_the_toy_example_by_hand():
    toy = toy_per_byte()
    nats = -sum(math.log(p) for p in (0.50, 0.30, 0.33, 0.45, 0.60))  # the article's table, at each true word
    assert toy.tokens == 5 and toy.bytes == len(b"I love dogs not cats") == 20
    assert toy.nats == pytest.approx(4.315116, abs=5e-7) == pytest.approx(nats)
    assert toy.bits_per_byte == pytest.approx(0.311270, abs=5e-7)
    assert toy.byte_perplexity == pytest.approx(1.240799, abs=5e-7)
    # the identity, written out: (nats per token) / (ln 2 × bytes per token)
    assert toy.bits_per_byte == pytest.approx((nats / 5) / (math.log(2) * (20 / 5)))
    assert toy.word_perplexity == pytest.approx(math.exp(nats / 5))  # five words: the toy's perplexity


@pytest.mark.parametrize("text", SCRIPTS)
def test_a_byte_level_tokenizers_token_bytes_are_the_texts_bytes(bundled, trained_byte_level, text):
    for tokenizer in (bundled.tokenizer, trained_byte_level):
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        pieces = [token_bytes(tokenizer, i) for i in ids]
        assert b"".join(pieces) == text.encode("utf-8")
        assert sum(len(p) for p in pieces) == len(text.encode("utf-8"))
        assert reads_bytes(tokenizer) and reads_bytes(tokenizer, text)


def test_a_special_token_has_no_bytes_and_wordpiece_is_not_byte_level(bundled, tiny_loaded):
    assert token_bytes(bundled.tokenizer, bundled.tokenizer.eos_token_id) == b""
    assert not reads_bytes(tiny_loaded.tokenizer)  # a word-level vocabulary drops the spaces between words


def test_decoding_a_byte_piece_counts_the_replacement_characters_bytes(bundled):
    tokenizer = bundled.tokenizer
    ids = tokenizer(" 🍕", add_special_tokens=False)["input_ids"]
    assert len(ids) > 1  # cut between tokens: each piece decodes to U+FFFD
    for i in ids:
        assert tokenizer.decode([i]).endswith("\ufffd")
        assert decoded_bytes(tokenizer, i) == len(tokenizer.decode([i]).encode("utf-8"))
    assert sum(decoded_bytes(tokenizer, i) for i in ids) > len(" 🍕".encode("utf-8"))


def replacements_by_the_pages_rule(raw: bytes) -> int:
    """How many U+FFFD section 3 says decoding a token alone writes: one for each byte of a character begun in an
    earlier token (a continuation byte, 10xxxxxx, at the token's start), and one for the start of a character the
    token cuts short (a lead byte followed by fewer bytes than it announces)."""
    rest = raw.lstrip(bytes(range(0x80, 0xC0)))
    begun_before = len(raw) - len(rest)
    leads = [i for i, b in enumerate(rest) if b >= 0xC0]
    announced = {0xC: 2, 0xD: 2, 0xE: 3, 0xF: 4}
    cut_short = bool(leads) and len(rest) - leads[-1] < announced[rest[leads[-1]] >> 4]
    return begun_before + cut_short


@pytest.mark.parametrize("text", [TEXT, *SCRIPTS])
def test_a_token_decoded_alone_gets_one_replacement_per_broken_piece_as_python_writes_it(bundled, text):
    result = bits_per_byte(bundled, text)
    assert len("\ufffd".encode("utf-8")) == 3
    for row in result.rows:
        raw = bytes.fromhex(row.raw)
        python = raw.decode("utf-8", errors="replace")
        assert row.decoded == python  # the tokenizer's decode is Python's, on the page's rows
        assert python.count("\ufffd") == replacements_by_the_pages_rule(raw), row
        assert row.decoded_byte_count == len(python.encode("utf-8"))
    if text == TEXT:  # an emoji and two CJK characters: some tokens hold broken pieces
        assert any(r.decoded.count("\ufffd") for r in result.rows)


def test_the_docs_example_of_a_broken_character_decodes_as_they_say():
    """The docs' section and their Confusions both give <20 F0 9F>: a space, then the start of a 4-byte character
    cut short, one U+FFFD; no sentence says every broken piece gets its own."""
    docs = Path("docs/lessons/bits_per_byte.md").read_text()
    decoded = bytes.fromhex("20F09F").decode("utf-8", errors="replace")
    assert decoded == " \ufffd" and len(decoded.encode("utf-8")) == 4
    assert docs.count('`<20 F0 9F>` decodes to " �", 4 bytes') == 2
    assert "each broken piece of a character in it becomes U+FFFD" not in docs


def test_smollm2s_vocabulary_decodes_as_python_does_and_ten_of_its_tokens_to_two_replacements(bundled):
    tokenizer = bundled.tokenizer
    special = set(tokenizer.all_special_ids)
    two = 0
    for i in range(len(tokenizer)):
        if i not in special:
            python = token_bytes(tokenizer, i).decode("utf-8", errors="replace")
            assert tokenizer.decode([i]) == python
            two += python.count("\ufffd") == 2
    assert f"{two} of SmolLM2's tokens decode to two U+FFFD" in docs_page()
    first = token_bytes(tokenizer, tokenizer(" 📚", add_special_tokens=False)["input_ids"][0])
    alone = first.decode("utf-8", errors="replace")
    assert f'`<{first.hex(" ").upper()}>` decodes to "{alone}", {len(alone.encode("utf-8"))} bytes' in docs_page()


def nanochat_token_bytes_before_2ce972a(tokenizer, ids) -> torch.Tensor:
    """nanochat's token_bytes table as scripts/tok_train.py built it before commit 2ce972a (the lines that commit
    removed), for ``ids``: a token whose decoded text is a special token's counts 0, any other
    len(tokenizer.decode([token_id]).encode("utf-8"))."""
    special_set = set(tokenizer.all_special_tokens)
    table = torch.zeros(len(tokenizer), dtype=torch.int64)
    for token_id in set(ids):
        token_str = tokenizer.decode([token_id])
        table[token_id] = 0 if token_str in special_set else len(token_str.encode("utf-8"))
    return table


@pytest.mark.parametrize("end_token", [False, True])
def test_the_decoded_count_is_nanochats_own_before_2ce972a(bundled, end_token):
    result = bits_per_byte(bundled, TEXT, end_token=end_token)
    targets = torch.tensor([r.token_id for r in result.rows])
    nll = torch.tensor([r.nll for r in result.rows], dtype=torch.float64)
    table = nanochat_token_bytes_before_2ce972a(bundled.tokenizer, targets.tolist())
    assert result.decoded.bits_per_byte == pytest.approx(evaluate_bpb(nll, targets, table), rel=1e-12)
    assert result.decoded.bytes == table[targets].sum().item()


def test_harness_counts_words_with_its_trailing_newline_quirk():
    assert harness_words("a b") == 2
    assert harness_words("a b\n") == 3 == len(re.split(r"\s+", "a b\n"))  # an empty last piece
    assert harness_words("  a") == 2


def test_bits_per_byte_against_the_models_own_loss_and_the_text(bundled):
    result = bits_per_byte(bundled, TEXT)
    tokenizer = bundled.tokenizer
    ids = [harness_prefix_id(tokenizer), *tokenizer(TEXT, add_special_tokens=False)["input_ids"]]
    assert result.prefix_id == ids[0] == tokenizer.bos_token_id  # the tokenizer's BOS, as lm-evaluation-harness
    with torch.no_grad():
        loss = bundled.model(input_ids=torch.tensor([ids]), labels=torch.tensor([ids])).loss.item()
    harness = result.harness
    assert harness.tokens == len(ids) - 1 == len(result.rows)
    assert harness.nats == pytest.approx(loss * harness.tokens, rel=1e-5)
    assert harness.bytes == result.text_bytes == len(TEXT.encode("utf-8"))
    assert harness.words == len(re.split(r"\s+", TEXT))
    assert harness.bits_per_byte == pytest.approx(harness.nats / harness.bytes / math.log(2))
    assert harness.bits_per_byte == pytest.approx(harness.nats_per_token / (math.log(2) * harness.bytes_per_token))
    assert harness.byte_perplexity == pytest.approx(math.exp(harness.nats / harness.bytes))
    assert harness.word_perplexity == pytest.approx(math.exp(harness.nats / harness.words))
    assert [r.context for r in result.rows] == list(range(1, len(ids)))  # one pass: every token sees all before it
    assert result.reads_bytes and result.keeps_text


def evaluate_bpb(nll: torch.Tensor, targets: torch.Tensor, token_bytes_table: torch.Tensor) -> float:
    """nanochat's evaluate_bpb (nanochat/loss_eval.py), for one row: a target's bytes from the table, a target of
    0 bytes left out of the nats."""
    num_bytes = token_bytes_table[targets]
    total_nats, total_bytes = (nll * (num_bytes > 0)).sum().item(), num_bytes.sum().item()
    return total_nats / (math.log(2) * total_bytes)


def test_nanochat_leaves_the_end_token_out_of_both_sums(bundled):
    result = bits_per_byte(bundled, TEXT, end_token=True)
    tokenizer = bundled.tokenizer
    assert result.rows[-1].special and result.rows[-1].byte_count == 0 and result.end is not None
    byte_of = {ch: b for b, ch in bytes_to_unicode().items()}  # GPT-2's byte-level alphabet, inverted
    table = torch.zeros(len(tokenizer), dtype=torch.int64)  # nanochat's token_bytes: 0 for a special token
    for i in range(len(tokenizer)):
        if i not in tokenizer.all_special_ids:
            table[i] = len(bytes(byte_of[ch] for ch in tokenizer.convert_ids_to_tokens(i)))
    nll = torch.tensor([r.nll for r in result.rows], dtype=torch.float64)
    targets = torch.tensor([r.token_id for r in result.rows])
    assert result.nanochat.bits_per_byte == pytest.approx(evaluate_bpb(nll, targets, table), rel=1e-12)
    assert result.nanochat.tokens == len(result.rows) - 1
    assert result.nanochat.nats == pytest.approx(sum(r.nll for r in result.rows[:-1]))
    # lm-evaluation-harness scores the text alone: the same as without the end token
    plain = bits_per_byte(bundled, TEXT)
    assert result.harness.nats == pytest.approx(plain.harness.nats, rel=1e-6)
    assert result.harness.bytes == plain.harness.bytes


def test_the_decoding_bug_flatters_the_model_on_emoji_and_cjk(bundled):
    result = bits_per_byte(bundled, TEXT)
    tokenizer = bundled.tokenizer
    wrong_bytes = sum(len(tokenizer.decode([r.token_id]).encode("utf-8")) for r in result.rows)
    assert result.decoded.bytes == wrong_bytes > result.nanochat.bytes == len(TEXT.encode("utf-8"))
    assert result.decoded.bits_per_byte < result.nanochat.bits_per_byte
    assert result.decoded.bits_per_byte == pytest.approx(result.nanochat.nats / (math.log(2) * wrong_bytes))
    plain = bits_per_byte(bundled, "The capital of France is Paris.")  # no byte piece: both counts agree
    assert plain.decoded.bytes == plain.nanochat.bytes


def test_a_tokenizer_that_is_not_byte_level_has_only_the_documents_bytes(tiny_loaded):
    result = bits_per_byte(tiny_loaded, "the cat sat on a mat")
    assert not result.reads_bytes and result.nanochat is None and result.decoded is None
    assert result.harness.bytes == len(b"the cat sat on a mat")
    assert all(r.raw is None and r.byte_count is None for r in result.rows)


def get_rolling_token_windows(token_list, prefix_token, max_seq_len, context_len):
    """lm-evaluation-harness's rolling windows (lm_eval/utils.py), as its documentation describes them: the first
    window predicts its first max_seq_len tokens from the prefix token on; each later one predicts the next
    max_seq_len - context_len + 1 tokens, its input the max_seq_len tokens that end just before its last."""
    pred_len = max_seq_len - context_len + 1
    first = min(max_seq_len, len(token_list))
    yield [prefix_token] + token_list[:first - 1], token_list[:first]
    predicted = first
    while predicted < len(token_list):
        count = min(len(token_list) - predicted, pred_len)
        end = predicted + count
        yield token_list[max(0, end - max_seq_len - 1):end - 1], token_list[end - count:end]
        predicted += count


def make_disjoint_window(pair):
    a, b = pair
    return a[:len(a) - (len(b) - 1)], b


def harness_reference(loaded, text: str, window: int, tokens: list[int] | None = None) -> list[float]:
    """-ln p of each token of ``text`` (its tokens without special ones, unless ``tokens`` are given) as
    lm-evaluation-harness's loglikelihood_rolling scores it: each disjoint window's continuation given its
    context, from one forward pass of (context + continuation)[:-1]."""
    if tokens is None:
        tokens = loaded.tokenizer(text, add_special_tokens=False)["input_ids"]
    nll = []
    for context, continuation in map(make_disjoint_window, get_rolling_token_windows(
            tokens, harness_prefix_id(loaded.tokenizer), window, 1)):
        ids = torch.tensor([(context + continuation)[:-1]])
        with torch.no_grad():
            log_p = torch.log_softmax(loaded.model(input_ids=ids).logits[0].float(), -1)
        scored = log_p[-len(continuation):]
        nll += (-scored.gather(1, torch.tensor(continuation)[:, None])[:, 0]).tolist()
    return nll


def resolve_max_length_reference(config, tokenizer) -> tuple[int, str]:
    """lm-evaluation-harness 0.4.13's resolve_max_length (lm_eval/models/utils.py), as its docstring orders its
    sources: the config (text_config first), then the tokenizer's model_max_length unless unset, then 2048."""
    cfg = getattr(config, "text_config", None) or config
    for attr in ("n_positions", "max_position_embeddings", "n_ctx"):
        if getattr(cfg, attr, None) is not None:
            return getattr(cfg, attr), attr
    unset = 1000000000000000019884624838656
    limit = tokenizer.model_max_length
    return (limit, "model_max_length") if limit is not None and limit != unset else (2048, "default")


def test_harness_reads_as_many_tokens_at_once_as_the_config_allows(bundled, lmviz_tiny):
    for loaded in (bundled, lmviz_tiny):
        length, attr = resolve_max_length_reference(loaded.model.config, loaded.tokenizer)
        assert harness_max_length(loaded.model, loaded.tokenizer) == (length, f"{attr} in the model's config")
        assert bits_per_byte(loaded, "the cat sat on a mat").harness_window == length
    # SmolLM2's config names no n_positions, so its max_position_embeddings is the window: more than lmviz reads
    assert getattr(bundled.model.config, "n_positions", None) is None
    assert harness_max_length(bundled.model, bundled.tokenizer)[0] == bundled.model.config.max_position_embeddings
    assert bundled.model.config.max_position_embeddings > MAX_TOKENS == bits_per_byte(bundled, TEXT).window
    assert f"{bundled.model.config.max_position_embeddings:,}".replace(",", " ") in docs_page()
    assert f"at most {MAX_TOKENS:,}".replace(",", " ") in docs_page()


def test_harness_scores_the_special_tokens_the_tokenizers_defaults_add(bundled, lmviz_tiny):
    text = page_module()["DEFAULT_TEXT"]
    tokenizer = lmviz_tiny.tokenizer
    # lm-evaluation-harness 0.4.13's HFLM.tok_encode, add_bos_token unset and the text not starting with the
    # prefix token's text: tokenizer.encode(string), the tokenizer's defaults
    assert not text.startswith(tokenizer.decode([harness_prefix_id(tokenizer)]))
    theirs = tokenizer.encode(text)
    own = tokenizer(text, add_special_tokens=False)["input_ids"]
    assert theirs == [tokenizer.cls_token_id, *own, tokenizer.sep_token_id]
    window = resolve_max_length_reference(lmviz_tiny.model.config, tokenizer)[0]
    nats = sum(harness_reference(lmviz_tiny, text, window, theirs))
    result = bits_per_byte(lmviz_tiny, text)
    assert result.added == [tokenizer.cls_token, tokenizer.sep_token]
    assert result.window == result.harness_window == window  # the same windows as lm-evaluation-harness's
    assert result.as_run.tokens == len(theirs) and result.harness.tokens == len(own)
    assert result.as_run.bits_per_byte == pytest.approx(nats / (math.log(2) * len(text.encode("utf-8"))), rel=1e-5)
    assert result.as_run.bits_per_byte != pytest.approx(result.harness.bits_per_byte, rel=1e-3)
    docs = docs_page()
    assert (f"{len(theirs)} tokens and {result.as_run.bits_per_byte:.5f} bits per byte for lm-evaluation-harness, "
            f"{len(own)} tokens and {result.harness.bits_per_byte:.5f} for lmviz") in docs
    # SmolLM2's tokenizer adds nothing: lm-evaluation-harness scores lmviz's tokens, and the guide reads the text
    # with nothing before it
    assert bundled.tokenizer.encode(text) == bundled.tokenizer(text, add_special_tokens=False)["input_ids"]
    mine = bits_per_byte(bundled, text)
    assert mine.as_run is None and mine.added == []
    assert added_by_default(bundled.tokenizer, text) == ([], [])
    assert added_by_default(tokenizer, text) == ([tokenizer.cls_token_id], [tokenizer.sep_token_id])


def test_byte_and_word_perplexity_rank_the_models_as_bits_per_byte_does(bundled, lmviz_tiny):
    for text in (page_module()["DEFAULT_TEXT"], "the cat sat on a mat", TEXT):
        results = [bits_per_byte(bundled, text), bits_per_byte(lmviz_tiny, text)]
        by_byte = rankings(results)[1]
        for key in (lambda r: r.harness.byte_perplexity, lambda r: r.harness.word_perplexity):
            assert [r.model for r in sorted(results, key=key)] == by_byte
    from lmviz.course.glossary import TERMS

    entry = TERMS["bits per byte"][1]  # the glossary does not make bits per byte the only fair measure
    assert "Byte perplexity and word perplexity divide by counts no tokenizer changes either" in entry
    assert "none of the three is fair where a tokenizer drops text" in entry


def test_the_better_question_says_when_bits_per_byte_flatters_a_model(bundled, lmviz_tiny):
    from lmviz.course.questions.bits_per_byte import build_questions

    text = page_module()["DEFAULT_TEXT"]
    compared = [bits_per_byte(bundled, text), bits_per_byte(lmviz_tiny, text)]
    assert [r.keeps_text for r in compared] == [True, False]
    better = next(q for q in build_questions(compared[0], compared, None) if q.key == "better")
    assert f"{lmviz_tiny.name} never had to predict what its tokenizer dropped" in better.reason
    alone = next(q for q in build_questions(compared[0], compared[:1] * 2, None) if q.key == "better")
    assert "never had to predict" not in alone.reason
    assert better.ask == "Which model is better on this text? Compare them fairly."
    # were the lowest bits per byte a tokenizer's that drops text, the question asks for the lowest, not the better
    lowest = min(compared, key=lambda r: r.harness.bits_per_byte)
    flattered = [dataclasses.replace(r, keeps_text=r is not lowest) for r in compared]
    asked = next(q for q in build_questions(flattered[0], flattered, None) if q.key == "better")
    assert asked.ask == "Which model has the lowest bits per byte on this text?"
    assert asked.answer == lowest.model and f"{lowest.model} never had to predict" in asked.reason
    assert "better model" not in asked.hint and "better model" in better.hint


def test_the_glossarys_window_names_where_each_kind_of_position_embedding_ends(bundled, lmviz_tiny):
    import transformers

    from lmviz.course.glossary import TERMS

    entry = TERMS["window"][1]
    # GPT-2's learned position embeddings: a table of n_positions rows
    config = lmviz_tiny.model.config
    assert lmviz_tiny.model.transformer.wpe.num_embeddings == config.n_positions
    assert "GPT-2's learned position embeddings end at its n_positions" in entry
    # SmolLM2's rotary ones: no table; cos and sin computed for a position past max_position_embeddings
    llama = bundled.model.model
    limit = llama.config.max_position_embeddings
    assert not any(isinstance(m, torch.nn.Embedding) and m.num_embeddings == limit for m in bundled.model.modules())
    cos, sin = llama.rotary_emb(torch.zeros(1, 1, 1), torch.tensor([[2 * limit]]))
    assert torch.isfinite(cos).all() and torch.isfinite(sin).all()
    assert "rotary position embeddings, SmolLM2's, are computed for any position" in entry
    said = "The maximum sequence length that this model might ever be used with."
    assert said in (Path(transformers.__file__).parent / "utils" / "auto_docstring.py").read_text()
    assert "max_position_embeddings is the longest sequence it is meant to be used with" in entry
    assert "run out" not in entry


def guide_reference(loaded, ids: list[int], max_length: int, stride: int) -> tuple[list[float], float, list[int]]:
    """The loop of Hugging Face's perplexity guide, on ``ids``: each window's outputs.loss, its avg_nll, and the
    number of labels each window's loss is the mean of."""
    encodings = torch.tensor([ids])
    seq_len = encodings.size(1)
    losses, counts, nll_sum, n_tokens, prev_end_loc = [], [], 0.0, 0, 0
    for begin_loc in range(0, seq_len, stride):
        end_loc = min(begin_loc + max_length, seq_len)
        trg_len = end_loc - prev_end_loc
        input_ids = encodings[:, begin_loc:end_loc]
        target_ids = input_ids.clone()
        target_ids[:, :-trg_len] = -100
        with torch.no_grad():
            neg_log_likelihood = loaded.model(input_ids, labels=target_ids).loss
        losses.append(neg_log_likelihood.item())
        counts.append(int((target_ids[0, 1:] != -100).sum()))  # the labels the model's shift keeps
        num_loss_tokens = (target_ids != -100).sum().item() - target_ids.size(0)
        nll_sum += neg_log_likelihood * num_loss_tokens
        n_tokens += num_loss_tokens
        prev_end_loc = end_loc
        if end_loc == seq_len:
            break
    return losses, (nll_sum / n_tokens).item(), counts


@pytest.mark.parametrize("window", [1, 2, 5, 8, 200])
def test_harness_windows_score_every_token_once(window):
    for length in (2, 3, 9, 10, 17, 40):
        windows = harness_windows(length, window)
        scored = [t for w in windows for t in range(w.first, w.end)]
        assert scored == list(range(1, length))  # each token after the prefix, once, in order
        assert all(w.reads <= window and w.start >= 0 and w.first > w.start for w in windows)
        assert all(w.reads == window for w in windows[1:])  # the last reaches back to a full window


@pytest.mark.parametrize("window, stride", [(2, 1), (5, 2), (8, 3), (8, 7), (8, 8)])
def test_the_guides_windows_score_each_token_once_except_at_a_stride_of_the_window(window, stride):
    for length in (2, 9, 10, 17, 40):
        windows = strided_windows(length, window, stride)
        scored = [t for w in windows for t in range(w.first, w.end)]
        assert len(scored) == len(set(scored)) and all(w.reads <= window - 1 for w in windows)
        skipped = sorted(set(range(1, length)) - set(scored))
        # with no overlap, each window's first token is only ever an input
        assert skipped == ([w.start for w in windows[1:]] if stride == window else [])


def test_windows_equal_the_references_procedures_token_for_token(bundled):
    window, stride = 8, 3
    result = windowed(bundled, PARAGRAPH, window, stride)
    assert result.harness.nll[1:] == pytest.approx(harness_reference(bundled, PARAGRAPH, window), abs=2e-4)
    ids = [harness_prefix_id(bundled.tokenizer), *bundled.tokenizer(PARAGRAPH, add_special_tokens=False)["input_ids"]]
    losses, avg_nll, counts = guide_reference(bundled, ids, window, stride)
    strided = result.strided
    assert len(losses) == len(strided.windows)
    for w, loss, count in zip(strided.windows, losses, counts):
        mine = [strided.nll[t] for t in range(w.first, w.end)]
        # lmviz reads the windows in (B, L) batches, the guide one window at a time with its last token too: float32
        # sums in another order, 2.0e-5 apart at most here
        assert len(mine) == count and sum(mine) / count == pytest.approx(loss, abs=5e-5)
    assert guide_average(strided) == pytest.approx(avg_nll, abs=5e-5)
    assert guide_average(strided) != pytest.approx(strided.mean, abs=1e-6)  # the guide weighs later windows light
    with torch.no_grad():
        one_pass = bundled.model(input_ids=torch.tensor([ids]), labels=torch.tensor([ids])).loss.item()
    assert result.whole.mean == pytest.approx(one_pass, abs=2e-5)
    assert result.whole.lost_context() == [] and result.whole.never_scored() == []
    # context: the harness's first window sees everything before; later ones start again from one token
    assert result.harness.context[1:window + 1] == list(range(1, window + 1))
    assert result.harness.context[window + 1] == 1
    assert max(c for c in strided.context if c is not None) == window - 1
    assert len(result.harness.lost_context()) > 0 and len(strided.lost_context()) > 0


def test_bad_windows_and_texts_get_a_sentence(bundled):
    for window, stride in ((1, 1), (8, 9), (8, 0), (10**6, 1)):
        with pytest.raises(BadWindow):
            windowed(bundled, PARAGRAPH, window, stride)
    for text in ("", "   \n"):
        with pytest.raises(NothingToScore):
            bits_per_byte(bundled, text)


def test_the_ranking_by_token_and_by_byte(bundled, tiny_loaded):
    results = [bits_per_byte(bundled, "the cat sat on a mat"), bits_per_byte(tiny_loaded, "the cat sat on a mat")]
    by_token, by_byte = rankings(results)
    assert set(by_token) == set(by_byte) == {bundled.name, tiny_loaded.name}
    assert by_byte[0] == min(results, key=lambda r: r.harness.nats / r.harness.bytes).model


def test_the_cli_prints_the_pages_numbers(bundled, capsys):
    assert main(["bpb", TEXT, "--window", "8", "--stride", "3", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    expected = bits_per_byte(bundled, TEXT)
    (model,) = data["models"]
    assert model["harness"]["bits_per_byte"] == pytest.approx(expected.harness.bits_per_byte, rel=1e-6)
    assert model["decoded"]["bytes"] == expected.decoded.bytes
    assert data["windows"]["strided"]["nll"][1:] == pytest.approx(windowed(bundled, TEXT, 8, 3).strided.nll[1:])
    assert main(["bpb", TEXT, "--window", "8", "--stride", "9"]) == 2
    assert "stride" in capsys.readouterr().err


# ------------------------------------------------------------------------------------------- the page

def docs_page() -> str:
    """The lesson's docs page, whitespace normalised (a phrase cut by a line's end is still found)."""
    return " ".join(Path("docs/lessons/bits_per_byte.md").read_text().split())


def page_module():
    """The page's own constants (its default text), read from its file without running it."""
    import ast

    tree = ast.parse(Path("app_pages/bits_per_byte.py").read_text())
    return {target.id: ast.literal_eval(node.value) for node in tree.body if isinstance(node, ast.Assign)
            for target in node.targets if isinstance(target, ast.Name) and target.id == "DEFAULT_TEXT"}


def test_the_page_shows_the_librarys_numbers_and_its_questions_follow_them(bundled):
    from lmviz.models.loading import TINY_GPT, load_causal_lm
    from tests.helpers import answer_question, open_page, unescaped, verdicts

    text = page_module()["DEFAULT_TEXT"]
    expected = bits_per_byte(bundled, text)
    at = open_page("app_pages/bits_per_byte.py")
    assert not at.exception and not at.error
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["Bits per byte"] == f"{expected.harness.bits_per_byte:.5f}"
    assert metrics["Loss per token (nats)"] == f"{expected.harness.nats_per_token:.5f}"
    assert metrics["Bytes per token"] == f"{expected.harness.bytes_per_token:.5f}"
    assert metrics["Tokens predicted"] == str(expected.harness.tokens)
    shown = " ".join(m.value for m in at.markdown)
    # the arithmetic, checkable by hand: Σ nats ÷ (ln 2 × bytes)
    assert f"÷ (0.69315 × {expected.harness.bytes})" in shown
    assert f"Counted after decoding each token, **{expected.decoded.bytes}** bytes" in shown
    tiny = bits_per_byte(load_causal_lm(TINY_GPT), text)
    compared = next(t.value for t in at.table if "gives the text back" in t.value.columns)
    assert [unescaped(m) for m in compared["model"]] == [expected.model, TINY_GPT]
    assert [unescaped(b) for b in compared["bits per byte"]] == [f"{r.harness.bits_per_byte:.5f}"
                                                                 for r in (expected, tiny)]
    assert list(compared["gives the text back"]) == ["yes", "no"]  # the tiny GPT lowercases and has [UNK]
    assert (expected.unknown_tokens, expected.lowercases) == (0, False)
    unknown = tiny.unknown_tokens
    assert tiny.lowercases and unknown == [r.token for r in tiny.rows].count("[UNK]") > 0
    caption = " ".join(unescaped(c.value) for c in at.caption)
    assert f"it lowercased the letters; {unknown} of its tokens are its unknown token" in caption
    # lm-evaluation-harness's own tokens for the tiny GPT, and its window for SmolLM2, each computed
    words = re.sub(r"\[(\[\w+\]|[^\]]+)\]\(glossary[^)]*\)", r"\1", caption)  # glossary links as their words
    assert (f"encodes the text as {TINY_GPT}'s tokenizer does by default, not as lmviz does: {tiny.as_run.tokens} "
            f"tokens where lmviz has {tiny.harness.tokens}, {', '.join(tiny.added)} among them, which lmviz's have "
            f"not. It scores them all: {tiny.as_run.bits_per_byte:.5f} bits per byte, where lmviz gives "
            f"{tiny.harness.bits_per_byte:.5f}.") in words
    config = bundled.model.config
    assert (f"lmviz reads at most {MAX_TOKENS:,} tokens of it at once: lmviz's limit per text, not the model's"
            in caption)
    assert (f"lm-evaluation-harness 0.4.13 reads {config.max_position_embeddings:,} (max_position_embeddings in "
            "the model's config)") in caption
    # section 3: the rule, the tokenizer's decode against Python's, the first broken token, nanochat's commit
    assert ("one for the start of a character that the token cuts short, and one for each byte of a character "
            "begun in an earlier token") in shown  # the rule replacements_by_the_pages_rule checks
    first = next(r for r in expected.rows if r.byte_count != r.decoded_byte_count)
    python = bytes.fromhex(first.raw).decode("utf-8", errors="replace")
    assert (f"decodes each of these tokens as Python does: the first, <{first.raw}>, decodes to “{python}”, "
            f"{python.count(chr(0xFFFD))} U+FFFD, {len(python.encode('utf-8'))} bytes where the token holds "
            f"{len(bytes.fromhex(first.raw))}.") in " ".join(unescaped(m.value) for m in at.markdown)
    assert "nanochat's own until its commit [2ce972a](" in shown
    # section 4: what the three counts share, and what none of them is fair to
    assert "so all three rank the models alike" in unescaped(shown) and "Only bits per byte" not in shown
    assert "None of the three is fair to a tokenizer that does not give the text back" in shown
    # section 5: lmviz's prefix, and the guide's loop, which reads SmolLM2's tokens with nothing before them
    assert added_by_default(bundled.tokenizer, text)[0] == []
    assert (f"All three ways read the text after {unescaped(expected.prefix)}, the prefix token lmviz puts before it"
            in unescaped(shown))
    assert "with nothing before it, so that there the text's first token is never predicted" in shown
    # the questions: right when answered with the library's numbers
    answer_question(at, "bpb/bpb", f"{expected.harness.bits_per_byte:.4f}")
    best = min((expected, tiny), key=lambda r: r.harness.bits_per_byte).model
    answer_question(at, "bpb/better", best)
    scored = windowed(bundled, text)
    assert f"it reports {guide_average(scored.strided):.5f}, where the tokens it scored average " \
           f"{scored.strided.mean:.5f}" in shown
    answer_question(at, "bpb/lost", str(len(scored.harness.lost_context())))
    assert len(verdicts(at)["right"]) == 3, verdicts(at)


def test_the_pages_windows_and_end_token(bundled):
    from tests.helpers import open_page

    at = open_page("app_pages/bits_per_byte.py")
    at.checkbox(key="bpb_end").check()
    at.slider(key="bpb_window").set_value(8)
    at.run()
    at.slider(key="bpb_stride").set_value(8).run()
    assert not at.exception and not at.error
    text = page_module()["DEFAULT_TEXT"]
    scored = windowed(bundled, text, 8, 8)
    shown = " ".join(m.value for m in at.markdown)
    assert f"each window after the first is never scored: {len(scored.strided.never_scored())} tokens here" in shown
    assert scored.strided.never_scored() == [w.start for w in scored.strided.windows[1:]]
    # without overlap the guide's weights are right: its average is the mean of the tokens it scored
    assert guide_average(scored.strided) == pytest.approx(scored.strided.mean, abs=1e-12)
    assert f"is the mean of the tokens it scored: {scored.strided.mean:.5f}" in shown
    with_end = bits_per_byte(bundled, text, end_token=True)
    assert f"costs {with_end.rows[-1].nll:.5f} nats" in shown
    summary = next(d.value for d in at.dataframe if "scored as" in d.value)
    assert list(summary["tokens that lost context"]) == [len(w.lost_context()) for w in
                                                         (scored.whole, scored.harness, scored.strided)]
