"""On a 1280×720 projector: after each control a teacher uses, the number it changed is on screen
with the control, showing the new value; presentation mode's text is large enough for the back row."""

import re
from urllib.parse import quote

from playwright.sync_api import expect

from lmviz.core.numbers import fmt
from lmviz.lessons.causal_lm import analyse_clm
from scripts.live_server import environment_set, running_server, type_into_editor
from tests.e2e.helpers import ARTIFACTS, BODY_TEXT_PX, assert_no_error, metric, settle, wait_until_still
from tests.helpers import by_hand


def visible_value(tab, label: str) -> str:
    """The metric's value, once it lies wholly inside the viewport (waiting for it: the layout still
    moves while the page's charts and tables draw)."""
    value = metric(tab, label)
    expect(value).to_be_in_viewport(ratio=1, timeout=120_000)
    return value.inner_text().strip()


def changed(tab, label: str, before: str) -> str:
    """Wait until the metric shows something other than ``before``; return it, checked on screen."""
    tab.wait_for_function(
        """([label, before]) => [...document.querySelectorAll("[data-testid='stMetric']")].some(m =>
             m.querySelector("[data-testid='stMetricLabel']")?.innerText.trim() === label &&
             m.querySelector("[data-testid='stMetricValue']")?.innerText.trim() !== before)""",
        arg=[label, before], timeout=180_000)
    settle(tab)
    return visible_value(tab, label)


def open_at(tab, server, path: str, label: str) -> str:
    tab.goto(f"{server}/{path}")
    settle(tab)
    return visible_value(tab, label)


def scroll_to_bottom(tab) -> None:
    """Scroll to the bottom with the mouse wheel, and wait until the page is there (the wheel only starts
    the scroll). The main column scrolls, not the window; the page is far shorter than 20 000 px."""
    tab.mouse.move(700, 400)
    tab.mouse.wheel(0, 20_000)
    tab.wait_for_function("(main => main.scrollTop > 0 && main.scrollTop + main.clientHeight >= main.scrollHeight - 1)"
                          "(document.querySelector('[data-testid=\"stMain\"]'))")


def test_your_sentence_typed_linked_and_with_a_start_token(projector, server, bundled):
    loss = "Loss: mean(-log p)"
    first = open_at(projector, server, "sentence", loss)
    assert first == f"{analyse_clm(bundled, 'The capital of France is Paris.').loss:.5f}"
    box = projector.get_by_label("Your text")
    box.fill("Students type their own sentences in class.")
    box.press("Control+Enter")
    typed = changed(projector, loss, first)
    assert typed == f"{analyse_clm(bundled, 'Students type their own sentences in class.').loss:.5f}"
    projector.get_by_text("Start with a start-of-text token", exact=True).click()
    with_start = changed(projector, loss, typed)
    assert with_start == f"{analyse_clm(bundled, 'Students type their own sentences in class.', add_bos=True).loss:.5f}"
    scroll_to_bottom(projector)  # reading the tables far below: the loss stays pinned on screen
    assert visible_value(projector, loss) == with_start
    linked = open_at(projector, server, "sentence?text=" + quote("Bananas are yellow."), loss)
    assert linked == f"{analyse_clm(bundled, 'Bananas are yellow.').loss:.5f}"
    assert_no_error(projector)


def test_masked_lm_reroll_and_rate(projector, server):
    label = "Masked-LM loss"
    first = open_at(projector, server, "masked-lm", label)
    projector.get_by_role("button", name="Re-roll: a new mask").click()
    rerolled = changed(projector, label, first)
    slider = projector.get_by_role("slider", name="Selection rate")
    slider.focus()
    for _ in range(20):
        slider.press("ArrowRight")
    changed(projector, label, rerolled)
    assert_no_error(projector)


def test_next_sentence_label_flip(projector, server):
    label = "Next-sentence loss"
    first = open_at(projector, server, "nsp", label)
    projector.get_by_text("no", exact=True).click()
    changed(projector, label, first)


def test_bert_loss_weight(projector, server):
    label = "Total"
    first = open_at(projector, server, "bert-loss", label)
    slider = projector.get_by_role("slider", name="NSP weight")
    slider.focus()
    slider.press("Home")  # weight 0: the total becomes the masked-LM loss
    total = changed(projector, label, first)
    assert total == visible_value(projector, "Masked-LM loss")


def test_batches_with_new_sentences(projector, server):
    label = "Batch loss (right padding)"
    first = open_at(projector, server, "batches", label)
    box = projector.get_by_label("Sentences, one per line (at most 8)")
    box.fill("A dog ran to the park.\nThe park was full of dogs.")
    box.press("Control+Enter")
    changed(projector, label, first)
    assert_no_error(projector)


def test_training_twenty_steps(projector, server):
    projector.goto(f"{server}/train")
    settle(projector)
    projector.get_by_label("Steps").fill("20")
    projector.get_by_role("button", name="Train", exact=True).click()
    projector.wait_for_selector("text=20 steps in", timeout=180_000)
    settle(projector)
    assert visible_value(projector, "Step") == "20"
    visible_value(projector, "Validation loss: next token")




def sidebar_width(tab) -> float:
    """The sidebar's width on screen: 0 once Streamlit has folded it (waiting until its fold or unfold has ended:
    no transition under way in it, and its box the same over a few frames)."""
    wait_until_still(tab, "[data-testid='stSidebar']")
    return tab.locator("[data-testid='stSidebar']").bounding_box()["width"]


def test_presentation_mode_is_large_and_stays_on(projector, server):
    projector.goto(f"{server}/sentence?present=1")
    settle(projector)
    assert projector.evaluate(BODY_TEXT_PX) >= 24
    projector.wait_for_selector(".js-plotly-plot .xtitle", timeout=60_000)
    chart = projector.evaluate("parseFloat(document.querySelector('.js-plotly-plot .xtitle').style.fontSize)")
    assert chart >= 18
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    projector.screenshot(path=str(ARTIFACTS / "sentence-presentation.png"))  # what the back row sees
    projector.get_by_test_id("stExpandSidebarButton").click()  # the sidebar is folded: open it, as a teacher does
    projector.get_by_role("link", name="Masked LM").click()  # the sidebar: same session, next page
    settle(projector)
    assert projector.evaluate(BODY_TEXT_PX) >= 24


def test_presentation_mode_folds_the_sidebar_with_a_way_back(projector, server):
    """At 1280 px an open sidebar takes 300 px from the numbers. Presentation mode folds it, from a link and from
    the switch, and again after a reload although it was opened by hand (Streamlit remembers that choice);
    Streamlit's own arrow opens it again, the switch in it."""
    projector.goto(f"{server}/toy")
    settle(projector)
    assert sidebar_width(projector) >= 250  # default mode: open
    projector.get_by_text("Presentation mode", exact=True).click()
    settle(projector)
    assert sidebar_width(projector) == 0
    projector.get_by_test_id("stExpandSidebarButton").click()  # the way back to the switch
    switch = projector.get_by_text("Presentation mode", exact=True)
    switch.scroll_into_view_if_needed()  # below the pages' links in the sidebar
    expect(switch).to_be_in_viewport()
    assert sidebar_width(projector) >= 250
    projector.reload()  # opened by hand, then F5: folded again
    settle(projector)
    assert sidebar_width(projector) == 0
    projector.goto(f"{server}/sentence?present=1")  # a link in presentation mode
    settle(projector)
    assert sidebar_width(projector) == 0


def test_presentation_mode_key_table_is_body_text_size(projector, server):
    """Your sentence's per-token table, the one its numbers come from: its text at least the body text's size
    (st.dataframe draws its cells on a canvas at 0.875 rem whatever the CSS says)."""
    projector.goto(f"{server}/sentence?present=1")
    settle(projector)
    body = projector.evaluate(BODY_TEXT_PX)
    table = projector.locator("[data-testid='stTable']", has_text="label (next token)")
    expect(table).to_have_count(1)
    table.scroll_into_view_if_needed()
    cells = table.evaluate("t => [...t.querySelectorAll('th, td')].map(c => parseFloat(getComputedStyle(c).fontSize))")
    assert cells and min(cells) >= body >= 24, (cells, body)
    projector.screenshot(path=str(ARTIFACTS / "sentence-presentation-table.png"))


# The size of a table's text: an st.table's smallest cell, or the font a glide grid (st.dataframe) draws its
# canvas with, which it also keeps in the CSS variable --gdg-base-font-style ("400 17.5px"; the th and td of its
# copy for screen readers are not what is drawn).
TABLE_TEXT_PX = """t => {
  if (t.dataset.testid === 'stTable')
    return Math.min(...[...t.querySelectorAll('th, td')].map(c => parseFloat(getComputedStyle(c).fontSize)));
  const grid = [...t.querySelectorAll('*')].find(e => e.style.getPropertyValue('--gdg-base-font-style'));
  return parseFloat(grid.style.getPropertyValue('--gdg-base-font-style').split(' ').pop());
}"""
# The first table of the main area after the heading that starts with ``heading``.
TABLE_UNDER = """heading => {
  const all = [...document.querySelectorAll('[data-testid=stMain] h3, [data-testid=stMain] [data-testid=stTable], '
                                            + '[data-testid=stMain] [data-testid=stDataFrame]')];
  return all.slice(all.findIndex(e => e.matches('h3') && e.innerText.startsWith(heading)) + 1)
            .find(e => !e.matches('h3'));
}"""


def test_presentation_mode_typed_text_and_toys_steps_are_body_text_size(projector, server):
    """What a student types (a text box, a number box, a check-yourself answer), and Toy example's "Step 1 and 2" and
    "Step 3", the tables the class plan shows: at least the body text's size (all were 17.5 px against 24)."""
    projector.goto(f"{server}/batches?present=1")
    settle(projector)
    body = projector.evaluate(BODY_TEXT_PX)
    boxes = {"text box": projector.get_by_label("Sentences, one per line (at most 8)"),
             "number box": projector.get_by_label("Sentences per micro-batch"),
             "check-yourself answer": projector.get_by_label("Your answer (a number)").first}
    for name, box in boxes.items():
        box.scroll_into_view_if_needed()
        typed = box.evaluate("e => parseFloat(getComputedStyle(e).fontSize)")
        assert typed >= body >= 24, (name, typed, body)
    projector.screenshot(path=str(ARTIFACTS / "batches-presentation-typed.png"))
    projector.goto(f"{server}/toy?present=1")
    settle(projector)
    body = projector.evaluate(BODY_TEXT_PX)
    for heading in ("Step 1 and 2", "Step 3"):
        table = projector.evaluate_handle(TABLE_UNDER, heading).as_element()
        table.scroll_into_view_if_needed()
        assert table.evaluate(TABLE_TEXT_PX) >= body >= 24, (heading, table.evaluate(TABLE_TEXT_PX), body)
    projector.screenshot(path=str(ARTIFACTS / "toy-presentation-step-3.png"))


def test_presentation_mode_survives_a_reload_and_the_lesson_links(projector, server):
    """Turned on with the switch, the mode is in the address: F5 keeps it, and so do the path's Next links."""
    projector.goto(f"{server}/toy")
    settle(projector)
    projector.get_by_text("Presentation mode", exact=True).click()
    settle(projector)
    expect(projector).to_have_url(re.compile(r"[?&]present=1"))
    projector.reload()
    settle(projector)
    assert projector.evaluate(BODY_TEXT_PX) >= 24
    next_link = projector.get_by_role("link", name="Next: Your sentence")
    assert "present=1" in next_link.get_attribute("href")
    next_link.click()
    settle(projector)
    expect(projector).to_have_url(re.compile(r"/sentence\?.*present=1"))
    projector.reload()
    settle(projector)
    assert projector.evaluate(BODY_TEXT_PX) >= 24


def test_without_presentation_mode_charts_are_still_readable(projector, server):
    projector.goto(f"{server}/sentence")
    settle(projector)
    projector.wait_for_selector(".js-plotly-plot .xtitle", timeout=60_000)
    assert projector.evaluate("parseFloat(document.querySelector('.js-plotly-plot .xtitle').style.fontSize)") >= 14


def test_toy_edit_and_reset(projector, server):
    label = "Loss: mean(-log p)"
    assert open_at(projector, server, "toy", label) == "0.86302"
    projector.locator("[data-testid='stDataFrame']").nth(2).scroll_into_view_if_needed()  # the editor
    type_into_editor(projector, 0, "I", "0.0004")
    edited = changed(projector, label, "0.86302")
    assert edited == fmt(by_hand({0: {"I": 0.0004}})["loss"])
    projector.get_by_role("button", name="Reset to the article's numbers").click()
    assert changed(projector, label, edited) == "0.86302"


def test_a_text_over_the_servers_limit_is_refused_on_screen_with_the_box(browser):
    """A server with a small LMVIZ_CHARS_PER_MINUTE: a second new text in the same minute gets the sentence in
    the pinned panel, in view with the box at 1280×720, and the page stays usable."""
    first = "The students in the morning class read every sentence aloud, one by one."
    second = "Then the teacher asked them which word surprised the model most of all."
    with environment_set({"LMVIZ_CHARS_PER_MINUTE": "100"}), running_server(ARTIFACTS / "limited-server.log") as url:
        context = browser.new_context(viewport={"width": 1280, "height": 720})
        tab = context.new_page()
        tab.goto(f"{url}/sentence?text={quote(first)}")
        visible_value(tab, "Loss: mean(-log p)")  # the first text is scored
        settle(tab)
        box = tab.get_by_label("Your text")
        box.fill(second)
        box.press("Control+Enter")
        refused = tab.get_by_text("characters to be scored in the last minute")
        expect(refused).to_be_in_viewport(ratio=1, timeout=120_000)
        expect(box).to_be_in_viewport()
        assert f"You have sent {len(first)} characters" in refused.inner_text()
        assert_no_error(tab)
        context.close()
