"""The ablation table: one row per configuration, its seeds pooled, from each run's ``metrics.json``
and dev predictions.

    python -m training.tools.report predictions/ablate   # prints the compact table, writes nothing
    python -m training.tools.report predictions/ablate --out predictions/ablate/ablation   # .md, .csv, -forest.png

Give parents of run folders (a run folder itself is an error); a *run* is an immediate subfolder holding
``metrics.json``, a ``*-output.csv`` or ``checkpoint/``. Nothing is written unless ``--out PREFIX`` is given: then
``PREFIX.md``, ``PREFIX.csv`` (full precision) and ``PREFIX-forest.png``; ``--format latex`` prints the table as
LaTeX (``training.tools.latex``) and writes ``PREFIX.tex`` too.

Columns: run, a column for each setting in which the rows differ (pooling, the extensions' on/off, the core ideas'
settings, then any other flag: ``training.tools.table_settings``; the table's own settings alike in every row are
named once, "All rows: pooling MEAN, ...", above the Markdown table and in the LaTeX caption), seeds, one dev metric
per task, the average, Δ vs FT with its 95 % interval (``training.tools.bootstrap``), "<TASK> vs alone" where the
folder has single-task rows, wall time and status. ``--caption``, ``--label`` and ``--row_names`` /
``--row_name`` (``training.tools.row_names``) make the table the paper's (docs/ablation.md, "A table for a paper").
How seeds are pooled, which row is a baseline and what the intervals mean: docs/ablation.md, "Reading the table:
seeds and intervals". A smoke run (``--max_eval_examples N``) is marked "capped" and compared only with
rows capped alike; a search's trial (``--val_fraction``, not scored on dev) is marked too, and never compared.
"""
from __future__ import annotations

if __name__ == "__main__":   # a stop while torch imports: one line, not a traceback (training/tools/starting.py)
    from training.tools.starting import stop_cleanly_while_starting
    stop_cleanly_while_starting()

import argparse
import csv
import io
import json
import math
import sys
import textwrap
from collections.abc import Callable, Mapping
from contextlib import suppress
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from minbert.atomic import write_text_atomic

from .command import run_command
from ..harness.run_config import RunConfig
from ..configuration.sections import removed_extension, saved_values, scored_whole
from ..harness.curves import MatplotlibMissing
from ..harness.outputs import holds_predictions_only
from ..harness.status import RunStatus
from .. import extensions
from ..extensions.base import saved_flag
from ..configuration.task_declarations import DEFAULT_TASKS
from ..learning.task_schema import BUILTIN_TASKS, saved_tasks
from ..learning.tasks import Task, overall_score
from .latex import Headers, checked_label, count, label_of, render_latex
from .bootstrap import Difference, DevSource, Unavailable, paired_difference, plot_forest, score_runs
from .row_names import name_rows, row_names
from .table_settings import OFF, ON, Setting, caption_opening, run_settings, shown_settings

LEGEND = ("✓ on, × off; – an extension's setting in a row that has the extension off. PT = frozen BERT, heads "
          "only (--option pretrain); FT = fine-tuning with no extension; ST = one task trained alone. "
          "seeds = runs differing only in --seed, pooled: metrics are their mean ± sample std, wall time their "
          "mean. average = mean of the tasks' dev scores, a Pearson r counted as (r + 1) / 2 (the CS224N score for "
          "SST, QQP and STS). Unfinished runs are listed last with blank metrics.")
CAPPED, CAPPED_NOTE = "†", ("capped (†) = a smoke run, its dev scored on the first N examples of each task's dev "
                             "file (--max_eval_examples N): pooled and compared only with rows capped alike (the same "
                             "N, so the same examples), never with uncapped ones.")
VAL_NOTE = ("validation split (†) = a search trial, scored on a split held out of the training files "
            "(--val_fraction F), not on dev: not pooled with dev-scored seeds, not compared, no baseline.")
DELTA, INTERVAL = "Δ vs FT", "95% CI"   # DELTA: the default; ``--baseline ROW`` makes it "Δ vs ROW"
ENDS = ("low", "high", "excludes 0")   # an interval's columns in the CSV
# the terminal view: at most TERMINAL_WIDTH columns; run names are cut to no fewer than MIN_RUN_WIDTH
TERMINAL_WIDTH, MIN_RUN_WIDTH, MAX_STATUS_WIDTH = 120, 24, 40
ALONE = "vs alone"   # "<TASK> vs alone": a task's Δ against its single-task (ST) row, with the interval
# What the seeds of one row may differ in besides the seed: where and how a run reports or is stored.
SEED_FREE_SECTIONS = ("output",)
SEED_FREE_FIELDS = {"train": ("seed", "device")}


def metric_column(task: str, known: Mapping[str, Task] = BUILTIN_TASKS) -> str:
    return f"{task.upper()} {'Pearson' if known[task].metric_name == 'pearson' else 'acc'}"


def task_column(task: str, kind: str, baseline: str | None = None) -> str:
    """A per-task Δ's column: "<TASK> vs alone" (``kind`` "alone") or "<TASK> Δ vs ROW" (``kind`` "baseline")."""
    return f"{task.upper()} {ALONE if kind == 'alone' else delta_column(baseline)}"


def delta_column(baseline: str | None = None) -> str:
    """"Δ vs FT", or "Δ vs ROW" when ``--baseline ROW`` names the row the averages are compared with."""
    return DELTA if baseline is None else f"Δ vs {baseline}"


def columns(tasks=DEFAULT_TASKS, alone=(), baseline: str | None = None) -> list[str]:
    """The Markdown table's header for runs of ``tasks`` that differ in no setting, with a "vs alone" column for each
    of ``alone`` (``columns_of`` adds the settings columns of given rows after "run")."""
    return [column.header for column in table_columns(tasks, alone, baseline)]


def csv_columns(tasks=DEFAULT_TASKS, alone=(), baseline: str | None = None) -> list[str]:
    """The CSV's header: as ``columns``, with each metric's std and each interval's ends in columns of their own."""
    return [name for column in table_columns(tasks, alone, baseline) for name in column.csv_headers()]


@dataclass
class RunRow:
    """One run folder, or one line of the table (a finished configuration's seeds pooled, or an unfinished run);
    ``None`` means unknown (a blank cell)."""
    run: str
    status: str
    flags: dict[str, bool] | None = None   # extension flag name -> on/off, None without a readable config
    pooling: str | None = None
    baseline: str = ""                     # "PT", "FT", "ST" or ""
    settings: dict[str, object] | None = None   # what it trained as the table compares it (table_settings), None
                                                # without a readable config
    dev: dict[str, float | None] = field(default_factory=dict)   # task -> dev metric (the seeds' mean)
    average: float | None = None
    wall_minutes: float | None = None
    # what pooling seeds and the bootstrap need to know about a run folder
    folder: Path | None = None
    data_dir: str | None = None            # the data folder the run read (its gold labels)
    seed: object = None
    group_key: str | None = None           # ``seed_group_key`` of its config
    dev_cap: int | None = None             # --max_eval_examples: dev scored on the first N examples of each task
    dev_counts: dict[str, int] = field(default_factory=dict)   # task -> dev examples scored (metrics.json)
    val_fraction: float | None = None      # --val_fraction: scored on a split of train (a search's trial), not dev
    # a pooled line of the table
    seed_runs: list[RunRow] = field(default_factory=list)
    dev_std: dict[str, float | None] = field(default_factory=dict)
    average_std: float | None = None
    vs_ft: Difference | None = None
    vs_alone: dict[str, Difference] = field(default_factory=dict)   # task -> Δ against its ST row
    vs_baseline: dict[str, Difference] = field(default_factory=dict)   # task -> Δ against the --baseline row's
    known_tasks: dict[str, Task] = field(default_factory=dict)        # the task rows its configuration declares

    @property
    def complete(self) -> bool:
        return self.status == RunStatus.FINISHED and self.average is not None

    @property
    def capped(self) -> str:
        """What the status column adds for a run scored on part of dev or not on dev; "" otherwise."""
        if self.val_fraction:
            return f"validation split: scored on {self.val_fraction:g} of train, not dev"
        if self.dev_cap is None:
            return ""
        return f"capped: dev scored on {self.dev_cap} examples" + scored_whole(dict(sorted(self.dev_counts.items())),
                                                                                  self.dev_cap)

    def status_cell(self) -> str:
        return ", ".join(part for part in (self.status, self.capped) if part)

    def differences(self, kind: str) -> dict[str, Difference]:
        """Its per-task Δs of ``kind``: "alone" (against each task's ST row) or "baseline" (the --baseline row's)."""
        return self.vs_alone if kind == "alone" else self.vs_baseline


@dataclass(frozen=True)
class Column:
    """One column of the table in each view: ``table_columns`` lists them, so a new column is one entry there."""
    header: str                                            # in the Markdown table, and the CSV's unless ``csv``
    cell: Callable[[RunRow], str]                          # its Markdown cell (3 decimals, mean ± std)
    full: Callable[[RunRow], list[str]] | None = None      # its CSV cells at full precision, one per ``csv``
    csv: tuple[str, ...] | None = None                     # its CSV headers, where not (header,) with [cell]
    terminal: str | None = None                            # its header in the terminal view; None: not shown there
    terminal_cell: Callable[[RunRow], str] | None = None   # its cell there, where not ``cell``
    aside: bool = False                                    # in the terminal's second block, not the main one
    align: str = "--:"                                     # Markdown alignment: numbers to the right

    def csv_cells(self, row: RunRow) -> list[str]:
        return [self.cell(row)] if self.full is None else self.full(row)

    def csv_headers(self) -> tuple[str, ...]:
        return self.csv or (self.header,)


def table_columns(tasks=DEFAULT_TASKS, alone=(), baseline: str | None = None,
                  known: Mapping[str, Task] = BUILTIN_TASKS, versus=(), settings: list[Setting] = ()) -> list[Column]:
    """The table's columns in order, for runs of ``tasks`` (rows in ``known``) with a column for each of
    ``settings`` (those in which the rows differ: ``table_settings.shown_settings``), a "vs alone" column for each of
    ``alone`` and a "Δ vs ``baseline``" column for each of ``versus``: the one list every view draws from."""
    delta, seeds = delta_column(baseline), lambda row: str(len(row.seed_runs)) if row.seed_runs else ""
    return [
        Column("run", lambda row: f"{row.run} ({row.baseline})" if row.baseline else row.run, terminal="run",
               align="---"),
        *(Column(setting.header, lambda row, cell=setting.cell: cell(row) or "", align=":-:")   # blank: unknown
          for setting in settings),
        # † after a capped row's count (the note under the table says what it means); the CSV's count is a number
        Column("seeds", lambda row: seeds(row) + (CAPPED if row.capped else ""), full=lambda row: [seeds(row)],
               terminal="seeds", terminal_cell=lambda row:   # there: 1 for one seed
               (seeds(row) or ("1" if row.complete else "")) + (CAPPED if row.capped else "")),
        *(Column(name, cell=lambda row, t=task: _mean_std(row.dev.get(t), row.dev_std.get(t)),
                 full=lambda row, t=task: [_full(row.dev.get(t)), _full(row.dev_std.get(t))],
                 csv=(name, f"{name} std"), terminal=task.upper())
          for task, name in zip(tasks, (metric_column(task, known) for task in tasks))),
        Column("average", cell=lambda row: _mean_std(row.average, row.average_std),
               full=lambda row: [_full(row.average), _full(row.average_std)], csv=("average", "average std"),
               terminal="average",   # blank there for a single-task row: its one task's metric, not an average
               terminal_cell=lambda row: "" if row.baseline == "ST" else _mean_std(row.average, row.average_std)),
        Column(delta, cell=lambda row: "" if row.vs_ft is None else f"{row.vs_ft.observed:+.3f}",
               full=lambda row: _versus(row.vs_ft)[:1], terminal=delta),
        Column(INTERVAL, cell=lambda row: "" if row.vs_ft is None else _interval(row.vs_ft),
               full=lambda row: _versus(row.vs_ft)[1:], csv=tuple(f"{INTERVAL} {end}" for end in ENDS),
               terminal=INTERVAL),
        *(by_task_column(task, "alone", baseline) for task in alone),
        *(by_task_column(task, "baseline", baseline) for task in versus),
        Column("wall (min)", cell=lambda row: "" if row.wall_minutes is None else f"{row.wall_minutes:.1f}",
               full=lambda row: [_full(row.wall_minutes)]),
        Column("status", RunRow.status_cell, terminal="status", align="---",
               terminal_cell=lambda row: row.capped if row.complete else _shortened(row.status, MAX_STATUS_WIDTH))]


def by_task_column(task: str, kind: str, baseline: str | None) -> Column:
    """``task``'s Δ of ``kind`` (``RunRow.differences``) with its interval."""
    name = task_column(task, kind, baseline)
    return Column(name, cell=lambda row: _difference(row.differences(kind).get(task)),
                  full=lambda row: _versus(row.differences(kind).get(task)),
                  csv=(name, *(f"{name} {end}" for end in ENDS)), terminal=name, aside=True)


def report_tasks(rows: list[RunRow]) -> dict[str, Task]:
    """The built-in tasks, then those the runs declare (``--task_file``)."""
    known = dict(BUILTIN_TASKS)
    for row in rows:
        known |= {name: task for name, task in row.known_tasks.items() if name not in known}
    return known


def table_tasks(rows: list[RunRow]) -> list[str]:
    """The tasks any of the rows has dev metrics for, in task-table order (the benchmark's three if none)."""
    return [task for task in report_tasks(rows) if any(task in row.dev for row in rows)] or list(DEFAULT_TASKS)


def compared_tasks(rows: list[RunRow], kind: str) -> list[str]:
    """The tasks any row has a per-task Δ of ``kind`` on, in task-table order."""
    return [task for task in report_tasks(rows) if any(task in row.differences(kind) for row in rows)]


def latex_headers(rows: list[RunRow], baseline: str | None = None) -> Headers:
    """The column names of the LaTeX table (``latex.py``): the finished rows' settings, tasks and Δs, named as
    here, and the sentence on the settings every finished row has alike."""
    done = [row for row in rows if row.complete]
    known = report_tasks(done)
    by_task = [(task, task_column(task, kind, baseline), kind)
               for kind in ("alone", "baseline") for task in compared_tasks(done, kind)]
    shown = shown_settings(done)
    return Headers({task: metric_column(task, known) for task in table_tasks(done)}, delta_column(baseline), INTERVAL,
                   by_task, tuple(shown.columns), shown.all_rows)


def columns_of(rows: list[RunRow], baseline: str | None = None) -> list[Column]:
    """The columns of a table of ``rows``: the settings they differ in, their tasks, and their "vs alone" and
    "Δ vs ROW" ones."""
    return table_columns(table_tasks(rows), compared_tasks(rows, "alone"), baseline, report_tasks(rows),
                         compared_tasks(rows, "baseline"), shown_settings(rows).columns)


def collect_runs(folder: str | Path, sort: str = "average") -> list[RunRow]:
    """The table's rows for the runs in ``folder``: seeds pooled, sorted."""
    return sort_rows(pool_seeds(read_runs(folder)), sort)


def read_runs(folder: str | Path) -> list[RunRow]:
    """Every run in ``folder`` (immediate subfolders, by name); raises if ``folder`` is none, or a run folder."""
    folder = Path(folder)
    if not folder.is_dir():
        raise FileNotFoundError(f"{folder}: no such folder (give the parent folder of run folders, e.g. predictions/)")
    own = next((name for name in ("metrics.json", "checkpoint") if (folder / name).exists()), None)
    if own is not None:
        raise ValueError(f"{folder} is a run folder (it holds {own}); give the parent folder of run folders, "
                         f"e.g. {folder.parent}")
    return [read_run(sub) for sub in sorted(folder.iterdir()) if looks_like_run(sub)]


def pool_seeds(runs: list[RunRow]) -> list[RunRow]:
    """One row per finished configuration (its runs in the given order, each seed once: a rerun of a seed is no
    second sample of the seeds); every other run as it is."""
    groups: dict[object, list[RunRow]] = {}
    for run in runs:
        key = run.group_key if run.complete and run.group_key is not None else id(run)
        seeds = groups.setdefault(key, [])
        if twin := next((s for s in seeds if s.seed == run.seed), None):
            print(f"note: {run.run} is {twin.run} again (the same configuration and seed {run.seed}): pooled once, "
                  f"as {twin.run}", file=sys.stderr)
            continue
        seeds.append(run)
    return [pooled(seeds) if seeds[0].complete else seeds[0] for seeds in groups.values()]


def pooled(seeds: list[RunRow]) -> RunRow:
    """The row of one configuration's finished seeds: each metric's mean and sample std, the mean wall time."""
    names = {s.run.removesuffix(f"-s{s.seed}") for s in seeds}
    walls = [s.wall_minutes for s in seeds if s.wall_minutes is not None]
    per_task = {task: [s.dev[task] for s in seeds] for task in seeds[0].dev}
    averages = [s.average for s in seeds]
    return replace(seeds[0], run=names.pop() if len(names) == 1 else seeds[0].run, seed_runs=seeds,
                   dev={task: float(np.mean(values)) for task, values in per_task.items()},
                   dev_std={task: _std(values) for task, values in per_task.items()}, average=float(np.mean(averages)),
                   average_std=_std(averages), wall_minutes=float(np.mean(walls)) if walls else None)


def seed_group_key(config, inputs=None, tasks=None) -> str | None:
    """Runs with the same key differ only in their seed and in how they report: one row of the table (None: no
    saved config, a row of its own). The config is read as this version reads it, so seeds run before and after a
    field was added pool; recorded input file hashes stand for the data and model folders. ``tasks``: the tasks
    the run trained, where its config does not say."""
    if not isinstance(config, dict) or not config:
        return None
    said_tasks = saved_flag(config, "tasks") is not None
    with suppress(ValueError, TypeError, KeyError, AttributeError):   # one this version refuses is kept as saved
        config = RunConfig.from_dict(config).to_dict()
    if tasks and not said_tasks and isinstance(config.get("train"), dict):
        config = {**config, "train": {**config["train"], "tasks": ",".join(tasks)}}
    files = {name: entry.get("sha256") for name, entry in (inputs or {}).items() if isinstance(entry, dict)}
    if files and None not in files.values():
        config = {**config, "inputs": files}
        for section, folder in (("data", "data_dir"), ("model", "model")):
            if isinstance(config.get(section), dict) and folder in config[section]:
                config[section] = {**config[section], folder: None}
    kept = {section: ({name: value for name, value in values.items() if name not in SEED_FREE_FIELDS.get(section, ())}
                      if isinstance(values, dict) else values)
            for section, values in config.items() if section not in SEED_FREE_SECTIONS}
    for idea in extensions.ideas():   # an extension's own seed-dependent settings (Idea.seed_free)
        if isinstance(kept.get(idea.name), dict):
            kept[idea.name] = idea.seed_free(kept[idea.name], saved_flag(config, "seed"))
    return json.dumps(kept, sort_keys=True, default=str)


def sort_rows(rows: list[RunRow], sort: str = "average") -> list[RunRow]:
    """Finished runs first (by average, highest first, or by name), the single-task rows after the others and
    the capped ones after those (by N), then the rest by name."""
    if sort not in ("average", "name"):
        raise ValueError(f"sort must be 'average' or 'name', got {sort!r}")
    done = sorted((r for r in rows if r.complete), key=lambda r: (bool(r.capped), r.dev_cap or 0, r.baseline == "ST",
                                                                 -r.average if sort == "average" else 0, r.run))
    return done + sorted((r for r in rows if not r.complete), key=lambda r: r.run)


@dataclass
class Alike:
    """The finished rows scored on the same dev examples (``cap``: None or ``--max_eval_examples N``) and their
    baselines among them: only these are compared with each other."""
    cap: int | None
    fts: dict          # pooling -> the FT row (or the --baseline row, under None alone); {} when there is none
    alone: dict        # task -> pooling -> its ST row, for the tasks that have one
    multitask: list[RunRow]

    def label(self) -> str:
        return "uncapped" if self.cap is None else f"capped at {self.cap}"


def alike_groups(scored: list[RunRow], baseline: str | None = None) -> list[Alike]:
    """``scored`` split by their cap, the uncapped first, then by N, each with its FT rows (or the row named
    ``baseline``) and ST rows."""
    groups = []
    for cap in sorted({row.dev_cap for row in scored}, key=lambda cap: (cap is not None, cap or 0)):
        done = [row for row in scored if row.dev_cap == cap]
        if baseline is None:
            fts = _baselines(done, lambda row: row.baseline == "FT")
        else:
            fts = {None: named[0]} if (named := [row for row in done if row.run == baseline]) else {}
        alone = {task: _baselines(done, lambda row: row.baseline == "ST" and task in row.dev)
                 for task in report_tasks(done)}
        groups.append(Alike(cap, fts, {task: by_pooling for task, by_pooling in alone.items() if by_pooling},
                            [row for row in done if row.baseline != "ST" and len(row.dev) >= 2]))
    return groups


def compare_to_baselines(rows: list[RunRow], resamples: int = 1000, seed: int = 0,
                         data_dir: str | Path | None = None, baseline: str | None = None) -> tuple[str, list[str]]:
    """Set ``vs_ft`` of every finished multi-task row but the FT baselines (paired bootstrap against the FT row of
    the same pooling, else the first FT row by name; against the row named ``baseline`` instead, when given, with
    ``vs_baseline``: each task's Δ against it) and ``vs_alone`` for each task that has an ST row; return the footer
    and the notes on rows whose interval could not be computed. ``data_dir`` replaces the runs' own data folders.
    Only rows scored on the same dev examples are compared (``alike_groups``); a search's trial never is."""
    delta = delta_column(baseline)
    scored = [row for row in rows if row.complete and not row.val_fraction]
    notes = [f"note: {row.run}: not compared ({row.capped}, --val_fraction: a search trial)"
             for row in rows if row.complete and row.val_fraction]
    if baseline is not None and not any(row.run == baseline for row in scored):   # one line: no row of that name
        trial = any(row.run == baseline for row in rows if row.val_fraction)
        raise ValueError(f"--baseline {baseline}: no finished row of that name"
                         f"{' (a search trial is no baseline)' if trial else ''}; the rows are "
                         f"{', '.join(row.run for row in scored) or 'none'}")
    if resamples == 0:
        return f"{delta} and {INTERVAL}: not computed (--bootstrap 0).", []
    groups = alike_groups(scored, baseline)
    if not any(group.fts or group.alone for group in groups):
        return f"{delta} and {INTERVAL}: {_no_ft(rows)}.", notes
    # (row, its baseline, the task or None for the average, the kind of per-task Δ, the column's name)
    pairs = []
    for group in groups:
        fts, alone, multitask = group.fts, group.alone, group.multitask
        pairs += [(row, _pick(fts, row), None, None, delta) for row in multitask if fts and _pick(fts, row) is not row]
        pairs += [(row, _pick(alone[task], row), task, "alone", task_column(task, "alone")) for row in multitask
                  for task in row.dev if task in alone]
        if baseline is not None and fts:   # each task against the named row too: is any task lower beyond its interval?
            pairs += [(row, fts[None], task, "baseline", task_column(task, "baseline", baseline)) for row in multitask
                      if row is not fts[None] for task in row.dev if task in fts[None].dev]
    runs = {run.folder: DevSource(run.folder, str(data_dir) if data_dir else run.data_dir, tuple(run.dev),
                                    run.known_tasks or BUILTIN_TASKS, run.dev_cap)
            for row, base, *_ in pairs for run in (*row.seed_runs, *base.seed_runs)}
    scores, failed = score_runs(runs.values(), resamples, seed)

    def seed_scores(row: RunRow, role: str = ""):
        for run in row.seed_runs:
            if run.folder in failed:
                raise Unavailable(f"{role}{failed[run.folder]}")
        return [scores[run.folder] for run in sorted(row.seed_runs, key=lambda run: str(run.seed))]
    for row, base, task, kind, column in pairs:
        same_seeds = sorted(str(run.seed) for run in row.seed_runs) == sorted(str(run.seed) for run in base.seed_runs)
        try:
            difference = paired_difference(seed_scores(row), seed_scores(base, f"baseline {base.run}: "), task=task,
                                           seed=seed, same_seeds=same_seeds)
        except Unavailable as err:
            notes.append(f"note: {row.run}: no {column}: {err}")
            continue
        if task is None:
            row.vs_ft = difference
        else:
            row.differences(kind)[task] = difference
    return _footer(rows, groups, baseline, resamples, seed), notes


def _no_ft(rows: list[RunRow]) -> str:
    """Why no row has a Δ vs FT: no finished FT row, or only search trials of FT."""
    if any(row.complete and row.baseline == "FT" for row in rows):
        return "no finished FT row scored on dev to compare with (the FT rows are search trials, --val_fraction)"
    return "no finished FT row to compare with"


def _against(groups: list[Alike], baseline: str | None) -> str | None:
    """The baselines of the averages in words (each group's, where several have one); None when none has one."""
    named = [(group, baseline or _named(group.fts, "FT")) for group in groups if group.fts]
    if not named:
        return None
    if len(named) == 1:
        group, name = named[0]
        return name if group.cap is None else f"{name} (capped alike, --max_eval_examples {group.cap})"
    return (f"the {baseline or 'FT'} row scored on the same dev examples ("
            + "; ".join(f"{group.label()}: {name}" for group, name in named) + ")")


def _not_alike(groups: list[Alike], delta: str, baseline: str | None) -> list[str]:
    """A sentence for each column where a row has no cell because no baseline was scored on its dev examples."""
    sentences = []
    if any(group.fts for group in groups):
        reasons = [f"{', '.join(row.run for row in group.multitask)}: no {_alike_row(baseline or 'FT', group)}"
                   for group in groups if not group.fts and group.multitask]
        if reasons:
            sentences.append(f"No {delta}: " + "; ".join(reasons) + ".")
    for task in {task: None for group in groups for task in group.alone}:
        reasons = [f"{', '.join(row.run for row in lacking)}: no {_alike_row(f'{task} ST', group)}"
                   for group in groups if task not in group.alone
                   for lacking in [[row for row in group.multitask if task in row.dev]] if lacking]
        if reasons:
            sentences.append(f"No {task_column(task, 'alone')}: " + "; ".join(reasons) + ".")
    return sentences


def _alike_row(kind: str, group: Alike) -> str:
    """"FT row capped alike (--max_eval_examples 200)" or "uncapped FT row": the baseline a group lacks."""
    return f"uncapped {kind} row" if group.cap is None else f"{kind} row capped alike (--max_eval_examples {group.cap})"


def _footer(rows: list[RunRow], groups: list[Alike], baseline: str | None, resamples: int, seed: int) -> str:
    """The sentences under the table: what the rows were compared with (or why none was), how, and where a row has
    no baseline scored on its dev examples."""
    delta, against = delta_column(baseline), _against(groups, baseline)
    sentences = [f"{delta} = average minus that of {against}, both from the dev prediction files;"
                 if against else f"{delta}: {_no_ft(rows)}.",
                 f"{INTERVAL} = two-level paired bootstrap percentile interval ({resamples} resamples of each task's "
                 "dev examples, and in each of the seeds, the same draws for a row and its baseline of the same seeds; "
                 f"seed {seed}; a row of one seed has no seed spread to draw: its interval is the examples' alone); "
                 f"* = the interval excludes 0."]
    alone = [(group, task, chosen) for group in groups for task, chosen in group.alone.items()]
    if alone:
        sentences.append(f"<TASK> {ALONE} = that task's dev metric minus that of its single-task row ("
                         + "; ".join(f"{task}{'' if group.cap is None else f' {group.label()}'}: {_named(chosen, 'ST')}"
                                     for group, task, chosen in alone)
                         + "), with the same interval of that task's metric alone.")
    if any(row.vs_baseline for group in groups for row in group.multitask):
        sentences.append(f"<TASK> {delta} = that task's dev metric minus that of {against}, with the same interval "
                         f"of that task's metric alone.")
    return " ".join([*sentences, *_not_alike(groups, delta, baseline)])


def _baselines(rows: list[RunRow], is_one) -> dict:
    """Pooling -> the first baseline row of that pooling by name, ``None`` -> the first of all (or {})."""
    found = sorted((row for row in rows if is_one(row)), key=lambda row: row.run)
    by_pooling = {}
    for row in found:
        by_pooling.setdefault(row.pooling, row)
    return {**by_pooling, None: found[0]} if found else {}


def _pick(baselines: dict, row: RunRow) -> RunRow:
    return baselines.get(row.pooling, baselines[None])


def _named(baselines: dict, kind: str) -> str:
    """The baseline rows in words: one name, or each pooling's with the fallback."""
    poolings = {pooling: row for pooling, row in baselines.items() if pooling is not None}
    if len(poolings) == 1:
        return baselines[None].run
    return (f"the {kind} row of the same pooling (" + ", ".join(f"{pooling or '?'}: {row.run}" for pooling, row in
                                                      poolings.items()) + f"; else {baselines[None].run})")


def render_markdown(rows: list[RunRow], footer: str = "", baseline: str | None = None, title: str = "") -> str:
    """A Markdown table (metrics to 3 decimals, wall time to 0.1 minute) followed by the legend and ``footer``; above
    it a caption line where there is one: ``title`` (``--caption``) and the settings every row has alike."""
    table = columns_of(rows, baseline)
    lines = [_md_line([column.header for column in table]), _md_line([column.align for column in table])]
    lines += [_md_line([column.cell(row) for column in table]) for row in rows]
    caption = caption_opening(title, shown_settings(rows).all_rows)
    footer = _with_cap_note(rows, footer)
    return ((caption + "\n\n" if caption else "") + "\n".join(lines) + "\n\n" + LEGEND + "\n"
            + ("\n" + footer + "\n" if footer else ""))


def render_compact(rows: list[RunRow], footer: str = "", baseline: str | None = None,
                   width: int = TERMINAL_WIDTH) -> str:
    """The terminal view, ``width`` columns at most: the columns with a terminal header, then a block of the aside
    ones for the rows that have them, then the footer, wrapped; run names and statuses cut to fit, and the columns
    that do not fit beside them in a block of their own (``_column_groups``): a number is never cut."""
    table = columns_of(rows, baseline)
    run, *shown = [column for column in table if column.terminal]
    blocks = []
    for aside in (False, True):   # the main block, every row; then the aside block, the rows with a cell in it
        for group in _column_groups(run, [column for column in shown if column.aside == aside], rows, width):
            block = [run, *group]
            lines = [[(column.terminal_cell or column.cell)(row) for column in block] for row in rows]
            lines = [line for line in lines if not aside or any(line[1:])]
            if lines or not aside:
                blocks.append(_aligned([[column.terminal for column in block], *lines], width))
    footer = _with_cap_note(rows, footer)
    notes = [textwrap.fill(footer, width)] if footer else []
    return "\n\n".join("\n".join(block) for block in blocks + [notes] if block) + "\n"


def _column_groups(run: Column, columns: list[Column], rows: list[RunRow], width: int) -> list[list[Column]]:
    """``columns`` in groups, each as many as fit ``width`` beside the run column cut to ``MIN_RUN_WIDTH``, as a
    wide table wraps; an interval stays with its Δ, and the status (cut to fit instead) with the column before it."""
    def cells_width(column: Column) -> int:
        return max(len(text) for text in [column.terminal, *map(column.terminal_cell or column.cell, rows)])

    def needed(group: list[Column]) -> int:
        widths = [min(MIN_RUN_WIDTH, cells_width(run)), *(cells_width(c) for c in group if c.terminal != "status")]
        return sum(widths) + 2 * (len(widths) - 1)

    units: list[list[Column]] = []
    for column in columns:
        if units and column.terminal in (INTERVAL, "status"):
            units[-1].append(column)
        else:
            units.append([column])
    groups: list[list[Column]] = [[]]
    for unit in units:
        if groups[-1] and needed([*groups[-1], *unit]) > width:
            groups.append([])
        groups[-1] += unit
    return groups


def _with_cap_note(rows: list[RunRow], footer: str) -> str:
    """``footer``, and where a row is capped, the sentence saying what that means."""
    notes = [CAPPED_NOTE] if any(row.dev_cap is not None and not row.val_fraction for row in rows) else []
    notes += [VAL_NOTE] if any(row.val_fraction for row in rows) else []
    return " ".join(part for part in (footer, *notes) if part)


def _aligned(table: list[list[str]], width: int) -> list[str]:
    """Rows of cells as aligned text lines (the first and a "status" column left, others right), at most
    ``width`` characters: the first column is cut to fit (not below ``MIN_RUN_WIDTH``), then the line's end."""
    def lines(run_width: int | None) -> list[str]:
        cells = [[_shortened(line[0], run_width), *line[1:]] for line in table]
        widths = [max(len(line[i]) for line in cells) for i in range(len(table[0]))]
        left = {0, len(widths) - 1} if table[0][-1] == "status" else {0}
        return ["  ".join(cell.ljust(w) if i in left else cell.rjust(w) for i, (cell, w) in
                          enumerate(zip(line, widths))).rstrip() for line in cells]

    text = lines(None)
    overflow = max(map(len, text)) - width
    if overflow > 0:
        first = max(len(line[0]) for line in table)
        text = [_shortened(line, width) for line in lines(max(MIN_RUN_WIDTH, first - overflow))]
    return text


def _shortened(text: str, most: int | None) -> str:
    """``text`` cut to ``most`` characters, its end marked with "…"."""
    return text if most is None or len(text) <= most else text[:most - 1] + "…"


def write_csv(rows: list[RunRow], path: str | Path, baseline: str | None = None) -> None:
    """The Markdown table's rows, numbers at full precision (UTF-8, ✓/×)."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    table = columns_of(rows, baseline)
    writer.writerow([name for column in table for name in column.csv_headers()])
    writer.writerows([cell for column in table for cell in column.csv_cells(row)] for row in rows)
    write_text_atomic(path, buffer.getvalue())


def forest_panels(rows: list[RunRow], baseline: str | None = None) -> list[tuple[str, list[tuple[str, Difference]]]]:
    """The forest plot's panels, each (x-axis label, [(row, difference)]): the average's Δ vs FT (or the
    ``baseline`` row), then each task's Δ vs its single-task row, then vs the ``baseline`` row; none empty."""
    def label(row: RunRow) -> str:   # the row and how many seeds its interval pools
        return f"{row.run} ({count(len(row.seed_runs) or 1, 'seed')})"
    panels = [(f"Δ overall dev score vs {baseline or 'FT'}", [(label(row), row.vs_ft) for row in rows if row.vs_ft])]
    known = report_tasks(rows)
    for kind, against in (("alone", "alone"), ("baseline", baseline)):
        panels += [(f"Δ {metric_column(task, known)} vs {against}", [(label(row), row.differences(kind)[task])
                                                                     for row in rows if task in row.differences(kind)])
                   for task in compared_tasks(rows, kind)]
    return [(name, lines) for name, lines in panels if lines]


def write_forest(rows: list[RunRow], path: Path, baseline: str | None = None) -> bool:
    """``forest_panels`` as a PNG; False (no stale picture left) when there is none or matplotlib is missing."""
    panels = forest_panels(rows, baseline)
    if panels:
        try:
            plot_forest(panels, path)
            return True
        except MatplotlibMissing as err:
            print(f"note: {err}", file=sys.stderr)
    path.unlink(missing_ok=True)
    return False


def looks_like_run(path: Path) -> bool:
    """A run folder: metrics.json, checkpoint/ or prediction files; not minbert-predict's output folder, whose
    records name the run it used (the README's smoke writes one beside the runs)."""
    if not path.is_dir() or holds_predictions_only(path):
        return False
    return (path / "metrics.json").is_file() or (path / "checkpoint").is_dir() or any(path.glob("*-output.csv"))


def read_run(folder: Path) -> RunRow:
    """One run folder -> its row; never raises on a missing, corrupt or partial ``metrics.json``. A run that used
    a removed extension is a row of its own saying so, neither pooled nor compared."""
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
    if refused := removed_extension(saved_values(config)):   # its row would pass for another: no row of the table
        return RunRow(folder.name, f"refused: {refused}", folder=folder)
    try:
        known = saved_tasks(config)   # the run's own tasks (--task_file) get their columns too
    except ValueError:
        known = dict(BUILTIN_TASKS)   # a hand-edited declaration: its task's scores are left out
    flags = {idea.name: idea.on(config) for idea in extensions.ideas() if idea.column}
    pooling, data_dir = saved_flag(config, "pooling"), data.get("data_dir") or saved_flag(config, "data_dir")
    wall, status = _number(data.get("wall_seconds")), _status(data)
    dev = data.get("dev") if status == RunStatus.FINISHED and isinstance(data.get("dev"), dict) else {}
    dev = {task: _number(value) for task, value in dev.items() if task in known}
    named = saved_flag(config, "tasks")   # without it (an older or hand-made run) its dev metrics tell
    tasks = [t for t in named.split(",") if t.strip()] if isinstance(named, str) else list(dev)
    row = RunRow(folder.name, status, flags, None if pooling is None else str(pooling).upper(),
                 _baseline(saved_flag(config, "option", "finetune"), config, len(tasks)),
                 settings=run_settings(config) if config else None, dev=dev,
                 wall_minutes=None if wall is None else wall / 60.0, folder=folder,
                 data_dir=str(data_dir) if data_dir else None, seed=saved_flag(config, "seed"),
                 group_key=seed_group_key(config, data.get("inputs"), tasks),
                 dev_cap=_whole_number(saved_flag(config, "max_eval_examples")),
                 dev_counts=_counts(data.get("dev_examples")),
                 val_fraction=_number(saved_flag(config, "val_fraction", 0.0)) or None, known_tasks=known)
    if status == RunStatus.FINISHED:
        if dev and None not in dev.values():
            row.average = overall_score(dev, known)
        else:
            row.status = "finished, dev metrics missing"
    return row


def _counts(value) -> dict[str, int]:
    """metrics.json's ``dev_examples`` (task -> examples scored), its whole numbers only."""
    return {task: n for task, n in value.items() if _whole_number(n) is not None} if isinstance(value, dict) else {}


def _status(data: dict) -> str:
    status = data.get("status")
    if status is None:  # runs written before the status field: finished iff they have dev metrics
        status = RunStatus.FINISHED if isinstance(data.get("dev"), dict) else "incomplete"
    if status == RunStatus.RUNNING:
        return "incomplete (running)"
    if status == RunStatus.FAILED:
        error = " ".join(str(data.get("error") or "no error message").split())
        return "failed: " + _shortened(error, 100)
    return str(status)


def _baseline(option, config: dict, task_count: int) -> str:
    """PT (frozen encoder), ST (one task trained alone), FT (fine-tuning, several tasks, no idea of the registry
    on: no extension, ``--rr min``, one shared encoder) or ""."""
    if option == "pretrain":
        return "PT"
    if task_count == 1:
        return "ST"
    return "FT" if option == "finetune" and not any(idea.on(config) for idea in extensions.ideas()) else ""


def _whole_number(value) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _number(value) -> float | None:
    finite = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    return float(value) if finite else None


def _std(values: list[float]) -> float | None:
    """The sample std (ddof 1); None for one value, which has no spread to show."""
    return float(np.std(values, ddof=1)) if len(values) >= 2 else None


def _interval(d: Difference) -> str:
    return f"[{d.low:+.3f}, {d.high:+.3f}]" + (" *" if d.excludes_zero else "")


def _difference(d: Difference | None) -> str:
    """``+0.004 [-0.002, +0.010]`` (`` *`` when the interval excludes 0); blank when there is none."""
    return "" if d is None else f"{d.observed:+.3f} {_interval(d)}"


def _versus(d: Difference | None) -> list[str]:
    """A difference's CSV cells: Δ, its interval's ends at full precision and whether the interval excludes 0."""
    return [""] * 4 if d is None else [*map(_full, (d.observed, d.low, d.high)), ON if d.excludes_zero else OFF]


def _mean_std(mean: float | None, std: float | None) -> str:
    """``0.482 ± 0.006``; ``0.482`` without a std; blank when unknown."""
    return "" if mean is None else f"{mean:.3f}" + ("" if std is None else f" ± {std:.3f}")


def _full(value: float | None) -> str:
    return "" if value is None else repr(float(value))


def _md_line(cells: list[str]) -> str:
    return "| " + " | ".join(c.replace("|", "\\|").replace("\n", " ") for c in cells) + " |"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m training.tools.report", description=__doc__.split("\n\n")[0])
    parser.add_argument("folders", nargs="+", type=Path, help="parent folder(s) of run folders")
    parser.add_argument("--out", type=Path, help="write PREFIX.md, PREFIX.csv and PREFIX-forest.png, and PREFIX.tex "
                                                 "with --format latex (default: write nothing, print the table only)")
    parser.add_argument("--format", choices=["markdown", "latex"], default="markdown",
                        help="the table printed: markdown (default: the compact view, --full the whole Markdown "
                             "table) or latex (a booktabs table to \\input, its finished rows; --out writes it to "
                             "PREFIX.tex too)")
    parser.add_argument("--full", action="store_true",
                        help="print the whole Markdown table (every column) instead of the compact view")
    parser.add_argument("--sort", choices=["average", "name"], default="average",
                        help="order of the finished runs (default: average, highest first)")
    parser.add_argument("--baseline", default=None, metavar="ROW",
                        help="the row (its name in the run column, seeds pooled) every average, and each task's "
                             "metric, is compared with (default: the FT row of the same pooling, averages only)")
    parser.add_argument("--bootstrap", type=int, default=1000, metavar="N",
                        help="bootstrap resamples of the dev sets for the interval of Δ vs FT (default: 1000; 0: off)")
    parser.add_argument("--bootstrap_seed", type=int, default=0, help="seed of the resamples (default: 0)")
    parser.add_argument("--data_dir", type=Path, default=None,
                        help="folder with the dev files' gold labels (default: each run's data_dir in metrics.json)")
    paper = parser.add_argument_group("a table for a paper")
    paper.add_argument("--caption", default="", metavar="TEXT",
                       help="the table's caption, plain text (escaped for LaTeX): the first sentence of the LaTeX "
                            "caption, and a line above the Markdown table; the settings every row has alike follow it")
    paper.add_argument("--label", default=None, metavar="TEXT",
                       help="the LaTeX table's \\label, e.g. tab:ablation (letters, digits and : . _ -; default: tab: "
                            "and the --out prefix's name, tab:ablation without --out); with --format latex only")
    paper.add_argument("--row_names", type=Path, default=None, metavar="FILE",
                       help="display names of rows: a UTF-8 file of KEY=NAME lines, KEY a row as the table names it "
                            "(without its mark, e.g. ablate-ft), NAME its name in every view (--baseline takes "
                            "either); blank lines and lines starting with # are skipped")
    paper.add_argument("--row_name", action="append", default=[], metavar="KEY=NAME",
                       help="a row's display name, as a line of --row_names (repeatable; it wins over the file's)")
    args = parser.parse_args(argv)
    return run_command(lambda: execute(args))


def execute(args: argparse.Namespace) -> int:
    """The report's work; its errors (a missing folder, an unwritable --out, a bad --row_names) become one line in
    ``main``."""
    if args.bootstrap < 0 or args.bootstrap_seed < 0:
        raise ValueError(f"--bootstrap and --bootstrap_seed must be >= 0, got {args.bootstrap} and "
                         f"{args.bootstrap_seed}")
    if args.out is not None and (args.out.name in ("", ".", "..") or args.out.is_dir()):
        raise ValueError(f"--out {args.out} is a folder; give a file prefix, e.g. {args.out / 'ablation'} (it writes "
                         f"PREFIX.md, PREFIX.csv{', PREFIX.tex' if args.format == 'latex' else ''} and "
                         f"PREFIX-forest.png)")
    label = table_label(args)
    names = row_names(args.row_names, args.row_name)   # before any run is read: a bad file is refused at once
    # each run folder once, however often its parent is given (DIR DIR/): not a rerun of itself, nor listed twice
    runs = list({run.folder.resolve(): run for folder in args.folders for run in read_runs(folder)}.values())
    pooled_rows = pool_seeds(runs)
    for note in name_rows(pooled_rows, names):
        print(note, file=sys.stderr)
    rows = sort_rows(pooled_rows, args.sort)
    baseline = names.get(args.baseline, args.baseline)   # --baseline may name a row by its folder or its new name
    if not rows:
        print(f"note: no run folders in {', '.join(map(str, args.folders))}", file=sys.stderr)
    footer, notes = compare_to_baselines(rows, args.bootstrap, args.bootstrap_seed, args.data_dir, baseline)
    for note in notes:
        print(note, file=sys.stderr)
    markdown = render_markdown(rows, footer, baseline, args.caption)
    latex = None
    if args.format == "latex":   # from the same rows, after the same comparison
        commented = " ".join([footer, *notes])   # the caption says "the comments above say why": the notes too
        latex = render_latex(rows, latex_headers(rows, baseline), commented, baseline, args.bootstrap,
                             args.bootstrap_seed, label, args.caption)
    print(latex or (markdown if args.full else render_compact(rows, footer, baseline)), end="")
    prefix = args.out
    if prefix is None:  # the table on stdout only: nothing is written into the given folders
        print(f"({len(rows)} rows from {len(runs)} runs; nothing written: --out PREFIX writes PREFIX.md, "
              f"PREFIX.csv{', PREFIX.tex' if latex else ''} and PREFIX-forest.png)", file=sys.stderr)
        return 0
    write_text_atomic(prefix.with_name(prefix.name + ".md"), markdown)
    write_csv(rows, prefix.with_name(prefix.name + ".csv"), baseline)
    if latex:
        write_text_atomic(prefix.with_name(prefix.name + ".tex"), latex)
    forest = write_forest(rows, prefix.with_name(prefix.name + "-forest.png"), baseline)
    print(f"({len(rows)} rows from {len(runs)} runs; wrote {prefix}.md, {prefix}.csv"
          f"{f', {prefix}.tex' if latex else ''}{f' and {prefix}-forest.png' if forest else ''})", file=sys.stderr)
    return 0


def table_label(args: argparse.Namespace) -> str:
    """The LaTeX table's ``\\label``: ``--label``, checked, else tab: and the ``--out`` prefix's name (tab:ablation
    without ``--out``); ``--label`` without ``--format latex`` is refused (no other view has a label)."""
    if args.label is not None:
        if args.format != "latex":
            raise ValueError(f"--label {args.label}: only the LaTeX table has a label; add --format latex")
        return checked_label(args.label)
    return "tab:ablation" if args.out is None else label_of(args.out.name)


if __name__ == "__main__":
    from training.tools.starting import python_handlers_back
    python_handlers_back()
    sys.exit(main())
