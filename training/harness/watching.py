"""The harness's watch of a stage: the kernel's ``StageWatch`` (``training/learning/watch.py``: the records) and
what is not learning around it. A resumed run's steps done before its checkpoint are replayed without computing
(the resume clock's ``skip_step``: the data drawn the same way, the state restored once the replay catches up);
each epoch's end is a checkpoint; each step's numbers go to TensorBoard, the progress bar counts the epoch's rounds
(one batch of every task, as ``--max_steps_per_epoch`` and the README count them; an objective without rounds, its
batches), and under several processes the step's losses and examples are the whole global batch's
(``distributed.whole_batch``) before they are recorded.
"""
from __future__ import annotations

import dataclasses
import time
from functools import partial
from typing import Callable, Iterable, Iterator

from tqdm.auto import tqdm

from ..learning.callbacks import Scalars
from ..learning.watch import StageWatch


def recording_watch(scalars: Scalars, combine: Callable | None = None):
    """The loop's ``watch`` for a run: ``RecordingWatch`` with the run's TensorBoard scalars and, under several
    processes, ``distributed.whole_batch``'s ``combine``."""
    return partial(RecordingWatch, scalars=scalars, combine=combine)


class RecordingWatch(StageWatch):
    """``StageWatch`` with replay, checkpoints, TensorBoard, the bar and the processes' totals."""

    def __init__(self, objective, loop, scalars: Scalars = Scalars(), combine: Callable | None = None):
        super().__init__(objective, loop)
        self.scalars, self.combine, self.bar = scalars, combine, None

    def batches(self, epoch: int, groups: Iterable) -> Iterator:
        """The epoch's steps under a progress bar of rounds; those done before a resumed run's checkpoint skipped
        (their batches still drawn); none once the saved progress says the stage had stopped."""
        groups = super().batches(epoch, groups)
        rounds = getattr(self.objective, "batches_per_round", None)   # round robin: one batch a task; None: no rounds
        per_round, batches = rounds or 1, self.objective.steps()
        self.bar = tqdm(total=batches and -(-batches // per_round), unit="round" if rounds else "batch",
                        desc=f"{self.objective.log_prefix}epoch {epoch}/{self.objective.epochs}",
                        dynamic_ncols=True, disable=not self.log.progress_bars)
        drawn = 0
        try:
            for group in groups:
                drawn += len(group)
                self.bar.update(drawn // per_round - self.bar.n)
                if self.clock.skip_step():
                    self.mark = time.time()
                    continue
                if self.progress.get("stopped"):   # resumed from the checkpoint written when it stopped
                    break
                yield group
        finally:
            self.bar.close()

    def step_done(self, numbers) -> bool:
        if self.combine is not None:   # several processes: the global batch's losses and examples
            losses, examples = self.combine(numbers.losses, numbers.examples)
            numbers = dataclasses.replace(numbers, losses=losses, examples=examples)
        return super().step_done(numbers)

    def record(self, numbers, step: int, seconds: float) -> None:
        super().record(numbers, step, seconds)
        name, scalars = self.objective.name, self.scalars
        for part, value in numbers.losses.items():
            scalars.add(f"train_loss/{name}/{part}", value, step)
        scalars.add(f"lr/{name}", numbers.lrs[0], step)
        for i, group_lr in enumerate(numbers.lrs):
            scalars.add(f"lr/{name}/group{i}", group_lr, step)
        if scalars.recording and numbers.grad_norm is not None:   # float(): a device sync, only when kept
            scalars.add(f"grad_norm/{name}", float(numbers.grad_norm), step)
        scalars.add(f"examples_per_second/{name}", numbers.examples / max(seconds, 1e-9), step)
        current = self.progress["current"]
        if self.bar is not None and current["steps"] % 20 == 0:
            self.bar.set_postfix({k: f"{sum(v) / len(v):.3f}" for k, v in current["losses"].items() if v},
                                 refresh=False)

    def epoch_done(self, epoch: int) -> None:
        """The kernel's epoch end once the replay has caught up, then a checkpoint."""
        if epoch <= len(self.history):   # it had ended before the crash: replayed, nothing to record or save
            return
        self.clock.catch_up()
        super().epoch_done(epoch)
        self.clock.save()

    def result(self) -> dict:
        self.clock.catch_up()   # a run killed after its last checkpoint still needs the saved state
        return super().result()

    def last_good(self) -> str:
        return self.clock.last_good()
