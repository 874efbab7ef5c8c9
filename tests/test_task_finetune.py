"""--task_finetune (training/extensions/task_finetune.py): after multi-task training, one stage per task trains that
task's own top layers and head on its data alone. Each stage is checked tensor by tensor against names written out
here (not the module's own choice): what it trains changed, everything else (embeddings, the shared bottom layer, the
other tasks' towers and heads) is equal bit for bit, holds no gradient and is in no optimizer; ``--private_layers 0``
and ``--option pretrain`` leave the encoder alone. A whole run scores dev and writes checkpoint/ from the weights the
stages leave, and a run cut anywhere in them and resumed ends bit for bit like the uninterrupted one."""
import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

import run_multitask
import training.extensions.task_finetune as task_finetune
from test_resume import assert_same_run, clean_run, final_state, one_thread, resume_after_cut
from training.harness.checkpoint import ENCODER, HEADS, model_state
from training.harness.resume import list_checkpoints
from training.harness.trainer import read_inputs
from training.learning.callbacks import Log
from training.learning.precision import Precision
from training.learning.recipe import build_run
from training.learning.rng import seed_everything

FIXTURE_DATA = Path(__file__).parent / "fixtures" / "data"
TASKS = ("sst", "qqp", "sts")   # sts is the home task: it keeps the encoder's own top layers


class QuietLog(Log):
    progress_bars = False

    def __call__(self, message: str) -> None:
        pass

    def result(self, message: str) -> None:
        pass


def built_run(model_dir, *flags):
    """The run's parts as the recipe builds them (no run folder), over the 2-layer tiny model, 3 batches a stage."""
    config = run_multitask.parse_config(["--data_dir", str(FIXTURE_DATA), "--model", str(model_dir), "--batch_size", "4",
                                         "--max_length", "24", "--task_finetune", "--task_finetune_steps", "3",
                                         *flags]).validate()
    seed_everything(config.train.seed)
    cpu = torch.device("cpu")
    inputs = read_inputs(config, QuietLog())
    return config, build_run(config, inputs, cpu, Precision("off", cpu), config.plugins())


def own_names(names, task: str, private_layers: int) -> set[str]:
    """The parameters a task's stage may train, by name: its head; its tower (sst, qqp) or, for sts, the encoder's
    top layers (the tiny model has 2: with 1 private layer, layer 1)."""
    top = [f"towers.{task}."] if task != "sts" else [f"bert.encoder.layer.{i}." for i in range(2 - private_layers, 2)]
    return {n for n in names if n.startswith((f"heads.{task}.", *(top if private_layers else [])))}


def stages_one_by_one(config, run, monkeypatch):
    """Run each stage after multi-task training; yield (task, parameters before, after, the stage's optimizer,
    requires_grad before, the stage's log), checked as they come."""
    built = []
    real = task_finetune.build_adamw
    monkeypatch.setattr(task_finetune, "build_adamw", lambda *a, **k: built.append(real(*a, **k)) or built[-1])
    stages = config.after_stages()
    assert [name for name, _ in stages] == [f"task_finetune.{task}" for task in TASKS]
    for task, (_, stage) in zip(TASKS, stages):
        before = {n: p.detach().clone() for n, p in run.model.named_parameters()}
        requires = {n: p.requires_grad for n, p in run.model.named_parameters()}
        log = stage(run)
        yield task, before, dict(run.model.named_parameters()), built[-1], requires, log


@pytest.mark.parametrize("private_layers", [1, 0])
def test_each_stage_trains_its_task_alone(tiny_model_dir, monkeypatch, private_layers):
    config, run = built_run(tiny_model_dir, "--private_layers", str(private_layers))
    names = [n for n, _ in run.model.named_parameters()]
    assert any(n.startswith("towers.sst.") for n in names) == bool(private_layers)
    for task, before, after, optimizer, requires, log in stages_one_by_one(config, run, monkeypatch):
        own = own_names(names, task, private_layers)
        heads = {n for n in own if n.startswith("heads.")}
        changed = {n for n in names if not torch.equal(before[n], after[n])}
        assert changed <= own, f"{task}: {sorted(changed - own)[:3]} moved"   # embeddings, layer 0, the others: equal
        # every tensor of its head that learns moved (the default STS head, 5·cos(u, v), has none: its threshold
        # parameter serves the thresholded heads alone), and with a private layer every tensor of that layer
        learned = {n for n in heads if after[n].grad is not None}
        assert bool(learned) == (task != "sts")
        assert changed == own - heads | learned if private_layers else changed == learned
        # frozen: no gradient, no optimizer state or weight decay (not in the optimizer), requires_grad as before
        assert {n for n in names if after[n].grad is not None} <= own
        by_id = {id(p): n for n, p in after.items()}
        assert sorted(by_id[id(p)] for group in optimizer.param_groups for p in group["params"]) == sorted(own)
        assert {n: p.requires_grad for n, p in after.items()} == requires
        assert log["task"] == task and log["batches"] == 3 and len(log["loss_curve"]) == 1


def test_a_frozen_encoder_stays_frozen(tiny_model_dir, monkeypatch):
    """--option pretrain: the towers and the home task's top layers were never trained, and the stages leave them
    (an STS head with weights of its own, so that each stage has something to train)."""
    config, run = built_run(tiny_model_dir, "--private_layers", "1", "--option", "pretrain", "--sts_head", "concat")
    for task, before, after, optimizer, requires, log in stages_one_by_one(config, run, monkeypatch):
        changed = {n for n in after if not torch.equal(before[n], after[n])}
        assert changed and all(n.startswith(f"heads.{task}.") for n in changed), task
        assert not any(after[n].requires_grad for n in after if not n.startswith("heads."))
        assert log["trained_parameters"] == sum(p.numel() for n, p in after.items() if n.startswith(f"heads.{task}."))


def test_a_task_with_fewer_batches_than_its_steps_starts_its_data_over(tiny_model_dir, monkeypatch):
    """sts-train has 16 pairs: 4 batches of 4; 10 steps take them 2.5 times, each pass reshuffled."""
    config, run = built_run(tiny_model_dir, "--task_finetune_steps", "10", "--tasks", "sts")
    seen = []
    real = type(run.task_loss).__call__
    monkeypatch.setattr(type(run.task_loss), "__call__",
                        lambda self, batches: seen.append(list(batches[0][1]["ids"])) or real(self, batches))
    (name, stage), = config.after_stages()
    assert stage(run)["batches"] == 10 and len(seen) == 10
    assert sorted(i for batch in seen[:4] for i in batch) == sorted(i for batch in seen[4:8] for i in batch)
    assert seen[:4] != seen[4:8]


@pytest.mark.parametrize("flags, message", [
    (["--task_finetune", "--task_finetune_steps", "0"], "--task_finetune_steps must be at least 1"),
    (["--task_finetune", "--task_finetune_lr", "0"], "--task_finetune_lr must be positive"),
    (["--task_finetune", "--task_finetune_lr", "-0.5"], "--task_finetune_lr must be positive"),
    (["--task_finetune", "--epochs", "0", "--ucl"], "--task_finetune fine-tunes each task after multi-task training"),
    (["--task_finetune_lr", "1e-5"], "--task_finetune_lr has no effect without --task_finetune"),
])
def test_bad_values_are_one_line_errors(flags, message):
    with pytest.raises(ValueError, match=message) as err:
        run_multitask.parse_config(flags).validate()
    assert "\n" not in str(err.value)


def test_off_by_default_and_budget_flags_pass_alone():
    config = run_multitask.parse_config([])
    assert not config.task_finetune.task_finetune and config.after_stages() == []
    assert run_multitask.parse_config(["--task_finetune_steps", "10"]).validate().after_stages() == []


FLAGS = ["--epochs", "2", "--private_layers", "1", "--task_finetune", "--task_finetune_steps", "3"]


@pytest.fixture(scope="module")
def clean_finetuned(tiny_model_dir, tmp_path_factory) -> Path:
    return clean_run(tiny_model_dir, tmp_path_factory.mktemp("clean"), "task_finetune", *FLAGS)


def stage_of(checkpoint: Path) -> str:
    return json.loads((checkpoint / "state.json").read_text())["stage"]


@pytest.mark.slow
def test_a_run_keeps_and_reports_what_the_stages_leave(clean_finetuned):
    """24 multi-task steps an epoch, then 3 of each task: checkpoint/ and the dev scores are the weights after the
    stages (the last training checkpoint's), not the best epoch's, and metrics.json says what changed."""
    metrics = json.loads((clean_finetuned / "metrics.json").read_text())
    checkpoints = list_checkpoints(clean_finetuned)
    assert [stage_of(c) for c in checkpoints[-10:]] == ["multitask"] + ["task_finetune.sst"] * 3 + [
        "task_finetune.qqp"] * 3 + ["task_finetune.sts"] * 3
    assert checkpoints[-1].name == "step-00000057"
    after = metrics["after_stages"]
    assert list(after["stages"]) == ["task_finetune.sst", "task_finetune.qqp", "task_finetune.sts"]
    assert all(log["batches"] == 3 for log in after["stages"].values())
    assert after["dev_before"] == metrics["epochs"][metrics["best_epoch"] - 1]["dev"]
    assert after["dev_after"] == metrics["dev"] and after["dev_overall_after"] == metrics["dev_overall"]
    kept = model_state(clean_finetuned / "checkpoint" / ENCODER, clean_finetuned / "checkpoint" / HEADS)
    last = load_file(str(checkpoints[-1] / "model.safetensors"))
    best = model_state(checkpoints[-1] / "best.safetensors", checkpoints[-1] / "best-heads.safetensors")
    assert kept.keys() == last.keys() and all(torch.equal(kept[n], last[n]) for n in kept)
    moved = {n for n in kept if not torch.equal(kept[n], best[n])}
    assert moved and all(n.startswith(("towers.", "heads.", "bert.encoder.layer.1.")) for n in moved)
    assert "task_finetune.sst, task_finetune.qqp, task_finetune.sts trained it further" in (
        clean_finetuned / "checkpoint" / "README.md").read_text()


@pytest.mark.slow
@pytest.mark.parametrize("which, stage", [(40, "multitask"), (47, "multitask"), (48, "task_finetune.sst"),
                                          (50, "task_finetune.sst"), (52, "task_finetune.qqp"),
                                          (54, "task_finetune.sts"), (-1, "task_finetune.sts")])
def test_resume_inside_the_stages_after_multitask_training(tiny_model_dir, tmp_path, clean_finetuned, which, stage):
    """Cut after checkpoint ``which`` (step which + 1: 48 ends multi-task training, 49-51 are sst's stage, 52-54
    qqp's, 55-57 sts's) and resumed: the same weights, best weights, dev scores and predictions, bit for bit."""
    run_dir = tmp_path / "task_finetune"
    assert resume_after_cut(clean_finetuned, run_dir, which) == stage
    assert_same_run(final_state(run_dir), final_state(clean_finetuned))
    resumed, clean = (json.loads((d / "metrics.json").read_text()) for d in (run_dir, clean_finetuned))
    assert resumed["after_stages"]["dev_before"] == clean["after_stages"]["dev_before"]
    assert [log["loss_curve"] for log in resumed["after_stages"]["stages"].values()] == [
        log["loss_curve"] for log in clean["after_stages"]["stages"].values()]
