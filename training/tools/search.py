"""minbert-search: a hyperparameter search on the grid's engine. Ray Tune runs the trials (each one
``run_multitask.py`` process, as in minbert-grid), Optuna's TPE chooses each trial's flags from what the
earlier trials scored, and ASHA stops the trials that fall behind at its rungs.

    minbert-search --space space.yaml --trials 16 -- --data_dir ../shared/data/multitask --eval_every 100
    minbert-search --space space.yaml --gpus_per_run 0.25 -- --data_dir DIR    # four trials a GPU

Scored honestly: every trial is scored on ``--val_fraction`` of each training file and never reads the dev
files, so the dev comparison of the winner with the default (``--confirm``) is not the number the search chose
by. The space file (JSON or YAML), one entry per ``run_multitask.py`` flag; more in docs/search.md::

    lr: {log_uniform: [3.0e-5, 3.0e-4]}      # also uniform, int, log_int: [low, high]
    task_batch_sizes: [[32, 32, 32], [32, 86, 32]]  # a list: one of these
    private_layers: [0, 1, 2]
    warmup_ratio: 0.1                         # one value: every trial
    start_with: [{lr: 1.0e-4}]                # optional: trials to run first (the other flags: their first value)

ASHA's clock is the run's evaluations: after each, the run waits (``--wait_after_eval``) while the scheduler
decides, so where a trial stops does not depend on timing. The same command again continues the search. Outputs in
``--out_dir``: the ``trial-<hash>/`` run folders, ``trials.csv``, ``trials.md``, ``best.json`` and ``search.png``.
"""
from __future__ import annotations

if __name__ == "__main__":   # a stop while torch imports: one line, not a traceback (training/tools/starting.py)
    from training.tools.starting import stop_cleanly_while_starting
    stop_cleanly_while_starting()

import argparse
import contextlib
import csv
import hashlib
import itertools
import json
import math
import os
import queue
import re
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from ..harness.outputs import read_metrics, scored_evaluations, write_json
from ..harness.run_lock import is_live
from ..configuration.settings_file import read_settings_file
from ..harness.status import FINAL, RunStatus
from ..harness.trial_control import MARK
from .grid import DEFAULT_SEED, ROOT, GridRun, first_refused
from .ray_grid import (EXIT_INTERRUPTED, GridError, GridLock, Stop, add_wait_for_resources, guarded, killed_by,
                       last_error_line, on_ray, parse_own, positive, run_config, run_grid, run_report, run_words,
                       start_run, stop_file)

SEARCH_KEY = "search"     # the trial config's entry that is not a flag: where and how the trial runs
PREFIX = "trial-"
ENDED = (*FINAL, RunStatus.FAILED)   # a trial in one of these is told to TPE, not run again
MAX_EVALUATIONS = 10_000   # ASHA's max_t: runs end by themselves, long before
ASKS = 20                  # TPE asked again this often for a point not drawn before, then the space walked in order
FAILED_AT_START = "failed"  # <out_dir>/logs/failed/<trial>.json: a trial whose run failed before its folder was written
# flags the search sets itself, or that say where a run is rather than what it does
OWNED = ("out_dir", "run_name", "resume", "resume_fallback", "log_file", "wait_after_eval", "val_fraction",
         "test_predictions", "config", "max_eval_examples")
KINDS = ("uniform", "log_uniform", "int", "log_int", "choice")
YAML_TEXT_NUMBER = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)[eE][-+]?\d+")   # 1e-4, 3E5, 1.5e3: YAML 1.1 reads text


# ---- the space --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Dimension:
    """One flag's range: ``kind`` one of ``KINDS`` (or "fixed"), with ``low``/``high`` or ``values``."""
    name: str
    kind: str
    low: float | None = None
    high: float | None = None
    values: tuple = ()

    def distribution(self):
        """Its Optuna distribution (a fixed value: a one-value categorical)."""
        import optuna.distributions as d
        if self.kind in ("choice", "fixed"):
            return d.CategoricalDistribution(list(self.values))
        if self.kind in ("int", "log_int"):
            return d.IntDistribution(int(self.low), int(self.high), log=self.kind == "log_int")
        return d.FloatDistribution(self.low, self.high, log=self.kind == "log_uniform")

    def coerce(self, value):
        """A start value as this range takes it: a number in any spelling (YAML 1.1 reads 1e-3 as a string)."""
        if self.kind in ("choice", "fixed") or isinstance(value, bool):
            return encode(value)
        try:
            number = float(value)
        except (TypeError, ValueError):
            return value
        return int(number) if self.kind.endswith("int") and number == int(number) else number

    def contains(self, value) -> bool:
        if self.kind in ("choice", "fixed"):
            return value in self.values
        return isinstance(value, (int, float)) and self.low <= value <= self.high

    def probes(self) -> list:
        """Values that together show whether the flag takes this range: each choice, or both ends."""
        return list(self.values) if self.kind in ("choice", "fixed") else [self.low, self.high]


@dataclass
class Space:
    dimensions: dict[str, Dimension]
    start_with: list[dict] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {"dimensions": {n: [d.kind, d.low, d.high, list(d.values)] for n, d in self.dimensions.items()},
                "start_with": self.start_with}

    def axes(self) -> list | None:
        """Each flag's values in order; None where one has a float range (as good as endless)."""
        if any(d.kind in ("uniform", "log_uniform") for d in self.dimensions.values()):
            return None
        return [list(d.values) if d.kind in ("choice", "fixed") else range(int(d.low), int(d.high) + 1)
                for d in self.dimensions.values()]

    def size(self) -> int | None:
        return None if (axes := self.axes()) is None else math.prod(len(axis) for axis in axes)

    def points(self):
        """Every point of a space of whole or listed values, in order."""
        return (dict(zip(self.dimensions, values)) for values in itertools.product(*self.axes()))


def read_space(path: str) -> Space:
    """The space file, checked: one ``ValueError`` line naming the file and the key otherwise."""
    data = read_settings_file(path, "--space")
    if not isinstance(data, dict) or not data:
        raise ValueError(f"--space {path}: expected flags by name (a JSON or YAML mapping), got "
                         f"{type(data).__name__ if data else 'nothing'}")
    start_with = data.pop("start_with", None) or []
    if not isinstance(start_with, list) or not all(isinstance(p, dict) for p in start_with):
        raise ValueError(f"--space {path}: start_with: expected a list of {{flag: value}} mappings")
    dimensions = {}
    for name, spec in data.items():
        where = f"--space {path}: {name}"
        name = str(name).lstrip("-")
        if name in OWNED:
            raise ValueError(f"{where}: the search sets this flag itself (or it says where a run goes); "
                             "leave it out of the space")
        dimensions[name] = dimension(name, spec, where)
    if not any(d.kind != "fixed" for d in dimensions.values()):
        raise ValueError(f"--space {path}: nothing to search: give at least one flag a range or a list")
    for i, point in enumerate(start_with):
        for key, value in point.items():
            key = str(key).lstrip("-")
            if key not in dimensions:
                raise ValueError(f"--space {path}: start_with[{i}]: {key} is not in the space")
            if not dimensions[key].contains(dimensions[key].coerce(value)):
                raise ValueError(f"--space {path}: start_with[{i}]: {key} {value!r} is outside its range")
    return Space(dimensions, [{(k := str(key).lstrip("-")): dimensions[k].coerce(v) for key, v in p.items()}
                              for p in start_with])


def dimension(name: str, spec, where: str) -> Dimension:
    if isinstance(spec, list):
        if not spec:
            raise ValueError(f"{where}: an empty list: give the values to choose from")
        values = tuple(encode(v) for v in spec)
        if len(set(map(repr, values))) != len(values):
            raise ValueError(f"{where}: a value is listed twice")
        return Dimension(name, "choice", values=values)
    if isinstance(spec, dict):
        if len(spec) != 1 or next(iter(spec)) not in KINDS:
            raise ValueError(f"{where}: expected one of {', '.join(f'{{{k}: ...}}' for k in KINDS)}, got {spec}")
        kind, value = next(iter(spec.items()))
        if kind == "choice":
            return dimension(name, value, where)
        if not isinstance(value, list) or len(value) != 2:
            raise ValueError(f"{where}: {kind} takes [low, high], got {value!r}")
        try:   # YAML 1.1 reads 3e-5 (no dot) as a string: numbers in any spelling
            low, high = (float(v) for v in value)
        except (TypeError, ValueError):
            raise ValueError(f"{where}: {kind} takes two numbers, got {value!r}") from None
        if not (math.isfinite(low) and math.isfinite(high) and low < high):
            raise ValueError(f"{where}: {kind} needs low < high, got {value!r}")
        if kind.startswith("log") and low <= 0:
            raise ValueError(f"{where}: {kind} needs low > 0, got {value!r}")
        if kind.endswith("int") and (low != int(low) or high != int(high)):
            raise ValueError(f"{where}: {kind} takes whole numbers, got {value!r}")
        if kind.endswith("int"):   # its ends are probed as flags: --epochs 1, not 1.0
            low, high = int(low), int(high)
        return Dimension(name, kind, low, high)
    if isinstance(spec, (str, int, float, bool)) or spec is None:
        return Dimension(name, "fixed", values=(encode(spec),))
    raise ValueError(f"{where}: expected a value, a list or a {{kind: [low, high]}} mapping, got {spec!r}")


def encode(value):
    """A value as Optuna keeps it (a primitive): a list such as [32, 86, 32] becomes "32,86,32", and a number YAML 1.1
    reads as text (1e-4) a number."""
    if isinstance(value, str) and YAML_TEXT_NUMBER.fullmatch(value):
        return float(value)
    return ",".join(map(str, value)) if isinstance(value, (list, tuple)) else value


def flags_of(params: dict) -> list[str]:
    """``run_multitask.py`` words for a trial's values: ``--name``/``--no_name`` for on/off, ``none`` for None."""
    words = []
    for name, value in params.items():
        if isinstance(value, bool):
            words.append(f"--{name}" if value else f"--no_{name}")
        else:
            words += [f"--{name}", "none" if value is None else repr(value) if isinstance(value, float) else str(value)]
    return words


def trial_name(params: dict) -> str:
    """The trial's run folder: the same values, the same folder (what makes a cut-off trial resume)."""
    return PREFIX + hashlib.sha1(json.dumps(params, sort_keys=True).encode()).hexdigest()[:8]


# ---- the command line ---------------------------------------------------------------------------------------

def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="minbert-search", description=__doc__.split("\n\n")[0],
        epilog="Flags after -- go to every trial, e.g. -- --data_dir ../shared/data/multitask --epochs 1 "
               "--eval_every 100 (the budget of a trial, and ASHA's clock).")
    parser.add_argument("--space", required=True, help="the search space, JSON or YAML (see the module's docstring)")
    parser.add_argument("--trials", type=positive, default=16, help="trials in all, counting those of earlier parts "
                                                                    "(default: %(default)s)")
    parser.add_argument("--out_dir", default="predictions/search", help="the search's folder (default: %(default)s)")
    parser.add_argument("--val_fraction", type=float, default=0.1,
                        help="the fraction of each training file every trial holds out and is scored on "
                             "(default: %(default)s)")
    parser.add_argument("--seed", type=int, default=0, help="TPE's seed (the trials' own --seed: after --)")
    parser.add_argument("--grace_period", type=positive, default=1,
                        help="ASHA: evaluations every trial gets before it can be stopped (default: %(default)s)")
    parser.add_argument("--reduction_factor", type=float, default=3.0,
                        help="ASHA: 1 in this many trials goes on at each rung (default: %(default)s)")
    parser.add_argument("--time_budget", type=duration, default=None,
                        help="stop this part after this long (e.g. 90m, 2h, 3600 seconds): running trials end "
                             "interrupted, and the same command continues them")
    parser.add_argument("--max_concurrent", type=positive, default=None,
                        help="trials at once (default: as many as the CPUs and GPUs hold)")
    parser.add_argument("--cpus_per_run", type=float, default=1.0,
                        help="CPUs Ray gives each trial; its torch threads follow (default: %(default)s)")
    parser.add_argument("--gpus_per_run", type=float, default=0.0,
                        help="GPUs of each trial, fractional to share one (default: 0, CPU)")
    parser.add_argument("--address", default=None,
                        help="join a Ray cluster (HOST:PORT or auto) instead of a local Ray; one that does not "
                             "answer within a minute: exit code 2")
    add_wait_for_resources(parser)
    parser.add_argument("--no_plot", action="store_true", help="skip search.png")
    parser.add_argument("--confirm", type=int, default=0, metavar="SEEDS",
                        help="once every trial has ended: train the best trial's flags and the default (the flags "
                             "after -- alone), each at SEEDS seeds on the whole training files, score them on dev "
                             "and compare them (paired bootstrap) in <out_dir>/confirm (default: 0, not)")
    args = parse_own(parser, argv)
    if not 0 < args.val_fraction < 1:
        parser.error("--val_fraction must be in (0, 1): the trials are never scored on dev")
    if (args.reduction_factor <= 1 or args.cpus_per_run <= 0 or args.gpus_per_run < 0 or args.confirm < 0
            or args.wait_for_resources < 0):
        parser.error("--reduction_factor must be > 1, --cpus_per_run > 0, --gpus_per_run >= 0, --confirm >= 0 and "
                     "--wait_for_resources >= 0")
    given = {word: word[2:].split("=")[0].removeprefix("no_") for word in args.extra if word.startswith("--")}
    if owned := [word for word, name in given.items() if name in OWNED]:
        parser.error(f"{owned[0]} after --: the search sets it itself (or it says where a run goes)")
    try:
        args.space_spec = read_space(args.space)
    except ValueError as err:
        parser.error(str(err))
    if both := sorted(set(given.values()) & set(args.space_spec.dimensions)):
        parser.error(f"--{both[0]} is both in the space and after --: give it in one place")
    return args


def duration(text: str) -> float:
    """Seconds from "3600", "90m", "2h" or "45s"."""
    units = {"s": 1, "m": 60, "h": 3600}
    try:
        seconds = float(text[:-1]) * units[text[-1]] if text and text[-1] in units else float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: give seconds, or a number with s, m or h (e.g. 90m)") from None
    if not seconds > 0:   # nan too: a budget that never ends the part
        raise argparse.ArgumentTypeError(f"{text!r}: give a positive time")
    return seconds


def trial_flags(params: dict, args) -> list[str]:
    return [*args.extra, *flags_of(params), "--val_fraction", str(args.val_fraction), "--no_test_predictions",
            "--quiet"]


def check_space(args) -> None:
    """A ``GridError``: the first value of the space (or start_with point) that ``run_multitask.py`` refuses."""
    space = args.space_spec
    defaults = {n: d.probes()[0] for n, d in space.dimensions.items()}
    probes = [("the flags after --", trial_flags({}, args))]
    probes += [(f"{n} {v!r}", trial_flags({**defaults, n: v}, args))
               for n, d in space.dimensions.items() for v in d.probes()]
    probes += [(f"start_with[{i}]", trial_flags({**defaults, **p}, args)) for i, p in enumerate(space.start_with)]
    if refused := first_refused(probes):   # in one Python start, as the grid checks its rows
        raise GridError(f"--space {args.space}: {refused}")


# ---- one trial -------------------------------------------------------------------------------------------------

class TrialProcess:
    """One trial's ``run_multitask.py --wait_after_eval`` process, stepped one evaluation at a time (``next``), so
    the scheduler can stop it between two (``end``)."""

    def __init__(self, run_dir: Path, flags: list[str], threads: int, cwd: str, log: Path, stop: Path):
        self.run_dir, self.flags, self.threads, self.cwd, self.log, self.stop = run_dir, flags, threads, cwd, log, stop
        self.child: subprocess.Popen | None = None
        self.records: queue.Queue = queue.Queue()
        self.waiting = False
        earlier = scored_evaluations(read_metrics(run_dir))
        self.best = max((e["dev_overall"] for e in earlier), default=None)
        self.count = len(earlier)

    def begin(self) -> str:
        """Keep, resume or start the run folder (minbert-grid's ``next_step``); returns which."""
        step, words = run_words(self.run_dir, self.flags)
        if step == "keep":
            return step
        if step == "start":
            self.best, self.count = None, 0
        out = open(self.log, "a", encoding="utf-8")
        self.child = start_run([*words, "--wait_after_eval"], out, self.threads, self.cwd, stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, text=True)
        threading.Thread(target=self._read, args=(out,), daemon=True).start()
        return step

    def _read(self, out) -> None:
        """The run's output into its log, its EVALUATION lines into ``records``; None at its end."""
        with out:
            for line in self.child.stdout:
                before, mark, record = line.partition(MARK)   # a progress bar may precede it on its line
                if before.strip() or not mark:
                    out.write(before if mark else line)
                    out.flush()
                if mark:
                    self.records.put(json.loads(record))
        self.records.put(None)

    def next(self) -> dict | None:
        """The next evaluation's record (the run then waits for ``next`` or ``end``), or None: the run ended."""
        if self.child is None:
            return None
        if self.waiting:
            self._answer("continue")
        while True:
            if self.stop.exists():
                self.end()
                return None
            try:
                record = self.records.get(timeout=0.5)
            except queue.Empty:
                continue
            if record is None:
                self.child.wait()
                return None
            self.waiting, self.count = True, record["evaluation"]
            score = record["dev_overall"]
            if isinstance(score, (int, float)) and math.isfinite(score):   # a diverged evaluation is no best
                self.best = score if self.best is None else max(self.best, score)
            return record

    def end(self) -> None:
        """Stop the run if it still lives: "stop" when it waits on the scheduler and the search goes on (it ends
        "stopped early"), else SIGTERM (it ends "interrupted", resumable); wait until it has."""
        if self.child is None or self.child.poll() is not None:
            return
        if self.waiting and not self.stop.exists():
            self._answer("stop")
        else:
            self.child.terminate()
        with contextlib.suppress(OSError):
            self.child.stdin.close()
        self.child.wait()
        self.waiting = False

    def _answer(self, word: str) -> None:
        with contextlib.suppress(OSError):   # it ended meanwhile: next() sees its end
            self.child.stdin.write(word + "\n")
            self.child.stdin.flush()
        self.waiting = False


def trial_class():
    """The Tune trainable (a class, so Tune's scheduler can stop a trial between two of its results)."""
    from ray import tune

    class SearchTrial(tune.Trainable):
        def setup(self, config: dict) -> None:
            search = config[SEARCH_KEY]
            self.params = {k: v for k, v in config.items() if k != SEARCH_KEY}
            self.out_dir = out_dir = Path(search["out_dir"])
            self.name = trial_name(self.params)
            write_json(out_dir / "logs" / "params" / f"{self.name}.json", self.params)
            self.process = TrialProcess(out_dir / self.name, search["flags"] + flags_of(self.params),
                                        search["threads"], search["cwd"], out_dir / "logs" / f"{self.name}.log",
                                        stop_file(out_dir))
            self.started = None

        def step(self) -> dict:
            if self.started is None:
                self.started = self.process.begin()
            record = self.process.next()
            if record is not None:
                return {**({"score": self.process.best} if self.process.best is not None else {}),
                        "evaluation": record["evaluation"], "trial": self.name, "last": record["dev_overall"],
                        "run_step": record["run_step"], "status": RunStatus.RUNNING, "action": self.started}
            # the run ended: finished or stopped early is a score; failed or interrupted is none, nor a crash
            metrics = read_metrics(self.process.run_dir)
            status, error = metrics.get("status") or RunStatus.FAILED, str(metrics.get("error") or "")
            rc = self.process.child.returncode if self.process.child is not None else 0
            if rc and not self.process.stop.exists() and status not in FINAL:
                signal_name = killed_by(rc)
                if signal_name or not metrics.get("status"):   # killed outright, or failed before its folder
                    status = RunStatus.FAILED
                    error = (f"killed by {signal_name}, a signal it does not handle" if signal_name else
                             last_error_line(self.process.log) or f"exit code {rc}")
                if not metrics.get("status"):   # nothing in the run folder says so: the search's own record
                    write_json(self.out_dir / "logs" / FAILED_AT_START / f"{self.name}.json",
                               {"error": error, "exit_code": rc})
                elif signal_name:
                    error += f"; metrics.json says {metrics['status']}: the same command resumes it"
            scored = status in FINAL and self.process.best is not None
            return {**({"score": self.process.best} if scored else {}), "evaluation": self.process.count,
                    "trial": self.name, "status": status, "action": self.started, "done": True,
                    "error": "" if scored else error}

        def save_checkpoint(self, checkpoint_dir: str) -> dict:
            return {"run": self.name}   # the run folder is the trial's checkpoint: a resumed trial resumes it

        def load_checkpoint(self, checkpoint: dict) -> None:
            pass

        def cleanup(self) -> None:
            self.process.end()

    return SearchTrial


# ---- the trials so far -------------------------------------------------------------------------------------

@dataclass
class TrialRecord:
    name: str
    params: dict
    status: str
    score: float | None
    evaluations: int
    steps: int | None
    minutes: float | None
    started: str
    error: str = ""   # a failed trial's one error line

    @property
    def ended(self) -> bool:
        return self.status in ENDED


def read_trials(out_dir: Path) -> list[TrialRecord]:
    """Every trial of the search in ``out_dir`` (its values in ``logs/params``), in the order they started."""
    records = []
    for path in sorted((out_dir / "logs" / "params").glob(f"{PREFIX}*.json")):
        try:
            params = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        metrics = read_metrics(out_dir / path.stem)
        scored = scored_evaluations(metrics)
        status, error = metrics.get("status") or "not started", str(metrics.get("error") or "")
        if status in (RunStatus.RUNNING, "starting") and not is_live(out_dir / path.stem):
            status = RunStatus.INTERRUPTED   # killed: resumed by the next part
        failure = out_dir / "logs" / FAILED_AT_START / path.name
        if status == "not started" and failure.is_file():   # its run failed before writing its folder
            status = RunStatus.FAILED
            try:
                error = str(json.loads(failure.read_text(encoding="utf-8")).get("error") or "")
            except (OSError, ValueError, AttributeError):
                error = ""
        wall = metrics.get("wall_seconds")
        records.append(TrialRecord(path.stem, params, status, max((e["dev_overall"] for e in scored), default=None),
                                   len(scored), scored[-1].get("run_step") if scored else None,
                                   round(wall / 60, 1) if isinstance(wall, (int, float)) else None,
                                   str(metrics.get("started") or "~"), error if status == RunStatus.FAILED else ""))
    return sorted(records, key=lambda r: r.started)


# ---- the driver ------------------------------------------------------------------------------------------------

def main(argv: list[str] | None = None) -> int:
    """Exit codes: 0 the search ran (its trials may have failed); 1 no trial scored, a trial did not end (killed
    outright: the same command resumes it), or --confirm's grid or report failed; 2 bad flags, a space value the
    runs or the model refuse, a cluster that does not answer or cannot hold a trial; 130 stopped (Ctrl-C, SIGTERM,
    --time_budget), at any point."""
    args = parse_args(argv)
    out_dir = Path(args.out_dir).resolve()

    def prepare() -> None:
        check_space(args)
        (out_dir / "logs" / "params").mkdir(parents=True, exist_ok=True)
        check_same_search(out_dir, args)
    return guarded("minbert-search", out_dir, prepare, lambda lock: run_search(args, out_dir, lock))


def check_same_search(out_dir: Path, args) -> None:
    """A folder holds one search: its space, trial flags and validation split, recorded by the first part."""
    recipe = json.loads(json.dumps({"space": args.space_spec.to_dict(), "flags": args.extra,
                                    "val_fraction": args.val_fraction}))
    path = out_dir / "logs" / "search.json"
    if path.exists():
        try:
            earlier = json.loads(path.read_text(encoding="utf-8"))
        except ValueError:
            earlier = None
        if not isinstance(earlier, dict):
            raise ValueError(f"{path} is not a search's record (a JSON object): remove it, or give another --out_dir")
        if changed := [key for key in recipe if earlier.get(key) != recipe[key]]:   # other keys: another version's
            raise ValueError(f"{out_dir} holds a search with another {' and '.join(changed)} ({path}): give the "
                             "same --space and flags to continue it, or another --out_dir")
    else:
        write_json(path, recipe)


def trials_wanted(args) -> int:
    """``--trials``, or the space's size when it has fewer points: the search ends there (a point is run once)."""
    size = args.space_spec.size()
    return args.trials if size is None else min(args.trials, size)


def run_search(args, out_dir: Path, lock: GridLock) -> int:
    records = read_trials(out_dir)
    ended = [r for r in records if r.ended]
    unfinished = [r for r in records if not r.ended]
    wanted = trials_wanted(args)
    todo = max(0, wanted - len(ended))
    where = f"Ray at {args.address}" if args.address else "a local Ray"
    if wanted < args.trials:
        print(f"the space has {wanted} point{'s' if wanted != 1 else ''}: the search ends at {wanted} trials "
              f"(--trials {args.trials}), each point run once", flush=True)
    print(f"search -> {out_dir}: {wanted} trials, {len(ended)} ended before, {min(len(unfinished), todo)} to "
          f"continue, {max(0, todo - len(unfinished))} new, on {where}; scored on --val_fraction {args.val_fraction} "
          "of each training file", flush=True)
    stop = Stop(out_dir, lambda: [p for p in out_dir.glob(f"{PREFIX}*") if p.is_dir()])
    if todo:
        on_ray(args, lock, stop, lambda: run_tune(args, out_dir, ended, unfinished[:todo], todo, stop))
    records = read_trials(out_dir)
    best = write_outputs(args, out_dir, records)
    if stop.requested:
        print("stopped: the same command continues the search", flush=True)
        return EXIT_INTERRUPTED
    short = wanted - len([r for r in records if r.ended])   # a run killed outright, a trial lost with its node
    if short > 0:
        print(f"{short} of {wanted} trials did not end (killed, or lost with their node): the same command continues "
              f"the search{' and then confirms' if args.confirm else ''}", flush=True)
        return 1
    if best is None:
        return 1
    return confirm(args, out_dir) if args.confirm else 0


def confirm(args, out_dir: Path) -> int:
    """``--confirm N``: ``best.json`` and the default (the flags after -- alone), each trained at N seeds on the whole
    training files and scored on dev, as a grid in ``<out_dir>/confirm``; then the report, best against default."""
    folder = out_dir / "confirm"
    (folder / "logs").mkdir(parents=True, exist_ok=True)
    recipes = {"default": tuple(args.extra), "best": ("--config", str(out_dir / "best.json"))}
    runs = [GridRun(f"{row}-s{seed}", row, (*flags, "--seed", str(seed)))
            for row, flags in recipes.items() for seed in range(DEFAULT_SEED, DEFAULT_SEED + args.confirm)]
    print(f"\nconfirming: best.json and the default at {args.confirm} seeds each, on the whole training files, "
          f"scored on dev -> {folder}", flush=True)
    lock = GridLock(folder).acquire()
    try:
        rc = run_grid(argparse.Namespace(**vars(args), no_report=True), runs, folder, lock)
    finally:
        lock.release()
    return run_report(folder, "confirm", "--baseline", "default") if rc == 0 else rc


def run_tune(args, out_dir: Path, ended: list[TrialRecord], unfinished: list[TrialRecord], todo: int,
             stop: Stop) -> None:
    from ray import tune
    from ray.tune.schedulers import ASHAScheduler

    os.environ["TUNE_DISABLE_STRICT_METRIC_CHECKING"] = "1"   # a failed trial's last result has no score
    searcher = tpe_searcher(args, ended, unfinished)
    scheduler = ASHAScheduler(time_attr="evaluation", metric="score", mode="max", max_t=MAX_EVALUATIONS,
                              grace_period=args.grace_period, reduction_factor=args.reduction_factor)
    progress = SearchProgress(trials_wanted(args), ended)
    began = time.time()

    def name_of(trial) -> str:
        return trial_name({k: v for k, v in trial.config.items() if k != SEARCH_KEY})

    class Events(tune.Callback):
        def on_trial_result(self, iteration, trials, trial, result, **info):
            progress.result(result)

        def on_trial_error(self, iteration, trials, trial, **info):
            progress.ended(name_of(trial), {"status": RunStatus.FAILED})

        def on_trial_complete(self, iteration, trials, trial, **info):
            progress.ended(name_of(trial), trial.last_result or {})

    def stop_all() -> bool:
        if args.time_budget and not stop.requested and time.time() > began + args.time_budget:
            stop.ask(f"--time_budget {args.time_budget:g} s spent", "the same command continues them")
        return stop.stop_all()

    fixed = {"out_dir": str(out_dir), "flags": trial_flags({}, args), "threads": max(1, int(args.cpus_per_run)),
             "cwd": os.getcwd()}
    tune.Tuner(tune.with_resources(trial_class(), {"cpu": args.cpus_per_run, "gpu": args.gpus_per_run}),
               param_space={SEARCH_KEY: fixed},
               tune_config=tune.TuneConfig(search_alg=searcher, scheduler=scheduler, num_samples=todo,
                                           max_concurrent_trials=args.max_concurrent, trial_name_creator=name_of,
                                           trial_dirname_creator=lambda t: t.trial_id),
               run_config=run_config("search", out_dir, Events(), stop_all, max_failures=0)).fit()


def tpe_searcher(args, ended: list[TrialRecord], unfinished: list[TrialRecord]):
    """Optuna's TPE in Ray Tune, told the trials earlier parts ended, the unfinished ones first again (or, on a
    first part, the space's ``start_with`` points)."""
    import optuna
    from ray.tune.search.optuna import OptunaSearch

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    space = {name: d.distribution() for name, d in args.space_spec.dimensions.items()}
    storage, study_name = optuna.storages.InMemoryStorage(), "minbert-search"
    study = optuna.create_study(storage=storage, study_name=study_name, direction="maximize")
    for record in ended:   # what earlier parts learned, as TPE's history
        if all(name in record.params and d.contains(record.params[name])
               for name, d in args.space_spec.dimensions.items()):
            study.add_trial(optuna.trial.create_trial(
                params={name: record.params[name] for name in space}, distributions=space, value=record.score,
                state=optuna.trial.TrialState.COMPLETE if record.score is not None else optuna.trial.TrialState.FAIL))
    first = [r.params for r in unfinished] + ([] if ended or unfinished else fill(args.space_spec))
    tpe = OptunaSearch(space=space, metric="score", mode="max", points_to_evaluate=first or None,
                       # a new seed for each part: the same seed would draw the first part's trials again
                       sampler=optuna.samplers.TPESampler(seed=args.seed + len(ended) + len(unfinished)),
                       study_name=study_name, storage=storage)
    return distinct(tpe, study, args.space_spec, {r.name for r in ended})


def distinct(inner, study, space: Space, seen: set[str]):
    """``inner`` (TPE) drawing points not drawn before (``seen``: their ``trial_name``s): one drawn before is told
    to TPE as failed and TPE is asked again, ``ASKS`` times, then given the space's first point not drawn yet; a
    space whose every point is drawn is FINISHED. So the search ends, and each point is one trial, one run folder."""
    from ray.tune.search import Searcher

    class Distinct(Searcher):
        def __init__(self):
            super().__init__(metric="score", mode="max")
            self.inner_ids: dict[str, str] = {}   # Tune's trial id -> the id TPE knows the point by

        def set_search_properties(self, metric, mode, config, **spec) -> bool:
            return inner.set_search_properties(metric, mode, config, **spec)

        def suggest(self, trial_id: str):
            size = space.size()
            if size is not None and len(seen) >= size:
                return Searcher.FINISHED
            for attempt in range(ASKS + 1):
                if attempt == ASKS and size is not None:   # TPE keeps to drawn points: the space in order
                    point = next((p for p in space.points() if trial_name(p) not in seen), None)
                    if point is None:
                        return Searcher.FINISHED
                    study.enqueue_trial(point)
                inner_id = f"{trial_id}.{attempt}"
                config = inner.suggest(inner_id)
                if config is None or config == Searcher.FINISHED:
                    return config
                name = trial_name(config)
                if name not in seen or attempt == ASKS:   # (a float range: a repeat after ASKS asks is run)
                    seen.add(name)
                    self.inner_ids[trial_id] = inner_id
                    return config
                inner.on_trial_complete(inner_id, None, error=True)

        def on_trial_result(self, trial_id: str, result: dict) -> None:
            if trial_id in self.inner_ids:
                inner.on_trial_result(self.inner_ids[trial_id], result)

        def on_trial_complete(self, trial_id: str, result: dict | None = None, error: bool = False) -> None:
            if trial_id in self.inner_ids:   # a failed run (e.g. at its start) is told to TPE as failed
                failed = error or (result or {}).get("status") == RunStatus.FAILED
                inner.on_trial_complete(self.inner_ids.pop(trial_id), result, failed)

    return Distinct()


def fill(space: Space) -> list[dict]:
    """``start_with``'s points, every other flag at its first value (a range: its middle, geometric if log)."""
    def middle(d: Dimension):
        if d.kind in ("choice", "fixed"):
            return d.values[0]
        mid = math.sqrt(d.low * d.high) if d.kind.startswith("log") else (d.low + d.high) / 2
        return round(mid) if d.kind.endswith("int") else mid
    return [{name: point.get(name, middle(d)) for name, d in space.dimensions.items()} for point in space.start_with]


class SearchProgress:
    """One line an evaluation and a trial's end: trials ended of all, the best score so far, the trial, its score."""

    def __init__(self, total: int, ended: list[TrialRecord]):
        self.total, self.done = total, len(ended)
        self.best = max((r.score for r in ended if r.score is not None), default=None)

    def result(self, result: dict) -> None:
        if not result.get("done"):   # a trial's last result: ended() says it
            best = f"{result['score']:.4f}" if "score" in result else "none yet"
            self.line(f"{result['trial']} evaluation {result['evaluation']}: {result['last']:.4f} (its best {best})")

    def ended(self, name: str, result: dict) -> None:
        self.done += 1
        score, status = result.get("score"), result.get("status")
        status = RunStatus.STOPPED_EARLY + " (ASHA)" if status == RunStatus.RUNNING else status or "ended"
        if isinstance(score, float):
            self.best = score if self.best is None else max(self.best, score)
            self.line(f"{name}: {status}, score {score:.4f}")
        else:
            error = result.get("error")
            self.line(f"{name}: {status.upper() if status == 'failed' else status}" + (f": {error}" if error else "")
                      + f" (its log: logs/{name}.log)")

    def line(self, event: str) -> None:
        best = f", best {self.best:.4f}" if self.best is not None else ""
        print(f"[{self.done}/{self.total} trials{best}] {event}", flush=True)


# ---- what comes out --------------------------------------------------------------------------------------------

def write_outputs(args, out_dir: Path, records: list[TrialRecord]) -> TrialRecord | None:
    """trials.csv, trials.md, best.json and search.png in ``out_dir``; returns the best trial (None: none scored)."""
    names = list(args.space_spec.dimensions)
    header = ["#", "trial", *names, "score", "evaluations", "steps", "status", "minutes"]
    rows = [[i, r.name, *(cell(r.params.get(n, "")) for n in names), "" if r.score is None else f"{r.score:.4f}",
             r.evaluations, "" if r.steps is None else r.steps, r.status, "" if r.minutes is None else r.minutes]
            for i, r in enumerate(records, 1)]
    with (out_dir / "trials.csv").open("w", encoding="utf-8") as file:
        csv.writer(file, lineterminator="\n").writerows([[*header, "error"],
                                                         *([*row, r.error] for row, r in zip(rows, records))])
    best = max((r for r in records if r.score is not None and r.status in FINAL), key=lambda r: r.score, default=None)
    lines = [f"# Search: {len(records)} trials", "",
             f"Score: the overall score on --val_fraction {args.val_fraction} of each training file (the dev files "
             "unread), the best of the trial's evaluations. Space: " + args.space, "",
             "| " + " | ".join(header) + " |", "|" + "---|" * len(header),
             *("| " + " | ".join(str(c) for c in row) + " |" for row in rows)]
    if failed := [r for r in records if r.status == RunStatus.FAILED]:   # rerun: delete logs/failed/<trial>.json
        lines += ["", "Failed:", *(f"- {r.name}: {r.error or 'see its log'} (its log: logs/{r.name}.log)"
                                   for r in failed)]
    if best is not None:
        recipe = best_recipe(best, args)
        write_json(out_dir / "best.json", recipe)
        lines += ["", f"Best: {best.name}, score {best.score:.4f}. Its flags for the full training files: "
                      f"`python run_multitask.py --config {out_dir / 'best.json'}` (best.json: "
                      + " ".join(f"{k}={v}" for k, v in recipe.items()) + ")"]
    (out_dir / "trials.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines[4:]), flush=True)
    if not args.no_plot and records:
        plot(out_dir / "search.png", records, args.space_spec)
    return best


def cell(value) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


RECIPE = """
import json, sys
from pathlib import Path
sys.path.insert(0, sys.argv[1])
import run_multitask
argv = json.loads(sys.argv[2])
args = run_multitask.build_parser().parse_args(argv)
# the flags marked flag(..., path=True), and the folders the run makes absolute itself (with_absolute_paths)
paths = {n for n, f in run_multitask.all_flag_fields().items() if f.metadata.get("path")} | {"data_dir", "model"}
values = {name: getattr(args, name) for name in sorted(run_multitask.explicit_flags(argv))}
print(json.dumps({name: str(Path(value).resolve()) if name in paths and isinstance(value, str) else value
                  for name, value in values.items()}))
"""


def best_recipe(best: TrialRecord, args) -> dict:
    """The best trial's flags, typed as ``run_multitask.py`` reads them, less the search's own: a file ``--config``
    takes, its path flags absolute (resolved where the trials ran), so it works from any folder."""
    done = subprocess.run([sys.executable, "-c", RECIPE, str(ROOT), json.dumps([*args.extra, *flags_of(best.params)])],
                          capture_output=True, text=True, check=True)
    return {k: v for k, v in json.loads(done.stdout).items() if k not in (*OWNED, "quiet")}


# a scored trial's status: its point's label and colour on the plot
POINTS = {RunStatus.FINISHED: ("finished", "black"), RunStatus.STOPPED_EARLY: ("stopped early (ASHA)", "grey")}
CUT_OFF_DOT = "tab:red"   # a scored point of any other status: interrupted or failed after an evaluation


def dot(status: str) -> str:
    return POINTS[status][1] if status in POINTS else CUT_OFF_DOT


def legend_entries(records: list[TrialRecord]) -> list[tuple[str, str]]:
    """(label, colour) for each kind of scored point on the plot: red, a score that is only the best so far."""
    shown = {r.status for r in records if r.score is not None}
    entries = [point for status, point in POINTS.items() if status in shown]
    if others := sorted(shown - set(POINTS)):
        entries.append((", ".join(others) + " (best score so far)", CUT_OFF_DOT))
    return entries


def log_ticks(low: float, high: float, drawn=()) -> list[float]:
    """Ticks for a log axis from ``low`` to ``high``: powers of 10, else 1-2-5, else every whole mantissa,
    the first of these with two ticks inside; else the least and the most of the ``drawn`` values."""
    for mantissas in ((1,), (1, 2, 5), (1, 2, 3, 4, 5, 6, 7, 8, 9)):
        ticks = [float(f"{m}e{e}") for e in range(math.floor(math.log10(low)), math.ceil(math.log10(high)) + 1)
                 for m in mantissas]
        inside = [t for t in ticks if low <= t <= high]
        if len(inside) >= 2:
            return inside
    return sorted({min(drawn), max(drawn)}) if drawn else [low, high]


def tick_labels(ticks: list[float]) -> list[str]:
    """Short labels for a log axis's ticks, one notation an axis: 10, 100; 0.05, 0.1; 3e-4, 3.1e-4, 1e-3."""
    def label(value: float) -> str:
        if value >= 1 and value == round(value):
            return str(round(value))
        if min(ticks) >= 0.01:
            return f"{value:.2g}"
        mantissa, exponent = f"{value:.1e}".split("e")
        return f"{mantissa.removesuffix('.0')}e{int(exponent)}"
    return [label(t) for t in ticks]


def plot(path: Path, records: list[TrialRecord], space: Space) -> None:
    """The score of each trial in order, with the best so far; then the score against each searched flag."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    searched = [d for d in space.dimensions.values() if d.kind != "fixed"]
    columns = min(3, len(searched) + 1)
    rows = math.ceil((len(searched) + 1) / columns)
    fig, axes = plt.subplots(rows, columns, figsize=(4.2 * columns, 3.3 * rows), squeeze=False)
    ax, *panels = axes.flat
    scored = [r for r in records if r.score is not None]
    xs = [i for i, r in enumerate(records, 1) if r.score is not None]
    ys, colours = [r.score for r in scored], [dot(r.status) for r in scored]
    ax.scatter(xs, ys, c=colours, s=18, zorder=3)
    ax.step(xs, [max(ys[:i + 1]) for i in range(len(ys))], where="post", color="tab:blue", label="best so far")
    ax.set(xlabel="trial", ylabel="validation score", title="score by trial")
    ax.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))   # trials are whole numbers, not 2.5
    for label, colour in legend_entries(records):
        ax.scatter([], [], c=colour, s=18, label=label)
    ax.legend(fontsize=7)
    for ax, d in zip(panels, searched):
        x = [r.params.get(d.name) for r in scored]
        if d.kind == "choice":
            labels = [str(v) for v in d.values]
            x = [labels.index(str(v)) if str(v) in labels else -1 for v in x]
            ax.set_xticks(range(len(labels)), labels, fontsize=7, rotation=20)
        ax.scatter(x, ys, c=colours, s=18)
        if d.kind.startswith("log") and x:
            ax.set_xscale("log")
            ticks = log_ticks(*ax.get_xlim(), drawn=x)   # a narrow range has no power of 10: no label at all
            ax.xaxis.set_major_locator(matplotlib.ticker.FixedLocator(ticks))
            ax.xaxis.set_major_formatter(matplotlib.ticker.FixedFormatter(tick_labels(ticks)))
            ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())   # 2x10^-4 ... overlapped
        ax.set(title=d.name, ylabel="validation score")
    for ax in panels[len(searched):]:
        ax.axis("off")
    fig.tight_layout()
    tmp = path.with_suffix(".tmp.png")
    fig.savefig(tmp, dpi=110)
    plt.close(fig)
    os.replace(tmp, path)


if __name__ == "__main__":
    from training.tools.starting import python_handlers_back
    python_handlers_back()
    sys.exit(main())
