"""Checkpoints and exact resumption: a run killed with SIGKILL and resumed ends with the same
parameters, dev metrics and predictions as a run never interrupted (CPU, same thread count)."""
import contextlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

import run_multitask
from test_reliability import stderr_after_exit
from training.harness.resume import Checkpoint, ResumeError, TrainingClock, latest_checkpoint, list_checkpoints, run_states
from training.learning.callbacks import StepClock
from training.learning.rng import rng_state, set_rng_state

ROOT = Path(__file__).resolve().parents[1]
FIXTURE_DATA = Path(__file__).parent / "fixtures" / "data"
OUTPUTS = ["sst-dev-output.csv", "sst-test-output.csv", "para-dev-output.csv", "sts-dev-output.csv"]
PLAIN = ["--epochs", "4"]


def argv(model_dir, out_dir, name, *extra):
    return ["--data_dir", str(FIXTURE_DATA), "--model", str(model_dir), "--batch_size", "2", "--max_length", "24",
            "--out_dir", str(out_dir), "--run_name", name, "--save_every", "1", "--keep_checkpoints", "200",
            "--keep_training_state", "--quiet", *extra]


def command(*args):
    return [sys.executable, str(ROOT / "run_multitask.py"), *args]


def env():
    # one thread: the same arithmetic in every process, whatever the machine; a hang prints its stacks
    return {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "TQDM_DISABLE": "1",
            "PYTHONFAULTHANDLER": "1"}


def final_state(run_dir: Path) -> dict:
    """What must match: the last checkpoint's parameters, the best weights, dev metrics, predictions."""
    last = list_checkpoints(run_dir)[-1]
    metrics = json.loads((run_dir / "metrics.json").read_text())
    return {"last": load_file(str(last / "model.safetensors")), "last_step": last.name,
            "best": load_file(str(run_dir / "checkpoint" / "model.safetensors")),
            "dev": metrics["dev"], "epochs": [e["dev"] for e in metrics["epochs"]],
            "outputs": {name: (run_dir / name).read_text() for name in OUTPUTS}}


@contextlib.contextmanager
def one_thread():
    """One torch thread in this process, as ``env()`` gives a subprocess: the same arithmetic."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def resume_after_cut(clean: Path, run_dir: Path, keep: int) -> str:
    """Copy ``clean`` to ``run_dir`` as if stopped right after its checkpoint number ``keep`` (an index of
    ``list_checkpoints``) and before the predictions were written, then ``--resume`` it in this process
    (one thread, as the clean run's subprocess had: the same arithmetic; the tests that kill a process
    resume in a subprocess). Returns the kept checkpoint's stage."""
    shutil.copytree(clean, run_dir)
    checkpoints = list_checkpoints(run_dir)
    kept = checkpoints[keep]
    for later in checkpoints[checkpoints.index(kept) + 1:]:
        shutil.rmtree(later)
    for name in OUTPUTS:
        (run_dir / name).unlink(missing_ok=True)
    stage = json.loads((kept / "state.json").read_text())["stage"]
    with one_thread():
        assert run_multitask.main(["--resume", str(run_dir), "--quiet"]) == 0
    return stage


def assert_same_run(a: dict, b: dict):
    assert a["last_step"] == b["last_step"]
    for key in ("last", "best"):
        assert a[key].keys() == b[key].keys()
        for name in a[key]:
            assert torch.equal(a[key][name], b[key][name]), f"{key}: {name} differs"
    assert a["dev"] == b["dev"]
    assert a["epochs"] == b["epochs"]
    assert a["outputs"] == b["outputs"]


def clean_run(model_dir, out: Path, name: str, *flags) -> Path:
    """An uninterrupted run to compare with (in this process, one thread: the arithmetic of ``env()``'s)."""
    with one_thread():
        assert run_multitask.main(argv(model_dir, out, name, *flags)) == 0
    return out / name


def assert_resumes_exactly(model_dir, tmp_path: Path, name: str, *flags, keep: int = 10) -> None:
    """A run of ``flags`` (in a subprocess) and its copy cut after checkpoint ``keep``, inside multi-task training,
    and resumed: the two end alike."""
    subprocess.run(command(*argv(model_dir, tmp_path / "clean", name, *flags)), env=env(), check=True,
                   capture_output=True, timeout=300)
    clean, cut = tmp_path / "clean" / name, tmp_path / "cut" / name
    assert resume_after_cut(clean, cut, keep) == "multitask"
    assert_same_run(final_state(cut), final_state(clean))


@pytest.fixture(scope="module")
def clean_plain(tiny_model_dir, tmp_path_factory) -> Path:
    return clean_run(tiny_model_dir, tmp_path_factory.mktemp("clean"), "plain", *PLAIN)


@pytest.mark.slow
def test_sigkill_then_resume_matches_an_uninterrupted_run(tiny_model_dir, tmp_path, clean_plain):
    """Kill the run (SIGKILL, wherever it happens to be) once a few checkpoints exist, resume it."""
    process = subprocess.Popen(command(*argv(tiny_model_dir, tmp_path, "killed", *PLAIN)), env=env(),
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    run_dir = tmp_path / "killed"
    deadline = time.time() + 120
    while len(list_checkpoints(run_dir)) < 7 and process.poll() is None and time.time() < deadline:
        time.sleep(0.005)
    process.send_signal(signal.SIGKILL)
    process.wait()
    assert process.returncode == -signal.SIGKILL, "the run finished before it could be killed"
    assert json.loads((run_dir / "metrics.json").read_text())["status"] == "running"
    killed_at = latest_checkpoint(run_dir).step

    resumed = subprocess.run(command("--resume", str(run_dir), "--quiet"), env=env(), capture_output=True, text=True,
                             timeout=300)
    assert resumed.returncode == 0, resumed.stderr
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert metrics["status"] == "finished"
    assert metrics["resumed"][0]["step"] == killed_at
    assert_same_run(final_state(run_dir), final_state(clean_plain))


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_fault_injection_signal_or_kill_at_a_random_point_then_resume(tiny_model_dir, tmp_path, clean_plain, seed):
    """SIGTERM, SIGINT or SIGKILL at a random moment (after a random number of checkpoints, plus a
    random delay, so sometimes in the middle of writing one). After it: no run left "running" by a
    signal it could handle, no temporary files once resumed, the newest complete checkpoint loads,
    and --resume ends exactly like the uninterrupted run."""
    rng = random.Random(seed)
    sig = (signal.SIGTERM, signal.SIGINT, signal.SIGKILL)[seed % 3]
    after, delay = rng.randint(1, 80), rng.uniform(0, 0.05)
    run_dir = tmp_path / "faulty"
    process = subprocess.Popen(command(*argv(tiny_model_dir, tmp_path, "faulty", *PLAIN)), env=env(),
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 120
    while len(list_checkpoints(run_dir)) < after and process.poll() is None and time.time() < deadline:
        time.sleep(0.002)
    time.sleep(delay)
    process.send_signal(sig)
    err = stderr_after_exit(process)
    finished = process.returncode == 0
    if not finished and sig != signal.SIGKILL:
        assert process.returncode == 128 + sig, err
        assert json.loads((run_dir / "metrics.json").read_text())["status"] == "interrupted"
        assert not list(run_dir.rglob(".tmp-step-*")) and not list(run_dir.rglob(".*.tmp"))
    if finished:  # the signal came too late: nothing to resume
        assert json.loads((run_dir / "metrics.json").read_text())["status"] == "finished"
        return
    latest_checkpoint(run_dir)  # reads every file of the newest complete checkpoint
    earlier = 0.0
    if sig != signal.SIGKILL:  # the stopped sitting recorded its wall time: make it long, to see it added
        stopped = json.loads((run_dir / "metrics.json").read_text())
        assert stopped["wall_seconds"] > 0
        earlier = stopped["wall_seconds"] = 5000.0
        (run_dir / "metrics.json").write_text(json.dumps(stopped))
    resumed = subprocess.run(command("--resume", str(run_dir), "--quiet"), env=env(), capture_output=True, text=True,
                             timeout=300)
    assert resumed.returncode == 0, resumed.stderr
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert metrics["status"] == "finished"
    # the stop it recovered from is history, not the finished run's error (issue 61)
    assert "error" not in metrics
    if sig != signal.SIGKILL:
        (stop,) = metrics["recovered"]
        assert stop["status"] == "interrupted" and stop["error"].startswith(
            "Terminated" if sig == signal.SIGTERM else "KeyboardInterrupt")
    assert earlier < metrics["wall_seconds"] < earlier + 300   # the sittings added up
    assert not list(run_dir.rglob(".tmp-step-*")) and not list(run_dir.rglob(".*.tmp"))
    assert_same_run(final_state(run_dir), final_state(clean_plain))


@pytest.mark.slow
def test_checkpoint_folder_is_complete_and_pruned(tiny_model_dir, tmp_path):
    assert run_multitask.main(argv(tiny_model_dir, tmp_path, "run", "--epochs", "2", "--save_every", "5",
                                   "--keep_checkpoints", "2")) == 0
    found = list_checkpoints(tmp_path / "run")
    assert [p.name for p in found] == ["step-00000045", "step-00000048"]  # 24 steps an epoch; 45 = 9 × 5
    for path in found:
        assert {f.name for f in path.iterdir()} == {"model.safetensors", "best.safetensors", "best-heads.safetensors",
                                                    "state.pt", "state.json"}
    assert not list((tmp_path / "run" / "checkpoints").glob(".tmp*"))
    extra = torch.load(found[-1] / "state.pt", weights_only=True)
    assert set(extra) == {"optimizers", "modules", "rng"}
    assert json.loads((found[-1] / "state.json").read_text())["step"] == 48


def attribute_walk(roots: dict[str, object], model: torch.nn.Module | None) -> dict[str, object]:
    """The reference: how checkpoints named their states until issue 73 (``resume.resumable_state`` of commit
    df5eb5b, a walk over the attributes of the project's own objects). Every object with ``state_dict`` and
    ``load_state_dict`` reachable from ``roots``, by attribute path, once, at its first path; the model and
    modules sharing its parameters left out."""
    model_params = {id(p) for p in model.parameters()} if model is not None else set()
    found: dict[str, object] = {}
    seen: set[int] = {id(model)}

    def visit(path: str, obj) -> None:
        if obj is None or id(obj) in seen or isinstance(obj, (StepClock, type)):
            return
        seen.add(id(obj))
        if hasattr(obj, "state_dict") and hasattr(obj, "load_state_dict"):
            if not (isinstance(obj, torch.nn.Module) and any(id(p) in model_params for p in obj.parameters())):
                found[path] = obj
            return
        if isinstance(obj, tuple):
            for i, value in enumerate(obj):
                visit(f"{path}.{i}", value)
        elif type(obj).__module__.split(".")[0] in ("training", "heads", "minbert") and hasattr(obj, "__dict__"):
            for name, value in vars(obj).items():
                visit(f"{path}.{name}", value)

    for name, root in roots.items():
        visit(name, root)
    return found


def test_run_states_lists_every_stateful_part_by_its_path():
    """Optimizers, the loss weighting, SMART's average and the gradient scaler, by the paths checkpoints use, named in
    one place of the harness (``resume.run_states``); the model's weights are not among them (model.safetensors)."""
    from training.learning.loop import TrainingLoop
    from training.learning.precision import Precision
    from training.learning.stages import Run
    from training.extensions.smart import SmartConfig, SmartRegularizer
    from training.learning.task_loss import TaskLoss

    model, weighting = torch.nn.Linear(2, 2), torch.nn.Linear(1, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    precision = Precision("off", torch.device("cpu"))
    precision.scaler = torch.amp.GradScaler("cpu")  # as --amp fp16 holds one
    smart = SmartRegularizer(model, SmartConfig(smart=True, smart_bregman=True, smart_beta=0.9), {})
    task_loss = TaskLoss(model, {}, torch.device("cpu"), [smart], weighting)
    run = Run(config=None, model=model, forward_model=torch.nn.Sequential(model), splits={}, loader=None,
              device=None, log=None, optimizer=optimizer, task_loss=task_loss, loop=TrainingLoop(precision))
    expected = {"optimizer": optimizer, "task_loss.weighting": weighting,
                "task_loss.regularizers.0.bregman.ema": smart.bregman.ema, "loop.precision.scaler": precision.scaler}
    assert run_states(run) == expected
    assert attribute_walk({"run": run}, model) == {f"run.{k}": v for k, v in expected.items()}


STATE_RUNS = {"default": [], "joint-learned": ["--joint_loss", "--loss_weighting", "learned"],
              "smart-bregman": ["--smart", "--smart_bregman"], "pcgrad": ["--pcgrad"],
              "ucl-curve": ["--ucl", "--ucl_steps", "2", "--ucl_eval_every", "1"], "scl": ["--scl", "--scl_steps", "2"],
              "lcl": ["--lcl", "--lcl_steps", "2"], "pre_qqp-anneal": ["--pre_qqp", "--pre_qqp_steps", "2",
                                                                       "--anneal_sampling"],
              "adapters": ["--adapters", "--adapter_size", "4"]}


@pytest.mark.parametrize("name", sorted(STATE_RUNS))
def test_a_checkpoint_saves_what_the_attribute_walk_found(name, tmp_path, tiny_model_dir, monkeypatch):
    """At every checkpoint of a real run (each stage's objective, the schedule, each extension's state) the
    explicit list ``resume.run_states`` names the same objects as the attribute walk checkpoints were written with:
    runs saved before issue 73 resume."""
    compared = []
    track, save = TrainingClock.track, TrainingClock.save

    def tracking(clock, run):
        clock.tracked = run
        track(clock, run)

    def saving(clock):
        walked = attribute_walk({"run": clock.tracked}, clock.model)
        listed = clock.states()
        assert listed.keys() == walked.keys() and all(listed[k] is walked[k] for k in walked), (listed, walked)
        compared.append(sorted(listed))
        return save(clock)
    monkeypatch.setattr(TrainingClock, "track", tracking)
    monkeypatch.setattr(TrainingClock, "save", saving)
    flags = ["--epochs", "1", "--max_steps_per_epoch", "2", *STATE_RUNS[name]]
    assert run_multitask.main(argv(tiny_model_dir, tmp_path, name, *flags)) == 0
    assert compared and all("run.optimizer" in names for names in compared)


def test_rng_state_round_trip():
    import random

    import numpy as np
    saved = rng_state()
    first = (random.random(), np.random.rand(), torch.rand(3))
    set_rng_state(torch.load(_save(saved), weights_only=True))
    again = (random.random(), np.random.rand(), torch.rand(3))
    assert first[0] == again[0] and first[1] == again[1] and torch.equal(first[2], again[2])


def _save(obj):
    import io
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    buffer.seek(0)
    return buffer


@pytest.fixture
def finished_run(tiny_model_dir, tmp_path):
    assert run_multitask.main(argv(tiny_model_dir, tmp_path, "run", "--epochs", "1", "--save_every", "0")) == 0
    return tmp_path / "run"


@pytest.mark.slow
def test_resume_errors_are_one_line_and_name_the_place(tmp_path, finished_run, capsys):
    empty = tmp_path / "empty"
    empty.mkdir()
    cases = {
        str(tmp_path / "nowhere"): "no such run folder",
        str(empty): "no checkpoint in",
    }
    for folder, expected in cases.items():
        assert run_multitask.main(["--resume", folder]) == 1
        err = capsys.readouterr().err.strip()
        assert err.startswith("error: ") and expected in err and folder in err and "\n" not in err

    checkpoint = list_checkpoints(finished_run)[-1]
    before = (finished_run / "sst-dev-output.csv").read_text()
    saved = json.loads((checkpoint / "state.json").read_text())
    for damaged in ("{ not json", json.dumps({"step": saved["step"]}), json.dumps({**saved, "config": [1]})):
        (checkpoint / "state.json").write_text(damaged)   # JSON without its configuration: was a KeyError's traceback
        assert run_multitask.main(["--resume", str(finished_run)]) == 1
        err = capsys.readouterr().err.strip()
        assert "state.json" in err and "unreadable" in err and "\n" not in err and "Traceback" not in err

    (checkpoint / "state.json").unlink()
    with pytest.raises(ResumeError, match="state.json"):
        Checkpoint(checkpoint)
    assert (finished_run / "sst-dev-output.csv").read_text() == before  # nothing written was damaged


@pytest.mark.slow
def test_unreadable_newest_checkpoint_names_the_intact_one_and_fallback_takes_it(tiny_model_dir, tmp_path, capsys):
    """Found before the run is touched (it used to fail mid-replay and mark the run "failed")."""
    assert run_multitask.main(argv(tiny_model_dir, tmp_path, "run", "--epochs", "2", "--save_every", "0")) == 0
    run_dir = tmp_path / "run"
    previous, newest = list_checkpoints(run_dir)
    weights = newest / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:1000])
    before = (run_dir / "metrics.json").read_text()
    assert run_multitask.main(["--resume", str(run_dir), "--quiet"]) == 1
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and str(weights) in err and f"{previous.name} is intact" in err
    assert "--resume_fallback" in err
    assert (run_dir / "metrics.json").read_text() == before
    assert run_multitask.main(["--resume", str(run_dir), "--resume_fallback", "--quiet"]) == 0
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert metrics["status"] == "finished" and metrics["resumed"][-1]["checkpoint"] == previous.name


@pytest.mark.slow
def test_resume_removes_what_an_interrupted_writer_left(finished_run):
    half = finished_run / "checkpoints" / ".tmp-step-00009999-123"
    half.mkdir()
    (half / "model.safetensors").write_bytes(b"partial")
    (finished_run / ".metrics.json.x1y2.tmp").write_text("{")
    assert run_multitask.main(["--resume", str(finished_run), "--quiet"]) == 0
    assert not half.exists() and not (finished_run / ".metrics.json.x1y2.tmp").exists()


@pytest.mark.slow
def test_half_written_checkpoint_folder_is_ignored(finished_run):
    good = list_checkpoints(finished_run)[-1]
    half = finished_run / "checkpoints" / ".tmp-step-00009999-123"
    half.mkdir()
    (half / "model.safetensors").write_bytes(b"partial")
    assert latest_checkpoint(finished_run).path == good


@pytest.mark.slow
def test_quiet_and_log_file(tiny_model_dir, tmp_path, capsys):
    log_file = tmp_path / "logs" / "run.log"
    assert run_multitask.main(argv(tiny_model_dir, tmp_path, "run", "--epochs", "2", "--log_file", str(log_file))) == 0
    shown = capsys.readouterr().out.strip().splitlines()
    # the fixture's bad QQP row is reported; then one line per epoch and the summary
    assert [line.split(":")[0] for line in shown] == ["warning", "epoch 1", "epoch 2", "dev"]
    assert all(word in shown[1] for word in ("SST acc", "QQP acc", "STS pearson", "overall"))
    logged = log_file.read_text().splitlines()
    assert len(logged) > len(shown) and any("run folder" in line for line in logged)
