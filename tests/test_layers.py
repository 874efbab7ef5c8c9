"""The import rule of ../shared/DESIGN.md, read from the source: run_multitask.py → training → heads →
minbert; training/data/ (the readers and batching) sits below the rest of training and imports only
minbert (its batches use the tokenizer) and itself; nothing in the library imports the command, the studies
(scripts/) or the benchmarks (bench/); no top-level ``data`` package (./data holds the CSVs).
Inside training/, the learning kernel (training/learning/) never reaches the harness or the tools, the harness
never the tools; no module below the entry points changes process-wide state.
And the map of those layers, the README's Layout section, names every module of the library."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PROJECT = {"minbert", "heads", "training", "scripts", "bench", "run_multitask", "tests"}
MAY_IMPORT = {
    "minbert": {"minbert"},
    "heads": {"heads", "minbert"},
    "training": {"training", "heads", "minbert"},
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


def test_the_readers_sit_below_everything_that_trains():
    """training/data/ imports minbert and training.data only: absolute imports of other training modules
    and relative imports out of the package (``from ..loop``) are both refused."""
    files = sorted((ROOT / "training" / "data").rglob("*.py"))
    assert len(files) >= 5
    wrong = []
    for path in files:
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.ImportFrom) and node.level > 1:
                wrong.append(f"{path.relative_to(ROOT)}:{node.lineno} imports from outside training/data")
            names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                     [node.module] if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module else [])
            wrong += [f"{path.relative_to(ROOT)}:{node.lineno} imports {name}" for name in names
                      if name.split(".")[0] in PROJECT and name.split(".")[0] != "minbert"
                      and not name.startswith("training.data")]
    assert not wrong, "\n".join(wrong)


def test_no_top_level_data_package():
    """./data is the default data folder (CSVs, git-ignored), not code: a data.py of the user's beside the
    command cannot shadow the readers, and installing the project adds no package named ``data``."""
    assert not (ROOT / "data" / "__init__.py").exists()
    assert not list((ROOT / "data").glob("*.py"))
    include = (ROOT / "setup.cfg").read_text().split("[options.packages.find]", 1)[1].split("\n[", 1)[0]
    assert "training" in include and "data" not in include.replace("training", "")


def test_the_checker_sees_a_wrong_import(tmp_path):
    module = tmp_path / "m.py"
    module.write_text("import os\nimport run_multitask\nfrom training.harness.trainer import run\nfrom . import sibling\n")
    assert project_imports(module) == [(2, "run_multitask"), (3, "training")]


def layout_block(readme: str) -> list[str]:
    """The lines of the code block under the README's "## Layout" heading."""
    section = readme.split("\n## Layout\n", 1)[1].split("\n## ", 1)[0]
    return section.split("```", 2)[1].splitlines()


def unmapped_modules(block: list[str], modules: list[str]) -> list[str]:
    """The modules (paths from the root) that no line of the layout block names. A line names the paths it
    starts with: ``training/learning/precision.py, device.py`` (a bare name is in the first path's folder) or a
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
    block = ["minbert/model.py   BertModel", "training/learning/precision.py, device.py --amp; devices",
             "training/extensions/   one module per extension", "                 a continued description"]
    assert unmapped_modules(block, ["minbert/model.py", "training/learning/device.py", "training/extensions/smart.py",
                                    "training/harness/memory.py", "minbert/config.py"]) == ["training/harness/memory.py",
                                                                                    "minbert/config.py"]


def module_graph(root: Path, package: str) -> dict[str, set[str]]:
    """Module -> the modules of ``package`` it imports, anywhere in it (inside functions and ``if
    TYPE_CHECKING:`` blocks too: a deferred or annotation-only import only hides a cycle, and issue 60
    counted them); a registry that imports its package's modules by name (``import_module``) imports them all."""
    files = {".".join(path.relative_to(root).with_suffix("").parts).removesuffix(".__init__"): path
             for path in sorted((root / package).rglob("*.py"))}
    graph = {}
    for name, path in files.items():
        here = name if path.name == "__init__.py" else name.rpartition(".")[0]
        found: set[str] = set()

        def visit(node):
            for child in ast.iter_child_nodes(node):
                if isinstance(child, ast.ImportFrom):
                    base = ".".join(here.split(".")[:len(here.split(".")) - child.level + 1]) if child.level else ""
                    module = ".".join(part for part in (base, child.module) if part)
                    submodules = [f"{module}.{alias.name}" for alias in child.names
                                  if f"{module}.{alias.name}" in files]
                    found.update(submodules or [module])   # ``from . import x`` imports x, not its package
                elif isinstance(child, ast.Import):
                    found.update(alias.name for alias in child.names)
                visit(child)
        visit(ast.parse(path.read_text(), filename=str(path)))
        if path.name == "__init__.py" and "import_module(" in path.read_text():
            found.update(other for other in files if other.startswith(name + "."))
        graph[name] = {module for module in found if module in files and module != name}
    return graph


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Each cycle a depth-first walk meets, as the path that closes it."""
    cycles, state, path = [], {}, []

    def walk(module):
        state[module] = "open"
        path.append(module)
        for other in sorted(graph[module]):
            if state.get(other) == "open":
                cycles.append(path[path.index(other):] + [other])
            elif other not in state:
                walk(other)
        path.pop()
        state[module] = "done"
    for module in sorted(graph):
        if module not in state:
            walk(module)
    return cycles


def test_the_training_modules_import_each_other_without_a_cycle():
    """``RunConfig`` imports the registry of extensions, the extensions import the run's parts below them,
    and those read the settings as ``config.RunSettings``, below the registry; what sits above (the trainer's
    ``run``, ``runs.load_run``) reaches them through ``Run``. Annotations count: no ``TYPE_CHECKING`` way up."""
    cycles = import_cycles(module_graph(ROOT, "training"))
    assert not cycles, "\n".join(" -> ".join(cycle) for cycle in cycles)


def test_the_configuration_is_a_leaf():
    """Issues 60 and 73: the configuration package (sections, flags, task declarations, config and task files)
    imports nothing of training/ but itself, anywhere in a module (type-only imports too): the registries build
    on it. It reads the libraries below (minbert; heads, whose registries of parts are the choices of
    --pooling, --para_head, --sts_head, --pair_projection, --sts_loss, so a new part is one line there).
    ``RunConfig``, the sections with every extension's filled in, is assembled above the registry."""
    graph = module_graph(ROOT, "training")
    wrong = {module: sorted(m for m in imported if not m.startswith("training.configuration"))
             for module, imported in graph.items() if module.startswith("training.configuration")}
    assert len(wrong) >= 7 and not any(wrong.values()), wrong
    outside = [f"{path.relative_to(ROOT)}:{line} imports {top}"
               for path in (ROOT / "training" / "configuration").rglob("*.py")
               for line, top in project_imports(path) if top not in ("minbert", "heads", "training")]
    assert not outside, outside
    assert "training.extensions" in graph["training.harness.run_config"]


def test_the_cycle_check_sees_a_deferred_import_and_a_registry(tmp_path):
    package = tmp_path / "pkg"
    (package / "plugins").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "config.py").write_text("def registry():\n    from .plugins import ALL\n    return ALL\n")
    (package / "plugins" / "__init__.py").write_text("from importlib import import_module\n"
                                                     "ALL = [import_module(f'{__name__}.one')]\n")
    (package / "plugins" / "one.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                                                "    from ..config import registry\n")
    cycle = [["pkg.config", "pkg.plugins", "pkg.plugins.one", "pkg.config"]]
    assert import_cycles(module_graph(tmp_path, "pkg")) == cycle        # an annotation-only import closes it too
    (package / "plugins" / "one.py").write_text("from ..config import registry\n")
    assert import_cycles(module_graph(tmp_path, "pkg")) == cycle
    (package / "plugins" / "one.py").write_text("from typing import TYPE_CHECKING\n")
    assert import_cycles(module_graph(tmp_path, "pkg")) == []



def resolved_imports(path: Path, root: Path = ROOT) -> list[tuple[int, str]]:
    """(line, absolute module name) of every import of ``path``, anywhere in it (inside functions and ``if
    TYPE_CHECKING:`` blocks too), relative ones resolved against the file's package."""
    parts = list(path.relative_to(root).with_suffix("").parts)
    package = parts[:-1]
    found = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package[:len(package) - node.level + 1] if node.level else []
            module = ".".join([*base, *([node.module] if node.module else [])])
            found += [(node.lineno, f"{module}.{alias.name}" if not node.module else module) for alias in node.names]
    return found


# layer of training/ -> the project's modules (prefixes) it may import; the kernel's rule is issue 73's
TRAINING_LAYERS = {
    "learning": ("minbert", "heads", "training.data", "training.configuration", "training.learning"),
    "extensions": ("minbert", "heads", "training.data", "training.configuration", "training.learning",
                   "training.extensions"),
    "harness": ("minbert", "heads", "training.data", "training.configuration", "training.learning",
                "training.extensions", "training.harness"),
}


@pytest.mark.parametrize("layer", sorted(TRAINING_LAYERS))
def test_a_training_layer_imports_only_what_lies_below_it(layer):
    """The learning kernel imports minbert, heads, training/data, the configuration and itself: never the harness
    (run folder, resume, outputs, ends), the tools or the command; the extensions plug into the kernel and never
    reach the harness either; the harness never imports the tools."""
    files = sorted((ROOT / "training" / layer).rglob("*.py"))
    assert len(files) > 10, layer
    allowed = TRAINING_LAYERS[layer]
    wrong = [f"{path.relative_to(ROOT)}:{line} imports {module}" for path in files
             for line, module in resolved_imports(path) if module.split(".")[0] in PROJECT | {"training"}
             and not any(module == prefix or module.startswith(prefix + ".") for prefix in allowed)]
    assert not wrong, "\n".join(wrong)


def test_the_import_resolver_sees_relative_and_deferred_imports(tmp_path):
    module = tmp_path / "training" / "learning" / "m.py"
    module.parent.mkdir(parents=True)
    module.write_text("from . import loop\nfrom ..harness.resume import TrainingClock\n"
                      "def f():\n    from training.tools import grid\n")
    assert resolved_imports(module, tmp_path) == [(1, "training.learning.loop"), (2, "training.harness.resume"),
                                                  (4, "training.tools")]


# Process-wide state a module may change only from a command-line entry point (run_multitask.py, training/tools/).
PROCESS_WIDE_ASSIGNMENTS = {"excepthook", "formatwarning", "showwarning", "unraisablehook"}
PROCESS_WIDE_CALLS = {"signal.signal", "keep_freed_memory", "torch.set_num_threads", "warnings.simplefilter",
                      "warnings.filterwarnings", "sys.setrecursionlimit"}
# minbert/atomic.py's signals_deferred holds Ctrl-C and SIGTERM around a file's rename and puts the handlers
# found back before it returns (a scope, not a change); it is the one call of signal.signal below the entry points
SCOPED = {("minbert/atomic.py", "signal.signal")}


def process_wide_changes(path: Path, name: str) -> list[str]:
    """``name:line what`` for each change of process-wide state in ``path``, in line order."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        targets = node.targets if isinstance(node, ast.Assign) else []
        for target in (t for tuple_ in targets for t in (tuple_.elts if isinstance(tuple_, ast.Tuple) else [tuple_])):
            if isinstance(target, ast.Attribute) and target.attr in PROCESS_WIDE_ASSIGNMENTS:
                found.append((node.lineno, f"sets {ast.unparse(target)}"))
            if isinstance(target, ast.Subscript) and ast.unparse(target.value) == "os.environ":
                found.append((node.lineno, f"sets {ast.unparse(target)}"))
        if isinstance(node, ast.Call):
            called = ast.unparse(node.func)
            if called in PROCESS_WIDE_CALLS and (name, called) not in SCOPED:
                found.append((node.lineno, f"calls {called}"))
    return [f"{name}:{line} {what}" for line, what in sorted(found)]


def test_no_library_module_changes_process_wide_state():
    """Issue 73: excepthooks, warning formatters, signal handlers, malloc settings, environment variables are the
    entry points' to change (a notebook or a test that imports the library keeps its own)."""
    files = [path for layer in ("minbert", "heads", "training") for path in sorted((ROOT / layer).rglob("*.py"))
             if "tools" not in path.relative_to(ROOT).parts]
    assert len(files) > 60
    wrong = [line for path in files for line in process_wide_changes(path, str(path.relative_to(ROOT)))]
    assert not wrong, "\n".join(wrong)


def test_the_process_state_check_sees_each_kind(tmp_path):
    module = tmp_path / "m.py"
    module.write_text("import sys, threading, warnings, signal, os\nthreading.excepthook = print\n"
                      "old, warnings.formatwarning = warnings.formatwarning, str\nsignal.signal(2, print)\n"
                      "os.environ['X'] = '1'\nkeep_freed_memory()\nx = sys.excepthook\n")
    assert [line.split(" ", 1)[1] for line in process_wide_changes(module, "m.py")] == [
        "sets threading.excepthook", "sets warnings.formatwarning", "calls signal.signal", "sets os.environ['X']",
        "calls keep_freed_memory"]
