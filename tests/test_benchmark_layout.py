"""The benchmarks' layout: every script imports, the area folders import each other without a
cycle (``lib`` imports none of them), and every benchmark path the docs print exists."""

from __future__ import annotations

import ast
import importlib
import re
import sys
from graphlib import CycleError, TopologicalSorter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the repo root: `benchmarks.`
BENCHMARKS = ROOT / "benchmarks"
#: Folders under benchmarks/ that hold no scripts of an area (measured tables, results).
NOT_AREAS = {"data", "results", "__pycache__"}
AREAS = sorted(p.name for p in BENCHMARKS.iterdir() if p.is_dir() and p.name not in NOT_AREAS)
SCRIPTS = sorted(p for area in AREAS for p in (BENCHMARKS / area).glob("*.py"))


def module_name(path: Path) -> str:
    return ".".join(path.relative_to(ROOT).with_suffix("").parts)


def areas_imported(path: Path) -> set[str]:
    """The area folders (and ``lib``) a script imports, read from its source."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names = []
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        for name in names:
            parts = name.split(".")
            if parts[0] == "benchmarks" and len(parts) > 1:
                found.add(parts[1])
    return found


#: The one script at the top: the GPU check spans areas (profiling, the device model, packed
#: tuning) and sits at the path issue 40 and the device tool's notes name.
TOP_LEVEL = ["__init__.py", "gpu_check.py"]


def test_the_scripts_sit_in_area_folders_and_none_is_left_at_the_top():
    assert sorted(p.name for p in BENCHMARKS.glob("*.py")) == TOP_LEVEL
    assert "lib" in AREAS and len(AREAS) > 2
    assert all((BENCHMARKS / area / "__init__.py").exists() for area in AREAS)


@pytest.mark.parametrize("path", SCRIPTS, ids=lambda p: str(p.relative_to(BENCHMARKS)))
def test_every_script_imports_as_a_module(path: Path):
    importlib.import_module(module_name(path))


def test_the_areas_import_each_other_without_a_cycle_and_lib_imports_no_area():
    graph: dict[str, set[str]] = {area: set() for area in AREAS}
    for path in SCRIPTS:
        area = path.parent.name
        graph[area] |= areas_imported(path) - {area}
    assert graph["lib"] == set(), f"lib imports {graph['lib']}"
    assert set().union(*graph.values()) <= set(AREAS)
    try:
        tuple(TopologicalSorter(graph).static_order())
    except CycleError as cycle:
        pytest.fail(f"the area folders import each other in a circle: {cycle.args[1]}")


def test_every_script_that_imports_benchmarks_puts_the_repo_root_on_the_path_one_way():
    idiom = "sys.path.insert(0, str(Path(__file__).resolve().parents[2]))"
    for path in SCRIPTS:
        text = path.read_text()
        if path.parent.name != "lib" and areas_imported(path):
            assert idiom in text, f"{path}: imports benchmarks.* without the shared idiom"


#: A script or result path as docs print it (``*`` and ``<name>`` patterns do not match; a
#: name in capitals, ``SCENARIO.json``, stands for any).
DOC_PATH = re.compile(r"benchmarks/[\w/.-]*?\.(?:py|json)\b")


def doc_files() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def test_every_benchmark_script_and_result_the_docs_name_exists():
    missing = []
    for doc in doc_files():
        for path in sorted(set(DOC_PATH.findall(doc.read_text()))):
            if not Path(path).stem.isupper() and not (ROOT / path).exists():
                missing.append(f"{doc.relative_to(ROOT)}: {path}")
    assert not missing, "\n".join(missing)
