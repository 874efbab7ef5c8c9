"""What the training loop tells about a stage, and what it keeps of it: ``StageWatch`` hears each optimizer step
and each epoch's end (``TrainingLoop.train``) and keeps the stage's ``progress``, the records a stage reports and a
resumed run continues from: each ended epoch's figures, the running epoch's totals, the loss curves (a point every
``CURVE_EVERY`` batches) and the learning-rate curve. It hands the objective its hooks (``start``, ``step_done``,
``end_epoch``, ``result``) and logs each epoch's line. This one is enough for a test, a study script or a reader
training with the kernel alone; the harness's (``training/harness/watching.py``) adds what is not learning: the
replay of a resumed run's steps, checkpoints, TensorBoard, the progress bar, the totals of several processes.
"""
from __future__ import annotations

import time
from typing import Iterable, Iterator

CURVE_EVERY = 10  # batches per point of a logged loss curve; steps per point of the learning-rate curve


class StageWatch:
    """One stage's records, in ``progress`` (JSON-serialisable; the clock hands back a resumed run's saved one), for
    ``objective`` (an ``objective.Objective``) trained by ``loop`` (the ``TrainingLoop``: its clock and log).
    This module imports nothing of the loop's: the loop imports it."""

    def __init__(self, objective, loop):
        self.objective, self.clock, self.log = objective, loop.clock, loop.log
        self.progress = self.clock.begin_stage(objective.name, {"epochs": [], "current": None, "curves": {}})
        self.progress.setdefault("lr", [])   # [run's step, first group's learning rate] every CURVE_EVERY steps
        self.history = self.progress["epochs"]
        objective.start(self.progress)
        self.mark = time.time()   # wall time of the steps, data loading included, evaluations not

    def epochs(self) -> Iterator[int]:
        """1 to the objective's epochs, the running epoch's totals started; none after the one it stopped in."""
        for epoch in range(1, self.objective.epochs + 1):
            if epoch > len(self.history) and self.progress.get("stopped"):   # stopped early in an earlier epoch
                return
            current = self.progress["current"]
            if current is None or current["epoch"] < epoch:
                self.progress["current"] = {"epoch": epoch, "losses": {}, "steps": 0, "examples": 0, "seconds": 0.0}
            yield epoch

    def batches(self, epoch: int, groups: Iterable) -> Iterable:
        """The epoch's groups of batches (one optimizer step each), as they come."""
        self.mark = time.time()
        return groups

    def step_done(self, numbers) -> bool:
        """A step is done: its numbers into the records, then the objective's ``step_done`` (e.g. evaluate every N
        steps), before the clock counts it. True: the objective ends the stage here. ``numbers``: the loop's
        ``StepNumbers``."""
        step, seconds = self.clock.step + 1, time.time() - self.mark
        self.record(numbers, step, seconds)
        stop = self.objective.step_done(step, self.progress)
        self.mark = time.time()
        self.clock.step_done()
        return stop

    def record(self, numbers, step: int, seconds: float) -> None:
        """The step's losses into the epoch's totals and the loss curves, its time and examples, and the first
        group's (the encoder's) learning rate every ``CURVE_EVERY`` steps of the stage. Every curve's x is the run's
        optimizer step (all stages counted), so that curves.png has one x axis."""
        current, lr = self.progress["current"], numbers.lrs[0]
        for name, value in numbers.losses.items():
            current["losses"].setdefault(name, []).append(value)
            LossCurve(self.progress["curves"].setdefault(name, {})).add(value, step)
        current["steps"] += 1
        current["examples"] += numbers.examples
        current["seconds"] += seconds
        done = sum(e["train_steps"] for e in self.history if e["epoch"] < current["epoch"]) + current["steps"]
        if done % CURVE_EVERY == 0:
            self.progress["lr"].append([step, lr])
        self.progress["last_lr"] = [step, lr]

    def epoch_done(self, epoch: int) -> None:
        """The epoch's record, the objective's ``end_epoch`` on it (evaluation) and its log line; nothing for an
        epoch that had ended before (a resumed run's)."""
        if epoch <= len(self.history):
            return
        record = {**epoch_record(self.progress["current"]), "run_step": self.clock.step}
        self.history.append(record)
        tail = self.objective.end_epoch(record, self.progress)
        self.log.result(f"{self.objective.log_prefix}epoch {epoch}: train loss "
                        + " ".join(f"{k} {v:.3f}" for k, v in record["train_loss"].items()) + tail)

    def result(self) -> dict:
        """What the stage reports (``objective.result``)."""
        return self.objective.result(self.progress)

    def last_good(self) -> str:
        """Where the last good state is, for the message that stops a diverged run."""
        return "nothing was saved"


def stage_result(progress: dict) -> dict:
    """What a stage reports by default (metrics.json ``stages``): its batches, seconds, loss and learning-rate
    curves."""
    curves = loss_curves(progress)
    return {"batches": sum(e["train_steps"] for e in progress["epochs"]),
            "seconds": round(sum(e["train_seconds"] for e in progress["epochs"]), 1),
            "loss_curve": next(iter(curves.values()), []) if len(curves) <= 1 else curves,
            "lr_curve": lr_curve(progress)}


def loss_curves(progress: dict) -> dict:
    """Each loss curve so far, its unfinished window included (``LossCurve.so_far``)."""
    return {name: LossCurve(data).so_far() for name, data in progress["curves"].items()}


def lr_curve(progress: dict) -> list:
    """The learning-rate curve so far, ending at the last step done (a stage shorter than ``CURVE_EVERY`` steps has
    that point only)."""
    points, last = progress["lr"], progress.get("last_lr")
    return points + [last] if last is not None and (not points or points[-1][0] < last[0]) else points


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
