"""TensorBoard scalars of a run, in ``RUN/tensorboard/``, so that ``tensorboard --logdir predictions/``
shows every run of a grid side by side (as HF Trainer and Lightning runs are compared):

- ``train_loss/<stage>/<part>``: each optimizer step's training loss, by stage (``multitask``,
  ``pre_qqp``, ``ucl``, ...) and part (a task, or the stage's one loss);
- ``lr/<stage>``: the learning rate of the encoder's parameter group at each step;
- ``dev/<task>``, ``dev/overall`` and ``dev_loss/<task>`` at every evaluation.

The x axis is the run's optimizer step, counted across its stages. Only process 0 writes. A resumed
run purges the events after its checkpoint's step, so the steps done again are not drawn twice.
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
