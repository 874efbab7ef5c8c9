"""Reliability round 5 (issue 61): every stop ends clean. A run killed before it saved anything (its folder
holds only the "starting" claim) is taken over by the same command; a run killed at any moment of its first
seconds can be resumed or run again with the same command."""
import json
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import run_multitask
from training.configuration.sections import OutputConfig
from training.harness.run_config import RunConfig
from training.harness.outputs import abandoned_claim, claim_run_dir

from test_resume import argv, command, env


def dead_pid() -> int:
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    return int(done.stdout)


def starting_claim(folder: Path, pid: int) -> Path:
    folder.mkdir(parents=True)
    (folder / "metrics.json").write_text(json.dumps({"run_name": folder.name, "status": "starting", "pid": pid}))
    (folder / ".lock").write_text(str(pid))
    return folder


def test_the_claim_of_a_run_killed_before_it_started_is_taken_over(tmp_path):
    config = RunConfig.defaults(output=OutputConfig(out_dir=str(tmp_path), run_name="run"))
    starting_claim(tmp_path / "run", dead_pid())
    assert abandoned_claim(tmp_path / "run")
    assert claim_run_dir(config.output, config.model) == tmp_path / "run"
    assert json.loads((tmp_path / "run" / "metrics.json").read_text())["pid"] != 0
    assert not (tmp_path / "run" / ".lock").exists()


def test_a_claim_killed_while_writing_its_next_metrics_is_taken_over(tmp_path):
    """SIGKILLed inside the atomic write of its "running" metrics.json, a run leaves that write's temporary file
    beside its claim (seen in CI at 1.58 s); the same command takes the folder over and removes it."""
    config = RunConfig.defaults(output=OutputConfig(out_dir=str(tmp_path), run_name="run"))
    pid = dead_pid()
    folder = starting_claim(tmp_path / "run", pid)
    (folder / f".metrics.json.{pid}-pgeiyg13.tmp").write_text("")
    assert abandoned_claim(folder)
    assert claim_run_dir(config.output, config.model) == folder
    assert sorted(path.name for path in folder.iterdir()) == ["metrics.json"]


@pytest.mark.parametrize("alive, extra", [(True, None), (False, "notes.txt"), (False, ".metrics.json.1-abcdefgh.tmp")])
def test_a_live_claim_or_a_folder_holding_more_is_never_taken(tmp_path, alive, extra):
    import os
    folder = starting_claim(tmp_path / "run", os.getpid() if alive else dead_pid())
    if extra:
        (folder / extra).write_text("mine\n")
    assert not abandoned_claim(folder)
    config = RunConfig.defaults(output=OutputConfig(out_dir=str(tmp_path), run_name="run"))
    with pytest.raises(FileExistsError, match="already holds a run"):
        claim_run_dir(config.output, config.model)


def test_resume_of_a_run_killed_before_it_started_says_to_run_it_again(tmp_path, capsys):
    folder = starting_claim(tmp_path / "run", dead_pid())
    assert run_multitask.main(["--resume", str(folder)]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "stopped before it started" in err and "again" in err, err


@pytest.mark.slow
def test_a_run_killed_at_random_in_its_first_seconds_resumes_or_reruns(tiny_model_dir, tmp_path):
    """SIGKILL 0.2 to 3 s in (seeded), then what a user would do: --resume when the run saved its configuration,
    else the same command; both end finished, and no folder is left stuck."""
    rng = random.Random(61)
    for i, delay in enumerate(sorted(rng.uniform(0.2, 3.0) for _ in range(3))):
        name = f"run{i}"
        flags = argv(tiny_model_dir, tmp_path, name, "--epochs", "1", "--max_steps_per_epoch", "3",
                     "--no_test_predictions")
        process = subprocess.Popen(command(*flags), env=env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(delay)
        process.send_signal(signal.SIGKILL)
        process.wait()
        folder = tmp_path / name
        status = json.loads((folder / "metrics.json").read_text()).get("status") if (
            folder / "metrics.json").exists() else None
        again = command("--resume", str(folder), "--quiet") if status not in (None, "starting") else command(*flags)
        if status == "finished":
            continue
        done = subprocess.run(again, env=env(), capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, f"{delay:.2f} s, status {status}: {done.stderr}"
        assert json.loads((folder / "metrics.json").read_text())["status"] == "finished"
        assert not (folder / ".lock").exists()


def test_a_command_prints_a_warning_as_one_line():
    """Issue 61: predict on an unfinished run printed Python's two-line UserWarning with its source line."""
    import warnings
    from training.tools.command import run_command
    shown = []
    assert run_command(lambda: shown.append(warnings.formatwarning("the run is\nunfinished", UserWarning,
                                                                   "runs.py", 314))) == 0
    assert shown == ["warning: the run is unfinished\n"]
    assert warnings.formatwarning("x", UserWarning, "f.py", 1) != "warning: x\n"   # restored after the command


@pytest.mark.slow   # two Python starts (7 s)
def test_a_data_py_in_the_working_folder_shadows_nothing(tmp_path):
    """Issue 61: from a folder holding a data.py, ``python -m training.tools.report`` and ``from training.harness.runs
    import load_run`` failed ('data' is not a package): the readers were a top-level package named data."""
    root = Path(__file__).resolve().parents[1]
    (tmp_path / "data.py").write_text("raise SystemExit('the data.py of the working folder was imported')\n")
    environment = {**env(), "PYTHONPATH": str(root)}
    loaded = subprocess.run([sys.executable, "-c", "from training.harness.runs import load_run; import training.tools.report"],
                            cwd=tmp_path, env=environment, capture_output=True, text=True, timeout=120)
    assert loaded.returncode == 0, loaded.stderr
    report = subprocess.run([sys.executable, "-m", "training.tools.report", str(tmp_path)], cwd=tmp_path,
                            env=environment, capture_output=True, text=True, timeout=120)
    assert "data.py" not in report.stdout + report.stderr and "Traceback" not in report.stderr, report.stderr
