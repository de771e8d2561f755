"""Import rules of DESIGN.md section 2, read from the source files."""
import ast
from pathlib import Path

from tests.conftest import ROOT


def imported_modules(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def test_common_never_imports_methods():
    bad = {str(p): m for p in (ROOT / "common").rglob("*.py") for m in imported_modules(p)
           if m == "methods" or m.startswith("methods.")}
    assert not bad, bad


def test_no_method_imports_another():
    for pkg in (ROOT / "methods").iterdir():
        if not pkg.is_dir() or pkg.name.startswith("__"):
            continue
        for path in pkg.rglob("*.py"):
            others = {m for m in imported_modules(path) if m.startswith("methods.")
                      and m.split(".")[1] != pkg.name}
            assert not others, (str(path), others)


def test_every_method_has_run_readme_and_config():
    from common.config import choices

    for pkg in (ROOT / "methods").iterdir():
        if pkg.is_dir() and not pkg.name.startswith("__"):
            assert (pkg / "README.md").exists(), pkg
            assert "def run(" in (pkg / "__init__.py").read_text(), pkg
            assert pkg.name in choices("method"), pkg
