"""lmviz.core.corpus: reproducible stories whose probability is known exactly."""

import math
import random

import pytest

from lmviz.core import corpus
from lmviz.core.corpus import corpus_from_text, entropy_per_token, generate_corpus, generate_story, unigram_entropy


def test_same_seed_same_stories_and_splits_do_not_overlap():
    a, b = generate_corpus(200, 50, seed=3), generate_corpus(200, 50, seed=3)
    assert [s.text for s in a.train] == [s.text for s in b.train]
    assert [s.text for s in generate_corpus(200, 50, seed=4).train] != [s.text for s in a.train]
    assert len(a.train) == 200 and len(a.validation) == 50


def _replay_log_prob(story) -> float:
    """-log p(story) recomputed from the text alone, by an independent reading of the grammar."""
    words = story.text.split()
    a, b, place = words[0], words[2], words[6]
    log_p = -math.log(len(corpus.NAMES)) - math.log(len(corpus.NAMES) - 1) - math.log(len(corpus.PLACES))
    sentences = [s.split() for s in story.sentences[1:]]
    for count, sentence in enumerate(sentences, start=1):
        if count >= corpus.MIN_STORY_SENTENCES:
            log_p += math.log(1 - corpus.STOP_PROBABILITY)
        log_p += math.log(1 / 3) + math.log(1 / 7)  # who, then which verb
        verb = sentence[1]
        choices = {"saw": [len(corpus.COLOURS), len(corpus.ANIMALS), 4], "found": [len(corpus.COLOURS), 4],
                   "liked": [5], "ate": [len(corpus.FOODS)], "felt": [len(corpus.FEELINGS)], "went": [4],
                   "said": []}[verb]
        log_p -= sum(math.log(n) for n in choices)
        assert sentence[0] in (a, b, "they") and place in corpus.PLACES
    if len(story.sentences) < corpus.MAX_STORY_SENTENCES:
        log_p += math.log(corpus.STOP_PROBABILITY)
    return log_p


def test_story_probability_matches_an_independent_replay():
    rng = random.Random(0)
    for _ in range(300):
        story = generate_story(rng)
        assert story.log_prob == pytest.approx(_replay_log_prob(story), abs=1e-9)
        assert story.num_tokens == len(story.text.split()) + 1


def test_reported_entropy_is_the_mean_negative_log_probability_per_token():
    c = generate_corpus(500, 100, seed=0)
    total_nll = -sum(_replay_log_prob(s) for s in c.validation)
    total_tokens = sum(len(s.text.split()) + 1 for s in c.validation)
    assert entropy_per_token(c.validation) == pytest.approx(total_nll / total_tokens, rel=1e-12)
    # the floor lies far below the unigram entropy, which ignores context
    tokens = [s.text.split() + ["[SEP]"] for s in c.train]
    assert entropy_per_token(c.validation) < unigram_entropy(tokens) - 1.5


def test_unigram_entropy_by_hand():
    assert unigram_entropy([["a", "b"], ["a", "c"]]) == pytest.approx(-(0.5 * math.log(0.5)
                                                                        + 2 * 0.25 * math.log(0.25)))


def test_user_text_becomes_stories_or_gets_a_clear_sentence():
    text = "\n\n".join(" ".join(f"Line {p}.{i} is here." for i in range(6)) for p in range(10))
    c = corpus_from_text(text)
    # 10 paragraphs of 6 sentences: a lone 6th sentence joins its paragraph's story
    assert len(c.train) + len(c.validation) == 10
    assert all(len(s.sentences) == 6 for s in c.train)
    assert entropy_per_token(c.validation) is None
    with pytest.raises(ValueError, match="at least 40 sentences"):
        corpus_from_text("Too short. Really.")
    with pytest.raises(ValueError, match="larger than"):
        corpus_from_text("x" * 1_000_001)


def test_the_story_generator_and_the_text_helpers_need_no_torch():
    import subprocess
    import sys
    from pathlib import Path

    done = subprocess.run([sys.executable, "-c",
                           "import sys, lmviz.core.corpus, lmviz.core.text; print('torch' in sys.modules)"],
                          capture_output=True, text=True, timeout=60, cwd=Path(__file__).resolve().parents[2])
    assert done.stdout.strip() == "False", done.stderr
