"""What a stage trains, as the loop (``loop.py``) asks it: an *objective* gives its batches, its loss and its
optimizer, and hears the stage start, each step's backward and update, and each epoch's end. The multi-task stage's
(``stages.TaskObjective``), the SimCSE stages' (``contrastive.py``) and the tools' are subclasses; the defaults here
do nothing, so a subclass overrides only what it uses.
"""
from __future__ import annotations

from typing import Iterable

import torch

from training.data.batching import examples_in

from .callbacks import GradientHook
from .watch import stage_result


class Objective:
    """What a stage trains. Subclasses set the attributes and implement ``batches`` and ``loss``."""

    name = "train"            # the stage: key of its checkpointed progress, log and progress-bar label
    log_prefix = ""           # epoch log lines read "<log_prefix>epoch N: ..."
    epochs = 1
    optimizer: torch.optim.Optimizer
    surgery: GradientHook | None = None   # takes each task's loss of a step (``loss``'s parts) instead of one backward

    def batches(self, epoch: int) -> Iterable:
        """Epoch ``epoch``'s batches (from 1); replayed identically on resume (seeded loaders)."""
        raise NotImplementedError

    def steps(self) -> int | None:
        """Batches per epoch (``batches``' items), for the learning-rate schedule and the progress bar."""
        return None

    def loss(self, batch) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """Under autocast: the loss to minimise, and the named parts to log (one loss curve each)."""
        raise NotImplementedError

    def examples(self, batch) -> int:
        return examples_in(batch)

    def states(self) -> dict[str, object]:
        """What a checkpoint saves of the objective, by name: objects with ``state_dict`` and ``load_state_dict``."""
        return {"optimizer": getattr(self, "optimizer", None)}

    def start(self, progress: dict) -> None:
        """Called once with the stage's progress (the saved one when resuming into this stage)."""

    def after_backward(self) -> None:
        """Between backward and the optimizer step (gradients are there, not yet used)."""

    def after_step(self) -> None:
        """After the optimizer step."""

    def step_done(self, step: int, progress: dict) -> bool:
        """A step is done (``step``: the run's count with it), before its checkpoint (e.g. evaluate
        every N steps). True ends the stage here (early stopping; ``progress["stopped"]`` says why)."""
        return False

    def end_epoch(self, record: dict, progress: dict) -> str:
        """An epoch ended (``record``: its training figures, already in ``progress["epochs"]``; add
        to it). Returns text for the end of the epoch's log line."""
        return ""

    def result(self, progress: dict) -> dict:
        """What the stage reports (metrics.json ``stages``): batches, seconds, loss and learning-rate curves."""
        return stage_result(progress)
