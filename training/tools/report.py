"""The ablation table: one row per run folder, built from each run's ``metrics.json``.

    python -m training.tools.report predictions/ablate        # writes predictions/ablate/ablation.{md,csv}
    python -m training.tools.report predictions/ --out results/table --sort name

Columns: the run, its pooling, one on/off column per extension (``training.stages.EXTENSIONS``, in
stage order: U-CL, S-CL, LCL, pre-QQP, joint-loss, SMART), one dev metric column per task the runs
trained (``training.tasks.TASKS``: SST acc, QQP acc, STS Pearson, ...), the average, the run's wall
time and its status.

Rules, so the table can be read without this file:

- A *run* is an immediate subfolder holding ``metrics.json``, a ``*-output.csv`` or ``checkpoint/``;
  anything else (README.md, a logs folder) is ignored.
- Flags are looked up by name in any section of the saved config (``pooling`` may live in ``model``
  today and elsewhere tomorrow); a flag absent from the config counts as off. A run without a readable
  config (no or corrupt ``metrics.json``) shows blank flag cells.
- Baselines are marked in the run column: ``(PT)`` for ``--option pretrain`` (frozen BERT, heads
  only); ``(FT)`` for ``--option finetune`` with every extension off (any pooling).
- average = ``training.tasks.overall_score`` of the run's dev metrics: for SST, QQP and STS the
  CS224N score (SST + QQP + (STS + 1) / 2) / 3.
- Finished runs come first, by average (highest first) or by name; every other run follows, by
  name, with its status and blank metrics: ``incomplete (running)`` (still running, or killed),
  ``incomplete (no metrics.json)``, ``failed: <error>``, ``corrupt metrics.json``.
- Markdown shows metrics with 3 decimals and wall time in minutes with 1; the CSV has the same rows and
  cells at full precision.
"""
from __future__ import annotations

import argparse
import csv
import io
import json
import math
import sys
from dataclasses import dataclass, field
from pathlib import Path

from minbert.atomic import write_text_atomic

from ..cli import run_command
from ..stages import EXTENSIONS
from ..tasks import DEFAULT_TASKS, TASKS, overall_score

ON, OFF = "✓", "×"
FINISHED = "finished"
LEGEND = ("✓ on, × off. PT = frozen BERT, heads only (--option pretrain); FT = fine-tuning with no extension. "
          "average = mean of the tasks' dev scores, a Pearson r counted as (r + 1) / 2 (the CS224N score for "
          "SST, QQP and STS). Unfinished runs are listed last with blank metrics.")
FLAG_COLUMNS = [e.column for e in EXTENSIONS]


def metric_column(task: str) -> str:
    return f"{task.upper()} {'Pearson' if TASKS[task].metric_name == 'pearson' else 'acc'}"


def columns(tasks=DEFAULT_TASKS) -> list[str]:
    """The table's header for runs of ``tasks``."""
    return ["run", "pooling", *FLAG_COLUMNS, *map(metric_column, tasks), "average", "wall (min)", "status"]


@dataclass
class RunRow:
    """One run folder as the table shows it; ``None`` means unknown (a blank cell)."""
    run: str
    status: str
    flags: dict[str, bool] | None = None   # extension flag name -> on/off, None without a readable config
    pooling: str | None = None
    baseline: str = ""                     # "PT", "FT" or ""
    dev: dict[str, float | None] = field(default_factory=dict)   # task -> dev metric
    average: float | None = None
    wall_minutes: float | None = None

    @property
    def complete(self) -> bool:
        return self.status == FINISHED and self.average is not None

    def cells(self, number, tasks=DEFAULT_TASKS) -> list[str]:
        """The row's cells in ``columns(tasks)`` order; ``number(value, column)`` formats the floats."""
        def num(value, column):
            return "" if value is None else number(value, column)

        flags = ["" if self.flags is None else (ON if self.flags[e.flag] else OFF) for e in EXTENSIONS]
        metrics = [num(self.dev.get(task), metric_column(task)) for task in tasks]
        return [f"{self.run} ({self.baseline})" if self.baseline else self.run, self.pooling or "", *flags,
                *metrics, num(self.average, "average"), num(self.wall_minutes, "wall (min)"), self.status]


def table_tasks(rows: list[RunRow]) -> list[str]:
    """The tasks any of the rows has dev metrics for, in task-table order (the benchmark's three if none)."""
    seen = {task for row in rows for task in row.dev}
    return [task for task in TASKS if task in seen] or list(DEFAULT_TASKS)


def collect_runs(folder: str | Path, sort: str = "average") -> list[RunRow]:
    """Every run in ``folder`` (immediate subfolders only), sorted; raises if ``folder`` is not a folder."""
    folder = Path(folder)
    if not folder.is_dir():
        raise FileNotFoundError(f"{folder}: no such folder (give the parent folder of run folders, e.g. predictions/)")
    return sort_rows([read_run(sub) for sub in sorted(folder.iterdir()) if looks_like_run(sub)], sort)


def sort_rows(rows: list[RunRow], sort: str = "average") -> list[RunRow]:
    """Finished runs first (by average, highest first, or by name), then the rest by name."""
    if sort not in ("average", "name"):
        raise ValueError(f"sort must be 'average' or 'name', got {sort!r}")
    done = [r for r in rows if r.complete]
    rest = [r for r in rows if not r.complete]
    done.sort(key=(lambda r: (-r.average, r.run)) if sort == "average" else (lambda r: r.run))
    return done + sorted(rest, key=lambda r: r.run)


def render_markdown(rows: list[RunRow]) -> str:
    """A Markdown table (metrics to 3 decimals, wall time to 0.1 minute) followed by a one-line legend."""
    tasks = table_tasks(rows)
    header = columns(tasks)
    align = {"run": "---", "pooling": ":-:", "status": "---", **{c: ":-:" for c in FLAG_COLUMNS}}
    lines = [_md_line(header), _md_line([align.get(c, "--:") for c in header])]
    lines += [_md_line(row.cells(_short_number, tasks)) for row in rows]
    return "\n".join(lines) + "\n\n" + LEGEND + "\n"


def write_csv(rows: list[RunRow], path: str | Path) -> None:
    """The same rows and cells as the Markdown table, numbers at full precision (UTF-8, ✓/×)."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    tasks = table_tasks(rows)
    writer.writerow(columns(tasks))
    writer.writerows(row.cells(lambda value, column: repr(float(value)), tasks) for row in rows)
    write_text_atomic(path, buffer.getvalue())


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m training.tools.report", description=__doc__.split("\n\n")[0])
    parser.add_argument("folders", nargs="+", type=Path, help="parent folder(s) of run folders")
    parser.add_argument("--out", type=Path, default=None,
                        help="write PREFIX.md and PREFIX.csv (default: <first folder>/ablation)")
    parser.add_argument("--sort", choices=["average", "name"], default="average",
                        help="order of the finished runs (default: average, highest first)")
    args = parser.parse_args(argv)
    return run_command(lambda: execute(args))


def execute(args: argparse.Namespace) -> int:
    """The report's work; its errors (a missing folder, an --out that cannot be written) become one
    line in ``main``."""
    rows = sort_rows([row for folder in args.folders for row in collect_runs(folder)], args.sort)
    if not rows:
        print(f"note: no run folders in {', '.join(map(str, args.folders))}", file=sys.stderr)
    prefix = args.out if args.out is not None else args.folders[0] / "ablation"
    markdown = render_markdown(rows)
    write_text_atomic(prefix.with_name(prefix.name + ".md"), markdown)
    write_csv(rows, prefix.with_name(prefix.name + ".csv"))
    print(markdown, end="")
    print(f"({len(rows)} runs; wrote {prefix}.md and {prefix}.csv)", file=sys.stderr)
    return 0


def looks_like_run(path: Path) -> bool:
    return path.is_dir() and ((path / "metrics.json").is_file() or (path / "checkpoint").is_dir()
                              or any(path.glob("*-output.csv")))


def read_run(folder: Path) -> RunRow:
    """One run folder -> its row; never raises on a missing, corrupt or partial ``metrics.json``."""
    path = folder / "metrics.json"
    if not path.is_file():
        return RunRow(folder.name, "incomplete (no metrics.json)")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        data = None
    if not isinstance(data, dict):
        return RunRow(folder.name, "corrupt metrics.json")
    config = data.get("config") if isinstance(data.get("config"), dict) else {}
    flags = {e.flag: _is_on(find_flag(config, e.flag)) for e in EXTENSIONS}
    pooling = find_flag(config, "pooling")
    row = RunRow(folder.name, _status(data), flags, None if pooling is None else str(pooling).upper(),
                 _baseline(find_flag(config, "option", "finetune"), flags),
                 wall_minutes=_minutes(data.get("wall_seconds")))
    if row.status == FINISHED:
        _fill_metrics(row, data.get("dev"))
    return row


def find_flag(config, name: str, default=None):
    """``config[section][name]`` for whichever section holds it (searched depth-first), else ``default``."""
    if not isinstance(config, dict):
        return default
    if name in config and not isinstance(config[name], dict):
        return config[name]
    for value in config.values():
        found = find_flag(value, name, _MISSING)
        if found is not _MISSING:
            return found
    return default


_MISSING = object()


def _fill_metrics(row: RunRow, dev) -> None:
    dev = dev if isinstance(dev, dict) else {}
    row.dev = {task: _number(value) for task, value in dev.items() if task in TASKS}
    if not row.dev or None in row.dev.values():
        row.status = "finished, dev metrics missing"
        return
    row.average = overall_score(row.dev)


def _status(data: dict) -> str:
    status = data.get("status")
    if status is None:  # runs written before the status field: finished iff they have dev metrics
        status = FINISHED if isinstance(data.get("dev"), dict) else "incomplete"
    if status == "running":
        return "incomplete (running)"
    if status == "failed":
        error = " ".join(str(data.get("error") or "no error message").split())
        return "failed: " + (error if len(error) <= 100 else error[:99] + "…")
    return str(status)


def _baseline(option, flags: dict[str, bool]) -> str:
    if option == "pretrain":
        return "PT"
    if option == "finetune" and not any(flags.values()):
        return "FT"
    return ""


def _is_on(value) -> bool:
    if isinstance(value, str):
        return value.strip().lower() in ("1", "true", "yes", "on")
    return bool(value)


def _number(value) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


def _minutes(seconds) -> float | None:
    seconds = _number(seconds)
    return None if seconds is None else seconds / 60.0


def _short_number(value: float, column: str) -> str:
    return f"{value:.1f}" if column == "wall (min)" else f"{value:.3f}"


def _md_line(cells: list[str]) -> str:
    return "| " + " | ".join(c.replace("|", "\\|").replace("\n", " ") for c in cells) + " |"


if __name__ == "__main__":
    sys.exit(main())
