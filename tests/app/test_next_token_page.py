"""The Next token page, headless: its numbers against the model's own logits, and the two-way link with
Your sentence (a row there and this page give the same -log p for the same position)."""

import math
import re
from urllib.parse import parse_qs

import pytest
import torch
from streamlit.testing.v1 import AppTest

from lmviz.core.text import readable_token
from lmviz.lessons.causal_lm import analyse_clm
from tests.helpers import APP, open_page, unescaped


def metrics(at) -> dict:
    return {m.label: m.value for m in at.metric}


def softmax_of_the_model(loaded, text: str, temperature: float) -> torch.Tensor:
    """The reference: the model's own forward pass on the tokenized text, the last position, softmax(z / T)."""
    ids = loaded.tokenizer(text, add_special_tokens=False)["input_ids"]
    with torch.no_grad():
        logits = loaded.model(input_ids=torch.tensor([ids])).logits[0, -1].double()  # (V,)
    return torch.softmax(logits / temperature, -1)


@pytest.mark.parametrize("temperature", [1.0, 0.5, 2.0])
def test_the_distribution_is_the_models_softmax_at_that_temperature(bundled, temperature):
    at = open_page("app_pages/next_token.py")
    at.slider(key="next_temperature").set_value(temperature).run()
    assert not at.exception and not at.error and not at.warning
    text = at.text_area(key="next_text").value
    probs = softmax_of_the_model(bundled, text, temperature)
    greedy = int(probs.argmax())
    shown = metrics(at)
    assert shown["Greedy choice (the highest logit)"] == readable_token(bundled.tokenizer, greedy)
    # The page's forward pass keeps only the last position's logits (logits_to_keep=1): float32 kernels
    # of another shape, so the last digit shown may differ; everything else must agree.
    close = {"rel": 1e-4, "abs": 2e-5}
    assert float(shown[f"p(greedy) at T = {temperature:g}"]) == pytest.approx(probs[greedy].item(), **close)
    table = at.dataframe[0].value
    top = probs.topk(20)
    assert table["id"].tolist() == top.indices.tolist()
    assert [float(p) for p in table["p = e^(z/T) / Σ"]] == pytest.approx(top.values.tolist(), **close)
    assert [float(v) for v in table["-log p"]] == pytest.approx([-math.log(p) for p in top.values.tolist()], **close)
    everything_else = next(m.value for m in at.markdown if "everything else" in m.value)
    rest = float(everything_else.split("everything else ")[1].split(";")[0])
    assert rest == pytest.approx(1 - top.values.sum().item(), **close)


def test_a_row_of_your_sentence_opens_here_with_the_same_loss(bundled):
    at = open_page("app_pages/your_sentence.py")
    expected = analyse_clm(bundled, at.text_area(key="text").value)
    position = 3
    at.selectbox(key="sentence_to_next").set_value(position).run()
    link = next(p.proto for p in at.get("page_link") if "Next token page" in p.proto.label)
    assert link.page == "next-token"
    params = {key: values[0] for key, values in parse_qs(link.query_string).items()}
    row = expected.rows[position]
    assert params["next"] == str(row.target_id)

    nxt = open_page_with("app_pages/next_token.py", params)  # the position, opened as the link opens it
    assert not nxt.exception and not nxt.warning
    assert nxt.text_area(key="next_text").value == bundled.tokenizer.decode(expected.input_ids[:position + 1])
    assert float(metrics(nxt)[f"-log p({row.target_token}), T = 1"]) == pytest.approx(row.nll, abs=1e-4)
    float32 = next(c.value for c in nxt.caption if "Training computes it in float32" in c.value)
    # the same arithmetic as Your sentence, up to float32 kernels over another length
    assert float(re.search(r"-log p = (\d+\.\d{5})", float32).group(1)) == pytest.approx(row.nll, abs=2e-5)
    back = next(p.proto for p in nxt.get("page_link") if "Your sentence" in p.proto.label)  # and back
    assert parse_qs(back.query_string)["text"] == [bundled.tokenizer.decode(expected.input_ids[:position + 2])]


def open_page_with(page: str, params: dict):
    """A page opened from a link that carries ``params``."""
    at = AppTest.from_file(APP, default_timeout=60)
    for key, value in params.items():
        at.query_params[key] = value
    at.run()
    return at.switch_page(page).run()


def test_works_with_lmviz_tiny_gpt_and_says_what_a_bad_prefix_is():
    from lmviz.models.loading import TINY_GPT, load_causal_lm

    at = open_page("app_pages/next_token.py")
    at.text_input(key="model_name").set_value(TINY_GPT).run()
    at.text_area(key="next_text").set_value("anna and ben went to the").run()
    assert not at.exception and not at.error and not at.warning
    tiny = load_causal_lm(TINY_GPT)
    probs = softmax_of_the_model(tiny, "anna and ben went to the", 1.0)
    assert at.dataframe[0].value["id"].tolist() == probs.topk(20).indices.tolist()
    at.text_area(key="next_text").set_value("   ").run()
    assert not at.exception and [unescaped(w.value) for w in at.warning] == [
        "There is nothing to continue: the text is empty, so type the beginning of a sentence."]
