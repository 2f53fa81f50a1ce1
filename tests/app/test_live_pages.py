"""The live class's pages, headless: the teacher's Live class page and a lesson's "Ask the room", the phones' join
page, and the store they share (an SQLite file of the test's own, LMVIZ_LIVE_DB). Extra participants are made
through the store directly, as a room of phones would. tests/e2e/test_live_class.py drives the same in a browser."""

import ast
import html
import json
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import urlencode

import pytest
from streamlit.testing.v1 import AppTest

from lmviz.app import chrome, live, live_access
from lmviz.core.numbers import fmt
from lmviz.core.text import escape_markdown
from lmviz.course.quiz import NotANumber, Question, read_number
from lmviz.live.store import MAX_SENTENCE, MIN_SHOWN, Store
from tests.helpers import APP, BAD_INPUTS, one_sentence, unescaped

ROOT = Path(__file__).resolve().parents[2]
LESSON, QUESTION = "toy", "nll"  # Toy example's first question: a typed number, on a page that loads no model
ASK = f"FormSubmitter:quiz-{LESSON}/{QUESTION}-Ask the room"


@pytest.fixture
def store(tmp_path, monkeypatch):
    """The store the app's pages use: the test's own SQLite file."""
    url = f"sqlite:///{tmp_path / 'live.sqlite3'}"
    monkeypatch.setenv("LMVIZ_LIVE_DB", url)
    monkeypatch.delenv("LMVIZ_ALLOWED_MODELS", raising=False)
    for name in ("LMVIZ_LIVE", "LMVIZ_LIVE_KEY", "LMVIZ_PUBLIC_URL"):
        monkeypatch.delenv(name, raising=False)
    with Store(url) as opened:
        yield opened


def teacher() -> AppTest:
    at = AppTest.from_file(APP, default_timeout=60)
    at.run()
    return at.switch_page("app_pages/live_class.py").run()


SECRET = "a-teachers-secret-0123456789"  # a teacher secret of the right form, for rooms a test opens itself


def teacher_of(code: str, secret: str | None = SECRET) -> AppTest:
    """The Live class page of a browser holding ``secret`` in its session (as a copied teacher link brings it)
    and ?teaching=CODE in its link."""
    at = AppTest.from_file(APP, default_timeout=60)
    at.run()
    if secret:
        at.session_state[live_access.SECRETS_KEY] = {code: secret}
    at.query_params[live.TEACHING_PARAM] = code
    return at.switch_page("app_pages/live_class.py").run()


def live_access_secret(at: AppTest, code: str) -> str:
    """The room's teacher secret the session holds."""
    return at.session_state[live_access.SECRETS_KEY][code]


def cookies_set(at: AppTest) -> dict[str, str]:
    """The cookies the page's script elements set (live_access.set_cookie), name to value."""
    pairs = [re.search(r'document\.cookie = "([^=]+)=([^"]+)"', h.proto.body) for h in at.get("html")]
    return {m.group(1): m.group(2) for m in pairs if m}


def phone(code: str | None = None, token: str | None = None) -> AppTest:
    """A phone opening the join page, by the QR code's link (?room=) or, without a code, to type one."""
    at = AppTest.from_file(APP, default_timeout=60)
    if code:
        at.query_params[live.ROOM_PARAM] = code
    if token:
        at.query_params[live.TOKEN_PARAM] = token
    at.run()
    return at.switch_page("app_pages/join.py").run()


def button(at: AppTest, label: str):
    return next(b for b in at.button if b.label == label)


def labels(at: AppTest) -> list[str]:
    return [b.label for b in at.button]


def said(at: AppTest) -> list[str]:
    """Every sentence the page said in a box: warnings, errors, infos, successes."""
    return [unescaped(e.value) for kind in ("warning", "error", "info", "success") for e in getattr(at, kind)]


def chart(at: AppTest) -> list[dict]:
    """The traces of the page's one chart."""
    (element,) = at.get("plotly_chart")
    return json.loads(element.proto.spec)["data"]


def chart_title(at: AppTest) -> str:
    (element,) = at.get("plotly_chart")
    return json.loads(element.proto.spec)["layout"]["title"]["text"]


def texts(at: AppTest) -> str:
    return "\n".join([unescaped(m.value) for m in at.markdown] + [s.value for s in at.subheader]
                     + [c.value for c in at.caption] + [t.value for t in at.text])


def open_room(at: AppTest) -> str:
    button(at, "Open a room").click().run()
    assert not at.exception, at.exception
    return at.session_state[live.ROOM_KEY]


def answer_on(at: AppTest, given: str) -> AppTest:
    asked_id = next(int(f.key.removeprefix("live-given-")) for f in [*at.radio, *at.text_input]
                    if f.key and f.key.startswith("live-given-"))
    box = [f for f in at.text_input if f.key == f"live-given-{asked_id}"]
    (box[0] if box else at.radio(key=f"live-given-{asked_id}")).set_value(given)
    return button(at, "Send").click().run()


def test_the_join_page_imports_no_torch_in_a_fresh_interpreter():
    """What a phone's page imports (read from its file), imported alone: neither torch nor transformers comes with
    it, so that it opens in a moment whatever the server does with its models."""
    tree = ast.parse((ROOT / "app_pages" / "join.py").read_text())
    modules = sorted({a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
                     | {f"{n.module}.{a.name}" if n.module == "lmviz.app" else n.module
                        for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) for a in n.names})
    assert modules == ["lmviz.app.live", "streamlit"]
    code = f"import sys, {', '.join(modules)}; print(sorted({{'torch', 'transformers'}} & set(sys.modules)))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def csv_offered(at: AppTest, code: str) -> str:
    """The id of the CSV the page's "Download the results" button offers: Streamlit names a download by a hash of
    its bytes, its type and its file name, so the store's CSV must hash to it."""
    (download,) = [d for d in at.get("download_button") if d.proto.label == "Download the results (CSV)"]
    return Path(download.proto.url).stem


def csv_id(text: str, code: str) -> str:
    from streamlit.runtime.memory_media_file_storage import _calculate_file_id

    return _calculate_file_id(text.encode(), "text/csv", f"lmviz-class-{code}.csv")


def test_a_room_from_opening_to_the_second_vote_and_its_csv(store):
    at = teacher()
    code = open_room(at)
    assert store.room(code).is_open and at.query_params[live.TEACHING_PARAM] == code  # a reload keeps the room
    page = [h.proto.body for h in at.get("html")]
    assert any(f">{code}</div>" in body and "lmviz-code" in body for body in page)  # the code, big
    link = live.join_link(code)
    assert link.endswith(f"/join?room={code}") and "localhost" not in link and "127.0.0.1" not in link
    assert any(html.escape(live.qr_svg(link)) in body and "lmviz-qr" in body for body in page)  # the link's QR
    assert "0 phones have joined" in texts(at) and "Test it from your own phone" in texts(at)

    # asked from the lesson: frozen with the page's link; the pinned numbers hidden while it is open
    at.switch_page("app_pages/toy_example.py").run()
    inputs = dict(at.query_params)
    assert inputs.pop(live.TEACHING_PARAM) == code  # the room, for a reload: not an input
    at.button(key=ASK).click().run()
    asked = store.current(code)
    assert (asked.lesson, asked.question.key, asked.vote) == (LESSON, QUESTION, 1)
    assert asked.url_state == inputs and "toy_learning_rate" in inputs
    assert at.session_state[chrome.HIDE_KEY] is True and at.query_params[chrome.HIDE_KEY] == "1"
    assert {"Reveal", "Ask again", "Close"} <= set(labels(at))  # the teacher's buttons under the question

    # two phones join by the link and answer; the teacher's page counts them, and under 5 shows the count only
    phones = [phone(code), phone(code)]
    for one, given in zip(phones, [f"{asked.question.answer:.5f}", "2"]):
        assert not one.exception and asked.question.ask in [t.value for t in one.text]
        answer_on(one, given)
        assert "Sent — you can change it until the teacher closes the question." in said(one)
    assert store.room(code).participants == 2
    at.switch_page("app_pages/live_class.py").run()
    assert "2 of 2 answered" in texts(at) and "2 phones have joined" in texts(at)
    button(at, "Reveal").click().run()
    assert store.asked(asked.id).revealed
    assert not at.get("plotly_chart") and f"the chart shows from {MIN_SHOWN} answers on" in texts(at)

    # three more phones, through the store: the distribution and the share right
    for given in ("0.69", "0.7", "1.5"):
        store.answer(asked.id, store.join(code), given)
    at.run()
    assert "5 of 5 answered" in texts(at) and len(at.get("plotly_chart")) == 1
    first = store.aggregate(asked.id)
    assert first.share_right == 3 / 5 and not any("Right:" in t for t in texts(at))  # not while the vote is open
    assert not any("✓" in x for x in chart(at)[0]["x"]) and chart_title(at) == "How the room answered"
    assert csv_offered(at, code) == csv_id(store.aggregates_csv(code), code)

    # a second vote, answered and revealed: both votes side by side; Close shows the page's numbers again
    button(at, "Ask again").click().run()
    second = store.current(code)
    assert (second.number, second.vote) == (asked.number, 2) and not store.asked(asked.id).is_open
    assert "2 of 5 answered" not in texts(at) and "0 of 5 answered" in texts(at)
    phones[0].run()  # the phone shows the second vote, and sends its answer again
    assert any("second vote" in m.value for m in phones[0].markdown)
    answer_on(phones[0], "0.69315")
    for given in ("0.69", "0.7", "0.69", "2"):
        store.answer(second.id, store.join(code), given)
    button(at, "Reveal").click().run()
    bars = chart(at)
    assert [trace["name"] for trace in bars] == ["First vote", "Second vote"]
    assert [sum(trace["y"]) for trace in bars] == [5, 5] and not any("✓" in x for x in bars[0]["x"])
    button(at, "Close").click().run()
    assert any("✓ right" in x for x in chart(at)[0]["x"])  # closed: the right answer is marked, and its share
    assert f"the answer: {asked.question.shown_answer}" in chart_title(at)
    assert "Right: 60 % in the first vote, then 80 % in the second vote." in texts(at)
    assert not store.asked(second.id).is_open and at.session_state[chrome.HIDE_KEY] is False
    assert "Close" not in labels(at) and "Ask again" not in labels(at)
    assert csv_offered(at, code) == csv_id(store.aggregates_csv(code), code)
    csv = store.aggregates_csv(code)
    assert csv.count(f"\n{asked.number},1,{LESSON},{QUESTION},") >= 3 and f"\n{asked.number},2," in csv

    # the phones see the question closed, with what they sent
    answer = f"The answer: {asked.question.shown_answer}. {asked.question.reason}"
    phones[0].run()
    assert "Closed. Your answer, 0.69315, is right." in said(phones[0]) and answer in said(phones[0])
    phones[1].run()  # which did not answer the second vote
    assert "The teacher has closed this question, and this phone sent no answer to it." in said(phones[1])
    assert answer in said(phones[1])


def test_a_choice_question_is_a_radio_on_the_phone_and_its_bars_mark_the_answer(store):
    at = teacher()
    code = open_room(at)
    asked = store.ask(code, "sentence", PICKED, {})
    one = phone(code)
    assert one.radio(key=f"live-given-{asked.id}").options == list(PICKED.choices)
    answer_on(one, "cat")
    assert store.my_answer(asked.id, one.session_state[live.PHONE_TOKEN]) == "cat"
    answer_on(one, "sat")  # the last answer from a phone wins
    for given in ("cat", "cat", "the", "cat"):
        store.answer(asked.id, store.join(code), given)
    store.reveal(asked.id)
    at.run()
    (bars,) = chart(at)
    assert bars["x"] == ["the", "cat", "sat"] and bars["y"] == [1, 3, 1]  # the vote open: no answer marked
    store.close_question(asked.id)
    at.run()
    (bars,) = chart(at)
    assert bars["x"] == ["the", "cat<br><b>✓ right</b>", "sat"] and bars["y"] == [1, 3, 1]
    assert bars["text"] == ["1", "3", "1"]  # each count written on its bar
    assert "5 of 5 answered" in texts(at) and "Right: 60 % in the first vote." in texts(at)


def test_a_phone_shows_the_numbers_the_question_needs_as_text(store):
    """Toy example's "which row adds the most?" asked from its page: the phone shows each row's p(true word), the
    cells as the text they are (the first row's input is the start token <s>, which Markdown would take for
    strikethrough HTML); the Live class page has them in a fold."""
    at = teacher()
    code = open_room(at)
    at.switch_page("app_pages/toy_example.py").run()
    at.button(key=f"FormSubmitter:quiz-{LESSON}/largest-Ask the room").click().run()
    asked = store.current(code)
    assert asked.question.key == "largest" and len(asked.question.table) == 6  # a header and the 5 rows
    one = phone(code)
    (table,) = one.table
    header, *rows = asked.question.table
    assert [unescaped(c) for c in table.value.columns] == list(header)
    assert [[unescaped(c) for c in row] for row in table.value.values.tolist()] == [list(r) for r in rows]
    assert rows[0][0] == "0: <s> → I" and table.value.values[0][0] == escape_markdown("0: <s> → I")
    at.switch_page("app_pages/live_class.py").run()
    assert "The numbers on the lesson's page that it needs" in [e.label for e in at.expander]
    assert len(at.table) == 1


def test_a_reload_of_a_lesson_keeps_the_teachers_room_by_its_cookie_not_by_the_code(store, monkeypatch):
    """A reload starts a new session: the room in the lesson's link (?teaching=CODE) brings back its Ask buttons
    and the question's answers only in the browser whose cookie holds the room's secret, which the page that
    opened the room set; the same link without it (a phone with the code off the projector) gets nothing. A room
    that has ended leaves the link."""
    at = teacher()
    code = open_room(at)
    secret = live_access_secret(at, code)
    assert cookies_set(at) == {live_access.TEACHER_COOKIE + code: secret}
    assert secret not in json.dumps(dict(at.query_params)) and store.is_teacher(code, secret)
    at.switch_page("app_pages/toy_example.py").run()
    assert at.query_params[live.TEACHING_PARAM] == code
    at.button(key=ASK).click().run()
    assert live.TEACHING_PARAM not in store.current(code).url_state  # the page's inputs, not the teacher's room

    def reloaded(browser_cookies: dict[str, str]) -> AppTest:
        monkeypatch.setattr(live_access, "cookie", browser_cookies.get)  # what st.context.cookies would read
        again = AppTest.from_file(APP, default_timeout=60)
        for name, value in at.query_params.items():
            again.query_params[name] = value
        again.run()
        return again.switch_page("app_pages/toy_example.py").run()

    stranger = reloaded({})  # the teacher's link, typed on a phone from the projector's address bar
    assert live.ROOM_KEY not in stranger.session_state and live.TEACHING_PARAM not in stranger.query_params
    assert not [b for b in stranger.button if b.label in ("Ask the room", "Reveal", "Ask again", "Close")]
    forged = reloaded({live_access.TEACHER_COOKIE + code: "not-the-secret-but-a-token-form"})
    assert live.ROOM_KEY not in forged.session_state

    teachers = reloaded({live_access.TEACHER_COOKIE + code: secret})
    assert teachers.session_state[live.ROOM_KEY] == code
    assert teachers.button(key=ASK) and {"Reveal", "Ask again", "Close"} <= set(labels(teachers))

    store.close_room(code)
    teachers.run()
    assert live.ROOM_KEY not in teachers.session_state and live.TEACHING_PARAM not in teachers.query_params
    assert not [b for b in teachers.button if b.label == "Ask the room"]


def test_a_second_teacher_window_joins_by_the_copied_link_and_the_secret_leaves_its_address(store):
    at = teacher()
    code = open_room(at)
    secret = live_access_secret(at, code)
    (copied,) = [c.value for e in at.expander if e.label.startswith("Run this class from another device")
                 for c in e.code]
    assert copied.endswith(f"/live-class?{urlencode({live.TEACHING_PARAM: code, live_access.SECRET_PARAM: secret})}")
    second = AppTest.from_file(APP, default_timeout=60)
    second.query_params.update({live.TEACHING_PARAM: code, live_access.SECRET_PARAM: secret})
    second.run()
    assert live_access.SECRET_PARAM not in second.query_params  # out of the address bar before anything is drawn
    assert cookies_set(second) == {live_access.TEACHER_COOKIE + code: secret}  # for this browser's reloads
    second.switch_page("app_pages/live_class.py").run()
    assert second.session_state[live.ROOM_KEY] == code and "End the class" in labels(second)
    assert cookies_set(second) == {}  # written once a session

    # a link to another room: a wrong secret runs nothing; the right one runs that room, each secret kept to its room
    other = store.open_room(teacher_secret=SECRET)
    second.query_params.update({live.TEACHING_PARAM: other, live_access.SECRET_PARAM: "not-this-rooms-secret-0123"})
    second.run()
    assert live.ROOM_KEY not in second.session_state and "End the class" not in labels(second)
    second.query_params.update({live.TEACHING_PARAM: other, live_access.SECRET_PARAM: SECRET})
    second.run()
    assert second.session_state[live.ROOM_KEY] == other and "End the class" in labels(second)
    assert cookies_set(second) == {live_access.TEACHER_COOKIE + other: SECRET}
    assert second.session_state[live_access.SECRETS_KEY] == {code: secret, other: SECRET}


def test_the_rooms_code_in_a_link_is_no_room_and_opens_none_on_a_public_server(store, monkeypatch):
    code = store.open_room(teacher_secret=SECRET)
    monkeypatch.setenv("LMVIZ_ALLOWED_MODELS", "bundled")  # a public server, without LMVIZ_LIVE_KEY
    at = AppTest.from_file(APP, default_timeout=60)
    at.query_params[live.TEACHING_PARAM] = code
    at.run()
    at.switch_page("app_pages/toy_example.py").run()
    assert not at.exception and live.ROOM_KEY not in at.session_state
    assert not [b for b in at.button if b.label == "Ask the room"]
    on_live_page = teacher_of(code, secret=None)
    assert not {"End the class", "Reveal", "Open a room"} & set(labels(on_live_page))
    assert any("LMVIZ_LIVE_KEY" in s for s in said(on_live_page))


def test_a_server_with_a_public_address_asks_for_the_key_even_on_loopback(store, monkeypatch):
    monkeypatch.setenv("LMVIZ_PUBLIC_URL", "https://lmviz.example.org")  # what the replicas behind HAProxy have
    at = teacher()
    assert "Open a room" not in labels(at) and any("LMVIZ_LIVE_KEY" in s for s in said(at))
    monkeypatch.setenv("LMVIZ_LIVE_KEY", "correct horse")
    keyed = AppTest.from_file(APP, default_timeout=60)
    keyed.query_params[live_access.KEY_PARAM] = "correct horse"
    keyed.run()
    keyed.switch_page("app_pages/live_class.py").run()
    code = open_room(keyed)
    assert live.join_link(code) == f"https://lmviz.example.org/join?room={code}"


def test_a_reload_keeps_the_phones_token_and_its_answer(store):
    code = store.open_room()
    asked = store.ask(code, "sentence", PICKED, {})
    first = phone(code)
    token = first.query_params[live.TOKEN_PARAM]
    assert token == first.session_state[live.PHONE_TOKEN] and first.query_params[live.ROOM_PARAM] == code
    answer_on(first, "the")
    again = phone(code, token)  # the same link, in a new session
    assert again.session_state[live.PHONE_TOKEN] == token and store.room(code).participants == 1
    assert again.radio(key=f"live-given-{asked.id}").value == "the"
    assert "Sent — you can change it until the teacher closes the question." in said(again)


def test_a_second_tab_or_scan_is_the_same_participant_by_its_cookie(store, monkeypatch):
    """A phone's camera opens the QR code's link (no token in it) in a new tab: the browser's cookie, which the
    first tab's page set, makes it the participant it already is, with its answer; a browser without it is new."""
    code = store.open_room()
    asked = store.ask(code, "sentence", PICKED, {})
    first = phone(code)
    token = first.session_state[live.PHONE_TOKEN]
    assert cookies_set(first) == {live_access.PHONE_COOKIE + code: token}
    answer_on(first, "the")
    monkeypatch.setattr(live_access, "cookie", {live_access.PHONE_COOKIE + code: token}.get)
    scanned_again = phone(code)
    assert scanned_again.session_state[live.PHONE_TOKEN] == token and store.room(code).participants == 1
    assert scanned_again.radio(key=f"live-given-{asked.id}").value == "the"
    typed_again = phone()  # the code typed in the new tab instead
    typed_again.text_input(key="live-code").set_value(code)
    button(typed_again, "Join").click().run()
    assert typed_again.session_state[live.PHONE_TOKEN] == token and store.room(code).participants == 1
    monkeypatch.setattr(live_access, "cookie", {}.get)
    assert phone(code).session_state[live.PHONE_TOKEN] != token and store.room(code).participants == 2


def test_a_code_is_typed_on_the_join_page(store):
    code = store.open_room()
    at = phone()
    at.text_input(key="live-code").set_value(f" {code.lower()[:2]} {code.lower()[2:]} ")  # as a phone may type it
    button(at, "Join").click().run()
    assert not at.exception and at.session_state[live.PHONE_ROOM] == code
    assert "The teacher's question will show here: keep this page open." in said(at)


@pytest.mark.parametrize("typed", ["ABC", "A0BCD", "ZZZZZ", ""])
def test_a_wrong_code_is_one_sentence(store, typed):
    at = phone()
    at.text_input(key="live-code").set_value(typed)
    button(at, "Join").click().run()
    (sentence,) = said(at)
    assert one_sentence(sentence) and not at.exception and live.PHONE_ROOM not in at.session_state


def test_an_ended_class_and_a_wrong_code_in_the_link_are_one_sentence(store):
    ended = store.open_room()
    store.close_room(ended)
    for code in (ended, "QQQQQ", "<b>x"):
        at = phone(code)
        (sentence,) = said(at)
        assert one_sentence(sentence) and not at.exception
        assert "Join" in labels(at)  # and the box to type another code
    assert "has ended" in said(phone(ended))[0]


def test_not_a_number_and_a_closed_question_are_one_sentence_each(store):
    code = store.open_room()
    asked = store.ask(code, LESSON, TYPED, {})
    at = phone(code)
    answer_on(at, "about a half")
    (sentence,) = said(at)
    assert one_sentence(sentence) and "not a number" in sentence and store.my_answer(
        asked.id, at.session_state[live.PHONE_TOKEN]) is None
    box = at.text_input(key=f"live-given-{asked.id}")
    store.close_question(asked.id)  # the teacher closes it while the phone still shows its box
    box.set_value("0.69")
    button(at, "Send").click().run()
    sentences = said(at)
    assert any(one_sentence(s) and "closed this question" in s and "no more" in s for s in sentences), sentences


def test_after_a_minute_with_nobody_joined_the_page_says_what_to_do(store):
    code = store.open_room(now=time.time() - 2 * live.NOBODY_AFTER_S, teacher_secret=SECRET)
    at = AppTest.from_file(APP, default_timeout=60)
    at.run()
    at.session_state[live_access.SECRETS_KEY] = {code: SECRET}
    at.query_params[live.TEACHING_PARAM] = code  # a teacher's link: a reload keeps the room
    at.switch_page("app_pages/live_class.py").run()
    (sentence,) = [s for s in said(at) if "Nobody has joined" in s]
    assert one_sentence(sentence) and "client isolation" in sentence and "hotspot" in sentence
    assert "hosted lmviz" in sentence
    store.join(code)
    at.run()
    assert not [s for s in said(at) if "Nobody has joined" in s]


def test_a_public_server_takes_the_teacher_key_and_drops_it_from_the_address(store, monkeypatch):
    monkeypatch.setenv("LMVIZ_ALLOWED_MODELS", "lmviz/tiny-gpt")  # a public deployment
    at = teacher()
    assert "Open a room" not in labels(at) and any("LMVIZ_LIVE_KEY" in s for s in said(at))
    monkeypatch.setenv("LMVIZ_LIVE_KEY", "correct horse")
    for given, allowed in (("wrong", False), ("correct horse", True)):
        at = AppTest.from_file(APP, default_timeout=60)
        at.query_params[live_access.KEY_PARAM] = given
        at.run()
        assert live_access.KEY_PARAM not in at.query_params  # gone from the address bar at once, on whichever page
        at.switch_page("app_pages/live_class.py").run()
        assert ("Open a room" in labels(at)) == allowed, said(at)
        assert live_access.KEY_PARAM not in at.query_params
    # a phone on the same server cannot open a room, and joins as any phone does
    assert phone(store.open_room()).session_state[live.PHONE_TOKEN]


def test_live_off_turns_the_pages_and_the_ask_button_off(store, monkeypatch):
    at = teacher()
    open_room(at)
    monkeypatch.setenv("LMVIZ_LIVE", "off")
    at.run()
    assert "Open a room" not in labels(at) and any("LMVIZ_LIVE=off" in s for s in said(at))
    at.switch_page("app_pages/toy_example.py").run()
    assert not any(b.key == ASK for b in at.button)
    one = phone("ABCDE")
    assert any("LMVIZ_LIVE=off" in s for s in said(one)) and "Join" not in labels(one)


def test_the_join_page_is_routable_but_in_no_navigation_and_draws_no_lesson_chrome(store):
    source = Path(APP).read_text()
    assert 'url_path="join"' in source and 'visibility="hidden"' in source
    at = phone()
    assert not at.exception and not at.toggle  # no presentation or hide-the-numbers switch on a phone
    assert any(live.PHONE_CSS == h.proto.body for h in at.get("html"))


PICKED = Question("which", "Which token did the model find most surprising?", "cat", "Its loss is the highest.",
                  "Look at the loss column.", choices=("the", "cat", "sat"))
TYPED = Question("loss", "What is −log 0.5?", 0.6931471805599453, "−log 0.5 = log 2.", "It is log 2.", digits=2)


# the hostile inputs' markup, where it would still be live: not preceded by Markdown's escaping backslash
LIVE_MARKUP = [re.compile(p) for p in (r"(?<!\\)<script", r"(?<!\\)<img", r"(?<!\\)\*(?<!\\)\*bold", r"(?<!\\)\$x\^2",
                                       r"(?<!\\):red\[", "\u202e")]
JOIN_CASES = [c for c in BAD_INPUTS if c["case"] != "lone surrogate"]  # a browser cannot send one


@pytest.mark.parametrize("case", JOIN_CASES, ids=[c["case"] for c in JOIN_CASES])
def test_every_bad_input_in_the_join_pages_boxes_is_one_sentence(store, case):
    """tests/data/bad_inputs.jsonl through the phone's two boxes, the class's code and a typed answer: each gives
    one sentence (or, for the answer, is taken as the number it is), never a traceback or live markup, and nothing
    that is not an answer is stored."""
    text = case["text"]
    at = phone()
    at.text_input(key="live-code").set_value(text[:100])
    button(at, "Join").click().run()
    assert not at.exception and live.PHONE_ROOM not in at.session_state
    (sentence,) = said(at)
    assert one_sentence(unquoted(sentence)) and not any(p.search(s) for s in markdown_of(at) for p in LIVE_MARKUP)

    code = store.open_room()
    asked = store.ask(code, LESSON, TYPED, {})
    at = phone(code)
    answer_on(at, text[:100])
    assert not at.exception
    stored = store.my_answer(asked.id, at.session_state[live.PHONE_TOKEN])
    try:
        number = read_number(text[:100])
    except NotANumber:
        (sentence,) = said(at)
        assert one_sentence(unquoted(sentence)) and stored is None
    else:
        assert stored is not None and float(stored) == number
    assert not any(p.search(s) for s in markdown_of(at) for p in LIVE_MARKUP)


def markdown_of(at: AppTest) -> list[str]:
    """Every text the page handed to Markdown, raw (escaped markup still carries its backslashes)."""
    kinds = ("markdown", "caption", "warning", "error", "info", "success")
    return [e.value for kind in kinds for e in getattr(at, kind)]


def unquoted(sentence: str) -> str:
    """A sentence without the typed text it quotes “…”, which may hold sentences of its own."""
    return re.sub(r"“[^”]*”", "“…”", sentence)


# Students' sentences: sent from Your sentence or the join page; the projector shows numbers first, a text only once
# the teacher approves it from the queue in a collapsed expander

SENTENCE = "My grandmother bakes apple pie in autumn."
HOSTILE = "**bold** <img src=x>"


def joined_your_sentence(store, code: str) -> AppTest:
    """A phone that joined by the link and then opened Your sentence in the same session."""
    at = phone(code)
    assert at.session_state[live.PHONE_ROOM] == code
    return at.switch_page("app_pages/your_sentence.py").run()


def metric(at: AppTest, label: str) -> str:
    return next(m.value for m in at.metric if m.label == label)


def nodes(node, skip=lambda node: False):
    """Every element and block under ``node``, but those ``skip`` picks and what they hold."""
    yield node
    for child in getattr(node, "children", {}).values():
        if not skip(child):
            yield from nodes(child, skip)


def shown_in(node, skip=lambda node: False) -> str:
    """Everything the elements under ``node`` hold, as text: each element's message, and a table's cells."""
    parts = []
    for one in nodes(node, skip):
        if getattr(one, "proto", None) is not None:
            parts.append(str(one.proto))
        if getattr(one, "type", "") in ("arrow_data_frame", "dataframe", "table"):
            parts.append(one.value.to_csv())
    return "\n".join(parts)


def queue_of(at: AppTest):
    (queue,) = [e for e in at.expander if e.label == live.QUEUE_LABEL]
    return queue


def off_the_queue(at: AppTest) -> str:
    """What the teacher's page shows outside the approval queue: the projected view."""
    return shown_in(at.main, skip=lambda node: getattr(node, "type", "") == "expander"
                    and node.label == live.QUEUE_LABEL) + shown_in(at.sidebar)


def test_your_sentence_sends_the_pages_text_and_loss_to_the_room_and_each_refusal_is_one_sentence(store):
    code = store.open_room()
    at = joined_your_sentence(store, code)
    assert not at.exception and live.SEND_SENTENCE in labels(at)
    # what the phone is promised before it sends (issue 49), kept below: unapproved, then deleted at the class's end
    (promise,) = [c.value for c in at.caption if "your teacher reads its text first" in c.value]
    assert "shows on the projector only if they approve it" in promise and "deleted when the class ends" in promise
    join = phone(code)
    assert any("Your teacher reads its text first" in c.value and "It is deleted when the class ends." in c.value
               for c in join.caption)
    at.text_area(key="text").input("A long one. " * 20).run()  # 240 characters: the page scores it, the room not
    button(at, live.SEND_SENTENCE).click().run()
    (refused,) = at.warning
    assert one_sentence(unescaped(refused.value)) and f"at most {MAX_SENTENCE} characters" in refused.value
    assert store.sentences(code, approved_only=False) == []

    at.text_area(key="text").input(SENTENCE).run()
    button(at, live.SEND_SENTENCE).click().run()
    assert not at.exception and not at.warning
    (sent,) = store.sentences(code, approved_only=False)
    assert sent.sentence == SENTENCE and not sent.approved
    assert fmt(sent.loss) == metric(at, "Loss: mean(-log p)")  # the loss the page shows, from its own scorer
    (success,) = at.success
    assert one_sentence(unescaped(success.value)) and f"Sent to the class {code}" in unescaped(success.value)
    store.approve_sentence(sent.id)  # its tokens are kept, at most one per prediction the page scored
    assert 1 <= len(store.surprising_tokens(code, limit=100)) <= int(metric(at, "Predictions scored"))

    button(at, live.SEND_SENTENCE).click().run()  # again at once: the pause between a phone's sentences
    (refused,) = at.warning
    assert one_sentence(unescaped(refused.value)) and "before sending another sentence" in refused.value
    assert len(store.sentences(code, approved_only=False)) == 1

    store.close_room(code)  # the class ends while the page is open: one sentence, and the button goes
    at.text_area(key="text").input(SENTENCE).run()
    button(at, live.SEND_SENTENCE).click().run()
    (refused,) = at.warning
    assert one_sentence(unescaped(refused.value)) and "has ended" in refused.value
    at.run()
    assert live.SEND_SENTENCE not in labels(at) and live.PHONE_ROOM not in at.session_state
    assert store.sentences(code, approved_only=False) == []  # deleted when the room closed


def test_a_sentence_typed_and_sent_at_once_is_the_one_the_room_gets_with_its_own_loss(store):
    """A phone types and taps Send at once: the tap commits the box and lands on the button drawn for the text
    before. The room gets the sentence typed, with the loss the page shows for it (it got the text before)."""
    code = store.open_room()
    at = joined_your_sentence(store, code)
    at.text_area(key="text").input(SENTENCE)
    button(at, live.SEND_SENTENCE).click().run()
    assert not at.exception and not at.warning
    (sent,) = store.sentences(code, approved_only=False)
    assert sent.sentence == SENTENCE and at.text_area(key="text").value == SENTENCE
    assert fmt(sent.loss) == metric(at, "Loss: mean(-log p)")
    at.run()  # a later run sends nothing more
    assert len(store.sentences(code, approved_only=False)) == 1 and not at.warning


def test_your_sentence_has_no_send_button_for_a_browser_in_no_class(store):
    at = AppTest.from_file(APP, default_timeout=120)
    at.run()
    at.switch_page("app_pages/your_sentence.py").run()
    assert not at.exception and live.SEND_SENTENCE not in labels(at)


def test_the_join_page_scores_a_typed_sentence_as_your_sentence_does(store):
    code = store.open_room()
    at = phone(code)
    # the box takes a longer paste, and the page says how long it is (a box that cut it left a phone blank)
    assert not at.text_area(key=live.SENTENCE_BOX).max_chars
    for typed in ("", " \n "):  # refused before any model is asked
        at.text_area(key=live.SENTENCE_BOX).set_value(typed)
        button(at, live.SEND_SENTENCE).click().run()
        (refused,) = [unescaped(w.value) for w in at.warning]
        assert one_sentence(refused) and "Type a sentence first" in refused
    assert store.sentences(code, approved_only=False) == []
    (link,) = at.get("page_link")  # to Your sentence, in this session: it sends from there too
    assert link.proto.page == "sentence" and not link.proto.query_string

    at.text_area(key=live.SENTENCE_BOX).set_value(f"  {SENTENCE} ")
    button(at, live.SEND_SENTENCE).click().run()
    assert not at.exception
    (sent,) = store.sentences(code, approved_only=False)
    assert sent.sentence == SENTENCE
    (success,) = [unescaped(w.value) for w in at.success]
    assert not at.warning
    assert one_sentence(success) and f"its loss of {fmt(sent.loss)} per token" in success
    (link,) = at.get("page_link")
    assert link.proto.query_string == urlencode({"text": SENTENCE})
    # the same text on Your sentence, in the same session: the same loss
    at.query_params["text"] = SENTENCE
    at.switch_page("app_pages/your_sentence.py").run()
    assert metric(at, "Loss: mean(-log p)") == fmt(sent.loss) and live.SEND_SENTENCE in labels(at)


def test_the_projector_shows_the_rooms_numbers_and_a_text_only_once_approved(store):
    at = teacher()
    code = open_room(at)
    assert "The room's sentences" not in texts(at) and not [e for e in at.expander if e.label == live.QUEUE_LABEL]
    sent = [("The wombat sat on the mat.", 3.25, [("␣wombat", 5.5), ("␣mat", 4.0)]),
            (HOSTILE, 7.5, [("**", 9.0), ("<img", 8.0)]),
            ("A narwhal plays chess.", 6.0, [("␣narwhal", 11.0), ("␣chess", 7.0)])]
    ids = [store.add_sentence(code, store.join(code), text, loss, tokens=tokens) for text, loss, tokens in sent]
    at.run()
    assert "3 sentences sent." in texts(at) and f"from {MIN_SHOWN} sentences on" in texts(at)
    assert not [m for m in at.metric if m.label == "Mean loss per token"]  # under 5: the count only

    for text, loss in (("Axolotls bark.", 2.0), ("Platypus is the capital of France.", 1.5)):
        store.add_sentence(code, store.join(code), text, loss)
    at.run()
    losses = [s.loss for s in store.sentences(code, approved_only=False)]
    assert len(losses) == 5
    assert metric(at, "Sentences sent") == "5"
    assert metric(at, "Mean loss per token") == fmt(statistics.mean(losses))
    assert metric(at, "Standard deviation") == fmt(statistics.pstdev(losses))
    assert (metric(at, "Lowest loss"), metric(at, "Highest loss")) == (fmt(min(losses)), fmt(max(losses)))

    # the queue: every text in the collapsed expander, as text, and none of them anywhere else on the page
    queue = queue_of(at)
    assert not queue.proto.expanded
    assert [t.value for t in queue.text] == [text for text, _, _ in sent] + ["Axolotls bark.",
                                                                          "Platypus is the capital of France."]
    projected = off_the_queue(at)
    for word in ("wombat", "bold", "src=x", "narwhal", "Axolotl", "Platypus"):
        assert word not in projected, word
    assert "from the sentences you approve only" in texts(at).lower()  # no token before an approval

    # approved: ranked by loss among the approved only, shown escaped; their tokens the most surprising
    at.button(key=f"live-approve-{ids[1]}").click().run()
    at.button(key=f"live-approve-{ids[0]}").click().run()
    assert [s.id for s in store.sentences(code)] == ids[:2]
    ranked, surprising = approved_table(at), tokens_table(at)
    # each cell as st.table's Markdown reads it: escaped, so "**bold** <img src=x>" is shown as typed
    assert ranked["sentence"].tolist() == [escape_markdown(HOSTILE), escape_markdown("The wombat sat on the mat.")]
    assert ranked["loss per token"].tolist() == [escape_markdown(fmt(x)) for x in (7.5, 3.25)]
    assert ranked["rank"].tolist() == [1, 2]
    assert surprising["token"].tolist() == [escape_markdown(t) for t in ("**", "<img", "␣wombat", "␣mat")]
    assert surprising["-log p"].tolist() == [escape_markdown(fmt(x)) for x in (9.0, 8.0, 5.5, 4.0)]
    assert surprising["sentences"].tolist() == [1, 1, 1, 1]
    projected = off_the_queue(at)
    assert not any(word in projected for word in ("narwhal", "Axolotl", "Platypus"))  # still waiting
    assert [t.value for t in queue_of(at).text] == ["A narwhal plays chess.", "Axolotls bark.",
                                                    "Platypus is the capital of France."]
    assert not any(p.search(s) for s in markdown_of(at) for p in LIVE_MARKUP)  # the hostile text is text
    assert metric(at, "Mean loss per token") == fmt(statistics.mean(losses))  # the numbers: every sentence still

    # removed from the queue: gone from the numbers too (the sentences under 5 again: the count only)
    at.button(key=f"live-remove-{ids[2]}").click().run()
    assert [t.value for t in queue_of(at).text] == ["Axolotls bark.", "Platypus is the capital of France."]
    assert len(store.sentences(code, approved_only=False)) == 4 and "4 sentences sent." in texts(at)

    store.close_room(code)  # ended: the sentences are deleted at once
    assert store.sentences(code, approved_only=False) == [] and store.surprising_tokens(code) == []


def table_with(at: AppTest, column: str):
    """The table with that column, its headers as shown (text_table escapes them: "-log p" is "\\-log p")."""
    (table,) = [t.value for t in at.table if escape_markdown(column) in t.value.columns]
    return table.rename(columns=unescaped)


def approved_table(at: AppTest):
    return table_with(at, "loss per token")


def tokens_table(at: AppTest):
    return table_with(at, "-log p")


@pytest.mark.parametrize("case", JOIN_CASES, ids=[c["case"] for c in JOIN_CASES])
def test_every_bad_input_in_the_join_pages_sentence_box_is_one_sentence_or_sent_as_text(store, case):
    """tests/data/bad_inputs.jsonl through the join page's box for a sentence, whole (the box cuts nothing): refused
    with one sentence (one too long says how long it is), or scored and sent; and, once approved, shown on the
    teacher's page as the text it is, never as live markup."""
    code = store.open_room(teacher_secret=SECRET)
    at = phone(code)
    typed = case["text"]
    at.text_area(key=live.SENTENCE_BOX).set_value(typed)
    button(at, live.SEND_SENTENCE).click().run()
    assert not at.exception
    sent = store.sentences(code, approved_only=False)
    if sent:
        (success,) = [unescaped(s.value) for s in at.success]
        assert one_sentence(success) and [s.sentence for s in sent] == [typed.strip()] and not at.warning
        store.approve_sentence(sent[0].id)
    else:
        (refused,) = [unescaped(w.value) for w in at.warning]
        assert one_sentence(unquoted(refused))
        if len(typed.strip()) > MAX_SENTENCE:
            assert f"at most {MAX_SENTENCE} characters, and this one has {len(typed.strip())}" in refused
    assert not any(p.search(s) for s in markdown_of(at) for p in LIVE_MARKUP)
    teacher_page = teacher_of(code)
    assert not teacher_page.exception and "End the class" in labels(teacher_page)
    shown = markdown_of(teacher_page) + [c for t in teacher_page.table for c in t.value.astype(str).stack()]
    assert not any(p.search(s) for s in shown for p in LIVE_MARKUP)
