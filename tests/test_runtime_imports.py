"""runtime/ has no import cycles: every module's imports, at module level, inside
functions and under ``TYPE_CHECKING`` alike, form a graph without a loop.

A cycle is how shared state creeps back (two modules that each reach into the other),
and a function-level import that hides one is still one.
"""

from __future__ import annotations

import ast
from pathlib import Path

import rightsize.runtime

PACKAGE = "rightsize.runtime"
ROOT = Path(rightsize.runtime.__file__).parent


def runtime_modules() -> dict[str, Path]:
    modules = {}
    for path in ROOT.rglob("*.py"):
        parts = [p for p in path.relative_to(ROOT).with_suffix("").parts if p != "__init__"]
        modules[".".join([PACKAGE, *parts])] = path
    return modules


def imports_of(path: Path, package: str) -> set[str]:
    """Every name ``path`` imports, wherever the import statement is (``from a import b``
    names both ``a`` and ``a.b``: ``b`` may be a module)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level:  # relative: from the importing module's package
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                module = f"{base}.{module}" if module else base
            names.add(module)
            names.update(f"{module}.{alias.name}" for alias in node.names)
    return names


def import_graph() -> dict[str, set[str]]:
    modules = runtime_modules()
    graph = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
        graph[name] = {m for m in imports_of(path, package) if m in modules and m != name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The graph's strongly connected components of more than one module (Tarjan's)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_walker_finds_a_cycle_through_a_function_level_import(tmp_path):
    (tmp_path / "a.py").write_text("from pkg import b\n")
    (tmp_path / "b.py").write_text("def f():\n    from pkg.a import x\n")
    graph = {f"pkg.{p.stem}": {m for m in imports_of(p, "pkg") if m in ("pkg.a", "pkg.b")}
             for p in tmp_path.glob("*.py")}  # fmt: skip
    assert cycles(graph) == [["pkg.a", "pkg.b"]]
    graph["pkg.b"] = set()
    assert cycles(graph) == []


def test_runtime_has_no_import_cycles():
    graph = import_graph()
    assert f"{PACKAGE}.master" in graph and len(graph) > 40  # the walk saw the package
    found = [[m.removeprefix(PACKAGE + ".") for m in c] for c in cycles(graph)]
    assert found == [], f"import cycles in runtime/: {found}"
