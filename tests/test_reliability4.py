"""Reliability round 4 (issue 43): side writers isolated from the run (item 1), checkpoints with copies
of their own (2), Ctrl-C that does not wait for a computation (5), a SIGKILLed writer's temporary file
removed by the next write (6), and every file written with the umask's mode (9). Each test failed on
the code before its fix."""
from __future__ import annotations

import errno
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

import run_multitask
from minbert.atomic import atomic_path
from test_bad_input import box  # noqa: F401 (box: the fixture)
from test_quantize import FIXTURE_DATA, checkpoint, quantize  # noqa: F401 (checkpoint: the fixture)
from test_resume import argv as resume_argv
from training.harness.resume import TrainingClock, list_checkpoints
from training.harness.tensorboard import TensorBoardScalars

ROOT = Path(__file__).resolve().parents[1]


def status(run_dir: Path) -> str:
    return json.loads((run_dir / "metrics.json").read_text())["status"]


def temporaries(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.rglob(".*.tmp"))


@pytest.fixture
def umask_022():
    old = os.umask(0o022)
    yield
    os.umask(old)


# --- 1. side writers: a failure costs that output and one warning, never the run ---------------

def test_tensorboard_folder_deleted_under_the_writer_warns_once_and_nothing_raises(tmp_path, capfd):
    """The writer's thread used to print a traceback, and every later add() and close() raised."""
    scalars = TensorBoardScalars(tmp_path / "run")
    scalars.add("loss", 1.0, 0)
    thread = scalars.writer.file_writer.event_writer._async_writer._worker
    scalars.writer.flush()
    shutil.rmtree(tmp_path / "run")
    scalars.add("loss", 2.0, 1)   # the thread fails writing it
    scalars.close()               # waits for the thread: its error comes out here, as a warning
    scalars.add("loss", 3.0, 2)
    scalars.close()
    thread.join(timeout=30)
    captured = capfd.readouterr()
    assert "Traceback" not in captured.err and "Exception in thread" not in captured.err, captured.err
    warnings = [line for line in captured.err.splitlines() if line.startswith("warning: ")]
    assert len(warnings) == 1 and "TensorBoard" in warnings[0] and str(tmp_path) in warnings[0], captured.err


def test_tensorboard_folder_that_cannot_be_made_warns_and_writes_nothing(tmp_path, capsys):
    (tmp_path / "run").write_text("a file where the folder goes")
    scalars = TensorBoardScalars(tmp_path / "run")
    scalars.add("loss", 1.0, 0)
    scalars.close()
    assert capsys.readouterr().err.count("warning: TensorBoard scalars stopped") == 1


@pytest.mark.slow
def test_tensorboard_writer_failing_during_a_run_costs_only_the_scalars(box, capsys, monkeypatch):
    """The issue's case was ``rm -rf RUN/tensorboard`` while the run trains (the event files are now in
    the run folder itself): the writer's thread failing mid-run, here on a full disk, used to exit 1 with
    metrics.json left "running"; now the run finishes, with one warning line."""
    from tensorboard.summary.writer.record_writer import RecordWriter
    real_write, written = RecordWriter.write, []

    def write_until_the_disk_is_full(self, data):
        written.append(data)
        if len(written) > 5:
            raise OSError(errno.ENOSPC, "No space left on device", str(box.run_dir / "events.out.tfevents"))
        real_write(self, data)

    monkeypatch.setattr(RecordWriter, "write", write_until_the_disk_is_full)
    assert box.main("--max_steps_per_epoch", "3", "--quiet") == 0
    out, err = capsys.readouterr()
    assert status(box.run_dir) == "finished" and (box.run_dir / "sst-dev-output.csv").is_file()
    assert (out + err).count("warning: TensorBoard scalars stopped") == 1 and "Traceback" not in err


def test_a_failed_run_is_marked_failed_even_when_closing_tensorboard_raises(box, capsys, monkeypatch):
    """RunFolder.__exit__ closed TensorBoard first; when that raised, metrics.json stayed "running". Now the status
    is written first, and a tracker that raises then (``Trackers``) is one warning."""
    from training.harness import trainer

    def fail(*args, **kwargs):
        raise OSError(errno.EIO, "Input/output error", "tensorboard/events")

    def disk_error(*args, **kwargs):   # the run's own failure, after it started
        raise OSError(errno.EIO, "Input/output error", str(box.run_dir / "sst-dev-output.csv"))

    monkeypatch.setattr(TensorBoardScalars, "close", fail)
    monkeypatch.setattr(trainer, "train_and_predict", disk_error)
    assert box.main("--quiet") == 1
    assert status(box.run_dir) == "failed"
    out, err = capsys.readouterr()
    assert (out + err).count("warning: TensorBoard stopped tracking this run") == 1, out + err


def test_curves_png_that_cannot_be_written_warns_once_and_the_run_finishes(box, capsys, monkeypatch):
    """A full disk under curves.png used to fail the whole run at its end."""
    from training.harness import outputs

    def disk_full(metrics, path):
        raise OSError(errno.ENOSPC, "No space left on device", str(path))

    monkeypatch.setattr(outputs, "plot_curves", disk_full)
    assert box.main("--epochs", "2", "--quiet") == 0
    out, err = capsys.readouterr()
    assert status(box.run_dir) == "finished"
    lines = [line for line in (out + err).splitlines() if "curves.png" in line]
    assert len(lines) == 1 and lines[0].startswith("warning: ") and "No space left on device" in lines[0], out + err


# --- 2. checkpoints hold copies of the best weights, not links to one file ---------------------

@pytest.mark.slow
def test_best_weights_damaged_in_one_checkpoint_leave_the_others_intact(tiny_model_dir, tmp_path, capsys):
    """The best weights were hard links to checkpoint/model.safetensors: damage to one (in place)
    was damage to all, and --resume_fallback found "no readable checkpoint"."""
    assert run_multitask.main(resume_argv(tiny_model_dir, tmp_path, "run", "--epochs", "3", "--save_every", "0")) == 0
    run_dir = tmp_path / "run"
    previous, newest = list_checkpoints(run_dir)[-2:]
    best = newest / "best.safetensors"
    assert (previous / "best.safetensors").is_file() and best.is_file()
    with open(best, "r+b") as f:   # in place: the same inode, as a faulty disk or an editor would
        f.write(b"\xff" * 64)
    assert run_multitask.main(["--resume", str(run_dir), "--quiet"]) == 1
    err = capsys.readouterr().err.strip()
    assert str(best) in err and f"{previous.name} is intact" in err, err
    assert run_multitask.main(["--resume", str(run_dir), "--resume_fallback", "--quiet"]) == 0
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert metrics["status"] == "finished" and metrics["resumed"][-1]["checkpoint"] == previous.name


# --- 5. Ctrl-C is not held while a tool computes inside atomic_path ----------------------------

def test_ctrl_c_in_the_body_of_atomic_path_stops_it_at_once_and_leaves_nothing(tmp_path):
    target, reached = tmp_path / "vectors.npy", []
    with pytest.raises(KeyboardInterrupt):
        with atomic_path(target) as tmp:
            tmp.write_bytes(b"half")
            os.kill(os.getpid(), signal.SIGINT)
            reached.append("the rest of the block")
    assert reached == [] and list(tmp_path.iterdir()) == []


@pytest.mark.slow
def test_ctrl_c_while_embed_encodes_stops_it_at_once(box, tmp_path, monkeypatch, capsys):
    """embed used to go on encoding for a minute after Ctrl-C, then write its file anyway."""
    from training.harness import runs
    from training.tools import embed
    assert box.main("--quiet") == 0
    sentences = tmp_path / "sentences.txt"
    sentences.write_text("a sentence\nanother one\n")

    def slow_encode(self, *args, **kwargs):
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(10)   # a minute of encoding, shortened
        raise AssertionError("not interrupted")

    monkeypatch.setattr(runs.LoadedRun, "encode", slow_encode)
    out = tmp_path / "out" / "vectors.npy"
    began = time.monotonic()
    assert embed.main([str(box.run_dir), "--input", str(sentences), "--out", str(out)]) == 130
    assert time.monotonic() - began < 5
    assert capsys.readouterr().err.strip().splitlines()[-1] == "interrupted"
    assert not out.exists() and temporaries(out.parent) == []


def test_sigterm_while_quantize_measures_stops_it_at_once(checkpoint, tmp_path, monkeypatch, capsys):  # noqa: F811
    """quantize used to measure on for a minute and a half after the signal."""
    def slow_measure(*args, **kwargs):
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(10)
        raise AssertionError("not interrupted")

    monkeypatch.setattr(quantize, "measure", slow_measure)
    out = tmp_path / "quant"
    began = time.monotonic()
    assert quantize.main(["--checkpoint", str(checkpoint), "--data_dir", str(FIXTURE_DATA), "--out", str(out),
                          "--max_dev", "2"]) == 143
    assert time.monotonic() - began < 5
    assert not out.exists()   # the folder it made, left empty, is removed too


# --- 6. a SIGKILLed writer's temporary file is removed by the next write of its target -----------

KILLED_WRITER = """
import os, signal, sys
from minbert.atomic import atomic_path
with atomic_path(sys.argv[1]) as tmp:
    tmp.write_bytes(b"half of the int8 weights")
    os.kill(os.getpid(), signal.SIGKILL)
"""


def killed_writer_leftover(target: Path) -> Path:
    """Run a writer of ``target`` in a subprocess and SIGKILL it mid-write; returns what it left."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    killed = subprocess.run([sys.executable, "-c", KILLED_WRITER, str(target)], env=env, cwd=ROOT, timeout=60)
    assert killed.returncode == -signal.SIGKILL
    left = [p for p in target.parent.iterdir() if p.name.endswith(".tmp")]
    assert len(left) == 1
    return left[0]


@pytest.mark.slow
def test_the_next_write_of_a_target_removes_a_killed_writers_temporary_file(tmp_path):
    target = tmp_path / "model-int8.pt"
    killed_writer_leftover(target)
    older = tmp_path / ".model-int8.pt.k3x_9qzv.tmp"   # named before writers' ids were in the names
    older.write_bytes(b"left by an older version")
    with atomic_path(target) as tmp:
        assert [p.name for p in tmp_path.iterdir()] == [tmp.name]   # a live writer's own file stays
        tmp.write_bytes(b"whole")
    assert [p.name for p in tmp_path.iterdir()] == ["model-int8.pt"]


def test_a_live_writers_temporary_file_is_left_alone(tmp_path):
    target = tmp_path / "model-int8.pt"
    other_target = tmp_path / ".model-int8.pt.x.0-abcdefgh.tmp"   # another target's, whose writer is gone
    live = tmp_path / f".model-int8.pt.{os.getppid()}-abcdefgh.tmp"   # a running process's
    for path in (other_target, live):
        path.write_bytes(b"x")
    with atomic_path(target) as tmp:
        tmp.write_bytes(b"whole")
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([target.name, other_target.name, live.name])


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:TypedStorage is deprecated")
def test_quantize_removes_what_a_killed_quantize_left(checkpoint, tmp_path, capsys):  # noqa: F811
    """A SIGKILLed quantize left its 66 MB temporary file for good, even after quantizing again."""
    out = tmp_path / "quant"
    left = killed_writer_leftover(out / quantize.INT8_WEIGHTS)
    argv = ["--checkpoint", str(checkpoint), "--data_dir", str(FIXTURE_DATA), "--out", str(out), "--max_dev", "2",
            "--batch_size", "2", "--threads", "1", "--bench_examples", "2", "--reps", "1", "--warmup", "0"]
    (out / quantize.INT8_WEIGHTS).write_bytes(b"an earlier result")
    assert quantize.main(argv) == 1   # refused (no --overwrite), and the leftover is gone all the same
    assert not left.exists()
    killed_writer_leftover(out / quantize.REPORT)
    assert quantize.main([*argv, "--overwrite"]) == 0
    assert temporaries(out) == []


# --- 9. every file gets the umask's mode -------------------------------------------------------

@pytest.mark.slow
def test_checkpoint_weights_get_the_umask_mode_like_config_json(umask_022, tiny_model_dir, tmp_path):
    """safetensors' save_file recreates the file with mode 600: another user could not read the weights."""
    assert run_multitask.main(resume_argv(tiny_model_dir, tmp_path, "run", "--epochs", "1")) == 0
    run_dir = tmp_path / "run"
    files = [p for p in run_dir.rglob("*") if p.is_file()]
    assert any(p.name == "heads.safetensors" for p in files) and any(p.parent.name.startswith("step-") for p in files)
    modes = {str(p.relative_to(run_dir)): oct(stat.S_IMODE(p.stat().st_mode)) for p in files}
    assert set(modes.values()) == {"0o644"}, modes


def test_a_training_checkpoint_gets_the_umask_mode(umask_022, tmp_path):
    clock = TrainingClock(torch.nn.Linear(2, 2), tmp_path, {}, save_every=1)
    clock.step_done()
    (step,) = list_checkpoints(tmp_path)
    modes = {p.name: oct(stat.S_IMODE(p.stat().st_mode)) for p in step.iterdir()}
    assert set(modes.values()) == {"0o644"}, modes
