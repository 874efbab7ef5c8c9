"""The parts every stage shares, and the multi-task stage. A run is a sequence of stages, each an
*objective* trained by the one loop (``training/learning/loop.py``): the extensions' stages (in the registry's
order), then multi-task training. ``Run`` is everything a stage needs, built once by ``recipe.build_run``.
A stage that trains a thresholded pair head first starts its threshold from the data (``calibration.py``).
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable

import torch

from minbert import BertTokenizer
from training.data.batching import examples_in
from training.data.readers import Example

from ..configuration.task_shares import AUTO
from .calibration import calibrate_heads
from .callbacks import GradientHook, Log
from .evaluate import Evaluation, predict
from .keep_best import KeepBest
from .loop import TrainingLoop
from .objective import Objective
from .schedule import BatchOrder, RoundRobinScheduler
from .task_loss import TaskLoss
from .tasks import overall_score

if TYPE_CHECKING:   # annotations only
    from ..configuration.sections import RunSettings


MULTITASK = "multitask"   # the multi-task stage's name: its checkpointed progress, log and TensorBoard tags


@dataclass
class Run:
    """One training run's parts, built once, by keyword, in ``recipe.build_run``: the model, the data, the optimizer
    with the loss and the loop that train it, and what hears the stages (the log, the evaluations' callback)."""
    config: RunSettings
    # the model: heads.MultitaskBert; what training calls (the same, or its DistributedDataParallel wrapper); where
    model: torch.nn.Module
    forward_model: torch.nn.Module
    device: torch.device
    # the data: task -> split -> examples (``RunConfig.splits_needed``); (examples, batch_size, shuffle, seed,
    # max_length=None) -> DataLoader
    splits: dict[str, dict[str, list[Example]]]
    loader: Callable
    # the optimization: AdamW over the encoder and heads (and learned loss weights), a step's loss, the loop
    optimizer: torch.optim.Optimizer
    task_loss: TaskLoss
    loop: TrainingLoop
    # what hears the stages: log(info), log.result(epoch lines, warnings); each dev evaluation's decision
    log: Log
    evaluations: KeepBest = field(default_factory=lambda: KeepBest())
    # what the enabled extensions decide in multi-task training: a step is one batch of every task; the order of
    # the task batches (None: --rr's); how the tasks' gradients combine (None: their sum)
    joint: bool = False
    batch_order: BatchOrder | None = None
    surgery: GradientHook | None = None
    tokenizer: BertTokenizer | None = None     # for scoring the encoder on STS (--ucl_eval_every)
    data_dir: Path | None = None               # None when the run reads no task file


def task_batch_sizes(config, splits: dict[str, dict]) -> dict[str, int]:
    """Each task's multi-task batch (``--task_batch_sizes``: given, or ``auto``'s rule on the training sets' sizes)."""
    return config.batch_sizes({name: len(task_splits["train"]) for name, task_splits in splits.items()})


def multitask_stage(run: Run) -> dict:
    """Round-robin (or joint) training on every task of ``--tasks``, in the order ``--rr`` or an extension's
    ``batch_order`` gives, keeping the best epoch on dev. The i-th task's loader is seeded ``--seed + i``."""
    t = run.config.train
    sizes = task_batch_sizes(run.config, run.splits)
    loaders = {name: run.loader(split["train"], sizes[name], True, t.seed + i)
               for i, (name, split) in enumerate(run.splits.items())}
    objective = MultitaskObjective(run, loaders, t.rr, t.max_steps_per_epoch, t.epochs)
    if run.config.data.task_batch_sizes == AUTO:
        run.log(f"task batch sizes (auto, T = {run.config.data.sampling_temperature:g}): "
                f"{', '.join(f'{name} {size}' for name, size in sizes.items())}; {len(objective.scheduler)} batches "
                f"an epoch")
    if run.batch_order is not None:
        run.log(f"multi-task batches in the order of --{run.batch_order.name}: {len(objective.scheduler)} an epoch, "
                f"as many as --rr {t.rr} gives")
    return run.loop.train(objective)


class TaskObjective(Objective):
    """Supervised training on task batches (``TaskLoss``) with the run's optimizer: one step per task batch in
    round-robin order, or with ``joint`` one step per round of every task's batch. ``order`` (the extension whose
    ``batch_order`` replaces ``--rr``'s each epoch) and ``surgery`` are the run's in the multi-task stage, else None."""
    order: BatchOrder | None = None

    def __init__(self, run: Run, loaders: dict, rr: str, max_steps: int | None, epochs: int, joint: bool,
                 name: str = MULTITASK, log_prefix: str = ""):
        self.run, self.epochs, self.joint, self.name, self.log_prefix = run, epochs, joint, name, log_prefix
        self.scheduler = RoundRobinScheduler(loaders, rr, max_steps)
        self.optimizer = run.optimizer

    def batches(self, epoch: int):
        order = self.epoch_order(epoch)
        if self.joint:
            yield from self.scheduler.rounds(order)
        else:
            yield from ([pair] for pair in self.scheduler.walk(order or self.scheduler.order))

    def epoch_order(self, epoch: int) -> list[str] | None:
        """The extension's order of the epoch's task batches (checked), or None for ``--rr``'s."""
        if self.order is None:
            return None
        sizes = {name: len(split["train"]) for name, split in self.run.splits.items()}
        order = self.order.order(epoch, sizes, len(self.scheduler), self.history[:epoch - 1])
        if order is not None and (len(order) != len(self.scheduler) or not set(order) <= set(sizes)):
            raise ValueError(f"--{self.order.name}: epoch {epoch}'s batch order has {len(order)} batches of "
                             f"{sorted(set(order))}; it must have {len(self.scheduler)} of {sorted(sizes)}")
        return order

    def start(self, progress: dict) -> None:
        """A stage that starts (not one resumed mid-way) first starts its heads' thresholds from the data."""
        self.history = progress["epochs"]   # the ended epochs' records, which ``order`` reads (saved ones on resume)
        if progress["current"] is None and not progress["epochs"]:
            calibrate_heads(self.run, self.scheduler.loaders)

    def steps(self) -> int:
        return len(self.scheduler) // (len(self.scheduler.loaders) if self.joint else 1)

    @property
    def batches_per_round(self) -> int | None:
        """The batches of a round (one of every task): what ``--max_steps_per_epoch`` and the bar count. A joint
        step is a round (1); ``--rr proportional`` has no rounds (None: the bar counts batches)."""
        if self.scheduler.strategy == "proportional":
            return None
        return 1 if self.joint else len(self.scheduler.loaders)

    def loss(self, batches):
        return self.run.task_loss(batches)

    def examples(self, batches) -> int:
        return sum(examples_in(batch) for _, batch in batches)

    def after_backward(self) -> None:
        self.run.task_loss.after_backward()

    def after_step(self) -> None:
        self.run.task_loss.after_step()


class MultitaskObjective(TaskObjective):
    """The multi-task stage: dev is scored (``evaluate``: what it measured) after each epoch, or every
    ``--eval_every`` optimizer steps of the stage (and after its last), the loss weighting hears the scores, and the
    run's ``evaluations`` (``keep_best.KeepBest``: when to score, the records) decide: keep the best weights, stop
    early."""

    def __init__(self, run: Run, loaders: dict, rr: str, max_steps: int | None, epochs: int):
        super().__init__(run, loaders, rr, max_steps, epochs, joint=run.joint)
        self.order, self.surgery = run.batch_order, run.surgery

    def start(self, progress: dict) -> None:
        super().start(progress)
        self.run.evaluations.start(progress, self.run.loop.clock.step, self.epochs, self.run.config.train.eval_every)

    def step_done(self, step: int, progress: dict) -> bool:
        return self.run.evaluations.step_done(step, progress, self.evaluate)

    def end_epoch(self, record: dict, progress: dict) -> str:
        if self.order is not None and self.order.measure is not None:
            self.order.measure(self.run, progress["epochs"])   # into ``record``, the last: what later orders read
        return self.run.evaluations.epoch_done(record, progress, self.run.loop.clock.step, self.evaluate)

    def evaluate(self) -> Evaluation:
        """Each task's dev predictions and metric, and the overall score; then the loss weighting hears them."""
        run, started, tasks = self.run, time.time(), self.run.task_loss.tasks
        dev = {name: predict(run.model, tasks[name], run.loader(split["dev"], run.config.data.batch_size, False, 0),
                             run.device, f"dev {name}", run.log.nested_progress_bars, run.loop.precision)
               for name, split in run.splits.items()}
        metrics = {name: dev[name].score(tasks[name]) for name in dev}
        weighting, weights = run.task_loss.weighting, None
        if weighting is not None:
            weights = weighting.current_weights()   # the weights dev was scored with, before it hears the scores
            weighting.update(metrics)
        return Evaluation(dev, metrics, overall_score(metrics, tasks), round(time.time() - started, 1), weights)

    def result(self, progress: dict) -> dict:
        return self.run.evaluations.result(progress)
