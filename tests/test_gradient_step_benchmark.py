"""benchmarks/gradient_step.py: the texts it times are as long as its table says, and its memory peaks are per call."""

import pytest

from benchmarks.gradient_step import PARAGRAPH, malloc_trim, peak_above, status_mib, text_of_length
from lmviz.lessons.causal_lm import model_max_tokens
from lmviz.models.loading import TINY_GPT, load_causal_lm

BLOCK_MIB = 300


@pytest.fixture(scope="module")
def tiny():
    return load_causal_lm(TINY_GPT, device="cpu")


@pytest.mark.parametrize("length", [16, 64, 256])
def test_texts_have_the_length_asked_in_the_models_own_tokens(bundled, tiny, length):
    for loaded, expected in ((bundled, length), (tiny, min(length, model_max_tokens(tiny.model)))):
        text = text_of_length(loaded, length)
        assert len(loaded.tokenizer(text, add_special_tokens=False)["input_ids"]) == expected
    # SmolLM2's byte-level tokenizer reads back the paragraph's own characters
    text = text_of_length(bundled, length)
    assert text == (PARAGRAPH * (len(text) // len(PARAGRAPH) + 1))[:len(text)]


def test_tiny_gpt_is_measured_at_its_limit(tiny):
    assert model_max_tokens(tiny.model) == 128  # below the table's 256, so its last row is cut
    assert len(tiny.tokenizer(text_of_length(tiny, 256), add_special_tokens=False)["input_ids"]) == 128


def test_peaks_are_each_calls_own():
    written = peak_above(lambda: bytearray(b"x") * (BLOCK_MIB * 2**20))  # written, so resident
    assert BLOCK_MIB - 5 <= written <= BLOCK_MIB + 50
    # the block is freed: a call that allocates nothing peaks at what it started from, not at the block before it.
    # Trimmed first: after a long test session glibc may serve the block from a free hole inside its heap and keep
    # its pages when it is freed, and then VmRSS would still count it (CI's stop 34 saw VmHWM == VmRSS)
    malloc_trim()
    assert status_mib("VmHWM") >= status_mib("VmRSS") + BLOCK_MIB - 5  # without a reset, VmHWM still holds it
    assert peak_above(lambda: None) < 5
