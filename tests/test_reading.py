"""docs/reading.md, the reading path (issue 73): the files it names are few and short, import nothing outside
the kernel's boundary, and its by-hand recipe is what the default command runs: the same dev scores, bit for bit."""
from __future__ import annotations

import json
import re
from pathlib import Path

import torch

import run_multitask
from test_layers import ROOT, resolved_imports
from test_resume import FIXTURE_DATA
from training.extensions import plugins
from training.harness.trainer import read_inputs
from training.learning.callbacks import Log
from training.learning.precision import Precision
from training.learning.task_schema import run_tasks
from training.learning.recipe import build_run
from training.learning.rng import seed_everything
from training.learning.stages import multitask_stage

READING = ROOT / "docs" / "reading.md"
MAX_FILES, MAX_LINES = 10, 1600   # issue 73's targets
# what a file of the path may import beside the path's own files
BOUNDARY = ("minbert", "heads", "training.data", "training.configuration")


def path_files(text: str) -> list[str]:
    """The ``.py`` files named in inline backticks, outside fenced code blocks, in order, once each."""
    prose = re.sub(r"```.*?```", "", text, flags=re.S)
    return list(dict.fromkeys(re.findall(r"`([\w/]+\.py)`", prose)))


def test_the_path_is_at_most_ten_files_of_1600_lines():
    files = path_files(READING.read_text(encoding="utf-8"))
    assert files[:2] == ["training/learning/recipe.py", "training/learning/stages.py"]
    assert all((ROOT / name).is_file() for name in files), files
    lines = sum(len((ROOT / name).read_text().splitlines()) for name in files)
    assert len(files) <= MAX_FILES and lines <= MAX_LINES, (len(files), lines)


def test_the_path_files_import_only_each_other_and_the_layers_below():
    files = path_files(READING.read_text(encoding="utf-8"))
    modules = {name.removesuffix(".py").replace("/", ".") for name in files}
    wrong = [f"{name}:{line} imports {module}" for name in files for line, module in resolved_imports(ROOT / name)
             if module.split(".")[0] in ("training", "heads", "minbert", "run_multitask", "scripts", "bench")
             and module not in modules and not module.startswith(tuple(m + "." for m in modules))
             and not any(module == b or module.startswith(b + ".") for b in BOUNDARY)]
    assert not wrong, "\n".join(wrong)


def test_the_path_checker_sees_a_file_outside_the_boundary():
    assert path_files("1. `training/learning/loop.py`: x\n```python\n`training/harness/resume.py`\n```\n"
                      "2. `training/learning/loop.py` again") == ["training/learning/loop.py"]


def test_the_recipe_by_hand_is_the_default_command(tmp_path, tiny_model_dir):
    """docs/reading.md's lines (its names only) train two rounds of the default recipe; the command with the same
    flags writes the same dev scores: the path the doc names is the one the command runs."""
    text = READING.read_text(encoding="utf-8")
    for name in ("read_inputs", "build_run", "plugins", "multitask_stage", "seed_everything", "Precision", "Log"):
        assert name in text, name
    flags = ["--data_dir", str(FIXTURE_DATA), "--model", str(tiny_model_dir), "--epochs", "1",
             "--max_steps_per_epoch", "2", "--batch_size", "4", "--max_length", "24"]
    config = run_multitask.parse_config(flags)
    seed_everything(config.train.seed)
    inputs = read_inputs(config, Log())
    cpu = torch.device("cpu")
    run = build_run(config, inputs, cpu, Precision("off", cpu), plugins(config))
    result = multitask_stage(run)
    assert [e["train_steps"] for e in result["epochs"]] == [6]   # two rounds of the three tasks
    by_hand = {name: predictions.score(run_tasks(run.config)[name]) for name, predictions in result["best"]["dev"].items()}

    assert run_multitask.main([*flags, "--out_dir", str(tmp_path), "--run_name", "command", "--quiet"]) == 0
    metrics = json.loads((tmp_path / "command" / "metrics.json").read_text())
    assert metrics["dev"] == by_hand and metrics["epochs"][0]["train_steps"] == 6
