"""The run folder through one run: claimed (or a resumed run's own), ``metrics.json`` written "running" at
the start and "finished" (or "stopped early") at the end, TensorBoard's event files, the model card; on an
error, a run that had not started gives its folder back and one that had is marked "failed" or "interrupted".
"""
from __future__ import annotations

import json
import time
from datetime import datetime
from pathlib import Path

import torch

from minbert.errors import first_line

from .config import RunConfig
from .distributed import Distributed, shutdown
from .fingerprint import check_unchanged, fingerprint, input_files
from .model_card import write_model_card
from .outputs import RunFiles, claim_run_dir, read_metrics, release_run_dir
from .resume import Checkpoint, remove_training_state
from .run_lock import RunLock
from .run_log import RunLog
from .tensorboard import Scalars


class RunFolder:
    """The run folder as a context manager: claimed on entry (a resumed run continues its own),
    ``metrics.json`` written "running" by ``start`` and "finished" by ``finish``. When the block raises,
    a run that had not started gives its folder back (leaving nothing) and one that had is marked
    "failed" with the error ("interrupted" on Ctrl-C and SIGTERM); the error propagates."""

    def __init__(self, config: RunConfig, resume: Checkpoint | None, place: Distributed, started: float,
                 log: RunLog, lock: RunLock | None = None):
        self.config, self.resume, self.place, self.started, self.log = config, resume, place, started, log
        self.lock = lock   # held from here to the end: the folder is live (training/run_lock.py)
        self.metrics: dict | None = None
        # --resume of a run stopped before its first checkpoint: it starts again in its own folder
        self.restart = resume is None and bool(config.output.resume)
        self.dir = Path(config.output.resume) if config.output.resume else None
        self.tensorboard = Scalars()

    def __enter__(self) -> "RunFolder":
        if self.resume is None and not self.restart:
            self.dir = claim_run_dir(self.config, claim=self.place.is_main)
            if self.place.is_main:
                self.lock = RunLock(self.dir).acquire()   # just claimed: nobody else holds it
        self.write = RunFiles(self.dir, self.place.is_main)
        return self

    def start(self, data_dir: Path | None, data_report: dict, model_dir: Path, device: torch.device) -> None:
        """Write metrics.json "running": a new run's, a restarted run's (its history kept) or a resumed one's
        (the inputs it read checked unchanged, its sittings' wall time added up)."""
        files = input_files(data_dir, data_report, model_dir)
        if self.resume is None and not self.restart:
            metrics = {"run_name": self.dir.name, "status": "running", "config": self.config.to_dict(),
                       "started": datetime.now().isoformat(timespec="seconds"), "inputs": fingerprint(files)}
        elif self.restart:
            earlier = read_metrics(self.dir)
            check_unchanged(earlier.get("inputs", {}), files)
            metrics = {"run_name": self.dir.name, "status": "running", "config": self.config.to_dict(),
                       "started": earlier.get("started") or datetime.now().isoformat(timespec="seconds"),
                       "inputs": earlier.get("inputs") or fingerprint(files),
                       "restarted": [*earlier.get("restarted", []), datetime.now().isoformat(timespec="seconds")],
                       **({"recovered": history} if (history := recovered(earlier)) else {})}
        else:
            metrics = read_metrics(self.dir)
            check_unchanged(metrics.get("inputs", {}), files)   # runs saved before inputs were recorded: none
            if history := recovered(metrics):
                metrics["recovered"] = history
            metrics.pop("error", None)   # the stop this sitting recovers from: in "recovered", not the run's error
            metrics["status"] = "running"
            # wall_seconds adds up the sittings (one killed outright recorded none, and counts nothing)
            earlier = metrics.get("wall_seconds")
            self.started -= earlier if isinstance(earlier, (int, float)) and earlier > 0 else 0
            metrics.setdefault("resumed", []).append({"step": self.resume.step, "checkpoint": self.resume.path.name,
                                                      "at": datetime.now().isoformat(timespec="seconds")})
        self.metrics = metrics
        self.write.json(metrics)
        self.log(f"run folder: {self.dir}" + (f"   processes: {self.place.world_size}" if self.place.enabled else ""))
        metrics.update(data_dir=str(data_dir.resolve()) if data_dir else None,
                       model_dir=str(model_dir), device=str(device), data=data_report, stages={})

    def seconds(self) -> float:
        return round(time.time() - self.started, 1)

    def scalars(self, resume: Checkpoint | None) -> Scalars:
        """The run's TensorBoard event files (process 0); a resumed run redraws from its checkpoint's step."""
        self.tensorboard = Scalars(self.dir if self.write.enabled else None,
                                   purge_step=resume.step if resume is not None else None, warn=self.log.result)
        if self.tensorboard.missing:
            self.log(self.tensorboard.missing)
        if resume is None:   # a resumed run's event files have it already
            self.tensorboard.text("config", "    " + json.dumps(self.config.to_dict(), indent=1).replace("\n", "\n    "))
        return self.tensorboard

    def finish(self, status: str = "finished", **results) -> None:
        """Mark the run finished (or "stopped early" by a search's scheduler) in metrics.json, draw its curves,
        write the model card, drop its training state."""
        self.metrics.update(status=status, **results, wall_seconds=self.seconds(),
                            torch_threads=torch.get_num_threads(),
                            # the CPU's vector instructions as torch's kernels use them (e.g. AVX2, AVX512): they
                            # and the thread count decide the rounding, so the bits of a CPU run (docs/defaults.md)
                            cpu_capability=torch.backends.cpu.get_cpu_capability(),
                            finished=datetime.now().isoformat(timespec="seconds"), processes=self.place.world_size)
        self.write.json(self.metrics)
        self.write.curves(self.metrics, self.log, final=True)
        if self.write.enabled:
            write_model_card(self.metrics, self.dir / "checkpoint")
        if not self.config.output.keep_training_state:
            remove_training_state(self.dir)

    def __exit__(self, kind, err, traceback) -> bool:
        try:
            self.tensorboard.close()
        finally:  # the status is written whatever closing a side writer does (Scalars.close warns, not raises)
            try:
                self._end(err)
            finally:   # after the last status is written: until then the folder is live
                if self.lock is not None:
                    self.lock.release()
        return False

    def _end(self, err: BaseException | None) -> None:
        if err is None:
            shutdown()
        elif self.metrics is None:
            if self.resume is None and not self.restart and self.place.is_main:
                if self.lock is not None:
                    self.lock.release()   # the folder must be empty to be given back
                release_run_dir(self.dir)
        else:
            self.metrics.update(status="interrupted" if isinstance(err, KeyboardInterrupt) else "failed",
                                error=f"{type(err).__name__}: {first_line(err)}", wall_seconds=self.seconds())
            try:
                self.write.json(self.metrics)
            except OSError:
                pass  # the disk that failed the run may fail this too; the run's own error says why
            shutdown()


def recovered(earlier: dict) -> list[dict]:
    """The history of the stops a run recovered from, with the one its metrics.json ``earlier`` records
    (status and error: "interrupted", "Terminated: ...", or a disk that was full) added: a resumed run
    that finishes has no error of its own, and says what it came back from."""
    history = earlier.get("recovered") if isinstance(earlier.get("recovered"), list) else []
    stop = {key: earlier[key] for key in ("status", "error") if earlier.get(key)}
    return [*history, {**stop, "at": datetime.now().isoformat(timespec="seconds")}] if stop.get("error") else history
