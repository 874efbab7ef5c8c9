"""--eval_every, --early_stopping and the TensorBoard scalars (issue 29): evaluations every N steps
keep the best weights and survive --resume exactly; early stopping ends training and says so; every
run writes event files with its losses, learning rate and dev scores."""
import json
import subprocess

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.backend.event_processing.plugin_event_multiplexer import EventMultiplexer

import run_multitask
from safetensors.torch import load_file

from test_resume import OUTPUTS, argv, assert_same_run, command, env, resume_after_cut
from training.harness.resume import list_checkpoints
from training.harness.tensorboard import TensorBoardScalars


def final_state(run_dir) -> dict:
    """test_resume's final state, the evaluations standing for the epochs' dev scores."""
    last = list_checkpoints(run_dir)[-1]
    metrics = json.loads((run_dir / "metrics.json").read_text())
    return {"last": load_file(str(last / "model.safetensors")), "last_step": last.name,
            "best": load_file(str(run_dir / "checkpoint" / "model.safetensors")), "dev": metrics["dev"],
            "epochs": [{k: v for k, v in e.items() if k != "eval_seconds"} for e in metrics["evaluations"]],
            "outputs": {name: (run_dir / name).read_text() for name in OUTPUTS}}


def train(tmp_path, model_dir, name, *flags) -> dict:
    assert run_multitask.main(argv(model_dir, tmp_path, name, *flags)) == 0
    return json.loads((tmp_path / name / "metrics.json").read_text())


@pytest.mark.slow
def test_eval_every_scores_dev_every_n_steps_and_after_the_last(tmp_path, tiny_model_dir):
    metrics = train(tmp_path, tiny_model_dir, "run", "--epochs", "2", "--eval_every", "4")
    steps = sum(e["train_steps"] for e in metrics["epochs"])
    evaluations = metrics["evaluations"]
    expected = [*range(4, steps + 1, 4)] + ([steps] if steps % 4 else [])
    assert [e["step"] for e in evaluations] == expected
    assert all("dev" not in e for e in metrics["epochs"])       # the epochs hold training figures only
    best = max(evaluations, key=lambda e: e["dev_overall"])      # the first of the best, as kept
    assert metrics["best_step"] == best["step"] and metrics["best_epoch"] == best["epoch"]
    assert metrics["dev"] == best["dev"]                          # the predictions are the best weights'
    assert all(set(e["dev_loss"]) == {"sst", "qqp", "sts"} for e in evaluations)


@pytest.mark.slow
def test_the_default_evaluates_at_epoch_ends_as_before(tmp_path, tiny_model_dir):
    metrics = train(tmp_path, tiny_model_dir, "run", "--epochs", "2")
    assert "evaluations" not in metrics and "best_step" not in metrics and "early_stopped" not in metrics
    assert [sorted(e["dev_loss"]) for e in metrics["epochs"]] == [["qqp", "sst", "sts"]] * 2


@pytest.mark.slow
def test_early_stopping_ends_training_after_patience_evaluations_without_gain(tmp_path, tiny_model_dir):
    frozen = ["--lr", "1e-12", "--head_lr", "1e-12", "--warmup_ratio", "none"]   # the dev score cannot improve
    metrics = train(tmp_path, tiny_model_dir, "run", "--epochs", "3", "--eval_every", "2", "--early_stopping", "2",
                    *frozen)
    assert metrics["status"] == "finished"
    assert metrics["early_stopped"] == {"step": 6, "epoch": 1, "patience": 2, "best_epoch": 1, "best_step": 2}
    assert [e["step"] for e in metrics["evaluations"]] == [2, 4, 6]
    assert sum(e["train_steps"] for e in metrics["epochs"]) == 6 and len(metrics["epochs"]) == 1
    full = train(tmp_path, tiny_model_dir, "full", "--epochs", "3", "--eval_every", "2", *frozen)
    assert sum(e["train_steps"] for e in full["epochs"]) > 6 and "early_stopped" not in full


@pytest.mark.slow
@pytest.mark.parametrize("flags, cut", [(["--eval_every", "3"], 2),   # stopped between two evaluations
                                        (["--eval_every", "2", "--early_stopping", "2", "--lr", "1e-12",
                                          "--head_lr", "1e-12"], 5)],  # one step before the stop
                         ids=["eval_every", "early_stopping"])
def test_a_stopped_run_resumes_exactly(tmp_path, tiny_model_dir, flags, cut):
    clean = tmp_path / "clean"
    subprocess.run(command(*argv(tiny_model_dir, tmp_path, "clean", "--epochs", "2", *flags)), env=env(),
                   check=True, capture_output=True, timeout=300)
    run_dir = tmp_path / f"stopped-{cut}"
    resume_after_cut(clean, run_dir, cut - 1)
    assert_same_run(final_state(run_dir), final_state(clean))
    a, b = (json.loads((folder / "metrics.json").read_text()) for folder in (run_dir, clean))
    assert a.get("early_stopped") == b.get("early_stopped")
    assert tensorboard_runs(tmp_path) == ["clean", run_dir.name]   # the resumed run appended to its own
    assert dev_steps(run_dir) == dev_steps(clean)                   # the steps done again drawn once


def dev_steps(run_dir) -> list[int]:
    events = EventAccumulator(str(run_dir))
    events.Reload()
    return [scalar.step for scalar in events.Scalars("dev/overall")]


def tensorboard_runs(logdir) -> list[str]:
    """The runs ``tensorboard --logdir logdir`` lists."""
    return sorted(EventMultiplexer().AddRunsFromDirectory(str(logdir)).Runs())


def test_tensorboard_lists_each_run_by_its_folder(tmp_path):
    """The event files used to be in RUN/tensorboard/, listed as "<run>/tensorboard"; a run begun then
    keeps its folder, so that a --resume appends to the same TensorBoard run."""
    (tmp_path / "old" / "tensorboard").mkdir(parents=True)
    for name in ("new", "old"):
        scalars = TensorBoardScalars(tmp_path / name)
        scalars.add("loss", 1.0, 1)
        scalars.close()
    assert tensorboard_runs(tmp_path) == ["new", "old/tensorboard"]
    assert list((tmp_path / "new").glob("events.out.tfevents.*"))


@pytest.mark.slow
def test_tensorboard_scalars(tmp_path, tiny_model_dir):
    metrics = train(tmp_path, tiny_model_dir, "run", "--epochs", "2", "--pre_qqp", "--pre_qqp_steps", "3")
    assert tensorboard_runs(tmp_path) == ["run"]
    events = EventAccumulator(str(tmp_path / "run"))
    events.Reload()
    tags = set(events.Tags()["scalars"])
    assert {"train_loss/pre_qqp/qqp", "lr/pre_qqp", "train_loss/multitask/sst", "train_loss/multitask/qqp",
            "train_loss/multitask/sts", "lr/multitask", "dev/sst", "dev/qqp", "dev/sts", "dev/overall",
            "dev_loss/sst", "dev_loss/qqp", "dev_loss/sts"} <= tags
    overall = events.Scalars("dev/overall")
    steps = [3 + sum(e["train_steps"] for e in metrics["epochs"][:i + 1]) for i in range(2)]
    assert [s.step for s in overall] == steps      # the run's step count, pre-QQP's 3 steps first
    assert [s.value for s in overall] == pytest.approx([e["dev_overall"] for e in metrics["epochs"]])
    assert [s.step for s in events.Scalars("lr/pre_qqp")] == [1, 2, 3]
    steps = 3 + sum(e["train_steps"] for e in metrics["epochs"])
    for tag in ("grad_norm/multitask", "examples_per_second/multitask", "lr/multitask/group0"):   # issue 44
        assert [s.step for s in events.Scalars(tag)] == list(range(4, steps + 1)), tag
    assert all(s.value > 0 for s in events.Scalars("grad_norm/multitask"))
    groups = {tag for tag in tags if tag.startswith("lr/multitask/group")}
    assert len(groups) >= 2    # the encoder's and the heads' learning rates differ
    head_lr = [s.value for s in events.Scalars(f"lr/multitask/group{len(groups) - 1}")]
    assert max(head_lr) > max(s.value for s in events.Scalars("lr/multitask/group0"))
    config = events.Tensors("config/text_summary")[0].tensor_proto.string_val[0].decode()
    assert '"epochs": 2' in config and '"pre_qqp": true' in config


@pytest.mark.slow
def test_progress_bars_written_to_a_file_leave_no_cursor_escapes(tmp_path, tiny_model_dir):
    """stderr redirected to a file: the epoch's bar is there, but dev scoring inside it (a nested bar on
    a terminal) draws none, so the log holds no ``ESC[A`` cursor-up sequences (issue 44)."""
    flags = [a for a in argv(tiny_model_dir, tmp_path, "run", "--epochs", "1", "--eval_every", "2") if a != "--quiet"]
    bars = {key: value for key, value in env().items() if key != "TQDM_DISABLE"}
    with open(tmp_path / "stderr.log", "w") as log:
        subprocess.run(command(*flags), env=bars, stdout=subprocess.DEVNULL, stderr=log, check=True, timeout=300)
    written = (tmp_path / "stderr.log").read_text()
    assert "epoch 1/1" in written and "\x1b[A" not in written
