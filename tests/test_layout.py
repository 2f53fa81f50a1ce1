"""The house's boundaries (ARCHITECTURE.md): pages get models through lmviz.app.choosers; Streamlit stays
in the two glue modules; the library never imports a page; plots and numbers never load a model."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LOADING_MODULES = {"lmviz.models.loading", "lmviz.models.pretrained", "lmviz.models.bundled", "transformers"}
STREAMLIT_GLUE = {"ui.py", "classroom.py"}


def imported_modules(path: Path) -> set[str]:
    """Every module a file imports, at any depth of the file (imports inside functions count too)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


def test_pages_get_their_models_through_ui():
    pages = sorted((ROOT / "app_pages").glob("*.py"))
    assert len(pages) >= 9
    for page in pages:
        assert not imported_modules(page) & LOADING_MODULES, f"{page.name} loads models itself: use lmviz.app.choosers"


def test_streamlit_stays_in_the_glue_and_the_library_never_imports_a_page():
    for module in sorted((ROOT / "lmviz").glob("*.py")):
        imports = imported_modules(module)
        assert not any(name.startswith("app_pages") for name in imports), module.name
        if module.name not in STREAMLIT_GLUE:
            assert "streamlit" not in imports, f"{module.name} imports Streamlit"


def test_plots_and_numbers_never_load_a_model():
    for name in ("plots.py", "numbers.py", "palettes.py", "glossary.py"):
        assert not imported_modules(ROOT / "lmviz" / name) & (LOADING_MODULES | {"lmviz.lessons.causal_lm", "torch"}), name
