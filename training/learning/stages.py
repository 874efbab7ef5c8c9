"""The parts every stage shares, and the multi-task stage. A run is a sequence of stages, each an
*objective* trained by the one loop (``training/learning/loop.py``): the extensions' stages (in the registry's
order), then multi-task training. ``Run`` is everything a stage needs, built once by ``recipe.build_run``.
A stage that trains a thresholded pair head first starts its threshold from the data (``calibrate_heads``).
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable

import torch

from minbert import BertTokenizer
from training.data.batching import examples_in, to_device
from training.data.readers import Example

from ..configuration.task_shares import AUTO
from .callbacks import GradientHook, Log
from .evaluate import TaskPredictions, predict
from .loop import Objective, TrainingLoop
from .schedule import RoundRobinScheduler
from .task_loss import TaskLoss
from .tasks import format_metrics, overall_score

if TYPE_CHECKING:   # annotations only
    from ..configuration.sections import RunSettings


MULTITASK = "multitask"   # the multi-task stage's name: its checkpointed progress, log and TensorBoard tags


@dataclass(frozen=True)
class BatchOrder:
    """An extension's order of the multi-task batches (``Extension.batch_order``): its flag, ``order`` and what
    it measures after each epoch for later orders (``Extension.measure_epoch``)."""
    name: str
    # (epoch, each task's examples, batches, the records of the epochs before it) -> the epoch's tasks, or None
    order: Callable[[int, dict[str, int], int, list[dict]], list[str] | None]
    measure: Callable[[Run, list[dict]], None] | None = None   # (run, the records so far): adds to the last one


@dataclass
class Run:
    """One training run's parts, built once (``recipe.build_run``). ``states`` lists what a checkpoint saves."""
    config: RunSettings
    model: torch.nn.Module                     # heads.MultitaskBert
    forward_model: torch.nn.Module             # the same, or its DistributedDataParallel wrapper
    splits: dict[str, dict[str, list[Example]]]   # task -> split -> examples (``RunConfig.splits_needed``)
    loader: Callable                           # (examples, batch_size, shuffle, seed, max_length=None) -> DataLoader
    device: torch.device
    log: Log                                   # log(info), log.result(epoch lines, warnings)
    optimizer: torch.optim.Optimizer           # encoder + heads (+ learned loss weights)
    task_loss: TaskLoss
    loop: TrainingLoop
    on_epoch_end: Callable[[dict], None] = lambda record: None   # e.g. write metrics.json so far
    tokenizer: BertTokenizer | None = None     # for scoring the encoder on STS (--ucl_eval_every)
    data_dir: Path | None = None               # None when the run reads no task file
    joint: bool = False                        # a multi-task step is a group of one batch per task (Extension.joint)
    batch_order: BatchOrder | None = None      # the extension deciding the multi-task batch order, or None: --rr's
    surgery: GradientHook | None = None     # an extension's per-task gradient hook, or None
    # asked after each dev evaluation (its record); True stops multi-task training there (a search's scheduler)
    should_stop: Callable[[dict], bool] | None = None

    def states(self) -> dict[str, object]:
        """Everything a checkpoint saves besides the model's weights, each object once, by the path it is
        reached by (``optimizer``, ``task_loss.weighting``, ``loop.objective.optimizer``, ...): the names that
        checkpoints have always used."""
        found: dict[str, object] = {}
        parts = {"optimizer": self.optimizer, **{f"task_loss.{k}": v for k, v in self.task_loss.states().items()},
                 **{f"loop.{k}": v for k, v in self.loop.states().items()}}
        for name, state in parts.items():
            if state is not None and all(state is not seen for seen in found.values()):
                found[name] = state
        return found


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

    def loss(self, batches):
        return self.run.task_loss(batches)

    def examples(self, batches) -> int:
        return sum(examples_in(batch) for _, batch in batches)

    def after_backward(self) -> None:
        self.run.task_loss.after_backward()

    def after_step(self) -> None:
        self.run.task_loss.after_step()


class MultitaskObjective(TaskObjective):
    """The multi-task stage: dev predictions, metrics, loss-weight update and the best evaluation so
    far (its weights kept, and saved by ``run.on_epoch_end``) after each epoch, or every
    ``--eval_every`` optimizer steps of the stage (and after its last); with ``--early_stopping N`` the
    stage ends after N evaluations without a better overall dev score."""

    def __init__(self, run: Run, loaders: dict, rr: str, max_steps: int | None, epochs: int):
        super().__init__(run, loaders, rr, max_steps, epochs, joint=run.joint)
        self.order, self.surgery = run.batch_order, run.surgery

    def start(self, progress: dict) -> None:
        super().start(progress)
        saved = progress.setdefault("best", None)
        progress.setdefault("evaluations", [])
        progress.setdefault("since_best", 0)
        self.first_step = self.run.loop.clock.step   # the run's step count when the stage began (before a replay)
        self.best = {"score": -float("inf"), "epoch": None, "step": None, "state": None, "dev": None}
        if saved is not None:  # resuming: the best evaluation before the crash
            dev = {k: TaskPredictions.from_dict(v) for k, v in saved["dev"].items()}
            self.best = {"step": None, **saved, "dev": dev, "state": self.run.loop.clock.saved_best_state()}

    def step_done(self, step: int, progress: dict) -> bool:
        every = self.run.config.train.eval_every
        if not every or (step - self.first_step) % every:
            return False
        record = {"step": step - self.first_step, "epoch": progress["current"]["epoch"], "run_step": step}
        progress["evaluations"].append(record)
        self.run.log.result(f"step {record['step']}: {self.evaluate(record, progress, step)}")
        return bool(progress.get("stopped"))

    def end_epoch(self, record: dict, progress: dict) -> str:
        if self.order is not None and self.order.measure is not None:
            self.order.measure(self.run, progress["epochs"])   # into ``record``, the last: what later orders read
        every, steps = self.run.config.train.eval_every, self.run.loop.clock.step - self.first_step
        if not every:
            return " | " + self.evaluate(record, progress, self.run.loop.clock.step, record["epoch"] == self.epochs)
        if record["epoch"] == self.epochs and steps % every and not progress.get("stopped"):
            final = {"step": steps, "epoch": record["epoch"], "run_step": self.run.loop.clock.step}
            progress["evaluations"].append(final)   # the last weights are a candidate too
            return " | " + self.evaluate(final, progress, self.run.loop.clock.step, last=True)
        self.run.on_epoch_end(self.saved(progress, improved=False))
        return ""

    def evaluate(self, record: dict, progress: dict, step: int, last: bool = False) -> str:
        """Score dev into ``record``; keep and save the weights when the overall score is the best so
        far. ``step`` is the run's step count (TensorBoard's and curves.png's x axis, ``record["run_step"]``);
        ``record["step"]`` the stage's; ``last``: the stage's last evaluation, after which nothing is left to
        stop (a search's scheduler still hears of it: its last rung)."""
        run, started, tasks = self.run, time.time(), self.run.task_loss.tasks
        dev = {name: predict(run.model, tasks[name], run.loader(split["dev"], run.config.data.batch_size, False, 0),
                             run.device, f"dev {name}", run.log.nested_progress_bars, run.loop.precision)
               for name, split in run.splits.items()}
        metrics = {name: dev[name].score(tasks[name]) for name in dev}
        score = overall_score(metrics, tasks)
        record.update(dev=metrics, dev_overall=score, dev_loss={name: dev[name].loss for name in dev},
                      eval_seconds=round(time.time() - started, 1))
        for name in dev:
            run.loop.scalars.add(f"dev/{name}", metrics[name], step)
            run.loop.scalars.add(f"dev_loss/{name}", dev[name].loss, step)
        run.loop.scalars.add("dev/overall", score, step)
        weighting = run.task_loss.weighting
        if weighting is not None:
            record["loss_weights"] = weighting.current_weights()
            weighting.update(metrics)
        improved = score > self.best["score"]
        if improved:
            where = {"score": score, "epoch": record["epoch"], "step": record.get("step")}
            self.best = {**where, "dev": dev,
                         "state": {k: v.detach().clone() for k, v in run.model.state_dict().items()}}
            progress["best"] = {**where, "dev": {k: v.to_dict() for k, v in dev.items()}}
        progress["since_best"] = 0 if improved else progress["since_best"] + 1
        patience = run.config.train.early_stopping
        if patience and progress["since_best"] >= patience:
            progress["stopped"] = {"step": step - self.first_step, "epoch": record["epoch"], "patience": patience,
                                   "best_epoch": self.best["epoch"], "best_step": self.best["step"]}
        run.on_epoch_end(self.saved(progress, improved))
        if run.should_stop is not None and not progress.get("stopped") and run.should_stop(
                {"evaluation": len(progress["evaluations"]) or record["epoch"], "epoch": record["epoch"],
                 "step": record.get("step"), "run_step": step, "dev": metrics, "dev_overall": score,
                 "best": self.best["score"]}) and not last:
            progress["stopped"] = {"step": step - self.first_step, "epoch": record["epoch"], "by": "scheduler",
                                   "best_epoch": self.best["epoch"], "best_step": self.best["step"]}
        tail = f"dev {format_metrics(metrics, tasks)} overall {score:.3f}" + ("  (best so far)" if improved else "")
        if (progress.get("stopped") or {}).get("by") == "scheduler":
            tail += "  -- stopped by the search's scheduler"
        elif progress.get("stopped"):
            tail += f"  -- early stopping: no better overall dev score in {patience} evaluations"
        return tail

    def saved(self, progress: dict, improved: bool) -> dict:
        """What ``run.on_epoch_end`` writes: metrics.json so far, and checkpoint/ when ``improved``."""
        return {"epochs": progress["epochs"], "best": self.best, "improved": improved,
                "loss_curves": self.curves(progress), "evaluations": progress["evaluations"],
                "stopped": progress.get("stopped")}

    def result(self, progress: dict) -> dict:
        return {**self.saved(progress, improved=False), "lr_curve": self.lr_curve(progress)}


CALIBRATION_PAIRS = 512   # training pairs a thresholded head sees before its first stage


@torch.no_grad()
def calibrate_heads(run, tasks) -> None:
    """A data-dependent start for the heads that cut a similarity with a threshold (the cosine/τ paraphrase head's
    b in (cos(u, v) − b)/τ): ``PairHead.calibrate`` on each of ``tasks`` whose head has one; logs each start.
    Why: a pretrained sentence encoder gives most pairs a cosine well above 0 (QQP with the embedded MiniLM and
    mean pooling: about 0.56 for non-duplicates, 0.87 for duplicates), so a threshold that starts at 0 calls every
    pair a paraphrase and b cannot move far enough in time (docs/heads.md). The head sees the cosines of the first
    ``CALIBRATION_PAIRS`` training pairs through its own tower, the encoder in eval mode: no dropout, no random
    numbers drawn, so every other part of the run is as without it."""
    model, was_training = run.model, run.model.training
    model.eval()
    try:
        for name in tasks:
            head = model.heads[name]
            if not getattr(head, "thresholded", False):
                continue
            similarities, labels = [], []
            for batch in run.loader(run.splits[name]["train"][:CALIBRATION_PAIRS], run.config.data.batch_size, False):
                u, v = (model.embed(to_device(encoding, run.device), head_name=name).float()
                        for encoding in batch["inputs"])
                similarities.append(head.similarity(u, v).float().cpu())
                labels.append(batch["labels"])
            similarities, labels = torch.cat(similarities), torch.cat(labels)
            cut = head.calibrate(similarities, labels)
            if cut is not None:
                positive = head.positives(labels)
                right = ((similarities > cut) == positive).float().mean().item()
                run.log(f"{name}: the cosine head's threshold starts at b = {cut:.3f} (right on {right:.1%} of the "
                        f"first {len(labels)} training pairs; b = 0 would be right on "
                        f"{positive.float().mean().item():.1%})")
    finally:
        model.train(was_training)
