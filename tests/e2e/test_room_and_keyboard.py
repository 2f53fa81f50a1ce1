"""Issue 39's rehearsal, on screen at 1280×720: a glossary word shows its definition over the page, the lesson's tab
and place kept; the keyboard skips the folded sidebar and reaches the next lesson first; a dark browser gets the
dark theme with the pinned numbers readable, and the menu offers Light for a bright room; a chart saved as a PNG has
its title and no label cut at its edge."""

import io
import re
from collections import Counter

from PIL import Image
from playwright.sync_api import expect

from lmviz.app.chrome import BODY_PX, DEFINITION
from lmviz.course.glossary import TERMS, anchor
from lmviz.figures.palettes import contrast_ratio, relative_luminance
from tests.e2e.helpers import ARTIFACTS, settle

PROJECTOR = {"width": 1280, "height": 720}
# The element that has the keyboard's focus: its text (or name), whether it is in the sidebar, and its box.
FOCUSED = """(() => { const e = document.activeElement, box = e.getBoundingClientRect();
  return {text: (e.innerText || e.getAttribute('aria-label') || '').replace(/\\s+/g, ' ').trim(),
          sidebar: !!e.closest('[data-testid=stSidebar]'), left: box.left, top: box.top, right: box.right,
          bottom: box.bottom}; })()"""
# The colours a dark or a light theme must keep together: the app's background, the pinned panel's and the header's
# (which cover the page scrolling under them), and the headline numbers' text.
COLOURS = """(() => { const bg = s => getComputedStyle(document.querySelector(s)).backgroundColor;
  return {app: bg('[data-testid=stApp]'), panel: bg('.st-key-result-panel'), header: bg('[data-testid=stHeader]'),
          number: getComputedStyle(document.querySelector('[data-testid=stMetricValue]')).color}; })()"""


def hex_colour(css: str) -> str:
    red, green, blue = (int(v) for v in re.findall(r"\d+", css)[:3])
    return f"#{red:02X}{green:02X}{blue:02X}"


def test_a_glossary_word_shows_its_definition_over_the_page(projector, server):
    """The word's definition opens beside it, in the same tab at the same place (a link opened a new tab); it links
    to the Glossary page, saying that is a new tab; Escape closes it and gives the focus back to the word, and the
    keyboard's Enter opens it as a click does. In presentation mode its text is the body text's size."""
    projector.goto(f"{server}/toy?present=1")
    settle(projector)
    address = projector.url
    word = projector.locator("[data-testid=stMain] a", has_text=re.compile("^labels$")).first
    word.click()
    definition = projector.locator(f"#{DEFINITION}")
    expect(definition).to_be_visible()
    expect(definition).to_contain_text(TERMS["label"][1])
    assert definition.get_attribute("aria-label") == "label"
    assert len(projector.context.pages) == 1 and projector.url == address  # the lesson's own tab, unmoved
    expect(definition).to_be_in_viewport(ratio=1)
    assert definition.locator("p").evaluate("e => parseFloat(getComputedStyle(e).fontSize)") >= BODY_PX
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    projector.screenshot(path=str(ARTIFACTS / "glossary-definition.png"))
    more = definition.get_by_role("link", name="In the Glossary (a new tab)")
    assert more.get_attribute("target") == "_blank"
    assert more.get_attribute("href").endswith(f"/glossary?present=1#{anchor('label')}")
    projector.keyboard.press("Escape")
    expect(definition).to_have_count(0)
    assert word.evaluate("e => e === document.activeElement")
    projector.keyboard.press("Enter")
    expect(definition).to_be_visible()
    projector.mouse.click(640, 690)  # elsewhere on the page: it closes
    expect(definition).to_have_count(0)


def test_the_keyboard_skips_the_folded_sidebar_and_reaches_the_next_lesson_first(projector, server):
    """In presentation mode the sidebar is folded: Tab went through its 15 links and switches, off the screen, before
    the page. Now it reaches the next lesson's link within a few presses, shown while it has the focus, and Enter
    opens that lesson, still in presentation mode. Opened again, the sidebar's links take the focus."""
    projector.goto(f"{server}/toy?present=1")
    settle(projector)
    focused = []
    for _ in range(8):
        projector.keyboard.press("Tab")
        focused.append(projector.evaluate(FOCUSED))
        if focused[-1]["text"].endswith("Next lesson: Your sentence"):
            break
    assert not [f for f in focused if f["sidebar"]], focused
    reached = focused[-1]
    assert reached["text"].endswith("Next lesson: Your sentence"), focused
    assert 0 <= reached["left"] < reached["right"] <= 1280 and 0 <= reached["top"] < reached["bottom"] <= 720
    projector.screenshot(path=str(ARTIFACTS / "next-lesson-link-focused.png"))
    projector.keyboard.press("Enter")
    projector.wait_for_url(re.compile(r"/sentence\?(.*&)?present=1"))
    settle(projector)
    expect(projector.get_by_role("heading", level=1)).to_contain_text("Your sentence")
    projector.get_by_test_id("stExpandSidebarButton").click()
    masked_lm = projector.get_by_role("link", name="Masked LM")
    masked_lm.focus()
    assert masked_lm.evaluate("e => e === document.activeElement")


def test_a_dark_browser_gets_the_dark_theme_and_the_menu_offers_light(browser, server):
    """A browser set to dark got the light theme: Streamlit's theme followed the config's base = "light", and its menu,
    where a theme is chosen, was hidden. Now the browser's choice applies, the pinned panel and the header take the
    theme's background (they were white in the dark theme, the numbers' light text on them), and the menu offers
    Light, for a bright room, which they follow too."""
    for scheme in ("dark", "light"):
        context = browser.new_context(viewport=PROJECTOR, color_scheme=scheme)
        tab = context.new_page()
        tab.goto(f"{server}/toy")
        settle(tab)
        colours = {name: hex_colour(css) for name, css in tab.evaluate(COLOURS).items()}
        assert colours["panel"] == colours["header"] == colours["app"], (scheme, colours)
        assert (relative_luminance(colours["app"]) < 0.05) == (scheme == "dark"), (scheme, colours)
        assert contrast_ratio(colours["number"], colours["panel"]) >= 4.5, (scheme, colours)
        tab.screenshot(path=str(ARTIFACTS / f"toy-{scheme}.png"))
        if scheme == "dark":
            tab.get_by_role("button", name="Main menu").click()
            tab.get_by_role("menuitemradio", name="Light").click()
            tab.wait_for_function("getComputedStyle(document.querySelector('[data-testid=stApp]')).backgroundColor"
                                  " === 'rgb(255, 255, 255)'")
            expect(tab.locator(".st-key-result-panel")).to_have_css("background-color", "rgb(255, 255, 255)")
        context.close()


def test_a_saved_chart_has_its_title_and_no_label_cut(browser, server):
    """The chart's "Download plot as a PNG": a title in its top band (it had none), and nothing drawn on its right
    edge (the mean loss's label ran past it: placed for the page's web font, drawn in a wider one)."""
    context = browser.new_context(viewport=PROJECTOR, accept_downloads=True)
    tab = context.new_page()
    tab.goto(f"{server}/sentence")
    settle(tab)
    chart = tab.locator("[data-testid=stPlotlyChart]").first
    chart.scroll_into_view_if_needed()
    chart.hover()
    with tab.expect_download() as download:
        chart.locator('[data-title="Download plot as a PNG"]').click()
    image = Image.open(io.BytesIO(download.value.path().read_bytes())).convert("RGB")
    image.save(ARTIFACTS / "saved-chart.png")
    width, height = image.size
    background = Counter(image.get_flattened_data()).most_common(1)[0][0]
    drawn = lambda x, y: sum(abs(a - b) for a, b in zip(image.getpixel((x, y)), background)) > 60  # noqa: E731
    assert any(drawn(x, y) for x in range(width // 2) for y in range(round(0.06 * height))), "no title"
    assert not [y for x in range(width - 3, width) for y in range(height) if drawn(x, y)], "cut at the right edge"
    context.close()
