"""What a run leaves behind: prediction CSVs and ``metrics.json``, each written atomically."""
from __future__ import annotations

import csv
import io
import json
import math
from pathlib import Path

import numpy as np

from minbert.atomic import write_text_atomic

from .evaluate import TaskPredictions
from .tasks import Task


def prediction_path(run_dir: Path, task: Task, split: str) -> Path:
    return run_dir / f"{task.output_prefix}-{split}-output.csv"


def write_predictions(path: Path, task: Task, result: TaskPredictions) -> None:
    """CS224N layout: an ``id`` column and the task's prediction column, one row per example.

    Class predictions are written as integers; STS scores with 4 decimals.
    """
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(["id", task.prediction_column])
    for example_id, value in zip(result.ids, result.predictions):
        writer.writerow([example_id, f"{value:.4f}" if task.label_type == "score" else int(value)])
    write_text_atomic(path, buffer.getvalue())


def write_json(path: Path, data: dict) -> None:
    write_text_atomic(path, json.dumps(_jsonable(data), indent=2) + "\n")


def _jsonable(value):
    """NaN/inf become null; numpy scalars become Python numbers; paths become strings."""
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, (np.floating, np.integer)):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, Path):
        return str(value)
    return value
