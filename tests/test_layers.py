"""The import rule of ../shared/DESIGN.md, read from the source: run_multitask.py → training → heads →
minbert, training → data → minbert (its batches use the tokenizer); data imports neither heads nor
training; nothing in the library imports the command, the studies (scripts/) or the benchmarks (bench/)."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PROJECT = {"minbert", "heads", "data", "training", "scripts", "bench", "run_multitask", "tests"}
MAY_IMPORT = {
    "minbert": {"minbert"},
    "heads": {"heads", "minbert"},
    "data": {"data", "minbert"},
    "training": {"training", "heads", "minbert", "data"},
}


def project_imports(path: Path) -> list[tuple[int, str]]:
    """(line, top-level package) of every absolute import of one of the project's packages in ``path``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        else:
            continue
        found += [(node.lineno, name.split(".")[0]) for name in names if name.split(".")[0] in PROJECT]
    return found


@pytest.mark.parametrize("layer", sorted(MAY_IMPORT))
def test_imports_flow_one_way(layer):
    files = sorted((ROOT / layer).rglob("*.py"))
    assert files, layer
    wrong = [f"{path.relative_to(ROOT)}:{line} imports {top}" for path in files
             for line, top in project_imports(path) if top not in MAY_IMPORT[layer]]
    assert not wrong, "\n".join(wrong)


def test_the_checker_sees_a_wrong_import(tmp_path):
    module = tmp_path / "m.py"
    module.write_text("import os\nimport run_multitask\nfrom training.trainer import run\nfrom . import sibling\n")
    assert project_imports(module) == [(2, "run_multitask"), (3, "training")]
