"""minbert-grid: the ablation grid's runs as trials of Ray Tune, several at once, on one machine, one GPU
shared by k runs, several GPUs or several machines; a stopped grid goes on where it stopped.

    minbert-grid -- --data_dir ../shared/data/multitask                       # the registry's grid, this machine
    minbert-grid --grid ablation --cpus_per_run 1 -- --data_dir DIR           # a named, pinned grid
    minbert-grid --grid full --gpus_per_run 0.25 --address auto -- --data_dir DIR   # a cluster, 4 runs a GPU

Every trial is one ``run_multitask.py`` process writing its run folder (``<out_dir>/<prefix><row>-s<seed>/``, as
``scripts/ablate.sh`` names it), so ``training.tools.report`` reads a Ray grid unchanged. A trial is idempotent
(``next_step``): the same command again finishes the grid. Ray stays inside what this command owns: its own local
Ray and temporary folder, Tune's files under ``<out_dir>/logs/tune``, no usage statistics, never ``ray stop``.
docs/grid.md: GPUs, clusters and Slurm.
"""
from __future__ import annotations

if __name__ == "__main__":   # a stop while torch imports: one line, not a traceback (training/tools/starting.py)
    from training.tools.starting import stop_cleanly_while_starting
    stop_cleanly_while_starting()

import argparse
import contextlib
import ctypes
import itertools
import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

from minbert.errors import describe, first_line

from ..harness.outputs import read_metrics
from ..harness.run_lock import LOCK, is_live
from ..harness.status import FINAL, UNFINISHED, RunStatus
from .command import run_command
from .grid import (DEFAULT_SEED, NAMED_GRIDS, ROOT, GridRun, first_refused, measured_time, plan, refused_after_dashes,
                   rows_of)

NOT_STARTED = "not started"
EXIT_INTERRUPTED = 130
GRID_LOCK = ".grid.lock"
POLL_SECONDS = 0.5
CONNECT_SECONDS = 10.0       # --address: a TCP connection to the cluster's GCS port, at most this long
JOIN_SECONDS = 45.0          # --address: ray.init joins within this, or the command ends (with the above: < 1 min)
LOCAL_START_SECONDS = 300.0  # a local Ray starts within this (5-20 s on 2 loaded cores)
HANDLED_SIGNALS = (signal.SIGINT, signal.SIGTERM)   # what a run ends "interrupted" on (exit code 130, 143)
MAX_FAILURES = 2             # a trial whose worker or node is lost is started again this often (it resumes its run)


class GridError(Exception):
    """What the command cannot do, in one line (exit code 2)."""


def stop_file(out_dir: Path) -> Path:
    """The driver's stop signal to its trials on every node (the out_dir is shared): their runs end "interrupted"."""
    return out_dir / "logs" / "grid.stop"


def main(argv: list[str] | None = None) -> int:
    """Exit codes: 0 every run finished; 1 some failed (the count is printed) or the report failed; 2 bad flags,
    a cluster that does not answer or cannot hold a run; 130 stopped (Ctrl-C, SIGTERM), at any point."""
    args = parse_args(argv)
    runs = plan(args)
    if args.list:
        return run_command(lambda: print("\n".join(" ".join([run.name, *run.flags]) for run in runs)))
    out_dir = Path(args.out_dir).resolve()

    def prepare() -> None:
        if error := first_refused([(f"run {run.name}", list(run.flags)) for run in runs]):
            raise GridError(error)
        (out_dir / "logs").mkdir(parents=True, exist_ok=True)
    return guarded("minbert-grid", out_dir, prepare, lambda lock: run_grid(args, runs, out_dir, lock))


def guarded(command: str, out_dir: Path, prepare: Callable[[], None], run: Callable[[GridLock], int]) -> int:
    """``prepare`` (after ``check_out_dir``, before anything is written), then ``run`` holding the folder's lock:
    what the command cannot do is one line and exit code 2, Ctrl-C at any point exit code 130, no traceback."""
    lock = None
    try:
        try:
            check_out_dir(out_dir)
            prepare()
            lock = GridLock(out_dir).acquire()
        except (OSError, ValueError) as err:
            raise GridError(err) from None
        return run(lock)
    except GridError as err:
        print(f"{command}: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:   # outside the runs' own stop (the grid's Stop)
        print(f"\n{command}: stopped; the same command again continues", file=sys.stderr, flush=True)
        return EXIT_INTERRUPTED
    finally:
        if lock is not None:
            stop_file(out_dir).unlink(missing_ok=True)
            lock.release()


def check_out_dir(out_dir: Path) -> None:
    """``GridError`` when ``out_dir`` is a run folder or inside one (the report would read that run as a row)."""
    if (run := run_folder_of(out_dir)) is not None:
        where = "is the run folder" if run == out_dir else f"is inside the run folder {run}"
        raise GridError(f"--out_dir {out_dir} {where} (it holds a run's metrics.json or checkpoint/): "
                        f"give a folder of its own, e.g. {run.parent / 'grid'}")


def run_folder_of(path: Path) -> Path | None:
    """The run folder (metrics.json naming its "config", or ``checkpoint/run_config.json``) ``path`` is or is in."""
    return next((folder for folder in (path, *path.parents)
                 if (folder / "metrics.json").is_file() and "config" in read_metrics(folder)
                 or (folder / "checkpoint" / "run_config.json").is_file()), None)


def parse_own(parser: argparse.ArgumentParser, argv: list[str] | None) -> argparse.Namespace:
    """The command's own flags, parsed, with ``extra``: the flags after ``--`` that go to every run."""
    argv = sys.argv[1:] if argv is None else list(argv)
    own, extra = (argv[:argv.index("--")], argv[argv.index("--") + 1:]) if "--" in argv else (argv, [])
    args = parser.parse_args(own)
    args.extra = extra
    if not args.out_dir.strip():
        parser.error("--out_dir needs a folder")
    return args


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="minbert-grid", description=__doc__.split("\n\n")[0],
        epilog="Flags after -- go to every run, e.g. -- --data_dir ../shared/data/multitask --save_every 50. "
               "Named grids: " + "; ".join(f"{name}: {len(g.rows)} rows, {g.source}"
                                           for name, g in NAMED_GRIDS.items()))
    parser.add_argument("--grid", choices=sorted(NAMED_GRIDS), default=None,
                        help="a named grid, its rows and budget pinned (default: the registry's rows and ablate.sh's "
                             "budget, which change when an extension is added)")
    parser.add_argument("--only", nargs="+", metavar="ROW", default=None, help="run only these rows (see --list)")
    parser.add_argument("--seeds", type=positive, default=None,
                        help="seeds a row (default: the named grid's, else 1: the run's default seed, folder "
                             "without -s<seed>, as ablate.sh)")
    parser.add_argument("--first_seed", type=int, default=None,
                        help=f"the first of the consecutive seeds (default {DEFAULT_SEED}); split a grid's seeds "
                             "between machines with it")
    parser.add_argument("--out_dir", default="predictions/ablate",
                        help="where the run folders go (default: %(default)s)")
    parser.add_argument("--epochs", default=None, help="multi-task epochs of every run")
    parser.add_argument("--max_steps_per_epoch", default=None,
                        help="round-robin rounds an epoch (none: the whole epoch)")
    parser.add_argument("--stage_steps", default=None, help="batches of every extension's stage")
    parser.add_argument("--cpus_per_run", type=float, default=1.0,
                        help="CPUs Ray gives each run; its torch threads follow (at least 1) (default: %(default)s)")
    parser.add_argument("--gpus_per_run", type=float, default=0.0,
                        help="GPUs of each run, fractional to share one: 0.25 runs four a GPU (default: 0, CPU)")
    parser.add_argument("--address", default=None,
                        help="join a Ray cluster started with `ray start` (HOST:PORT, or auto) instead of starting "
                             "a local Ray on this machine; one that does not answer within "
                             f"{CONNECT_SECONDS + JOIN_SECONDS:g} s is one line and exit code 2")
    add_wait_for_resources(parser)
    parser.add_argument("--list", action="store_true", help="print the runs (folder name and flags) and exit")
    parser.add_argument("--no_report", action="store_true", help="skip the results table at the end")
    args = parse_own(parser, argv)
    budget_given = any(getattr(args, name) is not None for name in ("epochs", "max_steps_per_epoch", "stage_steps"))
    capped = [flag for flag in args.extra if flag.split("=")[0] in ("--max_eval_examples", "--no_test_predictions")]
    if args.grid and capped and not budget_given:
        pinned = " ".join(NAMED_GRIDS[args.grid].budget) or "every dev example scored, the test files predicted"
        parser.error(f"--grid {args.grid} reproduces a documented table, its runs' budget pinned ({pinned}): "
                     f"{capped[0]} is refused there (a smoke run of it: give a budget flag too, e.g. "
                     "--max_steps_per_epoch 5)")
    if args.gpus_per_run < 0 or args.cpus_per_run <= 0 or args.wait_for_resources < 0:
        parser.error("--cpus_per_run must be > 0, --gpus_per_run >= 0 and --wait_for_resources >= 0")
    if args.gpus_per_run > 1 and args.gpus_per_run != int(args.gpus_per_run):
        parser.error("--gpus_per_run above 1 must be a whole number")
    if unknown := sorted(set(args.only or ()) - {name for name, _ in rows_of(args)}):
        parser.error(f"no row named {', '.join(unknown)} (see --list)")
    if refused := refused_after_dashes(args.extra, plan(args)):   # as scripts/ablate.sh
        parser.error(refused)
    return args


def add_wait_for_resources(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--wait_for_resources", type=float, default=0.0, metavar="SECONDS",
                        help="before any run is queued, the cluster must have a node with --cpus_per_run CPUs and "
                             "--gpus_per_run GPUs, else one line and exit code 2; on a cluster whose nodes join "
                             "later (an autoscaler), wait this long for one (default: 0, check once at the start)")


def positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text}: give a whole number >= 1")
    return value


# ---- one trial ---------------------------------------------------------------------------------------------

def next_step(run_dir: Path) -> str:
    """What a trial does with its run folder: "keep" a finished run (or one stopped early), "resume" a stopped one
    (Ctrl-C, a kill, a lost machine), "start" otherwise (an earlier attempt is moved aside first)."""
    status = read_metrics(run_dir).get("status")
    if status in FINAL:
        return "keep"
    return "resume" if status in UNFINISHED else "start"


def run_words(run_dir: Path, flags, experiment: str | None = None) -> tuple[str, list[str]]:
    """``next_step`` of ``run_dir`` and the ``run_multitask.py`` words that take it; a start sets an attempt aside.
    A new run is tracked under ``experiment`` (default: the folder's parent's name; a flag among ``flags`` wins),
    so that every run of a grid or a search is one run of one mlflow experiment; a resumed run keeps its own."""
    wait_until_free([run_dir], seconds=120.0)   # a killed driver's run may still be ending
    step = next_step(run_dir)
    if step == "keep":
        return step, []
    if step == "resume":
        return step, ["--resume", str(run_dir)]
    set_aside(run_dir, run_dir.parent)
    return step, ["--run_name", run_dir.name, "--out_dir", str(run_dir.parent),
                  "--experiment", experiment or run_dir.parent.name, *flags]


def start_run(words: list[str], out, threads: int, cwd: str, **streams) -> subprocess.Popen:
    """``run_multitask.py WORDS`` with ``threads`` torch threads, its command line first in the log ``out``, in
    ``cwd`` where it is a folder (relative paths in the flags resolve there); it dies with its parent."""
    out.write(f"$ run_multitask.py {' '.join(words)}\n")
    out.flush()
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads), "TQDM_DISABLE": "1"}
    return subprocess.Popen([sys.executable, str(ROOT / "run_multitask.py"), *words], stderr=subprocess.STDOUT,
                            cwd=cwd if Path(cwd).is_dir() else None, env=env, preexec_fn=die_with_parent, **streams)


def train_one(config: dict) -> None:
    """The Tune trainable: one run in a ``run_multitask.py`` process, its output in ``<out_dir>/logs/<run>.log``.
    When the grid is stopped (its stop file appears), the run gets SIGTERM: it ends "interrupted", as on Ctrl-C."""
    import ray
    from ray import tune

    run, out_dir = GridRun(**{**config["run"], "flags": tuple(config["run"]["flags"])}), Path(config["out_dir"])
    run_dir, log, stop = out_dir / run.name, out_dir / "logs" / f"{run.name}.log", stop_file(out_dir)
    started, node = time.time(), ray.get_runtime_context().get_node_id()
    node_file(out_dir, run.name).write_text(f"{ray.util.get_node_ip_address()} {node}\n", encoding="utf-8")
    if stop.exists():   # the grid is stopping: a trial Tune starts now runs nothing
        tune.report({**result(run, run_dir, "none", 0, started, node), "status": NOT_STARTED})
        return
    step, words = run_words(run_dir, run.flags, config["experiment"])
    if step == "keep":
        tune.report(result(run, run_dir, "kept", 0, started, node))
        return
    with open(log, "a", encoding="utf-8") as out:
        child = start_run(words, out, config["threads"], config["cwd"], stdout=out, stdin=subprocess.DEVNULL)
        try:
            while child.poll() is None and not stop.exists():
                time.sleep(POLL_SECONDS)
        finally:   # the grid stopped, or this thread before the run ended: the run stops too, and is waited for
            if child.poll() is None:
                child.terminate()
                child.wait()
    if child.returncode < 0:   # killed outright: its flock went with it, the file stays (the same command resumes it)
        clear_stale_lock(run_dir)
    tune.report(result(run, run_dir, {"resume": "resumed", "start": "started"}[step], child.returncode, started,
                       node, log, stopping=stop.exists()))


def node_file(out_dir: Path, name: str) -> Path:
    """Where a trial writes the address and id of the Ray node it runs on: the driver names it when a trial is lost."""
    return out_dir / "logs" / f"{name}.node"


def lost_where(out_dir: Path, name: str) -> str:
    """"node ADDRESS, id ABCDEF12" of the run's last trial, from ``node_file``; "its node" when it never wrote it."""
    try:
        address, node = node_file(out_dir, name).read_text(encoding="utf-8").split()
    except (OSError, ValueError):
        return "its node"
    return f"node {address}, id {node[:8]}"


def die_with_parent() -> None:
    """In the child, before exec: no run outlives the Ray worker that started it, whatever killed the worker."""
    with contextlib.suppress(OSError):   # not Linux: the finally of train_one is the only guard
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)   # 1 = PR_SET_PDEATHSIG


def wait_until_free(run_dirs: list[Path], seconds: float) -> None:
    """Wait, ``seconds`` at most, while a run of ``run_dirs`` finishes its clean-up after a stop (holds its lock)."""
    deadline = time.time() + seconds
    while any(is_live(run_dir) for run_dir in run_dirs) and time.time() < deadline:
        time.sleep(POLL_SECONDS)


def set_aside(run_dir: Path, out_dir: Path) -> None:
    """Move an earlier attempt's folder to ``<out_dir>/attempts/<name>.<n>``: nothing written before is lost."""
    if not run_dir.exists() or not any(run_dir.iterdir()):
        return
    attempts = out_dir / "attempts"
    attempts.mkdir(exist_ok=True)
    n = next(n for n in itertools.count(1) if not (attempts / f"{run_dir.name}.{n}").exists())
    run_dir.rename(attempts / f"{run_dir.name}.{n}")


def clear_stale_lock(run_dir: Path) -> None:
    """Remove the ``.lock`` file a run killed outright left behind; one a live process holds is left alone (taken
    before the file goes, so no other process can be holding it then)."""
    try:
        import fcntl
        fd = os.open(run_dir / LOCK, os.O_RDWR)
    except (ImportError, OSError):
        return
    try:
        with contextlib.suppress(OSError):   # held: a live run's
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            (run_dir / LOCK).unlink(missing_ok=True)
    finally:
        os.close(fd)


def killed_by(rc: int) -> str | None:
    """The signal's name when a process ended by a signal it did not handle (``subprocess``'s negative code)."""
    if rc >= 0:
        return None
    try:
        return signal.Signals(-rc).name
    except ValueError:
        return f"signal {-rc}"


def result(run: GridRun, run_dir: Path, action: str, rc: int, started: float, node: str, log: Path | None = None,
           stopping: bool = False):
    """What the trial reports to the driver: the run folder's status, its dev scores, and its error line. A run
    killed by a signal it does not handle failed, whatever its metrics.json says, unless the grid's stop sent it."""
    metrics = read_metrics(run_dir)
    written = metrics.get("status")
    status, signal_name = written or RunStatus.FAILED, killed_by(rc)
    # the grid's stop (or the trial's worker gone: PDEATHSIG) reached the run: its handler's 130 or 143, or the
    # signal itself when it came before the handler was in place
    grid_stop = rc in (128 + signal.SIGINT, 128 + signal.SIGTERM) or (stopping and -rc in HANDLED_SIGNALS)
    if signal_name and grid_stop:   # "interrupted", or never started
        signal_name, status = None, written or NOT_STARTED
    if signal_name:
        status = RunStatus.FAILED
        then = (f"metrics.json says {written}: the same command resumes it" if written in UNFINISHED else
                f"its metrics.json said {written} before: kept, not run again" if written in FINAL else
                "the same command starts it again")
        error = f"killed by {signal_name}, a signal it does not handle (kill -9, the OOM killer); {then}"
    else:
        if rc != 0 and not grid_stop and status in FINAL:
            status = RunStatus.FAILED   # it finished, then something else failed (e.g. writing the model card)
        error = "" if status in (*FINAL, NOT_STARTED) else \
            (metrics.get("error") or last_error_line(log) or f"exit code {rc}")
        if status == RunStatus.FAILED and written in FINAL:
            error = f"{written}, then exit code {rc}: {error}"
    return {"run": run.name, "status": status, "action": action, "exit_code": rc, "error": error,
            "signal": signal_name, "overall": metrics.get("dev_overall"), "seconds": round(time.time() - started, 1),
            "node": node}


def last_error_line(log: Path | None) -> str:
    if log is None or not log.exists():
        return ""
    lines = [line.strip() for line in log.read_text(encoding="utf-8", errors="replace").splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith(("error:", "usage:")) or "Error" in line]
    return (errors or lines or [""])[-1]


# ---- the driver ----------------------------------------------------------------------------------------------

class GridLock:
    """One grid at a time in an ``--out_dir`` (``flock`` on ``<out_dir>/.grid.lock``). The file names the holder's
    Ray temporary folder: the next holder removes what a driver killed outright left."""

    def __init__(self, out_dir: Path):
        self.path, self.fd = out_dir / GRID_LOCK, None

    def acquire(self) -> "GridLock":
        import fcntl
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise OSError(f"{self.path.parent}: another grid is running in this folder (it holds {self.path}); "
                          "wait for it, or give another --out_dir") from None
        self.fd = fd
        earlier = os.read(fd, 4096).decode(errors="replace").strip()
        if earlier and Path(earlier).name.startswith("minbert-ray-"):   # what a killed driver left
            end_session(earlier)
            shutil.rmtree(earlier, ignore_errors=True)
        return self

    def hold(self, temp_dir: str) -> None:
        os.ftruncate(self.fd, 0)
        os.pwrite(self.fd, temp_dir.encode(), 0)

    def release(self) -> None:
        if self.fd is not None:
            os.ftruncate(self.fd, 0)
            os.close(self.fd)
            self.fd = None


SESSION_VARIABLE = "MINBERT_GRID_SESSION"   # in the environment of every process of a grid's local Ray


def end_session(temp_dir: str) -> None:
    """SIGTERM what of a killed driver's local Ray outlived it: the processes whose environment names its session."""
    marker = f"{SESSION_VARIABLE}={temp_dir}".encode()
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            if proc.stat().st_uid == os.getuid() and marker in (proc / "environ").read_bytes().split(b"\0"):
                os.kill(int(proc.name), signal.SIGTERM)
        except (OSError, ValueError):   # gone meanwhile, or not ours to read
            continue


def run_grid(args: argparse.Namespace, runs: list[GridRun], out_dir: Path, lock: GridLock) -> int:
    kept = [run for run in runs if next_step(out_dir / run.name) == "keep"]
    todo = [run for run in runs if run not in kept]
    where = f"Ray at {args.address}" if args.address else "a local Ray"
    print(f"grid -> {out_dir}: {len(runs)} runs, {len(kept)} finished already (kept), {len(todo)} to run on {where}, "
          f"{args.cpus_per_run:g} CPU{'s' if args.cpus_per_run != 1 else ''}"
          + (f" and {args.gpus_per_run:g} GPU" if args.gpus_per_run else "") + " a run", flush=True)
    guess = estimate(todo, kept, out_dir, args) if todo else None
    progress = Progress(len(todo), guess)
    stop = Stop(out_dir, lambda: [out_dir / run.name for run in todo])
    if guess is not None:
        print(guess.line, flush=True)
        on_ray(args, lock, stop, lambda: run_trials(args, todo, out_dir, progress, stop))
    return summarize(args, runs, kept, progress.results, out_dir, stop.requested)


def on_ray(args: argparse.Namespace, lock: GridLock, stop: Stop, trials: Callable[[], None]) -> None:
    """``trials`` in a ``ray_session`` (``args``: where, and what one run takes); then no run left live."""
    with ray_session(args.address, lock, stop, per_run=(args.cpus_per_run, args.gpus_per_run),
                     wait=args.wait_for_resources):
        trials()
    wait_until_free(stop.run_dirs(), seconds=60.0)
    stop.file.unlink(missing_ok=True)


@dataclass(frozen=True)
class Estimate:
    """The grid's time before it starts: the seconds a run (None: nothing to go on), how many run at once, and the
    line that says it and where the seconds come from."""
    each: float | None
    at_once: int
    line: str


def estimate(todo: list[GridRun], kept: list[GridRun], out_dir: Path, args: argparse.Namespace) -> Estimate:
    """The time ``todo`` should take, as many at once as the CPUs hold (one on a cluster), at the pace of this grid's
    finished runs in ``out_dir``, else of the named grid's documented measurement (``grid.measured_time``), else from
    the runs' budgets and the pace of finished runs like them (``from_budgets``)."""
    at_once = 1 if args.address else max(1, min(len(todo), int((os.cpu_count() or 1) // args.cpus_per_run)))
    runs = f"{len(todo)} runs, {at_once} at once"
    seconds = [metrics["wall_seconds"] for run in kept
               if isinstance((metrics := read_metrics(out_dir / run.name)).get("wall_seconds"), (int, float))]
    if seconds:
        each = sum(seconds) / len(seconds)
        finished = f"{len(seconds)} finished run{'s' if len(seconds) != 1 else ''}"
        return Estimate(each, at_once, f"time: about {minutes(time_for(len(todo), each, at_once))} for {runs}, from "
                                       f"this grid's {finished} in {out_dir} ({minutes(each)} each)")
    if (measured := measured_time(args)) is not None:
        each = measured.seconds_a_run
        return Estimate(each, at_once, f"time: about {minutes(time_for(len(todo), each, at_once))} for {runs}, from "
                                       f"the measured time of --grid {args.grid} ({measured.runs} runs in "
                                       f"{minutes(measured.seconds)}, {measured.at_once} at once, one thread each, "
                                       f"on {measured.machine}; this machine may differ)")
    if (guess := from_budgets(todo, out_dir, args, at_once)) is not None:
        return guess
    return Estimate(None, at_once, f"time: no estimate yet ({len(todo)} runs; none of this grid has finished in "
                                   f"{out_dir}, none of its runs as given has a measured time written down, and no "
                                   "finished run of their model, max length and device gives a pace): from the first "
                                   "finished run on, each run's line says the time left")


def from_budgets(todo: list[GridRun], out_dir: Path, args: argparse.Namespace, at_once: int) -> Estimate | None:
    """The estimate from each run's budget (the examples it trains) at the pace of finished runs of its model, max
    length and device (``run_budget``); None unless every run has both."""
    from .run_budget import budgets, pace, reference_runs
    references = reference_runs(out_dir)
    if not todo or not any(runs for _, runs in references):
        return None   # nothing to take a pace from: no Python start for the budgets
    found = budgets(todo, gpus=args.gpus_per_run > 0)
    kinds = {(b["model"], b["max_length"], b["cuda"]) for b in found if b is not None}
    known = {kind: pace(references, *kind) for kind in kinds}
    paces = [b and known[b["model"], b["max_length"], b["cuda"]] for b in found]
    if any(p is None for p in paces):
        return None
    each = sum(b["examples"] * p.seconds for b, p in zip(found, paces)) / len(todo)
    examples = sum(b["examples"] for b in found) / len(todo)
    ref = paces[0]
    return Estimate(each, at_once, f"time: roughly {minutes(time_for(len(todo), each, at_once))} for {len(todo)} runs, "
                                   f"{at_once} at once, from their budgets ({examples:,.0f} trained examples a run on "
                                   f"average) at the pace of {ref.runs} finished run{'s' if ref.runs != 1 else ''} of "
                                   f"the same model, max length and device in {ref.where} ({ref.seconds * 1000:.1f} ms "
                                   f"of wall time a trained example, loading and scoring included; {ref.threads} "
                                   f"torch threads there, {max(1, int(args.cpus_per_run))} here): a rough figure, "
                                   "extension stages and scoring caps not weighed")


def time_for(runs: int, each: float, at_once: int) -> float:
    """The seconds ``runs`` take at ``each`` seconds a run, ``at_once`` at a time."""
    return runs * each / at_once


def minutes(seconds: float) -> str:
    return f"{seconds / 60:.1f} min"


class Stop:
    """Ctrl-C and SIGTERM of the driver: the first writes the stop file (every run ends "interrupted"), and
    Tune ends the experiment once no run of the grid is live (``stop_all``); the second is KeyboardInterrupt."""

    def __init__(self, out_dir: Path, run_dirs: Callable[[], list[Path]], seconds: float = 120.0):
        self.file, self.run_dirs, self.seconds = stop_file(out_dir), run_dirs, seconds
        self.requested, self.at = False, 0.0

    def request(self, signum, frame) -> None:
        if self.requested:
            raise KeyboardInterrupt
        name = signal.Signals(signum).name
        self.ask(f"{name} to the driver, process {os.getpid()}", f"again: {name} stops at once")

    def at_once(self, signum, frame) -> None:
        """Ctrl-C or SIGTERM while no run is live yet (Ray starting, the cluster checked): the command ends now."""
        self.requested = True
        raise KeyboardInterrupt

    def ask(self, reason: str, note: str) -> None:
        """Stop every run (they end "interrupted", resumable) and then Tune, for ``reason``."""
        self.requested, self.at = True, time.time()
        self.file.write_text(reason + "\n")
        print(f"stopping: every running run ends as interrupted ({note})", flush=True)

    def stop_all(self) -> bool:
        return self.requested and (not any(is_live(run) for run in self.run_dirs())
                                   or time.time() > self.at + self.seconds)


@contextlib.contextmanager
def ray_session(address: str | None, lock: GridLock, stop: "Stop", per_run: tuple[float, float] | None = None,
                wait: float = 0.0):
    """Ray for the block (``start_ray``), shut down after it, its temporary folder named in the lock while it lives;
    ``per_run``: (CPUs, GPUs) one run takes, checked against the nodes first. Until the block starts no run is
    live, so Ctrl-C or SIGTERM ends the command at once; in the block they are ``Stop.request``."""
    temp_dir = tempfile.mkdtemp(prefix="minbert-ray-")   # short: Ray's socket paths must fit 107 characters
    lock.hold(temp_dir)
    stop.file.unlink(missing_ok=True)
    previous = {sig: signal.signal(sig, stop.at_once) for sig in HANDLED_SIGNALS}
    started, inside, release = None, False, threading.Event()
    try:
        started = start_ray(address, temp_dir, stop.file.parent / "ray.log", release)
        import ray
        try:
            with ray_messages_to(stop.file.parent / "ray.log"):
                if per_run is not None:
                    wait_for_room(*per_run, seconds=wait)
                for sig in HANDLED_SIGNALS:
                    signal.signal(sig, stop.request)
                inside = True
                yield
        finally:
            for sig in HANDLED_SIGNALS:   # a signal during Ray's shutdown: at once (no stop file written then)
                signal.signal(sig, stop.at_once)
            ray.shutdown()
    except KeyboardInterrupt:   # a second Ctrl-C: Ray goes now; the runs stop by the stop file or with their worker
        stop.requested = True
        if not inside:
            raise   # before any run: the command ends (exit code 130)
    finally:
        release.set()   # the thread that started Ray ends (with it, whatever of a local Ray is left)
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if started is None and not address:   # a local Ray cut off while it started: its processes end too
            end_session(temp_dir)
        shutil.rmtree(temp_dir, ignore_errors=True)
        lock.hold("")


@contextlib.contextmanager
def ray_messages_to(path: Path):
    """The messages the cluster sends the driver (a raylet that died, a node marked dead: Ray prints each on stdout
    with the last 20 lines of the raylet's log) appended to ``path`` for the block; the grid's own line says what
    they mean for a run (``Progress.lost``). Ray prints them through ``print_to_stdstream`` of its worker module
    (Ray 2.60); a Ray without it prints them as before."""
    from ray._private import worker
    printing = getattr(worker, "print_to_stdstream", None)
    if printing is None:
        yield
        return

    def to_log(data: dict, ignore_prefix: bool = False) -> None:
        with open(path, "a", encoding="utf-8") as out:
            out.writelines(f"({data.get('pid', 'ray')}) {line}\n" for line in data.get("lines", ()))

    worker.print_to_stdstream = to_log
    try:
        yield
    finally:
        worker.print_to_stdstream = printing


def wait_for_room(cpus: float, gpus: float, seconds: float) -> None:
    """Wait, ``seconds`` at most, for a node that can hold a run, else ``GridError`` (Tune would queue it forever)."""
    import ray
    deadline, said = time.time() + seconds, False
    while (missing := unmet(ray.nodes(), cpus, gpus)) is not None:
        if time.time() >= deadline:
            hint = (f"after waiting {seconds:g} s (--wait_for_resources)" if seconds else
                    "give less, or --wait_for_resources SECONDS on a cluster whose nodes join later")
            raise GridError(f"{missing}; {hint}")
        if not said:
            print(f"waiting up to {seconds:g} s (--wait_for_resources) for a node that can hold a run: {missing}",
                  flush=True)
            said = True
        time.sleep(min(2.0, max(0.0, deadline - time.time())))


def unmet(nodes: list[dict], cpus: float, gpus: float) -> str | None:
    """None when one live node has ``cpus`` CPUs and ``gpus`` GPUs, else one line naming the flag no node meets."""
    alive = [node.get("Resources") or {} for node in nodes if node.get("Alive", True)]
    if any(r.get("CPU", 0) >= cpus and r.get("GPU", 0) >= gpus for r in alive):
        return None
    most_cpus, most_gpus = (max((r.get(key, 0) for r in alive), default=0) for key in ("CPU", "GPU"))
    has = (f"{len(alive)} node(s), {sum(r.get('CPU', 0) for r in alive):g} CPUs, "
           f"{sum(r.get('GPU', 0) for r in alive):g} GPUs")
    if gpus > 0 and most_gpus == 0:
        return f"--gpus_per_run {gpus:g}: the cluster has no GPU ({has})"
    if gpus > most_gpus:
        return f"--gpus_per_run {gpus:g}: no node has {gpus:g} GPUs, the most on one is {most_gpus:g} ({has})"
    if cpus > most_cpus:
        return f"--cpus_per_run {cpus:g}: no node has {cpus:g} CPUs, the most on one is {most_cpus:g} ({has})"
    return f"--cpus_per_run {cpus:g} --gpus_per_run {gpus:g}: no node has both ({has})"


def check_reachable(address: str, seconds: float = CONNECT_SECONDS) -> None:
    """``GridError`` unless the cluster's GCS port (as Ray resolves ``address``) takes a TCP connection in time."""
    from ray._private.services import canonicalize_bootstrap_address
    try:
        where = canonicalize_bootstrap_address(address.split("://")[-1] if "://" in address else address)
    except Exception as err:   # no cluster found for "auto", a malformed address
        raise GridError(f"--address {address}: {first_line(err)}") from None
    if where is None:
        raise GridError(f"--address {address}: no Ray cluster found (start one with `ray start --head`, or give "
                        "its HOST:PORT)")
    host, _, port = where.rpartition(":")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=seconds).close()
    except (OSError, ValueError) as err:
        why = f"no answer within {seconds:g} s" if isinstance(err, socket.timeout) else describe(err)
        raise GridError(f"--address {address}: nothing answers at {where} ({why}); is the "
                        "cluster's head started (`ray start --head --port PORT`), and is this its GCS port?") from None


def set_ray_environment(address: str | None, temp_dir: str) -> None:
    """The environment Ray and Tune read when they start (the command's own process: an entry point's)."""
    os.environ["RAY_USAGE_STATS_ENABLED"] = "0"            # nothing sent, nothing written in the home folder
    os.environ["TUNE_RESULT_BUFFER_LENGTH"] = "1"
    os.environ["TUNE_DISABLE_SIGINT_HANDLER"] = "1"        # Ctrl-C is ours (Stop): runs end cleanly first
    os.environ["RAY_AIR_NEW_OUTPUT"] = "0"                 # our progress lines, not Tune's tables
    # no result files of Tune's own under <out_dir>/logs/tune (its event files made TensorBoard list every run twice;
    # the driver hears each result through its callbacks)
    os.environ["TUNE_DISABLE_AUTO_CALLBACK_LOGGERS"] = "1"
    # a trial's failure (a lost node: Ray's traceback) is said by the grid's callbacks in a line, not by Tune's logger
    os.environ["TUNE_PRINT_ALL_TRIAL_ERRORS"] = "0"
    # not SIGKILL (a run left "running", a stale .lock): die_with_parent's SIGTERM ends it "interrupted"
    os.environ["RAY_kill_child_processes_on_worker_exit"] = "0"
    if not address:   # a local Ray's own token: no ~/.ray/auth_token written, nothing else joins it by accident
        os.environ["RAY_AUTH_MODE"] = "token"
        # one token a process: Ray reads it once, and a second local Ray (the search's --confirm grid) needs the same
        os.environ.setdefault("RAY_AUTH_TOKEN", secrets.token_hex(32))
        os.environ[SESSION_VARIABLE] = temp_dir


def start_ray(address: str | None, temp_dir: str, log: Path, release: threading.Event) -> bool:
    """``ray.init`` of a local Ray (``address`` None, session files in ``temp_dir``) or the cluster at ``address``,
    Ray's messages meanwhile in ``log``; ``GridError`` if Ray does not start. ``ray.init`` runs in a thread that
    waits for ``release`` before it ends: a local Ray's processes die with the *thread* that started them."""
    set_ray_environment(address, temp_dir)
    import ray
    if address:
        check_reachable(address)
    env = {"PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)}
    began, outcome, ready = time.time(), {}, threading.Event()

    def init() -> None:
        try:
            ray.init(address=address or "local", _temp_dir=None if address else temp_dir,
                     include_dashboard=False, log_to_driver=False, logging_level="ERROR",
                     runtime_env={"env_vars": env})
        except BaseException as err:   # handed to the main thread
            outcome["error"] = err
        finally:
            ready.set()
        release.wait()

    # in a thread: ray.init can block in Ray's C++ for tens of seconds at a time (a cluster that does not answer
    # retries every 30 s), where the main thread's signal handlers would wait; the main thread only waits here
    seconds = JOIN_SECONDS if address else LOCAL_START_SECONDS
    with stderr_to(log) as redirect:
        threading.Thread(target=init, name="ray.init", daemon=True).start()
        try:
            ready.wait(seconds)   # Ctrl-C (Stop.at_once) raises here at once
        except KeyboardInterrupt:
            if not address and ready.wait(10.0) and ray.is_initialized():   # a local Ray a moment from whole
                ray.shutdown()
            raise
        finally:   # a ray.init that goes on (the command ends now): its C++ keeps writing to the log, not here
            redirect["keep"] = not ready.is_set()
    if not ready.is_set():
        raise GridError(f"--address {address}: Ray did not join the cluster there within {seconds:g} s (its log: "
                        f"{log})" if address else f"the local Ray did not start within {seconds:g} s (its log: {log})")
    if isinstance(err := outcome.get("error"), KeyboardInterrupt):
        raise err
    if err is not None:
        where = f"--address {address}" if address else "the local Ray"
        raise GridError(f"{where}: Ray did not start: {first_line(err)}")
    print(f"Ray ready in {time.time() - began:.1f} s: {ray.cluster_resources().get('CPU', 0):g} CPUs, "
          f"{ray.cluster_resources().get('GPU', 0):g} GPUs, {len(ray.nodes())} node(s)", flush=True)
    return True


@contextlib.contextmanager
def stderr_to(path: Path):
    """This process's stderr (file descriptor 2: Ray's C++ writes there too) appended to ``path`` for the block.
    When the block sets ``["keep"]`` (Ray's C++ still at work), descriptor 2 stays on ``path``, ``sys.stderr`` not."""
    redirect = {"keep": False}
    sys.stderr.flush()
    saved = os.dup(2)
    with open(path, "a", encoding="utf-8") as out:
        os.dup2(out.fileno(), 2)
        try:
            yield redirect
        finally:
            sys.stderr.flush()
            if redirect["keep"]:
                sys.stderr = os.fdopen(saved, "w", buffering=1, encoding=sys.stderr.encoding or "utf-8",
                                       errors="backslashreplace")
            else:
                os.dup2(saved, 2)
                os.close(saved)


def run_trials(args, todo: list[GridRun], out_dir: Path, progress: "Progress", stop: Stop) -> None:
    """``todo`` as Tune trials, their results into ``progress``."""
    from ray import tune

    class Events(tune.Callback):
        def on_trial_start(self, iteration, trials, trial, **info):
            progress.started(trial.config["run"]["name"])

        def on_trial_result(self, iteration, trials, trial, result, **info):
            progress.finished(result)

        def on_trial_recover(self, iteration, trials, trial, **info):
            name = trial.config["run"]["name"]
            progress.lost(name, lost_where(out_dir, name), ray_error(trial),
                          f"Ray starts it again (try {trial.num_failures + 1} of {MAX_FAILURES + 1}): it resumes its "
                          "run folder")

        def on_trial_error(self, iteration, trials, trial, **info):
            name = trial.config["run"]["name"]
            then = {"resume": "the same command resumes it", "keep": "its folder says finished: kept",
                    "start": "the same command starts it again"}[next_step(out_dir / name)]
            progress.crashed(name, f"{ray_error(trial)} on {lost_where(out_dir, name)}, try {trial.num_failures} of "
                                   f"{MAX_FAILURES + 1}, Tune's log: {trial.error_file or 'none'}; {then}")

    space = {"run": tune.grid_search([asdict(run) for run in todo]), "out_dir": str(out_dir),
             "threads": max(1, int(args.cpus_per_run)), "cwd": os.getcwd(),
             # every run one run of one experiment, named for the grid (a search's --confirm grid has no name)
             "experiment": getattr(args, "grid", None) or out_dir.name}
    resources = {"cpu": args.cpus_per_run, "gpu": args.gpus_per_run}
    tune.Tuner(tune.with_resources(train_one, resources), param_space=space,
               tune_config=tune.TuneConfig(trial_name_creator=lambda t: t.config["run"]["name"],
                                           trial_dirname_creator=lambda t: t.config["run"]["name"]),
               # a lost worker or machine: the trial again (it resumes its run folder)
               run_config=run_config("grid", out_dir, Events(), stop.stop_all, max_failures=MAX_FAILURES)).fit()


def ray_error(trial) -> str:
    """What Ray said of a trial's last failure, in a line: from the text file Tune keeps (its error.txt; the pickled
    copy beside it is never loaded), the last line naming an error class (a task's own exception), else the first
    (``ActorDiedError``'s "The actor died unexpectedly ..."), without Ray's ids, at most 100 characters."""
    try:
        text = Path(trial.error_file).read_text(encoding="utf-8", errors="replace")
    except (OSError, TypeError):   # no file (a trial that never reached its folder)
        return "no reason given"
    block = [line.strip() for line in text.rsplit("Failure # ", 1)[-1].splitlines()[1:] if line.strip()]
    named = [line for line in block if re.match(r"[\w.]+(Error|Exception)\b", line)]
    said = named[-1] if named else block[0] if block else "no reason given"
    said = re.sub(r" ?\b[0-9a-f]{16,}\b", "", said)   # an actor's or node's id: the line names the node already
    return said if len(said) <= 100 else said[:99] + "…"


def run_config(kind: str, out_dir: Path, events, stop_all: Callable[[], bool], max_failures: int):
    """Tune's run configuration of a grid or a search: files under ``<out_dir>/logs/tune``, ended by ``stop_all()``."""
    from ray import tune

    class WhenStopped(tune.Stopper):
        def __call__(self, trial_id, result):
            return False

        def stop_all(self):
            return stop_all()

    return tune.RunConfig(name=f"{kind}-{time.strftime('%Y%m%d-%H%M%S')}", verbose=0, callbacks=[events],
                          storage_path=str(out_dir / "logs" / "tune"), stop=WhenStopped(),
                          failure_config=tune.FailureConfig(max_failures=max_failures))


class Progress:
    """One line a trial event: runs done / running / failed of the grid's runs to do; a run's end adds the time
    left: the runs not ended at the mean wall time of those finished in this command (before one has, the
    estimate's seconds a run), as many at once as the estimate says."""

    def __init__(self, total: int, guess: Estimate | None = None):
        self.total, self.running, self.results, self.guess = total, set(), {}, guess

    def started(self, name: str) -> None:
        self.running.add(name)
        self.line(f"{name}: running")

    def finished(self, result: dict) -> None:
        name = result["run"]
        self.running.discard(name)
        self.results[name] = result
        took = minutes(result["seconds"])
        if result["status"] == NOT_STARTED:
            self.line(f"{name}: not started (the grid is stopping)")
        elif result["status"] == RunStatus.FINISHED:
            score = f", overall {result['overall']:.3f}" if isinstance(result.get("overall"), float) else ""
            self.line(f"{name}: {'kept' if result['action'] == 'kept' else 'finished'} in {took}{score}{self.left()}")
        elif result["status"] in UNFINISHED:
            self.line(f"{name}: stopped ({result['status']}) after {took}")
        elif result.get("signal"):
            then = result["error"].split("; ", 1)[-1]   # the error line's first part names the signal again
            self.line(f"{name}: failed (killed by {result['signal']}) after {took}: {then}{self.left()}")
        else:
            self.line(f"{name}: {result['status'].upper()} after {took}: {result['error']}{self.left()}")

    def lost(self, name: str, where: str, error: str, then: str) -> None:
        """The run's Ray worker or node is gone (``error``: Ray's, e.g. a node lost) and Tune tries it again."""
        self.running.discard(name)
        self.line(f"{name}: lost with its Ray worker on {where}, the node or the worker died (Ray: {error}); {then}")

    def crashed(self, name: str, detail: str) -> None:
        self.running.discard(name)
        self.results[name] = {"run": name, "status": RunStatus.FAILED, "error": f"trial crashed (Ray: {detail})",
                              "action": "started", "overall": None, "seconds": 0.0, "node": ""}
        self.line(f"{name}: FAILED: trial crashed ({detail}){self.left()}")

    def counts(self) -> tuple[int, int]:
        """Runs finished and runs failed so far."""
        done = sum(r["status"] == RunStatus.FINISHED for r in self.results.values())
        failed = sum(r["status"] not in (RunStatus.FINISHED, NOT_STARTED, *UNFINISHED) for r in self.results.values())
        return done, failed

    def left(self) -> str:
        """What a run's end adds, "; about N min left"; nothing when no run is left or nothing to go on yet."""
        took = [r["seconds"] for r in self.results.values() if r["status"] == RunStatus.FINISHED
                and r["action"] != "kept"]   # a kept run trained nothing in this command
        each = sum(took) / len(took) if took else (self.guess.each if self.guess else None)
        still = self.total - sum(self.counts())
        if each is None or still <= 0:
            return ""
        at_once = self.guess.at_once if self.guess else 1
        return f"; about {minutes(time_for(still, each, at_once))} left"

    def line(self, event: str) -> None:
        done, failed = self.counts()
        print(f"[{done}/{self.total} done, {len(self.running)} running, {failed} failed] {event}", flush=True)


def summarize(args, runs: list[GridRun], kept: list[GridRun], results: dict[str, dict], out_dir: Path,
              interrupted: bool) -> int:
    """The grid's end: every run's state from its folder, failures by name with their one error line, the table.
    A run that failed in this command is failed whatever its folder says."""
    states = {run.name: "failed" if results.get(run.name, {}).get("status") == RunStatus.FAILED
              else next_step(out_dir / run.name) for run in runs}
    done = [run.name for run in runs if states[run.name] == "keep"]
    stopped = [run.name for run in runs if states[run.name] == "resume"]
    waiting = [run.name for run in runs
               if states[run.name] == "start" and results.get(run.name, {}).get("status", NOT_STARTED) == NOT_STARTED]
    failed = [run.name for run in runs if run.name not in (*done, *stopped, *waiting)]
    nodes = {r["node"] for r in results.values() if r.get("node")}
    summary = {"runs": len(runs), "finished": len(done), "kept": len(kept), "stopped": stopped, "failed": failed,
               "not_started": waiting, "nodes": sorted(nodes), "trials": results}
    (out_dir / "logs" / "grid.json").write_text(json.dumps(summary, indent=1) + "\n", encoding="utf-8")
    print(f"\n{len(done)} of {len(runs)} runs finished ({len(kept)} kept from before), {len(stopped)} stopped, "
          f"{len(failed)} failed, {len(waiting)} not started"
          + (f"; on {len(nodes)} Ray nodes" if len(nodes) > 1 else ""))
    for name in failed:
        print(f"  FAILED {name}: {results.get(name, {}).get('error') or 'not run'} "
              f"(log: {out_dir / 'logs' / (name + '.log')})")
    if stopped or waiting:
        print(f"  stopped: {', '.join(stopped) or 'none'}; not started: {', '.join(waiting) or 'none'}; "
              "the same command again continues the grid")
    report_failed = False
    if not args.no_report and done:
        print()
        report_failed = run_report(out_dir) != 0
        if report_failed:
            print("minbert-grid: the report failed (see above); the run folders are complete", file=sys.stderr)
    if interrupted and (stopped or waiting):
        return EXIT_INTERRUPTED
    return 1 if failed or report_failed else 0


def run_report(out_dir: Path, name: str = "ablation", *flags: str) -> int:
    """``training.tools.report`` on the grid's folder (the table, ``<out_dir>/<name>.*``); its exit code."""
    return subprocess.run([sys.executable, "-m", "training.tools.report", str(out_dir), *flags, "--out",
                           str(out_dir / name)], cwd=ROOT).returncode


if __name__ == "__main__":
    from training.tools.starting import python_handlers_back
    python_handlers_back()
    sys.exit(main())
