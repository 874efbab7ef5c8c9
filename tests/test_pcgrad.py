"""PCGrad (training/extensions/pcgrad.py): the projection against hand-computed cases, sparse rows as
dense ones, and the runs it must work in: private layers, gradient accumulation, bf16 autocast, exact
resume; the settings it cannot take (torchrun included) are refused before the run folder exists."""
import json
import subprocess
from pathlib import Path

import pytest
import torch

import run_multitask
from test_resume import argv, assert_same_run, command, env, final_state, resume_after_cut
from training.extensions.pcgrad import ProjectConflicting

FIXTURE_DATA = Path(__file__).parent / "fixtures" / "data"


def combine(grads: dict, params: int = 2, step: int = 1, seed: int = 0):
    return ProjectConflicting([torch.zeros(1)] * params, seed).combine(grads, step)


def test_conflicting_gradients_are_projected_then_summed_by_hand():
    """g1 = (1, 0), g2 = (-1, 1), g3 = (0, 1), each vector split over two parameters.
    g1·g2 = -1 < 0: g1 -> g1 - (-1/2) g2 = (0.5, 0.5); g1·g3 = 0 (no conflict, either order).
    g2·g1 = -1: g2 -> g2 - (-1/1) g1 = (0, 1); then (0, 1)·g3 = 1 (no conflict; g3 first: g2·g3 = 1, same).
    g3 conflicts with neither. Sum: (0.5, 0.5) + (0, 1) + (0, 1) = (0.5, 2.5), whatever the order."""
    t = torch.tensor
    grads = {"a": [t([1.0]), t([0.0])], "b": [t([-1.0]), t([1.0])], "c": [t([0.0]), t([1.0])]}
    for step in range(1, 6):
        first, second = combine(grads, step=step)
        assert torch.allclose(first, t([0.5])) and torch.allclose(second, t([2.5]))


def test_the_random_order_gives_one_of_the_hand_computed_results():
    """g1 = (1, 0), g2 = (-1, 2), g3 = (-1, -2): g2·g3 = -3 conflicts, so g1's result depends on the order.
    g1 vs g2 first: g1·g2 = -1 -> g1 + (1/5) g2 = (0.8, 0.4); then ·g3 = -1.6 -> + (1.6/5) g3 = (0.48, -0.24).
    g1 vs g3 first: g1·g3 = -1 -> g1 + (1/5) g3 = (0.8, -0.4); then ·g2 = -1.6 -> + (1.6/5) g2 = (0.48, 0.24).
    g2: vs g1 (-1) and g3 (-3). g1 first: g2 + g1 = (0, 2), ·g3 = -4 -> + (4/5) g3 = (-0.8, 0.4); g3 first:
    g2 + (3/5) g3 = (-1.6, 0.8), ·g1 = -1.6 -> + 1.6 g1 = (0, 0.8).
    g3, by symmetry (y -> -y): g1 first (-0.8, -0.4); g2 first (0, -0.8)."""
    g = {"a": [torch.tensor([1.0, 0.0])], "b": [torch.tensor([-1.0, 2.0])], "c": [torch.tensor([-1.0, -2.0])]}
    ones = {"a": [(0.48, -0.24), (0.48, 0.24)], "b": [(-0.8, 0.4), (0.0, 0.8)], "c": [(-0.8, -0.4), (0.0, -0.8)]}
    possible = {tuple(round(x + y + z, 4) for x, y, z in zip(a, b, c))
                for a in ones["a"] for b in ones["b"] for c in ones["c"]}
    seen = set()
    for step in range(1, 40):
        (total,) = ProjectConflicting([torch.zeros(2)], 11711).combine(g, step)
        seen.add(tuple(round(v, 4) for v in total.tolist()))
    assert seen <= possible and len(seen) > 1   # hand-computed results only, and the order does vary
    (again,) = ProjectConflicting([torch.zeros(2)], 11711).combine(g, 7)
    (first,) = ProjectConflicting([torch.zeros(2)], 11711).combine(g, 7)
    assert torch.equal(again, first)   # the same seed and step draw the same order (a resumed run too)


def test_agreeing_gradients_are_summed_and_a_parameter_one_task_reaches_keeps_its_gradient():
    t = torch.tensor
    grads = {"a": [t([1.0, 2.0]), t([5.0]), None], "b": [t([2.0, 1.0]), None, None]}
    shared, own, unreached = combine(grads, params=3)
    assert torch.equal(shared, t([3.0, 3.0])) and torch.equal(own, t([5.0])) and unreached is None


def test_sparse_rows_give_the_dense_result():
    dense = {"a": [torch.tensor([[1.0, 0.0], [0.0, 0.0], [2.0, -1.0]]), torch.tensor([0.5])],
             "b": [torch.tensor([[-3.0, 1.0], [1.0, 1.0], [0.0, 0.0]]), torch.tensor([-0.5])]}
    sparse = {task: [g[0].to_sparse(), g[1]] for task, g in dense.items()}
    want, got = combine(dense), combine(sparse)
    assert got[0].is_sparse and torch.allclose(got[0].to_dense(), want[0]) and torch.allclose(got[1], want[1])


def tiny(tmp_path, tiny_model_dir, name, *flags):
    return run_multitask.main(["--data_dir", str(FIXTURE_DATA), "--model", str(tiny_model_dir), "--out_dir",
                               str(tmp_path), "--epochs", "1", "--max_steps_per_epoch", "2", "--batch_size", "4",
                               "--max_length", "24", "--quiet", "--run_name", name, *flags])


@pytest.mark.slow
@pytest.mark.parametrize("flags", [["--private_layers", "1"], ["--private_layers", "0", "--grad_accum", "2"],
                                   ["--private_layers", "0", "--no_sparse_embeddings"], ["--amp", "bf16"]],
                         ids=["towers", "accum", "dense", "bf16"])
def test_a_pcgrad_run_steps_on_one_batch_of_every_task(tmp_path, tiny_model_dir, flags):
    assert tiny(tmp_path, tiny_model_dir, "run", "--pcgrad", *flags) == 0
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    accum = 2 if "--grad_accum" in flags else 1
    assert metrics["epochs"][0]["train_steps"] == 2 // accum and set(metrics["epochs"][0]["train_loss"]) == {
        "sst", "qqp", "sts"}
    assert metrics["config"]["pcgrad"] == {"pcgrad": True} and metrics["status"] == "finished"


@pytest.mark.parametrize("flags, message", [
    (["--tasks", "sst"], "--pcgrad projects the tasks' gradients against each other: give two or more --tasks"),
    (["--rr", "proportional"], "--pcgrad steps on one batch of every task at once; --rr proportional"),
    (["--joint_loss"], "--pcgrad and --joint_loss both decide"),
    (["--option", "pretrain"], "--pcgrad acts on the shared encoder, which --option pretrain freezes")])
def test_what_pcgrad_cannot_take_is_one_line_before_the_run_folder(tmp_path, tiny_model_dir, capsys, flags, message):
    assert tiny(tmp_path, tiny_model_dir, "refused", "--pcgrad", *flags) == 1
    assert message in capsys.readouterr().err and not (tmp_path / "refused").exists()


def test_pcgrad_under_torchrun_is_refused_before_the_run_folder(tmp_path, tiny_model_dir, monkeypatch):
    from training.harness import trainer
    from training.harness.distributed import Distributed
    monkeypatch.setattr(trainer, "init_distributed", lambda device: (Distributed(rank=0, world_size=2), device))
    config = run_multitask.parse_config(["--data_dir", str(FIXTURE_DATA), "--model", str(tiny_model_dir),
                                         "--out_dir", str(tmp_path), "--pcgrad", "--batch_size", "4"])
    with pytest.raises(ValueError, match="--pcgrad runs in one process only: start it with python, not torchrun"):
        trainer.run(config)
    assert not any(tmp_path.iterdir())


@pytest.mark.slow
def test_a_resumed_pcgrad_run_ends_exactly_like_an_uninterrupted_one(tiny_model_dir, tmp_path):
    flags = ["--epochs", "2", "--pcgrad", "--private_layers", "1", "--grad_accum", "2"]
    subprocess.run(command(*argv(tiny_model_dir, tmp_path / "clean", "pcgrad", *flags)), env=env(), check=True,
                   capture_output=True, timeout=300)
    clean = tmp_path / "clean" / "pcgrad"
    assert resume_after_cut(clean, tmp_path / "cut" / "pcgrad", 2) == "multitask"
    assert_same_run(final_state(tmp_path / "cut" / "pcgrad"), final_state(clean))
