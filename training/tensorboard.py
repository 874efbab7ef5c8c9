"""TensorBoard scalars of a run in ``RUN/tensorboard/`` (``train_loss/<stage>/<part>``, ``lr/<stage>``,
``dev/<task>``, ``dev/overall``, ``dev_loss/<task>``) against the run's optimizer step, so that
``tensorboard --logdir predictions/`` shows a grid side by side (docs/long-runs.md, 'Curves and logging').
"""
from __future__ import annotations

from pathlib import Path

from minbert.atomic import signals_deferred

FOLDER = "tensorboard"


class Scalars:
    """``add(tag, value, step)`` into the event files of ``run_dir/tensorboard`` (None: writes nothing).
    Ctrl-C and SIGTERM wait for each call (``signals_deferred``): raised inside the writer's queue while it
    holds its lock, they would leave the lock held, and ``close`` at the end of the run would wait forever."""

    def __init__(self, run_dir: Path | None = None, purge_step: int | None = None):
        self.writer, self.missing = None, None
        if run_dir is not None:
            try:
                from torch.utils.tensorboard import SummaryWriter   # needs the tensorboard package
            except ImportError:
                self.missing = "note: tensorboard is not installed, so no TensorBoard scalars (pip install tensorboard)"
                return
            self.writer = SummaryWriter(str(run_dir / FOLDER), purge_step=purge_step)

    def add(self, tag: str, value: float | None, step: int) -> None:
        if self.writer is not None and value is not None:
            with signals_deferred():
                self.writer.add_scalar(tag, value, step)

    def close(self) -> None:
        if self.writer is not None:
            with signals_deferred():
                self.writer.close()
