"""The three benchmark tasks described as data, so one training loop, one evaluation loop and
one prediction writer serve all of them. Adding a task (e.g. CFIMDB) is one more ``Task`` row.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch
import torch.nn.functional as F
from scipy.stats import pearsonr


@dataclass(frozen=True)
class Task:
    name: str                       # short name used in logs, metrics and head names
    files: dict[str, str]           # split -> file name in the data directory
    text_columns: tuple[str, ...]   # one column (single sentence) or two (pair)
    label_column: str
    label_type: str                 # "class" (integer) or "score" (float in score_range)
    num_classes: int | None
    score_range: tuple[float, float] | None
    loss: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
    predict: Callable[[torch.Tensor], torch.Tensor]   # head output -> prediction written out
    metric_name: str
    metric: Callable[[np.ndarray, np.ndarray], float]  # (predictions, gold) -> score
    output_prefix: str              # prediction files: <prefix>-{dev,test}-output.csv
    prediction_column: str          # CS224N column name of the prediction

    @property
    def is_pair(self) -> bool:
        return len(self.text_columns) == 2


def accuracy(pred: np.ndarray, gold: np.ndarray) -> float:
    return float((pred == gold).mean())


def pearson(pred: np.ndarray, gold: np.ndarray) -> float:
    if len(pred) < 2 or np.std(pred) == 0 or np.std(gold) == 0:
        return 0.0
    return float(pearsonr(pred, gold)[0])


def overall_score(metrics: dict[str, float]) -> float:
    """The CS224N leaderboard score: (SST acc + QQP acc + (STS Pearson + 1) / 2) / 3."""
    return (metrics["sst"] + metrics["qqp"] + (metrics["sts"] + 1.0) / 2.0) / 3.0


SST = Task(
    name="sst",
    files={"train": "ids-sst-train.csv", "dev": "ids-sst-dev.csv", "test": "ids-sst-test-student.csv"},
    text_columns=("sentence",), label_column="sentiment", label_type="class", num_classes=5, score_range=None,
    loss=lambda logits, labels: F.cross_entropy(logits, labels),
    predict=lambda logits: logits.argmax(dim=-1),
    metric_name="accuracy", metric=accuracy,
    output_prefix="sst", prediction_column="Predicted_Sentiment",
)

QQP = Task(
    name="qqp",
    files={"train": "quora-train.csv", "dev": "quora-dev.csv", "test": "quora-test-student.csv"},
    text_columns=("sentence1", "sentence2"), label_column="is_duplicate", label_type="class", num_classes=2,
    score_range=None,
    loss=lambda logits, labels: F.binary_cross_entropy_with_logits(logits, labels.float()),
    predict=lambda logits: (logits > 0).long(),
    metric_name="accuracy", metric=accuracy,
    output_prefix="para", prediction_column="Predicted_Is_Paraphrase",
)

STS = Task(
    name="sts",
    files={"train": "sts-train.csv", "dev": "sts-dev.csv", "test": "sts-test-student.csv"},
    text_columns=("sentence1", "sentence2"), label_column="similarity", label_type="score", num_classes=None,
    score_range=(0.0, 5.0),
    loss=lambda scores, labels: F.mse_loss(scores, labels.float()),
    predict=lambda scores: scores.clamp(0.0, 5.0),
    metric_name="pearson", metric=pearson,
    # "Similiarity" is spelled as in the CS224N release's output files.
    output_prefix="sts", prediction_column="Predicted_Similiarity",
)

TASKS: dict[str, Task] = {task.name: task for task in (SST, QQP, STS)}
