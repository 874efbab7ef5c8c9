"""The registry of extensions (training/extensions): what is registered is wired everywhere, and a new
extension is one module. A toy extension added to the registry alone gets its flags in --help, its
checks in validation, its stage in the run (in registry order), its rows and budget in the grid; toy
extensions using the batch-order and per-task gradient hooks are obeyed by the run; a toy module
written into a copy of the library with one registry line reaches --help, ablate.sh --list and the
report's label without any other edit."""
import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, fields
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

import run_multitask
import training.extensions
import training.tools.grid
from training.configuration.sections import CORE_SECTIONS, TrainConfig
from training.harness.run_config import RunConfig
from training.extensions import EXTENSIONS
from training.extensions.base import Extension, GradientSurgery
from training.configuration.flags import flag

FIXTURE_DATA = Path(__file__).parent / "fixtures" / "data"


def test_every_flag_has_one_home():
    """Field names are flags: unique across the core sections and every extension's settings."""
    names = [f.name for section in [*CORE_SECTIONS.values(), *(e.settings for e in EXTENSIONS)]
             for f in fields(section)]
    assert len(names) == len(set(names))


@pytest.mark.parametrize("extension", EXTENSIONS, ids=lambda e: e.name)
def test_each_extension_is_wired(extension):
    own = {f"--{f.name}" for f in fields(extension.settings)}
    assert f"--{extension.name}" in own                       # its switch is one of its own flags
    assert set(extension.budget) <= own and (extension.steps_flag is None or extension.steps_flag in own)
    parser_flags = {option for action in run_multitask.build_parser()._actions for option in action.option_strings}
    assert own <= parser_flags
    config = run_multitask.parse_config([f"--{extension.name}", *(w for kv in extension.budget.items() for w in kv)])
    assert [e for e, _ in config.switched_on()] == [extension]
    assert RunConfig.from_dict(config.to_dict()) == config    # saved and read back through its own section
    # off, its budget flags pass (the grid gives every row the same budget) and change nothing it does
    run_multitask.parse_config([w for kv in extension.budget.items() for w in kv]).validate()
    rows = dict(training.tools.grid.grid_rows())
    assert rows[f"mean-{extension.short}"] == ["--pooling", "mean", f"--{extension.name}", "--private_layers", "0"]


@dataclass
class ToyConfig:
    toy: bool = flag(False, "a toy stage that records that it ran")
    toy_rounds: int = flag(3, "how many rounds the toy stage reports")


class Toy(Extension):
    name, settings, column, short = "toy", ToyConfig, "TOY", "toy"
    budget, steps_flag, stages_alone = {"--toy_rounds": "1"}, "--toy_rounds", True

    def check(self, c, core) -> None:
        if c.toy_rounds < 1:
            raise ValueError("--toy_rounds must be at least 1")

    def stage(self, run) -> dict:
        run.log(f"toy: {run.config.toy.toy_rounds} rounds")
        return {"rounds": run.config.toy.toy_rounds, "tasks": sorted(run.splits)}


@pytest.fixture
def with_toy(monkeypatch):
    registry = (*EXTENSIONS, Toy())
    monkeypatch.setattr(training.extensions, "EXTENSIONS", registry)   # the one list the library reads
    return registry


@pytest.mark.slow
def test_a_new_extension_is_one_module(with_toy, tmp_path, tiny_model_dir, capsys):
    help_text = run_multitask.build_parser().format_help()
    assert "--toy_rounds" in help_text and "toy (TOY)" in help_text
    argv = ["--data_dir", str(FIXTURE_DATA), "--model", str(tiny_model_dir), "--out_dir", str(tmp_path),
            "--epochs", "1", "--max_steps_per_epoch", "1", "--batch_size", "4", "--max_length", "24", "--quiet",
            "--ucl", "--ucl_steps", "1", "--ucl_batch_size", "4"]
    assert run_multitask.main([*argv, "--run_name", "bad", "--toy", "--toy_rounds", "0"]) == 1
    assert "--toy_rounds must be at least 1" in capsys.readouterr().err and not (tmp_path / "bad").exists()
    assert run_multitask.main([*argv, "--run_name", "toy", "--toy", "--toy_rounds", "2"]) == 0
    metrics = json.loads((tmp_path / "toy" / "metrics.json").read_text())
    assert list(metrics["stages"]) == ["ucl", "toy"]            # registry order
    assert metrics["stages"]["toy"] == {"rounds": 2, "tasks": ["qqp", "sst", "sts"]}
    assert metrics["config"]["toy"] == {"toy": True, "toy_rounds": 2}
    rows = dict(training.tools.grid.grid_rows())
    assert rows["mean-toy"] == ["--pooling", "mean", "--toy", "--private_layers", "0"] and "--toy" in rows["mean-all"]
    assert training.tools.grid.budget()["--toy_rounds"] == "1"
    stages_alone = RunConfig.defaults(train=TrainConfig(epochs=0))
    with pytest.raises(ValueError, match="give --ucl, --scl, --lcl or --toy"):
        stages_alone.validate()


@dataclass
class OrderConfig:
    sst_only: bool = flag(False, "a toy batch order: every multi-task batch from sst")


class SstOnly(Extension):
    """Uses the batch-order hook: every batch of every epoch from the first task, as many as --rr gives."""
    name, settings, column, short = "sst_only", OrderConfig, "SST-only", "sstonly"
    calls: list = []

    def batch_order(self, c, core, epoch, sizes, steps, history=()):
        self.calls.append((epoch, dict(sizes), steps))
        return ["sst"] * steps


@dataclass
class FreezeConfig:
    freeze_shared: bool = flag(False, "a toy gradient surgery: no gradient for the encoder")


class FreezeShared(Extension):
    """Uses the per-task gradient hook: records the tasks it sees, applies no encoder gradient."""
    name, settings, column, short, joint = "freeze_shared", FreezeConfig, "frozen", "frozen", True
    seen: list = []

    def gradient_surgery(self, c, core, model):
        recorder = self

        class NoEncoderGradient(GradientSurgery):
            params = [p for _, p in model.encoder_parameters()]

            def combine(self, grads, step):
                recorder.seen.append((step, sorted(grads), sum(g is not None for g in grads["sst"])))
                return [None] * len(self.params)
        return NoEncoderGradient()


@pytest.fixture
def with_hooks(monkeypatch):
    registry = (*EXTENSIONS, SstOnly(), FreezeShared())
    monkeypatch.setattr(training.extensions, "EXTENSIONS", registry)
    SstOnly.calls.clear()
    FreezeShared.seen.clear()
    return registry


def _tiny_run(tmp_path, tiny_model_dir, name, *flags):
    argv = ["--data_dir", str(FIXTURE_DATA), "--model", str(tiny_model_dir), "--out_dir", str(tmp_path),
            "--epochs", "2", "--max_steps_per_epoch", "2", "--batch_size", "4", "--max_length", "24", "--quiet",
            "--private_layers", "0", "--run_name", name, *flags]
    code = run_multitask.main(argv)
    return code, tmp_path / name


@pytest.mark.slow
def test_a_batch_order_extension_decides_every_epochs_batches(with_hooks, tmp_path, tiny_model_dir):
    code, run = _tiny_run(tmp_path, tiny_model_dir, "order", "--sst_only")
    assert code == 0
    metrics = json.loads((run / "metrics.json").read_text())
    assert [list(e["train_loss"]) for e in metrics["epochs"]] == [["sst"], ["sst"]]   # only sst was trained
    assert [e["train_steps"] for e in metrics["epochs"]] == [6, 6]                   # the batches --rr gives
    sizes = {"sst": 20, "qqp": 20, "sts": 16}   # the fixture's training examples (a bad qqp row skipped)
    assert [(epoch, steps) for epoch, _, steps in SstOnly.calls] == [(1, 6), (2, 6)]
    assert SstOnly.calls[0][1].keys() == sizes.keys()


def test_a_gradient_surgery_sees_each_tasks_gradient_and_decides_the_encoders(with_hooks, tmp_path, tiny_model_dir):
    code, run = _tiny_run(tmp_path, tiny_model_dir, "surgery", "--freeze_shared", "--grad_accum", "2")
    assert code == 0
    assert [step for step, _, _ in FreezeShared.seen] == [1, 2]   # once an optimizer step (2 rounds each)
    assert all(tasks == ["qqp", "sst", "sts"] and reached > 0 for _, tasks, reached in FreezeShared.seen)
    before = load_file(tiny_model_dir / "model.safetensors")
    after = load_file(run / "checkpoint" / "model.safetensors")
    encoder = [k for k in after if "pooler" not in k]   # the pooler takes no part in mean pooling
    assert encoder and all(torch.equal(before[k], after[k]) for k in encoder)   # no encoder gradient applied
    heads = load_file(run / "checkpoint" / "heads.safetensors")
    fresh_code, fresh = _tiny_run(tmp_path, tiny_model_dir, "plain", "--joint_loss", "--grad_accum", "2")
    assert fresh_code == 0 and not all(torch.equal(before[k], load_file(fresh / "checkpoint" / "model.safetensors")[k])
                                       for k in encoder)   # without it the encoder trains
    assert heads   # the heads trained as usual


@dataclass
class OtherOrderConfig:
    other_order: bool = flag(False, "a second toy batch order")


class OtherOrder(SstOnly):
    name, settings = "other_order", OtherOrderConfig


def test_two_extensions_deciding_one_hook_are_refused_before_the_run(monkeypatch, tmp_path, tiny_model_dir, capsys):
    monkeypatch.setattr(training.extensions, "EXTENSIONS", (*EXTENSIONS, SstOnly(), OtherOrder()))
    argv = ["--data_dir", str(FIXTURE_DATA), "--model", str(tiny_model_dir), "--out_dir", str(tmp_path),
            "--quiet", "--run_name", "two", "--sst_only", "--other_order"]
    assert run_multitask.main(argv) == 1
    assert ("--sst_only and --other_order both decide the order of the task batches: choose one"
            in capsys.readouterr().err)
    assert not (tmp_path / "two").exists()


TOY_MODULE = '''"""A toy extension: a batch order and a gradient surgery, written as one module."""
from dataclasses import dataclass

from ..configuration.flags import flag
from .base import Extension, GradientSurgery


@dataclass
class ToyHooksConfig:
    toy_hooks: bool = flag(False, "a toy batch order and gradient surgery")


class ToyHooks(Extension):
    name, settings, column, short, joint = "toy_hooks", ToyHooksConfig, "TOYHOOKS", "toyhooks", True
    variants = (("mean-toyhooks-exhaust", ["--toy_hooks", "--rr", "exhaust"]),)

    def batch_order(self, c, core, epoch, sizes, steps, history=()):
        return [list(sizes)[i % len(sizes)] for i in range(steps)]

    def gradient_surgery(self, c, core, model):
        class Sum(GradientSurgery):
            params = [p for _, p in model.encoder_parameters()]

            def combine(self, grads, step):
                summed = []
                for i in range(len(self.params)):
                    given = [g[i] for g in grads.values() if g[i] is not None]
                    summed.append(sum(given[1:], given[0]) if given else None)
                return summed
        return Sum()


EXTENSION = ToyHooks()
'''


@pytest.mark.slow
def test_a_toy_module_and_a_registry_line_reach_help_grid_run_and_report(tmp_path, tiny_model_dir):
    """Copy the library, add the toy module and its name in the registry, and nothing else."""
    root, copy = Path(__file__).resolve().parents[1], tmp_path / "copy"
    for name in ("training", "heads", "minbert", "data", "scripts", "run_multitask.py"):
        source = root / name
        (shutil.copytree(source, copy / name, ignore=shutil.ignore_patterns("__pycache__"))
         if source.is_dir() else shutil.copy(source, copy / name))
    (copy / "training" / "extensions" / "toy_hooks.py").write_text(TOY_MODULE)
    registry = copy / "training" / "extensions" / "__init__.py"
    text = registry.read_text()
    assert text.count('",\n))') == 1   # the end of the list of module names
    registry.write_text(text.replace('",\n))', '", "toy_hooks",\n))'))
    env = {**os.environ, "PYTHONPATH": str(copy), "TQDM_DISABLE": "1"}

    def run(*argv):
        return subprocess.run(argv, cwd=copy, capture_output=True, text=True, env=env, timeout=300)
    assert "--toy_hooks" in run(sys.executable, "run_multitask.py", "--help").stdout
    listed = run("bash", "scripts/ablate.sh", "--list", "--out_dir", str(tmp_path / "grid"))
    rows = dict(line.split(" ", 1) for line in listed.stdout.splitlines())
    assert rows["mean-toyhooks"] == "--pooling mean --toy_hooks --private_layers 0"
    assert rows["mean-toyhooks-exhaust"].startswith("--pooling mean --toy_hooks --rr exhaust")
    out = tmp_path / "runs"
    trained = run(sys.executable, "run_multitask.py", "--data_dir", str(FIXTURE_DATA), "--model", str(tiny_model_dir),
                  "--out_dir", str(out), "--epochs", "1", "--max_steps_per_epoch", "1", "--batch_size", "4",
                  "--max_length", "24", "--quiet", "--private_layers", "0", "--toy_hooks", "--run_name", "toy")
    assert trained.returncode == 0, trained.stderr
    metrics = json.loads((out / "toy" / "metrics.json").read_text())
    assert metrics["config"]["toy_hooks"] == {"toy_hooks": True} and metrics["epochs"][0]["train_steps"] == 1
    report = run(sys.executable, "-m", "training.tools.report", str(out), "--full")
    # one row: no setting differs, so its own on/off is said above the table, not a column; and no FT label
    assert "TOYHOOKS on; every other extension off." in report.stdout.splitlines()[0]
    row = next(line for line in report.stdout.splitlines() if line.startswith("| toy"))
    assert "(FT)" not in row
