"""Two-level paired bootstrap of the overall dev score, and of each task's: is a row's difference to
its FT baseline (or a task's to its single-task row) more than the luck of which dev examples happen to
be in the dev set and of which seeds trained the runs? (docs/ablation.md, "Reading the table: seeds
and intervals")

A resample draws each task's dev examples with replacement and scores every run on the same draws (paired),
kept as counts so that all runs and resamples are a few matrix products (``weighted_metric``). The draws depend
only on the seed, the task and its number of dev examples: an interval is reproducible and does not change when
other rows join the table. In each resample the seeds are drawn too (``paired_difference``), so the interval
holds the spread between seeds as well as that of the examples (with one seed, the examples' alone).
"""
from __future__ import annotations

import csv
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Mapping, NamedTuple

import numpy as np

from training.data.readers import DataError
from minbert.atomic import atomic_path
from minbert.errors import describe

from ..harness.curves import pyplot
from ..harness.outputs import prediction_path
from ..learning.task_schema import BUILTIN_TASKS
from ..learning.tasks import Task, overall_score

CHUNK = 100   # resamples drawn at once: memory is CHUNK × (dev examples of a task) counts


class Unavailable(Exception):
    """Why a run gets no interval: one line, shown as a note."""


@dataclass(frozen=True)
class DevSource:
    """Where one run's dev predictions and their gold labels are."""
    folder: Path
    data_dir: str | None
    tasks: tuple[str, ...]
    known: Mapping[str, Task] = field(default_factory=lambda: BUILTIN_TASKS, compare=False, hash=False)   # its rows
    cap: int | None = None   # --max_eval_examples N: the run scored, and predicted, the first N of each dev file


class TaskDev(NamedTuple):
    """One task of one run: its dev predictions and the gold labels, in the dev file's order."""
    predictions: np.ndarray
    labels: np.ndarray
    ids: tuple[str, ...]


@dataclass(frozen=True)
class Scores:
    """A run's overall dev score on the full dev sets and on each resample, and each task's metric."""
    observed: float
    resampled: np.ndarray           # shape (resamples,)
    examples: tuple                 # (task, dev ids) scored: pairing needs the same ones
    tasks: dict                     # task -> (metric on its dev set, metric on each resample)


@dataclass(frozen=True)
class Difference:
    """A row's overall dev score minus its baseline's, with the bootstrap percentile interval."""
    observed: float
    low: float
    high: float

    @property
    def excludes_zero(self) -> bool:
        return self.low > 0 or self.high < 0


def score_runs(runs: Iterable[DevSource], resamples: int, seed: int) -> tuple[dict[Path, Scores], dict[Path, str]]:
    """Every readable run's ``Scores`` by folder, and why each other run could not be read."""
    gold: dict[tuple[str, str], tuple[tuple[str, ...], np.ndarray]] = {}   # the dev files read so far
    loaded: dict[DevSource, dict[str, TaskDev]] = {}
    failed = {}
    for run in runs:
        try:
            loaded[run] = _read_run(run, gold)
        except Unavailable as err:
            failed[run.folder] = str(err)
    batches: dict[tuple, list[DevSource]] = {}   # runs scored together: same tasks, same gold labels
    for run in loaded:
        batches.setdefault((run.tasks, _folder_key(run.data_dir), run.cap), []).append(run)
    scores = {}
    for (tasks, *_), batch in batches.items():
        known = batch[0].known
        observed = [{t: known[t].metric(loaded[run][t].predictions, loaded[run][t].labels) for t in tasks}
                    for run in batch]
        per_task = {t: _resampled_metric(known[t], [loaded[run][t] for run in batch], resamples, seed) for t in tasks}
        resampled = overall_score(per_task, known)   # unit scores averaged element-wise: shape (runs, resamples)
        for i, run in enumerate(batch):
            scores[run.folder] = Scores(overall_score(observed[i], known), resampled[i],
                                        tuple((t, loaded[run][t].ids) for t in tasks),
                                        {t: (observed[i][t], per_task[t][i]) for t in tasks})
    return scores, failed


def paired_difference(row: list[Scores], baseline: list[Scores], level: float = 0.95,
                      task: str | None = None, seed: int = 0, same_seeds: bool = False) -> Difference:
    """Row minus baseline, each the mean over its seeds, with the central ``level`` percentile range of that
    difference when each side's seeds are drawn with replacement in every resample (``same_seeds``: the lists
    hold runs of the same seeds in the same order, same data order and start: drawn together). The overall
    score, or ``task``'s metric alone: a task's draws depend only on the seed, the task and its dev examples,
    so they pair across runs of other tasks (a multi-task row against that task's single-task row)."""
    if task is None:
        if any(sorted(s.examples) != sorted(baseline[0].examples) for s in (*row, *baseline)):   # any task order
            raise Unavailable("not the same tasks and dev examples as the baseline")
        pairs = [[(s.observed, s.resampled) for s in seeds] for seeds in (row, baseline)]
    else:
        ids = dict(baseline[0].examples).get(task)
        if ids is None or any(dict(s.examples).get(task) != ids for s in (*row, *baseline)):
            raise Unavailable(f"not the same {task} dev examples as its baseline")
        pairs = [[s.tasks[task] for s in seeds] for seeds in (row, baseline)]
    (row_observed, row_resampled), (base_observed, base_resampled) = (zip(*seeds) for seeds in pairs)
    observed = np.mean(row_observed) - np.mean(base_observed)
    rng = np.random.default_rng([seed, len(row_resampled), len(base_resampled)])
    if same_seeds and len(row_resampled) == len(base_resampled):
        differences = seeds_drawn(np.array(row_resampled) - np.array(base_resampled), rng)
    else:
        differences = seeds_drawn(np.array(row_resampled), rng) - seeds_drawn(np.array(base_resampled), rng)
    low, high = np.percentile(differences, [50 * (1 - level), 50 * (1 + level)])
    return Difference(float(observed), float(low), float(high))


def seeds_drawn(resampled: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """``resampled`` (seeds, resamples): in each resample, the mean of as many seeds drawn with replacement."""
    k, resamples = resampled.shape
    drawn = rng.integers(0, k, size=(k, resamples))
    return resampled[drawn, np.arange(resamples)].mean(axis=0)


def resample_counts(seed: int, task: str, n: int, resamples: int):
    """Yield ``(chunk, n)`` arrays: how often each of ``n`` dev examples is drawn in each resample."""
    rng = np.random.default_rng([seed, *task.encode()])
    for start in range(0, resamples, CHUNK):
        size = min(CHUNK, resamples - start)
        draws = rng.integers(0, n, size=(size, n)) + n * np.arange(size)[:, None]
        yield np.bincount(draws.ravel(), minlength=size * n).reshape(size, n).astype(float)


def weighted_metric(metric: str, predictions: np.ndarray, gold: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """``training.learning.tasks`` ``metric`` of every run (rows of ``predictions``) on every resample (rows of
    ``counts``), shape (runs, resamples): what ``Task.metric`` gives on the drawn examples."""
    n = gold.size
    if metric == "accuracy":
        return (predictions == gold).astype(float) @ counts.T / n
    if metric != "pearson":
        raise ValueError(f"no weighted form of the metric {metric!r}: add one here")
    x = predictions - predictions.mean(axis=1, keepdims=True)   # centred first: fewer rounding errors
    y = gold - gold.mean()
    mean_x, mean_y = x @ counts.T / n, counts @ y / n
    square_x, square_y = (x * x) @ counts.T / n, counts @ (y * y) / n
    var_x, var_y = square_x - mean_x ** 2, square_y - mean_y ** 2
    cov = (x * y) @ counts.T / n - mean_x * mean_y
    constant = (var_x <= 1e-12 * square_x) | (var_y <= 1e-12 * square_y)   # r undefined: 0, as pearson()
    denominator = np.sqrt(np.where(constant, 1.0, var_x * var_y))
    return np.where(constant, 0.0, cov / denominator)


def plot_forest(panels: list[tuple[str, list[tuple[str, Difference]]]], path: Path) -> None:
    """One panel per (x-axis label, lines), stacked; one line per row: the difference as a dot (black when
    its interval excludes 0, grey when it holds 0), its interval as a bar, a vertical line at 0."""
    plt = pyplot(path)
    from matplotlib.lines import Line2D   # after pyplot(): it says once if matplotlib is missing
    from matplotlib.ticker import MaxNLocator
    sizes = [len(lines) for _, lines in panels]
    fig, axes = plt.subplots(len(panels), 1, figsize=(7, 0.3 + sum(0.9 + 0.3 * n for n in sizes)), squeeze=False,
                             gridspec_kw={"height_ratios": [0.9 + 0.3 * n for n in sizes]}, constrained_layout=True)
    for ax, (label, lines) in zip(axes[:, 0], panels):
        for y, (_, d) in zip(range(len(lines), 0, -1), lines):   # the table's first row at the top
            ax.errorbar(d.observed, y, xerr=[[d.observed - d.low], [d.high - d.observed]], fmt="o", capsize=3,
                        color="black" if d.excludes_zero else "gray")
        ax.axvline(0.0, color="tab:red", linewidth=1)
        ax.set_yticks(range(len(lines), 0, -1), [name for name, _ in lines])
        ax.set(xlabel=f"{label} (95%: examples, seeds drawn)", ylim=(0.4, len(lines) + 0.6))
        ax.xaxis.set_major_locator(MaxNLocator(6))
    legend = [Line2D([], [], color="black", marker="o", label="black: interval excludes 0"),
              Line2D([], [], color="gray", marker="o", label="grey: interval holds 0"),
              Line2D([], [], color="tab:red", label="no difference")]
    axes[0, 0].legend(handles=legend, fontsize=7, loc="lower left", bbox_to_anchor=(0.0, 1.02), ncol=3,
                      frameon=False)
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=100)
    plt.close(fig)


def _resampled_metric(task: Task, runs: list[TaskDev], resamples: int, seed: int) -> np.ndarray:
    """``task``'s metric of each run on each resample, shape (runs, resamples)."""
    predictions, gold = np.stack([run.predictions for run in runs]), runs[0].labels
    return np.concatenate([weighted_metric(task.metric_name, predictions, gold, counts)
                           for counts in resample_counts(seed, task.name, gold.size, resamples)], axis=1)


def _read_run(run: DevSource, gold: dict) -> dict[str, TaskDev]:
    """Each task's predictions and gold labels (the dev file read as training reads it); ``gold`` caches the dev
    files already read. A capped run (``run.cap``) is read on the first ``cap`` examples of each dev file, as
    ``trainer.cap_dev`` kept them: runs capped alike pair example by example."""
    if not run.data_dir:
        raise Unavailable(f"{run.folder / 'metrics.json'}: no data_dir (give --data_dir)")
    read = {}
    for name in run.tasks:
        task, key = run.known[name], (_folder_key(run.data_dir), name)
        if key not in gold:
            try:
                examples, _ = task.read(Path(run.data_dir) / task.files["dev"])
            except (DataError, OSError, ValueError) as err:
                raise Unavailable(f"gold labels: {describe(err)}") from None
            gold[key] = tuple(e.id for e in examples), np.array([e.label for e in examples], dtype=float)
        ids, labels = gold[key]
        if run.cap is not None:
            ids, labels = ids[:run.cap], labels[:run.cap]
        read[name] = TaskDev(_read_predictions(prediction_path(run.folder, task, "dev"), task, ids), labels, ids)
    return read


def _folder_key(data_dir: str) -> str:
    return str(Path(data_dir).resolve())


def _read_predictions(path: Path, task: Task, ids: tuple[str, ...]) -> np.ndarray:
    """The predictions in ``path`` (CS224N layout: id, prediction column) for ``ids``, matched by id."""
    try:
        with open(path, encoding="utf-8", newline="") as f:
            rows = [row for row in csv.reader(f) if row]
    except (OSError, UnicodeDecodeError, csv.Error) as err:
        raise Unavailable(describe(err) if isinstance(err, OSError) else f"{path}: {describe(err)}") from None
    header, *data = rows or [[]]
    if "id" not in header or task.prediction_column not in header:
        raise Unavailable(f"{path}: no header id,{task.prediction_column}")
    id_at, value_at = header.index("id"), header.index(task.prediction_column)
    by_id = {}
    for number, row in enumerate(data, start=1):
        try:
            example_id, value = row[id_at], float(row[value_at])
        except (IndexError, ValueError):
            value = math.nan
        if not math.isfinite(value):
            raise Unavailable(f"{path}, data row {number}: not an id and a finite number")
        by_id[example_id] = value
    if missing := [i for i in ids if i not in by_id]:
        raise Unavailable(f"{path}: no prediction for {len(missing)} of the {len(ids)} dev examples "
                          f"(first: id {missing[0]})")
    return np.array([by_id[i] for i in ids])
