"""What a run leaves behind in its folder: prediction CSVs, ``metrics.json`` and ``curves.png``,
each written atomically, by process 0 only when several train together."""
from __future__ import annotations

import csv
import io
import json
import math
import os
import time
from contextlib import suppress
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Callable

import numpy as np

from minbert.atomic import check_folder, output_set, remove_stale_temporaries, write_text_atomic
from minbert.errors import describe

from .curves import MatplotlibMissing, plot_curves
from ..learning.evaluate import TaskPredictions
from .run_log import RunLog
from .status import UNFINISHED
from ..learning.tasks import Task

if TYPE_CHECKING:
    from ..configuration.sections import ModelConfig, OutputConfig


def claim_run_dir(output: OutputConfig, model: ModelConfig, claim: bool = True) -> Path:
    """``<out_dir>/<run_name>`` (by default named after the model's settings and the time), claimed by creating
    ``metrics.json`` exclusively (``O_EXCL``): of two runs given one name at once exactly one gets it; a folder
    holding anything but an ``abandoned_claim`` is refused."""
    name = output.run_name or "-".join([model.option, model.pooling, model.para_head, model.sts_head,
                                        datetime.now().strftime("%Y%m%d-%H%M%S")])
    run_dir = Path(output.out_dir) / name
    if not claim:
        return run_dir
    check_folder(run_dir)  # an --out_dir that is a file: named in the error
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        if abandoned_claim(run_dir):
            for leftover in (".lock", "metrics.json"):
                (run_dir / leftover).unlink(missing_ok=True)
        if any(run_dir.iterdir()):
            raise FileExistsError(f"{run_dir} already holds a run{way_on(run_dir)}")
        fd = os.open(run_dir / "metrics.json", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError as err:
        if err.strerror is None:  # ours, above
            raise
        raise FileExistsError(f"{run_dir} was claimed by another run starting at the same time; choose another "
                              f"--run_name") from None
    except OSError as err:
        raise OSError(err.errno, f"cannot make the run folder {run_dir} ({err.strerror})") from None
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(json.dumps({"run_name": name, "status": "starting", "pid": os.getpid()}) + "\n")
    return run_dir


def way_on(run_dir: Path) -> str:
    """What the user of a taken run folder can do: a run stopped or killed mid-way (metrics.json "running" or
    "interrupted") is finished exactly by ``--resume``, so deleting it would lose its work."""
    if read_metrics(run_dir).get("status") in UNFINISHED:
        return f" that did not finish: --resume {run_dir} continues it, or choose another --run_name"
    return "; choose another --run_name or remove it"


def abandoned_claim(run_dir: Path) -> bool:
    """A folder holding nothing but the "starting" metrics.json of ``claim_run_dir`` (and the run's ``.lock``)
    of a process that is gone: killed before it saved anything, so nothing is lost by starting again. The
    temporary file of its next metrics.json, cut short by the kill, is removed with it."""
    names = {path.name for path in run_dir.iterdir()} - {"metrics.json", ".lock"}
    if any(not (name.startswith(".metrics.json.") and name.endswith(".tmp")) for name in names):
        return False
    metrics = read_metrics(run_dir)
    if metrics.get("status") != "starting" or not isinstance(metrics.get("pid"), int):
        return False
    try:   # the claiming process holds the .lock too: gone, it holds nothing
        os.kill(metrics["pid"], 0)
    except ProcessLookupError:
        return len(remove_stale_temporaries(run_dir / "metrics.json")) == len(names)
    except OSError:   # alive, another user's
        return False
    return False


def release_run_dir(run_dir: Path) -> None:
    """Undo ``claim_run_dir`` for a run that failed before it started: it leaves nothing behind."""
    (run_dir / "metrics.json").unlink(missing_ok=True)
    with suppress(OSError):   # something else is in it by now: leave it
        run_dir.rmdir()


def read_metrics(run_dir: Path) -> dict:
    """The run's metrics.json so far; an unreadable one, or one that holds no object, is started afresh."""
    metrics = read_record(run_dir / "metrics.json")
    return metrics if metrics is not None else {"run_name": run_dir.name}


def written_by_predict(metrics: dict) -> bool:
    """Whether a metrics.json is a prediction folder's (``minbert-predict``'s record: the run and its scores), not a
    run's: a run's says its status."""
    return isinstance(metrics, dict) and {"run", "scores"} <= set(metrics) and "status" not in metrics


def read_record(path: Path) -> dict | None:
    """The JSON object in ``path``; None where there is none (missing, unreadable, not JSON, not an object)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def holds_predictions_only(folder: Path) -> bool:
    """Whether ``folder`` is a ``minbert-predict --out``, not a run: no checkpoint/, and its metrics.json is
    predict's record or, where it has none, an ``--input`` prediction's record (``*-metrics.json``) is."""
    if (folder / "checkpoint").is_dir():
        return False
    if (folder / "metrics.json").is_file():
        return written_by_predict(read_record(folder / "metrics.json"))
    return any(written_by_predict(read_record(path)) for path in folder.glob("*-metrics.json"))


def scored_evaluations(metrics: dict) -> list[dict]:
    """A run's evaluations that have an overall dev score, in order: ``--eval_every``'s, else the epochs'."""
    if not isinstance(metrics, dict):
        return []
    records = metrics.get("evaluations") or metrics.get("epochs") or []
    return [e for e in records if isinstance(e, dict) and isinstance(e.get("dev_overall"), (int, float))]


REDRAW_SECONDS = 60.0   # drawing curves.png takes about a second: during training, at most once a minute


class RunFiles:
    """The run folder's writer; a no-op in data-parallel processes other than 0."""

    def __init__(self, run_dir: Path, enabled: bool):
        self.run_dir, self.enabled, self.warned = run_dir, enabled, False
        self.drawn_at = time.monotonic()

    def json(self, metrics: dict) -> None:
        if self.enabled:
            write_json(self.run_dir / "metrics.json", metrics)

    def curves(self, metrics: dict, log: RunLog, final: bool = False) -> None:
        """``curves.png`` at the run's end, and during training every ``REDRAW_SECONDS``. A side output: any
        failure to draw or write it costs the picture and one line per run, never the run."""
        if not self.enabled or (not final and time.monotonic() - self.drawn_at < REDRAW_SECONDS):
            return
        self.drawn_at = time.monotonic()
        try:
            plot_curves(metrics, self.run_dir / "curves.png")
        except MatplotlibMissing as err:
            if not self.warned:
                log(f"note: {err}")
                self.warned = True
        except Exception as err:
            if not self.warned:
                log.result(f"warning: curves.png not drawn, the run goes on without it ({describe(err)})")
                self.warned = True

    def predictions(self, dev: dict[str, TaskPredictions], tasks: dict[str, Task], splits,
                    predict_split: Callable[..., TaskPredictions], log,
                    test: bool = True) -> tuple[list[str], list[str], dict[str, float]]:
        """Dev prediction CSVs of each of ``tasks`` (``dev``: predicted by the best epoch) and, unless ``test``
        is off (``--no_test_predictions``), test ones (``predict_split(task, examples, label)``), as one set
        (``output_set``): a stop while the test sets are predicted (minutes on QQP) leaves none of them, and
        ``--resume`` writes them all. Returns the files written, those skipped for want of a test file, and each
        labelled test file's metric."""
        written, skipped, test_scores = [], [], {}
        if not test:
            log("no test predictions (--no_test_predictions)")
        with output_set(self.run_dir) as staging:
            for name in dev:
                task = tasks[name]
                for split in ("dev", "test") if test else ("dev",):
                    path = prediction_path(self.run_dir, task, split)
                    if split == "dev":
                        result = dev[name]
                    elif split in splits[name]:
                        result = predict_split(task, splits[name][split], f"{split} {name}")
                    else:
                        skipped.append(path.name)
                        log(f"note: no {task.files[split]} in the data directory; skipping {path.name}"
                            if split in task.files else f"note: {name} declares no {split} file; no {path.name}")
                        continue
                    write_predictions(staging / path.name, task, result)
                    written.append(path.name)
                    if split == "test" and result.labels is not None:
                        test_scores[name] = result.score(task)
        return written, skipped, test_scores


def prediction_path(run_dir: Path, task: Task, split: str) -> Path:
    return run_dir / f"{task.output_prefix}-{split}-output.csv"


def input_prediction_paths(out: Path, task: Task, source: Path) -> tuple[Path, Path]:
    """``predict --input FILE``'s CSV and its record, both named for the task and the file's stem, so that other
    files (or another task's predictions of this one) go beside them in one ``out``:
    ``<prefix>-<stem>-output.csv`` and ``<prefix>-<stem>-metrics.json``."""
    name = f"{task.output_prefix}-{source.stem}"
    return out / f"{name}-output.csv", out / f"{name}-metrics.json"


def write_predictions(path: Path, task: Task, result: TaskPredictions, texts: dict[str, tuple[str, ...]] | None = None,
                      text_columns: tuple[str, ...] = (), label_names: list[str] | None = None) -> None:
    """CS224N layout: an ``id`` column and the task's prediction column, one row per example (classes as
    integers, STS scores with 4 decimals). For ``predict --input`` (people rather than the CS224N grader), the
    input's text (``texts[id]``, under ``text_columns``) after ``id`` and, for a class task with names
    (``label_names``, in class order), ``label_name`` after the prediction."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    named = label_names is not None and task.label_type == "class"
    writer.writerow(["id", *text_columns, task.prediction_column, *(["label_name"] if named else [])])
    for example_id, value in zip(result.ids, result.predictions):
        writer.writerow([example_id, *(texts[example_id] if texts is not None else ()),
                         f"{value:.4f}" if task.label_type == "score" else int(value),
                         *([label_names[int(value)]] if named else [])])
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
