"""curves.png: written beside metrics.json when matplotlib is there, a one-line note when it is not."""
import sys
from pathlib import Path

import pytest

import run_multitask

FIXTURE_DATA = Path(__file__).parent / "fixtures" / "data"


def run(tmp_path, model_dir, *extra):
    return run_multitask.main(["--data_dir", str(FIXTURE_DATA), "--model", str(model_dir), "--epochs", "2",
                               "--batch_size", "4", "--max_length", "24", "--out_dir", str(tmp_path),
                               "--run_name", "run", "--save_every", "0", *extra])


@pytest.mark.slow
def test_curves_png_is_written(tmp_path, tiny_model_dir):
    pytest.importorskip("matplotlib")
    assert run(tmp_path, tiny_model_dir, "--ucl", "--ucl_steps", "12", "--ucl_batch_size", "4") == 0
    png = (tmp_path / "run" / "curves.png").read_bytes()
    assert png.startswith(b"\x89PNG\r\n\x1a\n") and len(png) > 10_000
    assert not list((tmp_path / "run").glob(".curves.png*"))  # no temporary file left behind


def test_without_matplotlib_the_run_says_so_once_and_finishes(tmp_path, tiny_model_dir, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # makes `import matplotlib` raise ImportError
    assert run(tmp_path, tiny_model_dir) == 0
    out = capsys.readouterr().out
    assert out.count("matplotlib is not installed, so no curves.png (pip install matplotlib)") == 1
    assert not (tmp_path / "run" / "curves.png").exists()
    assert (tmp_path / "run" / "metrics.json").exists()


def test_curves_are_redrawn_at_most_once_a_minute_during_training_and_always_at_the_end(tmp_path, monkeypatch):
    """Drawing takes about a second, as long as a tiny run's whole epoch: during training the plot waits
    until REDRAW_SECONDS have passed since the last drawing (or the run's start); the final one always comes."""
    from training import outputs
    from training.run_log import RunLog
    drawn, now = [], [1000.0]
    monkeypatch.setattr(outputs, "plot_curves", lambda metrics, path: drawn.append(metrics["step"]))
    monkeypatch.setattr(outputs.time, "monotonic", lambda: now[0])
    files, log = outputs.RunFiles(tmp_path, enabled=True), RunLog(quiet=True)
    for step, seconds in [(1, 30), (2, 59.9), (3, 60), (4, 100), (5, 181)]:
        now[0] = 1000.0 + seconds
        files.curves({"step": step}, log)
    files.curves({"step": 6}, log, final=True)
    files.curves({"step": 7}, log, final=True)
    assert drawn == [3, 5, 6, 7]
    assert outputs.REDRAW_SECONDS == 60.0
    outputs.RunFiles(tmp_path, enabled=False).curves({"step": 8}, log, final=True)   # not process 0
    assert drawn == [3, 5, 6, 7]
