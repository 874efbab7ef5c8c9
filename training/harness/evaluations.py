"""The harness's callback on each dev evaluation of multi-task training: the kernel's ``KeepBest`` (keep the best
weights, stop early; ``training/learning/stages.py``) and what is not learning around it: the dev scores in
TensorBoard, each improved evaluation's weights in checkpoint/ and metrics.json so far (``save``), a search's
scheduler asked whether to go on (``should_stop``: minbert-search's ASHA), and a resumed run's best weights read
back from its checkpoint.
"""
from __future__ import annotations

from typing import Callable

import torch

from ..learning.callbacks import Scalars, StepClock
from ..learning.evaluate import Evaluation
from ..learning.keep_best import KeepBest


class RunEvaluations(KeepBest):
    """``KeepBest`` for a run: ``save(snapshot)`` after each evaluation and each epoch's end (checkpoint/ when the
    evaluation improved, metrics.json and the curves always); ``should_stop(report)`` may end the stage there."""

    def __init__(self, patience: int, clock: StepClock, scalars: Scalars, save: Callable[[dict], None],
                 should_stop: Callable[[dict], bool] | None = None):
        super().__init__(patience)
        self.clock, self.scalars, self.save, self.should_stop = clock, scalars, save, should_stop

    def saved_state(self) -> dict[str, torch.Tensor] | None:
        return self.clock.saved_best_state()

    def evaluated(self, evaluation: Evaluation, record: dict, progress: dict, stage_step: int, last: bool) -> str:
        step = record["run_step"]   # the run's step: TensorBoard's and curves.png's x axis
        for name, predictions in evaluation.dev.items():
            self.scalars.add(f"dev/{name}", evaluation.metrics[name], step)
            self.scalars.add(f"dev_loss/{name}", predictions.loss, step)
        self.scalars.add("dev/overall", evaluation.score, step)
        return super().evaluated(evaluation, record, progress, stage_step, last)

    def decided(self, evaluation: Evaluation, record: dict, progress: dict, stage_step: int, improved: bool,
                last: bool) -> None:
        """Save the stage so far; then a search's scheduler may stop it (not after its last evaluation, which the
        scheduler still hears: its last rung)."""
        self.save(self.snapshot(progress, improved))
        if self.should_stop is None or progress.get("stopped"):
            return
        report = {"evaluation": len(progress["evaluations"]) or record["epoch"], "epoch": record["epoch"],
                  "step": record.get("step"), "run_step": record["run_step"], "dev": evaluation.metrics,
                  "dev_overall": evaluation.score, "best": self.best["score"]}
        if self.should_stop(report) and not last:
            progress["stopped"] = {"step": stage_step, "epoch": record["epoch"], "by": "scheduler",
                                   "best_epoch": self.best["epoch"], "best_step": self.best["step"]}

    def epoch_ended(self, progress: dict) -> None:
        self.save(self.snapshot(progress, improved=False))
