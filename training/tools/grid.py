"""The ablation grid's rows, seeds and budget, derived from the registry of extensions, and ``plan``: the runs
of a grid, which ``minbert-grid`` (on Ray) and ``scripts/ablate.sh`` (through ``ablate_plan``) both run:

    python -m training.tools.grid                  # one row a line: "<name> <run_multitask.py flags...>"
    python -m training.tools.grid --budget         # the budget flags of every run, one a line
    python -m training.tools.grid --stage_steps    # the flags that ablate.sh --stage_steps sets, one a line

Which rows, and why: docs/ablation.md, "The grid and its table". Pooling is always given, and so are the
``pinned`` flags of every idea a row is not about, so the table does not depend on the defaults; this module names
no idea. A *named* grid (``NAMED_GRIDS``, ``minbert-grid --grid NAME``) is a documented table's rows and budget
written out flag by flag, so that it keeps its flags when the registry grows.
"""
from __future__ import annotations

import argparse
import itertools
import json
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from .command import run_command
from .. import extensions
from ..configuration.sections import DEFAULT_SEED
from ..extensions.base import Extension
from ..configuration.task_declarations import DEFAULT_TASKS

ROOT = Path(__file__).resolve().parents[2]    # where run_multitask.py is, in the clone or installed
# The multi-task budget of every run (the extensions add theirs): one epoch of 30 round-robin rounds.
BUDGET = {"--epochs": "1", "--max_steps_per_epoch": "30"}
# The best combination of the CS224N default-project reports this grid follows.
PUBLISHED = ("published", ["--pre_qqp", "--joint_loss", "--smart", "--scl"])


# every run's flags checked in one Python start before anything runs, as the run checks them and against the model
CHECK = """
import contextlib, io, json, sys
sys.path.insert(0, sys.argv[1])
import run_multitask
from minbert.errors import describe
from training.harness.runs import check_fits_model
from training.harness.trackers import check_installed
for name, flags in json.loads(sys.argv[2]):
    stderr = io.StringIO()
    try:
        with contextlib.redirect_stderr(stderr):
            config = run_multitask.parse_config(flags).validate()
            check_installed(config.output.trackers())   # --report_to mlflow without mlflow: said before Ray starts
    except SystemExit:   # a parser error; or -h/--help, its help on stdout and nothing on stderr
        said = stderr.getvalue().strip().splitlines() or ["-h/--help after -- (the flags: run_multitask.py --help)"]
        sys.exit(name + ": " + said[-1].split("error: ", 1)[-1])
    except (ValueError, OSError) as err:
        sys.exit(f"{name}: {describe(err)}")
    try:
        check_fits_model(config)
    except Exception as err:   # a model that does not fit, or that is not there (WeightsError)
        sys.exit(f"{name}: {describe(err)}")
"""


def first_refused(named_flags: list[tuple[str, list[str]]]) -> str | None:
    """None, or "NAME: why" for the first of (name, ``run_multitask.py`` flags) that it refuses (its parser,
    ``RunConfig.validate``, a missing tracker package, or ``check_fits_model``), in one line: a bad flag after -- fails
    once, before Ray."""
    done = subprocess.run([sys.executable, "-c", CHECK, str(ROOT), json.dumps(named_flags)], capture_output=True,
                          text=True)
    return None if done.returncode == 0 else (done.stderr.strip().splitlines() or ["flags refused"])[-1]


@dataclass(frozen=True)
class MeasuredTime:
    """A named grid's wall time as its doc measured it, at its pinned budget, on CPUs, one core and one torch thread a
    run (as ``minbert-grid`` runs by default): what the grid's time is estimated from before any of its runs has
    finished on this machine."""
    runs: int
    seconds: float       # the whole grid's wall time
    at_once: int         # runs at a time
    machine: str         # the machine, and the doc that has the measurement

    @property
    def seconds_a_run(self) -> float:
        """One run's wall time: the runs went ``at_once`` at a time."""
        return self.seconds * self.at_once / self.runs


@dataclass(frozen=True)
class NamedGrid:
    """A documented grid, pinned: its rows' flags and its budget as they were when its table was made."""
    source: str                                  # where its table is, and the commit that made it
    rows: tuple[tuple[str, tuple[str, ...]], ...]
    budget: tuple[str, ...] = ()                 # flags of every run (none: the run defaults, the full budget)
    prefix: str = ""                             # run folder: <prefix><row>-s<seed>, as the table's folders
    seeds: int = 3                               # how many seeds the table pools (the default of --seeds)
    measured: MeasuredTime | None = None         # its documented wall time, where one was measured as it runs


# The multi-task budget the named grids' tables ran with, the defaults before issue 84 (docs/defaults.md): every task
# at --batch_size and every encoder layer at --lr; given first, so that a row's own --task_batch_sizes wins.
BEFORE_ISSUE_84 = ("--task_batch_sizes", "none", "--layer_lr_decay", "1")
# Each stage at two thirds of one full --rr min epoch (189 rounds): 126 batches.
REAL_BUDGET_STAGES = tuple(word for stage in ("ucl", "scl", "lcl", "pre_qqp")
                           for word in (f"--{stage}_epochs", "1", f"--{stage}_steps", "126"))
NAMED_GRIDS = {
    # docs/grid.md, "A table in minutes": four rows at three seeds each, a sliver of an epoch, every run scored on
    # the first 300 examples of each dev file (capped alike, so the report compares them with each other), no test
    # predictions: a table with intervals on the embedded model and the real data, in minutes on 2 cores.
    "quick": NamedGrid(
        source="docs/grid.md#a-table-in-minutes",
        rows=(("ft", ("--pooling", "mean", "--private_layers", "0")),
              ("private2", ("--pooling", "mean", "--private_layers", "2")),
              ("mean-preqqp", ("--pooling", "mean", "--pre_qqp", "--private_layers", "0")),
              ("mean-joint", ("--pooling", "mean", "--joint_loss", "--private_layers", "0"))),
        budget=(*BEFORE_ISSUE_84, "--epochs", "1", "--max_steps_per_epoch", "20", "--pre_qqp_epochs", "1",
                "--pre_qqp_steps", "20",
                "--max_eval_examples", "300", "--no_test_predictions"),
        prefix="quick-",
        # docs/grid.md, "A table in minutes": 8 min 13 s for the 12 runs, 2 at once, one thread each, Ray's start
        # and the report included (82 s a run, in the 1.1-1.5 min a run the doc gives)
        measured=MeasuredTime(runs=12, seconds=8 * 60 + 13, at_once=2,
                              machine="the project's 2-core AMD EPYC with nothing else running, "
                                      "docs/grid.md#a-table-in-minutes")),
    # docs/ablation.md, "The grid at a real budget, 3 seeds a row" (0e0746a): the registry had the six
    # extensions of its columns; --private_layers 0 was then the default, and is pinned as the registry pins it.
    "ablation": NamedGrid(
        source="docs/ablation.md#the-grid-at-a-real-budget-3-seeds-a-row (commit 0e0746a)",
        rows=(("ft", ("--pooling", "mean", "--private_layers", "0")),
              ("mean-preqqp", ("--pooling", "mean", "--pre_qqp", "--private_layers", "0")),
              ("mean-smart", ("--pooling", "mean", "--smart", "--private_layers", "0")),
              ("mean-scl", ("--pooling", "mean", "--scl", "--private_layers", "0")),
              ("published", ("--pooling", "mean", "--pre_qqp", "--joint_loss", "--smart", "--scl",
                             "--private_layers", "0")),
              ("mean-all", ("--pooling", "mean", "--ucl", "--scl", "--lcl", "--pre_qqp", "--joint_loss", "--smart",
                            "--private_layers", "0")),
              ("mean-joint", ("--pooling", "mean", "--joint_loss", "--private_layers", "0"))),
        budget=(*BEFORE_ISSUE_84, "--epochs", "1", "--max_steps_per_epoch", "none", *REAL_BUDGET_STAGES),
        prefix="ablate-"),
    # docs/runs/full/README.md: the full-budget table's rows (run defaults, 3 epochs), without its teacher-annealing
    # rows (an extension since removed, issue 73; docs/ablation.md keeps their numbers).
    "full": NamedGrid(
        source="docs/runs/full/README.md (the README's full-budget and pair-head tables)",
        rows=(("st-sst", ("--tasks", "sst")), ("st-qqp", ("--tasks", "qqp")), ("st-sts", ("--tasks", "sts")),
              ("ft", ("--private_layers", "0")),
              ("private2", ("--private_layers", "2")),
              ("prop-private2", ("--rr", "proportional", "--private_layers", "2")),
              ("qqp86", ("--task_batch_sizes", "32,86,32")),
              ("cover", ("--task_batch_sizes", "45,86,32")),
              ("steps252", ("--task_batch_sizes", "32,64,24")),
              ("pcgrad-private2", ("--pcgrad",)),
              ("card", ("--pre_qqp", "--pooling", "mean", "--smart", "--scl", "--private_layers", "0")),
              ("cosine", ("--para_head", "cosine")),
              ("sts-ce", ("--sts_loss", "ce")),
              ("sum", ("--para_head", "sum", "--sts_head", "sum")),
              ("para-cosine-shared", ("--para_head", "cosine", "--pair_projection", "shared"))),
        budget=BEFORE_ISSUE_84),
    # docs/ablation.md, "Multi-task that pays by default" (issue 84), run defaults (3 epochs): the size-aware budget
    # at T = 1 and 2, with and without layer-wise decay, sampling by the gap to the single-task scores of
    # docs/runs/full (3 seeds), the per-task second stage; at one seed first (--first_seed 11711 --seeds 1), the
    # best at three; the single-task rows time each task alone on the machine of the study.
    "budget": NamedGrid(
        source="docs/ablation.md#multi-task-that-pays-by-default (docs/runs/budget)",
        rows=(("st-sst", ("--tasks", "sst")), ("st-qqp", ("--tasks", "qqp")), ("st-sts", ("--tasks", "sts")),
              ("auto-t1", ("--task_batch_sizes", "auto", "--sampling_temperature", "1")),
              ("auto-t2", ("--task_batch_sizes", "auto", "--sampling_temperature", "2")),
              ("auto-t1-lld", ("--task_batch_sizes", "auto", "--sampling_temperature", "1", "--layer_lr_decay", "0.9")),
              ("auto-t2-lld", ("--task_batch_sizes", "auto", "--sampling_temperature", "2", "--layer_lr_decay", "0.9")),
              ("gap", ("--gap_sampling", "--gap_reference", "sst=0.493,qqp=0.850,sts=0.885")),
              ("task-ft", ("--task_finetune",))),
        budget=BEFORE_ISSUE_84),
}


@dataclass(frozen=True)
class GridRun:
    """One run of the grid: its folder name and every ``run_multitask.py`` flag but ``--run_name``/``--out_dir``."""
    name: str
    row: str
    flags: tuple[str, ...]
    seed: int | None = None   # None: the run's default seed (one seed a row, the folder without -s<seed>)


def rows_of(args: argparse.Namespace) -> list[tuple[str, tuple[str, ...]]]:
    """The grid's rows: the named grid's pinned ones, else the registry's (as ablate.sh)."""
    if args.grid:
        return list(NAMED_GRIDS[args.grid].rows)
    return [(name, tuple(flags)) for name, flags in grid_rows()]


def plan(args: argparse.Namespace) -> list[GridRun]:
    """Every run of the grid, row by row and seed by seed, with its budget and ``args.extra``: the one plan that
    ``minbert-grid`` and ``scripts/ablate.sh`` both run. A field of ``args`` left None takes the grid's default."""
    named = NAMED_GRIDS.get(args.grid)
    flags = flag_values(named.budget) if named else budget()
    for flag in ("epochs", "max_steps_per_epoch"):
        if getattr(args, flag) is not None:
            flags[f"--{flag}"] = getattr(args, flag)
    if args.stage_steps is not None:
        flags |= {name: args.stage_steps for name in stage_steps_flags()}
    budget_words = tuple(word for flag, value in flags.items() for word in (flag, *([] if value is None else [value])))
    prefix = named.prefix if named else "ablate-"
    seeds = args.seeds or (named.seeds if named else 1)
    first = DEFAULT_SEED if args.first_seed is None else args.first_seed
    # ablate.sh's names: one seed and no --first_seed is the run's default seed, in a folder without -s<seed>
    seed_list = [None] if seeds == 1 and args.first_seed is None else list(range(first, first + seeds))
    return [GridRun(name=f"{prefix}{row}" + (f"-s{seed}" if seed is not None else ""), row=row, seed=seed,
                    # the seed last: it wins over a --seed among the extra flags
                    flags=(*budget_words, *row_flags, *args.extra,
                           *(("--seed", str(seed)) if seed is not None else ())))
            for row, row_flags in rows_of(args) if not args.only or row in args.only for seed in seed_list]


# what the grid sets in every run itself: where it goes and its name (``--out_dir`` goes before --)
GRID_SETS = ("--out_dir", "--run_name", "--resume")


def refused_after_dashes(extra: list[str], runs: list[GridRun]) -> str | None:
    """Why a flag after ``--`` is refused, or None: one rule for ``minbert-grid`` and ``scripts/ablate.sh``. The grid
    names and places its runs; it seeds them where it gives each a ``--seed`` (several seeds, ``--first_seed``, a
    named grid), which would replace the user's without a word; one seed a row leaves the run's own ``--seed``."""
    seeded = [run.seed for run in runs if run.seed is not None]
    for flag in extra:
        name = flag.split("=")[0]
        if name in GRID_SETS:
            return f"{flag} after --: the grid names and places its runs itself (its --out_dir goes before --)"
        if name == "--seed" and seeded:
            return f"{flag} after --: the grid seeds its runs itself ({min(seeded)}, ...)"
    return None


def measured_time(args: argparse.Namespace) -> MeasuredTime | None:
    """The documented wall time of ``args``' named grid where its runs are as they were measured: its pinned budget (no
    budget flag before --, none of the budget's flags after it), on CPUs, one core and one torch thread a run."""
    named = NAMED_GRIDS.get(getattr(args, "grid", None))
    if named is None or named.measured is None:
        return None
    budget_given = any(getattr(args, name, None) is not None
                       for name in ("epochs", "max_steps_per_epoch", "stage_steps"))
    budget_after = any(flag.split("=")[0] in flag_values(named.budget) for flag in getattr(args, "extra", ()))
    as_measured = 1 <= getattr(args, "cpus_per_run", 1.0) < 2 and not getattr(args, "gpus_per_run", 0.0)
    return named.measured if as_measured and not budget_given and not budget_after else None


def flag_values(words: tuple[str, ...]) -> dict[str, str | None]:
    """Flag -> its value (None: a switch, such as ``--no_test_predictions``) of a named grid's budget words."""
    return {word: None if following.startswith("--") else following
            for word, following in zip(words, (*words[1:], "--")) if word.startswith("--")}


def ablate_plan(argv: list[str]) -> list[GridRun]:
    """``scripts/ablate.sh``'s runs: its options (``--seeds N``, ``--only ROW...``, ``--epochs``,
    ``--max_steps_per_epoch``, ``--stage_steps``), ``--``, then the flags of every run, through ``plan``: the
    registry's rows, as ``minbert-grid`` without ``--grid``. An unknown row, or a flag after ``--`` the grid sets
    itself (``refused_after_dashes``), is one line and exit code 2."""
    split = argv.index("--")
    parser = argparse.ArgumentParser(prog="ablate.sh", add_help=False)
    parser.add_argument("--seeds", type=int, default=1)
    parser.add_argument("--only", nargs="+", default=None)
    for name in ("--epochs", "--max_steps_per_epoch", "--stage_steps"):
        parser.add_argument(name, default=None)
    args = parser.parse_args(argv[:split])
    args.grid, args.first_seed, args.extra = None, None, argv[split + 1:]
    if unknown := [name for name in args.only or () if name not in dict(rows_of(args))]:
        print(f"ablate.sh: no row named '{unknown[0]}' (see --list)", file=sys.stderr)
        sys.exit(2)
    runs = plan(args)
    if refused := refused_after_dashes(args.extra, runs):
        print(f"ablate.sh: {refused}", file=sys.stderr)
        sys.exit(2)
    return runs


def listing(runs: list[GridRun]) -> list[str]:
    """``ablate.sh --list``: each run as its row's name and flags (no budget), and its ``--seed``."""
    rows = dict(grid_rows())
    return [" ".join([run.row, *rows[run.row], *(["--seed", str(run.seed)] if run.seed is not None else [])])
            for run in runs]


def shell_lines(runs: list[GridRun]) -> list[str]:
    """Each run as one shell-quoted line, its folder name then its flags, for ablate.sh to ``eval``."""
    return [shlex.join([run.name, *run.flags]) for run in runs]


def grid_rows() -> list[tuple[str, list[str]]]:
    EXTENSIONS, ideas = extensions.EXTENSIONS, extensions.ideas()   # the registry, as it is now

    def row(pooling: str, extensions: tuple[Extension, ...], name: str | None = None):
        name = name or "-".join([pooling, *(e.short for e in extensions)])
        return name, ["--pooling", pooling, *(f"--{e.name}" for e in extensions)]

    rows = [("pt", ["--option", "pretrain", "--pooling", "mean"]), row("mean", (), "ft"),
            *((f"st-{task}", ["--pooling", "mean", "--tasks", task]) for task in DEFAULT_TASKS), row("cls", ())]
    rows += [row(pooling, (e,)) for pooling in ("cls", "mean") for e in EXTENSIONS]
    rows += [row("mean", pair) for pair in itertools.combinations(EXTENSIONS, 2) if compatible(pair)]
    variants = [variant for idea in ideas for variant in idea.variants]
    rows += [(name, ["--pooling", "mean", *flags]) for name, flags in (*variants, PUBLISHED)]
    every = together(EXTENSIONS)
    cheap = tuple(e for e in every if not e.costly)
    costly = "-".join(e.short for e in every if e.costly)
    rows += [row("mean", cheap, f"mean-all-but-{costly}"), row("cls", every, "cls-all"), row("mean", every, "mean-all")]
    # each idea's pinned flags (e.g. one shared encoder, as the extensions' papers train) unless the row sets them
    pins = [idea.pinned for idea in ideas if idea.pinned]
    return [(name, [*flags, *(word for pin in pins if pin[0] not in flags for word in pin)]) for name, flags in rows]


def compatible(chosen: tuple[Extension, ...]) -> bool:
    """No extension of ``chosen`` names another among its ``conflicts``."""
    names = {e.name for e in chosen}
    return not any(names & set(e.conflicts) for e in chosen)


def together(extensions: tuple[Extension, ...]) -> tuple[Extension, ...]:
    """The extensions in registry order, each left out that conflicts with one kept before it (the "all" rows)."""
    kept: tuple[Extension, ...] = ()
    for e in extensions:
        if compatible((*kept, e)):
            kept += (e,)
    return kept


def budget() -> dict[str, str]:
    """Flag -> value of every grid run's budget: the multi-task epochs, then each extension's stage."""
    return BUDGET | {flag: value for e in extensions.EXTENSIONS for flag, value in e.budget.items()}


def stage_steps_flags() -> list[str]:
    """The flags ``ablate.sh --stage_steps S`` sets to S: each extension stage's number of batches."""
    return [e.steps_flag for e in extensions.EXTENSIONS if e.steps_flag]


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    sections = {"": [" ".join([name, *flags]) for name, flags in grid_rows()],
                "--budget": [word for flag, value in budget().items() for word in (flag, value)],
                "--stage_steps": stage_steps_flags()}
    chosen = " ".join(argv)   # one flag or none: a section's name has no space
    if chosen not in sections:
        print("usage: python -m training.tools.grid [--budget | --stage_steps]", file=sys.stderr)
        return 2
    print("\n".join(sections[chosen]))
    return 0


if __name__ == "__main__":
    sys.exit(run_command(main))   # as every command ends: a reader gone (| head) is no traceback
