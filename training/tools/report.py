"""The ablation table: one row per configuration, its seeds pooled, from each run's ``metrics.json``
and dev predictions.

    python -m training.tools.report predictions/ablate   # prints the compact table, writes nothing
    python -m training.tools.report predictions/ablate --out predictions/ablate/ablation   # .md, .csv, -forest.png
    python -m training.tools.report predictions/ --out results/table --sort name --bootstrap 0 --full

The folders given are parents of run folders (a run folder itself is an error). The terminal gets a
compact view (run, seeds, each task's mean ± std, average, Δ vs FT and its interval; ``--full``: the
whole Markdown table). Nothing is written unless ``--out PREFIX`` is given: then the whole table as
``PREFIX.md`` and ``PREFIX.csv``, and ``PREFIX-forest.png`` (replaced if they exist).

Columns: run, pooling, one on/off column per extension (``training.extensions.EXTENSIONS``), seeds, one dev
metric per task trained, the average (``training.tasks.overall_score``), Δ vs FT with its 95 % interval,
wall time and status. The rules (docs/ablation.md, "Reading the table", says why):

- A *run* is an immediate subfolder holding ``metrics.json``, a ``*-output.csv`` or ``checkpoint/``.
- Finished runs whose saved configs differ only in ``train.seed``, ``train.device`` and the ``output``
  section are one row, their *seeds*, named without the ``-s<seed>`` suffix of ``scripts/ablate.sh
  --seeds``: metrics are their mean ± the sample std (ddof 1), the wall time their mean.
- Flags are looked up by name in any section of the saved config; an absent flag is off, and a run
  without a readable config shows blank flag cells. ``(PT)`` marks ``--option pretrain``, ``(FT)``
  ``--option finetune`` with every extension off (any pooling).
- Δ vs FT = the row's average minus its baseline's (the FT row of the same pooling, else the first FT
  row by name), both recomputed from the dev prediction files matched by id to the gold labels of the
  run's data folder (or ``--data_dir``). 95% CI = paired bootstrap (``training.tools.bootstrap``), the
  2.5th to 97.5th percentile of the resampled differences; ``*`` when it excludes 0. Both are blank
  for the baselines, with ``--bootstrap 0``, and where files cannot be read (a note on stderr says why).
- Finished runs come first, by average (highest first) or by name; every other run follows by name,
  never pooled, with its status and blank metrics.
- Markdown shows mean ± std to 3 decimals and wall time in minutes; the CSV has full precision, each
  std and the interval's ends in columns of their own. ``<prefix>-forest.png`` (with matplotlib and
  ``--out``) draws each row's Δ vs FT and interval.
"""
from __future__ import annotations

import argparse
import csv
import io
import json
import math
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from minbert.atomic import write_text_atomic

from ..cli import run_command
from ..curves import MatplotlibMissing
from ..extensions import EXTENSIONS
from ..tasks import DEFAULT_TASKS, TASKS, overall_score
from .bootstrap import Difference, DevSource, Unavailable, paired_difference, plot_forest, score_runs

ON, OFF = "✓", "×"
FINISHED = "finished"
LEGEND = ("✓ on, × off. PT = frozen BERT, heads only (--option pretrain); FT = fine-tuning with no extension. "
          "seeds = runs differing only in --seed, pooled: metrics are their mean ± sample std, wall time their "
          "mean. average = mean of the tasks' dev scores, a Pearson r counted as (r + 1) / 2 (the CS224N score for "
          "SST, QQP and STS). Unfinished runs are listed last with blank metrics.")
FLAG_COLUMNS = [e.column for e in EXTENSIONS]
DELTA, INTERVAL = "Δ vs FT", "95% CI"
# What the seeds of one row may differ in besides the seed: where and how a run reports or is stored.
SEED_FREE_SECTIONS = ("output",)
SEED_FREE_FIELDS = {"train": ("seed", "device")}


def metric_column(task: str) -> str:
    return f"{task.upper()} {'Pearson' if TASKS[task].metric_name == 'pearson' else 'acc'}"


def columns(tasks=DEFAULT_TASKS) -> list[str]:
    """The Markdown table's header for runs of ``tasks``."""
    return ["run", "pooling", *FLAG_COLUMNS, "seeds", *map(metric_column, tasks), "average", DELTA, INTERVAL,
            "wall (min)", "status"]


def csv_columns(tasks=DEFAULT_TASKS) -> list[str]:
    """The CSV's header: as ``columns``, with each metric's std and the interval's ends in columns of their own."""
    metrics = [name for column in [*map(metric_column, tasks), "average"] for name in (column, f"{column} std")]
    return ["run", "pooling", *FLAG_COLUMNS, "seeds", *metrics, DELTA, f"{INTERVAL} low", f"{INTERVAL} high",
            f"{INTERVAL} excludes 0", "wall (min)", "status"]


@dataclass
class RunRow:
    """One run folder, or one line of the table (a finished configuration's seeds pooled, or an
    unfinished run); ``None`` means unknown (a blank cell)."""
    run: str
    status: str
    flags: dict[str, bool] | None = None   # extension flag name -> on/off, None without a readable config
    pooling: str | None = None
    baseline: str = ""                     # "PT", "FT" or ""
    dev: dict[str, float | None] = field(default_factory=dict)   # task -> dev metric (the seeds' mean)
    average: float | None = None
    wall_minutes: float | None = None
    # what pooling seeds and the bootstrap need to know about a run folder
    folder: Path | None = None
    data_dir: str | None = None            # the data folder the run read (its gold labels)
    seed: object = None
    group_key: str | None = None           # ``seed_group_key`` of its config
    # a pooled line of the table
    seed_runs: list[RunRow] = field(default_factory=list)
    dev_std: dict[str, float | None] = field(default_factory=dict)
    average_std: float | None = None
    vs_ft: Difference | None = None

    @property
    def complete(self) -> bool:
        return self.status == FINISHED and self.average is not None

    def markdown_cells(self, tasks=DEFAULT_TASKS) -> list[str]:
        """The cells under ``columns(tasks)``: 3 decimals, mean ± std."""
        metrics = [_mean_std(self.dev.get(task), self.dev_std.get(task)) for task in tasks]
        d = self.vs_ft
        comparison = ["", ""] if d is None else \
            [f"{d.observed:+.3f}", f"[{d.low:+.3f}, {d.high:+.3f}]" + (" *" if d.excludes_zero else "")]
        return [*self._label_cells(), *metrics, _mean_std(self.average, self.average_std), *comparison,
                "" if self.wall_minutes is None else f"{self.wall_minutes:.1f}", self.status]

    def csv_cells(self, tasks=DEFAULT_TASKS) -> list[str]:
        """The cells under ``csv_columns(tasks)``, numbers at full precision."""
        metrics = [_full(value) for task in tasks for value in (self.dev.get(task), self.dev_std.get(task))]
        d = self.vs_ft
        comparison = ["", "", "", ""] if d is None else \
            [_full(d.observed), _full(d.low), _full(d.high), ON if d.excludes_zero else OFF]
        return [*self._label_cells(), *metrics, _full(self.average), _full(self.average_std), *comparison,
                _full(self.wall_minutes), self.status]

    def _label_cells(self) -> list[str]:
        flags = ["" if self.flags is None else (ON if self.flags[e.name] else OFF) for e in EXTENSIONS]
        return [f"{self.run} ({self.baseline})" if self.baseline else self.run, self.pooling or "", *flags,
                str(len(self.seed_runs)) if self.seed_runs else ""]


def table_tasks(rows: list[RunRow]) -> list[str]:
    """The tasks any of the rows has dev metrics for, in task-table order (the benchmark's three if none)."""
    seen = {task for row in rows for task in row.dev}
    return [task for task in TASKS if task in seen] or list(DEFAULT_TASKS)


def collect_runs(folder: str | Path, sort: str = "average") -> list[RunRow]:
    """The table's rows for the runs in ``folder``: seeds pooled, sorted."""
    return sort_rows(pool_seeds(read_runs(folder)), sort)


def read_runs(folder: str | Path) -> list[RunRow]:
    """Every run in ``folder`` (immediate subfolders only, by name); raises if ``folder`` is not a folder,
    or is itself a run folder (it holds ``metrics.json`` or ``checkpoint/``)."""
    folder = Path(folder)
    if not folder.is_dir():
        raise FileNotFoundError(f"{folder}: no such folder (give the parent folder of run folders, e.g. predictions/)")
    own = next((name for name in ("metrics.json", "checkpoint") if (folder / name).exists()), None)
    if own is not None:
        raise ValueError(f"{folder} is a run folder (it holds {own}); give the parent folder of run folders, "
                         f"e.g. {folder.parent}")
    return [read_run(sub) for sub in sorted(folder.iterdir()) if looks_like_run(sub)]


def pool_seeds(runs: list[RunRow]) -> list[RunRow]:
    """One row per finished configuration (its runs in the given order); every other run as it is."""
    groups: dict[object, list[RunRow]] = {}
    for run in runs:
        key = run.group_key if run.complete and run.group_key is not None else id(run)
        groups.setdefault(key, []).append(run)
    return [pooled(seeds) if seeds[0].complete else seeds[0] for seeds in groups.values()]


def pooled(seeds: list[RunRow]) -> RunRow:
    """The row of one configuration's finished seeds: each metric's mean and sample std, the mean wall time."""
    names = {s.run.removesuffix(f"-s{s.seed}") for s in seeds}
    walls = [s.wall_minutes for s in seeds if s.wall_minutes is not None]
    per_task = {task: [s.dev[task] for s in seeds] for task in seeds[0].dev}
    averages = [s.average for s in seeds]
    return replace(seeds[0], run=names.pop() if len(names) == 1 else seeds[0].run, seed_runs=seeds,
                   dev={task: _mean(values) for task, values in per_task.items()},
                   dev_std={task: _std(values) for task, values in per_task.items()},
                   average=_mean(averages), average_std=_std(averages), wall_minutes=_mean(walls) if walls else None)


def seed_group_key(config) -> str | None:
    """Runs with the same key differ only in their seed and in how they report: one row of the table.
    None for a run without a saved config, which stays a row of its own."""
    if not isinstance(config, dict) or not config:
        return None
    kept = {section: ({name: value for name, value in values.items() if name not in SEED_FREE_FIELDS.get(section, ())}
                      if isinstance(values, dict) else values)
            for section, values in config.items() if section not in SEED_FREE_SECTIONS}
    return json.dumps(kept, sort_keys=True, default=str)


def sort_rows(rows: list[RunRow], sort: str = "average") -> list[RunRow]:
    """Finished runs first (by average, highest first, or by name), then the rest by name."""
    if sort not in ("average", "name"):
        raise ValueError(f"sort must be 'average' or 'name', got {sort!r}")
    done = [r for r in rows if r.complete]
    rest = [r for r in rows if not r.complete]
    done.sort(key=(lambda r: (-r.average, r.run)) if sort == "average" else (lambda r: r.run))
    return done + sorted(rest, key=lambda r: r.run)


def compare_to_ft(rows: list[RunRow], resamples: int = 1000, seed: int = 0,
                  data_dir: str | Path | None = None) -> tuple[str, list[str]]:
    """Set ``vs_ft`` of every finished row but the baselines (paired bootstrap against the FT row of the
    same pooling, else the first FT row by name); return the footer line naming them and the notes
    on rows left without an interval. ``data_dir`` replaces the runs' own data folders."""
    if resamples == 0:
        return f"{DELTA} and {INTERVAL}: not computed (--bootstrap 0).", []
    fts = sorted((row for row in rows if row.complete and row.baseline == "FT"), key=lambda row: row.run)
    if not fts:
        return f"{DELTA} and {INTERVAL}: no finished FT row to compare with.", []
    ft_of = {}
    for ft in fts:
        ft_of.setdefault(ft.pooling, ft)
    pairs = [(row, ft_of.get(row.pooling, fts[0])) for row in rows if row.complete]
    pairs = [(row, ft) for row, ft in pairs if row is not ft]
    runs = {run.folder: DevSource(run.folder, str(data_dir) if data_dir else run.data_dir, tuple(run.dev))
            for row, ft in pairs for run in (*row.seed_runs, *ft.seed_runs)}
    scores, failed = score_runs(runs.values(), resamples, seed)

    def seed_scores(row: RunRow, role: str = ""):
        for run in row.seed_runs:
            if run.folder in failed:
                raise Unavailable(f"{role}{failed[run.folder]}")
        return [scores[run.folder] for run in row.seed_runs]

    notes = []
    for row, ft in pairs:
        try:
            row.vs_ft = paired_difference(seed_scores(row), seed_scores(ft, f"baseline {ft.run}: "))
        except Unavailable as err:
            notes.append(f"note: {row.run}: no {DELTA}: {err}")
    against = (f"{fts[0].run}" if len(ft_of) == 1 else "the FT row of the same pooling ("
               + ", ".join(f"{pooling or '?'}: {ft.run}" for pooling, ft in ft_of.items()) + f"; else {fts[0].run})")
    footer = (f"{DELTA} = average minus that of {against}, both from the dev prediction files; {INTERVAL} = paired "
              f"bootstrap percentile interval ({resamples} resamples of each task's dev examples, seed {seed}); "
              f"* = the interval excludes 0.")
    return footer, notes


def render_markdown(rows: list[RunRow], footer: str = "") -> str:
    """A Markdown table (metrics to 3 decimals, wall time to 0.1 minute) followed by the legend and ``footer``."""
    tasks = table_tasks(rows)
    header = columns(tasks)
    align = {"run": "---", "pooling": ":-:", "status": "---", **{c: ":-:" for c in FLAG_COLUMNS}}
    lines = [_md_line(header), _md_line([align.get(c, "--:") for c in header])]
    lines += [_md_line(row.markdown_cells(tasks)) for row in rows]
    return "\n".join(lines) + "\n\n" + LEGEND + "\n" + ("\n" + footer + "\n" if footer else "")


def render_compact(rows: list[RunRow], footer: str = "") -> str:
    """The terminal view: run, seeds, each task's mean ± std, the average, Δ vs FT and its interval,
    aligned in plain text (the Markdown table's other columns are in ``--out``'s files)."""
    tasks = table_tasks(rows)
    header = ["run", "seeds", *(task.upper() for task in tasks), "average", DELTA, INTERVAL, "status"]
    lines = [header]
    for row in rows:
        named = dict(zip(columns(tasks), row.markdown_cells(tasks)))
        status = "" if row.complete else row.status if len(row.status) <= 40 else row.status[:39] + "…"
        lines.append([named["run"], named["seeds"] or ("1" if row.complete else ""),
                      *(named[metric_column(t)] for t in tasks), named["average"], named[DELTA], named[INTERVAL],
                      status])
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    text = "\n".join("  ".join(cell.ljust(w) if i in (0, len(header) - 1) else cell.rjust(w) for i, (cell, w) in
                                enumerate(zip(line, widths))).rstrip() for line in lines)
    return text + "\n" + ("\n" + footer + "\n" if footer else "")


def write_csv(rows: list[RunRow], path: str | Path) -> None:
    """The Markdown table's rows, numbers at full precision (UTF-8, ✓/×)."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    tasks = table_tasks(rows)
    writer.writerow(csv_columns(tasks))
    writer.writerows(row.csv_cells(tasks) for row in rows)
    write_text_atomic(path, buffer.getvalue())


def write_forest(rows: list[RunRow], path: Path) -> bool:
    """The rows' Δ vs FT and intervals as a PNG; False (and no stale picture left) when there is none to draw
    or matplotlib is missing."""
    lines = [(row.run, row.vs_ft) for row in rows if row.vs_ft is not None]
    if lines:
        try:
            plot_forest(lines, path)
            return True
        except MatplotlibMissing as err:
            print(f"note: {err}", file=sys.stderr)
    path.unlink(missing_ok=True)
    return False


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m training.tools.report", description=__doc__.split("\n\n")[0])
    parser.add_argument("folders", nargs="+", type=Path, help="parent folder(s) of run folders")
    parser.add_argument("--out", type=Path, default=None,
                        help="write PREFIX.md, PREFIX.csv and PREFIX-forest.png (default: write nothing, print the "
                             "table only)")
    parser.add_argument("--full", action="store_true",
                        help="print the whole Markdown table (every column) instead of the compact view")
    parser.add_argument("--sort", choices=["average", "name"], default="average",
                        help="order of the finished runs (default: average, highest first)")
    parser.add_argument("--bootstrap", type=int, default=1000, metavar="N",
                        help="bootstrap resamples of the dev sets for the interval of Δ vs FT (default: 1000; 0: off)")
    parser.add_argument("--bootstrap_seed", type=int, default=0, help="seed of the resamples (default: 0)")
    parser.add_argument("--data_dir", type=Path, default=None,
                        help="folder with the dev files' gold labels (default: each run's data_dir in metrics.json)")
    args = parser.parse_args(argv)
    return run_command(lambda: execute(args))


def execute(args: argparse.Namespace) -> int:
    """The report's work; its errors (a missing folder, an unwritable --out) become one line in ``main``."""
    if args.bootstrap < 0 or args.bootstrap_seed < 0:
        raise ValueError(f"--bootstrap and --bootstrap_seed must be >= 0, got {args.bootstrap} and "
                         f"{args.bootstrap_seed}")
    runs = [run for folder in args.folders for run in read_runs(folder)]
    rows = sort_rows(pool_seeds(runs), args.sort)
    if not rows:
        print(f"note: no run folders in {', '.join(map(str, args.folders))}", file=sys.stderr)
    footer, notes = compare_to_ft(rows, args.bootstrap, args.bootstrap_seed, args.data_dir)
    for note in notes:
        print(note, file=sys.stderr)
    markdown = render_markdown(rows, footer)
    print(markdown if args.full else render_compact(rows, footer), end="")
    prefix = args.out
    if prefix is None:  # the table on stdout only: nothing is written into the given folders
        print(f"({len(rows)} rows from {len(runs)} runs; nothing written: --out PREFIX writes PREFIX.md, "
              "PREFIX.csv and PREFIX-forest.png)", file=sys.stderr)
        return 0
    write_text_atomic(prefix.with_name(prefix.name + ".md"), markdown)
    write_csv(rows, prefix.with_name(prefix.name + ".csv"))
    forest = write_forest(rows, prefix.with_name(prefix.name + "-forest.png"))
    print(f"({len(rows)} rows from {len(runs)} runs; wrote {prefix}.md, {prefix}.csv"
          f"{f' and {prefix}-forest.png' if forest else ''})", file=sys.stderr)
    return 0


def looks_like_run(path: Path) -> bool:
    return path.is_dir() and ((path / "metrics.json").is_file() or (path / "checkpoint").is_dir()
                              or any(path.glob("*-output.csv")))


def read_run(folder: Path) -> RunRow:
    """One run folder -> its row; never raises on a missing, corrupt or partial ``metrics.json``."""
    path = folder / "metrics.json"
    if not path.is_file():
        return RunRow(folder.name, "incomplete (no metrics.json)", folder=folder)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        data = None
    if not isinstance(data, dict):
        return RunRow(folder.name, "corrupt metrics.json", folder=folder)
    config = data.get("config") if isinstance(data.get("config"), dict) else {}
    flags = {e.name: _is_on(find_flag(config, e.name)) for e in EXTENSIONS}
    pooling, data_dir = find_flag(config, "pooling"), data.get("data_dir") or find_flag(config, "data_dir")
    wall = _number(data.get("wall_seconds"))
    row = RunRow(folder.name, _status(data), flags, None if pooling is None else str(pooling).upper(),
                 _baseline(find_flag(config, "option", "finetune"), flags),
                 wall_minutes=None if wall is None else wall / 60.0, folder=folder,
                 data_dir=str(data_dir) if data_dir else None, seed=find_flag(config, "seed"),
                 group_key=seed_group_key(config))
    if row.status == FINISHED:
        dev = data.get("dev") if isinstance(data.get("dev"), dict) else {}
        row.dev = {task: _number(value) for task, value in dev.items() if task in TASKS}
        if row.dev and None not in row.dev.values():
            row.average = overall_score(row.dev)
        else:
            row.status = "finished, dev metrics missing"
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
    return "PT" if option == "pretrain" else "FT" if option == "finetune" and not any(flags.values()) else ""


def _is_on(value) -> bool:
    return value.strip().lower() in ("1", "true", "yes", "on") if isinstance(value, str) else bool(value)


def _number(value) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


def _mean(values: list[float]) -> float:
    return float(np.mean(values))


def _std(values: list[float]) -> float | None:
    """The sample std (ddof 1); None for one value, which has no spread to show."""
    return float(np.std(values, ddof=1)) if len(values) >= 2 else None


def _mean_std(mean: float | None, std: float | None) -> str:
    """``0.482 ± 0.006``; ``0.482`` without a std; blank when unknown."""
    return "" if mean is None else f"{mean:.3f}" + ("" if std is None else f" ± {std:.3f}")


def _full(value: float | None) -> str:
    return "" if value is None else repr(float(value))


def _md_line(cells: list[str]) -> str:
    return "| " + " | ".join(c.replace("|", "\\|").replace("\n", " ") for c in cells) + " |"


if __name__ == "__main__":
    sys.exit(main())
