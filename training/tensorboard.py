"""TensorBoard scalars of a run in ``RUN/tensorboard/`` (``train_loss/<stage>/<part>``, ``lr/<stage>``,
``dev/<task>``, ``dev/overall``, ``dev_loss/<task>``) against the run's optimizer step, so that
``tensorboard --logdir predictions/`` shows a grid side by side (docs/long-runs.md, 'Curves and logging').
"""
from __future__ import annotations

from pathlib import Path

FOLDER = "tensorboard"


class Scalars:
    """``add(tag, value, step)`` into the event files of ``run_dir/tensorboard`` (None: writes nothing)."""

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
            self.writer.add_scalar(tag, value, step)

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
