"""``curves.png``, drawn from a run's metrics.json after evaluations (at most once a minute) and at the run's
end. Top row: each task's training loss (one axis per kind of loss: their scales differ tenfold) and the
stages' losses; bottom row: the learning rates, dev metrics and dev losses, the kept evaluation marked. Every
panel shares one x axis, the run's optimizer step (``run_step`` in metrics.json, all stages counted). A capped
run's dev panels say what its scores are on (``--max_eval_examples N``: the first N examples of each dev file).
"""
from __future__ import annotations

from pathlib import Path

from minbert.atomic import atomic_path

from ..configuration.sections import capped_words, saved_dev_cap
from ..learning.task_schema import saved_tasks


class MatplotlibMissing(RuntimeError):
    pass


def pyplot(path: Path):
    """``matplotlib.pyplot`` on the Agg backend (files only, no display), or ``MatplotlibMissing`` naming
    the ``path`` it was to draw: matplotlib is optional."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise MatplotlibMissing(f"matplotlib is not installed, so no {path.name} (pip install matplotlib)") from None
    return plt


LOSS_KINDS = {"multiclass": "cross-entropy", "binary": "cross-entropy", "regression": "squared error"}
XLABEL = "optimizer step"


def plot_curves(metrics: dict, path: Path) -> Path:
    """Draw ``metrics`` (a run's metrics.json as a dict) into the PNG ``path``, atomically."""
    plt = pyplot(path)

    stages = {name: log for name, log in (metrics.get("stages") or {}).items() if isinstance(log, dict)}
    stage_losses = {name: log["loss_curve"] for name, log in stages.items() if log.get("loss_curve")}
    by_kind: dict[str, dict] = {}
    tasks = saved_tasks(metrics.get("config"))
    for name, points in (metrics.get("loss_curves") or {}).items():
        if points and name in tasks:
            by_kind.setdefault(LOSS_KINDS[tasks[name].divergence], {})[name] = points
    panels = {**({"stages before multi-task training": stage_losses} if stage_losses else {}),
              **{f"training loss: {kind}": curves for kind, curves in by_kind.items()}} or {"training loss": {}}
    fig = plt.figure(figsize=(4.6 * max(len(panels), 3), 7.5), constrained_layout=True)
    rows = fig.add_gridspec(2, 1)   # each row as many panels as it has, sharing the width: no empty panel
    top = [fig.add_subplot(cell) for cell in rows[0].subgridspec(1, len(panels))]
    evaluations = _evaluations(metrics)   # none for the stages alone (--epochs 0): no empty dev panels
    bottom = [fig.add_subplot(cell) for cell in rows[1].subgridspec(1, 3 if evaluations else 1)]
    for ax in top[1:] + bottom:   # one x axis, the run's optimizer step: a stage's steps come before the next's
        ax.sharex(top[0])
    for ax, (title, curves) in zip(top, panels.items()):
        _draw_losses(ax, title, curves, stage=title.startswith("stages"))
    _draw_learning_rates(bottom[0], [*((n, log.get("lr_curve")) for n, log in stages.items()),
                                     ("multitask", metrics.get("lr_curve"))])
    if evaluations:
        _draw_evaluations(bottom[1], bottom[2], evaluations, tasks,
                          capped_words(saved_dev_cap(metrics.get("config") or {})))
    fig.suptitle(metrics.get("run_name", ""))
    try:
        with atomic_path(path) as tmp:
            fig.savefig(tmp, format="png", dpi=90)
    finally:  # a failed write (the caller warns and goes on) must not leave the figure open: pyplot keeps them all
        plt.close(fig)
    return path


def _draw_losses(ax, title: str, curves: dict, stage: bool) -> None:
    """Loss curves (``[step, mean]`` points; a stage with several parts has one curve per part)."""
    for name, points in curves.items():
        parts = points.items() if isinstance(points, dict) else [("", points)]
        for part, part_points in parts:
            label = f"{name} {part}".strip() if stage else name.upper()
            ax.plot(*zip(*part_points), marker=".", label=label)
    _label(ax, title=title, ylabel="loss")


def _draw_learning_rates(ax, curves: list) -> None:
    for name, points in curves:
        if points:
            ax.plot(*zip(*points), marker="." if len(points) == 1 else None, label=name)
    _label(ax, title="learning rate (encoder)", ylabel="lr")


def _evaluations(metrics: dict) -> list[dict]:
    """The run's evaluations (each epoch's end, or every --eval_every steps); a record from before ``run_step``
    was recorded is left out."""
    evaluations = metrics.get("evaluations") or [e for e in metrics.get("epochs") or [] if "dev" in e]
    return [e for e in evaluations if "run_step" in e]


def _draw_evaluations(dev_ax, loss_ax, evaluations: list[dict], tasks: dict, capped: str = "") -> None:
    """Each task's dev metric, the overall score and each task's dev loss at every evaluation; ``capped`` ends the
    panels' titles ("" for a run scored on whole dev files)."""
    x = [e["run_step"] for e in evaluations]
    for name in evaluations[0]["dev"]:
        dev_ax.plot(x, [e["dev"][name] for e in evaluations], marker="o",
                    label=f"{name.upper()} {tasks[name].metric_name}")
        if all(e.get("dev_loss", {}).get(name) is not None for e in evaluations):
            loss_ax.plot(x, [e["dev_loss"][name] for e in evaluations], marker="o", label=name.upper())
    dev_ax.plot(x, [e["dev_overall"] for e in evaluations], marker="s", color="black", label="overall")
    # the evaluation whose weights were kept (the first of equal best scores, as the run keeps)
    best = max(range(len(evaluations)), key=lambda i: (evaluations[i]["dev_overall"], -i))
    for ax in (dev_ax, loss_ax):
        ax.axvline(x[best], color="grey", linestyle="--", linewidth=1,
                   label=f"best (epoch {evaluations[best]['epoch']}, step {x[best]})")
    _label(dev_ax, title="dev metrics" + capped, ylabel="score")
    _label(loss_ax, title="dev loss" + capped, ylabel="loss", yscale="log" if loss_ax.lines else "linear")


def _label(ax, **settings) -> None:
    """Titles, the shared x label and, when the panel has curves, their legend."""
    ax.set(xlabel=XLABEL, **settings)
    if ax.lines:
        ax.legend()
