"""The house's rules (ARCHITECTURE.md), read from the code's own imports: each layer of lmviz/ imports only the
layers below it, followed transitively; no import cycle anywhere; only the app layer imports Streamlit; the
torch-free modules leave torch out of a fresh interpreter; nothing imports a page; pages get their models through
the app layer, and the causal-LM pages through a CausalScorer. Imports inside functions count like the others: a
lazy import is still an arrow."""

import ast
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "lmviz"

# layer -> the layers its modules may import (itself included). Data flows one way: page -> app -> lessons ->
# core/models -> records -> figures -> page.
MAY_IMPORT = {
    "errors": {"errors"},
    "core": {"errors", "core"},
    "course": {"errors", "core", "course"},
    "models": {"errors", "core", "models"},
    "lessons": {"errors", "core", "models", "lessons"},
    "serving": {"errors", "core", "models", "lessons", "serving"},
    "figures": {"errors", "core", "figures"},
    "live": {"errors", "core", "course", "live"},  # the live class: rooms, codes, answers; no model, no Streamlit
    "app": {"errors", "core", "course", "models", "lessons", "serving", "figures", "live", "app"},
    # the CLI: no Streamlit; the live class's store for `live sweep`
    "__main__": {"errors", "core", "course", "models", "lessons", "serving", "live", "__main__"},
    "__init__": set(),
}
# What must import without torch: app.py draws Home from these before any model is asked for, and the join page a
# phone opens in class from lmviz.app.live.
TORCH_FREE = ["lmviz.errors", "lmviz.core.numbers", "lmviz.core.labels", "lmviz.core.text", "lmviz.figures.palettes",
              "lmviz.app.chrome", "lmviz.app.path", "lmviz.app.warm", "lmviz.app.live", "lmviz.app.garbage"]
MODEL_LOADING = {"lmviz.models.loading", "lmviz.models.pretrained", "lmviz.models.bundled", "transformers"}


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def every_module() -> dict[str, Path]:
    return {module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


MODULES = every_module()


def imports_of(path: Path, known: set[str]) -> set[str]:
    """Every module ``path`` imports, at any depth of the file; ``from lmviz.course import quiz`` is the module
    lmviz.course.quiz where that is a module."""
    found = set()
    for node in ast.walk(without_type_checking(ast.parse(path.read_text(), str(path)))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found |= {f"{node.module}.{alias.name}" for alias in node.names} & known
    return found


def without_type_checking(tree: ast.Module) -> ast.Module:
    """The module without its ``if TYPE_CHECKING:`` blocks: names imported for annotations only never run."""
    for node in ast.walk(tree):
        for field in ("body", "orelse"):
            block = getattr(node, field, None)
            if isinstance(block, list):
                setattr(node, field, [n for n in block if not (isinstance(n, ast.If) and
                                                               getattr(n.test, "id", None) == "TYPE_CHECKING")])
    return tree


def graph(modules: dict[str, Path]) -> dict[str, set[str]]:
    """lmviz module -> the lmviz modules it imports (a package's module, not the package itself, when both)."""
    known = set(modules)
    return {name: {m for m in imports_of(path, known) if m in known and m != "lmviz" and m != name}
            for name, path in modules.items()}


def reachable(edges: dict[str, set[str]], start: str) -> set[str]:
    seen, todo = set(), [start]
    while todo:
        for nxt in edges.get(todo.pop(), ()):
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return seen


def layer(module: str) -> str:
    return module.split(".")[1] if "." in module else "__init__"


def rule_breaks(edges: dict[str, set[str]]) -> list[str]:
    """'a -> b (through c)' for every lmviz module a that reaches a module b its layer may not import."""
    breaks = []
    for module in edges:
        allowed = MAY_IMPORT[layer(module)]
        for target in sorted(reachable(edges, module)):
            if layer(target) not in allowed:
                path = shortest_path(edges, module, target)
                breaks.append(f"{module} -> {target}"
                              + (f" (through {' -> '.join(path[1:-1])})" if len(path) > 2 else ""))
    return breaks


def shortest_path(edges: dict[str, set[str]], start: str, goal: str) -> list[str]:
    paths, seen = [[start]], {start}
    while paths:
        path = paths.pop(0)
        for nxt in sorted(edges.get(path[-1], ())):
            if nxt == goal:
                return [*path, nxt]
            if nxt not in seen:
                seen.add(nxt)
                paths.append([*path, nxt])
    return []


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), or of one that imports itself."""
    index, low, stack, on_stack, found, counter = {}, {}, [], set(), [], [0]

    def visit(node):
        index[node] = low[node] = counter[0]
        counter[0] += 1
        stack.append(node)
        on_stack.add(node)
        for nxt in edges.get(node, ()):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1 or node in edges.get(node, ()):
                found.append(sorted(component))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return found


def test_every_module_is_in_a_known_layer():
    assert {layer(m) for m in MODULES} <= set(MAY_IMPORT), sorted({layer(m) for m in MODULES} - set(MAY_IMPORT))


def test_each_layer_imports_only_the_layers_below_it_followed_transitively():
    assert rule_breaks(graph(MODULES)) == []


def test_no_import_cycle_anywhere():
    assert cycles(graph(MODULES)) == []


def test_the_rules_catch_a_back_import_and_a_cycle():
    """The checks themselves, on the package's graph with one import added that runs back up: the numbers of
    core importing the course's quiz, which imports them (a cycle, as lmviz.ui and lmviz.classroom once did)."""
    edges = graph(MODULES)
    edges["lmviz.core.numbers"] = {*edges["lmviz.core.numbers"], "lmviz.course.quiz"}
    breaks = rule_breaks(edges)
    assert "lmviz.core.numbers -> lmviz.course.quiz" in breaks
    assert ["lmviz.core.numbers", "lmviz.course.quiz"] in cycles(edges)
    # and every module of core that uses the numbers inherits the break, transitively
    assert "lmviz.core.compare -> lmviz.course.quiz (through lmviz.core.numbers)" in breaks


def test_only_the_app_layer_imports_streamlit_and_nothing_imports_a_page():
    for module, path in MODULES.items():
        imported = imports_of(path, set(MODULES))
        assert not any(name.startswith("app_pages") for name in imported), module
        if layer(module) != "app":
            assert not any(name.split(".")[0] == "streamlit" for name in imported), f"{module} imports Streamlit"


# Libraries the tests read as references and the app must never need (requirements-dev.txt only)
TEST_REFERENCES = {"trl"}


def test_no_module_or_page_imports_a_test_reference():
    sources = {module: path for module, path in MODULES.items()} | {
        path.name: path for path in [ROOT / "app.py", *sorted((ROOT / "app_pages").glob("*.py"))]}
    for name, path in sources.items():
        imported = {module.split(".")[0] for module in imports_of(path, set(MODULES))}
        assert not imported & TEST_REFERENCES, f"{name} imports {imported & TEST_REFERENCES}: a test reference only"


def test_pages_get_their_models_through_the_app_layer():
    pages = sorted((ROOT / "app_pages").glob("*.py"))
    assert len(pages) >= 9
    for page in pages:
        assert not imports_of(page, set(MODULES)) & MODEL_LOADING, f"{page.name} loads models itself: use lmviz.app"


def test_no_page_ends_its_run_with_st_stop():
    """st.stop() ends the whole run, app.py's part after the page included (the lesson's Previous / Next links, the
    end of a first visit's progress); a page stops on bad input with lmviz.app.chrome.stop_page."""
    for path in [ROOT / "app.py", *sorted((ROOT / "app_pages").glob("*.py")), *sorted((PACKAGE / "app").glob("*.py"))]:
        calls = [node for node in ast.walk(ast.parse(path.read_text())) if isinstance(node, ast.Call)
                 and ast.unparse(node.func) in ("st.stop", "streamlit.stop")]
        assert not calls, f"{path.name} calls st.stop() on line {calls[0].lineno}: use stop_page()"


SERVING_INSIDES = {"lmviz.serving.batcher", "lmviz.serving.scoring", "lmviz.serving.fair_share", "lmviz.app.caches"}


def cached_functions(tree: ast.Module) -> list[ast.FunctionDef]:
    return [node for node in tree.body if isinstance(node, ast.FunctionDef)
            and any("cache_data" in ast.unparse(decorator) for decorator in node.decorator_list)]


def test_causal_lm_pages_reach_their_model_only_through_a_causal_scorer():
    """Each causal-LM page's cached computations (its own, or the training lessons' in lmviz.app.training, which
    the warm start fills too) take the scorer and its cache key (so each one is admitted by the fair share, told
    as a sentence when memory runs out, and keyed on the model), and no page reaches behind it to the batcher, the
    scoring functions, the fair share or the cached models."""
    from lmviz.course.registry import PATH

    causal = [lesson for lesson in PATH if lesson.model == "causal"]
    assert len(causal) >= 4
    shared = cached_functions(ast.parse((ROOT / "lmviz" / "app" / "training.py").read_text()))
    assert len(shared) >= 5
    for lesson in causal:
        tree = ast.parse((ROOT / lesson.page).read_text())
        cached = cached_functions(tree) + (shared if "lmviz.app.training" in imports_of(ROOT / lesson.page,
                                                                                         set(MODULES)) else [])
        assert cached, lesson.stem
        for function in cached:
            first, second = (arg.arg for arg in function.args.args[:2])
            assert (first, second) == ("_scorer", "model_key"), f"{lesson.stem}.{function.name}({first}, {second})"
    for page in sorted((ROOT / "app_pages").glob("*.py")):
        assert not imports_of(page, set(MODULES)) & SERVING_INSIDES, f"{page.name} reaches behind the scorer"


# Imports them one by one in one fresh interpreter, and names the first that brings torch or transformers in
IMPORT_IN_TURN = """import importlib, json, sys
for module in json.loads(sys.argv[1]):
    importlib.import_module(module)
    heavy = sorted({"torch", "transformers"} & set(sys.modules))
    if heavy:
        sys.exit(f"{module} imports {heavy}")
print("none")"""


def torch_free_import_check(modules: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", IMPORT_IN_TURN, json.dumps(modules)], capture_output=True, text=True,
                          cwd=ROOT, timeout=120)


def test_torch_free_modules_leave_torch_out_of_a_fresh_interpreter():
    """One interpreter, not one per module: a module that brings torch in is named, and fails the test, whatever
    its place in the list (those after it are checked again once it is fixed)."""
    done = torch_free_import_check(TORCH_FREE + sorted(m for m in MODULES if layer(m) in ("course", "live")))
    assert done.returncode == 0 and done.stdout.strip() == "none", done.stderr


def test_the_import_check_names_a_module_that_brings_torch_in():
    done = torch_free_import_check(["lmviz.core.numbers", "lmviz.core.losses", "lmviz.errors"])
    assert done.returncode != 0 and "lmviz.core.losses imports ['torch']" in done.stderr


def test_the_tests_are_arranged_like_the_source_tree():
    """tests/<layer>/ for each layer's tests; beside them only the project-wide ones (the rules, the README, the
    requirements, the CLI), the browser tests (e2e/) and the test data."""
    folders = {path.name for path in (ROOT / "tests").iterdir() if path.is_dir() and path.name != "__pycache__"}
    layers = {path.name for path in PACKAGE.iterdir() if path.is_dir() and path.name != "__pycache__"}
    assert folders - {"e2e", "data"} <= layers, folders - layers
    beside = {path.name for path in (ROOT / "tests").glob("test_*.py")}
    assert beside == {"test_architecture.py", "test_cli.py", "test_memory_benchmark.py", "test_packaging.py",
                      "test_docs.py", "test_requirements.py", "test_gradient_step_benchmark.py",
                      "test_grpo_benchmark.py", "test_clicks_benchmark.py", "test_deploy.py", "test_replicas.py",
                      "test_live_benchmark.py", "test_test_times.py", "test_under_load.py", "test_workers.py",
                      "test_benchmarks_runner.py"}, \
        "a layer's test belongs in tests/<layer>/"


def test_each_lesson_has_its_files_under_its_stem():
    """The page, the questions and the docs page of a lesson are all named by its stem (docs/development/
    adding-a-lesson.md); its computation is the module the registry names."""
    from lmviz.course.registry import PATH

    for lesson in PATH:
        for path in (lesson.page, f"lmviz/course/questions/{lesson.stem}.py", f"docs/lessons/{lesson.stem}.md"):
            assert (ROOT / path).is_file(), path
        assert lesson.computation in MODULES, lesson.computation
