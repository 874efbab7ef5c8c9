"""Linear probing before fine-tuning (``--lp_steps``, LP-FT): the heads train alone on the frozen
encoder, then multi-task training starts from those heads and the untouched pretrained encoder."""
import json
import shutil
import subprocess

import pytest
import torch

import run_multitask
import training.trainer
from minbert import BertModel
from test_extensions import FIXTURE_DATA
from test_extensions import train as train_run
from test_resume import OUTPUTS, argv, assert_same_run, command, env, final_state
from training.resume import list_checkpoints


@pytest.fixture
def at_multitask_start(monkeypatch):
    """Each run's model parameters (value, requires_grad, whether it has a gradient) as multi-task training starts."""
    seen = []
    original = training.trainer.multitask_stage

    def spy(run):
        seen.append({k: (p.detach().clone(), p.requires_grad, p.grad is not None)
                     for k, p in run.model.named_parameters()})
        return original(run)

    monkeypatch.setattr(training.trainer, "multitask_stage", spy)
    return seen


def train(tmp_path, model_dir, name, *flags) -> dict:
    """The metrics of a finished 3-step run (``test_extensions.train``)."""
    return train_run(tmp_path, model_dir, name, *flags)[1]


def test_lp_trains_the_heads_alone_then_fine_tuning_starts(tmp_path, tiny_model_dir, at_multitask_start, capsys):
    plain = train(tmp_path, tiny_model_dir, "plain")
    probed = train(tmp_path, tiny_model_dir, "probed", "--lp_steps", "2")
    without, with_lp = at_multitask_start
    pretrained = BertModel.from_pretrained(tiny_model_dir).state_dict()
    for name, (value, trainable, has_grad) in with_lp.items():
        assert trainable, f"{name} left frozen after linear probing"
        if name.startswith("bert."):   # the encoder is the pretrained one, bit for bit, and was frozen
            assert torch.equal(value, pretrained[name.removeprefix("bert.")]), name
            assert not has_grad, f"{name} got gradients during linear probing"
    heads = [k for k in with_lp if k.startswith(("heads.sst.", "heads.qqp."))]   # STS's cosine head has none
    assert heads and all(not torch.equal(with_lp[k][0], without[k][0]) for k in heads)
    assert "lp" not in plain["stages"]
    assert probed["stages"]["lp"]["batches"] == 2 * 3   # 2 round-robin steps of the 3 tasks
    assert probed["status"] == "finished" and probed["dev"] != plain["dev"]
    assert "LP epoch 1" in capsys.readouterr().out


def test_lp_with_a_frozen_encoder_and_no_epochs(tmp_path, tiny_model_dir, at_multitask_start):
    """With --option pretrain the encoder stays frozen after the probe; --epochs 0 runs no probe."""
    train(tmp_path, tiny_model_dir, "pt", "--lp_steps", "1", "--option", "pretrain")
    assert all(not trainable for name, (_, trainable, _) in at_multitask_start[0].items() if name.startswith("bert."))
    metrics = train(tmp_path, tiny_model_dir, "stages", "--lp_steps", "1", "--epochs", "0", "--lcl")
    assert list(metrics["stages"]) == ["lcl"]


def test_negative_lp_steps_are_refused(tmp_path, tiny_model_dir, capsys):
    argv = ["--data_dir", str(FIXTURE_DATA), "--model", str(tiny_model_dir), "--out_dir", str(tmp_path),
            "--lp_steps", "-1"]
    assert run_multitask.main(argv) == 1
    assert "--lp_steps must not be negative" in capsys.readouterr().err


def test_a_run_stopped_inside_linear_probing_resumes_exactly(tmp_path, tiny_model_dir):
    """Resuming from a checkpoint inside the probe (its heads-only optimizer, the frozen encoder)
    ends exactly like the uninterrupted run."""
    flags = ["--epochs", "1", "--lp_steps", "3"]
    clean = tmp_path / "clean"
    subprocess.run(command(*argv(tiny_model_dir, tmp_path, "clean", *flags)), env=env(), check=True,
                   capture_output=True, timeout=300)
    run_dir = tmp_path / "stopped"
    shutil.copytree(clean, run_dir)
    checkpoints = list_checkpoints(run_dir)
    keep = checkpoints[4]   # step 5 of the probe's 9 (3 rounds of 3 tasks)
    assert json.loads((keep / "state.json").read_text())["stage"] == "lp"
    for later in checkpoints[5:]:
        shutil.rmtree(later)
    for name in OUTPUTS:
        (run_dir / name).unlink()
    resumed = subprocess.run(command("--resume", str(run_dir), "--quiet"), env=env(), capture_output=True,
                             text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr
    assert json.loads((run_dir / "metrics.json").read_text())["resumed"][-1]["step"] == 5
    assert_same_run(final_state(run_dir), final_state(clean))
