"""Reliability round 4, item 3: a run stopped before its first checkpoint (during a stage before multi-task
training, or before multi-task training saved anything) is continued by ``--resume RUN``: it starts again in
its own folder with its saved configuration, instead of answering "no checkpoint", and ends as the run never
stopped. (Its first case was ``--distill`` stopped after its teachers; that extension is gone, issue 73.)"""
import json
import shutil
from pathlib import Path

import pytest

import run_multitask

FIXTURE_DATA = Path(__file__).parent / "fixtures" / "data"


@pytest.mark.slow
def test_resume_before_the_first_checkpoint_starts_again_and_ends_as_an_uninterrupted_run(tmp_path, tiny_model_dir):
    argv = ["--data_dir", str(FIXTURE_DATA), "--model", str(tiny_model_dir), "--out_dir", str(tmp_path),
            "--tasks", "sst,qqp", "--epochs", "1", "--max_steps_per_epoch", "2", "--batch_size", "4",
            "--max_length", "24", "--quiet", "--run_name", "run"]
    assert run_multitask.main(argv) == 0
    run_dir = tmp_path / "run"
    clean = json.loads((run_dir / "metrics.json").read_text())
    # as SIGKILL before the first checkpoint leaves it
    for written in ("checkpoint", "checkpoints"):
        shutil.rmtree(run_dir / written, ignore_errors=True)
    for path in run_dir.glob("*-output.csv"):
        path.unlink()
    stopped = {**clean, "status": "running"}
    for key in ("dev", "dev_overall", "epochs", "finished", "best_epoch"):
        stopped.pop(key, None)
    (run_dir / "metrics.json").write_text(json.dumps(stopped))

    assert run_multitask.main(["--resume", str(run_dir), "--quiet"]) == 0
    again = json.loads((run_dir / "metrics.json").read_text())
    assert again["status"] == "finished" and len(again["restarted"]) == 1 and again["started"] == clean["started"]
    assert again["dev"] == clean["dev"]                    # the same run as the uninterrupted one
    assert sorted(p.name for p in run_dir.glob("*-dev-output.csv")) == ["para-dev-output.csv", "sst-dev-output.csv"]


def test_a_finished_run_without_checkpoints_is_still_no_resume(tmp_path, tiny_model_dir, capsys):
    argv = ["--data_dir", str(FIXTURE_DATA), "--model", str(tiny_model_dir), "--out_dir", str(tmp_path),
            "--tasks", "sst", "--epochs", "1", "--max_steps_per_epoch", "1", "--batch_size", "4", "--max_length", "24",
            "--quiet", "--run_name", "done"]
    assert run_multitask.main(argv) == 0
    assert run_multitask.main(["--resume", str(tmp_path / "done"), "--quiet"]) == 1
    err = capsys.readouterr().err.strip()   # issue 86: it says finished, not "no checkpoint"
    assert err == f"error: --resume {tmp_path / 'done'}: the run already finished; nothing to resume (its outputs " \
                  "are in that folder; a new run needs another --run_name)", err
