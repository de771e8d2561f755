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


def _module_graph() -> dict[str, set[str]]:
    """common module -> the common modules it imports (at any level of the file, lazily too)."""
    files = {".".join(p.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__"): p
             for p in (ROOT / "common").rglob("*.py")}
    graph = {}
    for name, path in files.items():
        out = set()
        for node in ast.walk(ast.parse(path.read_text())):
            targets = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                targets = [f"{node.module}.{a.name}" for a in node.names] + [node.module]
            out |= {t for t in targets if t in files and t != name}
        graph[name] = out
    return graph


# common.config <-> common.schema (through UserError): breaking it edits common/config.py, which every
# table's code fingerprint holds, so it moves with the next change that re-runs every table.
KNOWN_CYCLES = [{"common.config", "common.schema"}]


def test_no_import_cycles_in_common():
    """Strongly connected groups of common modules (a package importing its own submodules aside)."""
    graph = _module_graph()
    index, low, stack, on, groups, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = set()
            while True:
                w = stack.pop()
                on.discard(w)
                group.add(w)
                if w == v:
                    break
            groups.append(group)

    for v in graph:
        if v not in index:
            visit(v)
    cycles = [g for g in groups if len(g) > 1
              and not any(a.startswith(b + ".") or b.startswith(a + ".") for a in g for b in g if a != b)]
    assert [c for c in cycles if c not in KNOWN_CYCLES] == []
