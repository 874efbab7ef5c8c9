"""MLflow as a tracker (``--report_to mlflow``): the runs of an ``--out_dir`` in one local store beside their folders,
no server: ``<out_dir>/mlflow.db`` (SQLite, MLflow's local store since its file store was retired) and the runs'
files in ``<out_dir>/mlartifacts/``; ``mlflow ui --backend-store-uri sqlite:///<out_dir>/mlflow.db`` shows them.

A run is one MLflow run, named for its folder, of the experiment ``--experiment``: its configuration as parameters
(``section.setting``), every step's numbers as metrics at their step, its final scores, metrics.json, curves.png and
the model card as artifacts, and its end as MLflow's status. A resumed run goes on in its MLflow run (whose id
metrics.json's ``tracked`` keeps); the steps it does again are logged again. Written with ``MlflowClient`` alone,
never the fluent API: nothing process-wide (an active run, a tracking URI) is set.
"""
from __future__ import annotations

import json
import os
import time
from contextlib import contextmanager
from pathlib import Path

from ..status import RunStatus
from .tracker import TrackedRun, Tracker

STORE, ARTIFACTS = "mlflow.db", "mlartifacts"   # in the --out_dir, beside the run folders
# a run's end as MLflow says it: stopped early by a search's scheduler, the run finished; Ctrl-C and SIGTERM KILLED;
# anything else FAILED
MLFLOW_STATUS = {RunStatus.FINISHED: "FINISHED", RunStatus.STOPPED_EARLY: "FINISHED", RunStatus.INTERRUPTED: "KILLED"}


def tracking_uri(out_dir: Path) -> str:
    """The store of the runs of ``out_dir``, as ``MlflowClient`` and ``mlflow ui --backend-store-uri`` take it."""
    return "sqlite:///" + str(Path(out_dir).resolve() / STORE)


class MlflowTracker(Tracker):
    name, title = "mlflow", "MLflow"

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.client = self.run_id = self.folder = None
        self.step, self.pending = None, {}   # the step whose numbers wait to be written together, and those numbers

    def start(self, run: TrackedRun) -> dict:
        from mlflow.tracking import MlflowClient
        self.folder, out_dir = run.folder, run.folder.resolve().parent
        earlier = run.earlier.get(self.name)
        # two runs of a grid opening a new store at once would both create its tables: one at a time
        with held(out_dir / f".{STORE}.lock"):
            self.client = MlflowClient(tracking_uri(out_dir))
            goes_on = isinstance(earlier, dict) and self._goes_on(earlier.get("run_id"))
            if not goes_on:
                experiment = self._experiment(run.experiment, out_dir)
                self.run_id = self.client.create_run(experiment, run_name=run.name,
                                                     tags={"run_folder": str(run.folder.resolve())}).info.run_id
        if not goes_on:   # an MLflow run's parameters are written once
            self._log_parameters(run.config)
        return {"run_id": self.run_id, "store": tracking_uri(out_dir)}

    def add(self, tag: str, value: float, step: int) -> None:
        """Kept until the step is over, then written in one batch (one database transaction a step, not a number)."""
        if step != self.step:
            self._flush()
            self.step = step
        self.pending[tag] = float(value)

    def end(self, status: str, scores: dict[str, float], files: list[str]) -> None:
        from mlflow.entities import Metric, RunTag
        self._flush()
        now = int(time.time() * 1000)
        self.client.log_batch(self.run_id, metrics=[Metric(key, value, now, self.step or 0)
                                                    for key, value in scores.items()],
                              tags=[RunTag("status", str(status))])   # ours: "stopped early" is FINISHED to MLflow
        for name in files:
            where = Path(name).parent.as_posix()   # checkpoint/README.md under checkpoint/
            self.client.log_artifact(self.run_id, str(self.folder / name), None if where == "." else where)
        self.client.set_terminated(self.run_id, MLFLOW_STATUS.get(status, "FAILED"))

    def _goes_on(self, run_id) -> bool:
        """Go on in the MLflow run ``run_id`` of an earlier sitting, when the store still has it."""
        from mlflow.exceptions import MlflowException
        if not isinstance(run_id, str):
            return False
        try:
            self.client.get_run(run_id)
        except MlflowException:   # the store was removed or replaced since: a new MLflow run
            return False
        self.client.update_run(run_id, status="RUNNING")
        self.run_id = run_id
        return True

    def _experiment(self, name: str, out_dir: Path) -> str:
        """The id of the experiment ``name``, made (its runs' files in ``<out_dir>/mlartifacts``) if it is new."""
        found = self.client.get_experiment_by_name(name)
        if found is not None:
            return found.experiment_id
        return self.client.create_experiment(name, artifact_location=(out_dir / ARTIFACTS).resolve().as_uri())

    def _log_parameters(self, config: dict) -> None:
        """The configuration as parameters, in batches of the most MLflow takes at once; a value longer than a
        parameter holds (a long ``--task_file``'s declarations) is left out: the metrics.json artifact has it."""
        from mlflow.entities import Param
        from mlflow.utils.validation import MAX_PARAM_VAL_LENGTH, MAX_PARAMS_TAGS_PER_BATCH
        params = [Param(key, text) for key, text in flat_parameters(config).items()
                  if len(text) <= MAX_PARAM_VAL_LENGTH]
        for start in range(0, len(params), MAX_PARAMS_TAGS_PER_BATCH):
            self.client.log_batch(self.run_id, params=params[start:start + MAX_PARAMS_TAGS_PER_BATCH])

    def _flush(self) -> None:
        from mlflow.entities import Metric
        if not self.pending:
            return
        now, pending, self.pending = int(time.time() * 1000), self.pending, {}
        metrics = [Metric(tag, value, now, self.step) for tag, value in pending.items()]
        self.client.log_batch(self.run_id, metrics=metrics)


def flat_parameters(config: dict) -> dict[str, str]:
    """``section.setting`` -> its value as text: a string as it is, anything else as JSON (``null``, ``true``,
    ``0.0001``, ``[32, 86, 32]``), so that a parameter reads back to its value."""
    return {f"{section}.{name}": value if isinstance(value, str) else json.dumps(value)
            for section, values in config.items() for name, value in values.items()}


@contextmanager
def held(lock: Path):
    """An exclusive ``flock`` on the file ``lock`` for the block, waited for; without fcntl (Windows), none."""
    try:
        import fcntl
    except ImportError:
        yield
        return
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)   # closing the descriptor lets go of the lock
