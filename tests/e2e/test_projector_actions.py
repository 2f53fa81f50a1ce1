"""On a 1280×720 projector, Train and Next token: the result of a click on screen with the button that made it,
numbers that stay put once training stops, a true next word cleared with the text it was chosen for, a text typed
and continued in one click, and a key table readable at the back."""

import io
import math
import re
from urllib.parse import quote

import pytest
import torch
from PIL import Image
from playwright.sync_api import expect

from lmviz.core.labels import IGNORE_INDEX
from lmviz.core.numbers import fmt
from lmviz.core.text import readable_token
from lmviz.lessons.next_token import if_true_next, next_token_logits
from lmviz.lessons.training import Trainer, make_batch
from tests.e2e.helpers import ScriptRuns, assert_no_error, metric, settle, type_the_true_next_word, wait_until_still

MODES = {"default": "", "presentation": "?present=1"}
VALIDATION = "Validation loss: next token"


def top(tab, selector: str, edge: str = "top") -> float:
    return tab.evaluate(f"document.querySelector({selector!r}).getBoundingClientRect().{edge}")


def panel_bottom(tab) -> float:
    return top(tab, ".st-key-result-panel", "bottom")


def scroll_main(tab, pixels: float) -> None:
    """Scroll the main column (it scrolls, not the window), and wait until the page has laid out what the scroll
    moved: the column's scroll position and size, and its box, the same over a few frames, nothing in it animating."""
    tab.evaluate("d => document.querySelector('[data-testid=stMain]').scrollBy(0, d)", pixels)
    wait_until_still(tab, "[data-testid='stMain']")


def scroll_under_panel(tab, control) -> None:
    """Scroll as far as a teacher does to have ``control`` on screen: until the pinned panel sticks under the
    header and the control is just under the panel (Streamlit's 1 rem gap between elements)."""
    scroll_main(tab, top(tab, ".st-key-result-panel") - top(tab, "[data-testid=stHeader]", "bottom"))
    gap = control.evaluate("e => e.getBoundingClientRect().top") - panel_bottom(tab)
    scroll_main(tab, gap - 20)
    gap = control.evaluate("e => e.getBoundingClientRect().top") - panel_bottom(tab)
    assert 0 <= gap <= 30, f"the control is {gap:.0f} px from the pinned panel"


def wholly_on_screen(tab, *elements) -> None:
    """Each element inside the viewport, and none of it under the pinned panel."""
    for element in elements:
        expect(element).to_be_in_viewport(ratio=1, timeout=60_000)
        assert element.bounding_box()["y"] >= panel_bottom(tab) - 1


def untrained_validation_loss() -> tuple[float, int]:
    """What a fresh Train model for the page's first settings (causal LM, tiny, lmviz's stories, seed 0) loses on
    its validation batch, by GPT2LMHeadModel's own loss, not lmviz's; and V, from the model's output layer."""
    trainer = Trainer("clm", "tiny")
    batch = make_batch("clm", trainer.validation, trainer.tokenizer, seed=10**6)
    labels = batch.input_ids.masked_fill(batch.attention_mask == 0, IGNORE_INDEX)
    trainer.model.eval()
    with torch.no_grad():
        loss = trainer.model(input_ids=batch.input_ids, attention_mask=batch.attention_mask, labels=labels).loss
    return loss.item(), trainer.model.get_output_embeddings().out_features


@pytest.mark.parametrize("mode", MODES)
def test_train_opens_on_the_untrained_models_loss_next_to_ln_v(projector, server, mode):
    projector.goto(f"{server}/train{MODES[mode]}")
    settle(projector)
    loss, size = untrained_validation_loss()
    start = metric(projector, VALIDATION)
    expect(start).to_be_in_viewport(ratio=1)  # on the first screen, before anyone presses Train
    assert float(start.inner_text()) == pytest.approx(loss, abs=2e-5)
    assert metric(projector, "Step").inner_text() == "0"
    uniform = metric(projector, f"Uniform guess: ln V = ln {size}")
    expect(uniform).to_be_in_viewport(ratio=1)
    assert uniform.inner_text() == fmt(math.log(size))
    assert_no_error(projector)


@pytest.mark.parametrize("mode", MODES)
def test_train_draws_the_curve_beside_the_button(projector, server, mode):
    projector.goto(f"{server}/train{MODES[mode]}")
    settle(projector)
    projector.get_by_label("Steps").fill("20")
    button = projector.get_by_role("button", name="Train", exact=True)
    button.click()
    projector.wait_for_selector("text=20 steps in", timeout=180_000)
    settle(projector)
    assert metric(projector, "Step").inner_text() == "20"
    scroll_under_panel(projector, button)
    wholly_on_screen(projector, button, projector.locator(CURVE).last)  # the copy on top
    assert_no_error(projector)


CURVE = "[data-testid='stMain'] .js-plotly-plot"  # the curve: the Train page's only chart (drawn in two copies)
# Whether the curve is on screen, asked of the page at every frame it paints, between two Playwright calls: a chart
# that has drawn its lines and is not hidden (Streamlit hides a new chart until it has measured it). A chart replaced
# by an empty element, or mounted and not yet drawn, does not count.
WATCH_THE_CURVE = """() => {
  window.curveSamples = [];
  window.curveWatching = true;
  const shown = () => [...document.querySelectorAll("%s")].some(plot =>
      plot.querySelector('.scatterlayer .trace path.js-line') && getComputedStyle(plot).visibility !== 'hidden');
  const frame = () => { window.curveSamples.push(shown()); if (window.curveWatching) requestAnimationFrame(frame); };
  requestAnimationFrame(frame);
}""" % CURVE


def inked(png: bytes) -> int:
    """How many pixels of a screenshot are darker than the page's light background: axes, ticks, lines."""
    return sum(value < 200 for value in Image.open(io.BytesIO(png)).convert("L").getdata())


def test_the_curve_stays_on_screen_while_it_updates(projector, server):
    """Issue 39: in 3 of 8 screenshots during a run the curve was blank: each update emptied the chart's
    placeholder, then drew a new chart into it, which the browser draws from scratch, and the first drawing of a run
    came only after 5 steps."""
    projector.goto(f"{server}/train")
    settle(projector)
    projector.get_by_label("Steps").fill("200")
    expect(projector.locator(CURVE).last).to_be_visible()  # step 0's, before Train
    box = projector.locator(CURVE).last.bounding_box()  # the part on screen, beside the controls: what the room sees
    on_screen = {"x": box["x"], "y": box["y"], "width": box["width"], "height": min(box["height"], 720 - box["y"])}
    drawn = inked(projector.screenshot(clip=on_screen))
    projector.evaluate(WATCH_THE_CURVE)
    shots = []
    projector.get_by_role("button", name="Train", exact=True).click()
    while not projector.get_by_text("200 steps in").count():
        shots.append(inked(projector.screenshot(clip=on_screen)))
    samples = projector.evaluate("() => { window.curveWatching = false; return window.curveSamples; }")
    assert len(samples) > 100 and len(shots) >= 8, (len(samples), len(shots))
    assert all(samples), f"the curve was off the screen in {samples.count(False)} of {len(samples)} samples"
    blank = [ink for ink in shots if ink < drawn / 2]
    assert not blank, f"{len(blank)} of {len(shots)} screenshots show no curve (ink {blank}, step 0's {drawn})"
    assert_no_error(projector)


def shown_numbers(tab) -> tuple[str, str, str]:
    """The panel's step and validation loss, and the summary's step count."""
    summary = tab.locator("[data-testid='stMain'] p", has_text=re.compile(r"\d+ steps in \d+ s\.")).inner_text()
    return metric(tab, "Step").inner_text(), metric(tab, VALIDATION).inner_text(), re.search(r"(\d+) steps", summary)[1]


def test_the_numbers_shown_after_stop_never_change(projector, server):
    """A number on the page changes only in a run of it: each look is taken once a run that could change the
    numbers has finished (ScriptRuns), Stop's own, and then another's."""
    runs = ScriptRuns(projector)
    projector.goto(f"{server}/train")
    settle(projector)
    projector.get_by_label("Steps").fill("2000")
    projector.get_by_role("button", name="Train", exact=True).click()
    projector.wait_for_function(
        """() => [...document.querySelectorAll("[data-testid='stMetric']")].some(m =>
             m.querySelector("[data-testid='stMetricLabel']")?.innerText.trim() === 'Step' &&
             +m.querySelector("[data-testid='stMetricValue']").innerText >= 25)""", timeout=180_000)
    # in the page: while a run goes on, Streamlit's header has a Stop button of its own
    stop = projector.locator("[data-testid='stMain']").get_by_role("button", name="Stop", exact=True)
    ran = runs.finished  # the Train run is going: Stop cuts it short (not counted), and its own run follows
    stop.click()
    projector.wait_for_selector("text=steps in", timeout=60_000)
    settle(projector)
    shown = shown_numbers(projector)
    assert shown[0] == shown[2]  # the panel's step is the summary's: one run drew both
    runs.wait_for_finished(ran + 1)  # Stop's run over, as the server says: every number it drew has come
    assert shown_numbers(projector) == shown
    ran = runs.finished
    stop.click()  # another run of the page: it reads the model again, which nothing trains any more
    runs.wait_for_finished(ran + 1)  # that run started and finished: a number it changed has come
    settle(projector)
    assert shown_numbers(projector) == shown
    assert_no_error(projector)


@pytest.mark.parametrize("mode", MODES)
def test_the_generated_text_is_on_screen_with_the_generate_buttons(projector, server, mode):
    projector.goto(f"{server}/next-token{MODES[mode]}")
    settle(projector)
    greedy = projector.get_by_role("button", name="Append the greedy token, ␣Paris")
    scroll_under_panel(projector, greedy)
    greedy.click()
    expect(projector.get_by_label("The beginning of a text")).to_have_value("The capital of France is Paris",
                                                                            timeout=120_000)
    settle(projector)
    generated = projector.locator(".st-key-next-generated")
    expect(generated.get_by_test_id("stText")).to_have_text("The capital of France is Paris")
    expect(generated).to_contain_text("Appended ␣Paris (greedy).")
    sample = projector.get_by_role("button", name=re.compile(r"^Sample a token"))
    wholly_on_screen(projector, generated, projector.get_by_role("button", name=re.compile("^Append the greedy")),
                     sample)
    assert_no_error(projector)


def test_a_true_next_word_is_cleared_when_a_token_is_appended(projector, server, bundled):
    """The teacher's rehearsal: "Lyon", typed as the true next word after "The capital of France is", was scored
    again after the greedy "␣Paris" was appended, as if it came next there too. Appending clears it, and says so
    beside the buttons."""
    prefix = "The capital of France is"
    tokenizer = bundled.tokenizer
    before = next_token_logits(bundled, prefix)
    greedy = int(before.logits.argmax())
    lyon = if_true_next(before, tokenizer, "Lyon")

    projector.goto(f"{server}/next-token?text={quote(prefix)}")
    settle(projector)
    type_the_true_next_word(projector, "Lyon")
    label = f"-log p({lyon.token}), T = 1"
    expect(metric(projector, label)).to_have_text(fmt(lyon.nll), timeout=120_000)
    # No wait for the run to end: the panel's metric is drawn before the buttons, so this click can land on the
    # last run's button, as a quick teacher's would, and the sentence below must still name the cleared token.
    projector.get_by_role("button", name=f"Append the greedy token, {readable_token(tokenizer, greedy)}").click()
    expect(projector.get_by_label("The beginning of a text")).to_have_value(prefix + tokenizer.decode([greedy]),
                                                                           timeout=120_000)
    settle(projector)
    expect(metric(projector, "Loss if the true next token is …")).to_have_text("choose one")
    expect(metric(projector, label)).to_have_count(0)
    said = projector.locator(".st-key-next-generated")
    expect(said).to_contain_text(f"The true next token you chose for the text before, {lyon.token}, is cleared")
    expect(said).to_be_in_viewport()
    expect(projector.get_by_label("The word that comes next")).to_have_count(0)
    assert_no_error(projector)


def test_next_tokens_key_table_is_body_text_size_in_presentation_mode(projector, server, bundled):
    projector.goto(f"{server}/next-token?present=1")
    settle(projector)
    table = projector.locator("[data-testid='stMain'] [data-testid='stTable']", has_text="logit z")
    expect(table).to_have_count(1, timeout=60_000)
    sizes = table.evaluate("""t => [parseFloat(getComputedStyle(t.querySelector('td')).fontSize),
        parseFloat(getComputedStyle(document.querySelector('[data-testid=stMain] [data-testid=stMarkdownContainer] p'))
                   .fontSize)]""")
    assert sizes[0] >= sizes[1] >= 24, sizes
    result = next_token_logits(bundled, "The capital of France is")
    top = result.logits.topk(3).indices.tolist()
    ids = table.locator("tbody tr").evaluate_all(
        "rows => rows.slice(0, 3).map(r => [...r.querySelectorAll('td')].map(c => c.innerText.trim()))")
    assert [int(row[2].replace(",", "")) for row in ids] == top  # rank, token, id: the model's own top three
    assert_no_error(projector)


def test_a_text_typed_then_append_clicked_at_once_continues_the_typed_text(projector, server, bundled):
    """A teacher types a sentence and clicks Append straight away: the click commits the box and lands on the
    button drawn for the old text. The typed sentence is continued; it was replaced by the old text continued."""
    typed = "My favourite animal is the"
    greedy = int(next_token_logits(bundled, typed).logits.argmax())
    projector.goto(f"{server}/next-token")
    settle(projector)
    projector.get_by_label("The beginning of a text").fill(typed)  # typed, not committed: no Ctrl+Enter, no blur
    projector.get_by_role("button", name="Append the greedy token, ␣Paris").click()
    expect(projector.get_by_label("The beginning of a text")).to_have_value(typed + bundled.tokenizer.decode([greedy]),
                                                                           timeout=120_000)
    settle(projector)
    expect(projector.locator(".st-key-next-generated")).to_contain_text(
        f"Appended {readable_token(bundled.tokenizer, greedy)} (greedy).")
    assert_no_error(projector)
