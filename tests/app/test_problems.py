"""How a learner is told that something went wrong (lmviz.app.problems.show_problem): one sentence, always shown
as text. A sentence that quotes what the learner typed must show it as typed: Markdown and HTML in it are never
read as such (tests/app/test_bad_inputs.py sends every hostile case through every registered text box the same way)."""

import re

import pyarrow
from streamlit.testing.v1 import AppTest

from tests.helpers import APP, unescaped

TYPED = "**bold** <img src=x> $x^2$ :red[red]"
# the typed markup, where it would still be live: not preceded by Markdown's escaping backslash
LIVE = [re.compile(p) for p in (r"(?<!\\)\*(?<!\\)\*bold", r"(?<!\\)<img", r"(?<!\\)\$x\^2", r"(?<!\\):red\[")]


def test_a_word_the_tokenizer_cannot_write_is_quoted_as_typed_on_next_token():
    """Next token's "a word I type…": lmviz's tiny GPT reads an unknown word as its unknown token, and the page
    says so in a sentence that quotes the word. (Before one way of showing problems, this sentence went to
    Markdown unescaped: the word came out bold, an image tag and a formula.)"""
    at = AppTest.from_file(APP, default_timeout=120)
    at.query_params["model"] = "lmviz-tiny-gpt"
    at.run()
    at.switch_page("app_pages/next_token.py").run()
    at.selectbox(key="next_true").set_value("a word I type…").run()
    at.text_input(key="next_word").input(TYPED).run()
    assert not at.exception, at.exception
    said = [w.value for w in at.warning if "cannot write" in w.value]
    assert len(said) == 1, [w.value for w in at.warning]
    assert TYPED in unescaped(said[0])  # the word itself, every character of it
    assert not any(live.search(said[0]) for live in LIVE), said[0]


def test_show_problem_escapes_whatever_it_is_given_in_every_kind():
    def page():
        from lmviz.app.problems import show_problem
        from lmviz.errors import LearnerError

        show_problem(LearnerError("Nothing to score in **bold** <img src=x> $x^2$ :red[red]."))
        show_problem("**bold** <img src=x> $x^2$ :red[red].", kind="error")
        show_problem("**bold** <img src=x> $x^2$ :red[red].", kind="info")
        show_problem("**bold** <img src=x> $x^2$ :red[red].", kind="caption")

    at = AppTest.from_function(page).run()
    assert not at.exception, at.exception
    shown = [at.warning[0].value, at.error[0].value, at.info[0].value, at.caption[0].value]
    for value in shown:
        assert TYPED in unescaped(value) and not any(live.search(value) for live in LIVE), value


def test_a_table_in_presentation_mode_shows_its_cells_as_text():
    """In presentation mode a key table is an HTML table (st.table), whose cells and headers Streamlit reads as
    Markdown: a token such as "**" or a typed word "*big*" must not come out bold. Plain frames and Stylers
    (Toy example's coloured table) alike; numbers stay numbers."""
    def page():
        import pandas as pd
        import streamlit as st

        from lmviz.app.chrome import PRESENT_KEY, key_table, readable_table

        st.session_state[PRESENT_KEY] = True
        frame = pd.DataFrame({"token": ["**bold**", "<img src=x>"], "$x^2$": [1, 2]},
                             index=pd.Index([":red[red]", "b"], name="`code`"))
        key_table(frame, "t.csv")
        readable_table(frame.style.apply(lambda column: ["color: red"] * len(column)))

    at = AppTest.from_function(page).run()
    assert not at.exception, at.exception
    plain, styled = at.table[0], at.table[1]
    # the Styler's cells as drawn: its display values, an Arrow table in the element
    styled_cells = pyarrow.ipc.open_stream(styled.proto.arrow_data.styler.display_values).read_pandas()
    assert "color: red" in styled.proto.arrow_data.styler.styles  # its colours kept
    for shown, cells in ((plain.value, plain.value), (styled.value, styled_cells)):
        texts = [*map(str, shown.columns), *map(str, shown.index), *map(str, shown.index.names),
                 *cells.astype(str).to_numpy().ravel()]
        assert {unescaped(c) for c in texts} >= {"**bold**", "<img src=x>", "$x^2$", ":red[red]", "`code`", "1",
                                                 "2"}, texts
        assert not any(live.search(c) for c in texts for live in LIVE), texts
    assert plain.value.iloc[:, 1].tolist() == [1, 2]


def test_a_computation_refused_or_out_of_memory_says_its_sentence_and_stops_the_page():
    """lmviz.app.chrome.result_or_stop, the pages' "compute, or say why in one sentence and stop"."""
    def page():
        import streamlit as st

        from lmviz.app.chrome import PageStopped, result_or_stop
        from lmviz.errors import NotEnoughMemory, NothingToScore

        fails = st.radio("What fails", ["nothing", "the text", "memory"])

        def compute():
            if fails == "the text":
                raise NothingToScore("This text gives the model nothing to predict.")
            if fails == "memory":
                raise NotEnoughMemory("Scoring this text needs 3 GiB more than the CPU has.", "cpu")
            return 42

        try:
            st.markdown(f"Result: {result_or_stop(compute, (NothingToScore,), 'Try a shorter text.')}")
        except PageStopped:
            st.caption("stopped")

    at = AppTest.from_function(page).run()
    assert [m.value for m in at.markdown] == ["Result: 42"] and not at.warning
    at.radio[0].set_value("the text").run()
    assert [unescaped(w.value) for w in at.warning] == ["This text gives the model nothing to predict."]
    assert not at.markdown and [c.value for c in at.caption] == ["stopped"]
    at.radio[0].set_value("memory").run()
    assert [unescaped(w.value) for w in at.warning] == [
        "Scoring this text needs 3 GiB more than the CPU has. Try a shorter text."]
    assert not at.markdown and not at.exception
