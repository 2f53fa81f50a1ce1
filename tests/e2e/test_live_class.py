"""A live class in real browsers: a projector (1280×720, presentation mode) opens a room, two phones (390×844) join
by the QR code's link, the teacher asks a lesson's question from its page, both phones answer, the projector shows
the count only until 5 have answered (3 more phones are made through the store, as a room would), the chart once
revealed, a second vote beside the first, and Close. The projector's numbers are the store's, the teacher key
leaves the address bar, and the join page fits a phone without scrolling sideways."""

import re
import time
from urllib.parse import unquote, urlsplit

import pytest
from playwright.sync_api import TimeoutError as PlaywrightTimeout
from playwright.sync_api import expect

from lmviz.app.live_access import KEY_PARAM
from lmviz.core.numbers import fmt
from lmviz.live.store import Store
from scripts.live_server import environment_set, running_server
from tests.e2e.helpers import ARTIFACTS, ScriptRuns, assert_no_error, settle

PHONE = {"width": 390, "height": 844}
PROJECTOR = {"width": 1280, "height": 720}
POLL_MS = 15_000  # the projector polls every second and the phones are told within about one; a loaded 2-core
# machine may take several seconds to show a change
CHART = ".st-key-live-question .js-plotly-plot"  # the room's answers (a lesson has charts of its own)
SIDEWAYS = "document.documentElement.scrollWidth - document.documentElement.clientWidth"


@pytest.fixture(scope="module")
def live_server(chromium_path, tmp_path_factory):
    """lmviz with a store of the test's own, which the test reads and adds phones to directly."""
    url = f"sqlite:///{tmp_path_factory.mktemp('live') / 'live.sqlite3'}"
    with environment_set({"LMVIZ_LIVE_DB": url, "LMVIZ_WARM_START": "0"}), \
            running_server(ARTIFACTS.parent / "streamlit-live.log") as address, Store(url) as store:
        yield address, store


def answered(tab) -> str:
    return tab.get_by_text(re.compile(r"^\d+ of \d+ answered$")).first.inner_text()


def send(phone, given: str, asked) -> None:
    """An answer typed (or picked) in the form of the question asked (the store's: its container's key names the
    question, so a second vote's form replaces the first's, and a box filled just before the push drew the new
    form would be lost with the old one)."""
    form = phone.locator(f".st-key-live-asked-{asked.id}")
    expect(form).to_be_visible(timeout=POLL_MS)
    # Waited for as the question's kind says, not guessed from what is drawn: on a loaded runner the form's Send
    # button was on screen and its number box not yet, and the test looked for the number among choices
    if asked.question.choices:
        choice = form.get_by_text(given, exact=True)
        expect(choice).to_be_visible(timeout=POLL_MS)
        choice.click()
    else:
        box = form.get_by_label("Your answer (a number)")
        expect(box).to_be_visible(timeout=POLL_MS)
        box.fill(given)
    # On a loaded machine a push can redraw the form just as the click lands: the button is looked up again, and
    # the click tried again, up to three times within the usual 30 s
    for attempt in range(3):
        try:
            form.get_by_role("button", name="Send", exact=True).click(timeout=10_000)
            break
        except PlaywrightTimeout:
            if attempt == 2:
                raise
    expect(phone.get_by_text("Sent — you can change it until the teacher closes the question.")).to_be_visible(
        timeout=POLL_MS)


def test_a_room_on_a_projector_and_two_phones(new_tab, live_server):
    server, store = live_server
    _, projector = new_tab(PROJECTOR)
    projector.goto(f"{server}/live-class?present=1&{KEY_PARAM}=any")
    settle(projector)
    assert KEY_PARAM not in urlsplit(projector.url).query  # the teacher key leaves the address bar at once
    projector.get_by_role("button", name="Open a room").click()
    code_box = projector.locator(".lmviz-code").first
    expect(code_box).to_be_visible(timeout=POLL_MS)
    code = code_box.inner_text().strip()
    assert store.room(code).is_open
    image = projector.locator(".lmviz-qr img").first
    qr = image.bounding_box()
    assert qr["height"] >= 0.5 * PROJECTOR["height"] and qr["y"] + qr["height"] <= PROJECTOR["height"], qr
    modules = int(re.search(r"viewBox='0 0 (\d+) ", unquote(image.get_attribute("src"))).group(1))
    assert qr["width"] / modules >= 9  # px a module, its quiet zone included: scanned from the back of a room
    big = projector.evaluate("parseFloat(getComputedStyle(document.querySelector('.lmviz-code')).fontSize)")
    assert big >= 100  # px: the code is read from the back too
    link = re.search(r"open (\S+) and the code", projector.get_by_text("Scan the QR code").inner_text()).group(1)
    assert urlsplit(link).hostname not in ("localhost", "127.0.0.1") and link.endswith(f"/join?room={code}")
    projector.screenshot(path=str(ARTIFACTS / "live-class-room.png"))

    # two phones join by the link (on this machine the server listens on loopback: the link's path and query)
    phones = []
    for _ in range(2):
        _, phone = new_tab(PHONE, is_mobile=True, has_touch=True)
        phone.goto(f"{server}{urlsplit(link).path}?{urlsplit(link).query}")
        expect(phone.get_by_text(f"You are in the class {code}.")).to_be_visible(timeout=60_000)
        assert phone.evaluate(SIDEWAYS) <= 0
        phones.append(phone)
    expect(projector.get_by_text("2 phones have joined.")).to_be_visible(timeout=POLL_MS)

    # a waiting phone's page runs no timer: nothing comes down its WebSocket while the room is unchanged
    frames = []
    phones[0].on("websocket", lambda socket: socket.on("framereceived", lambda frame: frames.append(frame)))
    phones[0].reload()  # the listener sees the WebSocket the reload opens
    expect(phones[0].get_by_text(f"You are in the class {code}.")).to_be_visible(timeout=60_000)
    settle(phones[0])
    phones[0].wait_for_timeout(1000)  # what the settled run sent may still be on its way
    frames.clear()
    phones[0].wait_for_timeout(6000)  # the window measured: three of the old page's 2 s polls
    assert frames == [], f"{len(frames)} messages reached a waiting phone in 6 s"

    # the QR code scanned again opens a new tab of the same browser: the same participant, not a third phone
    again = phones[1].context.new_page()
    again.goto(f"{server}{urlsplit(link).path}?{urlsplit(link).query}")
    expect(again.get_by_text(f"You are in the class {code}.")).to_be_visible(timeout=60_000)
    assert store.room(code).participants == 2
    again.close()

    # the teacher goes to a lesson (the sidebar, in the same session) and asks its first question
    projector.locator("[data-testid='stExpandSidebarButton']").click()
    projector.locator("[data-testid='stSidebarNav']").get_by_role("link", name="Toy example").click()
    settle(projector)
    projector.locator("[data-testid='stSidebarCollapseButton'] button").click()  # the projector shows the lesson
    ask = projector.get_by_role("button", name="Ask the room").first
    ask.scroll_into_view_if_needed()
    ask.click()
    expect(projector.get_by_text("0 of 2 answered")).to_be_visible(timeout=POLL_MS)
    expect(projector).to_have_url(re.compile(r"[?&]hide=1"))  # the pinned numbers hidden while it is open
    asked = store.current(code)
    assert (asked.lesson, asked.question.key, asked.vote) == ("toy", "nll", 1)

    # both phones see it and answer; the projector counts them, and shows no chart under 5 answers
    for phone, given in zip(phones, [f"{asked.question.answer:.5f}", "2"]):
        expect(phone.get_by_text(asked.question.ask)).to_be_visible(timeout=POLL_MS)
        assert phone.evaluate(SIDEWAYS) <= 0
        send(phone, given, asked)
    phones[0].screenshot(path=str(ARTIFACTS / "live-class-phone.png"))
    expect(projector.get_by_text("2 of 2 answered")).to_be_visible(timeout=POLL_MS)
    projector.get_by_role("button", name="Reveal").click()
    expect(projector.get_by_text("the chart shows from 5 answers on", exact=False)).to_be_visible(timeout=POLL_MS)
    assert projector.locator(CHART).count() == 0

    # three more phones, through the store: the chart, and the share right, as the store counts them
    others = [store.join(code) for _ in range(3)]
    for token, given in zip(others, ("0.69", "0.7", "1.5")):
        store.answer(asked.id, token, given)
    expect(projector.get_by_text("5 of 5 answered")).to_be_visible(timeout=POLL_MS)
    first = store.aggregate(asked.id)
    # the vote open: how the room voted, not yet which answer is right (peer instruction's second vote comes first)
    expect(projector.get_by_text("Which answer is right is shown once you Close the question",
                                 exact=False)).to_be_visible(timeout=POLL_MS)
    chart = projector.locator(CHART).first
    expect(chart).to_be_visible(timeout=POLL_MS)
    assert bar_counts(projector) == [[c.count for c in first.counts]]
    chart.scroll_into_view_if_needed()
    projector.screenshot(path=str(ARTIFACTS / "live-class-first-vote.png"))

    # a second vote: the same five answer again; both votes side by side
    projector.get_by_role("button", name="Ask again").click()
    expect(projector.get_by_text("0 of 5 answered")).to_be_visible(timeout=POLL_MS)
    second = store.current(code)
    for phone, given in zip(phones, [f"{asked.question.answer:.5f}", "0.69"]):
        expect(phone.get_by_text("second vote", exact=False)).to_be_visible(timeout=POLL_MS)
        send(phone, given, second)
    for token, given in zip(others, ("0.69", "0.7", "2")):
        store.answer(second.id, token, given)
    expect(projector.get_by_text("5 of 5 answered")).to_be_visible(timeout=POLL_MS)
    projector.get_by_role("button", name="Reveal").click()
    again = store.aggregate(second.id)
    expect(projector.locator(CHART).first).to_be_visible(timeout=POLL_MS)
    counts = bar_counts(projector)
    assert [sum(c) for c in counts] == [first.answered, again.answered] == [5, 5]
    assert answered(projector) == f"{again.answered} of {store.room(code).participants} answered"
    projector.locator(CHART).first.scroll_into_view_if_needed()
    projector.screenshot(path=str(ARTIFACTS / "live-class-second-vote.png"))

    # Close: the right answer and each vote's share right; the phones are told, with what they sent; the pinned
    # numbers show again
    projector.get_by_role("button", name="Close").click()
    share = (f"Right: {round(100 * first.share_right)} % in the first vote, then "
             f"{round(100 * again.share_right)} % in the second vote.")
    expect(projector.get_by_text(share)).to_be_visible(timeout=POLL_MS)
    projector.locator(CHART).first.scroll_into_view_if_needed()
    projector.screenshot(path=str(ARTIFACTS / "live-class-closed.png"))
    right = "is right." if second.question.tolerance >= abs(0.69 - second.question.answer) else "is not the right one."
    expect(phones[1].get_by_text(f"Closed. Your answer, 0.69, {right}")).to_be_visible(timeout=POLL_MS)
    expect(phones[1].get_by_text(f"The answer: {second.question.shown_answer}.", exact=False)).to_be_visible()
    assert not store.asked(second.id).is_open
    expect(projector).not_to_have_url(re.compile(r"[?&]hide=1"), timeout=POLL_MS)
    for tab in (projector, *phones):
        assert_no_error(tab)


HOSTILE = "**bold** <img src=x>"
ADDRESS = "Read https://evil.example/x or www.evil.example now."
QUEUE = "Sentences waiting for your approval (not for the projector)"


def test_the_rooms_sentences_numbers_on_the_projector_and_a_text_once_approved(new_tab, live_server):
    """A phone types a sentence on the join page (the server's model scores it), four more come through the store,
    one of them hostile; the projector shows the numbers the store computes and no text; the queue, collapsed,
    stays open across the page's polls while the teacher approves; an approved text is shown as text."""
    server, store = live_server
    _, projector = new_tab(PROJECTOR)
    runs = ScriptRuns(projector)
    projector.goto(f"{server}/live-class?present=1&{KEY_PARAM}=any")
    settle(projector)
    projector.get_by_role("button", name="Open a room").click()
    code_box = projector.locator(".lmviz-code").first
    expect(code_box).to_be_visible(timeout=POLL_MS)
    code = code_box.inner_text().strip()

    _, phone = new_tab(PHONE, is_mobile=True, has_touch=True)
    phone.goto(f"{server}/join?room={code}")
    expect(phone.get_by_text(f"You are in the class {code}.")).to_be_visible(timeout=60_000)
    phone.get_by_label("Your sentence").fill("My grandmother bakes apple pie in autumn.")
    phone.get_by_role("button", name="Send my sentence to the room").click()
    expect(phone.get_by_text("Sent to the class", exact=False)).to_be_visible(timeout=180_000)  # a model's load
    assert phone.evaluate(SIDEWAYS) <= 0
    phone.screenshot(path=str(ARTIFACTS / "live-class-phone-sentence.png"), full_page=True)
    for text, loss in (("A wombat sat.", 6.5), (HOSTILE, 9.25), (ADDRESS, 5.0), ("Dogs bark.", 2.5)):
        store.add_sentence(code, store.join(code), text, loss, tokens=[(text.split()[-1], loss + 1)])

    numbers = store.sentence_numbers(code)
    assert numbers.sent == 5 and numbers.shown
    expect(projector.get_by_text("The room's sentences", exact=True)).to_be_visible(timeout=POLL_MS)
    assert metric_value(projector, "Sentences sent") == "5"
    assert metric_value(projector, "Mean loss per token") == fmt(numbers.mean)
    assert metric_value(projector, "Standard deviation") == fmt(numbers.spread)
    assert metric_value(projector, "Lowest loss") == fmt(numbers.low)
    assert metric_value(projector, "Highest loss") == fmt(numbers.high)
    queue = projector.locator(".st-key-live-sentence-queue")
    for text in ("wombat", "bold", "evil", "grandmother"):  # no text before it is approved
        expect(projector.get_by_text(text, exact=False)).not_to_be_visible()
    projector.locator(".st-key-live-sentences").scroll_into_view_if_needed()
    projector.screenshot(path=str(ARTIFACTS / "live-class-sentences.png"))

    queue.get_by_text(QUEUE).click()  # the teacher opens it, on their own screen
    expect(queue.get_by_text(HOSTILE, exact=True)).to_be_visible(timeout=POLL_MS)
    # three of the room's polls (a message already on its way may count for one): the queue stays open
    runs.wait_for_finished(runs.fragments_finished + 3, fragments=True)
    expect(queue.get_by_text(HOSTILE, exact=True)).to_be_visible()
    row = queue.locator("[data-testid='stHorizontalBlock']").filter(has_text=HOSTILE)
    row.get_by_role("button", name="Approve").click()
    # A click in a fragment waits for the run in progress: on a loaded CI runner that took more than 15 s. The store
    # is asked first, so that a lost click and a slow page fail with different messages.
    deadline = time.monotonic() + 60
    while not store.sentences(code) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert [s.sentence for s in store.sentences(code)] == [HOSTILE], "the click on Approve never reached the store"
    approved = projector.locator(".st-key-live-sentences [data-testid='stTable']").filter(has_text="rank")
    expect(approved.get_by_text(HOSTILE, exact=True)).to_be_visible(timeout=60_000)  # as typed: text, not markup
    assert projector.locator("img[src='x']").count() == 0 and approved.locator("strong").count() == 0
    row = queue.locator("[data-testid='stHorizontalBlock']").filter(has_text="evil.example")
    row.get_by_role("button", name="Approve").click()
    # as typed, and no link: a bare address on the projector is not one click from the whole room
    expect(approved.filter(has_text="evil.example")).to_be_visible(timeout=60_000)
    cell = approved.locator("td").filter(has_text="evil.example")
    assert cell.inner_text().replace("\u2060", "") == ADDRESS
    assert projector.locator("a[href*='evil']").count() == 0
    # Still open, the others still waiting. The approved table is drawn before the queue, and on a loaded runner the
    # queue's rows came more than 5 s after it: the same long wait.
    expect(queue.get_by_text("Dogs bark.", exact=True)).to_be_visible(timeout=60_000)
    assert [s.sentence for s in store.sentences(code)] == [HOSTILE, ADDRESS]
    for tab in (projector, phone):
        assert_no_error(tab)
    projector.get_by_role("button", name="End the class").click()
    expect(projector.get_by_role("button", name="Open a room")).to_be_visible(timeout=POLL_MS)
    assert store.sentences(code, approved_only=False) == []


def metric_value(tab, label: str) -> str:
    box = tab.locator("[data-testid='stMetric']").filter(has=tab.get_by_text(label, exact=True))
    return box.locator("[data-testid='stMetricValue']").inner_text().strip()


def bar_counts(tab) -> list[list[int]]:
    """Each vote's bar heights, as the chart on screen holds them (Plotly keeps its data on the element)."""
    return tab.evaluate(f"[...document.querySelector('{CHART}').data].map(t => t.y.filter(y => y > 0))")
