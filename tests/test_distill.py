"""Teacher annealing (--distill, training/extensions/distill.py): the mixed target against a hand
computation, λ's schedule, teachers trained or given (the same student either way), their cached
predictions, and exact resumption."""
import json
import math
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from safetensors.torch import load_file

import run_multitask
from test_resume import argv, assert_same_run, command, env, final_state, resume_after_cut
from training.extensions.distill import TeacherTargets, mix
from training.harness.resume import list_checkpoints
from training.learning.task_schema import BUILTIN_TASKS

FIXTURE_DATA = Path(__file__).parent / "fixtures" / "data"
FLAGS = ["--epochs", "2", "--distill"]


def test_the_mixed_target_is_lambda_gold_plus_one_minus_lambda_teacher():
    teacher = torch.tensor([[0.1, 0.2, 0.3, 0.2, 0.2], [0.5, 0.125, 0.125, 0.125, 0.125]])
    target = mix(torch.tensor([2, 0]), teacher, 0.25, 5)
    expected = torch.tensor([[0.075, 0.15, 0.475, 0.15, 0.15], [0.625, 0.09375, 0.09375, 0.09375, 0.09375]])
    torch.testing.assert_close(target, expected)
    logits = torch.tensor([[0.3, -1.0, 2.0, 0.0, 0.5], [1.0, 0.0, 0.0, -2.0, 0.25]])
    by_hand = -sum(t * math.log(math.exp(z) / sum(math.exp(w) for w in row))
                   for row, targets in zip(logits.tolist(), target.tolist()) for z, t in zip(row, targets)) / 2
    assert BUILTIN_TASKS["sst"].loss(logits, target).item() == pytest.approx(by_hand, rel=1e-6)
    # a binary teacher's probability and a regression teacher's score mix with the label as numbers
    assert mix(torch.tensor([1.0, 0.0]), torch.tensor([0.8, 0.4]), 0.5, None).tolist() == pytest.approx([0.9, 0.2])
    assert mix(torch.tensor([4.0]), torch.tensor([2.0]), 0.75, None).tolist() == [3.5]


def fake_run(stage: str, step: int, steps_per_epoch: int = 6, epochs: int = 2, grad_accum: int = 1):
    objective = SimpleNamespace(name=stage, steps=lambda: steps_per_epoch, epochs=epochs)
    clock = SimpleNamespace(step=step, finished_stages={"pre_qqp": {"end_step": 10, "log": {}}})
    return SimpleNamespace(loop=SimpleNamespace(objective=objective, clock=clock, grad_accum=grad_accum),
                           config=run_multitask.RunConfig.defaults())


def test_lambda_rises_linearly_over_multitask_training_and_is_one_elsewhere():
    assert [TeacherTargets(fake_run("multitask", 10 + done)).annealing() for done in (0, 3, 6, 9, 12)] \
        == [0.0, 0.25, 0.5, 0.75, 1.0]                      # 12 optimizer steps after the stages' 10
    assert TeacherTargets(fake_run("multitask", 13, grad_accum=2)).annealing() == 0.5   # 6 steps of 2 batches
    assert TeacherTargets(fake_run("pre_qqp", 3)).annealing() == 1.0   # QQP pre-training: the gold labels
    targets = TeacherTargets(fake_run("multitask", 13))     # λ = 0.25
    targets.teach("sts", ["a", "b"], torch.tensor([1.0, 3.0]))
    batch = {"ids": ["b", "a"]}
    assert targets("sts", batch, torch.tensor([5.0, 5.0])).tolist() == [0.25 * 5 + 0.75 * 3, 0.25 * 5 + 0.75 * 1]
    gold = torch.tensor([1, 0])
    assert targets("qqp", batch, gold) is gold              # no teacher for the task: its labels as they are


def run(out: Path, model_dir: Path, name: str, *flags) -> dict:
    argv_ = ["--data_dir", str(FIXTURE_DATA), "--model", str(model_dir), "--out_dir", str(out), "--run_name", name,
             "--batch_size", "4", "--max_length", "24", "--quiet", *flags]
    assert run_multitask.main(argv_) == 0
    return json.loads((out / name / "metrics.json").read_text())


@pytest.mark.slow
def test_teachers_trained_or_given_make_the_same_student(tmp_path, tiny_model_dir):
    auto = run(tmp_path, tiny_model_dir, "auto", *FLAGS)
    teachers = tmp_path / "auto" / "teachers"
    assert auto["status"] == "finished" and list(auto["stages"]) == ["distill"]
    for task in ("sst", "qqp", "sts"):
        teacher = json.loads((teachers / task / "metrics.json").read_text())
        assert teacher["status"] == "finished" and teacher["config"]["train"]["tasks"] == task
        assert not teacher["config"]["distill"]["distill"]
        cached = json.loads((teachers / f"{task}-train.json").read_text())
        assert len(cached["ids"]) == len(cached["outputs"]) > 0
    sst = json.loads((teachers / "sst-train.json").read_text())["outputs"]
    assert all(len(row) == 5 and abs(sum(row) - 1) < 1e-5 for row in sst)   # the teacher's softmax
    given = run(tmp_path, tiny_model_dir, "given", *FLAGS, "--teachers",
                ",".join(f"{task}={teachers / task}" for task in ("sts", "sst", "qqp")))
    assert given["dev"] == auto["dev"]
    a, b = (load_file(str(tmp_path / name / "checkpoint" / "model.safetensors")) for name in ("auto", "given"))
    assert all(torch.equal(a[k], b[k]) for k in a)
    run(tmp_path, tiny_model_dir, "plain", "--epochs", "2")
    c = load_file(str(tmp_path / "plain" / "checkpoint" / "model.safetensors"))
    assert any(not torch.equal(a[k], c[k]) for k in a)     # the teachers changed the student


@pytest.mark.parametrize("teachers, message", [
    ("sst=a,qqp=b", "--teachers must name one run for each task of --tasks (sst,qqp,sts)"),
    ("sst", "--teachers must be auto or task=RUN_DIR pairs"),
    ("sst=nowhere,qqp=nowhere,sts=nowhere", "--teachers sst=nowhere: not a run folder"),
])
def test_bad_teachers_are_one_line(tmp_path, tiny_model_dir, capsys, teachers, message):
    argv_ = ["--data_dir", str(FIXTURE_DATA), "--model", str(tiny_model_dir), "--out_dir", str(tmp_path),
             "--distill", "--teachers", teachers]
    assert run_multitask.main(argv_) == 1
    assert message in capsys.readouterr().err and not any(tmp_path.iterdir())


@pytest.mark.slow
def test_a_run_stopped_in_multitask_training_resumes_exactly(tmp_path, tiny_model_dir):
    """Resuming from a checkpoint in the middle of the annealing (the teachers' outputs come back
    from the checkpoint, λ from the clock) ends exactly like the uninterrupted run."""
    clean = tmp_path / "clean"
    subprocess.run(command(*argv(tiny_model_dir, tmp_path, "clean", *FLAGS)), env=env(), check=True,
                   capture_output=True, timeout=300)
    run_dir = tmp_path / "stopped"
    assert resume_after_cut(clean, run_dir, len(list_checkpoints(clean)) // 3) == "multitask"
    assert_same_run(final_state(run_dir), final_state(clean))


@pytest.mark.slow
def test_a_teacher_stopped_midway_is_resumed_by_the_next_sitting(tmp_path, tiny_model_dir, monkeypatch):
    """--teachers auto finds a teacher that was stopped (a killed sitting) and resumes it with its
    saved configuration, whatever the paths of this sitting."""
    from test_resume_inputs import stop_midway
    from training.extensions.distill import teacher_config, train_teachers
    from training.harness.trainer import run as train

    config = run_multitask.parse_config(["--data_dir", str(FIXTURE_DATA), "--model", str(tiny_model_dir),
                                         "--batch_size", "4", "--max_length", "24", "--tasks", "sst", "--quiet",
                                         *FLAGS])
    folder = tmp_path / "teachers"
    teacher = teacher_config(config, "sst", folder)
    teacher.output.keep_training_state, teacher.output.save_every = True, 1
    train(teacher)
    stop_midway(folder / "sst")
    monkeypatch.chdir(tmp_path)   # this sitting names the same folder otherwise (a relative path)
    assert train_teachers(config, Path("teachers"), train) == {"sst": Path("teachers") / "sst"}
    metrics = json.loads((folder / "sst" / "metrics.json").read_text())
    assert metrics["status"] == "finished" and len(metrics["resumed"]) == 1
