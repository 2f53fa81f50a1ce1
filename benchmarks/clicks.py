"""Does every page feel live? Each lesson opened from the sidebar, then its main action done with new input.

    python -m benchmarks.clicks [--quick] [--repeats N] [--pages toy,sentence,...]

One chromium tab at 1280x720 on a real server (scripts/serve), warmed first: every page opened once, so that
its model is loaded and its imports done, as in a class a few minutes in. Then, for each lesson in the path's
order, the tab opens it from the sidebar and does its main action N times (5; 1 with --quick), each time with
input it has not seen (nothing comes from a cache). Two times per click: until a number of the pinned panel
shows the new result ("result"), and until the run has ended and every element is drawn ("done"). The table
gives p50 and max of each over the N repetitions; the goal (issue 29) is a result at p50 <= 1.0 s, max <= 2 s.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import time
from dataclasses import dataclass
from typing import Callable

from lmviz.course.registry import PATH, find
from scripts.live_server import CHROMIUM_FLAGS, ROOT, SETTLED, running_server, type_into_editor

PANEL_NUMBER = ".st-key-result-panel [data-testid='stMetricValue']"
PANEL_TEXT = "selector => [...document.querySelectorAll(selector)].map(v => v.innerText.trim()).join(' | ')"
SUBJECTS = ["The cat", "A teacher", "My brother", "The old train", "Every student", "A small bird"]
ENDINGS = ["sat on the mat.", "reads a book at night.", "walked to the station.", "was late again today.",
           "likes warm bread.", "sang in the garden."]


def new_sentence(i: int) -> str:
    """A sentence no earlier repetition used (the caches key on the text)."""
    return f"{SUBJECTS[i % len(SUBJECTS)]} {ENDINGS[(i * 5 + 1) % len(ENDINGS)]} Number {i}."


# Each action types its new input, then returns the last key or click, the learner's "go": the clock starts there.
def _typed(label: str, submit: str) -> Callable:
    def act(tab, i: int) -> Callable:
        box = tab.get_by_label(label)
        box.fill(new_sentence(i))
        return lambda: box.press(submit)
    return act


def _toy_edit(tab, i: int) -> Callable:
    cell = type_into_editor(tab, 0, "I", f"0.00{i + 1}", enter=False)
    return lambda: cell.press("Enter")


def _train(tab, i: int) -> Callable:
    tab.get_by_label("Steps").fill(str(5 + i))
    return tab.get_by_role("button", name="Train", exact=True).click


def _batches(tab, i: int) -> Callable:
    box = tab.get_by_label("Sentences, one per line (at most 8)")
    box.fill(f"{new_sentence(i)}\n{new_sentence(i + 100)} It was fun.")
    return lambda: box.press("Control+Enter")


def _grpo(tab, i: int) -> Callable:
    box = tab.get_by_label("Prompt: a question whose answer a rule can check")
    box.fill(f"What is {i} + 5? Reply with just the number.")
    return lambda: box.press("Enter")


# each lesson's main action, by its address; each action is a learner's new input
ACTIONS: dict[str, Callable] = {
    "toy": _toy_edit,
    "sentence": _typed("Your text", "Control+Enter"),
    "bpb": _typed("Your text", "Control+Enter"),
    "next-token": _typed("The beginning of a text", "Control+Enter"),
    "step": _typed("Your text (the step learns it)", "Control+Enter"),
    "chat-loss": _typed("Assistant's answer (the text fine-tuning teaches)", "Enter"),
    "grpo": _grpo,
    "distill": _typed("Answer (scored by both)", "Enter"),
    "batches": _batches,
    "masked-lm": _typed("Text", "Control+Enter"),
    "nsp": _typed("Sentence B", "Enter"),
    "bert-loss": _typed("Sentence B", "Enter"),
    "train": _train,
}


@dataclass
class Row:
    page: str
    open_seconds: float
    result: list[float]
    done: list[float]


def panel_numbers(tab) -> str:
    tab.locator(PANEL_NUMBER).first.wait_for(timeout=120_000)
    return tab.evaluate(PANEL_TEXT, PANEL_NUMBER)


def settled(tab) -> None:
    tab.wait_for_selector("[data-testid='stMain'] h1", timeout=180_000)
    tab.wait_for_function(SETTLED, timeout=180_000)


def click_once(tab, act: Callable, i: int) -> tuple[float, float]:
    before = panel_numbers(tab)
    go = act(tab, i)
    start = time.perf_counter()
    go()
    tab.wait_for_function(f"([selector, before]) => ({PANEL_TEXT})(selector) !== before", arg=[PANEL_NUMBER, before],
                          timeout=180_000)
    result = time.perf_counter() - start
    settled(tab)
    return result, time.perf_counter() - start


def measure(url: str, chromium: str, repeats: int, pages: list[str]) -> list[Row]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=CHROMIUM_FLAGS)
        tab = browser.new_page(viewport={"width": 1280, "height": 720})
        for path in pages:  # warm: imports done, models loaded
            tab.goto(f"{url}/{path}")
            settled(tab)
        tab.goto(url)
        settled(tab)
        rows = []
        for path in pages:
            title, act = find(path).title, ACTIONS[path]
            start = time.perf_counter()
            tab.locator("[data-testid='stSidebarNav']").get_by_role("link", name=title, exact=True).click()
            tab.wait_for_url(f"**/{path}*")
            tab.locator(PANEL_NUMBER).first.wait_for(timeout=180_000)
            settled(tab)
            opened = time.perf_counter() - start
            try:
                times = [click_once(tab, act, 1000 * len(rows) + i) for i in range(repeats)]
            except Exception as error:
                raise RuntimeError(f"{title}: its main action did not end as expected") from error
            rows.append(Row(path, opened, [r for r, _ in times], [d for _, d in times]))
        browser.close()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one repetition per page (CI: the script still works)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--pages", default=",".join(lesson.url_path for lesson in PATH),
                        help="which lessons, by address (default: all, in the path's order)")
    args = parser.parse_args()
    pages = args.pages.split(",")
    if unknown := set(pages) - set(ACTIONS):
        parser.error(f"no such lesson: {', '.join(sorted(unknown))} (choose from {', '.join(ACTIONS)})")
    chromium = shutil.which("chromium")
    if chromium is None:
        print("skipped: chromium is not installed (apt-get install chromium)")
        return
    repeats = 1 if args.quick else args.repeats
    with running_server(ROOT / "artifacts" / "clicks-benchmark.log") as url:
        rows = measure(url, chromium, repeats, pages)
    print(f"Each page opened from the sidebar, then its main action {repeats} time(s) with new input "
          "(seconds; result = a pinned number changed, done = the run ended):")
    print(f"{'page':<12}{'open':>7}{'result p50':>12}{'result max':>12}{'done p50':>10}{'done max':>10}")
    for row in rows:
        print(f"{row.page:<12}{row.open_seconds:>7.2f}{statistics.median(row.result):>12.2f}{max(row.result):>12.2f}"
              f"{statistics.median(row.done):>10.2f}{max(row.done):>10.2f}")


if __name__ == "__main__":
    main()
