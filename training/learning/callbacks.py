"""What the training loop hands to the world around it, with defaults that keep the kernel whole on its own.

The loop (``loop.py``) and the objectives call three things that are not learning: a ``StepClock`` (the
harness's resume clock, ``training/harness/resume.py``, also replays and checkpoints), a ``Scalars`` sink (the
harness's trackers, TensorBoard by default) and a ``Log`` (the harness's ``RunLog`` adds ``--quiet`` and
``--log_file``); each step and epoch goes to the stage's watch (``watch.py``; the harness's replaces it). The
defaults here count, drop and print, so a test, a study script or a reader can train with the kernel alone. This is
fastai's idea: the loop is the learning; everything else is called back.
"""
from __future__ import annotations

from typing import Callable, Protocol

import torch


class StepClock:
    """Counts the run's optimizer steps across its stages and holds the running stage's ``progress`` (a
    JSON-serialisable dict the stage's watch keeps). The harness's resume clock (``training/harness/resume.py``)
    hands back a resumed run's saved progress, replays the steps done before and writes checkpoints."""

    def __init__(self):
        self.step, self.stage, self.progress = 0, None, {}

    def begin_stage(self, name: str, progress: dict) -> dict:
        """Start stage ``name``; returns the progress dict it then keeps (a resumed run's saved one)."""
        self.stage, self.progress = name, progress
        return progress

    def step_done(self) -> None:
        self.step += 1

    def saved_best_state(self) -> dict[str, torch.Tensor] | None:
        """The best evaluation's weights saved before a crash (None: a run that starts afresh)."""
        return None


class Scalars:
    """Where the loop sends each step's numbers (``add(tag, value, step)``); this one drops them.
    ``recording`` says whether they are kept, so the loop skips numbers that cost a device sync otherwise."""
    recording = False

    def add(self, tag: str, value: float | None, step: int) -> None:
        """One number of step ``step`` under ``tag`` (e.g. ``train_loss/multitask/sst``)."""


class Log:
    """Where a run's messages go: ``log(message)`` is progress, ``log.result(message)`` what a user always
    wants (epoch lines, warnings). ``progress_bars``: draw tqdm bars; ``nested_progress_bars``: also bars
    drawn inside another (dev scoring inside an epoch's bar)."""
    progress_bars = True
    nested_progress_bars = False

    def __call__(self, message: str) -> None:
        print(message, flush=True)

    def result(self, message: str) -> None:
        print(message, flush=True)


class GradientHook(Protocol):
    """A step's gradients taken task by task, then combined (PCGrad: ``training/extensions/pcgrad.py``). For each
    batch of the step the loop hands ``backward`` the batch's losses, one per task, instead of backpropagating their
    sum (``backward(loss)``: the loop's own, loss scaling included; ``batches``: the step's accumulation batches,
    each loss to be divided by their number). Once the step's batches are done, ``apply(step)`` leaves in ``.grad``
    the gradient that clipping and the optimizer see (``step``: the run's optimizer step, from 1)."""

    def backward(self, losses: dict[str, torch.Tensor], backward: Callable[[torch.Tensor], None],
                 batches: int) -> None: ...

    def apply(self, step: int) -> None: ...
