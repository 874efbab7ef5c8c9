"""Reliability round 4, item 4: a run folder knows it is live. The training process holds RUN/.lock
(training/harness/run_lock.py); ``--resume RUN`` while another process holds it is one line naming that
process, and touches nothing in the folder (its clean-up of temporary files included); a lock left by a
process that ended (a stale file) does not stop a resume; a finished run holds no lock file."""
import fcntl
import json
import os
import subprocess
import sys

import pytest

import run_multitask
from test_resume import argv
from test_resume_inputs import stop_midway


def stopped_run(tmp_path, tiny_model_dir):
    assert run_multitask.main(argv(tiny_model_dir, tmp_path / "runs", "run")) == 0
    run_dir = tmp_path / "runs" / "run"
    assert not (run_dir / ".lock").exists()             # a finished run holds no lock
    stop_midway(run_dir)
    return run_dir


@pytest.mark.slow
def test_resume_of_a_live_run_is_refused_and_touches_nothing(tmp_path, tiny_model_dir, capsys):
    run_dir = stopped_run(tmp_path, tiny_model_dir)
    holder = subprocess.Popen([sys.executable, "-c", (
        "import fcntl, os, sys, time\n"
        f"fd = os.open({str(run_dir / '.lock')!r}, os.O_RDWR | os.O_CREAT)\n"
        "fcntl.flock(fd, fcntl.LOCK_EX); os.write(fd, str(os.getpid()).encode())\n"
        "print('locked', flush=True); time.sleep(60)\n")], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        planted = run_dir / ".metrics.json.123.tmp"        # what a live writer may have in flight
        planted.write_text("{}")
        before = json.loads((run_dir / "metrics.json").read_text())
        assert run_multitask.main(["--resume", str(run_dir), "--quiet"]) == 1
        err = capsys.readouterr().err
        assert err.startswith(f"error: {run_dir} is being trained now (process {holder.pid} holds {run_dir / '.lock'})")
        assert err.count("\n") == 1
        assert planted.exists() and json.loads((run_dir / "metrics.json").read_text()) == before
    finally:
        holder.kill()
        holder.wait()
    planted.unlink()
    assert run_multitask.main(["--resume", str(run_dir), "--quiet"]) == 0   # the holder ended: its lock went with it
    assert json.loads((run_dir / "metrics.json").read_text())["status"] == "finished"
    assert not (run_dir / ".lock").exists()


@pytest.mark.slow
def test_a_lock_file_left_by_a_killed_run_does_not_stop_a_resume(tmp_path, tiny_model_dir):
    run_dir = stopped_run(tmp_path, tiny_model_dir)
    (run_dir / ".lock").write_text("999999")             # SIGKILL leaves the file; the kernel freed the lock
    assert run_multitask.main(["--resume", str(run_dir), "--quiet"]) == 0
    assert not (run_dir / ".lock").exists()


@pytest.mark.slow
def test_a_training_run_holds_its_lock(tmp_path, tiny_model_dir, monkeypatch):
    """While a run trains, its folder's lock is taken (checked from another open file, as a second
    process would see it)."""
    from training.learning import stages
    seen = []
    original = stages.TaskObjective.start

    def start(self, progress):
        fd = os.open(self.run.loop.clock.run_dir / ".lock", os.O_RDWR)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            seen.append("free")
        except BlockingIOError:
            seen.append(os.read(fd, 32).decode())
        finally:
            os.close(fd)
        original(self, progress)
    monkeypatch.setattr(stages.TaskObjective, "start", start)
    assert run_multitask.main(argv(tiny_model_dir, tmp_path / "runs", "live")) == 0
    assert seen == [str(os.getpid())]


def test_is_live_sees_a_held_lock_not_a_stale_file_and_writes_nothing(tmp_path):
    from training.harness.run_lock import LOCK, RunLock, is_live
    assert not is_live(tmp_path) and not (tmp_path / LOCK).exists()   # no lock file: not live, none made
    lock = RunLock(tmp_path).acquire()
    try:
        assert is_live(tmp_path)
        assert (tmp_path / LOCK).read_text() == str(os.getpid())      # the holder's note untouched
    finally:
        lock.release()
    (tmp_path / LOCK).write_text("12345")                              # a killed run's stale file
    assert not is_live(tmp_path) and (tmp_path / LOCK).read_text() == "12345"
