"""Reliability round 6 (issue 74; the grid's and the search's side, and issue 75's item 5): minbert-grid and
minbert-search under faults.

- 74.1: a run whose metrics.json says "finished" stays finished when the grid's stop (130, 143) reaches its last
  clean-up; a grid never resumes or reruns it.
- 74.2: a run killed by a signal it does not handle (SIGKILL, the OOM killer) is failed, named with its signal,
  the grid's exit code 1, its ``.lock`` cleared, and the same command resumes it; a search whose trial was killed
  so exits 1 too (it has not ended) and confirms nothing, and the same command resumes the trial.
- 74.3: an ``--address`` nothing answers at ends in one line within a minute (exit 2); Ctrl-C while Ray starts or
  joins ends the command within seconds (exit 130), no traceback, no ``logs/grid.stop``, nothing of Ray left.
- 74.4: a run no node can hold (GPUs, CPUs) is one line and exit 2 before any trial; ``--wait_for_resources``.
- 74.5: an ``--out_dir`` that is (or is inside) a run folder is refused before anything is written; a report
  that fails makes the exit code non-zero.
- 74.6 / 75.5: every run of a grid and every value of a search space is checked against the model before Ray;
  a trial that fails at start is "failed" (listed with its error line, not run again); a space of fewer points
  than --trials says so and ends there, each point drawn once: the same command after it trains nothing new.

Item 7 (a lost node's log dump) needs a real multi-node cluster whose raylet is killed: not here.
"""
import argparse
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from training.harness.run_lock import RunLock, is_live
from training.tools import ray_grid, search
from training.tools.grid import GridRun

from test_ray_grid import FIXTURE_DATA, assert_none_left, env, grid_command, listed, status, tiny_flags, wait_for

ROOT = Path(__file__).resolve().parents[1]


def run_folder(path: Path, state: str, **more) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    (path / "metrics.json").write_text(json.dumps({"run_name": path.name, "status": state, "config": {}, **more}))
    return path


GRID_RUN = GridRun("ablate-ft", "ft", ())


def search_command(tmp_path: Path, space: str, trials: int, run_flags: list[str]) -> list[str]:
    """minbert-search over the ``space`` (JSON text, written to tmp_path/space.json) into tmp_path/search."""
    (tmp_path / "space.json").write_text(space)
    return [sys.executable, "-m", "training.tools.search", "--space", str(tmp_path / "space.json"), "--trials",
            str(trials), "--out_dir", str(tmp_path / "search"), "--val_fraction", "0.5", "--no_plot", "--", *run_flags]


# ---- 74.1 and 74.2: what a trial reports (fast) ---------------------------------------------------------------

@pytest.mark.parametrize("rc", [130, 143])
def test_a_finished_run_stays_finished_when_the_grid_s_stop_reaches_its_clean_up(tmp_path, rc):
    """The grid's stop (SIGINT, SIGTERM) reached the run after metrics.json said "finished": it is finished,
    and the grid keeps it (next_step); an error after it finished (exit code 1) is still a failure."""
    run = run_folder(tmp_path / "ablate-ft", "finished", dev_overall=0.5)
    got = ray_grid.result(GRID_RUN, run, "started", rc, time.time(), "node", stopping=True)
    assert (got["status"], got["error"], got["signal"]) == ("finished", "", None)
    assert ray_grid.next_step(run) == "keep"
    failed = ray_grid.result(GRID_RUN, run, "started", 1, time.time(), "node")
    assert failed["status"] == "failed" and failed["error"].startswith("finished, then exit code 1")


def test_a_run_killed_by_a_signal_it_does_not_handle_is_failed_naming_the_signal(tmp_path):
    run = run_folder(tmp_path / "ablate-ft", "running")
    got = ray_grid.result(GRID_RUN, run, "started", -signal.SIGKILL, time.time(), "node")
    assert got["status"] == "failed" and got["signal"] == "SIGKILL"
    assert got["error"] == ("killed by SIGKILL, a signal it does not handle (kill -9, the OOM killer); metrics.json "
                            "says running: the same command resumes it")
    assert ray_grid.next_step(run) == "resume"   # "running": the same command resumes it
    # the grid's own SIGTERM before the run's handler was in place: not a failure
    stopped = ray_grid.result(GRID_RUN, run, "started", -signal.SIGTERM, time.time(), "node", stopping=True)
    assert (stopped["status"], stopped["signal"]) == ("running", None)
    # SIGTERM from elsewhere, unhandled: failed too
    assert ray_grid.result(GRID_RUN, run, "started", -signal.SIGTERM, time.time(), "node")["signal"] == "SIGTERM"


def test_the_summary_counts_a_killed_run_failed_with_its_signal_and_exits_1(tmp_path, capsys):
    (tmp_path / "logs").mkdir()
    killed = run_folder(tmp_path / "ablate-ft", "running")
    run_folder(tmp_path / "ablate-st-sst", "finished")
    results = {"ablate-ft": ray_grid.result(GRID_RUN, killed, "started", -9, time.time(), "node")}
    progress = ray_grid.Progress(1)
    progress.finished(results["ablate-ft"])
    line = capsys.readouterr().out
    assert "[0/1 done, 0 running, 1 failed] ablate-ft: failed (killed by SIGKILL) after 0.0 min: metrics.json says " \
           "running: the same command resumes it" in line
    runs = [GRID_RUN, GridRun("ablate-st-sst", "st-sst", ())]
    rc = ray_grid.summarize(argparse.Namespace(no_report=True), runs, [], results, tmp_path, interrupted=False)
    out = capsys.readouterr().out
    assert rc == 1 and "1 of 2 runs finished" in out and "1 failed" in out
    assert "FAILED ablate-ft: killed by SIGKILL" in out
    summary = json.loads((tmp_path / "logs" / "grid.json").read_text())
    assert summary["failed"] == ["ablate-ft"] and summary["stopped"] == []
    assert summary["trials"]["ablate-ft"]["error"].startswith("killed by SIGKILL")


def test_a_stale_lock_is_cleared_and_a_live_one_kept(tmp_path):
    stale = tmp_path / "stale"
    stale.mkdir()
    (stale / ".lock").write_text("12345")   # a killed run's: no process holds it
    ray_grid.clear_stale_lock(stale)
    assert not (stale / ".lock").exists()
    live = tmp_path / "live"
    live.mkdir()
    lock = RunLock(live).acquire()
    try:
        ray_grid.clear_stale_lock(live)
        assert (live / ".lock").exists() and is_live(live)
    finally:
        lock.release()


# ---- 74.4: resources (fast) -------------------------------------------------------------------------------------

def node(cpus, gpus=0, alive=True):
    return {"Alive": alive, "Resources": {"CPU": cpus, **({"GPU": gpus} if gpus else {})}}


def test_a_run_no_node_can_hold_is_named_in_one_line():
    assert ray_grid.unmet([node(2)], 1, 0) is None
    assert ray_grid.unmet([node(2), node(8, 4)], 4, 0.25) is None
    assert ray_grid.unmet([node(2)], 1, 0.3) == "--gpus_per_run 0.3: the cluster has no GPU (1 node(s), 2 CPUs, 0 GPUs)"
    assert ray_grid.unmet([node(16, 1)], 1, 2) == ("--gpus_per_run 2: no node has 2 GPUs, the most on one is 1 (1 "
                                                    "node(s), 16 CPUs, 1 GPUs)")
    assert ray_grid.unmet([node(2), node(2)], 4, 0) == ("--cpus_per_run 4: no node has 4 CPUs, the most on one is 2 "
                                                         "(2 node(s), 4 CPUs, 0 GPUs)")
    assert ray_grid.unmet([node(8), node(2, 1)], 4, 1).endswith("no node has both (2 node(s), 10 CPUs, 1 GPUs)")
    assert ray_grid.unmet([node(2), node(16, 8, alive=False)], 1, 1).startswith("--gpus_per_run 1: the cluster has no")


def test_wait_for_resources_is_a_flag_of_both_commands():
    assert ray_grid.parse_args(["--only", "ft"]).wait_for_resources == 0
    assert ray_grid.parse_args(["--wait_for_resources", "600"]).wait_for_resources == 600
    out = listed("--wait_for_resources", "-1")
    assert out.returncode == 2 and "--wait_for_resources >= 0" in out.stderr
    assert "autoscaler" in listed("--help").stdout


# ---- 74.5: --out_dir, the report (fast) -------------------------------------------------------------------------

def test_an_out_dir_that_is_or_is_inside_a_run_folder_is_refused_before_anything_is_written(tmp_path):
    run = run_folder(tmp_path / "runs" / "ablate-ft", "finished")
    exported = tmp_path / "exported"
    (exported / "checkpoint").mkdir(parents=True)
    (exported / "checkpoint" / "run_config.json").write_text("{}")
    space = tmp_path / "space.json"
    space.write_text('{"lr": [1e-4, 2e-4]}')
    for out_dir, inside in [(run, None), (run / "grid", run), (exported / "checkpoint" / "x", exported)]:
        before = sorted(p for p in tmp_path.rglob("*"))
        out = listed("--only", "ft", "--out_dir", str(out_dir))
        where = "is the run folder" if inside is None else f"is inside the run folder {inside}"
        assert out.returncode == 2 and out.stderr.strip() == (
            f"minbert-grid: --out_dir {out_dir} {where} (it holds a run's metrics.json or checkpoint/): give a "
            f"folder of its own, e.g. {(inside or run).parent / 'grid'}")
        assert search.main(["--space", str(space), "--out_dir", str(out_dir)]) == 2
        assert sorted(p for p in tmp_path.rglob("*")) == before   # nothing written: no lock, no logs/, no run
    # a grid's own folder (no run's metrics.json above it) is fine
    assert ray_grid.run_folder_of(tmp_path / "runs") is None
    (tmp_path / "runs" / "claim").mkdir()
    (tmp_path / "runs" / "claim" / "metrics.json").write_text('{"status": "starting"}')   # a claim: not a run yet
    assert ray_grid.run_folder_of(tmp_path / "runs" / "claim" / "x") is None
    for text in ("7", "[1, 2]", "null"):   # a metrics.json that holds no object: no run, not a TypeError
        (tmp_path / "runs" / "claim" / "metrics.json").write_text(text)
        assert ray_grid.run_folder_of(tmp_path / "runs" / "claim" / "x") is None


def test_a_report_that_fails_makes_the_grid_s_exit_code_non_zero(tmp_path, monkeypatch, capsys):
    (tmp_path / "logs").mkdir()
    run_folder(tmp_path / "ablate-ft", "finished")
    args = argparse.Namespace(no_report=False)
    monkeypatch.setattr(ray_grid, "run_report", lambda out_dir: 1)
    assert ray_grid.summarize(args, [GRID_RUN], [GRID_RUN], {}, tmp_path, interrupted=False) == 1
    assert "minbert-grid: the report failed" in capsys.readouterr().err
    monkeypatch.setattr(ray_grid, "run_report", lambda out_dir: 0)
    assert ray_grid.summarize(args, [GRID_RUN], [GRID_RUN], {}, tmp_path, interrupted=False) == 0


# ---- 74.6: the search's space, its draws, a trial failed at start (fast) ----------------------------------------

def space_of(tmp_path, spec: dict) -> search.Space:
    path = tmp_path / "space.json"
    path.write_text(json.dumps(spec))
    return search.read_space(str(path))


def test_a_space_knows_its_size_and_points(tmp_path):
    space = space_of(tmp_path, {"private_layers": [0, 1], "epochs": {"int": [1, 3]}, "warmup_ratio": 0.1})
    assert space.size() == 6 and len(list(space.points())) == 6
    assert list(space.points())[0] == {"private_layers": 0, "epochs": 1, "warmup_ratio": 0.1}
    assert space_of(tmp_path, {"lr": {"uniform": [0.1, 0.2]}, "smart": [True, False]}).size() is None
    args = argparse.Namespace(trials=3, space_spec=space_of(tmp_path, {"private_layers": [0, 1]}))
    assert search.trials_wanted(args) == 2
    args.trials = 1
    assert search.trials_wanted(args) == 1


@pytest.mark.slow   # imports Ray Tune and Optuna (a second); starts nothing
def test_the_search_draws_each_point_once_and_finishes_when_the_space_is_drawn(tmp_path):
    """TPE draws points it drew before (a categorical space of 2 points, 3 trials: the search's part 6 drew a
    duplicate, and the same command drew it again, never reaching 3): each is asked again, then the space's next
    point is given; once every point is drawn the searcher says FINISHED."""
    from ray.tune.search import Searcher
    space = space_of(tmp_path, {"private_layers": [0, 1, 2], "smart": [True, False]})
    for ended in (set(), {search.trial_name({"private_layers": 0, "smart": True})}):
        args = argparse.Namespace(space_spec=space, seed=0)
        records = [search.TrialRecord(name, {"private_layers": 0, "smart": True}, "finished", 0.5, 1, 1, 1.0, "~")
                   for name in ended]
        searcher = search.tpe_searcher(args, records, [])
        names = []
        for i in range(6 - len(ended)):
            config = searcher.suggest(f"t{i}")
            names.append(search.trial_name(config))
            searcher.on_trial_complete(f"t{i}", {"score": 0.1 * i})
        assert len(set(names) | ended) == 6 and not set(names) & ended
        assert searcher.suggest("one-too-many") == Searcher.FINISHED

    class Drawer:   # TPE that draws the same point again and again, and what it is told
        def __init__(self):
            self.told = []

        def suggest(self, trial_id):
            return {"private_layers": 0, "smart": True}

        def on_trial_complete(self, trial_id, result=None, error=False):
            self.told.append((trial_id, error))

    class Study:
        def __init__(self, drawer):
            self.drawer = drawer

        def enqueue_trial(self, point):   # the next draw is the point given
            self.drawer.suggest = lambda trial_id: point

    drawer = Drawer()
    searcher = search.distinct(drawer, Study(drawer), space, {search.trial_name({"private_layers": 0, "smart": True})})
    config = searcher.suggest("t")
    assert config == {"private_layers": 0, "smart": False}   # the space's first point not drawn yet
    assert drawer.told == [(f"t.{i}", True) for i in range(search.ASKS)]   # each repeat told as failed
    searcher.on_trial_complete("t", {"status": "failed", "error": "error: no such file"})
    assert drawer.told[-1] == (f"t.{search.ASKS}", True)   # a trial failed at its start: told as failed too


def test_a_trial_that_failed_before_its_folder_is_failed_listed_and_not_run_again(tmp_path, capsys):
    out_dir = tmp_path / "search"
    (out_dir / "logs" / "params").mkdir(parents=True)
    (out_dir / "logs" / "failed").mkdir()
    for name, params in (("trial-aaaa", {"private_layers": 0}), ("trial-bbbb", {"private_layers": 1}),
                         ("trial-cccc", {"private_layers": 2})):
        (out_dir / "logs" / "params" / f"{name}.json").write_text(json.dumps(params))
    run_folder(out_dir / "trial-aaaa", "finished", started="2026-01-01T00:00:00")   # (no score: no best.json)
    (out_dir / "logs" / "failed" / "trial-bbbb.json").write_text(json.dumps(
        {"error": "error: data file sts-train.csv not found", "exit_code": 1}))
    records = {r.name: r for r in search.read_trials(out_dir)}
    assert (records["trial-bbbb"].status, records["trial-bbbb"].error) == (
        "failed", "error: data file sts-train.csv not found")
    assert records["trial-bbbb"].ended and not records["trial-cccc"].ended   # cccc: never started, run again
    assert records["trial-cccc"].status == "not started" and records["trial-aaaa"].error == ""
    space = tmp_path / "space.json"
    space.write_text('{"private_layers": [0, 1, 2]}')
    args = argparse.Namespace(space_spec=search.read_space(str(space)), val_fraction=0.1, space=str(space),
                              no_plot=True, extra=[])
    search.write_outputs(args, out_dir, list(records.values()))
    table = (out_dir / "trials.csv").read_text().splitlines()
    assert table[0].endswith(",status,minutes,error")
    assert [line for line in table if "trial-bbbb" in line][0].endswith(",failed,,error: data file sts-train.csv "
                                                                        "not found")
    assert "- trial-bbbb: error: data file sts-train.csv not found (its log: logs/trial-bbbb.log)" in \
        (out_dir / "trials.md").read_text()


def test_a_search_whose_trial_did_not_end_exits_1_and_does_not_confirm(tmp_path, monkeypatch, capsys):
    """A trial's run killed outright (SIGKILL, the OOM killer) is named FAILED in its progress line, but its folder
    says "running": it has not ended, and the next part resumes it. The search exited 0 all the same (the grid
    exits 1), and with --confirm it skipped the confirmation without a word."""
    out_dir = tmp_path / "search"
    (out_dir / "logs" / "params").mkdir(parents=True)
    for name, params in (("trial-aaaa", {"private_layers": 0}), ("trial-bbbb", {"private_layers": 1})):
        (out_dir / "logs" / "params" / f"{name}.json").write_text(json.dumps(params))
    run_folder(out_dir / "trial-aaaa", "finished", started="2026-01-01T00:00:00",
               evaluations=[{"dev_overall": 0.5, "run_step": 3}])
    run_folder(out_dir / "trial-bbbb", "running", started="2026-01-01T00:01:00")   # killed: no live lock
    space = tmp_path / "space.json"
    space.write_text('{"private_layers": [0, 1]}')
    args = argparse.Namespace(space_spec=search.read_space(str(space)), val_fraction=0.1, space=str(space),
                              no_plot=True, extra=[], trials=2, address=None, confirm=1)
    ran, confirmed = [], []
    monkeypatch.setattr(search, "on_ray", lambda *a: ran.append(a))   # the killed trial's part, already over
    monkeypatch.setattr(search, "confirm", lambda *a: confirmed.append(a) or 0)
    assert search.run_search(args, out_dir, lock=None) == 1
    assert len(ran) == 1 and not confirmed
    assert "1 of 2 trials did not end (killed, or lost with their node): the same command continues the search " \
           "and then confirms" in capsys.readouterr().out
    run_folder(out_dir / "trial-bbbb", "finished", started="2026-01-01T00:01:00")   # the next part resumed it
    assert search.run_search(args, out_dir, lock=None) == 0 and len(confirmed) == 1 and len(ran) == 1


# ---- 74.6 / 75.5: checked against the model before Ray (a Python start each) -------------------------------------

@pytest.mark.slow   # a Python start checks the flags
def test_a_grid_the_model_cannot_take_is_refused_before_ray(tiny_model_dir, tmp_path):
    for more, message in [(["--max_length", "128"], "--max_length 128 is more than the model's 64 positions"),
                          (["--private_layers", "3"], "--private_layers 3 is more than the 2 layers of")]:
        command = grid_command(tmp_path / "grid", "--only", "ft", extra=[*tiny_flags(tiny_model_dir), *more])
        out = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, env=env())
        assert out.returncode == 2, out.stdout + out.stderr
        assert out.stderr.strip().startswith("minbert-grid: run ablate-ft: " + message), out.stderr
        assert str(tiny_model_dir / "config.json") in out.stderr and len(out.stderr.strip().splitlines()) == 1
        assert "Ray" not in out.stdout and not (tmp_path / "grid" / "logs").exists()


@pytest.mark.slow   # a Python start checks the space
def test_a_space_value_the_model_cannot_take_is_refused_before_ray(tiny_model_dir, tmp_path):
    space = tmp_path / "space.json"
    space.write_text('{"private_layers": [0, 7]}')
    out = subprocess.run([sys.executable, "-m", "training.tools.search", "--space", str(space), "--trials", "3",
                          "--out_dir", str(tmp_path / "search"), "--", *tiny_flags(tiny_model_dir)],
                         capture_output=True, text=True, cwd=ROOT, env=env())
    assert out.returncode == 2, out.stdout + out.stderr
    assert out.stderr.strip() == (f"minbert-search: --space {space}: private_layers 7: --private_layers 7 is more "
                                  f"than the 2 layers of {tiny_model_dir / 'config.json'}")
    assert not (tmp_path / "search").exists()


# ---- 74.3: a cluster that does not answer, Ctrl-C while Ray starts (slow) -----------------------------------------

def silent_listener() -> socket.socket:
    """A TCP port that accepts connections and never answers: a GCS that hangs (the address Ray uses for this
    machine is not 127.0.0.1, hence every interface)."""
    listener = socket.socket()
    listener.bind(("0.0.0.0", 0))
    listener.listen(64)
    return listener


PATCHED = "import sys; from training.tools import ray_grid; ray_grid.JOIN_SECONDS = 5; sys.exit(ray_grid.main())"


def test_an_address_whose_port_is_no_number_is_one_line_whatever_it_holds():
    """The reason goes into the line as it is: braces in it (``{x}``) were once read as a format field (KeyError)."""
    with pytest.raises(ray_grid.GridError, match=r"^--address 127\.0\.0\.1:\{x\}: nothing answers at .*invalid literal"):
        ray_grid.check_reachable("127.0.0.1:{x}", 1)


@pytest.mark.slow   # three commands, each with a Python start checking the flags; no Ray starts
def test_an_address_nothing_answers_at_ends_in_one_line_and_ctrl_c_while_joining_at_once(tiny_model_dir, tmp_path):
    flags = ["--only", "ft"]
    # nothing listens: one line, exit code 2, in seconds
    began = time.time()
    refused = subprocess.run(grid_command(tmp_path / "a", *flags, "--address", "127.0.0.1:1",
                                          extra=tiny_flags(tiny_model_dir)),
                             capture_output=True, text=True, cwd=ROOT, env=env(), timeout=120)
    assert refused.returncode == 2 and time.time() - began < 60, refused.stdout + refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1, refused.stderr
    assert refused.stderr.startswith("minbert-grid: --address 127.0.0.1:1: nothing answers at ")
    assert not (tmp_path / "a" / "logs" / "grid.stop").exists()
    listener = silent_listener()
    try:
        address = f"127.0.0.1:{listener.getsockname()[1]}"
        # a port that takes the connection and never answers: Ray's join has a deadline (5 s here, 45 s by default)
        began = time.time()
        hung = subprocess.run([sys.executable, "-c", PATCHED, "--out_dir", str(tmp_path / "b"), "--no_report", *flags,
                               "--address", address, "--", *tiny_flags(tiny_model_dir)],
                              capture_output=True, text=True, cwd=ROOT, env=env(), timeout=120)
        assert hung.returncode == 2 and time.time() - began < 60, hung.stdout + hung.stderr
        assert hung.stderr.strip() == (f"minbert-grid: --address {address}: Ray did not join the cluster there within "
                                       f"5 s (its log: {tmp_path / 'b' / 'logs' / 'ray.log'})")
        assert not (tmp_path / "b" / "logs" / "grid.stop").exists()
        # Ctrl-C while ray.init waits on it (its C++ retries every 30 s): the command ends at once
        driver = subprocess.Popen(grid_command(tmp_path / "c", *flags, "--address", address,
                                               extra=tiny_flags(tiny_model_dir)),
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT, env=env())
        assert driver.stdout.readline().startswith("grid -> ")
        time.sleep(2)
        driver.send_signal(signal.SIGINT)
        began = time.time()
        out, err = driver.communicate(timeout=60)
        assert driver.returncode == 130 and time.time() - began < 10, out + err
        assert err.strip() == "minbert-grid: stopped; the same command again continues" and "Traceback" not in err
        assert not (tmp_path / "c" / "logs" / "grid.stop").exists()
    finally:
        listener.close()


@pytest.mark.slow   # a local Ray starts, cut off
def test_ctrl_c_while_a_local_ray_starts_ends_at_once_and_leaves_nothing(tiny_model_dir, tmp_path):
    temp_before = set(Path(tempfile.gettempdir()).glob("minbert-ray-*"))
    mark = {"MINBERT_TEST_MARK": secrets.token_hex(8)}
    out_dir = tmp_path / "grid"
    driver = subprocess.Popen(grid_command(out_dir, "--only", "ft", extra=tiny_flags(tiny_model_dir)),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT, env=env(**mark))
    assert driver.stdout.readline().startswith("grid -> ")
    time.sleep(1)   # ray.init under way (it takes 2-10 s here)
    driver.send_signal(signal.SIGINT)
    began = time.time()
    out, err = driver.communicate(timeout=60)
    assert driver.returncode == 130 and time.time() - began < 20, out + err
    assert "Traceback" not in err and "stopped" in err
    assert not (out_dir / "logs" / "grid.stop").exists() and not (out_dir / ".grid.lock").read_text()
    # its Ray's temporary folder is gone (named by the driver's pid in its session; another test's may be there)
    new = set(Path(tempfile.gettempdir()).glob("minbert-ray-*")) - temp_before
    assert not [p for p in new if list(p.glob(f"session_*_{driver.pid}"))]
    assert_none_left(f"MINBERT_TEST_MARK={mark['MINBERT_TEST_MARK']}")


# ---- 74.4: a request no node meets, on a real local Ray (slow) ----------------------------------------------------

@pytest.mark.slow   # a local Ray starts
def test_gpus_no_node_has_are_one_line_and_exit_2_before_any_trial(tiny_model_dir, tmp_path):
    mark = {"MINBERT_TEST_MARK": secrets.token_hex(8)}
    out_dir = tmp_path / "grid"
    done = subprocess.run(grid_command(out_dir, "--only", "ft", "--gpus_per_run", "64", "--wait_for_resources", "2",
                                       extra=tiny_flags(tiny_model_dir)),
                          capture_output=True, text=True, cwd=ROOT, env=env(**mark), timeout=300)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "waiting up to 2 s (--wait_for_resources) for a node that can hold a run: --gpus_per_run 64" in done.stdout
    line = done.stderr.strip()
    assert len(line.splitlines()) == 1 and line.startswith("minbert-grid: --gpus_per_run 64: ")
    assert line.endswith("after waiting 2 s (--wait_for_resources)")
    assert not (out_dir / "ablate-ft").exists() and not (out_dir / "logs" / "grid.stop").exists()
    assert_none_left(f"MINBERT_TEST_MARK={mark['MINBERT_TEST_MARK']}")


# ---- 74.2: SIGKILL of a trial's run, then the same command (slow) -------------------------------------------------

def checkpointed(run: Path) -> bool:
    """The run trains now (its lock is held) and has written a checkpoint that --resume continues from."""
    return any((run / "checkpoints").glob("step-*")) and is_live(run)


def kill_its_run(command: list[str], cwd: Path, mark: dict, killable) -> tuple[int, str, Path]:
    """Start ``command`` (a grid or a search), ``kill -9`` the run folder ``killable()`` names once it names one, as
    the OOM killer would: the command's exit code, its output and the run killed."""
    driver = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=cwd,
                              env=env(**mark))
    found = []
    try:
        wait_for(lambda: found.append(killable()) or found[-1] is not None, what="a run that checkpointed")
        os.kill(int((found[-1] / ".lock").read_text()), signal.SIGKILL)
        output = driver.communicate(timeout=300)[0]
    finally:
        if driver.poll() is None:
            driver.kill()
    return driver.returncode, output, found[-1]


@pytest.mark.slow
def test_a_run_killed_by_sigkill_fails_the_grid_and_the_same_command_resumes_it(tiny_model_dir, tmp_path):
    """`kill -9` of a trial's run_multitask.py (what the OOM killer does): the grid said "stopped (running)",
    grid.json's error was the last epoch line, the .lock stayed and the grid exited 0."""
    mark = {"MINBERT_TEST_MARK": secrets.token_hex(8)}
    out_dir, run = tmp_path / "grid", tmp_path / "grid" / "ablate-ft"
    command = grid_command(out_dir, "--only", "ft", "--epochs", "40", "--max_steps_per_epoch", "none",
                           extra=tiny_flags(tiny_model_dir, FIXTURE_DATA, "--save_every", "5"))
    returncode, output, _ = kill_its_run(command, tmp_path, mark, lambda: run if (run / "metrics.json").exists()
                                         and status(run) == "running" and checkpointed(run) else None)
    assert returncode == 1, output
    assert "ablate-ft: failed (killed by SIGKILL) after" in output
    assert "FAILED ablate-ft: killed by SIGKILL, a signal it does not handle" in output
    trial = json.loads((out_dir / "logs" / "grid.json").read_text())["trials"]["ablate-ft"]
    assert trial["status"] == "failed" and trial["error"].startswith("killed by SIGKILL")
    assert trial["error"].endswith("metrics.json says running: the same command resumes it")
    assert status(run) == "running" and not (run / ".lock").exists()
    again = subprocess.run(command, capture_output=True, text=True, cwd=tmp_path, env=env(**mark), timeout=600)
    assert again.returncode == 0, again.stdout + again.stderr
    metrics = json.loads((run / "metrics.json").read_text())
    assert metrics["status"] == "finished" and metrics.get("resumed"), "the killed run was not resumed"
    assert_none_left(f"MINBERT_TEST_MARK={mark['MINBERT_TEST_MARK']}")


@pytest.mark.slow
def test_a_trial_killed_by_sigkill_fails_the_search_and_the_same_command_resumes_it(tiny_model_dir, tmp_path):
    """`kill -9` of a search trial's run: FAILED in its progress line, exit code 1 (it was 0, like a search whose
    trials all ended), and the same command resumes the trial and ends the search with 0."""
    out_dir = tmp_path / "search"
    mark = {"MINBERT_TEST_MARK": secrets.token_hex(8)}
    command = search_command(tmp_path, '{"private_layers": [0]}', 1, tiny_flags(
        tiny_model_dir, FIXTURE_DATA, "--epochs", "40", "--max_steps_per_epoch", "none", "--save_every", "5"))
    returncode, output, run = kill_its_run(command, tmp_path, mark, lambda: next(
        (run for run in out_dir.glob("trial-*") if (run / ".lock").exists() and checkpointed(run)), None))
    assert returncode == 1, output
    assert f"{run.name}: FAILED: killed by SIGKILL, a signal it does not handle" in output
    assert "1 of 1 trials did not end (killed, or lost with their node): the same command continues the search" \
        in output
    again = subprocess.run(command, capture_output=True, text=True, cwd=tmp_path, env=env(**mark), timeout=600)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "1 trials, 0 ended before, 1 to continue, 0 new" in again.stdout
    metrics = json.loads((run / "metrics.json").read_text())
    assert metrics["status"] == "finished" and metrics.get("resumed"), "the killed trial was not resumed"
    assert_none_left(f"MINBERT_TEST_MARK={mark['MINBERT_TEST_MARK']}")


# ---- 74.6: a space smaller than --trials, a trial failing at start (slow) ------------------------------------------

@pytest.mark.slow
def test_a_small_space_ends_at_its_size_and_a_trial_failing_at_start_is_failed_not_rerun(tiny_model_dir, tmp_path):
    """tasks [sst, sts] on a data folder without STS: 2 points for --trials 3; the sts trial fails at start
    (listed "not started", exit 0 and run again by every part, before). The search says its size, ends at 2
    trials with the failure listed, and the same command again trains nothing."""
    data = tmp_path / "sst-only"
    data.mkdir()
    for file in FIXTURE_DATA.glob("ids-sst-*"):
        (data / file.name).write_bytes(file.read_bytes())
    out_dir = tmp_path / "search"
    mark = {"MINBERT_TEST_MARK": secrets.token_hex(8)}
    command = search_command(tmp_path, '{"tasks": ["sst", "sts"]}', 3,
                             tiny_flags(tiny_model_dir, data, "--epochs", "1", "--max_steps_per_epoch", "3"))
    first = subprocess.run(command, capture_output=True, text=True, cwd=tmp_path, env=env(**mark), timeout=600)
    assert first.returncode == 0, first.stdout + first.stderr
    assert "the space has 2 points: the search ends at 2 trials (--trials 3), each point run once" in first.stdout
    assert "[2/2 trials" in first.stdout and "sts-train.csv not found" in first.stdout
    records = {r.params["tasks"]: r for r in search.read_trials(out_dir)}
    assert set(records) == {"sst", "sts"} and records["sst"].status == "finished"
    assert records["sts"].status == "failed" and "sts-train.csv not found" in records["sts"].error
    assert "sts-train.csv not found" in (out_dir / "trials.md").read_text()
    logs = {name: (out_dir / "logs" / f"{r.name}.log").read_text() for name, r in records.items()}
    again = subprocess.run(command, capture_output=True, text=True, cwd=tmp_path, env=env(**mark), timeout=600)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "2 trials, 2 ended before, 0 to continue, 0 new" in again.stdout and "Ray ready" not in again.stdout
    assert {name: (out_dir / "logs" / f"{r.name}.log").read_text() for name, r in records.items()} == logs
    assert_none_left(f"MINBERT_TEST_MARK={mark['MINBERT_TEST_MARK']}")
