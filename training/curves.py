"""``curves.png``: a run's training loss and dev metrics at a glance, drawn from its metrics.json.

Left: the training loss of each task against that task's batches (the mean of every 10 batches,
multi-task stage), and the loss curves of the stages before it (SimCSE, pre-QQP) on their own axis
when there are any. Right: each task's dev metric (SST and QQP accuracy, STS Pearson) and the
overall score by epoch. matplotlib is optional (not in requirements.txt): without it ``plot_curves``
raises ``MatplotlibMissing`` and the run goes on without the picture.
"""
from __future__ import annotations

from pathlib import Path

from minbert.atomic import atomic_path

from .tasks import TASKS


class MatplotlibMissing(RuntimeError):
    pass


def plot_curves(metrics: dict, path: Path) -> Path:
    """Draw ``metrics`` (a run's metrics.json as a dict) into the PNG ``path``, atomically."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise MatplotlibMissing("matplotlib is not installed, so no curves.png (pip install matplotlib)") from None

    stages = {name: log["loss_curve"] for name, log in (metrics.get("stages") or {}).items()
              if isinstance(log, dict) and log.get("loss_curve")}
    columns = 3 if stages else 2
    fig, axes = plt.subplots(1, columns, figsize=(5.2 * columns, 4), constrained_layout=True)
    loss_ax, dev_ax = axes[-2], axes[-1]

    if stages:
        for name, points in stages.items():
            axes[0].plot(*zip(*points), marker=".", label=name)
        axes[0].set(title="stages before multi-task training", xlabel="batch", ylabel="loss")
        axes[0].legend()

    for name, points in (metrics.get("loss_curves") or {}).items():
        if points:
            loss_ax.plot(*zip(*points), marker=".", label=name.upper())
    loss_ax.set(title="multi-task training loss (mean of 10 batches)", xlabel="batches of the task", ylabel="loss")
    if loss_ax.lines:
        loss_ax.legend()

    epochs = metrics.get("epochs") or []
    x = [e["epoch"] for e in epochs]
    for name in (epochs[0]["dev"] if epochs else {}):
        dev_ax.plot(x, [e["dev"][name] for e in epochs], marker="o",
                    label=f"{name.upper()} {TASKS[name].metric_name}")
    dev_ax.plot(x, [e["dev_overall"] for e in epochs], marker="s", color="black", label="overall")
    dev_ax.set(title="dev metrics", xlabel="epoch", ylabel="score")
    if x:
        dev_ax.set_xticks(x)
    dev_ax.legend()
    fig.suptitle(metrics.get("run_name", ""))

    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=100)
    plt.close(fig)
    return path
