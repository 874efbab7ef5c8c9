"""A task as one ``Task`` row: everything the code needs to know about a task (files, columns, head, loss,
metric, prediction column, SMART divergence), so one training loop, one evaluation loop and one prediction
writer serve them all. Rows are built from declarations (``training/learning/task_schema.py``: the built-in SST,
QQP, STS and CFIMDB, and a ``--task_file``'s); ``--tasks`` picks the rows a run trains.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping

import numpy as np
import torch
from torch import nn

from training.data.readers import Example, FileLayout, ReadReport, read_examples


@dataclass(frozen=True)
class Task:
    name: str                       # short name used in logs, metrics, head names and --tasks
    description: str
    files: dict[str, str]           # split -> file name in the data directory
    text_columns: tuple[str, ...]   # one column (single sentence) or two (pair)
    label_column: str
    label_type: str                 # "class" (integer) or "score" (float in score_range)
    num_classes: int | None
    score_range: tuple[float, float] | None
    head: Callable[[int, object], nn.Module]           # (pooled width, ModelConfig) -> a fresh head
    loss: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
    predict: Callable[[torch.Tensor], torch.Tensor]   # head output -> prediction written out
    metric_name: str                # "accuracy" or "pearson"
    divergence: str                 # SMART's ℓ_s for this head's output: multiclass, binary or regression
    output_prefix: str              # prediction files: <prefix>-{dev,test}-output.csv
    prediction_column: str          # CS224N column name of the prediction
    id_column: str = "id"           # the column of each row's id (a declared task may name another)

    @property
    def is_pair(self) -> bool:
        return len(self.text_columns) == 2

    def metric(self, pred: np.ndarray, gold: np.ndarray) -> float:
        return {"accuracy": accuracy, "pearson": pearson}[self.metric_name](pred, gold)

    def unit_score(self, value: float) -> float:
        """The metric on a 0..1 scale, for averaging across tasks: Pearson r becomes (r + 1) / 2."""
        return (value + 1.0) / 2.0 if self.metric_name == "pearson" else value

    def layout(self, labelled: bool = True) -> FileLayout:
        """The layout of this task's files: its columns and label checks; ``labelled=False``: the text
        columns alone (a test file)."""
        return FileLayout(self.text_columns, self.label_column if labelled else None, self.label_type,
                          self.num_classes, self.score_range, self.id_column)

    def read(self, path: str | Path, labelled: bool = True, strict: bool = False) -> tuple[list[Example], ReadReport]:
        """This task's examples in ``path`` (``training.data.readers.read_examples`` of its ``layout``)."""
        return read_examples(path, self.layout(labelled), strict)


def accuracy(pred: np.ndarray, gold: np.ndarray) -> float:
    return float((pred == gold).mean())


def pearson(pred: np.ndarray, gold: np.ndarray) -> float:
    """Pearson r; 0.0 where it is undefined (fewer than two examples, or a constant side).

    The arithmetic of ``scipy.stats.pearsonr`` (SciPy 1.17), step by step in numpy, so it gives the same
    bits (tests/test_tasks.py checks): both sides centred, scaled by their largest deviation before the
    norm (no overflow), the dot product of the unit vectors, clipped to [-1, 1]. Written out because
    importing scipy.stats costs every run about 1.5 s on 2 CPU cores (a quarter of its imports)."""
    if len(pred) < 2 or np.std(pred) == 0 or np.std(gold) == 0:
        return 0.0
    x, y = np.asarray(pred), np.asarray(gold)
    dtype = np.result_type(x.dtype, y.dtype, np.float16)   # the common floating type, as scipy promotes
    x, y = x.astype(dtype, copy=False), y.astype(dtype, copy=False)
    xm, ym = x - x.mean(keepdims=True), y - y.mean(keepdims=True)
    xmax, ymax = np.abs(xm).max(keepdims=True), np.abs(ym).max(keepdims=True)
    normxm = xmax * np.linalg.norm(xm / xmax, axis=-1, keepdims=True)
    normym = ymax * np.linalg.norm(ym / ymax, axis=-1, keepdims=True)
    r = np.clip(np.dot(xm / normxm, ym / normym), -1.0, 1.0)   # scipy: vecdot, the same sum here
    return float(np.round(r) if len(x) == 2 else r)   # two points: exactly 1 or -1, as scipy promises


def overall_score(metrics: dict[str, float], tasks: Mapping[str, Task]) -> float:
    """Mean of the tasks' ``unit_score``s (``tasks``: the rows by name). For SST, QQP and STS this is the
    CS224N leaderboard score, (SST acc + QQP acc + (STS Pearson + 1) / 2) / 3."""
    return sum(tasks[name].unit_score(value) for name, value in metrics.items()) / len(metrics)


def format_metrics(metrics: dict[str, float], tasks: Mapping[str, Task], digits: int = 3, sep: str = " ") -> str:
    """``SST acc 0.484 QQP acc 0.815 STS pearson 0.876``: the log lines' form of dev metrics."""
    short = {"accuracy": "acc", "pearson": "pearson"}
    return sep.join(f"{name.upper()} {short[tasks[name].metric_name]} {value:.{digits}f}"
                    for name, value in metrics.items())


def argmax(logits: torch.Tensor) -> torch.Tensor:
    return logits.argmax(dim=-1)


def loss_of(model, task: Task):
    """The loss a task's head trains with: the head's own (``PairHead.loss``) or the task row's."""
    heads = getattr(getattr(model, "module", model), "heads", None)
    head = heads[task.name] if heads is not None and task.name in heads else None
    return getattr(head, "loss", None) or task.loss

