"""A command whose reader goes away (``minbert-grid --list | head``, ``minbert-report runs/ | head``) ends
quietly with exit code 141, as a tool ended by SIGPIPE: no traceback, no "error:" line."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
@pytest.mark.parametrize("command", [
    ["-m", "training.tools.ray_grid", "--list"],
    ["-m", "training.tools.report", str(ROOT / "tests" / "fixtures" / "runs"), "--full"],
    ["run_multitask.py", "--print_config"],
])
def test_a_reader_that_went_away_is_no_error(command):
    proc = subprocess.Popen([sys.executable, *command], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    proc.stdout.close()   # the reader is gone before the command writes a line
    stderr = proc.stderr.read()
    assert proc.wait(timeout=120) == 141, stderr
    assert "Traceback" not in stderr and "error" not in stderr.lower() and "Exception ignored" not in stderr, stderr
