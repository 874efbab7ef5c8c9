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


def test_every_panel_is_drawn_and_the_kept_evaluation_is_marked(tmp_path, monkeypatch):
    """Two loss kinds and no stage: the top row has two panels, not three with one blank; the dev
    panels mark the evaluation whose weights the run kept (the first of two equal best scores)."""
    pytest.importorskip("matplotlib")
    from matplotlib.figure import Figure

    from training.curves import plot_curves
    drawn = []
    real_savefig = Figure.savefig
    monkeypatch.setattr(Figure, "savefig", lambda fig, *a, **k: (drawn.append(fig), real_savefig(fig, *a, **k))[1])
    epochs = [{"epoch": e, "dev": {"sst": 0.3, "sts": 0.5}, "dev_overall": score, "dev_loss": {"sst": 1.0, "sts": 2.0}}
              for e, score in ((1, 0.40), (2, 0.45), (3, 0.45))]
    metrics = {"run_name": "run", "epochs": epochs, "lr_curve": [[10, 1e-4], [20, 5e-5]],
               "loss_curves": {"sst": [[10, 1.6], [20, 1.5]], "sts": [[10, 4.0], [20, 3.0]]}}
    plot_curves(metrics, tmp_path / "curves.png")
    axes = drawn[0].axes
    assert len(axes) == 5 and all(ax.axison and ax.lines for ax in axes)
    best = [line for ax in axes for line in ax.lines if line.get_label().startswith("best")]
    assert [line.get_label() for line in best] == ["best (epoch 2)"] * 2
    assert all(list(line.get_xdata()) == [2, 2] for line in best)
