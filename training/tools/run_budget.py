"""A grid's time from its runs' budgets and a measured pace, before any of its runs has finished: what each run will
train (its examples: epochs, rounds or batches an epoch, each task's batch and training-set size, as the run's own
parser resolves its flags) at the wall time a trained example took in finished runs of the same model, maximum length
and device, this machine's first (``<out_dir>/..``: other grids' and runs' folders), else the documented runs of
``docs/runs/``. Rough: loading, scoring and stages are counted at the reference runs' share, whatever the run's own.
"""
from __future__ import annotations

import json
import statistics
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from ..harness.outputs import read_metrics
from ..harness.status import RunStatus
from .grid import ROOT, GridRun

DOCUMENTED_RUNS = ROOT / "docs" / "runs"

# each run's budget, resolved by the run's own parser in one Python start (as ``grid.CHECK`` checks the flags):
# {"examples": trained examples, "model", "max_length", "cuda"}, or null where its data cannot be counted
BUDGET = """
import json, math, sys
from pathlib import Path
sys.path.insert(0, sys.argv[1])
import run_multitask
from training.configuration.task_declarations import BUILTIN_DECLARATIONS
from training.data.readers import resolve_data_dir

def rows(path):
    with open(path, encoding="utf-8", errors="replace") as lines:
        return max(0, sum(1 for line in lines if line.strip()) - 1)   # less the header

def budget(flags):
    config = run_multitask.parse_config(flags)
    files = {d["name"]: d["files"]["train"] for d in (*BUILTIN_DECLARATIONS, *config.data.declared_tasks())}
    data_dir = resolve_data_dir(config.data.data_dir)
    sizes = {name: rows(data_dir / files[name]) for name in config.task_names()}
    batch = config.batch_sizes(sizes)
    batches = {name: math.ceil(sizes[name] / batch[name]) for name in sizes}
    t = config.train
    if t.rr == "proportional":
        capped = t.max_steps_per_epoch is not None
        share = min(1.0, t.max_steps_per_epoch * len(sizes) / sum(batches.values())) if capped else 1.0
        epoch = share * sum(sizes.values())
    else:
        rounds = min(batches.values()) if t.rr == "min" else max(batches.values())
        rounds = rounds if t.max_steps_per_epoch is None else min(rounds, t.max_steps_per_epoch)
        epoch = rounds * sum(batch.values())
    model = config.model.model and str(Path(config.model.model).resolve())
    return {"examples": t.epochs * epoch, "model": model, "max_length": config.data.max_length,
            "cuda": t.device.startswith("cuda")}

out = []
for flags in json.loads(sys.argv[2]):
    try:
        out.append(budget(flags))
    except (Exception, SystemExit):
        out.append(None)
print(json.dumps(out))
"""


@dataclass(frozen=True)
class Pace:
    """Wall seconds a trained example took in ``runs`` finished runs (their median), and where they are."""
    seconds: float
    runs: int
    where: str
    threads: str


def budgets(runs: list[GridRun], gpus: bool) -> list[dict | None]:
    """Each run's budget (``BUDGET``); None for a run whose flags or data do not resolve. ``gpus``: the grid gives
    its runs a GPU (``--device auto`` there is CUDA)."""
    done = subprocess.run([sys.executable, "-c", BUDGET, str(ROOT), json.dumps([list(run.flags) for run in runs])],
                          capture_output=True, text=True)   # in the runs' folder: their relative paths
    if done.returncode != 0:
        return [None] * len(runs)
    found = json.loads(done.stdout.strip().splitlines()[-1])
    return [None if b is None else {**b, "cuda": b["cuda"] or gpus} for b in found]


def reference_runs(out_dir: Path) -> list[tuple[str, list[dict]]]:
    """(where, the metrics.json of each run there) of finished runs to take a pace from: this machine's beside
    ``out_dir`` (other grids' run folders and runs), then the documented ones. Read once for every kind of run."""
    here = [path for pattern in ("*/metrics.json", "*/*/metrics.json")
            for path in sorted(out_dir.parent.glob(pattern)) if out_dir not in path.parents]
    places = [(f"this machine's finished runs in {out_dir.parent}", here),
              (f"the documented runs of {DOCUMENTED_RUNS} (another machine)",
               sorted(DOCUMENTED_RUNS.glob("*/*/metrics.json")))]
    return [(where, [read_metrics(path.parent) for path in files]) for where, files in places]


def pace(references: list[tuple[str, list[dict]]], model: str | None, max_length: int, cuda: bool) -> Pace | None:
    """The pace of finished runs of ``model`` at ``max_length`` on a GPU (``cuda``) or not, the first place of
    ``references`` (``reference_runs``) that has one; None where none has."""
    for where, runs in references:
        matching = [m for m in runs if same_kind(m, model, max_length, cuda)]
        if matching:
            threads = sorted({str(m.get("torch_threads", "?")) for m in matching})
            return Pace(statistics.median(m["wall_seconds"] / m["train_examples"] for m in matching),
                        len(matching), where, "/".join(threads))
    return None


def same_kind(metrics: dict, model: str | None, max_length: int, cuda: bool) -> bool:
    """A finished run of ``model`` at ``max_length`` on the same kind of device, with its wall time and examples."""
    config = metrics.get("config") or {}
    return (metrics.get("status") == RunStatus.FINISHED
            and isinstance(metrics.get("wall_seconds"), (int, float))
            and isinstance(metrics.get("train_examples"), int) and metrics["train_examples"] > 0
            and resolved((config.get("model") or {}).get("model")) == model
            and (config.get("data") or {}).get("max_length") == max_length
            and str(metrics.get("device", "")).startswith("cuda") == cuda)


def resolved(path: str | None) -> str | None:
    return path and str(Path(path).resolve())
