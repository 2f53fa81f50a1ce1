"""Every page through Streamlit's AppTest: no exception, and the numbers on screen."""

import math
import re
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from lmviz.core.numbers import CHECK_DIGITS, PERPLEXITY_DIGITS, fmt, fmt_prob
from lmviz.core.text import escape_markdown
from lmviz.course.registry import PATH
from tests.helpers import APP, PAGES, default_page, open_page, unescaped


def page_text(at: AppTest) -> str:
    parts = [m.value for m in at.markdown] + [m.value for m in at.metric] + [c.value for c in at.caption]
    return "\n".join(str(p) for p in parts)


@pytest.mark.parametrize("page", PAGES)
def test_every_page_opens_without_an_exception(page):
    at = default_page(page)
    assert not at.exception, at.exception
    assert not at.error, [e.value for e in at.error]


def test_toy_page_shows_the_articles_loss():
    at = default_page("app_pages/toy_example.py")
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["Loss: mean(-log p)"] == "0.86302"
    assert metrics["Uniform guess: ln 10"] == "2.30259"
    assert metrics["Perplexity: exp(loss)"] == "2.3703"
    text = page_text(at)
    assert "(0.69315 + 1.20397 + 1.10866 + 0.79851 + 0.51083) / 5 = **0.86302**" in text
    assert any('greedy decoding would pick "am"' in w.value for w in at.warning)


def test_toy_steps_1_and_2_give_each_position_a_column():
    """Ten word columns of marked numbers overflowed a projector: the table has one column per position, one row
    per word, and each column's ✓ stands on its true label's row with the article's probability."""
    from lmviz.core import toy
    from tests.helpers import LABELS

    at = open_page("app_pages/toy_example.py")
    marked = next(d.value for d in at.dataframe if any("✓" in str(v) for v in d.value.to_numpy().ravel()))
    assert marked.index.tolist() == toy.VOCAB
    assert marked.columns.tolist() == [f"{t}: {toy.INPUT_WORDS[t]} → {toy.VOCAB[i]}" for t, i in enumerate(LABELS)]
    for t, label in enumerate(LABELS):
        ticked = [word for word in toy.VOCAB if "✓" in marked.iloc[:, t][word]]
        assert ticked == [toy.VOCAB[label]]
        assert marked.iloc[:, t][toy.VOCAB[label]].endswith(fmt_prob(toy.PROBABILITIES[t][label]))


def test_toy_gradient_table_is_the_librarys_with_a_column_per_position():
    """Section 4's table: (p − y)/5 for each word and position, as lmviz.core.toy computes it and as a hand
    computation writes it (the true label's entry marked ✓, negative), and a sum row of 0 under each column."""
    from lmviz.core import toy
    from tests.helpers import LABELS

    at = open_page("app_pages/toy_example.py")
    shown = next(d.value for d in at.dataframe if d.value.index.tolist()[-1] == "sum")
    assert shown.index.tolist() == [*toy.VOCAB, "sum"]
    assert shown.columns.tolist() == [f"{t}: {toy.INPUT_WORDS[t]} → {toy.VOCAB[i]}" for t, i in enumerate(LABELS)]
    library = toy.loss_gradient().tolist()
    for t, row in enumerate(toy.PROBABILITIES):
        for v, p in enumerate(row):
            cell = shown.iloc[v, t]
            assert float(cell.removeprefix("✓ ")) == pytest.approx(library[t][v], abs=5e-7)
            by_hand = f"✓ -{(1 - p) / 5:.6f}" if v == LABELS[t] else f"{p / 5:.6f}"  # (p − 1)/5, or p/5
            assert cell == by_hand, (t, toy.VOCAB[v])
    assert shown.loc["sum"].tolist() == ["0.000000"] * 5


def test_editing_a_probability_changes_the_loss():
    at = open_page("app_pages/toy_example.py")
    # position 1 ("I" -> "love"): raise p(love) from 0.30 to 0.90; the row then sums to 1.6 and is rescaled
    at.session_state["toy_table_0"] = {"edited_rows": {1: {"love": 0.9}}, "added_rows": [], "deleted_rows": []}
    at.run()
    assert not at.exception
    p_love = 0.9 / 1.6
    expected = (-math.log(0.5) - math.log(p_love) - math.log(0.33) - math.log(0.45) - math.log(0.6)) / 5
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["Loss: mean(-log p)"] == f"{expected:.5f}" != "0.86302"
    assert any("Row 1 does not sum to 1" in i.value for i in at.info)


def test_a_zero_true_label_probability_gives_an_explained_infinity_and_the_page_stays():
    at = open_page("app_pages/toy_example.py")
    at.session_state["toy_table_0"] = {"edited_rows": {0: {"I": 0.0}}, "added_rows": [], "deleted_rows": []}
    at.run()
    assert not at.exception and not at.error
    metrics = {m.label: m.value for m in at.metric}
    assert metrics == {"Loss: mean(-log p)": "∞", "Perplexity: exp(loss)": "∞", "Uniform guess: ln 10": "2.30259",
                       "Loss before": "∞", "Loss after one step": "∞",  # section 4: a step cannot move log 0
                       # the options fold: label smoothing's ε/C on the word of p = 0 is ∞ too; log Z is still 0
                       "Plain loss": "∞", "Cross-entropy with these options": "∞", "z-loss": "0.00000",
                       "Trainer's loss: the sum": "∞"}
    others = [fmt(-math.log(p)) for p in (0.3, 0.33, 0.45, 0.6)]  # positions 1-4 keep the article's numbers
    assert f"(∞ + {' + '.join(others)}) / 5 = **∞**" in page_text(at)
    steps = next(d.value for d in at.dataframe if "-log p(label)" in d.value.columns)
    assert steps["-log p(label)"].tolist() == ["∞"] + others
    assert any("-log 0 = ∞" in w.value and "could not happen" in w.value for w in at.warning)
    assert len(at.get("plotly_chart")) == 1  # the chart is still drawn


def test_your_sentence_scores_a_typed_sentence(bundled):
    from lmviz.lessons.causal_lm import analyse_clm

    at = open_page("app_pages/your_sentence.py")
    assert not at.exception
    at.text_area(key="text").input("I love dogs not cats").run()
    assert not at.exception and not at.error
    expected = analyse_clm(bundled, "I love dogs not cats")
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["Loss: mean(-log p)"] == f"{expected.loss:.5f}"
    assert metrics["Predictions scored"] == str(len(expected.rows))
    table = at.dataframe[0].value
    assert table["-log p(label)"].tolist() == [fmt(r.nll) for r in expected.rows]
    assert table["p(label)"].tolist() == [fmt_prob(r.prob) for r in expected.rows]
    assert table["rank"].tolist() == [r.rank for r in expected.rows]
    assert table["label (next token)"].tolist() == [r.target_token for r in expected.rows]
    assert metrics["Perplexity: exp(loss)"] == fmt(expected.perplexity, PERPLEXITY_DIGITS)
    checks = at.dataframe[1].value["loss"].tolist()
    assert checks == [fmt(v, CHECK_DIGITS) for v in (expected.loss, expected.loss_model, expected.loss_cross_entropy)]
    assert at.query_params["text"] == ["I love dogs not cats"] or at.query_params["text"] == "I love dogs not cats"


def test_your_sentence_reads_the_sentence_from_the_url(bundled):
    from lmviz.lessons.causal_lm import analyse_clm

    at = AppTest.from_file(APP, default_timeout=60)
    at.query_params["text"] = "Paris is the capital of France."
    at.query_params["bos"] = "1"
    at.run()
    at.switch_page("app_pages/your_sentence.py").run()
    assert not at.exception
    assert at.text_area(key="text").value == "Paris is the capital of France."
    expected = analyse_clm(bundled, "Paris is the capital of France.", add_bos=True)
    assert {m.label: m.value for m in at.metric}["Loss: mean(-log p)"] == f"{expected.loss:.5f}"


def test_your_sentence_names_the_start_token_it_really_adds(bundled):
    from lmviz.core.text import boundary_token_note, readable_token
    from lmviz.lessons.causal_lm import analyse_clm

    at = open_page("app_pages/your_sentence.py")
    offer = next(c.value for c in at.caption if "Tick" in c.value)
    at.checkbox(key="bos").check().run()
    assert not at.exception
    expected = analyse_clm(bundled, "The capital of France is Paris.", add_bos=True)
    first = expected.input_ids[0]
    tokenizer = bundled.tokenizer
    assert first != tokenizer.bos_token_id  # SmolLM2-Instruct's bos_token, <|im_start|>, opens a chat turn
    said = next(c.value for c in at.caption if "start marker you asked for" in c.value)
    assert escape_markdown(boundary_token_note(tokenizer, first)) in said
    assert escape_markdown(f"{readable_token(tokenizer, first)} (id {first})") in said
    assert escape_markdown(f"put {readable_token(tokenizer, first)} before the text") in offer


def test_your_sentence_names_whose_length_limit_cut_the_text(bundled):
    from lmviz.lessons.causal_lm import MAX_TOKENS, length_limit

    at = open_page("app_pages/your_sentence.py")
    at.text_area(key="text").input("龘" * 1000).run(timeout=120)  # 3 000 tokens in 1 000 characters
    assert not at.exception
    said = next(i.value for i in at.info if "only the first" in i.value)
    own = bundled.model.config.max_position_embeddings
    assert own > MAX_TOKENS and length_limit(bundled.model)[0] == MAX_TOKENS
    assert escape_markdown(f"only the first {MAX_TOKENS:,} are scored (lmviz's limit per text, not the model's "
                           f"(the model itself takes {own:,})") in said


def test_length_limit_is_the_models_own_when_it_is_lower(tiny_loaded):
    from lmviz.lessons.causal_lm import analyse_clm, length_limit

    limit, why = length_limit(tiny_loaded.model)
    assert limit == tiny_loaded.model.config.n_positions == 64 and why.startswith("the model's limit")
    result = analyse_clm(tiny_loaded, "the cat sat on a mat " * 20)
    assert len(result.tokens) == 64 and result.truncated_from == 120


@pytest.mark.parametrize("text, message", [("   ", "nothing to score"), ("Hi", "no next token")])
def test_your_sentence_explains_text_with_nothing_to_predict(text, message):
    at = open_page("app_pages/your_sentence.py")
    at.text_area(key="text").input(text).run()
    assert not at.exception
    assert any(message in w.value for w in at.warning)
    assert not at.metric


def test_your_sentence_falls_back_to_the_bundled_model_when_the_hub_is_unreachable(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    at = open_page("app_pages/your_sentence.py")
    at.text_input(key="model_name").input("gpt2-nobody-has").run()
    assert not at.exception
    said = [unescaped(w.value) for w in at.warning]
    assert any("cannot be reached" in w and "This page uses SmolLM2-135M-Instruct" in w for w in said)
    assert at.metric  # the analysis still ran


def test_train_page_trains_a_few_steps_and_the_model_is_usable_elsewhere():
    at = open_page("app_pages/train.py")
    assert not at.exception
    at.number_input(key="train_steps").set_value(10)
    next(b for b in at.button if b.label == "Train").click().run(timeout=300)  # "Train"
    assert not at.exception and not at.error
    trainer = at.session_state["trainer"]
    assert trainer.step == 10 and trainer.objective == "clm"
    first, last = trainer.history[0].validation_loss, trainer.history[-1].validation_loss
    assert last < first  # the loss fell
    summary = " ".join(m.value for m in at.markdown)
    assert "10 steps" in summary and f"Validation loss: next token {fmt(last)}." in summary
    assert {m.label: m.value for m in at.metric}["Validation loss: next token"] == fmt(last)
    assert any("→" in t.value for t in at.text)  # the model's guesses are shown

    at.switch_page("app_pages/your_sentence.py").run()
    at.toggle(key="use_trained").set_value(True).run()
    assert not at.exception
    assert any("your model from the Train page" in c.value for c in at.caption)
    assert at.metric


def test_train_page_draws_masked_lm_and_next_sentence_apart():
    import json

    at = open_page("app_pages/train.py")
    at.selectbox(key="train_objective").set_value("mlm+nsp").run()
    at.number_input(key="train_steps").set_value(10)
    next(b for b in at.button if b.label == "Train").click().run(timeout=300)
    assert not at.exception and not at.error
    last = at.session_state["trainer"].history[-1].validation
    summary = " ".join(m.value for m in at.markdown)
    assert (f"Validation loss: masked LM {fmt(last['masked LM'])}, next sentence {fmt(last['next sentence'])} "
            f"(sum {fmt(sum(last.values()))}, the number training lowers)") in summary
    figure = json.loads(at.get("plotly_chart")[-1].proto.spec)
    titles = [a["text"] for a in figure["layout"]["annotations"]] + [t.get("name", "") for t in figure["data"]]
    assert titles[:2] == ["masked LM loss", "next sentence loss"] and any(t.startswith("uniform guess: ln 2")
                                                                          for t in titles)
    shown = summary + " ".join(c.value for c in at.caption)
    assert "floor" not in shown and "lowest loss any model" not in shown
    assert not any("own entropy" in t for t in titles)  # not a bound for a masked LM


def test_train_page_refuses_too_little_pasted_text():
    at = open_page("app_pages/train.py")
    at.radio(key="train_source").set_value("paste text").run()
    at.text_area(key="train_text").input("One sentence. Two sentences.").run()
    next(b for b in at.button if b.label == "Train").click().run()
    assert not at.exception
    assert any("at least 40 sentences" in e.value for e in at.error)


def test_home_page_links_every_other_page():
    at = AppTest.from_file(APP, default_timeout=60).run()
    linked = {link.proto.page for link in at.get("page_link")}
    registered = {step.url_path for step in PATH} | set(re.findall(r'url_path="([^"]+)"', Path(APP).read_text()))
    assert linked == registered


def test_every_page_file_is_registered_and_so_tested():
    """PAGES is read from app.py: a page file that app.py does not register would be neither in the app
    nor in the tests above. (A registered page whose file is missing fails
    test_every_page_opens_without_an_exception.)"""
    files = sorted(f"app_pages/{p.name}" for p in (Path(APP).parent / "app_pages").glob("*.py"))
    assert sorted(PAGES) == files


def test_your_sentence_shows_markup_and_odd_text_as_plain_tokens(bundled):
    from lmviz.lessons.causal_lm import analyse_clm

    text = "**bold** $x^2$ <script>alert(1)</script> [x](y) :red[b] \u202eevil 日本"
    at = open_page("app_pages/your_sentence.py")
    at.text_area(key="text").input(text).run()
    assert not at.exception and not at.error
    expected = analyse_clm(bundled, text)
    chips = " ".join(f":gray-background[{escape_markdown(t)}]" for t in expected.tokens)
    assert any(m.value == chips for m in at.markdown)
    # the right-to-left override never reaches the page as a character that would reverse the text
    assert not any("\u202e" in m.value for m in at.markdown)


def test_your_sentence_top_k_on_demand(bundled):
    """A column per guess, each token in quotes: in one cell, "“,” 0.12, “.” 0.10" read without quotes as separators
    (the teacher's rehearsal), and the one column was cut at 1280 px."""
    from lmviz.lessons.causal_lm import analyse_clm

    text = "Hello, world, this, is, a list."  # comma tokens among the labels and the guesses
    at = open_page("app_pages/your_sentence.py")
    at.text_area(key="text").input(text).run()
    at.toggle(key="sentence_top").set_value(True).run()
    assert not at.exception
    table = next(t.value for t in at.table if "guess 1" in t.value.columns)  # an HTML table, whose cells wrap
    table = table.rename(columns=unescaped).map(lambda c: unescaped(c) if isinstance(c, str) else c)  # (Markdown)
    expected = analyse_clm(bundled, text)
    assert table["label (next token)"].tolist() == [r.target_token for r in expected.rows]
    assert list(table.columns[3:]) == [f"guess {k}" for k in range(1, 6)]
    for k in range(5):
        assert table[f"guess {k + 1}"].tolist() == [
            f"“{r.top_k[k][0]}” {fmt_prob(r.top_k[k][1])}" for r in expected.rows]
    assert any(cell.startswith("“,” ") for column in table.columns[3:] for cell in table[column])


def test_masked_lm_page_matches_the_library_and_rerolls():
    from lmviz.lessons.bert import analyse_mlm
    from lmviz.models.loading import load_bert

    at = open_page("app_pages/masked_lm.py")
    assert not at.exception and not at.error
    text = at.text_area(key="mlm_text").value
    expected = analyse_mlm(load_bert(), text, seed=0)
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["Masked-LM loss"] == fmt(expected.loss)
    assert metrics["Positions selected (they count)"] == str(sum(r.label != -100 for r in expected.rows))
    tokenizer = load_bert().tokenizer
    ids = tokenizer(text)["input_ids"]
    assert metrics["Tokens that could be selected"] == str(sum(i not in tokenizer.all_special_ids for i in ids))
    table = at.dataframe[0].value  # first, only the positions that count
    assert table["position"].tolist() == [r.position for r in expected.rows if r.label != -100]
    assert table["-log p"].tolist() == [fmt(r.nll) for r in expected.rows if r.label != -100]
    at.toggle(key="mlm_only_selected").set_value(False).run()
    table = at.dataframe[0].value
    assert table["branch"].tolist() == [r.branch.words for r in expected.rows]
    assert table["label"].tolist() == [r.label for r in expected.rows]
    guesses = at.dataframe[1].value  # the top 5, a column per guess, at the selected positions
    selected = [r for r in expected.rows if r.label != -100]
    assert guesses["position"].tolist() == [r.position for r in selected]
    assert list(guesses.columns[2:]) == [f"guess {k}" for k in range(1, 6)]
    for k in range(5):
        assert guesses[f"guess {k + 1}"].tolist() == [f"“{r.top_k[k][0]}” {fmt_prob(r.top_k[k][1])}"
                                                    for r in selected]
    checks = at.dataframe[2].value["loss"].tolist()
    assert checks == [fmt(expected.loss, CHECK_DIGITS), fmt(expected.loss_model, CHECK_DIGITS)]
    at.button(key="mlm_reroll").click().run()
    assert at.number_input(key="mlm_seed").value == 1
    rerolled = analyse_mlm(load_bert(), text, seed=1)
    assert at.dataframe[0].value["branch"].tolist() == [r.branch.words for r in rerolled.rows]


def test_masked_lm_page_says_where_random_tokens_come_from():
    from lmviz.models.loading import load_bert

    at = open_page("app_pages/masked_lm.py")
    tokenizer = load_bert().tokenizer  # the page's model where bert-base-uncased is not cached
    specials = set(tokenizer.all_special_ids) | {tokenizer.mask_token_id}
    said = " ".join(m.value for m in at.markdown)
    assert f"from the {len(tokenizer) - len(specials):,} ids of this vocabulary that are not special" in said
    assert f"all {len(tokenizer):,} ids of the tokenizer" in said
    assert "max(1, round(0.15 × n))" in said


def test_masked_lm_page_bad_inputs():
    at = open_page("app_pages/masked_lm.py")
    at.text_area(key="mlm_text").input("anna").run()
    at.slider(key="mlm_rate").set_value(0.0).run()
    assert not at.exception
    assert any("No position was selected" in w.value for w in at.warning)
    at.text_area(key="mlm_text").input("bob")  # typed as the button is clicked: the text in the box is masked
    [b for b in at.button if b.label == "Mask one position"][0].click().run()
    assert not at.exception and at.metric and not any("No position was selected" in w.value for w in at.warning)
    # 95 % [MASK] + 10 % random cannot be: random is cut to the 5 % left, said next to the inputs, and the page
    # still shows its result (before, any single edit blanked the page with an error)
    at.number_input(key="mlm_share_0").set_value(95).run()
    assert not at.exception and not at.error and at.metric
    assert any("95 % + 10 % is more than 100 %" in w.value and "random token 5 %" in w.value for w in at.warning)
    assert any(m.value.startswith("kept (%)") and "**0** = 100 − 95 − 5" in m.value for m in at.markdown)


def test_next_sentence_page_shows_both_losses_and_the_convention():
    at = open_page("app_pages/next_sentence.py")
    assert not at.exception and not at.error
    checks = [float(v) for v in at.dataframe[1].value["loss"].tolist()]
    assert len(checks) == 4 and max(checks) - min(checks) < 1e-5  # four ways, one number
    assert any("0 means B follows A" in i.value for i in at.info)
    # the pinned headline: p(B follows A) as torch's softmax of the head's own logits gives it
    import torch

    from lmviz.lessons.bert import analyse_nsp
    from lmviz.models.loading import load_bert

    pair = analyse_nsp(load_bert(), at.text_input(key="nsp_a").value, at.text_input(key="nsp_b").value, True)
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["p(B follows A)"] == fmt_prob(torch.softmax(torch.tensor(pair.logits), -1)[0].item())
    assert metrics["Next-sentence loss"] == fmt(pair.loss_torch)
    at.text_input(key="nsp_b").input(" ").run()
    assert any("needs two sentences" in w.value for w in at.warning)


def test_bert_loss_page_total_equals_the_models_own():
    at = open_page("app_pages/bert_loss.py")
    assert not at.exception and not at.error
    checks = at.dataframe[0].value["loss"].tolist()
    assert checks[0] == checks[1]
    at.slider(key="bert_nsp_weight").set_value(0.0).run()
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["Total"] == metrics["Masked-LM loss"]


def test_a_link_cannot_load_a_model_outside_the_allowed_list(monkeypatch):
    monkeypatch.setenv("LMVIZ_ALLOWED_MODELS", "SmolLM2-135M-Instruct")
    at = AppTest.from_file(APP, default_timeout=60)
    at.query_params["model"] = "/etc"
    at.run()
    at.switch_page("app_pages/your_sentence.py").run()
    assert not at.exception
    assert at.selectbox(key="model_name").value == "SmolLM2-135M-Instruct"
    assert any("does not offer" in i.value for i in at.info)
    assert at.metric
    # nor choose another dtype: a second copy of the model in float32 would double its memory
    assert not [box for box in at.selectbox if box.label == "Weights dtype"]
    assert any("Weights: float32, as this deployment is set up." in c.value for c in at.caption)


def test_a_bert_trained_on_the_train_page_can_be_used_on_the_masked_lm_page():
    at = open_page("app_pages/train.py")
    at.selectbox(key="train_objective").set_value("mlm").run()
    at.number_input(key="train_steps").set_value(10)
    next(b for b in at.button if b.label == "Train").click().run(timeout=300)
    assert not at.exception and at.session_state["trainer"].objective == "mlm"
    at.switch_page("app_pages/masked_lm.py").run()
    at.selectbox(key="bert_choice").set_value("your BERT from the Train page").run()
    assert not at.exception and not at.error
    assert any("trained in this session for 10 steps" in c.value for c in at.caption)
    assert at.metric


def html_of(at: AppTest, css_class: str) -> str:
    """The body of the one st.html element whose outer element has ``css_class``."""
    [body] = [h.value for h in at.html if f'class="{css_class}"' in h.value]
    return body


def test_your_sentence_writes_each_tokens_loss_on_it_escaped(bundled):
    import html

    from lmviz.figures.palettes import loss_colour
    from lmviz.lessons.causal_lm import analyse_clm

    text = "I love <script>alert(1)</script> dogs $x$ **not** cats \u202eevil"
    at = open_page("app_pages/your_sentence.py")
    at.text_area(key="text").input(text).run()
    assert not at.exception and not at.error
    expected = analyse_clm(bundled, text)
    sentence = html_of(at, "lmviz-sentence")
    assert re.findall(r'class="lmviz-token"[^>]*>(.*?)</span>', sentence) == [
        html.escape(r.target_token) for r in expected.rows]
    assert re.findall(r'class="lmviz-nll"[^>]*>(.*?)</span>', sentence) == [fmt(r.nll) for r in expected.rows]
    assert re.findall(r"background:(#[0-9A-F]{6})", sentence) == [loss_colour(r.nll) for r in expected.rows]
    assert "<script" not in sentence and "&lt;" in sentence and "\u202e" not in sentence
    legend = html_of(at, "lmviz-legend")
    assert "low = likely" in legend and "high = surprising" in legend


def test_masked_lm_page_marks_each_branch_by_more_than_colour():
    import html

    from lmviz.lessons.bert import analyse_mlm
    from lmviz.models.loading import load_bert

    at = open_page("app_pages/masked_lm.py")
    at.slider(key="mlm_rate").set_value(1.0).run()
    at.number_input(key="mlm_share_0").set_value(40).run()
    at.number_input(key="mlm_share_1").set_value(30).run()
    assert not at.exception and not at.error and not at.warning
    assert any("**30** = 100 − 40 − 30" in m.value for m in at.markdown)  # kept follows the two inputs
    text = at.text_area(key="mlm_text").value
    expected = analyse_mlm(load_bert(), text, seed=0, mask_prob=1.0, random_replace_prob=0.3, keep_original_prob=0.3)
    assert {r.branch.words for r in expected.rows} == {"not selected", "[MASK]", "random token", "kept"}
    at.toggle(key="mlm_only_selected").set_value(False).run()
    assert at.dataframe[0].value["branch"].tolist() == [r.branch.words for r in expected.rows]
    marks = {"not selected": "{shown}", "[MASK]": "{shown}", "random token": "{token}→{shown}", "kept": "✓ {shown}"}
    marks = {r.branch: marks[r.branch.words] for r in expected.rows}
    chips = re.findall(r'<span style="([^"]*)">(.*?)</span>', html_of(at, "lmviz-sentence"))
    assert [said for _, said in chips] == [
        html.escape(marks[r.branch].format(token=r.token, shown=r.shown)) for r in expected.rows]
    borders = {r.branch: re.search(r"border:([^;]*)", style).group(1) for r, (style, _) in zip(expected.rows, chips)}
    assert len(set(borders.values())) == 4  # one border per branch: not colour alone
    legend = html_of(at, "lmviz-legend")
    for branch, border in borders.items():
        assert f"border:{border}" in legend and f"{html.escape(branch.words)}: " in legend


def test_your_sentence_puts_its_loss_on_a_scale(bundled):
    """Beside the loss: a uniform guess's loss and the same model on plain English; and what the start
    token changes at the beginning of the text, with this text's own numbers."""
    from lmviz.lessons.causal_lm import REFERENCE_TEXT, analyse_clm

    at = open_page("app_pages/your_sentence.py")
    metrics = {m.label: m.value for m in at.metric}
    vocabulary = bundled.model.config.vocab_size
    assert metrics["Uniform guess: ln V"] == fmt(math.log(vocabulary))
    assert f"V = {vocabulary:,} tokens" in next(m for m in at.metric if m.label == "Uniform guess: ln V").help
    assert metrics["Plain English"] == fmt(analyse_clm(bundled, REFERENCE_TEXT).loss)
    text = "The capital of France is Paris."
    without, with_start = analyse_clm(bundled, text), analyse_clm(bundled, text, add_bos=True)
    for bos in (False, True):  # the same sentence either way: it compares the two
        at.checkbox(key="bos").set_value(bos).run()
        said = next(c.value for c in at.caption if "Without a start token" in c.value)
        assert escape_markdown(f"predicted from {without.tokens[0]} alone: -log p = {fmt(without.rows[0].nll)}") in said
        assert escape_markdown(f"(-log p = {fmt(with_start.rows[0].nll)}), and {without.rows[0].target_token} "
                               f"costs {fmt(with_start.rows[1].nll)}.") in said
        rest = [r.nll for r in without.rows[1:]]
        assert escape_markdown(f"costs {fmt(sum(rest) / len(rest))} per token") in said
        assert {m.label: m.value for m in at.metric}["Plain English"] == fmt(
            analyse_clm(bundled, REFERENCE_TEXT, add_bos=bos).loss)


def test_a_retrained_model_is_never_served_the_previous_models_results():
    """Same name, same step count, new weights: the cached analysis must be the new model's own."""
    from lmviz.lessons.causal_lm import analyse_clm

    at = open_page("app_pages/train.py")
    losses = []
    for attempt in range(2):
        if attempt:
            at.switch_page("app_pages/train.py").run()
            next(b for b in at.button if b.label == "Start over").click().run()
            at.selectbox(key="train_preset").set_value("small").run()  # other weights than the first model's
        at.number_input(key="train_steps").set_value(10)
        next(b for b in at.button if b.label == "Train").click().run(timeout=300)
        trained = at.session_state["trained_clm"]
        at.switch_page("app_pages/your_sentence.py").run()
        at.toggle(key="use_trained").set_value(True).run()
        assert not at.exception
        shown = {m.label: m.value for m in at.metric}["Loss: mean(-log p)"]
        assert shown == fmt(analyse_clm(trained, "The capital of France is Paris.").loss)
        losses.append(shown)
    assert losses[0] != losses[1]


def test_train_page_says_why_next_sentence_training_cannot_start_on_one_pasted_story():
    at = open_page("app_pages/train.py")
    at.radio(key="train_source").set_value("paste text").run()
    at.text_area(key="train_text").input(" ".join(f"Sentence number {i} is here." for i in range(45))).run()
    at.selectbox(key="train_objective").set_value("mlm+nsp").run()
    next(b for b in at.button if b.label == "Train").click().run()
    assert not at.exception
    assert any("no sentence from elsewhere" in e.value and "train the masked LM alone" in e.value for e in at.error)
