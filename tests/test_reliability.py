"""Reliability round 2 (issue 15): concurrent runs, output paths, divergence, signals, run names and
what a finished run leaves behind. Each test is one class of fault, tried the way a user meets it;
the model-configuration class is in test_bad_model.py, resumption in test_resume.py."""
from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

import run_multitask
from scripts import evaluate_embeddings
from test_bad_input import RUN_NAME, box, snapshot  # noqa: F401 (box: the fixture)
from training.learning.watch import per_second
from training.harness.runs import pretrained_run
from training.harness.resume import Checkpoint, TrainingClock, latest_checkpoint, list_checkpoints
from training.learning.loop import TrainingDiverged
from training.tools import embed, predict, report

ROOT = Path(__file__).resolve().parents[1]


def one_line_error(capsys, *fragments: str) -> str:
    """The error line (after any progress bars on stderr): one line, no traceback."""
    err = capsys.readouterr().err
    line = err.strip().splitlines()[-1]
    assert line.startswith("error: ") and "Traceback" not in err, err
    for fragment in fragments:
        assert fragment in line, (fragment, line)
    return line


def status(run_dir: Path) -> str:
    return json.loads((run_dir / "metrics.json").read_text())["status"]


def leftovers(run_dir: Path) -> list[Path]:
    """Temporary files and half-written checkpoint folders."""
    return [*run_dir.rglob(".tmp-step-*"), *run_dir.rglob(".*.tmp")]


def subprocess_env() -> dict:
    return {**os.environ, "OMP_NUM_THREADS": "1", "TQDM_DISABLE": "1", "PYTHONFAULTHANDLER": "1"}


def stderr_after_exit(process: subprocess.Popen, timeout: float = 120) -> str:
    """The command's stderr once it has exited. One still running after ``timeout`` is sent SIGABRT:
    faulthandler (PYTHONFAULTHANDLER in the command's environment) prints every thread's stack, and
    the test fails with it, so a rare hang says where it hung."""
    try:
        return process.communicate(timeout=timeout)[1]
    except subprocess.TimeoutExpired:
        process.send_signal(signal.SIGABRT)
        err = process.communicate(timeout=60)[1]
        pytest.fail(f"the command had not exited {timeout} s later; its stderr, with every thread's stack:\n{err}")


@pytest.mark.slow
def test_a_command_that_hangs_fails_its_test_with_the_stacks_of_its_threads():
    """The guard of the signal tests: it must fail, not wait, and say where the command was."""
    hung = subprocess.Popen([sys.executable, "-c", "import time\ndef waiting_forever():\n    time.sleep(60)\n"
                             "waiting_forever()"], env=subprocess_env(), stderr=subprocess.PIPE, text=True)
    with pytest.raises(pytest.fail.Exception, match="(?s)had not exited 1 s later.*in waiting_forever"):
        stderr_after_exit(hung, timeout=1)
    assert hung.returncode == -signal.SIGABRT


def box_command(box, *extra: str) -> list[str]:
    return [sys.executable, str(ROOT / "run_multitask.py"), "--data_dir", str(box.data), "--model", str(box.model),
            "--out_dir", str(box.out), "--run_name", RUN_NAME, "--batch_size", "4", "--max_length", "16", "--quiet",
            *extra]


# --- 1. two runs, one name ----------------------------------------------------------------------

@pytest.mark.slow
def test_two_runs_started_together_with_one_name_one_is_refused(box):
    """Both used to pass the "already holds a run" check and exit 0, one replacing the other's files."""
    command = box_command(box, "--epochs", "1", "--max_steps_per_epoch", "2")
    runs = [subprocess.Popen(command, env=subprocess_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                             text=True) for _ in range(2)]
    results = [(run.wait(timeout=300), run.stderr.read()) for run in runs]
    assert sorted(code for code, _ in results) == [0, 1], results
    refused = next(err for code, err in results if code == 1).strip()
    assert refused.startswith("error: ") and "\n" not in refused and str(box.run_dir) in refused
    assert status(box.run_dir) == "finished"
    assert (box.run_dir / "sst-dev-output.csv").is_file()


@pytest.mark.slow
def test_a_run_that_cannot_start_gives_its_claim_back(box, capsys):
    (box.data / "sts-dev.csv").unlink()
    assert box.main() == 1
    one_line_error(capsys, "sts-dev.csv")
    assert not box.run_dir.exists()
    assert box.main("--data_dir", str(ROOT / "tests" / "fixtures" / "data")) == 0  # the name is free again


# --- 2. settings the model cannot take ---------------------------------------------------------

@pytest.mark.slow
def test_max_length_beyond_the_model_positions_is_refused_before_the_run(box, capsys):
    """Used to be found only when a sentence that long came, possibly in the test file after training."""
    positions = json.loads((box.model / "config.json").read_text())["max_position_embeddings"]
    before = snapshot(box.root)
    assert box.main("--max_length", str(positions + 1)) == 1
    one_line_error(capsys, f"--max_length {positions + 1}", f"{positions} positions", "config.json")
    assert snapshot(box.root) == before
    assert box.main("--max_length", str(positions)) == 0


def test_tools_truncate_to_the_model_positions_instead_of_failing(tiny_model_dir):
    run = pretrained_run(tiny_model_dir)
    positions = run.model.bert.config.max_position_embeddings
    long_sentence = " ".join(["word"] * (3 * positions))
    vectors = run.encode([long_sentence, "short"], max_length=4 * positions)
    assert vectors.shape[0] == 2 and np.isfinite(vectors).all()
    truncated = run.encode([long_sentence], max_length=positions)
    assert np.allclose(vectors[0], truncated[0], atol=1e-6)


@pytest.mark.slow
def test_saved_run_with_a_bad_config_as_model_names_the_file(box, capsys):
    assert box.main() == 0
    config = box.run_dir / "checkpoint" / "config.json"
    config.write_text(json.dumps({**json.loads(config.read_text()), "hidden_size": 0}))
    assert box.main("--model", str(box.run_dir), "--run_name", "chained") == 1
    one_line_error(capsys, f"{config}: hidden_size must be a positive integer, got 0")
    assert not (box.out / "chained").exists()


# --- 3. divergence -----------------------------------------------------------------------------

def test_nan_loss_stops_the_run_naming_the_step_and_keeps_the_last_good_checkpoint(box, capsys):
    """--lr 1e10 used to end in a traceback (load_state_dict(None): no finite dev score)."""
    # a constant learning rate: with warmup the first step's rate is 0 and the blow-up comes a step later
    assert box.main("--lr", "1e10", "--warmup_ratio", "none", "--save_every", "1", "--max_steps_per_epoch", "5",
                    "--private_layers", "0") == 1   # one shared encoder: the blow-up's step is pinned on it
    err = one_line_error(capsys, "multitask step 2: the training loss is nan", "step-00000001")
    assert "Traceback" not in err
    assert status(box.run_dir) == "failed"
    good = latest_checkpoint(box.run_dir)
    assert good.step == 1
    assert all(torch.isfinite(t).all() for t in load_file(str(good.path / "model.safetensors")).values()
               if t.is_floating_point())


def test_nan_weights_stop_the_run_at_its_first_step(box, capsys):
    weights = load_file(str(box.model / "model.safetensors"))
    name = next(k for k in weights if k.endswith("attention.self.query.weight"))
    weights[name][0, 0] = float("nan")
    save_file(weights, str(box.model / "model.safetensors"))
    assert box.main() == 1
    one_line_error(capsys, "step 1: the training loss is nan", "no checkpoint had been written yet")
    assert status(box.run_dir) == "failed"


def test_a_checkpoint_of_non_finite_weights_is_never_written(tmp_path):
    model = torch.nn.Linear(2, 2)
    clock = TrainingClock(model, tmp_path, {}, save_every=1)
    clock.step_done()  # a good checkpoint
    with torch.no_grad():
        model.weight[0, 0] = float("inf")
    with pytest.raises(TrainingDiverged, match=r"step 2: non-finite weights \(weight\); the last good checkpoint"):
        clock.step_done()
    assert [p.name for p in list_checkpoints(tmp_path)] == ["step-00000001"]
    assert not leftovers(tmp_path)


@pytest.fixture
def sigterm_interrupts():
    """SIGTERM raises KeyboardInterrupt in this test's process, as ``run_command`` makes it do."""
    def stop(signum, frame):
        raise KeyboardInterrupt
    previous = signal.signal(signal.SIGTERM, stop)
    yield
    signal.signal(signal.SIGTERM, previous)


def test_sigterm_while_a_checkpoint_is_written_lets_it_finish_then_stops(tmp_path, monkeypatch, sigterm_interrupts):
    """The signal comes in the middle of writing the weights: the checkpoint is still renamed into
    place whole, the old one pruned, no temporary folder is left, and only then the run stops."""
    from training.harness import resume
    model = torch.nn.Linear(2, 2)
    clock = TrainingClock(model, tmp_path, {}, save_every=1, keep=1)
    clock.step_done()

    def save_then_signal(*args, **kwargs):
        save_file(*args, **kwargs)
        os.kill(os.getpid(), signal.SIGTERM)

    monkeypatch.setattr(resume, "save_file", save_then_signal)
    with pytest.raises(KeyboardInterrupt):
        clock.step_done()
    assert [p.name for p in list_checkpoints(tmp_path)] == ["step-00000002"]
    assert Checkpoint(list_checkpoints(tmp_path)[0]).step == 2
    assert not leftovers(tmp_path)


def test_sigterm_while_a_tensorboard_scalar_is_queued_leaves_the_writer_closable(tmp_path, monkeypatch,
                                                                                  sigterm_interrupts):
    """The signal comes while the writer's queue holds its lock (as it can right after ``Queue.put``
    takes it): raised there, it would leave the lock held, and closing the writer at the end of the
    run would wait for it forever. The scalar is queued first, then the run stops, and close() returns."""
    import queue
    import threading
    from training.harness.tensorboard import TensorBoardScalars
    scalars = TensorBoardScalars(tmp_path)
    scalars.add("warm", 0.0, 0)
    original_put, queues = queue.Queue.put, []

    def put_under_a_signal(self, item, *args, **kwargs):
        monkeypatch.setattr(queue.Queue, "put", original_put)   # this one call only
        queues.append(self)
        self.mutex.acquire()
        os.kill(os.getpid(), signal.SIGTERM)
        self.mutex.release()
        return original_put(self, item, *args, **kwargs)

    monkeypatch.setattr(queue.Queue, "put", put_under_a_signal)
    with pytest.raises(KeyboardInterrupt):
        scalars.add("loss", 1.0, 1)
    assert queues and not queues[0].mutex.locked()
    closing = threading.Thread(target=scalars.close, daemon=True)
    closing.start()
    closing.join(timeout=30)
    assert not closing.is_alive(), "closing the TensorBoard writer hangs on the queue's lock"


@pytest.mark.parametrize("flag, value", [("--lr", "inf"), ("--head_lr", "nan"), ("--head_temp", "inf"),
                                         ("--cl_temp", "nan"), ("--max_grad_norm", "nan"),
                                         ("--smart_weight", "inf")])
def test_non_finite_flags_are_refused(box, capsys, flag, value):
    assert box.main(flag, value) == 1
    one_line_error(capsys, f"{flag} must be a finite number, got {value}")
    assert not box.run_dir.exists()


# --- 4. operating-system errors on output paths ------------------------------------------------

def test_out_dir_that_is_a_file(box, capsys):
    (box.root / "a-file").write_text("x")
    assert box.main("--out_dir", str(box.root / "a-file")) == 1
    one_line_error(capsys, f"{box.root / 'a-file'}: is a file")
    assert (box.root / "a-file").read_text() == "x"


def test_log_file_that_cannot_be_opened(box, capsys):
    (box.root / "a-file").write_text("x")
    assert box.main("--log_file", str(box.root / "a-file" / "run.log")) == 1
    one_line_error(capsys, "--log_file", "cannot be written")
    assert not box.run_dir.exists()


def test_full_disk_while_saving_a_checkpoint_fails_the_run_in_one_line(box, capsys, monkeypatch):
    def no_space(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr("training.harness.resume.save_file", no_space)
    assert box.main("--save_every", "1") == 1
    one_line_error(capsys, "No space left on device")
    assert status(box.run_dir) == "failed"
    assert not leftovers(box.run_dir)


@pytest.mark.slow
def test_side_tools_out_that_is_a_folder_or_under_a_file(box, capsys):
    assert box.main() == 0
    capsys.readouterr()
    (box.root / "a-file").write_text("x")
    under_file, folder = str(box.root / "a-file" / "out"), str(box.root)
    sentences = str(box.data / "ids-sst-dev.csv")
    commands = {
        "report": (report.main, [str(box.out), "--out", under_file]),
        "predict": (predict.main, [str(box.run_dir), "--data_dir", str(box.data), "--out", under_file]),
        "embed to a folder": (embed.main, [str(box.run_dir), "--input", sentences, "--out", folder]),
        "embed under a file": (embed.main, [str(box.run_dir), "--input", sentences, "--out", under_file]),
        "evaluator to a folder": (evaluate_embeddings.main, ["--checkpoint", str(box.run_dir), "--data",
                                                             str(box.data / "sts-dev.csv"), "--out", folder]),
    }
    for name, (main, argv) in commands.items():
        assert main(argv) == 1, name
        err = capsys.readouterr().err.strip().splitlines()
        assert err[-1].startswith("error: ") and ("is a file" in err[-1] or "is a folder" in err[-1]), (name, err)
    assert (box.root / "a-file").read_text() == "x"


# --- 5. signals --------------------------------------------------------------------------------

@pytest.mark.slow
def test_sigterm_is_handled_like_ctrl_c(box):
    """SIGTERM used to leave status "running" and a half-written checkpoint folder."""
    process = subprocess.Popen(box_command(box, "--epochs", "50", "--save_every", "1"), env=subprocess_env(),
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 120
    while len(list_checkpoints(box.run_dir)) < 2 and time.time() < deadline:
        time.sleep(0.01)
    process.send_signal(signal.SIGTERM)
    err = stderr_after_exit(process)
    assert process.returncode == 128 + signal.SIGTERM, err
    assert err.strip().splitlines()[-1] == "terminated (SIGTERM)"
    assert status(box.run_dir) == "interrupted"
    assert not leftovers(box.run_dir)


# --- 6. run names -------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["../escaped", "a/b", "/tmp/absolute", "..", ""])
def test_run_name_must_stay_inside_out_dir(box, capsys, name):
    before = snapshot(box.root)
    assert box.main("--run_name", name) == 1
    one_line_error(capsys, "--run_name", "plain folder name")
    assert snapshot(box.root) == before
    assert not (box.root / "escaped").exists()


# --- 8. quieter defects --------------------------------------------------------------------------

@pytest.mark.slow
def test_a_finished_run_drops_its_resume_state_unless_asked(box):
    assert box.main("--save_every", "1") == 0
    assert not (box.run_dir / "checkpoints").exists()
    assert (box.run_dir / "checkpoint" / "model.safetensors").is_file()
    kept = box.out / "kept"
    assert box.main("--save_every", "1", "--run_name", kept.name, "--keep_training_state") == 0
    assert list_checkpoints(kept)


def test_examples_per_second_of_an_epoch_that_rounds_to_zero_seconds():
    assert per_second(1200, 0.04) is None
    assert per_second(1200, 2.0) == 600.0
