"""Resident memory of one lmviz server once every page has been opened: what a host must provide.

    python -m benchmarks.memory [--quick] [--tiny-bert]

For each setting (float32, the default, and LMVIZ_LOW_MEMORY=1) a fresh server (scripts/serve, as the
browser tests and the Docker image start it) is opened in a real chromium, page after page in app.py's
order, each until its script run has finished; the server's resident memory (VmRSS, and its peak VmHWM,
from /proc, summed over the server and any child processes) is read after it starts and after each page. VmHWM is
set back to VmRSS before each page (/proc/PID/clear_refs), so a row's VmHWM is the peak while that page ran, and the
largest of them the server's peak.
Each page uses its default model: the bundled SmolLM2-135M for the causal-LM pages and the BERT the
BERT pages pick. Offline, that would be lmviz's tiny BERT; a host that ran `python -m lmviz prepare` has
bert-base-uncased in its Hugging Face cache, and the pages pick it. bert-base-uncased cannot be downloaded
here, so this script builds a BertForPreTraining of its size from its config (random weights, a
generated 30 522-entry vocabulary) and puts it in a temporary hub cache under that name, where `prepare`
would have put the real one (--tiny-bert skips this). --quick (for CI) opens three pages in one setting
with the tiny BERT: it proves the script works; its figures are not the app's.

The two pages that train, One step of learning and RL fine-tuning (GRPO), take the largest share while their step
runs (a second set of the weights, their gradients and the activations), and in app.py's order both come before the
BERT pages load their model. So once every page has been opened (not with --quick) the script opens them again:
One step of learning with LONG_STEP_TEXT (a text of the box's size that no page has seen, longer than the step's
256 tokens) and AdamW's step switched on, then GRPO with a new seed at its default group; each row names the tokens
the page says it used.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import tempfile
import time
from pathlib import Path
from urllib.parse import urlencode

from lmviz.models.bundled import prepare_bundled
from lmviz.models.loading import BERT_HUB_ID, TINY_BERT
from scripts.live_server import CHROMIUM_FLAGS, ROOT, SETTLED, environment_set, running_server

QUICK_PAGES = ("", "sentence", "masked-lm")  # url paths: the home page, a causal-LM page, a BERT page
SETTINGS = [("float32", {"LMVIZ_LOW_MEMORY": "0"}), ("LMVIZ_LOW_MEMORY=1", {"LMVIZ_LOW_MEMORY": "1"})]
TARGET_MB = 2500  # issues 17 and 30: the whole app under 2.5 GB, One step of learning used (issue 30: in float32 too)
MODEL_CAPTION = "[data-testid='stMain'] [data-testid='stCaptionContainer']"
STEP_PATH, GRPO_PATH = "step", "grpo"
# Notes a teacher might type, 991 characters (the box takes 1 000): with its figures and names it is 376 of SmolLM2's
# tokens, more than the 256 a step takes, so the step runs at its longest. No page has had it before: nothing is cached.
LONG_STEP_TEXT = (
    "Notes from the 4th lesson (room B-217, Tuesday 14 October 2025, 09:10 to 10:40): 27 of the 30 students came. "
    "We typed “Rain fell on the quiet harbour at dawn.” into the app; its mean loss was 3.918 nats, perplexity 50.3. "
    "Then everyone took one SGD step at lr = 0.001 and watched it drop to 3.204; at lr = 0.1 it rose to 11.57 instead, "
    "which surprised Ayşe, Tomás and Wei-Lin. Quiz: 3 questions, scores 2/3, 3/3, 1/3; median 2. Homework for 21.10: "
    "compute −log p by hand for p = 0.25, 0.5 and 0.9 (answers: 1.386, 0.693, 0.105), then explain why a confident "
    "right token (p ≈ 0.99) barely moves any weight. Bring a 12-word sentence of your own; we will compare "
    "SmolLM2-135M's 49 152-token vocabulary with the tiny BERT's, and count how many of your words split into pieces "
    "(e.g. “unbelievably” → “un”, “bel”, “iev”, “ably”?). Next week: AdamW, whose first step is lr · sign(g), and "
    "GRPO with G = 8 answers of 12 tokens each. Remember: the shared model never changes; each step works on a copy.")
GRPO_SEED = 1  # the page's default group (G = 8, 12 new tokens) drawn with another seed than its default 0


# --- the server's memory ---------------------------------------------------------------------------------


def process_tree(pid: int) -> list[int]:
    """The process and all its descendants (scripts/serve execs streamlit, so usually the process alone)."""
    pids, index = [pid], 0
    while index < len(pids):
        for children in Path(f"/proc/{pids[index]}/task").glob("*/children"):
            pids += [int(child) for child in children.read_text().split()]
        index += 1
    return pids


def resident_mb(pid: int) -> tuple[float, float, float]:
    """(VmRSS, VmHWM, RssAnon) in MB (10**6 bytes) summed over the process tree; the kernel counts them in kB.
    RssAnon is VmRSS less the pages of mapped files (safetensors weights are read through a memory map): the part
    that cannot be dropped and read again from disk when memory runs short."""
    totals = {"VmRSS": 0, "VmHWM": 0, "RssAnon": 0}
    for member in process_tree(pid):
        try:
            status = Path(f"/proc/{member}/status").read_text()
        except OSError:
            continue  # a child that ended between the listing and the read
        for key in totals:
            totals[key] += int(re.search(rf"^{key}:\s+(\d+) kB", status, re.M).group(1))
    return tuple(totals[key] * 1024 / 1e6 for key in totals)


def reset_peak(pid: int) -> None:
    """Set VmHWM back to VmRSS in each process of the tree (Linux 4.0 and later): the next read's VmHWM is the peak
    since now."""
    for member in process_tree(pid):
        try:
            Path(f"/proc/{member}/clear_refs").write_text("5")
        except FileNotFoundError:
            continue  # a child that ended between the listing and the write


class MemoryLimit:
    """A memory cgroup (the cgroup v1 controller, at /sys/fs/cgroup/memory; root only) that holds the server, with
    the limit a container host enforces (`docker run --memory`, a Kubernetes limit). The kernel counts the page
    cache of the server's mapped weight files in it too, but reclaims those clean pages before it kills anything:
    what must fit is the memory that cannot be dropped and read again. The server joins it as soon as it answers
    (the ~76 MB it has then stay counted outside: this kernel refuses memory.move_charge_at_immigrate)."""

    ROOT = Path("/sys/fs/cgroup/memory")

    def __init__(self, limit_mb: float):
        self.limit_mb = limit_mb
        self.path = self.ROOT / f"lmviz-memory-benchmark-{os.getpid()}-{time.monotonic_ns()}"
        self.path.mkdir()
        (self.path / "memory.limit_in_bytes").write_text(str(int(limit_mb * 1e6)))

    @staticmethod
    def drop_page_cache() -> None:
        """Empty the kernel's page cache, so that the weight files the server reads are charged to its cgroup, as in
        a fresh container (a file's pages count where they were first read: this script has just written or read
        them)."""
        os.sync()
        Path("/proc/sys/vm/drop_caches").write_text("1")

    def hold(self, pid: int) -> None:
        for member in process_tree(pid):
            (self.path / "cgroup.procs").write_text(str(member))

    def report(self) -> str:
        peak = int((self.path / "memory.max_usage_in_bytes").read_text()) / 1e6
        reached = int((self.path / "memory.failcnt").read_text())
        control = dict(line.split() for line in (self.path / "memory.oom_control").read_text().splitlines())
        return (f"peak {mb(peak)} of the {mb(self.limit_mb)} limit (page cache included), the limit reached "
                f"{reached:,} times (pages reclaimed), processes killed for memory: {control.get('oom_kill', '?')}")

    def close(self) -> None:
        self.path.rmdir()  # empty by now: the server has ended


# --- a bert-base-uncased-sized BERT, where `python -m lmviz prepare` would put the real one -------------------


def bert_base_sized_cache() -> Path:
    """A temporary Hugging Face hub cache holding, as bert-base-uncased, a BertForPreTraining built from
    transformers' BertConfig() (whose defaults are bert-base-uncased's sizes) with random weights and
    lmviz's tiny BERT's tokenizer, its vocabulary filled up with generated entries to 30 522."""
    import transformers

    from lmviz.models.loading import SHIPPED

    cache = Path(tempfile.mkdtemp(prefix="lmviz-memory-hub-"))
    repo = cache / f"models--{BERT_HUB_ID}"
    snapshot = repo / "snapshots" / ("0" * 40)
    snapshot.mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("0" * 40)
    config = transformers.BertConfig()
    transformers.BertForPreTraining(config).save_pretrained(snapshot)
    tokenizer = json.loads((SHIPPED[TINY_BERT] / "tokenizer.json").read_text())
    vocab = tokenizer["model"]["vocab"]
    vocab.update({f"[unused{i}]": i for i in range(len(vocab), config.vocab_size)})
    (snapshot / "tokenizer.json").write_text(json.dumps(tokenizer))
    tokenizer_config = json.loads((SHIPPED[TINY_BERT] / "tokenizer_config.json").read_text())
    tokenizer_config["model_max_length"] = config.max_position_embeddings
    (snapshot / "tokenizer_config.json").write_text(json.dumps(tokenizer_config))
    return cache


def check_prepared(cache: Path) -> str:
    """The row `python -m lmviz prepare bert-base-uncased --only` prints for that cache (it loads the model
    from local files only, as the app will): proof that the pages will find and load it."""
    from lmviz.models.offline import prepare_one

    with environment_set({"HF_HUB_CACHE": str(cache)}):
        prepared = prepare_one(BERT_HUB_ID, online=lambda: False)
    return f"{prepared.name}: {prepared.kind}, {prepared.size_mb:.0f} MB in {prepared.where}"


# --- one server, every page -----------------------------------------------------------------------------------


def server_pid() -> int:
    """The streamlit server's process id: the child of this process that runs streamlit (scripts/serve execs it;
    the others are Playwright's driver and chromium)."""
    for child in process_tree(os.getpid())[1:]:
        try:
            if b"streamlit" in Path(f"/proc/{child}/cmdline").read_bytes():
                return child
        except OSError:
            continue  # ended since the listing
    raise RuntimeError("no streamlit process was found among this process's children")


def app_pages(tab, url: str) -> list[tuple[str, str]]:
    """(title, url path) of every page in the app's own navigation, in its order (read from the running app,
    so a page added to app.py is measured too); the home page's path is ""."""
    tab.goto(url)
    tab.wait_for_selector("[data-testid='stSidebarNav'] a", timeout=300_000)
    more = tab.locator("[data-testid='stSidebarNavViewButton']")
    if more.count() and "more" in more.inner_text().lower():  # Streamlit folds a long list of pages
        more.click()
    links = tab.locator("[data-testid='stSidebarNav'] a")
    # a link's text is its icon's name, then a new line, then the page's title
    return [(link.inner_text().strip().splitlines()[-1], link.get_attribute("href").removeprefix(url).strip("/"))
            for link in links.all()]


def open_page(tab, url: str, title: str, path: str, inputs: dict[str, str] | None = None) -> str:
    """Open one page (with these inputs in its link, see lmviz.app.url_state) and wait until its script run has
    finished; the model it says it uses, if any."""
    tab.goto(f"{url}/{path}" + (f"?{urlencode(inputs)}" if inputs else ""))
    tab.wait_for_selector("[data-testid='stMain'] h1", timeout=300_000)
    tab.wait_for_function(SETTLED, timeout=300_000)
    if tab.locator("[data-testid='stException']").count():
        raise RuntimeError(f"the page {title} showed a traceback")
    if path == "":  # the home page. The warm start loads the bundled model from the first visit: let it finish here
        tab.wait_for_selector("[data-testid='stSidebar'] :text-matches('^Model: ')", timeout=300_000)
    captions = [text for text in tab.locator(MODEL_CAPTION).all_inner_texts() if text.startswith("Model: ")]
    return captions[0].removeprefix("Model: ").split(",")[0] if captions else ""


def main_text(tab) -> str:
    return tab.locator("[data-testid='stMain']").inner_text()


def found(pattern: str, text: str, page: str) -> re.Match:
    match = re.search(pattern, text)
    if match is None:
        raise RuntimeError(f"{page} does not say what this script reads from it ({pattern!r} is not on the page)")
    return match


def step_again(tab, url: str, title: str) -> tuple[str, str]:
    """One step of learning on LONG_STEP_TEXT, AdamW's step on: (the row's stage, the model the page names)."""
    model = open_page(tab, url, title, STEP_PATH, {"step_text": LONG_STEP_TEXT, "step_adamw": "1"})
    text = main_text(tab)
    tokens = int(found(r"over the N = (\d+) ", text, title).group(1)) + 1  # N labels: every token but the first
    steps = found(r"(\d+) steps? took ", text, title).group(1)
    cut = re.search(r"Only its first \d+ of (\d+) tokens are used", text)
    if "AdamW keeps two running averages" not in text:
        raise RuntimeError(f"{title} did not show AdamW's step")
    of = f" (the step's limit; the text has {cut.group(1)})" if cut else ""
    return f"{title} again: {len(LONG_STEP_TEXT)} characters, {tokens} tokens{of}, {steps} SGD steps and AdamW's, " \
           "after the BERT pages", model


def grpo_again(tab, url: str, title: str) -> tuple[str, str]:
    """RL fine-tuning (GRPO) at its default group with GRPO_SEED: (the row's stage, the model the page names)."""
    model = open_page(tab, url, title, GRPO_PATH, {"grpo_seed": str(GRPO_SEED)})
    text = main_text(tab)
    prompt, size = found(r"\((\d+) tokens\); (\d+) answers were drawn", text, title).groups()
    limit = found(r"or at (\d+) tokens", text, title).group(1)
    answer_tokens = found(r"Clipped at update 2\s+\d+ of (\d+) tokens", text, title).group(1)
    return f"{title} again: seed {GRPO_SEED}, G = {size} answers of at most {limit} tokens ({answer_tokens} answer " \
           f"tokens after a {prompt}-token prompt), after everything", model


def measure(chromium: str, environment: dict[str, str], quick: bool, limit: MemoryLimit | None = None) -> list[tuple]:
    """[(stage, model named on the page, VmRSS MB, VmHWM MB, RssAnon MB)] for one fresh server: after its start, then
    after each page (only QUICK_PAGES when quick), then (not when quick) after One step of learning and GRPO again;
    each VmHWM is the peak since the row before. With ``limit``, the server runs in that memory cgroup."""
    from playwright.sync_api import sync_playwright

    if limit is not None:
        limit.drop_page_cache()
    with environment_set(environment), running_server(ROOT / "artifacts" / "memory-benchmark.log") as url:
        pid = server_pid()  # before Playwright starts its own children
        if limit is not None:
            limit.hold(pid)
        with sync_playwright() as p:
            rows = [("server started", "", *resident_mb(pid))]
            browser = p.chromium.launch(executable_path=chromium, args=CHROMIUM_FLAGS)
            tab = browser.new_page(viewport={"width": 1280, "height": 720})
            pages = app_pages(tab, url)
            for title, path in [page for page in pages if page[1] in QUICK_PAGES] if quick else pages:
                reset_peak(pid)
                model = open_page(tab, url, title, path)
                rows.append((title, model, *resident_mb(pid)))
            if not quick:
                titles = {path: title for title, path in pages}
                for path, again in ((STEP_PATH, step_again), (GRPO_PATH, grpo_again)):
                    reset_peak(pid)
                    rows.append((*again(tab, url, titles[path]), *resident_mb(pid)))
            browser.close()
            return rows


# --- the table ------------------------------------------------------------------------------------------------


def mb(value: float) -> str:
    return f"{value:,.0f} MB".replace(",", " ")


def table_row(cells: list[str]) -> str:
    return f"| {' | '.join(cells)} |"


def print_table(results: dict[str, list[tuple]]) -> None:
    """One row per stage; for each setting the VmRSS after it and the VmHWM while it ran (its own peak)."""
    names = list(results)
    print(table_row(["after opening", "model the page names", *(f"{name}: {key}" for name in names
                                                                for key in ("VmRSS", "VmHWM while it ran"))]))
    print("|---|---|" + "---:|" * 2 * len(names))
    for index, (stage, model, *_memory) in enumerate(results[names[0]]):
        print(table_row([stage, model or "—", *(mb(results[name][index][column]) for name in names
                                                 for column in (2, 3))]))
    print(table_row(["**peak (VmHWM)**", "", *(cell for name in names
                                              for cell in ("", f"**{mb(max(row[3] for row in results[name]))}**"))]))
    print(table_row(["of the last row, not file-backed (RssAnon)", "",
                     *(cell for name in names for cell in (mb(results[name][-1][4]), ""))]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="three pages, LMVIZ_LOW_MEMORY=1 only, tiny BERT (CI)")
    parser.add_argument("--tiny-bert", action="store_true", help="the BERT pages use lmviz's tiny BERT")
    parser.add_argument("--limit-mb", type=float, metavar="MB",
                        help="run each server in a memory cgroup of this limit, as a container host does (root, "
                             "cgroup v1), and report whether it was reached and anything killed")
    args = parser.parse_args()
    if args.limit_mb is not None and not (MemoryLimit.ROOT.is_dir() and os.access(MemoryLimit.ROOT, os.W_OK)):
        parser.error(f"--limit-mb needs a writable cgroup v1 memory controller at {MemoryLimit.ROOT} (and root)")
    chromium = shutil.which("chromium")
    if chromium is None:
        print("chromium is not installed (apt-get install chromium): nothing measured.")
        return
    prepare_bundled()  # the dequantised weights are on disk, as on any start but a machine's first
    settings = SETTINGS[1:] if args.quick else SETTINGS
    hub = None if args.quick or args.tiny_bert else bert_base_sized_cache()
    # a host's defaults: the warm start on (whatever this shell or a test's conftest set), and no other hub cache
    environment = {"HF_HUB_CACHE": str(hub or Path(tempfile.mkdtemp(prefix="lmviz-memory-empty-hub-"))),
                   "LMVIZ_WARM_START": "1"}
    if hub is not None:
        print(f"A bert-base-uncased-sized BERT, as `python -m lmviz prepare` reports it: {check_prepared(hub)}\n")
    print(f"Resident memory of one server (scripts/serve), every page opened once in chromium, in app.py's order"
          f"{'' if args.quick else ', then One step of learning and RL fine-tuning (GRPO) again'}; "
          f"this machine: {os.cpu_count()} CPUs, no GPU used.\n")
    start = time.perf_counter()
    results, limits = {}, {}
    for name, setting in settings:
        limit = MemoryLimit(args.limit_mb) if args.limit_mb is not None else None
        try:
            results[name] = measure(chromium, {**environment, **setting}, args.quick, limit)
            if limit is not None:
                limits[name] = limit.report()
        except Exception:
            if limit is not None:  # the server killed for memory, most likely: say what the cgroup saw
                print(f"{name}: the server did not get through every page in its memory cgroup; {limit.report()}.")
            raise
        finally:
            if limit is not None:
                limit.close()
    print_table(results)
    for name, report in limits.items():
        print(f"\n{name}, the server in a memory cgroup: every page opened and scored; {report}.")
    print()
    for name, rows in results.items():
        peak = max(row[3] for row in rows)
        print(f"{name} peak {mb(peak)}: {'within' if peak <= TARGET_MB else 'OVER'} the {mb(TARGET_MB)} target "
              f"(issues 17 and 30).")
    print(f"{time.perf_counter() - start:.0f} s.")
    shutil.rmtree(environment["HF_HUB_CACHE"], ignore_errors=True)


if __name__ == "__main__":
    main()
