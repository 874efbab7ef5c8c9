"""--report_to (issue 87, item 1): where a run's numbers go besides metrics.json (training/harness/trackers/).

Fast tests: the flag's values and its one usage line, a missing package's one line before the run folder exists,
the fan-out (every number to every tracker; a tracker that raises costs one warning and no more calls), the final
scores and mlflow's parameters. Slow tests train the tiny model and read what the run logged back with each
package's own reader: mlflow's ``MlflowClient`` on the run's store, wandb's transaction log of the offline run (the
reader ``wandb sync`` uploads from). mlflow and wandb are optional: outside CI a test that needs one is skipped
without it; in CI (``MINBERT_CI`` set, as .ci/run sets it and installs both) it fails.
"""
from __future__ import annotations

import errno
import importlib
import json
import os
import signal
import sys
from pathlib import Path

import pytest

import run_multitask
from training.configuration.sections import TRACKERS
from training.harness import trackers
from training.harness.run_config import RunConfig
from training.harness.run_folder import resumed_config
from training.harness.trackers import TrackedRun, Tracker, Trackers, final_scores
from training.harness.trackers.mlflow_tracker import flat_parameters, tracking_uri

FIXTURE_DATA = Path(__file__).parent / "fixtures" / "data"


def run(out_dir: Path, model_dir: Path, name: str, *extra: str) -> int:
    """A tiny run, two epochs of three rounds, in ``out_dir/name``; ``extra`` flags last."""
    return run_multitask.main(["--data_dir", str(FIXTURE_DATA), "--model", str(model_dir), "--epochs", "2",
                               "--max_steps_per_epoch", "3", "--batch_size", "4", "--max_length", "24",
                               "--out_dir", str(out_dir), "--run_name", name, "--save_every", "0", "--quiet", *extra])


def needed(package: str):
    """``package``, imported. Outside CI a test that needs it is skipped without it (an optional extra); in CI (the
    variable ``MINBERT_CI`` set) it fails instead, so that a tracker's tests cannot pass there by not running."""
    if os.environ.get("MINBERT_CI"):
        return importlib.import_module(package)
    return pytest.importorskip(package)


# ---- the flag ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("given, value, chosen", [
    ([], "tensorboard", ("tensorboard",)),
    (["--report_to", "mlflow,wandb"], "mlflow,wandb", ("mlflow", "wandb")),
    (["--report_to", " MLflow , tensorboard"], "mlflow,tensorboard", ("mlflow", "tensorboard")),
    (["--report_to", "none"], "none", ()),
])
def test_report_to_takes_trackers_comma_separated_or_none(given, value, chosen):
    output = run_multitask.parse_config(given).output
    assert (output.report_to, output.trackers(), output.experiment) == (value, chosen, None)
    assert run_multitask.parse_config([*given, "--experiment", "study"]).output.experiment == "study"


@pytest.mark.parametrize("value", ["mlfow", "none,mlflow", "mlflow,mlflow", "tensorboard,", ""])
def test_a_bad_report_to_is_one_usage_line_naming_the_flag_and_its_choices(value, capsys):
    with pytest.raises(SystemExit) as stop:
        run_multitask.parse_config(["--report_to", value])
    assert stop.value.code == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert "--report_to" in last and "tensorboard, mlflow, wandb" in last and "none alone" in last, last


def test_a_settings_file_sets_the_trackers_as_the_flag_reads_them(tmp_path, capsys):
    good = tmp_path / "good.json"
    good.write_text(json.dumps({"report_to": ["wandb", "mlflow"], "experiment": "study"}))
    output = run_multitask.parse_config(["--config", str(good)]).output
    assert (output.report_to, output.experiment) == ("wandb,mlflow", "study")
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"report_to": "mlfow"}))
    with pytest.raises(SystemExit):
        run_multitask.parse_config(["--config", str(bad)])
    assert "report_to: 'mlfow'" in capsys.readouterr().err


def test_every_choice_of_the_flag_is_a_tracker():
    assert set(trackers.TRACKER_TYPES) == set(TRACKERS)
    assert all(kind.name == name for name, kind in trackers.TRACKER_TYPES.items())


@pytest.mark.parametrize("package", ["mlflow", "wandb"])
def test_a_missing_tracker_package_is_one_line_before_the_run_folder_exists(tmp_path, monkeypatch, capsys, package):
    monkeypatch.setitem(sys.modules, package, None)   # as if not installed: find_spec finds none, import fails
    assert run_multitask.main(["--out_dir", str(tmp_path), "--run_name", "run",
                               "--report_to", f"tensorboard,{package}"]) == 1
    err = capsys.readouterr().err
    assert err.strip().splitlines()[-1] == (f"error: --report_to {package} needs the {package} package: "
                                            f"pip install -e '.[{package}]' (in the clone) or pip install {package}")
    assert "Traceback" not in err and list(tmp_path.iterdir()) == []


def test_resume_keeps_the_trackers_the_run_saved():
    """Where a run is tracked is its own: --resume goes on with the saved --report_to and --experiment (its mlflow
    run goes on), and a different one given with it is refused, as any setting is."""
    saved = RunConfig.defaults().to_dict()
    flags = run_multitask.parse_config(["--resume", "RUN", "--report_to", "mlflow"])
    with pytest.raises(ValueError, match=r"--report_to mlflow \(saved: tensorboard\)"):
        resumed_config(flags, saved, Path("RUN/state.json"), {"resume", "report_to"})
    saved["output"] = {**saved["output"], "report_to": "mlflow", "experiment": "study"}
    kept = resumed_config(run_multitask.parse_config(["--resume", "RUN"]), saved, Path("RUN/state.json"), {"resume"})
    assert (kept.output.report_to, kept.output.experiment) == ("mlflow", "study")


# ---- the fan-out ---------------------------------------------------------------------------------------------

class Recorder(Tracker):
    """Keeps every call it gets; the call equal to ``fails_at`` (as kept) raises, after it is kept."""

    def __init__(self, name: str, fails_at: tuple | None = None):
        super().__init__()
        self.name, self.title, self.fails_at, self.calls = name, name.title(), fails_at, []

    def keep(self, call: tuple) -> None:
        self.calls.append(call)
        if call == self.fails_at:
            raise OSError(errno.EIO, "Input/output error", f"/store/{self.name}")

    def start(self, run: TrackedRun) -> dict:
        self.keep(("start", run.name))
        return {"id": self.name}

    def add(self, tag: str, value: float, step: int) -> None:
        self.keep((tag, value, step))

    def end(self, status: str, scores: dict, files: list) -> None:
        self.keep(("end", status, scores, files))


def test_every_number_goes_to_every_tracker_and_one_that_raises_costs_one_warning(tmp_path):
    warnings = []
    good, bad = Recorder("good"), Recorder("bad", fails_at=("loss", 0.25, 2))
    fan = Trackers([good, bad], warn=warnings.append)
    assert fan.recording
    assert fan.start(TrackedRun("run", "study", {"train": {"epochs": 1}}, tmp_path)) == {"good": {"id": "good"},
                                                                                         "bad": {"id": "bad"}}
    for step in (1, 2, 3):
        fan.add("loss", 0.25, step)
    fan.add("dev/sst", None, 3)   # a score the task has none of: no call
    fan.end("finished", {"final/dev/overall": 0.5}, ["metrics.json"])
    assert good.calls == [("start", "run"), ("loss", 0.25, 1), ("loss", 0.25, 2), ("loss", 0.25, 3),
                          ("end", "finished", {"final/dev/overall": 0.5}, ["metrics.json"])]
    assert bad.calls == [("start", "run"), ("loss", 0.25, 1), ("loss", 0.25, 2)]   # none after its error
    assert warnings == ["warning: Bad stopped tracking this run, which goes on without it "
                        "(/store/bad: Input/output error)"]
    assert not fan.recording   # ended: nothing is tracked after the end


def test_a_tracker_that_cannot_start_is_left_out_and_the_others_start(tmp_path):
    warnings = []
    good, bad = Recorder("good"), Recorder("bad", fails_at=("start", "run"))
    fan = Trackers([bad, good], warn=warnings.append)
    assert fan.start(TrackedRun("run", "study", {}, tmp_path)) == {"good": {"id": "good"}}
    fan.add("loss", 1.0, 1)
    assert bad.calls == [("start", "run")] and good.calls == [("start", "run"), ("loss", 1.0, 1)]
    assert len(warnings) == 1 and warnings[0].startswith("warning: Bad stopped tracking this run"), warnings


def test_ctrl_c_waits_for_a_tracker_s_call_to_end(tmp_path):
    """A stop raised inside a tracker's write could leave its file, database or socket half-written."""
    class StoppedMidway(Recorder):
        def add(self, tag, value, step):
            os.kill(os.getpid(), signal.SIGINT)
            self.keep((tag, value, step))

    tracker = StoppedMidway("midway")
    with pytest.raises(KeyboardInterrupt):
        Trackers([tracker]).add("loss", 1.0, 1)
    assert tracker.calls == [("loss", 1.0, 1)]


def test_final_scores_are_the_finite_numbers_of_metrics_json():
    metrics = {"status": "finished", "dev": {"sst": 0.5, "qqp": None, "sts": float("nan")}, "dev_overall": 0.6,
               "test": {"sst": 0.4}, "test_overall": 0.4, "wall_seconds": 12, "train_examples_per_second": None,
               "best_epoch": 2}
    assert final_scores(metrics) == {"final/dev/sst": 0.5, "final/dev/overall": 0.6, "final/test/sst": 0.4,
                                     "final/test/overall": 0.4, "wall_seconds": 12.0}
    assert final_scores({"status": "failed", "error": "OSError: disk full"}) == {}


def test_the_configuration_is_mlflow_parameters_that_read_back_to_its_values(tmp_path):
    config = {"model": {"pooling": "mean", "attention_probs_dropout_prob": None},
              "train": {"lr": 0.0001, "epochs": 3, "decay_bias_norm": False},
              "data": {"own_tasks": [], "task_batch_sizes": "32,86,32"}}
    assert flat_parameters(config) == {"model.pooling": "mean", "model.attention_probs_dropout_prob": "null",
                                       "train.lr": "0.0001", "train.epochs": "3", "train.decay_bias_norm": "false",
                                       "data.own_tasks": "[]", "data.task_batch_sizes": "32,86,32"}
    assert tracking_uri(tmp_path) == f"sqlite:///{tmp_path.resolve()}/mlflow.db"


# ---- tiny runs (slow) ----------------------------------------------------------------------------------------

class FailsFromStepTwo(Tracker):
    name, title = "tensorboard", "Broken"

    def add(self, tag, value, step):
        if step >= 2:
            raise OSError(errno.ENOSPC, "No space left on device", "/store/broken")


@pytest.mark.slow
def test_a_tracker_failing_while_the_run_trains_costs_one_warning_and_the_run_finishes(tmp_path, tiny_model_dir,
                                                                                       monkeypatch, capsys):
    monkeypatch.setitem(trackers.TRACKER_TYPES, "tensorboard", FailsFromStepTwo)
    assert run(tmp_path, tiny_model_dir, "run") == 0
    out, err = capsys.readouterr()
    assert json.loads((tmp_path / "run" / "metrics.json").read_text())["status"] == "finished"
    assert [line for line in (out + err).splitlines() if "stopped tracking" in line] == [
        "warning: Broken stopped tracking this run, which goes on without it (/store/broken: No space left on device)"]


@pytest.mark.slow
def test_report_to_none_tracks_nothing(tmp_path, tiny_model_dir):
    assert run(tmp_path, tiny_model_dir, "run", "--report_to", "none") == 0
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert metrics["status"] == "finished" and "tracked" not in metrics
    assert not list((tmp_path / "run").glob("events.out.tfevents.*"))


@pytest.mark.slow
def test_mlflow_holds_the_run_as_its_own_client_reads_it(tmp_path, tiny_model_dir, monkeypatch):
    needed("mlflow")
    from mlflow.tracking import MlflowClient
    monkeypatch.chdir(tmp_path)   # MLflow makes its default (empty) mlruns/ in the working directory: not the clone's
    out = tmp_path / "runs"
    assert run(out, tiny_model_dir, "run", "--report_to", "mlflow", "--experiment", "study") == 0
    metrics = json.loads((out / "run" / "metrics.json").read_text())
    client = MlflowClient(f"sqlite:///{out / 'mlflow.db'}")
    [found] = client.search_runs([client.get_experiment_by_name("study").experiment_id])
    run_id = found.info.run_id
    assert metrics["tracked"]["mlflow"]["run_id"] == run_id
    assert (found.info.run_name, found.info.status, found.data.tags["status"]) == ("run", "FINISHED", "finished")
    params = found.data.params
    assert (params["output.report_to"], params["train.epochs"], params["model.pooling"]) == ("mlflow", "2", "mean")
    evaluations = sorted((m.step, m.value) for m in client.get_metric_history(run_id, "dev/overall"))
    assert [step for step, _ in evaluations] == [e["run_step"] for e in metrics["epochs"]]
    assert [score for _, score in evaluations] == pytest.approx([e["dev_overall"] for e in metrics["epochs"]])
    steps = sum(e["train_steps"] for e in metrics["epochs"])   # every step's learning rate, at its step
    assert sorted(m.step for m in client.get_metric_history(run_id, "lr/multitask")) == list(range(1, steps + 1))
    assert found.data.metrics["final/dev/overall"] == pytest.approx(metrics["dev_overall"])
    files = {f.path for folder in (None, "checkpoint") for f in client.list_artifacts(run_id, folder)}
    assert {"metrics.json", "checkpoint/README.md"} <= files, files
    assert (out / "mlartifacts").is_dir() and not list((out / "run").glob("events.out.tfevents.*"))


@pytest.mark.slow
def test_a_resumed_run_goes_on_in_its_mlflow_run(tmp_path, tiny_model_dir, monkeypatch):
    needed("mlflow")
    from mlflow.tracking import MlflowClient
    from test_resume import argv, resume_after_cut
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "runs"
    assert run_multitask.main(argv(tiny_model_dir, out, "clean", "--epochs", "2", "--report_to", "mlflow")) == 0
    resume_after_cut(out / "clean", out / "stopped", 0)   # its copy, stopped after its first step, resumed
    run_id = json.loads((out / "clean" / "metrics.json").read_text())["tracked"]["mlflow"]["run_id"]
    resumed = json.loads((out / "stopped" / "metrics.json").read_text())
    assert resumed["tracked"]["mlflow"]["run_id"] == run_id
    client = MlflowClient(f"sqlite:///{out / 'mlflow.db'}")
    [found] = client.search_runs([client.get_experiment_by_name("runs").experiment_id])   # the --out_dir's name
    assert (found.info.run_id, found.info.status) == (run_id, "FINISHED")
    # both evaluations of each sitting, in the one MLflow run: the resumed sitting did them again
    steps = [e["run_step"] for e in resumed["epochs"]]
    assert sorted(m.step for m in client.get_metric_history(run_id, "dev/overall")) == sorted(steps * 2)


@pytest.mark.slow
def test_wandb_keeps_an_offline_run_in_the_run_folder(tmp_path, tiny_model_dir):
    needed("wandb")
    assert run(tmp_path, tiny_model_dir, "run", "--report_to", "wandb,tensorboard") == 0
    folder = tmp_path / "run"
    metrics = json.loads((folder / "metrics.json").read_text())
    [offline] = (folder / "wandb").glob("offline-run-*")
    assert (folder / metrics["tracked"]["wandb"]["folder"]).resolve() == offline.resolve()
    logged = read_offline_run(offline)
    assert (logged["project"], logged["name"], logged["exit_code"]) == (tmp_path.name, "run", 0)
    assert (logged["config"]["output"]["report_to"], logged["config"]["train"]["epochs"]) == ("wandb,tensorboard", 2)
    evaluations = [(row["_step"], row["dev/overall"]) for row in logged["history"] if "dev/overall" in row]
    assert [step for step, _ in evaluations] == [e["run_step"] for e in metrics["epochs"]]
    assert [score for _, score in evaluations] == pytest.approx([e["dev_overall"] for e in metrics["epochs"]])
    assert logged["summary"]["final/dev/overall"] == pytest.approx(metrics["dev_overall"])
    assert logged["summary"]["status"] == "finished"
    assert all((offline / "files" / name).is_file() for name in ("metrics.json", "checkpoint/README.md"))
    assert list(folder.glob("events.out.tfevents.*"))   # TensorBoard's beside it


def read_offline_run(offline: Path) -> dict:
    """An offline wandb run as its transaction log (``run-<id>.wandb``) holds it, each record decoded with wandb's own
    message type (``wandb_internal_pb2.Record``, what ``wandb sync`` uploads; an offline run has no API to read it
    back, and wandb 0.2x moved its log reader out of Python): the project, the run's name, its configuration, each
    history row (``_step`` included), the summary, and the exit code."""
    from wandb.proto import wandb_internal_pb2
    [log] = offline.glob("run-*.wandb")
    found = {"project": None, "name": None, "config": {}, "history": [], "summary": {}, "exit_code": None}
    for data in log_records(log.read_bytes()):
        record = wandb_internal_pb2.Record()
        record.ParseFromString(data)
        kind = record.WhichOneof("record_type")
        if kind == "run":
            found.update(project=record.run.project, name=record.run.display_name)
            found["config"].update(items(record.run.config.update))
        elif kind == "config":
            found["config"].update(items(record.config.update))
        elif kind == "history":
            found["history"].append({"_step": record.history.step.num, **items(record.history.item)})
        elif kind == "summary":
            found["summary"].update(items(record.summary.update))
        elif kind == "exit":
            found["exit_code"] = record.exit.exit_code
    return found


def log_records(data: bytes):
    """The payloads of wandb's transaction log, LevelDB's log format under a 7-byte header (":W&B", magic, version):
    blocks of 32 KiB, each record a 7-byte header (checksum, little-endian length, type: 1 whole, 2 first, 3 middle,
    4 last piece) and its bytes; fewer than 7 bytes left in a block are padding."""
    assert data[:4] == b":W&B", "not a wandb transaction log"
    block, position, pieces = 32768, 7, b""
    while position + 7 <= len(data):
        left = block - position % block
        if left < 7:
            position += left
            continue
        length, kind = int.from_bytes(data[position + 4:position + 6], "little"), data[position + 6]
        if kind == 0:   # a zero-filled tail
            position += left
            continue
        piece, position = data[position + 7:position + 7 + length], position + 7 + length
        pieces = piece if kind in (1, 2) else pieces + piece
        if kind in (1, 4):
            yield pieces


def items(entries) -> dict:
    """key -> value of wandb's logged items: a nested key joined with "/", a value wrapped as ``{"value": ...}``
    (as wandb's config.yaml writes one) unwrapped."""
    values = {}
    for entry in entries:
        value = json.loads(entry.value_json)
        if isinstance(value, dict) and "value" in value and set(value) <= {"value", "desc"}:
            value = value["value"]
        values[entry.key or "/".join(entry.nested_key)] = value
    return values
