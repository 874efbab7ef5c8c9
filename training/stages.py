"""The parts every stage shares, and the multi-task stage.

A run is a sequence of stages, each an *objective* trained by the one loop (``training/loop.py``):
the extensions' stages (``training/extensions``, in the registry's order), then multi-task training.
``Run`` is everything a stage needs, built once by ``training/trainer.py``; ``TaskObjective`` trains
on task batches (round-robin, or one batch of every task with a loss weighting) and
``MultitaskObjective`` adds the dev evaluation and the best epoch.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable

import torch

from data.readers import Example
from minbert import BertTokenizer

from .evaluate import TaskPredictions, predict
from .loop import Objective, TrainingLoop
from .run_log import RunLog
from .schedule import RoundRobinScheduler
from .task_loss import TaskLoss
from .tasks import TASKS, format_metrics, overall_score

if TYPE_CHECKING:
    from .config import RunConfig


@dataclass
class Run:
    """One training run's parts, built once. The resume clock saves the state of everything
    reachable from here (``resume.resumable_state``), so a new stateful part needs no registering."""
    config: RunConfig
    model: torch.nn.Module                     # heads.MultitaskBert
    forward_model: torch.nn.Module             # the same, or its DistributedDataParallel wrapper
    splits: dict[str, dict[str, list[Example]]]   # task -> split -> examples (``extensions.splits_needed``)
    loader: Callable                           # (examples, batch_size, shuffle, seed, max_length=None) -> DataLoader
    device: torch.device
    log: RunLog                                # log(info), log.result(epoch lines, warnings)
    optimizer: torch.optim.Optimizer           # encoder + heads (+ learned loss weights)
    task_loss: TaskLoss
    loop: TrainingLoop
    on_epoch_end: Callable[[dict], None] = lambda record: None   # e.g. write metrics.json so far
    tokenizer: BertTokenizer | None = None     # for scoring the encoder on STS (--ucl_eval_every)
    data_dir: Path | None = None               # None when the run reads no task file


def task_loaders(run: Run, seed: int) -> dict:
    """A shuffled training loader for every task of the run, the i-th task's seeded ``seed + i``."""
    sizes = run.config.batch_sizes()
    return {name: run.loader(split["train"], sizes[name], True, seed + i)
            for i, (name, split) in enumerate(run.splits.items())}


def multitask_stage(run: Run) -> dict:
    """Round-robin (or, with a loss weighting, joint) training on every task of ``--tasks``, keeping
    the best epoch on dev."""
    t = run.config.train
    return run.loop.train(MultitaskObjective(run, task_loaders(run, t.seed), t.rr, t.max_steps_per_epoch, t.epochs,
                                             joint=run.task_loss.weighting is not None))


class TaskObjective(Objective):
    """Supervised training on task batches (``TaskLoss``) with the run's optimizer: one step per task
    batch in round-robin order, or with ``joint`` one step per round of every task's batch."""

    def __init__(self, run: Run, loaders: dict, rr: str, max_steps: int | None, epochs: int, joint: bool,
                 name: str = "multitask", log_prefix: str = ""):
        self.run, self.epochs, self.joint, self.name, self.log_prefix = run, epochs, joint, name, log_prefix
        self.scheduler = RoundRobinScheduler(loaders, rr, max_steps)
        self.optimizer = run.optimizer

    def batches(self):
        for batches in self.scheduler.rounds():
            if self.joint:
                yield batches
            else:
                yield from ({name: batch} for name, batch in batches.items())

    def steps(self) -> int:
        return self.scheduler.steps * (1 if self.joint else len(self.scheduler.loaders))

    def loss(self, batches):
        return self.run.task_loss(batches)

    def examples(self, batches) -> int:
        return sum(len(batch["ids"]) for batch in batches.values())

    def after_backward(self) -> None:
        self.run.task_loss.after_backward()

    def after_step(self) -> None:
        self.run.task_loss.after_step()


class MultitaskObjective(TaskObjective):
    """The multi-task stage: after each epoch, dev predictions, metrics, loss-weight update and the
    best epoch so far (its weights kept, and saved by ``run.on_epoch_end``)."""

    def start(self, progress: dict) -> None:
        saved = progress.setdefault("best", None)
        self.best = {"score": -float("inf"), "epoch": None, "state": None, "dev": None}
        if saved is not None:  # resuming: the best epoch before the crash
            self.best = {**saved, "dev": {k: TaskPredictions.from_dict(v) for k, v in saved["dev"].items()},
                         "state": self.run.loop.clock.checkpoint.best_state()}

    def end_epoch(self, record: dict, progress: dict) -> str:
        run, started = self.run, time.time()
        dev = {name: predict(run.model, TASKS[name], run.loader(split["dev"], run.config.data.batch_size, False, 0),
                             run.device, f"dev {name}", run.log.progress_bars, run.loop.precision)
               for name, split in run.splits.items()}
        metrics = {name: dev[name].score(TASKS[name]) for name in dev}
        score = overall_score(metrics)
        record.update(dev=metrics, dev_overall=score, eval_seconds=round(time.time() - started, 1))
        weighting = run.task_loss.weighting
        if weighting is not None:
            record["loss_weights"] = weighting.current_weights()
            weighting.update(metrics)
        improved = score > self.best["score"]
        if improved:
            self.best = {"score": score, "epoch": record["epoch"], "dev": dev,
                         "state": {k: v.detach().clone() for k, v in run.model.state_dict().items()}}
            progress["best"] = {"score": score, "epoch": record["epoch"],
                                "dev": {k: v.to_dict() for k, v in dev.items()}}
        run.on_epoch_end({"epochs": progress["epochs"], "best": self.best, "improved": improved,
                          "loss_curves": self.curves(progress)})
        return f" | dev {format_metrics(metrics)} overall {score:.3f}" + ("  (best so far)" if improved else "")

    def result(self, progress: dict) -> dict:
        return {"epochs": progress["epochs"], "best": self.best, "loss_curves": self.curves(progress),
                "lr_curve": progress["lr"]}

    @staticmethod
    def curves(progress: dict) -> dict:
        return {name: data["points"] for name, data in progress["curves"].items()}
