"""The import rule of ../shared/DESIGN.md, read from the source: run_multitask.py → training → heads →
minbert, training → data → minbert (its batches use the tokenizer); data imports neither heads nor
training; nothing in the library imports the command, the studies (scripts/) or the benchmarks (bench/).
And the map of those layers, the README's Layout section, names every module of the library."""
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


def layout_block(readme: str) -> list[str]:
    """The lines of the code block under the README's "## Layout" heading."""
    section = readme.split("\n## Layout\n", 1)[1].split("\n## ", 1)[0]
    return section.split("```", 2)[1].splitlines()


def unmapped_modules(block: list[str], modules: list[str]) -> list[str]:
    """The modules (paths from the root) that no line of the layout block names. A line names the paths it
    starts with: ``training/precision.py, device.py`` (a bare name is in the first path's folder) or a
    folder, ``training/extensions/``, which names every module in it."""
    named = set()
    for line in block:
        paths = []
        for word in line.split():
            word = word.rstrip(",")
            if not word.endswith((".py", "/")):
                break
            paths.append(word if "/" in word or not paths else paths[0].rsplit("/", 1)[0] + "/" + word)
        named.update(paths)
    return [module for module in modules
            if module not in named and not any(p.endswith("/") and module.startswith(p) for p in named)]


def test_the_readme_layout_names_every_library_module():
    modules = sorted(str(path.relative_to(ROOT)) for layer in MAY_IMPORT for path in (ROOT / layer).rglob("*.py")
                     if path.name != "__init__.py")
    assert len(modules) > 40
    missing = unmapped_modules(layout_block((ROOT / "README.md").read_text(encoding="utf-8")), modules)
    assert not missing, f"README.md's Layout section does not name {missing}"


def test_the_layout_check_sees_a_module_left_out():
    block = ["minbert/model.py   BertModel", "training/precision.py, device.py --amp; devices",
             "training/extensions/   one module per extension", "                 a continued description"]
    assert unmapped_modules(block, ["minbert/model.py", "training/device.py", "training/extensions/smart.py",
                                    "training/memory.py", "minbert/config.py"]) == ["training/memory.py",
                                                                                    "minbert/config.py"]
