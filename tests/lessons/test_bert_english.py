"""The BERT pages with a teacher's own English: offline, the tiny BERT knows only lmviz's story words,
so the pages say so, in one line of the pinned panel and in full below it; and the Masked LM page masks the
tokens the learner chooses."""

import pytest
import torch
import torch.nn.functional as F

from lmviz.core.corpus import generate_corpus
from lmviz.core.numbers import fmt
from lmviz.core.text import escape_markdown
from lmviz.course.registry import PATH
from lmviz.lessons.bert import SPELLED_PIECES, english_bert_advice, panel_note, unknown_words, word_pieces
from lmviz.models.loading import load_bert
from tests.helpers import open_page

ENGLISH = "The capital of France is Paris."
ENGLISH_B = "It is a beautiful city."
WARNING = "does not know most of these words"


@pytest.fixture(scope="module")
def tiny():
    return load_bert()  # lmviz-tiny-bert, the BERT the pages use offline


@pytest.fixture(scope="module")
def story() -> list[str]:
    return generate_corpus(num_train=0, num_validation=1, seed=0).validation[0].sentences


@pytest.fixture(scope="module")
def whole_words():
    """A WordPiece tokenizer that knows some words whole, others in two real pieces, and the letters:
    as bert-base-uncased does, built in memory."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    letters = [chr(c) for c in range(ord("a"), ord("z") + 1)]
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", ".", "paris", "capital", "token", "##ization", "rewrite",
             "##s", "hyper", "##para", "##meter", *letters, *(f"##{c}" for c in letters)]
    backend = Tokenizer(models.WordPiece({w: i for i, w in enumerate(vocab)}, unk_token="[UNK]"))
    backend.normalizer = normalizers.BertNormalizer(lowercase=True)
    backend.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    return PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="[UNK]", pad_token="[PAD]", cls_token="[CLS]",
                                   sep_token="[SEP]", mask_token="[MASK]")


# --- the rule, word by word, on a tokenizer that knows words whole

@pytest.mark.parametrize("word, pieces, unknown", [
    ("Paris", ["paris"], False),  # one piece: a word of its vocabulary
    ("tokenization", ["token", "##ization"], False),  # a rare word in two real pieces: bert-base-uncased does this
    ("rewrites", ["rewrite", "##s"], False),  # one single letter among real pieces is a suffix, not spelling
    ("of", ["o", "##f"], True),  # every piece a single letter: spelled out
    ("lmviz", ["l", "##m", "##v", "##i", "##z"], True),
    ("hyperparameters", ["hyper", "##para", "##meter", "##s"], True),  # SPELLED_PIECES or more
    ("🦄", ["[UNK]"], True),
])
def test_a_word_is_unknown_when_it_becomes_unk_or_is_spelled_out(whole_words, word, pieces, unknown):
    assert word_pieces(whole_words, word) == [(word, pieces)]
    assert unknown_words(whole_words, word).words == ([word] if unknown else [])
    assert (len(pieces) >= SPELLED_PIECES) <= unknown


def test_most_means_more_than_half_of_the_words_punctuation_left_out(whole_words):
    half = unknown_words(whole_words, "Paris of.")
    assert (half.num_unknown, half.num_words, half.most) == (1, 2, False)  # exactly half: not most
    more = unknown_words(whole_words, "Paris of lmviz.")
    assert (more.words, more.num_words, more.most) == (["of", "lmviz"], 3, True)
    repeated = unknown_words(whole_words, "of of Paris", "of")  # each word listed once, counted each time
    assert (repeated.words, repeated.num_unknown, repeated.num_words) == (["of"], 3, 4)
    assert unknown_words(whole_words, ". . .").num_words == 0 and not unknown_words(whole_words, "").most


# --- the tiny BERT: English is spelled out, its stories are not

def test_the_tiny_bert_does_not_know_english_and_knows_its_stories(tiny, story):
    english = unknown_words(tiny.tokenizer, ENGLISH)
    assert english.most and english.words == ["capital", "of", "France", "is", "Paris"]
    assert english.num_words == 6  # "." is not a word; "The" is one it knows
    assert tiny.tokenizer.tokenize("Paris") == ["p", "##a", "##r", "##i", "##s"]  # what "spelled out" means here
    known = unknown_words(tiny.tokenizer, *story)
    assert known.words == [] and known.num_words > 10 and not known.most


# --- the three pages: one line in the pinned panel, the warning below it, one click to a text it knows

def in_page_order(at) -> list:
    """Warnings and metrics, in the order the page draws them (the pinned panel first), each with whether it
    lies in the pinned panel."""
    found = []

    def walk(node, in_panel=False):
        in_panel = in_panel or getattr(node, "key", None) == "result-panel"
        if type(node).__name__ in ("Warning", "Metric", "Caption"):
            found.append((type(node).__name__, in_panel, node))
        for child in getattr(node, "children", {}).values():
            walk(child, in_panel)

    walk(at.main)
    return found


def fill_mlm(at):
    at.text_area(key="mlm_text").input(ENGLISH)


def fill_nsp(at):
    at.text_input(key="nsp_a").input(ENGLISH)
    at.text_input(key="nsp_b").input(ENGLISH_B)


def fill_bert(at):
    at.text_input(key="bert_a").input(ENGLISH)
    at.text_input(key="bert_b").input(ENGLISH_B)


PAGES = {"app_pages/masked_lm.py": (fill_mlm, [ENGLISH]),  # the page, how to fill it, and the texts it then scores
         "app_pages/next_sentence.py": (fill_nsp, [ENGLISH, ENGLISH_B]),
         "app_pages/bert_loss.py": (fill_bert, [ENGLISH, ENGLISH_B])}


def test_every_bert_lesson_is_checked_on_english():
    """PAGES is kept by hand (how each page is filled): the registry says which lessons score with a BERT."""
    assert set(PAGES) == {lesson.page for lesson in PATH if lesson.model == "bert"}


@pytest.mark.parametrize("page", list(PAGES))
def test_each_bert_page_says_so_in_one_line_of_its_panel_and_warns_below_it_on_english(page, tiny):
    at = open_page(page)
    assert not at.exception and not [w for w in at.warning if WARNING in w.value]  # its own story: no warning
    fill, texts = PAGES[page]
    fill(at)
    at.run()
    assert not at.exception
    [warning] = [w for w in at.warning if WARNING in w.value]
    for word in ("capital", "France", "Paris"):
        assert f"“{word}”" in warning.value
    assert f"with {len(tiny.tokenizer):,} tokens" in warning.value  # read from the model in use
    assert "bert-base-uncased" in warning.value and "python -m lmviz prepare" in warning.value
    assert english_bert_advice(False) in warning.value  # offline, in the tests: a teacher's step, before class
    drawn = in_page_order(at)
    in_panel = [(kind, node) for kind, panel, node in drawn if panel]
    # the panel: one line that says so (panel_note, whose words the lessons' tests check), then the numbers
    check = unknown_words(tiny.tokenizer, *texts)
    assert [kind for kind, _ in in_panel] == ["Caption", "Metric", "Metric", "Metric"]
    assert in_panel[0][1].value == escape_markdown(panel_note(tiny, check))
    assert f"does not know {check.num_unknown} of these {check.num_words} words" in in_panel[0][1].value
    kinds = [kind for kind, panel, _ in drawn if not panel]
    assert kinds.index("Warning") > 0 and "Metric" not in kinds[:kinds.index("Warning")]  # below the panel
    [button] = [b for b in at.button if b.label == "Use a text it knows"]
    button.click().run()
    assert not at.exception and at.metric and not [w for w in at.warning if WARNING in w.value]


# --- click a word to mask it

def test_masked_lm_page_masks_the_chosen_tokens_and_scores_exactly_them(tiny):
    at = open_page("app_pages/masked_lm.py")
    at.radio(key="mlm_mode").set_value("the tokens I choose (fill in the blank)").run()
    assert not at.exception and any("No position is chosen" in w.value for w in at.warning) and not at.metric
    text = at.text_area(key="mlm_text").value
    tokens = tiny.tokenizer.convert_ids_to_tokens(tiny.tokenizer(text)["input_ids"])
    choice = at.multiselect(key="mlm_positions")
    assert choice.options == [f"{t}: {token}" for t, token in enumerate(tokens)][1:-1]  # never [CLS] or [SEP]
    positions = [2, 4]
    choice.set_value(positions).run()
    assert not at.exception and not at.error
    # the reference: Hugging Face's BertForMaskedLM with the tiny BERT's weights, -100 except at the choice
    from transformers import BertForMaskedLM

    reference = BertForMaskedLM(tiny.model.config).eval()
    reference.load_state_dict(tiny.model.state_dict(), strict=False)
    enc = tiny.tokenizer(text, return_tensors="pt")
    ids = enc["input_ids"]
    masked, labels = ids.clone(), torch.full_like(ids, -100)
    masked[0, positions], labels[0, positions] = tiny.tokenizer.mask_token_id, ids[0, positions]
    with torch.no_grad():
        out = reference(input_ids=masked, attention_mask=enc["attention_mask"], labels=labels)
    assert out.loss.item() == pytest.approx(F.cross_entropy(out.logits[0, positions], ids[0, positions]).item(),
                                            abs=1e-5)
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["Masked-LM loss"] == fmt(out.loss.item())
    assert metrics["Positions selected (they count)"] == "2"
    table = at.dataframe[0].value  # the positions that count
    assert table["position"].tolist() == positions and table["model reads"].tolist() == ["[MASK]", "[MASK]"]
    assert table["token"].tolist() == [tokens[t] for t in positions]


def test_the_warning_shows_the_words_as_typed_never_as_markup():
    at = open_page("app_pages/masked_lm.py")
    at.text_area(key="mlm_text").input("<script>$x^2$ **bold** alert(1)</script> :red[red]").run()
    assert not at.exception
    [warning] = [w.value for w in at.warning if WARNING in w.value]
    # the tokenizer's first words: "<", "script", ">", "$", "^"..., each written so that Markdown shows it as it is
    for word in ("“\\<”", "“script”", "“\\>”", "“\\$”"):
        assert word in warning
    for live in ("“<”", "“$”"):
        assert live not in warning


def test_chosen_positions_that_a_new_text_does_not_have_are_dropped():
    at = open_page("app_pages/masked_lm.py")
    at.radio(key="mlm_mode").set_value("the tokens I choose (fill in the blank)").run()
    at.multiselect(key="mlm_positions").set_value([1, 6]).run()
    assert at.metric and {m.label: m.value for m in at.metric}["Positions selected (they count)"] == "2"
    at.text_area(key="mlm_text").input("anna saw").run()  # positions 1 and 2 only
    assert not at.exception and at.multiselect(key="mlm_positions").value == [1]
    assert {m.label: m.value for m in at.metric}["Positions selected (they count)"] == "1"


def test_a_tokenizer_without_word_ids_splits_words_at_spaces(whole_words):
    class Slow:  # a Python tokenizer: no offsets or word ids, only tokenize()
        is_fast, unk_token, tokenize = False, "[UNK]", staticmethod(whole_words.tokenize)

    assert word_pieces(Slow(), "Paris of lmviz") == [("Paris", ["paris"]), ("of", ["o", "##f"]),
                                                      ("lmviz", ["l", "##m", "##v", "##i", "##z"])]
    assert unknown_words(Slow(), "Paris of lmviz").words == ["of", "lmviz"]
