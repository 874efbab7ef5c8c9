"""Dynamic sampling by the gap (Gottumukkala et al. 2020, "Dynamic Sampling Strategies for Multi-Task Reading
Comprehension"; Sharma et al. 2018, "Learning to Multi-Task by Active Sampling"): each multi-task epoch after the
first draws its batches' tasks in proportion to how far the model is from each task's single-task score, so the
tasks that multi-task training leaves furthest behind get the most batches (``shares``). The model's scores are
measured after each epoch on a split held out of each training file (``--gap_holdout``, chosen as
``--val_fraction`` chooses it, never trained on), never on dev; the references are the user's (``--gap_reference``).
The first epoch keeps ``--rr``'s order (no score yet); every epoch keeps the number of batches ``--rr`` gives it
(the learning-rate schedule is laid out over them); the draws follow ``--seed`` and the epoch. The scores are
saved in the epoch's record (metrics.json "epochs", and the checkpointed progress), so a resumed run draws the
same batches. A batch-order extension (``Extension.batch_order``, ``measure_epoch``, ``held_out``).
"""
from __future__ import annotations

import math
import random
from dataclasses import dataclass

from ..configuration.flags import flag
from ..learning.evaluate import predict
from .base import Extension

# the single-task scores of the default tasks on the default recipe, the mean of three seeds (docs/ablation.md, "The
# full budget, three seeds pooled", the st-* rows): what the ablation grid gives every run (``budget``), so that its
# rows with --gap_sampling run
GRID_REFERENCE = "sst=0.493,qqp=0.850,sts=0.885"


@dataclass(frozen=True)
class GapSamplingConfig:
    gap_sampling: bool = flag(False, "dynamic sampling by the gap: after the first epoch, each batch's task drawn "
                                     "in proportion to (reference - score)/reference on a held-out split")
    gap_reference: str | None = flag(None, "each task's single-task reference score, in the metric it reports on "
                                           "dev, e.g. sst=0.493,qqp=0.850,sts=0.885 (needed by --gap_sampling)",
                                     type=str)
    gap_holdout: float = flag(0.05, "the fraction of each task's training file held out of training to measure "
                                    "the gap on (chosen as --val_fraction chooses it)")
    gap_floor: float = flag(0.05, "the smallest share of an epoch's batches any task gets (at most 1/tasks)")


def shares(scores: dict[str, float | None], references: dict[str, float], floor: float) -> dict[str, float]:
    """Each task's probability of being drawn for a batch, p_t = f + (1 − T·f)·g_t / Σ_k g_k, with the gap
    g_t = max(r_t − s_t, 0) / r_t between the task's reference r_t and the model's score s_t, T tasks and the
    floor f: p_t ∝ g_t, Gottumukkala et al.'s dynamic sampling (instances drawn in proportion to the multi-task
    model's score relative to its single-task one), with the normalised gap of Sharma et al.'s adaptive baseline
    (which draws from a softmax of it), mixed with a uniform f so that no task is starved, one at or above its
    reference included. Every gap 0: uniform. A score that is None (not a number, e.g. the Pearson r of constant
    predictions) counts as the whole gap, g_t = 1. ``references`` gives the tasks and their order."""
    gaps = {task: 1.0 if scores.get(task) is None else max(r - scores[task], 0.0) / r
            for task, r in references.items()}
    total, n = sum(gaps.values()), len(gaps)
    if total == 0:
        return {task: 1.0 / n for task in gaps}
    return {task: floor + (1.0 - n * floor) * gap / total for task, gap in gaps.items()}


def references(c: GapSamplingConfig, core) -> dict[str, float]:
    """``--gap_reference sst=0.493,qqp=0.850,sts=0.885`` as ``{"sst": 0.493, ...}`` in ``--tasks`` order; one line
    naming the flag when it is missing, malformed, not positive, or does not name the tasks of ``--tasks``."""
    example, tasks = "e.g. sst=0.493,qqp=0.850,sts=0.885", core.task_names()
    if not c.gap_reference:
        raise ValueError(f"--gap_sampling needs --gap_reference: each task's single-task score ({example})")
    given: dict[str, float] = {}
    for pair in c.gap_reference.split(","):
        task, _, value = (part.strip() for part in pair.partition("="))
        try:
            score = float(value)
        except ValueError:
            score = None
        if not task or score is None:
            raise ValueError(f"--gap_reference must be TASK=SCORE pairs separated by commas ({example}), "
                             f"got {c.gap_reference!r}")
        if task in given:
            raise ValueError(f"--gap_reference names {task} twice")
        if not (math.isfinite(score) and score > 0):
            raise ValueError(f"--gap_reference: {task}'s score must be a positive number, got {value}")
        given[task] = score
    if extra := [task for task in given if task not in tasks]:
        raise ValueError(f"--gap_reference names {', '.join(extra)}, which --tasks ({','.join(tasks)}) does not")
    if missing := [task for task in tasks if task not in given]:
        raise ValueError(f"--gap_reference has no score for {', '.join(missing)} of --tasks ({','.join(tasks)})")
    return {task: given[task] for task in tasks}


class GapSampling(Extension):
    name, settings, column, short = "gap_sampling", GapSamplingConfig, "gap", "gap"
    conflicts = {"anneal_sampling": "the order of the task batches"}
    budget = {"--gap_reference": GRID_REFERENCE}   # the grid's rows with --gap_sampling need it; off, it is idle

    def checks(self, c, core) -> list[tuple[bool, str]]:
        tasks = len(core.task_names())
        return [(0 < c.gap_holdout < 1, f"--gap_holdout must be in (0, 1), got {c.gap_holdout}"),
                (0 <= c.gap_floor <= 1 / tasks, f"--gap_floor must be in [0, 1/{tasks}] (every task of --tasks gets "
                                                f"at least it), got {c.gap_floor}"),
                (not self.enabled(c) or tasks > 1,
                 "--gap_sampling draws each batch's task among --tasks: give two or more")]

    def check(self, c, core) -> None:
        super().check(c, core)
        if self.enabled(c):
            references(c, core)

    def held_out(self, c, core) -> float:
        return c.gap_holdout if self.enabled(c) and core.train.epochs > 0 else 0.0

    def batch_order(self, c, core, epoch: int, sizes: dict[str, int], steps: int,
                    history: list[dict] = ()) -> list[str] | None:
        p = epoch_shares(c, core, history)
        if p is None:   # the first epoch: --rr's order
            return None
        draw = random.Random(f"gap_sampling {core.train.seed} {epoch}")
        return draw.choices(list(p), weights=list(p.values()), k=steps)

    def measure_epoch(self, c, core, run, history: list[dict]) -> None:
        """The model's score of each task on its held-out split, into the epoch's record with the shares the epoch
        was drawn with: ``record["gap_sampling"] = {"shares": ..., "held_out": ...}`` (no shares in epoch 1)."""
        record, tasks = history[-1], run.task_loss.tasks
        scores = {}
        for name in core.task_names():
            loader = run.loader(run.splits[name][self.name], core.data.batch_size, False)
            held = predict(run.model, tasks[name], loader, run.device, f"held-out {name}",
                           run.log.nested_progress_bars, run.loop.precision)
            score = held.score(tasks[name])
            scores[name] = float(score) if score is not None and math.isfinite(score) else None
        used = epoch_shares(c, core, history[:-1])
        record[self.name] = {**({"shares": used} if used else {}), "held_out": scores}
        if record["epoch"] < core.train.epochs:
            after = shares(scores, references(c, core), c.gap_floor)
            run.log(f"--gap_sampling: held-out {described(scores)}; epoch {record['epoch'] + 1} draws "
                    f"{described(after)}")


def epoch_shares(c: GapSamplingConfig, core, history: list[dict]) -> dict[str, float] | None:
    """The shares of the epoch after the records ``history`` (``shares`` of the last one's held-out scores), or
    None for the first epoch (no score yet)."""
    if not history:
        return None
    return shares(history[-1][GapSampling.name]["held_out"], references(c, core), c.gap_floor)


def described(values: dict[str, float | None]) -> str:
    return " ".join(f"{task} {'-' if value is None else f'{value:.3f}'}" for task, value in values.items())


EXTENSION = GapSampling()
