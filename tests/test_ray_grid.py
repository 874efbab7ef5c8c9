"""minbert-grid (training/tools/ray_grid.py): the grid's runs as Ray Tune trials.

Fast tests check the plan (the same runs as scripts/ablate.sh, named grids pinned) and what a trial does with
a run folder. Slow tests train the tiny fixture model: a 2 x 2 grid on a local Ray the command starts itself
(bit for bit the runs alone, nothing of Ray left), and on one module-scoped two-node cluster on this machine:
trials on both nodes, a failing trial isolated, a driver stopped by Ctrl-C or killed and the same command again.
"""
import contextlib
import io
import json
import os
import secrets
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from safetensors.torch import load_file

from training.harness.run_lock import is_live
from training.tools import ray_grid
from training.tools.grid import NAMED_GRIDS, grid_rows

ROOT = Path(__file__).resolve().parents[1]
FIXTURE_DATA = Path(__file__).parent / "fixtures" / "data"
DEV = ["sst-dev-output.csv", "para-dev-output.csv", "sts-dev-output.csv"]


def tiny_flags(model_dir, data_dir=FIXTURE_DATA, *more):
    return ["--data_dir", str(data_dir), "--model", str(model_dir), "--batch_size", "2", "--max_length", "24",
            "--quiet", *more]


def grid_command(out_dir, *args, extra=()):
    return [sys.executable, "-m", "training.tools.ray_grid", "--out_dir", str(out_dir), "--no_report", *args,
            "--", *extra]


def env(**more):
    return {**os.environ, "OMP_NUM_THREADS": "1", "TQDM_DISABLE": "1", "PYTHONPATH": str(ROOT), **more}


def status(run_dir: Path) -> str:
    return json.loads((run_dir / "metrics.json").read_text())["status"]


# ---- the plan (fast) ---------------------------------------------------------------------------------------

def listed(*args):
    """``minbert-grid ARGS`` in this process (``--list`` and usage errors start nothing): exit code, stdout, stderr."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            returncode = ray_grid.main(list(args))
        except SystemExit as exit:
            returncode = exit.code
    return subprocess.CompletedProcess(args, returncode, out.getvalue(), err.getvalue())


@pytest.mark.slow   # bash and a Python start
def test_registry_grid_has_ablate_sh_runs_names_and_flags(tmp_path):
    """The same runs as ablate.sh: its --dry_run commands, minus --run_name/--out_dir, are the grid's flags."""
    dry = subprocess.run(["bash", str(ROOT / "scripts" / "ablate.sh"), "--dry_run", "--seeds", "2", "--only", "ft",
                          "mean-smart", "--out_dir", str(tmp_path), "--", "--quiet"],
                         capture_output=True, text=True, cwd=ROOT, env={**env(), "PYTHON": sys.executable})
    assert dry.returncode == 0, dry.stderr
    expected = {}
    for line in dry.stdout.splitlines():
        words = shlex.split(line)   # the dry run's words as bash's printf %q quotes them (a comma as \,)
        name = words[words.index("--run_name") + 1]
        rest = words[words.index("--out_dir") + 2:]
        expected[name] = rest
    out = listed("--list", "--seeds", "2", "--only", "ft", "mean-smart", "--", "--quiet")
    assert out.returncode == 0, out.stderr
    got = {line.split()[0]: line.split()[1:] for line in out.stdout.splitlines()}
    assert got == expected and len(got) == 4


def test_named_grid_is_pinned_and_seeds_can_be_split():
    out = listed("--grid", "ablation", "--list")
    runs = [line.split() for line in out.stdout.splitlines()]
    assert len(runs) == 7 * 3 and runs[0][0] == "ablate-ft-s11711" and runs[-1][0] == "ablate-mean-joint-s11713"
    mean_all = next(words for words in runs if words[0] == "ablate-mean-all-s11711")
    # the table's six extensions, whatever the registry's mean-all row holds now
    assert {"--ucl", "--scl", "--lcl", "--pre_qqp", "--joint_loss", "--smart"} <= set(mean_all)
    assert "--anneal_sampling" not in mean_all
    assert "--anneal_sampling" in dict(grid_rows())["mean-all"]   # the registry's row did change: the pin matters
    assert mean_all[mean_all.index("--max_steps_per_epoch") + 1] == "none"
    later = listed("--grid", "ablation", "--only", "ft", "--seeds", "2", "--first_seed", "11714", "--list")
    assert [line.split()[0] for line in later.stdout.splitlines()] == ["ablate-ft-s11714", "ablate-ft-s11715"]
    smoke = listed("--grid", "full", "--max_steps_per_epoch", "5", "--list", "--", "--max_eval_examples", "10")
    assert smoke.returncode == 0 and "--max_eval_examples 10" in smoke.stdout   # a smoke run of it: allowed
    full = listed("--grid", "full", "--list").stdout.splitlines()
    assert len(full) == 3 * len(NAMED_GRIDS["full"].rows) and full[0].startswith("st-sst-s11711 --task_batch_sizes none --layer_lr_decay 1 --tasks sst")


@pytest.mark.parametrize("args, message", [
    (["--only", "nope"], "no row named nope"),
    (["--", "--run_name", "x"], "--run_name after --: the grid names and places its runs itself"),
    (["--seeds", "2", "--", "--seed=3"], "--seed=3 after --: the grid seeds its runs itself (11711, ...)"),
    (["--seeds", "0"], "--seeds"),
    (["--gpus_per_run", "1.5"], "whole number"),
    (["--grid", "full", "--", "--max_eval_examples", "10"], "budget pinned (--task_batch_sizes none --layer_lr_decay 1)"),
    (["--grid", "quick", "--", "--no_test_predictions"], "pinned (--task_batch_sizes none --layer_lr_decay 1 --epochs 1 --max_steps_per_epoch 20"),
    (["--out_dir", ""], "--out_dir needs a folder"),
])
def test_bad_grid_flags_are_one_usage_line(args, message):
    out = listed(*args)
    assert out.returncode == 2 and message in out.stderr and "Traceback" not in out.stderr


def test_one_seed_a_row_leaves_the_run_s_own_seed_as_ablate_sh_does():
    """One rule for both (``grid.refused_after_dashes``): --seed after -- is refused only where the grid seeds."""
    out = listed("--only", "ft", "--list", "--", "--seed", "3")
    assert out.returncode == 0 and out.stdout.split()[0] == "ablate-ft" and "--seed 3" in out.stdout, out.stderr


@pytest.mark.slow   # a Python start checks the flags
def test_a_run_flag_every_run_refuses_fails_once_before_ray(tmp_path):
    out = subprocess.run(grid_command(tmp_path, "--only", "ft", extra=["--pooling", "sideways"]),
                         capture_output=True, text=True, cwd=ROOT, env=env())
    assert out.returncode == 2 and "sideways" in out.stderr and "Traceback" not in out.stderr
    assert not (tmp_path / "logs").exists()


def test_next_step_keeps_finished_resumes_stopped_and_starts_the_rest(tmp_path):
    for name, state in [("done", "finished"), ("killed", "running"), ("stopped", "interrupted"),
                        ("broken", "failed"), ("claimed", "starting")]:
        (tmp_path / name).mkdir()
        (tmp_path / name / "metrics.json").write_text(json.dumps({"status": state}))
    (tmp_path / "garbled").mkdir()
    (tmp_path / "garbled" / "metrics.json").write_text("{")
    steps = {name: ray_grid.next_step(tmp_path / name)
             for name in ["done", "killed", "stopped", "broken", "claimed", "garbled", "absent"]}
    assert steps == {"done": "keep", "killed": "resume", "stopped": "resume", "broken": "start", "claimed": "start",
                     "garbled": "start", "absent": "start"}


def test_an_earlier_attempt_is_moved_aside_not_removed(tmp_path):
    run = tmp_path / "ablate-ft"
    for n in (1, 2):
        run.mkdir()
        (run / "metrics.json").write_text(json.dumps({"status": "failed", "n": n}))
        ray_grid.set_aside(run, tmp_path)
    assert not run.exists()
    assert [json.loads((tmp_path / "attempts" / f"ablate-ft.{n}" / "metrics.json").read_text())["n"]
            for n in (1, 2)] == [1, 2]


def test_a_second_grid_in_the_same_folder_is_refused(tmp_path):
    lock = ray_grid.GridLock(tmp_path).acquire()
    try:
        with pytest.raises(OSError, match="another grid is running"):
            ray_grid.GridLock(tmp_path).acquire()
    finally:
        lock.release()
    ray_grid.GridLock(tmp_path).acquire().release()


# ---- real grids (slow) -------------------------------------------------------------------------------------

def ray_leftovers(marker: str) -> list[int]:
    """Processes whose environment holds ``marker`` (a grid's session variable or a cluster's token)."""
    found = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            if marker.encode() in (proc / "environ").read_bytes():
                found.append(int(proc.name))
        except OSError:
            continue
    return found


def assert_none_left(marker: str, seconds: float = 60.0) -> None:
    """No process carries ``marker`` (one of this test's): Ray's end a little after ray.shutdown returns, later
    on a loaded machine, so they get ``seconds``; any left then is killed and named in the failure."""
    deadline = time.time() + seconds
    while ray_leftovers(marker) and time.time() < deadline:
        time.sleep(0.5)
    left = {}
    for pid in ray_leftovers(marker):
        try:
            left[pid] = (Path("/proc") / str(pid) / "cmdline").read_bytes().replace(b"\0", b" ").decode()[:200]
            os.kill(pid, signal.SIGKILL)
        except OSError:
            continue
    assert left == {}, f"processes outlived the command: {left}"


SIGTERM_IN_A_SESSION = """
import os, signal, sys, time
from pathlib import Path
from training.tools import ray_grid
out = Path(sys.argv[1])
(out / "logs").mkdir(parents=True)
stop = ray_grid.Stop(out, lambda: [])
with ray_grid.ray_session(None, ray_grid.GridLock(out).acquire(), stop):
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(1)
    print("requested:", stop.requested, "| stop file:", stop.file.read_text().strip(), flush=True)
"""


@pytest.mark.slow   # a local Ray starts (5 s)
def test_sigterm_to_the_driver_of_a_local_ray_stops_as_ctrl_c_does(tmp_path):
    """ray.init put its own SIGTERM handler in the driver (Ray's crash report, then the driver died at once,
    its runs left "interrupted" by their PDEATHSIG and the grid unsummarized): the session's Stop gets it."""
    mark = {"MINBERT_TEST_MARK": secrets.token_hex(8)}
    done = subprocess.run([sys.executable, "-c", SIGTERM_IN_A_SESSION, str(tmp_path / "grid")], cwd=ROOT,
                          capture_output=True, text=True, env=env(**mark), timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "requested: True | stop file: SIGTERM to the driver" in done.stdout
    assert "SIGTERM received" not in done.stderr
    assert_none_left(f"MINBERT_TEST_MARK={mark['MINBERT_TEST_MARK']}")


def run_alone(model_dir, out_dir: Path, name: str, flags: list[str]) -> Path:
    """The same run as a grid's, alone with one thread (the grid gives a 1-CPU run one thread)."""
    done = subprocess.run([sys.executable, str(ROOT / "run_multitask.py"), "--run_name", name, "--out_dir",
                           str(out_dir), *flags], capture_output=True, text=True, env=env())
    assert done.returncode == 0, done.stderr
    return out_dir / name


def assert_same_run(a: Path, b: Path) -> None:
    """Bit for bit: every dev prediction file, every evaluation's dev scores, the best weights tensor by tensor."""
    for name in DEV:
        assert (a / name).read_bytes() == (b / name).read_bytes(), name
    ma, mb = (json.loads((d / "metrics.json").read_text()) for d in (a, b))
    assert [e["dev"] for e in ma["epochs"]] == [e["dev"] for e in mb["epochs"]]
    wa, wb = (load_file(str(d / "checkpoint" / "model.safetensors")) for d in (a, b))
    assert wa.keys() == wb.keys() and all(wa[k].equal(wb[k]) for k in wa)


@pytest.mark.slow
def test_local_grid_two_rows_two_seeds_same_runs_as_alone_and_nothing_of_ray_left(tiny_model_dir, tmp_path):
    home = Path.home()
    before = {p: p.exists() for p in (home / ".ray", home / "ray_results")}
    # this grid's own temporary folder (short: Ray's socket paths must fit 107 characters): under pytest -n 2
    # another test's Ray may have its minbert-ray-* folder in /tmp at the same time
    own_tmp = Path(tempfile.mkdtemp(prefix="g"))
    out_dir = tmp_path / "grid"
    budget = ["--epochs", "1", "--max_steps_per_epoch", "4", "--stage_steps", "2"]
    mark = {"MINBERT_TEST_MARK": secrets.token_hex(8)}   # in the environment of every process of this grid's Ray
    done = subprocess.run(grid_command(out_dir, "--only", "ft", "mean-smart", "--seeds", "2", *budget,
                                       extra=tiny_flags(tiny_model_dir)),
                          capture_output=True, text=True, cwd=tmp_path, env=env(TMPDIR=str(own_tmp), **mark),
                          timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    names = ["ablate-ft-s11711", "ablate-ft-s11712", "ablate-mean-smart-s11711", "ablate-mean-smart-s11712"]
    assert all(status(out_dir / name) == "finished" for name in names)
    assert "4 of 4 runs finished" in done.stdout and "[4/4 done, 0 running, 0 failed]" in done.stdout
    summary = json.loads((out_dir / "logs" / "grid.json").read_text())
    assert summary["failed"] == [] and set(summary["trials"]) == set(names)
    # TensorBoard lists each run once, by its folder (Tune's own event files under logs/tune made it twice), and
    # every run is tracked as a run of one experiment named for the grid (no --grid: the --out_dir folder's name)
    from tensorboard.backend.event_processing.plugin_event_multiplexer import EventMultiplexer
    assert sorted(EventMultiplexer().AddRunsFromDirectory(str(out_dir)).Runs()) == sorted(names)
    assert {json.loads((out_dir / name / "metrics.json").read_text())["config"]["output"]["experiment"]
            for name in names} == {"grid"}
    # the same run alone, one thread: the same bits
    listing = listed("--only", "mean-smart", "--seeds", "2", *budget, "--list", "--", *tiny_flags(tiny_model_dir))
    flags = dict((line.split()[0], line.split()[1:]) for line in listing.stdout.splitlines())
    alone = run_alone(tiny_model_dir, tmp_path / "alone", "smart", flags["ablate-mean-smart-s11712"])
    assert_same_run(out_dir / "ablate-mean-smart-s11712", alone)
    # the report reads the grid's folders as any others: one row a configuration, its 2 seeds pooled
    from training.tools.report import collect_runs
    rows = {row.run: row for row in collect_runs(out_dir)}
    assert {name: len(row.seed_runs) for name, row in rows.items()} == {"ablate-ft": 2, "ablate-mean-smart": 2}
    # nothing of Ray left: no process, no temporary folder, nothing in the home folder
    assert {p: p.exists() for p in before} == before
    assert not list(own_tmp.glob("minbert-ray-*")), list(own_tmp.iterdir())
    shutil.rmtree(own_tmp)
    # (this grid's: another test's Ray may be running beside it under pytest -n 2)
    assert_none_left(f"MINBERT_TEST_MARK={mark['MINBERT_TEST_MARK']}")
    assert not (out_dir / ".grid.lock").read_text()
    # (the same command again keeps every finished run: the stopped driver's test below)


@pytest.fixture(scope="module")
def cluster():
    """Two Ray nodes of one CPU each on this machine (``own_cluster``), shut down at the end of the module."""
    with own_cluster(head_cpus=1) as (head, temp_dir):
        head.add_node(num_cpus=1, temp_dir=temp_dir)
        head.wait_for_nodes()
        yield head.address, {"RAY_AUTH_MODE": "disabled"}


@pytest.mark.slow
def test_two_nodes_run_trials_on_both_and_a_failing_trial_is_isolated(cluster, tiny_model_dir, tmp_path):
    address, auth = cluster
    # a data folder with SST alone: st-sst trains, ft fails at the QQP files, and the grid goes on
    data = tmp_path / "sst-only"
    data.mkdir()
    for file in FIXTURE_DATA.glob("ids-sst-*"):
        shutil.copy(file, data / file.name)
    out_dir = tmp_path / "grid"
    done = subprocess.run(grid_command(out_dir, "--address", address, "--only", "st-sst", "ft", "--seeds", "2",
                                       "--epochs", "1", "--max_steps_per_epoch", "3",
                                       extra=tiny_flags(tiny_model_dir, data)),
                          capture_output=True, text=True, cwd=tmp_path, env=env(**auth), timeout=600)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "2 of 4 runs finished" in done.stdout and "2 failed" in done.stdout
    failed = [line for line in done.stdout.splitlines() if line.strip().startswith("FAILED")]
    assert len(failed) == 2 and all("ablate-ft-s1171" in line and "quora" in line for line in failed)
    summary = json.loads((out_dir / "logs" / "grid.json").read_text())
    assert sorted(summary["failed"]) == ["ablate-ft-s11711", "ablate-ft-s11712"]
    assert len(summary["nodes"]) == 2   # four trials of one CPU on two one-CPU nodes: both nodes ran some
    assert all(status(out_dir / f"ablate-st-sst-s{seed}") == "finished" for seed in (11711, 11712))


def wait_for(condition, seconds=300.0, what="condition"):
    deadline = time.time() + seconds
    while not condition():
        assert time.time() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def status_or_none(run_dir: Path):
    try:
        return status(run_dir)
    except (OSError, ValueError, KeyError):
        return None


@pytest.mark.slow
def test_a_stopped_driver_then_the_same_command_finishes_the_grid(cluster, tiny_model_dir, tmp_path):
    """st-sts (one task) finishes while ft (three) is still training; the driver gets Ctrl-C then; the same
    command again keeps st-sts as it was and continues ft with --resume. (That a resumed run has the bits of one
    trained without a stop: tests/test_resume.py and the resume tests of each extension; that a grid's run has
    those of the same run alone: the local grid's test above. A driver SIGKILLed, then the same command:
    tests/test_search.py, on the same ray_session, lock and trials.)"""
    address, auth = cluster
    out_dir = tmp_path / "grid"
    flags = tiny_flags(tiny_model_dir, FIXTURE_DATA, "--save_every", "5")
    command = grid_command(out_dir, "--address", address, "--only", "st-sts", "ft", "--epochs", "12",
                           "--max_steps_per_epoch", "none", extra=flags)
    driver = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=tmp_path,
                              env=env(**auth))
    short, long = out_dir / "ablate-st-sts", out_dir / "ablate-ft"
    try:
        wait_for(lambda: status_or_none(short) == "finished" and not is_live(short)
                 and status_or_none(long) == "running"
                 and any((long / "checkpoints").glob("step-*")), what="st-sts finished and ft checkpointed")
    finally:
        driver.send_signal(signal.SIGINT)
    output = driver.communicate(timeout=120)[0]
    assert driver.returncode == 130, output   # Ctrl-C: every run stopped cleanly before the driver ends
    assert status(long) == "interrupted" and not (long / ".lock").exists()
    assert "stopped: ablate-ft" in output
    kept = (short / "metrics.json").read_bytes(), (short / "sts-dev-output.csv").stat().st_mtime_ns
    again = subprocess.run(command, capture_output=True, text=True, cwd=tmp_path, env=env(**auth), timeout=600)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "1 finished already (kept), 1 to run" in again.stdout
    assert ((short / "metrics.json").read_bytes(), (short / "sts-dev-output.csv").stat().st_mtime_ns) == kept
    metrics = json.loads((long / "metrics.json").read_text())
    assert metrics["status"] == "finished" and metrics.get("resumed"), "ft was trained again instead of resumed"
    assert len(metrics["epochs"]) == 12 and (long / "checkpoint" / "model.safetensors").exists()


def test_the_quick_grid_is_four_rows_of_three_seeds_capped_alike():
    """Issue 75: a table with intervals in minutes: every run of the quick grid scores the same dev examples (the
    same --max_eval_examples), so the report compares them; no test predictions."""
    runs = [line.split() for line in listed("--grid", "quick", "--list").stdout.splitlines()]
    assert len(runs) == 4 * 3 and runs[0][0] == "quick-ft-s11711" and runs[-1][0] == "quick-mean-joint-s11713"
    caps = {words[words.index("--max_eval_examples") + 1] for words in runs}
    assert caps == {"300"} and all("--no_test_predictions" in words for words in runs)


def finished_runs(out_dir, *seconds):
    """Run folders in ``out_dir`` whose metrics.json says finished in ``seconds`` each: GridRuns done0, done1, ..."""
    from training.tools.grid import GridRun
    done = [GridRun(f"done{i}", "ft", ()) for i in range(len(seconds))]
    for run, wall in zip(done, seconds):
        (out_dir / run.name).mkdir()
        (out_dir / run.name / "metrics.json").write_text(json.dumps({"status": "finished", "wall_seconds": wall}))
    return done


def test_the_estimate_comes_from_the_grid_s_finished_runs(tmp_path):
    from argparse import Namespace

    from training.tools.grid import GridRun
    from training.tools.ray_grid import estimate
    done = finished_runs(tmp_path, 60, 120)
    todo = [GridRun(f"todo{i}", "ft", ()) for i in range(4)]
    guess = estimate(todo, done, tmp_path, Namespace(address="h:1", cpus_per_run=1.0))
    assert guess.line == (f"time: about 6.0 min for 4 runs, 1 at once, from this grid's 2 finished runs in {tmp_path} "
                          "(1.5 min each)")
    assert (guess.each, guess.at_once) == (90.0, 1)


def test_a_fresh_quick_grid_is_estimated_from_its_documented_measurement(tmp_path, monkeypatch):
    """Issue 87: a fresh --grid quick said "no estimate yet", although docs/grid.md has its measured time (8 min
    13 s for the 12 runs, 2 at once on 2 cores): the estimate is that, saying where it comes from."""
    from training.tools.grid import plan
    monkeypatch.setattr(ray_grid.os, "cpu_count", lambda: 2)
    args = ray_grid.parse_args(["--grid", "quick", "--", "--data_dir", "data"])
    runs = plan(args)
    guess = ray_grid.estimate(runs, [], tmp_path, args)
    assert guess.line == ("time: about 8.2 min for 12 runs, 2 at once, from the measured time of --grid quick (12 runs "
                          "in 8.2 min, 2 at once, one thread each, on the project's 2-core AMD EPYC with nothing else "
                          "running, docs/grid.md#a-table-in-minutes; this machine may differ)")
    assert guess.each == pytest.approx(493 * 2 / 12) and guess.at_once == 2
    # the grid's own finished runs come first
    kept = finished_runs(tmp_path, 30)
    assert ray_grid.estimate(runs, kept, tmp_path, args).line.startswith(
        f"time: about 3.0 min for 12 runs, 2 at once, from this grid's 1 finished run in {tmp_path} (0.5 min each)")


@pytest.mark.parametrize("argv", [["--grid", "quick", "--max_steps_per_epoch", "5"],
                                  ["--grid", "quick", "--", "--epochs", "2"],
                                  ["--grid", "quick", "--", "--pre_qqp_steps=40"],
                                  ["--grid", "quick", "--cpus_per_run", "2"],
                                  ["--grid", "quick", "--gpus_per_run", "0.25"],
                                  ["--grid", "ablation"], []])
def test_a_grid_not_run_as_measured_has_no_estimate_until_a_run_finishes(tmp_path, argv, monkeypatch):
    """The measured time holds for its grid's pinned budget on CPUs, one thread a run: another budget, more threads a
    run, a GPU, or a grid without a measured time, with no finished run of its model to take a pace from (none
    beside the grid's folder, no documented ones), say there is no estimate yet, and when the time left comes."""
    from training.tools import run_budget
    from training.tools.grid import measured_time, plan
    monkeypatch.setattr(run_budget, "DOCUMENTED_RUNS", tmp_path / "no-documented-runs")
    args = ray_grid.parse_args(argv)
    assert measured_time(args) is None
    runs, out_dir = plan(args), tmp_path / "grid"
    guess = ray_grid.estimate(runs, [], out_dir, args)
    assert guess.each is None
    assert guess.line == (f"time: no estimate yet ({len(runs)} runs; none of this grid has finished in {out_dir}, none "
                          "of its runs as given has a measured time written down, and no finished run of their model, "
                          "max length and device gives a pace): from the first finished run on, each run's line says "
                          "the time left")


def reference_run(folder: Path, wall: float, examples: int, max_length: int = 128, device: str = "cpu") -> None:
    """A finished run's metrics.json of the embedded model, as a run writes one (the fields the pace reads)."""
    folder.mkdir(parents=True)
    (folder / "metrics.json").write_text(json.dumps({
        "status": "finished", "wall_seconds": wall, "train_examples": examples, "device": device, "torch_threads": 1,
        "config": {"model": {"model": None}, "data": {"max_length": max_length}}}))


def test_a_fresh_grid_is_estimated_from_its_budget_and_the_pace_of_finished_runs_like_its_own(tmp_path, monkeypatch):
    """Issue 87 item 2, the third source: no run of the grid finished, no measured time; each run trains 2 epochs of
    3 rounds of 3 tasks at batch 2 (36 examples, its flags as the run resolves them, on the fixture data), at the
    median wall time a trained example took in finished runs of the same model, max length and device beside the
    grid's folder (0.2 s: 10 s / 100, 30 s / 100, 20 s / 100; not the other max length's, nor the GPU's)."""
    from argparse import Namespace

    from training.tools import run_budget
    from training.tools.grid import GridRun
    documented = tmp_path / "documented"
    monkeypatch.setattr(run_budget, "DOCUMENTED_RUNS", documented)
    flags = ("--data_dir", str(FIXTURE_DATA), "--batch_size", "2", "--task_batch_sizes", "none", "--epochs", "2",
             "--max_steps_per_epoch", "3")
    todo = [GridRun(f"todo{i}", "ft", flags) for i in range(2)]
    args = Namespace(address="h:1", cpus_per_run=1.0, gpus_per_run=0.0, grid=None)
    out_dir = tmp_path / "grid"
    reference_run(documented / "full" / "ft-s1", wall=1.0, examples=100)   # another machine: this one's come first
    assert "the documented runs of" in ray_grid.estimate(todo, [], out_dir, args).line
    for name, wall in [("a", 10.0), ("b", 30.0), ("c", 20.0)]:
        reference_run(tmp_path / "earlier" / name, wall, 100)
    reference_run(tmp_path / "short" / "d", 1000.0, 100, max_length=64)
    reference_run(tmp_path / "gpu" / "e", 1000.0, 100, device="cuda")
    guess = ray_grid.estimate(todo, [], out_dir, args)
    assert guess.each == pytest.approx(36 * 0.2) and guess.at_once == 1
    assert guess.line == (f"time: roughly 0.2 min for 2 runs, 1 at once, from their budgets (36 trained examples a run "
                          f"on average) at the pace of 3 finished runs of the same model, max length and device in "
                          f"this machine's finished runs in {tmp_path} (200.0 ms of wall time a trained example, "
                          "loading and scoring included; 1 torch threads there, 1 here): a rough figure, extension "
                          "stages and scoring caps not weighed")


def ended(name, status, seconds, action="started", overall=None, error=""):
    """A trial's result as ``ray_grid.result`` reports it."""
    return {"run": name, "status": status, "action": action, "exit_code": 0, "error": error, "signal": None,
            "overall": overall, "seconds": seconds, "node": "n"}


def test_each_run_s_line_says_the_time_left(capsys):
    """The runs not ended, at the mean wall time of this command's finished runs, as many at once as estimated."""
    progress = ray_grid.Progress(5, ray_grid.Estimate(60.0, 2, ""))
    progress.started("a")
    progress.started("b")
    capsys.readouterr()
    progress.finished(ended("a", "finished", 120.0, overall=0.675))   # 4 left at 2.0 min each, 2 at once
    assert capsys.readouterr().out == ("[1/5 done, 1 running, 0 failed] a: finished in 2.0 min, overall 0.675; "
                                       "about 4.0 min left\n")
    progress.crashed("b", "worker died")   # 3 left; a failed run's time is not a run's
    assert capsys.readouterr().out == ("[1/5 done, 0 running, 1 failed] b: FAILED: trial crashed (worker died); "
                                       "about 3.0 min left\n")


def test_the_time_left_takes_the_estimate_until_a_run_of_this_command_finishes(capsys):
    progress = ray_grid.Progress(3, ray_grid.Estimate(90.0, 1, ""))
    progress.finished(ended("x", "failed", 6.0, error="boom"))   # 2 left at the estimate's 1.5 min, 1 at once
    assert capsys.readouterr().out == ("[0/3 done, 0 running, 1 failed] x: FAILED after 0.1 min: boom; "
                                       "about 3.0 min left\n")
    progress.finished(ended("k", "finished", 0.0, action="kept"))   # kept: trained nothing here, not a run's time
    assert capsys.readouterr().out == "[1/3 done, 0 running, 1 failed] k: kept in 0.0 min; about 1.5 min left\n"
    progress.finished(ended("z", "finished", 30.0))   # the last: nothing left to say
    assert capsys.readouterr().out == "[2/3 done, 0 running, 1 failed] z: finished in 0.5 min\n"
    nothing = ray_grid.Progress(2, ray_grid.Estimate(None, 2, ""))   # no estimate, no run finished: no time left
    nothing.finished(ended("y", "failed", 6.0, error="boom"))
    assert capsys.readouterr().out == "[0/2 done, 0 running, 1 failed] y: FAILED after 0.1 min: boom\n"


@contextlib.contextmanager
def own_cluster(head_cpus: int):
    """A Ray cluster of the caller's alone (a test that removes a node would break the module's ``cluster``): its
    head of ``head_cpus`` CPUs, its session files in a short temporary folder (Ray's socket paths must fit 107
    characters), shut down and removed at the end (every process of it gone: they carry a variable of their own)."""
    import ray
    from ray.cluster_utils import Cluster
    temp_dir = tempfile.mkdtemp(prefix="minbert-ray-test-")
    marker = {"MINBERT_TEST_CLUSTER": secrets.token_hex(8), "RAY_AUTH_MODE": "disabled",
              "RAY_USAGE_STATS_ENABLED": "0", "RAY_TMPDIR": temp_dir}   # its address file there, not in /tmp/ray
    saved = {key: os.environ.get(key) for key in marker}
    os.environ.update(marker)
    (Path(temp_dir) / "ray").mkdir()
    head = None
    try:
        head = Cluster(initialize_head=True, head_node_args={"num_cpus": head_cpus, "temp_dir": temp_dir,
                                                            "include_dashboard": False})
        yield head, temp_dir
    finally:
        if head is not None:
            head.shutdown()
        ray.shutdown()
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        assert_none_left("MINBERT_TEST_CLUSTER=" + marker["MINBERT_TEST_CLUSTER"], seconds=30.0)
        shutil.rmtree(temp_dir, ignore_errors=True)


@pytest.mark.slow
def test_a_lost_node_is_a_few_lines_naming_its_run_which_resumes_on_another(tiny_model_dir, tmp_path):
    """Issue 86: a node lost while a run trains on it flooded the driver's terminal (about 75 lines of Ray's and a
    traceback). The run needs 2 CPUs, which only the second node has; that node is killed outright (a lost machine:
    no graceful shutdown) once the run has a checkpoint, a node of 2 CPUs having joined meanwhile. The terminal
    gets the grid's own lines (its start, the estimate, Ray ready, the run's start and end, the summary: 6 when
    nothing goes wrong) and 2 for the loss (which run, which node, what becomes of it; the run's new start): at most
    15 leaves room for another loss or a failure's summary lines, not for Ray's raylet log or a traceback (68 lines
    before). Ray starts the run again on the other node; it resumes its folder and finishes (exit code 0)."""
    out_dir, run = tmp_path / "grid", tmp_path / "grid" / "ablate-ft"
    flags = tiny_flags(tiny_model_dir, FIXTURE_DATA, "--save_every", "5")
    with own_cluster(head_cpus=1) as (cluster, temp_dir):
        doomed = cluster.add_node(num_cpus=2, temp_dir=temp_dir)
        cluster.wait_for_nodes()
        command = grid_command(out_dir, "--address", cluster.address, "--only", "ft", "--cpus_per_run", "2",
                               "--epochs", "30", "--max_steps_per_epoch", "none", extra=flags)
        driver = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=tmp_path,
                                  env=env(RAY_AUTH_MODE="disabled"))
        try:
            wait_for(lambda: status_or_none(run) == "running" and any((run / "checkpoints").glob("step-*")),
                     what="ablate-ft training, a checkpoint written")
            cluster.add_node(num_cpus=2, temp_dir=temp_dir)
            cluster.wait_for_nodes()
            cluster.remove_node(doomed, allow_graceful=False)
            output = driver.communicate(timeout=300)[0]
            print(output)   # the terminal as the user saw it (shown when the test fails)
        finally:
            if driver.poll() is None:
                driver.kill()
                driver.communicate()
    lines = [line for line in output.splitlines() if line.strip()]
    assert driver.returncode == 0, output
    assert len(lines) <= 15 and "Traceback" not in output, output
    lost = [line for line in lines if "ablate-ft: lost with its Ray worker on node" in line]
    assert len(lost) == 1 and "Ray starts it again (try 2 of 3)" in lost[0], output
    metrics = json.loads((run / "metrics.json").read_text())
    assert metrics["status"] == "finished" and metrics.get("resumed"), output


def test_a_lost_trial_is_one_line_naming_its_node_and_ray_s_messages_go_to_the_log(tmp_path, capsys):
    """Issue 86, without a cluster: the line for a run whose worker or node is lost names the node its trial wrote
    down, and what the cluster sends the driver meanwhile (a raylet's death, with its last 20 log lines) goes to
    ray.log, not the terminal."""
    from ray._private import worker
    (tmp_path / "logs").mkdir()
    ray_grid.node_file(tmp_path, "ablate-ft").write_text("10.0.0.7 3fb15d794c7197afc8d773e1\n")
    assert ray_grid.lost_where(tmp_path, "ablate-ft") == "node 10.0.0.7, id 3fb15d79"
    assert ray_grid.lost_where(tmp_path, "never-started") == "its node"
    progress = ray_grid.Progress(2)
    progress.started("ablate-ft")
    capsys.readouterr()
    progress.lost("ablate-ft", "node 10.0.0.7, id 3fb15d79", "The actor died unexpectedly before finishing this task.",
                  "Ray starts it again (try 2 of 3)")
    assert capsys.readouterr().out == ("[0/2 done, 0 running, 0 failed] ablate-ft: lost with its Ray worker on node "
                                       "10.0.0.7, id 3fb15d79, the node or the worker died (Ray: The actor died "
                                       "unexpectedly before finishing this task.); Ray starts it again (try 2 of 3)\n")
    printing = worker.print_to_stdstream
    with ray_grid.ray_messages_to(tmp_path / "ray.log"):
        worker.print_to_stdstream({"lines": ["Raylet is terminated.", "[state-dump] ..."], "pid": "raylet",
                                   "is_err": False}, ignore_prefix=False)
    assert worker.print_to_stdstream is printing
    assert capsys.readouterr() == ("", "")
    assert (tmp_path / "ray.log").read_text() == "(raylet) Raylet is terminated.\n(raylet) [state-dump] ...\n"


def test_what_ray_said_of_a_failure_is_read_from_tune_s_text_file_never_unpickled(tmp_path):
    """The line of a lost or crashed trial quotes Ray from Tune's error.txt (its last failure): the last line naming
    an error class, else the first; the pickled copy beside it (a payload that would run on loading) is not read."""
    class Trial:
        error_file = str(tmp_path / "error.txt")
        pickled_error_file = str(tmp_path / "error.pkl")
    (tmp_path / "error.pkl").write_bytes(f"cos\nsystem\n(S'touch {tmp_path / 'pwned'}'\ntR.".encode())
    assert ray_grid.ray_error(Trial()) == "no reason given"   # no error.txt yet
    (tmp_path / "error.txt").write_text(
        "Failure # 1 (occurred at 2026-12-07_14-00-00)\nray::ImplicitFunc.train() (pid=1, ip=10.0.0.7)\n"
        "  File \"x.py\", line 1, in f\nValueError: boom\n"
        "Failure # 2 (occurred at 2026-12-07_14-01-00)\nThe actor eb427c35c03bc521a59e6c4c01000000 died unexpectedly "
        "before finishing this task.\n"
        "\tclass_name: ImplicitFunc\n")
    assert ray_grid.ray_error(Trial()) == "The actor died unexpectedly before finishing this task."
    with open(tmp_path / "error.txt", "a") as more:
        more.write("Failure # 3 (occurred at 2026-12-07_14-02-00)\nray::ImplicitFunc.train() (pid=2, ip=10.0.0.8)\n"
                   "  File \"x.py\", line 1, in f\nRuntimeError: " + "x" * 200 + "\n")
    said = ray_grid.ray_error(Trial())
    assert said.startswith("RuntimeError: xxx") and len(said) == 100 and said.endswith("…")
    assert not (tmp_path / "pwned").exists()
