"""minbert-grid: the ablation grid's runs as trials of Ray Tune, several at once, on one machine, one GPU
shared by k runs, several GPUs or several machines; a stopped grid goes on where it stopped.

    minbert-grid -- --data_dir ../shared/data/multitask                       # the registry's grid, this machine
    minbert-grid --grid ablation --cpus_per_run 1 -- --data_dir DIR           # a named, pinned grid
    minbert-grid --grid full --gpus_per_run 0.25 --address auto -- --data_dir DIR   # a cluster, 4 runs a GPU

Every trial is one ``run_multitask.py`` process writing exactly the run folder that command writes
(``<out_dir>/<prefix><row>-s<seed>/``, the names ``scripts/ablate.sh`` gives), so ``training.tools.report``
and ``ablate.sh`` read a Ray grid unchanged, and a run in a trial is the same run as alone with the same
threads. A trial is idempotent (``next_step``): a finished run folder is kept, a stopped one continues
with ``--resume``, anything else starts clean (an earlier attempt's folder moved to ``<out_dir>/attempts/``).
So the same command again, after Ctrl-C, a killed driver or a lost machine, finishes the grid.

Ray stays inside what this command owns: it starts its own local Ray (``address="local"``: never one found
on the machine) with its session files in a temporary folder of its own, removed at the end (and by the
next command in the same ``--out_dir`` after a killed driver), Tune's files under ``<out_dir>/logs/tune``,
no usage statistics; it never runs ``ray stop``. docs/grid.md: commands for GPUs, clusters and Slurm.
"""
from __future__ import annotations

import argparse
import ctypes
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path
from typing import Callable

from ..harness.outputs import read_metrics
from ..harness.run_lock import is_live
from ..harness.status import FINAL, UNFINISHED, RunStatus
from .grid import DEFAULT_SEED, NAMED_GRIDS, GridRun, plan, rows_of

ROOT = Path(__file__).resolve().parents[2]    # where run_multitask.py is, in the clone or installed
NOT_STARTED = "not started"
EXIT_INTERRUPTED = 130
GRID_LOCK = ".grid.lock"
POLL_SECONDS = 0.5


def stop_file(out_dir: Path) -> Path:
    """The grid's stop signal to its trials, wherever they run (the out_dir is shared by every node):
    the driver writes it on Ctrl-C or SIGTERM, each trial's run then ends "interrupted"."""
    return out_dir / "logs" / "grid.stop"


def main(argv: list[str] | None = None) -> int:
    """Exit codes: 0 every run finished; 1 some failed (the count is printed); 2 bad flags; 130 stopped."""
    args = parse_args(argv)
    runs = plan(args)
    if args.list:
        print("\n".join(" ".join([run.name, *run.flags]) for run in runs))
        return 0
    if error := check_flags(runs):
        print(f"minbert-grid: {error}", file=sys.stderr)
        return 2
    out_dir = Path(args.out_dir).resolve()
    try:
        (out_dir / "logs").mkdir(parents=True, exist_ok=True)
        lock = GridLock(out_dir).acquire()
    except OSError as err:
        print(f"minbert-grid: {err}", file=sys.stderr)
        return 2
    try:
        return run_grid(args, runs, out_dir, lock)
    finally:
        lock.release()


def split_at_dashes(argv: list[str] | None) -> tuple[list[str], list[str]]:
    """(the command's own flags, the flags after ``--`` that go to every run)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    return (argv[:argv.index("--")], argv[argv.index("--") + 1:]) if "--" in argv else (argv, [])


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    own, extra = split_at_dashes(argv)
    parser = argparse.ArgumentParser(
        prog="minbert-grid", description=__doc__.split("\n\n")[0],
        epilog="Flags after -- go to every run, e.g. -- --data_dir ../shared/data/multitask --save_every 50. "
               "Named grids: " + "; ".join(f"{name}: {len(g.rows)} rows, {g.source}" for name, g in NAMED_GRIDS.items()))
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
    parser.add_argument("--out_dir", default="predictions/ablate", help="where the run folders go (default: %(default)s)")
    parser.add_argument("--epochs", default=None, help="multi-task epochs of every run")
    parser.add_argument("--max_steps_per_epoch", default=None, help="round-robin rounds an epoch (none: the whole epoch)")
    parser.add_argument("--stage_steps", default=None, help="batches of every extension's stage")
    parser.add_argument("--cpus_per_run", type=float, default=1.0,
                        help="CPUs Ray gives each run; its torch threads follow (at least 1) (default: %(default)s)")
    parser.add_argument("--gpus_per_run", type=float, default=0.0,
                        help="GPUs of each run, fractional to share one: 0.25 runs four a GPU (default: 0, CPU)")
    parser.add_argument("--address", default=None,
                        help="join a Ray cluster started with `ray start` (HOST:PORT, or auto) instead of starting "
                             "a local Ray on this machine")
    parser.add_argument("--list", action="store_true", help="print the runs (folder name and flags) and exit")
    parser.add_argument("--no_report", action="store_true", help="skip the results table at the end")
    args = parser.parse_args(own)
    args.extra = extra
    if not args.out_dir.strip():
        parser.error("--out_dir needs a folder")
    for flag in extra:
        if flag.split("=")[0] in ("--out_dir", "--run_name", "--resume", "--seed"):
            parser.error(f"{flag} after --: the grid names, places and seeds its runs itself (use --out_dir, "
                         "--seeds and --first_seed before --)")
    budget_given = any(getattr(args, name) is not None for name in ("epochs", "max_steps_per_epoch", "stage_steps"))
    capped = [flag for flag in extra if flag.split("=")[0] in ("--max_eval_examples", "--no_test_predictions")]
    if args.grid and capped and not budget_given:
        parser.error(f"--grid {args.grid} reproduces a documented table, whose runs scored every dev example and "
                     f"predicted the test files: {capped[0]} is refused there (a smoke run of it: give a budget "
                     "flag too, e.g. --max_steps_per_epoch 5)")
    if args.gpus_per_run < 0 or args.cpus_per_run <= 0:
        parser.error("--cpus_per_run must be > 0 and --gpus_per_run >= 0")
    if args.gpus_per_run > 1 and args.gpus_per_run != int(args.gpus_per_run):
        parser.error("--gpus_per_run above 1 must be a whole number")
    known = {name for name, _ in rows_of(args)}
    unknown = sorted(set(args.only or ()) - known)
    if unknown:
        parser.error(f"no row named {', '.join(unknown)} (see --list)")
    return args


def positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text}: give a whole number >= 1")
    return value


# every run's flags checked in one Python start before anything runs: a bad flag after -- fails once
CHECK = """
import contextlib, io, json, sys
sys.path.insert(0, sys.argv[1])
import run_multitask
for name, flags in json.loads(sys.argv[2]):
    stderr = io.StringIO()
    try:
        with contextlib.redirect_stderr(stderr):
            run_multitask.parse_config(flags).validate()
    except SystemExit:
        sys.exit(name + ": " + stderr.getvalue().strip().splitlines()[-1].split("error: ", 1)[-1])
    except ValueError as err:
        sys.exit(f"{name}: {err}")
"""


def first_refused(named_flags: list[tuple[str, list[str]]]) -> str | None:
    """None, or "NAME: why" for the first of (name, ``run_multitask.py`` flags) that it refuses (its parser or
    ``RunConfig.validate``), in one line; all checked in one Python start."""
    done = subprocess.run([sys.executable, "-c", CHECK, str(ROOT), json.dumps(named_flags)], capture_output=True,
                          text=True)
    return None if done.returncode == 0 else (done.stderr.strip().splitlines() or ["flags refused"])[-1]


def check_flags(runs: list[GridRun]) -> str | None:
    """None, or the first run's flags that ``run_multitask.py`` refuses, in one line."""
    return first_refused([(f"run {run.name}", list(run.flags)) for run in runs])


# ---- one trial ---------------------------------------------------------------------------------------------

def next_step(run_dir: Path) -> str:
    """What a trial does with its run folder: "keep" a finished run (or one a search's scheduler stopped early),
    "resume" a stopped one (metrics.json says running or interrupted: Ctrl-C, a kill, a lost machine), "start"
    otherwise (an earlier attempt that failed or never started is moved aside first)."""
    metrics = read_metrics(run_dir)
    status = metrics.get("status") if isinstance(metrics, dict) else None
    if status in FINAL:
        return "keep"
    return "resume" if status in UNFINISHED else "start"


def train_one(config: dict) -> None:
    """The Tune trainable: one run in a ``run_multitask.py`` process, its output in ``<out_dir>/logs/<run>.log``.
    The process dies with the trial (SIGTERM when this worker goes: it marks itself interrupted, as on Ctrl-C)."""
    from ray import tune

    run, out_dir = GridRun(**{**config["run"], "flags": tuple(config["run"]["flags"])}), Path(config["out_dir"])
    run_dir, log = out_dir / run.name, out_dir / "logs" / f"{run.name}.log"
    started, node = time.time(), node_id()
    if stop_file(out_dir).exists():   # the grid is stopping: a trial Tune starts now runs nothing
        tune.report({**result(run, run_dir, "none", 0, started, node), "status": NOT_STARTED})
        return
    wait_until_free([run_dir], seconds=120.0)   # a killed driver's run may still be ending
    step = next_step(run_dir)
    if step == "keep":
        tune.report(result(run, run_dir, "kept", 0, started, node))
        return
    if step == "resume":
        rc = run_process(["--resume", str(run_dir)], log, config)
    else:
        set_aside(run_dir, out_dir)
        rc = run_process(["--run_name", run.name, "--out_dir", str(out_dir), *run.flags], log, config)
    tune.report(result(run, run_dir, {"resume": "resumed", "start": "started"}[step], rc, started, node, log))


def run_process(flags: list[str], log: Path, config: dict) -> int:
    """``run_multitask.py FLAGS`` with this trial's threads; its exit code once it ends. When the grid is
    stopped (its stop file appears), the run gets SIGTERM: it ends "interrupted", as on Ctrl-C."""
    threads = str(config["threads"])
    env = {**os.environ, "OMP_NUM_THREADS": threads, "MKL_NUM_THREADS": threads, "TQDM_DISABLE": "1"}
    cwd = config["cwd"] if Path(config["cwd"]).is_dir() else None   # relative paths in the flags resolve there
    with open(log, "a", encoding="utf-8") as out:
        out.write(f"$ run_multitask.py {' '.join(flags)}\n")
        out.flush()
        child = subprocess.Popen([sys.executable, str(ROOT / "run_multitask.py"), *flags], stdout=out,
                                 stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=cwd, env=env,
                                 preexec_fn=die_with_parent)
        stop = stop_file(Path(config["out_dir"]))
        try:
            while child.poll() is None:
                if stop.exists():
                    child.terminate()
                    return child.wait()
                time.sleep(POLL_SECONDS)
            return child.returncode
        finally:   # this thread stopped before the run ended: the run stops too, cleanly, and is waited for
            if child.poll() is None:
                child.terminate()
                child.wait()


def die_with_parent() -> None:
    """In the child, before exec: SIGTERM it when the Ray worker that started it dies (Linux's
    ``PR_SET_PDEATHSIG``), so no run outlives its trial, whatever killed the worker."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)   # 1 = PR_SET_PDEATHSIG
    except OSError:   # not Linux: the finally of run_process is the only guard
        pass


def wait_until_free(run_dirs: list[Path], seconds: float) -> None:
    """Wait while a process holds the ``.lock`` of any of ``run_dirs`` (a run finishing its clean-up after
    a stop), ``seconds`` at most: after that the run's own lock error, or the report, says who holds it."""
    deadline = time.time() + seconds
    while any(is_live(run_dir) for run_dir in run_dirs) and time.time() < deadline:
        time.sleep(POLL_SECONDS)


def set_aside(run_dir: Path, out_dir: Path) -> None:
    """Move an earlier attempt's folder to ``<out_dir>/attempts/<name>.<n>``: nothing written before is lost."""
    if not run_dir.exists() or not any(run_dir.iterdir()):
        return
    attempts = out_dir / "attempts"
    attempts.mkdir(exist_ok=True)
    n = 1
    while (attempts / f"{run_dir.name}.{n}").exists():
        n += 1
    run_dir.rename(attempts / f"{run_dir.name}.{n}")


def result(run: GridRun, run_dir: Path, action: str, rc: int, started: float, node: str, log: Path | None = None):
    """What the trial reports to the driver: the run folder's status, its dev scores, and its error line."""
    metrics = read_metrics(run_dir)
    metrics = metrics if isinstance(metrics, dict) else {}
    status = metrics.get("status") or RunStatus.FAILED
    if rc != 0 and status == RunStatus.FINISHED:   # it finished, then something else failed (e.g. writing the model card)
        status = RunStatus.FAILED
    error = "" if status == RunStatus.FINISHED else (metrics.get("error") or last_error_line(log) or f"exit code {rc}")
    return {"run": run.name, "status": status, "action": action, "exit_code": rc, "error": error,
            "overall": metrics.get("dev_overall"), "seconds": round(time.time() - started, 1), "node": node}


def last_error_line(log: Path | None) -> str:
    if log is None or not log.exists():
        return ""
    lines = [line.strip() for line in log.read_text(encoding="utf-8", errors="replace").splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith(("error:", "usage:")) or "Error" in line]
    return (errors or lines or [""])[-1]


def node_id() -> str:
    import ray
    return ray.get_runtime_context().get_node_id()


# ---- the driver ----------------------------------------------------------------------------------------------

class GridLock:
    """One grid at a time in an ``--out_dir`` (``flock`` on ``<out_dir>/.grid.lock``, released on any exit).
    The file names the holder's Ray temporary folder, so a driver killed outright leaves nothing for long:
    the next holder removes it."""

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
    """SIGTERM the processes of a killed driver's local Ray that outlived it (its agents linger a minute
    or two): exactly those whose environment names that driver's session, nothing found by name."""
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
    progress = Progress(len(todo))
    stop = Stop(out_dir, lambda: [out_dir / run.name for run in todo])
    if todo:
        with ray_session(args.address, lock, stop):
            run_trials(args, todo, out_dir, progress, stop)
        wait_until_free([out_dir / run.name for run in todo], seconds=60.0)   # no run folder left live
        stop.file.unlink(missing_ok=True)
    return summarize(args, runs, kept, progress.results, out_dir, stop.requested)


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

    def ask(self, reason: str, note: str = "") -> None:
        """Stop every run (they end "interrupted", resumable) and then Tune, for ``reason``."""
        self.requested, self.at = True, time.time()
        self.file.write_text(reason + "\n")
        print(f"stopping: every running run ends as interrupted ({note or reason})", flush=True)

    def stop_all(self) -> bool:
        return self.requested and (not any(is_live(run) for run in self.run_dirs())
                                   or time.time() > self.at + self.seconds)


@contextmanager
def ray_session(address: str | None, lock: GridLock, stop: "Stop"):
    """Ray for the block (``start_ray``), shut down after it, with Ctrl-C and SIGTERM going to ``stop``; its
    temporary folder named in the lock while it lives (for the next holder to clear after a killed driver)."""
    temp_dir = tempfile.mkdtemp(prefix="minbert-ray-")   # short: Ray's socket paths must fit 107 characters
    lock.hold(temp_dir)
    stop.file.unlink(missing_ok=True)
    previous = {sig: signal.signal(sig, stop.request) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        start_ray(address, temp_dir)   # before ray's import: it reads the environment start_ray sets
        import ray
        # ray.init puts its own SIGTERM handler in the driver (a crash report, then the process ends at once,
        # its runs left to their PDEATHSIG): ours again, so that SIGTERM stops as Ctrl-C does
        signal.signal(signal.SIGTERM, stop.request)
        try:
            yield
        finally:
            ray.shutdown()
    except KeyboardInterrupt:   # a second Ctrl-C: Ray goes now; the runs stop by the stop file or with their worker
        stop.requested = True
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        shutil.rmtree(temp_dir, ignore_errors=True)
        lock.hold("")


def start_ray(address: str | None, temp_dir: str) -> None:
    """``ray.init`` as this command's own: a local Ray (``address`` None) with its session files in ``temp_dir``,
    or the cluster at ``address``; its workers import this project (PYTHONPATH)."""
    os.environ["RAY_USAGE_STATS_ENABLED"] = "0"            # nothing sent, nothing written in the home folder
    os.environ["TUNE_RESULT_BUFFER_LENGTH"] = "1"
    os.environ["TUNE_DISABLE_SIGINT_HANDLER"] = "1"        # Ctrl-C is ours (Stop): runs end cleanly first
    os.environ["RAY_AIR_NEW_OUTPUT"] = "0"                 # our progress lines, not Tune's tables
    # Ray SIGKILLs a worker's child processes when the worker exits: a run would be left "running" with a
    # stale .lock. Without that, the child's PDEATHSIG (die_with_parent) sends SIGTERM: it ends "interrupted".
    os.environ["RAY_kill_child_processes_on_worker_exit"] = "0"
    if not address:
        # A local Ray's own token in the environment of the processes it starts: no ~/.ray/auth_token is written,
        # and nothing without the token (another grid, a test) can join this cluster by accident.
        os.environ["RAY_AUTH_MODE"] = "token"
        os.environ["RAY_AUTH_TOKEN"] = secrets.token_hex(32)
        os.environ[SESSION_VARIABLE] = temp_dir
    import ray
    env = {"PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)}
    began = time.time()
    ray.init(address=address or "local", _temp_dir=None if address else temp_dir,
             include_dashboard=False, log_to_driver=False, logging_level="ERROR",
             runtime_env={"env_vars": env})
    print(f"Ray ready in {time.time() - began:.1f} s: {ray.cluster_resources().get('CPU', 0):g} CPUs, "
          f"{ray.cluster_resources().get('GPU', 0):g} GPUs, {len(ray.nodes())} node(s)", flush=True)


def run_trials(args, todo: list[GridRun], out_dir: Path, progress: "Progress", stop: Stop) -> None:
    """Run ``todo`` as Tune trials on the Ray of ``ray_session``, their results into ``progress``."""
    from ray import tune

    class Events(tune.Callback):
        def on_trial_start(self, iteration, trials, trial, **info):
            progress.started(trial.config["run"]["name"])

        def on_trial_result(self, iteration, trials, trial, result, **info):
            progress.finished(result)

        def on_trial_error(self, iteration, trials, trial, **info):
            progress.crashed(trial.config["run"]["name"], str(trial.error_file or ""))

    class WhenStopped(tune.Stopper):
        def __call__(self, trial_id, result):
            return False

        def stop_all(self):
            return stop.stop_all()

    threads = max(1, int(args.cpus_per_run))
    space = {"run": tune.grid_search([asdict(run) for run in todo]), "out_dir": str(out_dir),
             "threads": threads, "cwd": os.getcwd()}
    resources = {"cpu": args.cpus_per_run, "gpu": args.gpus_per_run}
    tuner = tune.Tuner(
        tune.with_resources(train_one, resources), param_space=space,
        tune_config=tune.TuneConfig(trial_name_creator=lambda t: t.config["run"]["name"],
                                    trial_dirname_creator=lambda t: t.config["run"]["name"]),
        run_config=tune.RunConfig(name=f"grid-{time.strftime('%Y%m%d-%H%M%S')}",
                                  storage_path=str(out_dir / "logs" / "tune"), verbose=0,
                                  callbacks=[Events()], stop=WhenStopped(),
                                  # a lost worker or machine: the trial again (it resumes its run folder)
                                  failure_config=tune.FailureConfig(max_failures=2)))
    tuner.fit()


class Progress:
    """One line a trial event: runs done / running / failed of the grid's runs to do."""

    def __init__(self, total: int):
        self.total, self.running, self.results = total, set(), {}

    def started(self, name: str) -> None:
        self.running.add(name)
        self.line(f"{name}: running")

    def finished(self, result: dict) -> None:
        name = result["run"]
        self.running.discard(name)
        self.results[name] = result
        minutes = f"{result['seconds'] / 60:.1f} min"
        if result["status"] == NOT_STARTED:
            self.line(f"{name}: not started (the grid is stopping)")
        elif result["status"] == RunStatus.FINISHED:
            score = f", overall {result['overall']:.3f}" if isinstance(result.get("overall"), float) else ""
            self.line(f"{name}: {'kept' if result['action'] == 'kept' else 'finished'} in {minutes}{score}")
        elif result["status"] in UNFINISHED:
            self.line(f"{name}: stopped ({result['status']}) after {minutes}")
        else:
            self.line(f"{name}: {result['status'].upper()} after {minutes}: {result['error']}")

    def crashed(self, name: str, detail: str) -> None:
        self.running.discard(name)
        self.results[name] = {"run": name, "status": RunStatus.FAILED, "error": f"trial crashed (Ray: {detail})",
                              "action": "started", "overall": None, "seconds": 0.0, "node": ""}
        self.line(f"{name}: FAILED: trial crashed ({detail})")

    def line(self, event: str) -> None:
        done = sum(r["status"] == RunStatus.FINISHED for r in self.results.values())
        failed = sum(r["status"] not in (RunStatus.FINISHED, NOT_STARTED, *UNFINISHED) for r in self.results.values())
        print(f"[{done}/{self.total} done, {len(self.running)} running, {failed} failed] {event}", flush=True)


def summarize(args, runs: list[GridRun], kept: list[GridRun], results: dict[str, dict], out_dir: Path,
              interrupted: bool) -> int:
    """The grid's end: every run's state from its folder, failures by name with their one error line, the table."""
    states = {run.name: next_step(out_dir / run.name) for run in runs}
    done = [run.name for run in runs if states[run.name] == "keep"]
    stopped = [run.name for run in runs if states[run.name] == "resume"]
    waiting = [run.name for run in runs
               if states[run.name] == "start" and results.get(run.name, {}).get("status", NOT_STARTED) == NOT_STARTED]
    failed = [run.name for run in runs if run.name not in (*done, *stopped, *waiting)]
    nodes = {r["node"] for r in results.values() if r.get("node")}
    summary = {"runs": len(runs), "finished": len(done), "kept": len(kept), "stopped": stopped, "failed": failed,
               "not_started": waiting,
               "nodes": sorted(nodes), "trials": results}
    (out_dir / "logs" / "grid.json").write_text(json.dumps(summary, indent=1) + "\n", encoding="utf-8")
    print(f"\n{len(done)} of {len(runs)} runs finished ({len(kept)} kept from before), {len(stopped)} stopped, "
          f"{len(failed)} failed, {len(waiting)} not started" + (f"; on {len(nodes)} Ray nodes" if len(nodes) > 1 else ""))
    for name in failed:
        error = results.get(name, {}).get("error") or "not run"
        print(f"  FAILED {name}: {error} (log: {out_dir / 'logs' / (name + '.log')})")
    if stopped or waiting:
        print(f"  stopped: {', '.join(stopped) or 'none'}; not started: {', '.join(waiting) or 'none'}; "
              "the same command again continues the grid")
    if not args.no_report and done:
        print()
        report = subprocess.run([sys.executable, "-m", "training.tools.report", str(out_dir), "--out",
                                 str(out_dir / "ablation")], cwd=ROOT)
        if report.returncode != 0:
            print("minbert-grid: the report failed (see above); the run folders are complete", file=sys.stderr)
    if interrupted and (stopped or waiting):
        return EXIT_INTERRUPTED
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
