"""The training loop: every stage of a run and the sentence fine-tuning tool train through
``TrainingLoop.train(objective)``. An *objective* says what is trained (batches, loss, optimizer, what happens
at an epoch's end); the loop owns how, once for all: the step clock (``callbacks.StepClock``: replay and
checkpoints on resume), the step (autocast, backward, the objective's hooks, gradient clipping, the scaled
optimizer step, the learning-rate schedule), and the loss curves, timing, progress bar and epoch log lines.
"""
from __future__ import annotations

import itertools
import time
from typing import Iterable

import torch
from tqdm.auto import tqdm

from training.data.batching import examples_in

from .callbacks import GradientHook, Log, Scalars, StepClock
from .precision import Precision

CURVE_EVERY = 10  # batches per point of a logged loss curve; steps per point of the learning-rate curve


class TrainingDiverged(Exception):
    """Training produced a non-finite loss or non-finite weights. The run stops; no checkpoint of
    the bad state is written, so the checkpoints already there are the last good ones."""


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
        """Optimizer steps per epoch, for the progress bar."""
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
        """What the stage reports (metrics.json ``stages``): batches, seconds, loss curve(s)."""
        curves = self.curves(progress)
        return {"batches": sum(e["train_steps"] for e in progress["epochs"]),
                "seconds": round(sum(e["train_seconds"] for e in progress["epochs"]), 1),
                "loss_curve": next(iter(curves.values()), []) if len(curves) <= 1 else curves,
                "lr_curve": self.lr_curve(progress)}

    @staticmethod
    def curves(progress: dict) -> dict:
        """Each loss curve so far, its unfinished window included (``LossCurve.so_far``)."""
        return {name: LossCurve(data).so_far() for name, data in progress["curves"].items()}

    @staticmethod
    def lr_curve(progress: dict) -> list:
        """The learning-rate curve so far, ending at the last step done (a stage shorter than
        ``CURVE_EVERY`` steps has that point only)."""
        points, last = progress["lr"], progress.get("last_lr")
        return points + [last] if last is not None and (not points or points[-1][0] < last[0]) else points


class TrainingLoop:
    """Trains objectives one after the other on one ``clock``, sending each step's numbers to ``scalars``.
    ``grad_accum`` batches make one optimizer step (each loss divided by their number); ``max_grad_norm`` clips the
    global gradient norm before each step; ``schedule(optimizer, total_steps)`` makes each objective's
    ``torch.optim.lr_scheduler`` over all its optimizer steps (``warmup_then_linear_decay``), stepped after each
    optimizer step. At 1 and None they change nothing."""

    def __init__(self, precision: Precision, log: Log = Log(), clock: StepClock | None = None,
                 max_grad_norm: float | None = None, schedule=None, grad_accum: int = 1, scalars: Scalars = Scalars(),
                 across_processes=None):
        self.precision, self.log, self.clock = precision, log, clock or StepClock()
        self.max_grad_norm, self.schedule, self.grad_accum = max_grad_norm, schedule, grad_accum
        self.scalars = scalars   # TensorBoard: each step's losses, learning rates, gradient norm, examples/s
        # several processes: (a step's losses, examples) -> the global batch's (``distributed.whole_batch``)
        self.across_processes = across_processes
        self.grad_norm: float | None = None
        self.objective: Objective | None = None   # the one being trained (its optimizer is checkpointed)
        self.scheduler = None

    def states(self) -> dict[str, object]:
        """What a checkpoint saves of the loop: the fp16 gradient scaler, the objective being trained, the
        learning-rate schedule (``Run.states`` names them)."""
        objective = self.objective.states() if self.objective is not None else {}
        return {**({"precision.scaler": self.precision.scaler} if self.precision.scaler is not None else {}),
                **{f"objective.{name}": state for name, state in objective.items()},
                **({"scheduler": self.scheduler} if self.scheduler is not None else {})}

    def train(self, objective: Objective) -> dict:
        """Run ``objective`` for its epochs; returns ``objective.result``."""
        clock, log = self.clock, self.log
        self.objective = objective
        steps = objective.steps()
        steps_per_epoch = steps and -(-steps // self.grad_accum)
        if self.schedule is not None:
            if steps_per_epoch is None:
                raise ValueError(f"{objective.name}: a learning-rate schedule needs the number of steps per epoch")
            self.scheduler = self.schedule(objective.optimizer, steps_per_epoch * objective.epochs)
        progress = clock.begin_stage(objective.name, {"epochs": [], "current": None, "curves": {}})
        progress.setdefault("lr", [])   # [run's step, first parameter group's learning rate] every CURVE_EVERY steps
        objective.start(progress)
        history = progress["epochs"]
        for epoch in range(1, objective.epochs + 1):
            if epoch > len(history) and progress.get("stopped"):   # stopped early in an earlier epoch
                break
            if progress["current"] is None or progress["current"]["epoch"] < epoch:
                progress["current"] = {"epoch": epoch, "losses": {}, "steps": 0, "examples": 0, "seconds": 0.0}
            current = progress["current"]
            bar = tqdm(_groups(objective.batches(epoch), self.grad_accum),
                       desc=f"{objective.log_prefix}epoch {epoch}/{objective.epochs}",
                       total=steps_per_epoch, dynamic_ncols=True, disable=not log.progress_bars)
            mark = time.time()  # wall time of real steps, data loading included; replayed steps excluded
            for batches in bar:
                if clock.skip_step():
                    mark = time.time()
                    continue
                if progress.get("stopped"):   # resumed from the checkpoint written when it stopped
                    break
                lrs = [group["lr"] for group in objective.optimizer.param_groups]   # before the schedule moves them
                losses, examples = self.step(objective, *batches), sum(objective.examples(batch) for batch in batches)
                if self.across_processes is not None:
                    losses, examples = self.across_processes(losses, examples)
                self.record_step(objective, progress, losses, lrs)
                seconds = time.time() - mark
                current["examples"] += examples
                current["seconds"] += seconds
                self.scalars.add(f"examples_per_second/{objective.name}", examples / max(seconds, 1e-9), clock.step + 1)
                stop = objective.step_done(clock.step + 1, progress)
                mark = time.time()
                clock.step_done()
                if current["steps"] % 20 == 0:
                    bar.set_postfix({k: f"{sum(v) / len(v):.3f}" for k, v in current["losses"].items() if v},
                                    refresh=False)
                if stop:
                    break
            if epoch <= len(history):  # this epoch had ended before the crash
                continue
            clock.catch_up()
            record = {**epoch_record(current), "run_step": clock.step}
            history.append(record)
            tail = objective.end_epoch(record, progress)
            log.result(f"{objective.log_prefix}epoch {epoch}: train loss "
                       + " ".join(f"{k} {v:.3f}" for k, v in record["train_loss"].items()) + tail)
            clock.save()
        clock.catch_up()  # a run killed after its last checkpoint still needs the saved state
        self.objective = None
        return objective.result(progress)

    def record_step(self, objective: Objective, progress: dict, losses: dict, lrs: list[float]) -> None:
        """A computed step's losses into the epoch's totals, the loss curves and TensorBoard (with every
        parameter group's learning rate and the gradient norm), and the first group's (the encoder's)
        learning rate every ``CURVE_EVERY`` steps of the stage. Every curve's x is the run's optimizer step
        (all stages counted, as TensorBoard's), so that curves.png has one x axis."""
        current, step, lr = progress["current"], self.clock.step + 1, lrs[0]
        for name, value in losses.items():
            current["losses"].setdefault(name, []).append(value)
            LossCurve(progress["curves"].setdefault(name, {})).add(value, step)
            self.scalars.add(f"train_loss/{objective.name}/{name}", value, step)
        self.scalars.add(f"lr/{objective.name}", lr, step)
        for i, group_lr in enumerate(lrs):
            self.scalars.add(f"lr/{objective.name}/group{i}", group_lr, step)
        if self.grad_norm is not None:
            self.scalars.add(f"grad_norm/{objective.name}", self.grad_norm, step)
        current["steps"] += 1
        done = sum(e["train_steps"] for e in progress["epochs"] if e["epoch"] < current["epoch"]) + current["steps"]
        if done % CURVE_EVERY == 0:
            progress["lr"].append([step, lr])
        progress["last_lr"] = [step, lr]

    def step(self, objective: Objective, *batches) -> dict[str, float]:
        """One optimizer step on the gradients of ``batches`` (several: accumulation); returns each part's mean.
        With the objective's ``surgery`` (a ``callbacks.GradientHook``), each task's loss goes to it instead."""
        precision, optimizer, per_task = self.precision, objective.optimizer, objective.surgery
        optimizer.zero_grad(set_to_none=True)
        self.grad_norm = None   # the global gradient norm before clipping, for TensorBoard
        logged, learned = {}, False
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
                                       f"{self.clock.last_good()} (a lower learning rate may help)")
        if learned:
            if per_task is not None:
                per_task.apply(self.clock.step + 1)
            objective.after_backward()
            if self.max_grad_norm is not None:
                precision.unscale(optimizer)
                norm = clip_grad_norm([p for g in optimizer.param_groups for p in g["params"]], self.max_grad_norm)
                self.grad_norm = float(norm) if self.scalars.recording else None   # TensorBoard's only
            precision.step(optimizer)
            if self.scheduler is not None:
                self.scheduler.step()
            objective.after_step()
        return logged


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


def epoch_record(current: dict) -> dict:
    """An ended epoch's training figures (its entry of ``progress["epochs"]``) from its running totals."""
    return {"epoch": current["epoch"],
            "train_loss": {k: sum(v) / max(len(v), 1) for k, v in current["losses"].items()},
            "train_steps": current["steps"], "train_seconds": round(current["seconds"], 1),
            "train_examples": current["examples"],
            "train_examples_per_second": per_second(current["examples"], current["seconds"])}


def per_second(count: int, seconds: float) -> float | None:
    """``count / seconds`` to one decimal; None when the time rounds to 0 s (no meaningful rate)."""
    return round(count / seconds, 1) if round(seconds, 1) > 0 else None


def _groups(batches, size: int):
    """``batches`` in lists of ``size`` (the last one may be shorter)."""
    batches = iter(batches)
    while group := list(itertools.islice(batches, size)):
        yield group


class LossCurve:
    """Mean loss every ``CURVE_EVERY`` batches, as ``[step, mean]`` points for metrics.json (``step``: the run's
    optimizer step of the window's last batch). Its whole state is the JSON-serialisable dict ``data``, kept in the
    stage's checkpointed progress: pass the saved dict back to continue a curve after a resume."""

    def __init__(self, data: dict | None = None):
        self.data = data if data is not None else {}
        for key, empty in (("points", []), ("window", []), ("count", 0), ("step", 0)):
            self.data.setdefault(key, empty)

    @property
    def points(self) -> list[list[float]]:
        return self.data["points"]

    def add(self, value: float, step: int) -> None:
        d = self.data
        d["count"] += 1
        d["window"].append(value)
        d["step"] = step
        if len(d["window"]) == CURVE_EVERY:
            d["points"].append([step, round(sum(d["window"]) / CURVE_EVERY, 5)])
            d["window"] = []

    def so_far(self) -> list[list[float]]:
        """The points, and the unfinished window's mean as a last point: a run shorter than ``CURVE_EVERY`` batches of a
        task still has a curve. A view only: the saved state (and so a resumed curve) is that of ``add`` alone."""
        window = self.data["window"]
        return self.points + ([[self.data["step"], round(sum(window) / len(window), 5)]] if window else [])
