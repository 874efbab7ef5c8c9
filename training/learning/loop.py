"""The training loop, nanoGPT's: for every epoch, for every batch, a step (the loss under autocast, backward,
gradient clipping, ``optimizer.step()``, the learning-rate schedule), then one call back with the step's numbers.
Every stage of a run and the sentence fine-tuning tool train through ``TrainingLoop.train(objective)``: an
*objective* says what is trained (its batches, its loss, its optimizer, what happens at an epoch's end); the stage's
watch (``watch.py``) hears each step and each epoch's end and keeps their records.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Iterable

import torch

from .callbacks import Log, StepClock
from .objective import Objective
from .precision import Precision
from .watch import StageWatch


class TrainingDiverged(Exception):
    """Training produced a non-finite loss or non-finite weights. The run stops; no checkpoint of
    the bad state is written, so the checkpoints already there are the last good ones."""


@dataclass(frozen=True)
class StepNumbers:
    """What one optimizer step hands the stage's watch (``watch.StageWatch.step_done``)."""
    epoch: int
    losses: dict[str, float]          # each named part of the loss, its mean over the step's batches
    examples: int                     # the examples the step trained on
    lrs: list[float]                  # each parameter group's learning rate during the step
    grad_norm: torch.Tensor | None    # the global gradient norm before clipping (None: not clipped)


class TrainingLoop:
    """Trains objectives one after the other, the run's optimizer steps counted on one ``clock``. ``grad_accum``
    batches make one optimizer step (each loss divided by their number); ``max_grad_norm`` clips the global gradient
    norm before each step; ``schedule(optimizer, total_steps)`` makes each objective's ``torch.optim.lr_scheduler``
    over all its optimizer steps (``warmup_then_linear_decay``), stepped after each optimizer step. At 1 and None they
    change nothing. ``watch(objective, loop)`` hears each step and epoch (``watch.StageWatch``: records and log
    lines; the harness's also replays a resumed run's steps, saves checkpoints, draws the bar)."""

    def __init__(self, precision: Precision, log: Log = Log(), clock: StepClock | None = None,
                 max_grad_norm: float | None = None, schedule=None, grad_accum: int = 1, watch=StageWatch):
        self.precision, self.log, self.clock = precision, log, clock or StepClock()
        self.max_grad_norm, self.schedule, self.grad_accum, self.watch = max_grad_norm, schedule, grad_accum, watch
        self.objective: Objective | None = None   # the one being trained (its optimizer is checkpointed)
        self.scheduler = None
        self.last_good = lambda: "nothing was saved"   # the stage's watch says where the last good state is

    def train(self, objective: Objective) -> dict:
        """Run ``objective`` for its epochs; returns ``objective.result``."""
        self.objective, self.scheduler = objective, self.make_scheduler(objective)
        watch = self.watch(objective, self)
        self.last_good = watch.last_good
        for epoch in watch.epochs():
            for batches in watch.batches(epoch, _groups(objective.batches(epoch), self.grad_accum)):
                lrs = [group["lr"] for group in objective.optimizer.param_groups]   # before the schedule moves them
                losses, grad_norm = self.step(objective, *batches)
                examples = sum(objective.examples(batch) for batch in batches)
                if watch.step_done(StepNumbers(epoch, losses, examples, lrs, grad_norm)):
                    break   # the objective ends the stage here (early stopping)
            watch.epoch_done(epoch)
        result = watch.result()   # first: the harness's watch brings back the saved states, this objective's too
        self.objective = None
        return result

    def make_scheduler(self, objective: Objective):
        """The objective's learning-rate schedule over all its optimizer steps (``grad_accum`` batches a step), or
        None."""
        if self.schedule is None:
            return None
        if objective.steps() is None:
            raise ValueError(f"{objective.name}: a learning-rate schedule needs the number of steps per epoch")
        return self.schedule(objective.optimizer, -(-objective.steps() // self.grad_accum) * objective.epochs)

    def step(self, objective: Objective, *batches) -> tuple[dict[str, float], torch.Tensor | None]:
        """One optimizer step on the gradients of ``batches`` (several: accumulation); returns each part's mean and
        the gradient norm before clipping. With the objective's ``surgery`` (a ``callbacks.GradientHook``), each
        task's loss goes to it instead. A non-finite loss stops the run before the step, naming the last good state."""
        precision, optimizer, per_task = self.precision, objective.optimizer, objective.surgery
        optimizer.zero_grad(set_to_none=True)
        logged, learned, grad_norm = {}, False, None
        for batch in batches:
            with precision.autocast():
                total, parts = objective.loss(batch)
            if total.requires_grad:  # a frozen encoder under a parameter-free head has nothing to learn
                if per_task is not None:
                    per_task.backward(parts, precision.backward, len(batches))
                else:
                    precision.backward(total / len(batches) if len(batches) > 1 else total)
                learned = True
            for name, value in parts.items():
                logged[name] = logged.get(name, 0.0) + value.item() / len(batches)
            if not torch.isfinite(total.detach()).all():
                raise TrainingDiverged(f"{objective.name} step {self.clock.step + 1}: the training loss is "
                                       f"{total.item()} ({', '.join(f'{k} {v:.4g}' for k, v in logged.items())}); "
                                       f"{self.last_good()} (a lower learning rate may help)")
        if learned:
            if per_task is not None:
                per_task.apply(self.clock.step + 1)
            objective.after_backward()
            if self.max_grad_norm is not None:
                precision.unscale(optimizer)
                grad_norm = clip_grad_norm([p for g in optimizer.param_groups for p in g["params"]], self.max_grad_norm)
            precision.step(optimizer)
            if self.scheduler is not None:
                self.scheduler.step()
            objective.after_step()
        return logged, grad_norm


def clip_grad_norm(params: list[torch.Tensor], max_norm: float) -> torch.Tensor:
    """``torch.nn.utils.clip_grad_norm_`` (scale every gradient by min(1, max_norm / (‖g‖ + 1e-6)), ‖g‖ the global
    2-norm), also over sparse row gradients (``--sparse_embeddings``), which torch's does not take. Returns ‖g‖."""
    grads = [p.grad for p in params if p.grad is not None]
    if not any(g.is_sparse for g in grads):
        return torch.nn.utils.clip_grad_norm_(params, max_norm)
    norms = [torch.linalg.vector_norm(g.coalesce().values() if g.is_sparse else g) for g in grads]
    total = torch.linalg.vector_norm(torch.stack(norms))
    scale = torch.clamp(max_norm / (total + 1e-6), max=1.0)
    for g in grads:
        g.mul_(scale)
    return total


def warmup_then_linear_decay(warmup_ratio: float):
    """The BERT schedule (Devlin et al. 2019, §A.2; ``get_linear_schedule_with_warmup`` in HF
    transformers): the learning rate rises linearly from 0 over the first ``warmup_ratio`` of the
    steps, then falls linearly to 0 at the last step. A ``TrainingLoop`` ``schedule``."""
    def schedule(optimizer: torch.optim.Optimizer, total_steps: int):
        warmup = int(warmup_ratio * total_steps)

        def factor(step: int) -> float:
            if step < warmup:
                return step / warmup
            return max(0.0, (total_steps - step) / max(1, total_steps - warmup))
        return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)
    return schedule


def _groups(batches, size: int):
    """``batches`` in lists of ``size`` (the last one may be shorter)."""
    batches = iter(batches)
    while group := list(itertools.islice(batches, size)):
        yield group
