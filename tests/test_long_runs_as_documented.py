"""docs/long-runs.md, docs/gpu.md and docs/performance.md followed literally: what a user of several processes and long
runs is promised (training/tools/launch.py, training/harness/)."""
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from training.harness.resume import list_checkpoints
from training.tools.launch import main as launch, report_failure

ROOT = Path(__file__).resolve().parents[1]
FIXTURE_DATA = Path(__file__).parent / "fixtures" / "data"


def failure(folder: Path, rank: int, exitcode: int, line: str | None = None, code: int = 1):
    from torch.distributed.elastic.multiprocessing.errors import ProcessFailure
    error_file = folder / f"{rank}" / "error.json"
    if line is not None:
        error_file.parent.mkdir(parents=True)
        error_file.write_text(json.dumps({"message": line, "timestamp": 100, "exit_code": code}))
    return ProcessFailure(local_rank=rank, pid=1000 + rank, exitcode=exitcode, error_file=str(error_file))


def test_the_launcher_names_the_process_that_failed_not_the_one_torchrun_then_ended(tmp_path, capsys):
    """docs/long-runs.md: "one process fails alone: `error (process 1): <its line>`, its exit code". Process 1
    killed (the OOM killer's SIGKILL) made torchrun end process 0 with SIGTERM, in the same second: the launcher
    said `error (process 0): Signal 15 (SIGTERM) ...` and exited 143, as if the launcher had been terminated."""
    silent = {1: failure(tmp_path / "a", 1, -9), 0: failure(tmp_path / "a", 0, -15)}
    assert report_failure(silent) == 128 + signal.SIGKILL
    assert capsys.readouterr().err.startswith("error (process 1): Signal 9 (SIGKILL)")
    # process 0 ended "terminated (SIGTERM)" by torchrun's signal and recorded it: process 1 still says why
    said = {0: failure(tmp_path / "b", 0, 143 - 128, "terminated (SIGTERM)", 143), 1: failure(tmp_path / "b", 1, -9)}
    assert report_failure(said) == 128 + signal.SIGKILL
    assert capsys.readouterr().err.startswith("error (process 1): Signal 9 (SIGKILL)")
    # process 0 ended by the broken connection before torchrun's SIGTERM came (a traceback, no line): process 1 still
    broken = {0: failure(tmp_path / "d", 0, 1), 1: failure(tmp_path / "d", 1, -9)}
    assert report_failure(broken) == 128 + signal.SIGKILL
    assert capsys.readouterr().err.startswith("error (process 1): Signal 9 (SIGKILL)")
    # every process ended by SIGTERM: process 0's own line, as before
    everyone = {r: failure(tmp_path / "c", r, 143 - 128, "terminated (SIGTERM)", 143) for r in range(2)}
    assert report_failure(everyone) == 143 and capsys.readouterr().err == ""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_bad_launcher_flag_or_a_taken_port_is_one_line(capsys):
    """README: "a multi-process run's error is one line". torchrun's own flag (`--nproc_per_node x`) and a taken
    `--master_port` (29500 unless given: a second run on the machine) were ValueError's and DistNetworkError's
    tracebacks."""
    assert launch(["--nproc_per_node", "x", "run_multitask.py"]) == 1
    assert capsys.readouterr().err == "error: Unsupported nproc_per_node value: x\n"
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert launch(["--nproc_per_node", "2", f"--master_port={port}", "run_multitask.py", "--quiet"]) == 1
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and err.startswith(f"error: --master_port {port}: "), err
    assert "address already in use (give another --master_port)" in err


def children(pid: int) -> dict[int, int]:
    """The processes ``pid`` started, by their torchrun RANK."""
    found = {}
    for child in subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout.split():
        environ = Path(f"/proc/{child}/environ").read_bytes().split(b"\0")
        rank = next((entry[5:] for entry in environ if entry.startswith(b"RANK=")), None)
        if rank is not None:
            found[int(rank)] = int(child)
    return found


@pytest.mark.slow
def test_process_1_killed_is_the_launchers_last_line_and_exit_code(tiny_model_dir, tmp_path):
    """`python -m training.tools.launch --nproc_per_node 2 ...`, process 1 killed with SIGKILL mid-run: the last
    line names process 1 and its signal, exit 137 (it was `error (process 0): Signal 15 (SIGTERM)`, exit 143)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TQDM_DISABLE": "1"}
    command = [sys.executable, "-m", "training.tools.launch", "--nproc_per_node", "2", f"--master_port={free_port()}",
               "run_multitask.py", "--data_dir", str(FIXTURE_DATA), "--model", str(tiny_model_dir), "--batch_size", "4",
               "--max_length", "24", "--epochs", "50", "--save_every", "2", "--quiet", "--out_dir", str(tmp_path),
               "--run_name", "r"]
    live = subprocess.Popen(command, env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 120
    while time.time() < deadline and not list_checkpoints(tmp_path / "r"):
        time.sleep(0.2)
    os.kill(children(live.pid)[1], signal.SIGKILL)
    out, err = live.communicate(timeout=120)
    assert live.returncode == 128 + signal.SIGKILL, err[-3000:]
    assert err.strip().splitlines()[-1].startswith("error (process 1): Signal 9 (SIGKILL)"), err[-3000:]


def test_the_compile_rows_of_the_docs_name_what_compile_needs():
    """docs/gpu.md's and docs/performance.md's `--compile` rows: adding `--compile` to a default run is refused
    (`add --private_layers 0`, the default is 2); the rows did not say so."""
    from run_multitask import parse_config
    with pytest.raises(ValueError, match="add --private_layers 0"):
        parse_config(["--compile"]).validate()
    parse_config(["--compile", "--private_layers", "0"]).validate()
    for page in ("gpu.md", "performance.md"):
        row = next(line for line in (ROOT / "docs" / page).read_text().splitlines() if line.startswith("| `--compile`"))
        assert "`--private_layers 0`" in row, page
