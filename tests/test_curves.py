"""curves.png: written beside metrics.json when matplotlib is there, a one-line note when it is not."""
import json
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
    from training.harness import outputs
    from training.harness.run_log import RunLog
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


def drawn_figures(monkeypatch) -> list:
    """The figures plot_curves saves, kept for their axes."""
    from matplotlib.figure import Figure
    drawn, real_savefig = [], Figure.savefig
    monkeypatch.setattr(Figure, "savefig", lambda fig, *a, **k: (drawn.append(fig), real_savefig(fig, *a, **k))[1])
    return drawn


@pytest.mark.slow
def test_every_panel_is_drawn_and_the_kept_evaluation_is_marked(tmp_path, monkeypatch):
    """Two loss kinds and no stage: the top row has two panels, not three with one blank; the dev
    panels mark the evaluation whose weights the run kept (the first of two equal best scores)."""
    pytest.importorskip("matplotlib")
    from training.harness.curves import plot_curves
    drawn = drawn_figures(monkeypatch)
    epochs = [{"epoch": e, "dev": {"sst": 0.3, "sts": 0.5}, "dev_overall": score, "dev_loss": {"sst": 1.0, "sts": 2.0},
               "run_step": 10 * e} for e, score in ((1, 0.40), (2, 0.45), (3, 0.45))]
    metrics = {"run_name": "run", "epochs": epochs, "lr_curve": [[10, 1e-4], [20, 5e-5]],
               "loss_curves": {"sst": [[10, 1.6], [20, 1.5]], "sts": [[10, 4.0], [20, 3.0]]}}
    plot_curves(metrics, tmp_path / "curves.png")
    axes = drawn[0].axes
    assert len(axes) == 5 and all(ax.axison and ax.lines for ax in axes)
    best = [line for ax in axes for line in ax.lines if line.get_label().startswith("best")]
    assert [line.get_label() for line in best] == ["best (epoch 2, step 20)"] * 2
    assert all(list(line.get_xdata()) == [20, 20] for line in best)


@pytest.mark.slow
def test_a_capped_runs_dev_panels_say_what_their_scores_are_on(tmp_path, monkeypatch):
    """Issue 87, item 5: a run capped by --max_eval_examples says so wherever its dev scores appear, its
    curves too; an uncapped one's panels keep their plain titles."""
    pytest.importorskip("matplotlib")
    from training.harness.curves import plot_curves
    drawn = drawn_figures(monkeypatch)
    epochs = [{"epoch": 1, "dev": {"sst": 0.3}, "dev_overall": 0.3, "dev_loss": {"sst": 1.0}, "run_step": 10}]
    for cap in (100, None):
        plot_curves({"run_name": "run", "epochs": epochs, "config": {"data": {"max_eval_examples": cap}}},
                    tmp_path / "curves.png")
    capped, whole = ([ax.get_title() for ax in figure.axes] for figure in drawn)
    assert {"dev metrics (first 100 examples a task)", "dev loss (first 100 examples a task)"} <= set(capped)
    assert {"dev metrics", "dev loss"} <= set(whole) and not any("first" in title for title in whole)


@pytest.mark.slow
def test_a_short_run_plots_every_panel_against_the_runs_optimizer_step(tmp_path, tiny_model_dir, monkeypatch):
    """3 pre-QQP steps, then 2 epochs of 9 multi-task steps (3 batches of each task): fewer than a loss
    window (10 batches of a task), so the loss panels used to be blank; and each panel had its own x
    (batches of the task or of the stage, the stage's step, the epoch). Now every panel plots against the
    run's optimizer step, as TensorBoard does."""
    pytest.importorskip("matplotlib")
    drawn = drawn_figures(monkeypatch)
    assert run(tmp_path, tiny_model_dir, "--max_steps_per_epoch", "3", "--pre_qqp", "--pre_qqp_steps", "3",
               "--quiet") == 0
    epochs = json.loads((tmp_path / "run" / "metrics.json").read_text())["epochs"]
    ends = [3 + sum(e["train_steps"] for e in epochs[:i + 1]) for i in range(2)]   # pre-QQP's 3 steps first
    assert [e["run_step"] for e in epochs] == ends
    axes = {ax.get_title(): ax for ax in drawn[-1].axes}
    assert {ax.get_xlabel() for ax in axes.values()} == {"optimizer step"}
    assert len({ax.get_xlim() for ax in axes.values()}) == 1     # one shared x axis

    def xs(title, label=None):
        return [x for line in axes[title].lines if label in (None, line.get_label()) for x in line.get_xdata()]

    stage = xs("stages before multi-task training")
    losses = {line.get_label(): list(line.get_xdata()) for title in axes if title.startswith("training loss")
              for line in axes[title].lines}
    assert stage == [3]                                            # the unfinished window's mean, at its last step
    assert sorted(losses) == ["QQP", "SST", "STS"] and all(ends[0] < x[-1] <= ends[1] for x in losses.values())
    assert xs("learning rate (encoder)", "pre_qqp") == [3] and xs("learning rate (encoder)", "multitask")[-1] == ends[1]
    assert xs("dev metrics", "overall") == ends and xs("dev loss", "SST") == ends
