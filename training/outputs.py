"""What a run leaves behind in its folder: prediction CSVs, ``metrics.json`` and ``curves.png``,
each written atomically, by process 0 only when several train together."""
from __future__ import annotations

import csv
import io
import json
import math
from datetime import datetime
from pathlib import Path

import numpy as np

from minbert.atomic import write_text_atomic

from .config import RunConfig
from .curves import MatplotlibMissing, plot_curves
from .evaluate import TaskPredictions, predict
from .precision import Precision
from .run_log import RunLog
from .tasks import TASKS, Task


def new_run_dir(config: RunConfig, check: bool = True) -> Path:
    """``<out_dir>/<run_name>`` (not created yet); refuses a folder that already holds a run
    (nothing is overwritten). Only process 0 checks (and later creates) it."""
    name = config.output.run_name or "-".join([
        config.model.option, config.model.pooling, config.model.para_head, config.model.sts_head,
        datetime.now().strftime("%Y%m%d-%H%M%S")])
    run_dir = Path(config.output.out_dir) / name
    if check and run_dir.exists() and any(run_dir.iterdir()):
        raise FileExistsError(f"{run_dir} already holds a run; choose another --run_name or remove it")
    return run_dir


def read_metrics(run_dir: Path) -> dict:
    """The run's metrics.json so far (an unreadable one is started afresh, not an error)."""
    try:
        return json.loads((run_dir / "metrics.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {"run_name": run_dir.name}


class RunFiles:
    """The run folder's writer; a no-op in data-parallel processes other than 0."""

    def __init__(self, run_dir: Path, enabled: bool):
        self.run_dir, self.enabled = run_dir, enabled
        self.warned = False

    def json(self, metrics: dict) -> None:
        if self.enabled:
            write_json(self.run_dir / "metrics.json", metrics)

    def curves(self, metrics: dict, log: RunLog) -> None:
        """``curves.png`` beside metrics.json (once per run a note if matplotlib is missing)."""
        if not self.enabled:
            return
        try:
            plot_curves(metrics, self.run_dir / "curves.png")
        except MatplotlibMissing as err:
            if not self.warned:
                log(f"note: {err}")
                self.warned = True

    def predictions(self, model, dev: dict[str, TaskPredictions], splits, loader, batch_size: int, device, log,
                    precision: Precision | None = None) -> tuple[list[str], list[str]]:
        """Dev (already predicted by the best epoch) and test prediction CSVs; returns file lists."""
        written, skipped = [], []
        for name in dev:
            task = TASKS[name]
            for split in ("dev", "test"):
                path = prediction_path(self.run_dir, task, split)
                if split == "dev":
                    result = dev[name]
                elif split in splits[name]:
                    result = predict(model, task, loader(splits[name][split], batch_size, False), device,
                                     f"{split} {name}", log.progress_bars, precision)
                else:
                    skipped.append(path.name)
                    log(f"note: no {task.files[split]} in the data directory; skipping {path.name}")
                    continue
                write_predictions(path, task, result)
                written.append(path.name)
        return written, skipped


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
