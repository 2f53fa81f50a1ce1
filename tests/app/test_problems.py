"""How a learner is told that something went wrong (lmviz.app.problems.show_problem): one sentence, always shown
as text. A sentence that quotes what the learner typed must show it as typed: Markdown and HTML in it are never
read as such (tests/app/test_bad_inputs.py sends every hostile case through every registered text box the same way)."""

import re

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
