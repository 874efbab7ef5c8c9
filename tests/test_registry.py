"""The registry of extensions (training/extensions): what is registered is wired everywhere, and a new
extension is one module. A toy extension added to the registry alone gets its flags in --help, its
checks in validation, its stage in the run (in registry order), its rows and budget in the grid."""
import json
from dataclasses import dataclass, fields
from pathlib import Path

import pytest

import run_multitask
import training.extensions
import training.tools.grid
from training.config import CORE_SECTIONS, RunConfig
from training.extensions import EXTENSIONS
from training.extensions.base import Extension
from training.flags import flag

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
    assert extension.enabled(config) and [e for e in EXTENSIONS if e.enabled(config)] == [extension]
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

    def check(self, config) -> None:
        if config.toy.toy_rounds < 1:
            raise ValueError("--toy_rounds must be at least 1")

    def stage(self, run) -> dict:
        run.log(f"toy: {run.config.toy.toy_rounds} rounds")
        return {"rounds": run.config.toy.toy_rounds, "tasks": sorted(run.splits)}


@pytest.fixture
def with_toy(monkeypatch):
    registry = (*EXTENSIONS, Toy())
    monkeypatch.setattr(training.extensions, "EXTENSIONS", registry)   # the one list the library reads
    monkeypatch.setattr(training.tools.grid, "EXTENSIONS", registry)   # bound at import by the grid tool
    return registry


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
    stages_alone = RunConfig.defaults()
    stages_alone.train.epochs = 0
    with pytest.raises(ValueError, match="give --ucl, --scl, --lcl or --toy"):
        stages_alone.validate()
