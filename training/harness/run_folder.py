"""The run folder through one run: claimed, or with ``--resume`` taken back (``resume_from``: its lock, its
saved configuration, its newest checkpoint); ``metrics.json`` written "running" at the start and "finished"
(or "stopped early") at the end, the model card, the run's trackers (``--report_to``: TensorBoard's event files,
mlflow, wandb) started and told how it ended; on an error, a run that had not started gives its folder back and one
that had is marked "failed" or "interrupted".
"""
from __future__ import annotations

import contextlib
import dataclasses
import shutil
import time
from datetime import datetime
from pathlib import Path

import torch

from minbert.atomic import signals_deferred
from minbert.errors import first_line

from ..configuration.sections import REMOVED_IN, WHERE_A_RUN_IS, removed_extension, removed_settings, saved_values
from .run_config import RunConfig
from .distributed import LOST_PEER, Distributed, peer_lost, record_run_dir, shutdown
from .fingerprint import check_unchanged, fingerprint, input_files
from .model_card import write_model_card
from .outputs import RunFiles, claim_run_dir, read_metrics, release_run_dir
from .resume import CHECKPOINTS, Checkpoint, ResumeError, latest_checkpoint, list_checkpoints, remove_temporary_files
from .run_lock import RunLock
from .run_log import RunLog
from ..configuration.task_file import check_agreement
from .trackers import RUN_FILES, TrackedRun, Trackers, final_scores, open_trackers
from .status import FINAL, RunStatus


class RunFolder:
    """The run folder as a context manager (the module's docstring); an error in the block propagates."""

    def __init__(self, config: RunConfig, resume: Checkpoint | None, place: Distributed, started: float,
                 log: RunLog, lock: RunLock | None = None):
        self.config, self.resume, self.place, self.started, self.log = config, resume, place, started, log
        self.lock = lock   # held from here to the end: the folder is live (training/harness/run_lock.py)
        self.metrics: dict | None = None
        self.ended = False   # the end state ("finished", "stopped early") is written: nothing changes it after
        # --resume of a run stopped before its first checkpoint: it starts again in its own folder
        self.restart = resume is None and bool(config.output.resume)
        self.dir = Path(config.output.resume) if config.output.resume else None
        self.trackers = Trackers()   # --report_to's, started with the run's scalars (process 0 alone)

    def __enter__(self) -> "RunFolder":
        if self.resume is None and not self.restart:
            self.dir = claim_run_dir(self.config.output, self.config.model, claim=self.place.is_main)
            if self.place.is_main:
                self.lock = RunLock(self.dir).acquire()   # just claimed: nobody else holds it
        record_run_dir(self.dir, self.place)
        self.write = RunFiles(self.dir, self.place.is_main)
        return self

    def start(self, config: RunConfig, inputs, device: torch.device) -> None:
        """Write metrics.json "running", a resumed or restarted run's inputs checked unchanged. ``config``: the
        run's, final (its paths absolute); ``inputs``: the trainer's ``RunInputs``."""
        self.config = config
        data_dir, data_report, model_dir = inputs.data_dir, inputs.data_report, inputs.model_dir
        files = input_files(data_dir, data_report, model_dir)
        now = datetime.now().isoformat(timespec="seconds")
        earlier = read_metrics(self.dir) if self.resume is not None or self.restart else {}
        check_unchanged(earlier.get("inputs", {}), files)   # runs saved before inputs were recorded: none
        if self.resume is None:   # a new run, or a restarted one (its history kept)
            metrics = {"run_name": self.dir.name, "status": RunStatus.RUNNING, "config": self.config.to_dict(),
                       "started": earlier.get("started") or now, "inputs": earlier.get("inputs") or fingerprint(files),
                       **model_parts(inputs.model)}
            if self.restart:
                metrics["restarted"] = [*earlier.get("restarted", []), now]
        else:
            metrics = earlier
        # the stops recovered from: a resumed run that finishes has no error of its own, and says what it came back from
        history = earlier.get("recovered") if isinstance(earlier.get("recovered"), list) else []
        if earlier.get("error"):
            history = [*history, {**{key: earlier[key] for key in ("status", "error") if earlier.get(key)}, "at": now}]
        if history:
            metrics["recovered"] = history
        if self.resume is not None:
            metrics.pop("error", None)   # the stop this sitting recovers from: in "recovered", not the run's error
            metrics["status"] = RunStatus.RUNNING
            # wall_seconds adds up the sittings (one killed outright recorded none, and counts nothing)
            wall = metrics.get("wall_seconds")
            self.started -= wall if isinstance(wall, (int, float)) and wall > 0 else 0
            metrics.setdefault("resumed", []).append({"step": self.resume.step, "checkpoint": self.resume.path.name,
                                                      "at": now})
        self.metrics = metrics
        self.write.json(metrics)
        self.log(f"run folder: {self.dir}" + (f"   processes: {self.place.world_size}" if self.place.enabled else ""))
        metrics.update(data_dir=str(data_dir.resolve()) if data_dir else None,
                       model_dir=str(model_dir), device=str(device), data=data_report, stages={})

    def seconds(self) -> float:
        return round(time.time() - self.started, 1)

    def scalars(self, resume: Checkpoint | None) -> Trackers:
        """The run's trackers (``--report_to``; process 0 alone), started: the ``Scalars`` of the loop and the
        evaluations. What they record of the run goes into metrics.json (``tracked``), where a resumed run finds it
        (its mlflow run goes on; TensorBoard redraws from the checkpoint's step)."""
        if not self.write.enabled:
            return self.trackers
        output, earlier = self.config.output, self.metrics.get("tracked")
        earlier = earlier if isinstance(earlier, dict) else {}
        self.trackers = open_trackers(output.trackers(), warn=self.log.result, note=self.log)
        run = TrackedRun(name=self.dir.name, experiment=output.experiment or self.dir.resolve().parent.name,
                         config=self.config.to_dict(), folder=self.dir,
                         resumed_at=resume.step if resume is not None else None, earlier=earlier)
        tracked = self.trackers.start(run)
        if tracked:
            self.metrics["tracked"] = {**earlier, **tracked}
            self.write.json(self.metrics)
        return self.trackers

    def finish(self, status: RunStatus = RunStatus.FINISHED, **results) -> None:
        """Mark the run finished (or "stopped early" by a search's scheduler) in metrics.json, draw its curves,
        write the model card, drop its training state."""
        self.metrics.update(status=status, **results, wall_seconds=self.seconds(),
                            torch_threads=torch.get_num_threads(),
                            # the CPU's vector instructions as torch's kernels use them (e.g. AVX2, AVX512): they
                            # and the thread count decide the rounding, so the bits of a CPU run (docs/defaults.md)
                            cpu_capability=torch.backends.cpu.get_cpu_capability(),
                            finished=datetime.now().isoformat(timespec="seconds"), processes=self.place.world_size)
        self.write.json(self.metrics)
        self.ended = True   # a signal or an error from here on (the clean-up below) leaves the status as it is
        with signals_deferred():   # a stop now waits for the curves and the card (seconds): the outputs are whole
            self.write.curves(self.metrics, self.log, final=True)
            if self.write.enabled:
                write_model_card(self.metrics, self.dir / "checkpoint")
            if not self.config.output.keep_training_state:   # checkpoints: several times the size of the best weights
                shutil.rmtree(self.dir / CHECKPOINTS, ignore_errors=True)

    def __exit__(self, kind, err, traceback) -> bool:
        try:
            try:
                self._end(err)
            finally:   # the status is written first, whatever a tracker does; then they are told it (Trackers warn)
                try:
                    self._end_trackers()
                finally:   # after the last status is written: until then the folder is live
                    if self.lock is not None:
                        self.lock.release()
        except KeyboardInterrupt as stop:
            if not self.ended:
                raise
            err = stop   # during the clean-up of a finished run
        if self.ended and isinstance(err, KeyboardInterrupt):   # the stop came after the run finished: it did
            with contextlib.suppress(OSError):
                self.log.result(f"{self.metrics['status']}: the stop came after the run ended; its outputs are whole")
            return True
        return False

    def _end(self, err: BaseException | None) -> None:
        if err is None or self.ended:   # a finished run stays finished (issue 74): --resume and grids leave it be
            shutdown()
        elif self.metrics is None:
            if self.resume is None and not self.restart and self.place.is_main:
                self.lock.release()   # the folder must be empty to be given back
                release_run_dir(self.dir)
        else:
            stopped = isinstance(err, KeyboardInterrupt)
            error = LOST_PEER if peer_lost(err) else f"{type(err).__name__}: {first_line(err)}"
            self.metrics.update(status=RunStatus.INTERRUPTED if stopped else RunStatus.FAILED, error=error,
                                wall_seconds=self.seconds())
            try:
                self.write.json(self.metrics)
            except OSError:
                pass  # the disk that failed the run may fail this too; the run's own error says why
            with contextlib.suppress(OSError):
                self.log.last(f"{self.metrics['status']}: {self.metrics['error']}")
            shutdown()

    def _end_trackers(self) -> None:
        """Tell the trackers how the run ended: its status, final scores and files as they are now (a run that did
        not start started none)."""
        if self.metrics is not None:
            files = [name for name in RUN_FILES if (self.dir / name).is_file()]
            self.trackers.end(self.metrics.get("status", RunStatus.FAILED), final_scores(self.metrics), files)


def resume_from(config: RunConfig, given: set[str] | None = None
                ) -> tuple[RunConfig, Checkpoint | None, list[Path], RunLock | None]:
    """With ``--resume``: the saved configuration, the newest checkpoint, the temporary files an interrupted
    run left (removed) and the run's lock, taken before anything in the folder is touched."""
    if not config.output.resume:
        return config, None, [], None
    run_dir = Path(config.output.resume)
    if not run_dir.is_dir():
        raise ResumeError(f"--resume {run_dir}: no such run folder")
    lock = RunLock(run_dir).acquire()
    try:
        stale = remove_temporary_files(run_dir)
        metrics = read_metrics(run_dir) if not list_checkpoints(run_dir) else {}
        if metrics.get("status") in FINAL:   # its checkpoints were cleared at its end
            raise ResumeError(f"--resume {run_dir}: the run already {metrics['status']}; nothing to resume (its "
                              f"outputs are in that folder; a new run needs another --run_name)")
        if metrics.get("status") == "starting":
            raise ResumeError(f"--resume {run_dir}: the run was stopped before it started (it saved no configuration "
                              "to resume with): run the command that started it again, which takes its folder over")
        if metrics.get("status") not in (None, *FINAL) and isinstance(metrics.get("config"), dict):
            # stopped, not ended, before its first checkpoint: it starts again in its own folder, as saved
            return resumed_config(config, metrics["config"], run_dir / "metrics.json", given), None, stale, lock
        resume = latest_checkpoint(run_dir, fallback=config.output.resume_fallback)
        return resumed_config(config, resume.state["config"], resume.path / "state.json", given), resume, stale, lock
    except BaseException:
        lock.release()
        raise


# what a resumed run takes from its command line: where it is and how it is driven (its own name aside: the
# folder is the run's), how it logs, and where its data moved to
RESUME_FLAGS = (*(name for name in WHERE_A_RUN_IS if name != "run_name"), "quiet", "data_dir")


def resumed_config(flags: RunConfig, saved_config: dict, source: Path, given: set[str] | None = None) -> RunConfig:
    """The configuration saved in ``source`` (state.json, or a restarted run's metrics.json) with ``RESUME_FLAGS``
    from the command line; other flags ``given`` (None: those off their defaults) that differ from the saved ones
    are refused: they would be ignored."""
    if refused := removed_extension(saved_values(saved_config)):
        raise ValueError(f"{source}: {refused}")
    try:
        config = RunConfig.from_dict(saved_config)
    except (TypeError, KeyError, ValueError) as err:
        raise ValueError(f"{source}: saved configuration does not fit this version ({err})") from None
    if removed := removed_settings(saved_config):
        raise ValueError(f"{source}: the run trained with {', '.join(removed)}, which {REMOVED_IN}")
    if flags.data.task_file:   # the run keeps its declarations: a --task_file beside them must agree
        check_agreement(flags.data.task_file, config.data.own_tasks, f"the run's saved declarations ({source})")
    defaults, flag_values, saved = RunConfig.defaults().to_dict(), flags.to_dict(), config.to_dict()
    ignored = [f"--{name} {value} (saved: {saved[section][name]})" for section, values in flag_values.items()
               for name, value in values.items() if name not in RESUME_FLAGS + ("task_file",)
               and (name in given if given is not None else value != defaults[section][name])
               and value != saved[section][name]]
    if ignored:
        raise ValueError(f"--resume continues the run with its saved configuration, and these flags differ from it: "
                         f"{', '.join(ignored)}; drop them (to train otherwise, start a new run, e.g. with "
                         f"--model {flags.output.resume} to start from its weights)")
    taken = {name: getattr(flags.output, name) for name in RESUME_FLAGS   # a trial's --wait_after_eval too:
             if hasattr(config.output, name)}                              # resumed by hand, it runs on its own
    data = dataclasses.replace(config.data, data_dir=flags.data.data_dir) if flags.data.data_dir else config.data
    return config.with_sections(output=dataclasses.replace(config.output, **taken), data=data).validate()


def model_parts(model) -> dict:
    """What metrics.json (and so the model card) records of the parts extensions added to ``model``: name -> what it
    is and its parameters; nothing when there are none."""
    parts = getattr(model, "parts", {})
    return {"model_parts": {name: {"about": part.describe(), "parameters": sum(p.numel() for p in part.parameters())}
                            for name, part in parts.items()}} if parts else {}
