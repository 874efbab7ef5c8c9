"""docs/reading.md, the reading path (issue 73): the files it names are few and short, import nothing outside
the kernel's boundary, and its by-hand recipe is what the default command runs: the same dev scores, bit for bit."""
from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

import torch

import run_multitask
from test_layers import ROOT, resolved_imports
from test_resume import FIXTURE_DATA
from training.harness.trainer import read_inputs
from training.learning.callbacks import Log
from training.configuration.sections import RunSettings
from training.learning.precision import Precision
from training.learning.recipe import build_run
from training.learning.rng import seed_everything
from training.learning.stages import multitask_stage
from training.learning.task_schema import run_tasks

READING = ROOT / "docs" / "reading.md"
MAX_FILES, MAX_LINES = 10, 1100   # issue 73's files, issue 85's lines (1,600 before)
MAX_MACHINERY = 40                # issue 85: lines of the path naming the machinery (162 before)
MACHINERY = re.compile(r"progress|clock|scalars|states\(|tqdm|log\.|checkpoint|resume|should_stop")
MAX_FOLLOWED_FILES, MAX_CLIMBS = 12, 5   # issue 73's targets for following the configuration through the calls
# what a file of the path may import beside the path's own files: the layers below, and the kernel's five modules
# kept off the path, which the path calls by one name each: a stage's records (watch.py), the evaluations' callback
# (keep_best.py), what an objective may override (objective.py), what the loop calls that is not learning
# (callbacks.py) and a thresholded head's start (calibration.py)
BOUNDARY = ("minbert", "heads", "training.data", "training.configuration", "training.learning.watch",
            "training.learning.keep_best", "training.learning.objective", "training.learning.callbacks",
            "training.learning.calibration")


def path_files(text: str) -> list[str]:
    """The ``.py`` files named in inline backticks, outside fenced code blocks, in order, once each."""
    prose = re.sub(r"```.*?```", "", text, flags=re.S)
    return list(dict.fromkeys(re.findall(r"`([\w/]+\.py)`", prose)))


def test_the_path_is_at_most_ten_files_of_1100_lines_and_40_name_the_machinery():
    files = path_files(READING.read_text(encoding="utf-8"))
    assert files[:2] == ["training/learning/recipe.py", "training/learning/stages.py"]
    assert all((ROOT / name).is_file() for name in files), files
    lines = [line for name in files for line in (ROOT / name).read_text().splitlines()]
    assert len(files) <= MAX_FILES and len(lines) <= MAX_LINES, (len(files), len(lines))
    machinery = [line for line in lines if MACHINERY.search(line)]
    assert len(machinery) <= MAX_MACHINERY, "\n".join(machinery)


def test_the_loop_is_the_epochs_the_batches_the_step_and_one_call_back():
    """Issue 85: ``TrainingLoop.train`` was 56 lines, 44 of them resume replay, records, throughput and the bar; now
    at most 30, and none of them names the machinery (the stage's watch hears each step and epoch)."""
    import inspect

    from training.learning.loop import TrainingLoop
    lines = inspect.getsource(TrainingLoop.train).splitlines()
    assert len(lines) <= 30, len(lines)
    machinery = re.compile(r"progress|clock|scalars|tqdm|checkpoint|resume|skip_step|catch_up|save\(")
    assert not [line for line in lines if machinery.search(line)]


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
    for name in ("read_inputs", "build_run", "config.plugins()", "multitask_stage", "seed_everything", "Precision", "Log"):
        assert name in text, name
    flags = ["--data_dir", str(FIXTURE_DATA), "--model", str(tiny_model_dir), "--epochs", "1",
             "--max_steps_per_epoch", "2", "--batch_size", "4", "--max_length", "24"]
    config = run_multitask.parse_config(flags)
    seed_everything(config.train.seed)
    inputs = read_inputs(config, Log())
    cpu = torch.device("cpu")
    run = build_run(config, inputs, cpu, Precision("off", cpu), config.plugins())
    result = multitask_stage(run)
    assert [e["train_steps"] for e in result["epochs"]] == [6]   # two rounds of the three tasks
    by_hand = {name: predictions.score(run_tasks(run.config)[name]) for name, predictions in result["best"]["dev"].items()}

    assert run_multitask.main([*flags, "--out_dir", str(tmp_path), "--run_name", "command", "--quiet"]) == 0
    metrics = json.loads((tmp_path / "command" / "metrics.json").read_text())
    assert metrics["dev"] == by_hand and metrics["epochs"][0]["train_steps"] == 6


def follow_config(argv: list[str]) -> tuple[list[str], list[str]]:
    """Run the command under a profiler and follow its configuration as a reader does: into each function of the
    library that takes a ``RunSettings`` as an argument (``self`` aside), each call site read once (a loop over
    the extensions is read once). Returns the files entered, in order, and the file of each climb back up: a
    return into another file that then calls down again."""
    library = ("minbert/", "heads/", "training/", "run_multitask.py")
    seen, stack, skipping, trail, files = set(), [], [], [], {}

    def file_of(code) -> str | None:
        """The code's file relative to the root when it is the library's (once per code object)."""
        if code not in files:
            path = Path(os.path.abspath(code.co_filename))
            relative = path.relative_to(ROOT).as_posix() if path.is_relative_to(ROOT) else ""
            files[code] = relative if relative.startswith(library) else None
        return files[code]

    def takes_config(frame) -> bool:
        code = frame.f_code
        names = code.co_varnames[:code.co_argcount + code.co_kwonlyargcount]
        return any(isinstance(frame.f_locals.get(name), RunSettings) for i, name in enumerate(names)
                   if not (i == 0 and name in ("self", "cls")))

    def profile(frame, event, arg):
        if skipping:
            if event == "return" and frame is skipping[-1]:
                skipping.pop()
        elif event == "call" and file_of(frame.f_code) and takes_config(frame):
            site = (frame.f_back.f_code.co_filename, frame.f_back.f_lineno, frame.f_code)
            if site in seen:
                skipping.append(frame)
                return
            seen.add(site)
            stack.append(frame)
            trail.append(("down", file_of(frame.f_code)))
        elif event == "return" and stack and stack[-1] is frame:
            stack.pop()
            trail.append(("up", file_of(stack[-1].f_code) if stack else None))

    sys.setprofile(profile)
    try:
        assert run_multitask.main(argv) == 0
    finally:
        sys.setprofile(None)
    entered = list(dict.fromkeys(file for kind, file in trail if kind == "down"))
    last_down = max(i for i, (kind, _) in enumerate(trail) if kind == "down")
    here, climbs = "run_multitask.py", []
    for i, (kind, file) in enumerate(trail):
        if kind == "up" and file != here and i < last_down:
            climbs.append(file)
        here = file
    return entered, climbs


def test_following_the_configuration_enters_at_most_twelve_files_and_climbs_at_most_five_times(tmp_path,
                                                                                            tiny_model_dir):
    """Issue 73's count, from run_multitask.py through the calls of the default command (two rounds): the trainer
    hands the whole configuration to the run folder, the kernel's task table and its recipe only (issue 73 counted
    25 files and 28 climbs before the kernel). The extensions' hooks and the model take their own sections."""
    argv = ["--data_dir", str(FIXTURE_DATA), "--model", str(tiny_model_dir), "--epochs", "1", "--max_steps_per_epoch",
            "2", "--batch_size", "4", "--max_length", "24", "--out_dir", str(tmp_path), "--quiet"]
    entered, climbs = follow_config(argv)
    assert ["run_multitask.py", *entered][:2] == ["run_multitask.py", "training/harness/trainer.py"]
    assert len(["run_multitask.py", *entered]) <= MAX_FOLLOWED_FILES, entered
    assert 1 <= len(climbs) <= MAX_CLIMBS, climbs
    # with stages and a regularizer on, the hooks they call add no climb: each is given its own section
    _, with_extensions = follow_config([*argv, "--run_name", "extensions", "--pre_qqp", "--pre_qqp_steps", "1",
                                        "--smart", "--ucl", "--ucl_steps", "1"])
    assert with_extensions == climbs, with_extensions
