"""Each extension flag of the ablation grid really changes training: a 3-step run with the flag
ends with different parameters than the same run without it, from the same seed."""
import json
from pathlib import Path

import pytest
import torch

import run_multitask
from training.harness.checkpoint import load_checkpoint

FIXTURE_DATA = Path(__file__).parent / "fixtures" / "data"
BUDGET = ["--epochs", "1", "--max_steps_per_epoch", "3", "--batch_size", "4", "--max_length", "24"]
# each stage's budget, given with its flag (a stage's flags without it are refused)
STAGE_BUDGET = {"--ucl": ["--ucl_steps", "2", "--ucl_batch_size", "4"],
                "--scl": ["--scl_steps", "2", "--scl_batch_size", "4"],
                "--pre_qqp": ["--pre_qqp_steps", "2"], "--lcl": ["--lcl_steps", "2", "--lcl_batch_size", "4"]}


def budget(flags) -> list[str]:
    return [*BUDGET, *(word for flag in flags for word in STAGE_BUDGET.get(flag, []))]


def train(out_dir: Path, model_dir: Path, name: str, *flags) -> tuple[dict, dict]:
    argv = ["--data_dir", str(FIXTURE_DATA), "--model", str(model_dir), "--out_dir", str(out_dir),
            "--run_name", name, *budget(flags), *flags]
    assert run_multitask.main(argv) == 0
    state, _ = load_checkpoint(out_dir / name / "checkpoint")
    return state, json.loads((out_dir / name / "metrics.json").read_text())


@pytest.fixture(scope="module")
def baseline(tmp_path_factory, tiny_model_dir):
    return train(tmp_path_factory.mktemp("runs"), tiny_model_dir, "baseline")[0]


@pytest.mark.slow
@pytest.mark.parametrize("flags, stage", [
    (["--pre_qqp"], "pre_qqp"),
    (["--joint_loss"], None),
    (["--joint_loss", "--loss_weighting", "learned"], None),
    (["--joint_loss", "--loss_weighting", "adaptive", "--loss_weights", "2,1,1"], None),
    (["--smart"], None),
    (["--smart", "--smart_bregman"], None),
    (["--ucl"], "ucl"),
    (["--scl"], "scl"),
    (["--lcl"], "lcl"),
])
def test_flag_changes_the_trained_parameters(tmp_path, tiny_model_dir, baseline, flags, stage):
    state, metrics = train(tmp_path, tiny_model_dir, "with-flag", *flags)
    assert metrics["status"] == "finished"
    changed = [k for k in baseline if not torch.equal(baseline[k], state[k])]
    assert any(k.startswith("bert.encoder.") for k in changed), flags
    if stage is not None:
        log = metrics["stages"][stage]
        assert log["batches"] == 2 and log["seconds"] >= 0


@pytest.mark.slow
def test_same_flags_same_parameters(tmp_path, tiny_model_dir, baseline):
    """The comparison above is meaningful: without a flag, a second run reproduces the baseline."""
    state, _ = train(tmp_path, tiny_model_dir, "again")
    assert all(torch.equal(baseline[k], state[k]) for k in baseline)


@pytest.mark.slow
def test_stages_run_in_the_documented_order(tmp_path, tiny_model_dir, capsys):
    train(tmp_path, tiny_model_dir, "all", "--pre_qqp", "--ucl", "--scl", "--lcl")
    out = capsys.readouterr().out
    positions = [out.index(marker) for marker in ("ucl epoch 1", "scl epoch 1", "lcl epoch 1", "pre-QQP epoch 1",
                                                  "\nepoch 1:")]
    assert positions == sorted(positions)


def test_failed_run_is_marked_in_metrics(tmp_path, tiny_model_dir, capsys):
    """A run that fails after it started (here: a SimCSE corpus file with no sentence in it)."""
    (tmp_path / "empty.txt").write_text("\n\n")
    argv = ["--data_dir", str(FIXTURE_DATA), "--model", str(tiny_model_dir), "--out_dir", str(tmp_path),
            "--run_name", "broken", *budget(["--ucl"]), "--ucl", "--ucl_data", str(tmp_path / "empty.txt")]
    assert run_multitask.main(argv) == 1
    assert "empty.txt" in capsys.readouterr().err
    metrics = json.loads((tmp_path / "broken" / "metrics.json").read_text())
    assert metrics["status"] == "failed" and "empty.txt" in metrics["error"]


@pytest.mark.parametrize("flags, message", [
    (["--loss_weights", "1,2"], "--loss_weights"),
    (["--loss_weights", "1,x,1"], "--loss_weights"),
    (["--smart_beta", "1.0"], "--smart_beta"),
    (["--hard_negative_weight", "0"], "--hard_negative_weight"),
    (["--ucl_batch_size", "1"], "--ucl_batch_size"),
    (["--lcl_batch_size", "1"], "--lcl_batch_size"),
])
def test_nonsense_extension_values_are_rejected(tmp_path, tiny_model_dir, capsys, flags, message):
    argv = ["--data_dir", str(FIXTURE_DATA), "--model", str(tiny_model_dir), "--out_dir", str(tmp_path), *flags]
    assert run_multitask.main(argv) == 1
    assert message in capsys.readouterr().err
