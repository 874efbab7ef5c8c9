"""The multi-task stage's callback on its dev evaluations: when dev is scored (after each epoch, or every
``--eval_every`` steps and after the last), each evaluation's record, and the decision: keep the best weights, stop
early. Off the reading path: the stage hands it how to score dev (``stages.MultitaskObjective.evaluate``, which
returns what it measured: ``evaluate.Evaluation``), and it decides; what it decided is kept in the stage's records,
so a resumed run decides on as before.
"""
from __future__ import annotations

from typing import Callable

import torch

from .evaluate import Evaluation, TaskPredictions
from .tasks import format_metrics
from .watch import loss_curves, lr_curve


class KeepBest:
    """The multi-task stage's callback on each evaluation: keep the weights of the best overall dev score so far
    (the stage's result) and, with ``--early_stopping N``, end the stage after N evaluations without a better one.
    What it decided is in the stage's ``progress`` (``best``, ``since_best``, ``stopped``), so a resumed run
    decides on as before. The harness's (``training/harness/evaluations.py``) also writes checkpoint/,
    metrics.json and TensorBoard's dev scalars, and asks a search's scheduler."""

    def __init__(self, patience: int = 0):
        self.patience = patience
        self.best = {"score": -float("inf"), "epoch": None, "step": None, "state": None, "dev": None}

    def start(self, progress: dict, first_step: int = 0, epochs: int = 1, every: int = 0) -> None:
        """The stage begins at the run's step ``first_step`` (before a resumed run's replay), for ``epochs`` epochs,
        dev scored every ``every`` steps of the stage (0: after each epoch); or goes on from a resumed run's
        ``progress`` (its best evaluation before the crash)."""
        self.first_step, self.epochs, self.every = first_step, epochs, every
        saved = progress.setdefault("best", None)   # the keys in the order a checkpoint's state.json has always had
        progress.setdefault("evaluations", [])
        progress.setdefault("since_best", 0)
        if saved is not None:
            dev = {name: TaskPredictions.from_dict(p) for name, p in saved["dev"].items()}
            self.best = {"step": None, **saved, "dev": dev, "state": self.saved_state()}

    def step_done(self, step: int, progress: dict, evaluate: Callable[[], Evaluation]) -> bool:
        """The run's step ``step`` is done: every ``every`` steps of the stage, score dev (``evaluate``) and decide.
        True ends the stage here."""
        if not self.every or (step - self.first_step) % self.every:
            return False
        record = {"step": step - self.first_step, "epoch": progress["current"]["epoch"], "run_step": step}
        progress["evaluations"].append(record)
        self.log.result(f"step {record['step']}: {self.scored(evaluate(), record, progress, step)}")
        return bool(progress.get("stopped"))

    def epoch_done(self, record: dict, progress: dict, step: int, evaluate: Callable[[], Evaluation]) -> str:
        """An epoch ended (``record``: its records; ``step``: the run's step count): without ``--eval_every``, score
        dev into ``record`` and decide; with it, the stage's last epoch scores its last weights (a candidate too)
        unless a step just did. Returns the text for the end of the epoch's log line."""
        last = record["epoch"] == self.epochs
        if not self.every:
            return " | " + self.scored(evaluate(), record, progress, step, last)
        if last and (step - self.first_step) % self.every and not progress.get("stopped"):
            final = {"step": step - self.first_step, "epoch": record["epoch"], "run_step": step}
            progress["evaluations"].append(final)
            return " | " + self.scored(evaluate(), final, progress, step, last=True)
        self.epoch_ended(progress)
        return ""

    def scored(self, evaluation: Evaluation, record: dict, progress: dict, step: int, last: bool = False) -> str:
        """``evaluation`` into ``record`` (the run's step ``step``), then the decision; returns the log line's text."""
        record.update(dev=evaluation.metrics, dev_overall=evaluation.score,
                      dev_loss={name: p.loss for name, p in evaluation.dev.items()}, eval_seconds=evaluation.seconds)
        if evaluation.loss_weights is not None:
            record["loss_weights"] = evaluation.loss_weights
        return self.evaluated(evaluation, record, progress, step - self.first_step, last)

    def saved_state(self) -> dict[str, torch.Tensor] | None:
        """The best weights a resumed run saved (none without the harness)."""
        return None

    def evaluated(self, evaluation: Evaluation, record: dict, progress: dict, stage_step: int, last: bool) -> str:
        """Keep the weights if ``evaluation`` is the best so far; stop early after ``patience`` without a better one.
        ``stage_step``: the stage's step count; ``last``: nothing is left to stop. Returns the log line's text."""
        improved = evaluation.score > self.best["score"]
        if improved:
            where = {"score": evaluation.score, "epoch": record["epoch"], "step": record.get("step")}
            self.best = {**where, "dev": evaluation.dev,
                         "state": {k: v.detach().clone() for k, v in self.model.state_dict().items()}}
            progress["best"] = {**where, "dev": {k: v.to_dict() for k, v in evaluation.dev.items()}}
        progress["since_best"] = 0 if improved else progress["since_best"] + 1
        if self.patience and progress["since_best"] >= self.patience:
            progress["stopped"] = {"step": stage_step, "epoch": record["epoch"], "patience": self.patience,
                                   "best_epoch": self.best["epoch"], "best_step": self.best["step"]}
        self.decided(evaluation, record, progress, stage_step, improved, last)
        tail = f"dev {format_metrics(evaluation.metrics, self.tasks)} overall {evaluation.score:.3f}"
        tail += "  (best so far)" if improved else ""
        if (progress.get("stopped") or {}).get("by") == "scheduler":
            tail += "  -- stopped by the search's scheduler"
        elif progress.get("stopped"):
            tail += f"  -- early stopping: no better overall dev score in {self.patience} evaluations"
        return tail

    def decided(self, evaluation: Evaluation, record: dict, progress: dict, stage_step: int, improved: bool,
                last: bool) -> None:
        """After each evaluation's decision (the harness saves and asks a search here)."""

    def epoch_ended(self, progress: dict) -> None:
        """An epoch ended without an evaluation (``--eval_every``; the harness saves metrics.json here)."""

    def snapshot(self, progress: dict, improved: bool) -> dict:
        """The stage so far: its epochs, the best evaluation, whether the last improved, the loss curves, the
        evaluations, why it stopped; what the harness saves and the stage's result."""
        return {"epochs": progress["epochs"], "best": self.best, "improved": improved,
                "loss_curves": loss_curves(progress), "evaluations": progress["evaluations"],
                "stopped": progress.get("stopped")}

    def result(self, progress: dict) -> dict:
        """The stage's result: the snapshot and its learning-rate curve."""
        return {**self.snapshot(progress, improved=False), "lr_curve": lr_curve(progress)}

    def bind(self, model: torch.nn.Module, tasks: dict, log) -> "KeepBest":
        """The model whose weights it keeps, the tasks it names in the log line and the log that prints the lines of
        evaluations inside an epoch (``recipe.build_run``)."""
        self.model, self.tasks, self.log = model, tasks, log
        return self
