"""Resumable training: checkpoints of the whole training state in ``<run>/checkpoints/step-<N>/`` (written into a hidden
temporary folder, flushed, renamed: always complete), and exact resumption after a crash (docs/long-runs.md,
'Checkpoints' and 'Resuming'). Resuming replays: the run starts over with the saved configuration, its stages iterating
their data as before, but skips the first N optimizer steps without computing; just before the first real step the
model, optimizers and RNG states are restored, so the run continues bit for bit. ``TrainingClock`` alone knows this.
"""
from __future__ import annotations

import errno
import json
import os
import re
import shutil
import time
from pathlib import Path
from typing import Callable

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from minbert.atomic import disk_full, signals_deferred, usual_mode
from minbert.errors import first_line

from ..learning.callbacks import StepClock
from ..learning.loop import TrainingDiverged
from ..learning.rng import rng_state, set_rng_state
from .checkpoint import ENCODER, HEADS, model_state

CHECKPOINTS = "checkpoints"
BEST_ENCODER, BEST_HEADS = "best.safetensors", "best-heads.safetensors"
STEP_DIR = re.compile(r"^step-(\d{8})$")


class ResumeError(Exception):
    """A --resume folder without a usable checkpoint (one line, names the folder or file)."""


class TrainingClock(StepClock):
    """The kernel's ``StepClock`` as exact resume: saves training checkpoints (the model and what ``track``
    lists: optimizers, loss weighting, gradient scaler, ...) and replays from ``resume``."""

    def __init__(self, model: torch.nn.Module | None, run_dir: Path | None, config: dict, save_every: int = 0,
                 keep: int = 2, resume: "Checkpoint | None" = None, enabled: bool = True,
                 log: Callable[[str], None] = print):
        self.model, self.run_dir, self.config = model, run_dir, config
        self.save_every, self.keep, self.enabled, self.log = save_every, keep, enabled, log
        self.best_dir = run_dir / "checkpoint" if run_dir is not None else None   # copied into checkpoints
        self.states: Callable[[], dict[str, object]] = dict   # name -> object with state_dict (``track``)
        super().__init__()
        self.finished_stages: dict[str, dict] = resume.state["finished_stages"] if resume else {}
        self.resume = resume          # set to None once the replay has caught up with it
        self.checkpoint = resume      # kept (the best epoch's weights are read from it)
        self.resume_step = resume.step if resume else 0

    def track(self, run) -> None:
        """Save and restore what ``run_states(run)`` lists, each named ``run.<path>`` as checkpoints always have."""
        self.states = lambda: {f"run.{name}": state for name, state in run_states(run).items()}

    def finished_stage(self, name: str) -> dict | None:
        """A stage that had finished before the crash: its log, and the clock moves past its steps."""
        if name not in self.finished_stages:
            return None
        record = self.finished_stages[name]
        self.step = record["end_step"]
        return record["log"]

    def begin_stage(self, name: str, progress: dict) -> dict:
        if self.resume and self.resume.state["stage"] == name:
            progress = self.resume.state["progress"]
        return super().begin_stage(name, progress)

    def end_stage(self, name: str, log: dict) -> None:
        self.finished_stages[name] = {"end_step": self.step, "log": log}
        self.stage, self.progress = None, {}

    def skip_step(self) -> bool:
        """A step to run (False) restores the saved state first if it is the first after the replay."""
        if self.step < self.resume_step:
            self.step += 1
            return True
        self.catch_up()
        return False

    def catch_up(self) -> None:
        """Restore the checkpoint's state if the replay has just reached it."""
        if self.resume is not None and self.step >= self.resume_step:
            self.resume.restore(self.model, self.states())
            self.log(f"resumed at step {self.step} from {self.resume.path}")
            self.resume = None

    def step_done(self) -> None:
        super().step_done()
        if self.save_every and self.step % self.save_every == 0:
            self.save()

    def save(self) -> Path | None:
        """Write ``checkpoints/step-<N>`` atomically and prune old ones; returns its path."""
        if not self.enabled or self.resume is not None:  # nothing new to save while replaying
            return None
        bad = next((name for name, p in self.model.state_dict().items()
                    if p.is_floating_point() and not torch.isfinite(p).all()), None)
        if bad is not None:
            raise TrainingDiverged(f"step {self.step}: non-finite weights ({bad}); {self.last_good()}")
        root = self.run_dir / CHECKPOINTS
        root.mkdir(parents=True, exist_ok=True)
        final = root / f"step-{self.step:08d}"
        tmp = root / f".tmp-step-{self.step:08d}-{os.getpid()}"
        with signals_deferred():  # a signal mid-write would leave the temporary folder, or half of an old one
            self._write(tmp, final)
            for old in list_checkpoints(self.run_dir)[:-self.keep]:
                shutil.rmtree(old, ignore_errors=True)
        return final

    def _write(self, tmp: Path, final: Path) -> None:
        """Fill ``tmp``, flush it, rename it to ``final``; ``tmp`` is gone afterwards whatever happens. The best
        weights are copied, not hard-linked, so that damage to one file cannot break every checkpoint."""
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
        try:
            save_file({k: v.detach().contiguous().cpu() for k, v in self.model.state_dict().items()},
                      str(tmp / "model.safetensors"), metadata={"format": "pt"})
            os.chmod(tmp / "model.safetensors", usual_mode())  # save_file makes 0600
            for source, copy in ((ENCODER, BEST_ENCODER), (HEADS, BEST_HEADS)):
                if self.best_dir is not None and (self.best_dir / source).is_file():
                    shutil.copyfile(self.best_dir / source, tmp / copy)
            objects = self.states()
            optimizers = {k for k, o in objects.items() if isinstance(o, torch.optim.Optimizer)}
            torch.save({"optimizers": {k: o.state_dict() for k, o in objects.items() if k in optimizers},
                        "modules": {k: o.state_dict() for k, o in objects.items() if k not in optimizers},
                        "rng": rng_state()}, tmp / "state.pt")
            state = {"step": self.step, "stage": self.stage, "progress": self.progress,
                     "finished_stages": self.finished_stages, "config": self.config,
                     "saved": time.strftime("%Y-%m-%dT%H:%M:%S")}
            (tmp / "state.json").write_text(json.dumps(state, indent=1) + "\n", encoding="utf-8")
            for path in tmp.iterdir():
                _fsync(path)
            if final.exists():  # the same step saved twice (a save_every step that ends an epoch)
                shutil.rmtree(final)
            os.rename(tmp, final)
            _fsync(final.parent)
        except Exception as err:
            if disk_full(err):   # safetensors and torch.save each say it their own way
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(final)) from None
            raise
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def saved_best_state(self) -> dict[str, torch.Tensor] | None:
        return self.checkpoint.best_state() if self.checkpoint is not None else None

    def last_good(self) -> str:
        """Where the last good state is, for the message that stops a diverged run."""
        if not self.enabled:
            return "nothing was saved"
        found = list_checkpoints(self.run_dir)
        return f"the last good checkpoint, {found[-1]}, is kept" if found else "no checkpoint had been written yet"


def run_states(run) -> dict[str, object]:
    """Everything a checkpoint saves of a ``Run`` besides the model's weights, each object once, by the path it is
    reached by, the names checkpoints have always used: the optimizer, the loss weighting and each regularizer's
    states (``task_loss``), the fp16 gradient scaler, the objective being trained (its optimizer, its curves'
    states) and its learning-rate schedule (``loop``). The one list: a new stateful part is named here."""
    task_loss, loop = run.task_loss, run.loop
    regularizers = {f"task_loss.regularizers.{i}.{name}": state for i, regularizer in enumerate(task_loss.regularizers)
                    for name, state in (regularizer.states() if hasattr(regularizer, "states") else {}).items()}
    objective = loop.objective.states() if loop.objective is not None else {}
    parts = {"optimizer": run.optimizer, "task_loss.weighting": task_loss.weighting, **regularizers,
             "loop.precision.scaler": loop.precision.scaler,
             **{f"loop.objective.{name}": state for name, state in objective.items()},
             "loop.scheduler": loop.scheduler}
    found: dict[str, object] = {}
    for name, state in parts.items():
        if state is not None and all(state is not seen for seen in found.values()):
            found[name] = state
    return found


class Checkpoint:
    """A training checkpoint folder, every file read in full here (and again, not kept, by ``restore``:
    a checkpoint is several times the model's size), so an unreadable one is found before the replay."""

    def __init__(self, path: Path):
        self.path = path
        try:
            self.state = json.loads((path / "state.json").read_text(encoding="utf-8"))
            self.step = int(self.state["step"])
            if not isinstance(self.state["config"], dict):   # what --resume trains with
                raise TypeError("'config' is not a mapping")
        except (OSError, ValueError, KeyError, TypeError) as err:
            raise ResumeError(f"{path / 'state.json'}: unreadable checkpoint state ({first_line(err)})") from None
        for name in ("model.safetensors", "state.pt"):
            if not (path / name).is_file():
                raise ResumeError(f"{path}: incomplete checkpoint, {name} is missing")
        self.weights(), self.extra(), self.best_state()

    def weights(self) -> dict[str, torch.Tensor]:
        return _read(self.path / "model.safetensors", lambda path: load_file(str(path)))

    def extra(self) -> dict:
        """state.pt: optimizer and module states, RNG states (a damaged pickle raises many kinds of errors)."""
        return _read(self.path / "state.pt", lambda path: torch.load(path, map_location="cpu", weights_only=True),
                     errors=Exception)

    def restore(self, model: torch.nn.Module, objects: dict[str, object]) -> None:
        """Load the model, the named objects' states (``TrainingClock.track``) and the RNG states."""
        missing, unexpected = model.load_state_dict(self.weights(), strict=False)
        if missing or unexpected:
            raise ResumeError(f"{self.path / 'model.safetensors'}: does not match the model "
                              f"(missing {sorted(missing)[:3]}, unexpected {sorted(unexpected)[:3]})")
        extra = self.extra()
        saved = {**extra.get("optimizers", {}), **extra.get("modules", {})}
        if set(saved) != set(objects):
            raise ResumeError(f"{self.path / 'state.pt'}: holds the state of {sorted(saved)}, the run has "
                              f"{sorted(objects)}")
        for name, obj in objects.items():
            obj.load_state_dict(saved[name])
        set_rng_state(extra["rng"])

    def best_state(self) -> dict[str, torch.Tensor] | None:
        path = self.path / BEST_ENCODER
        return _read(path, lambda path: model_state(path, self.path / BEST_HEADS)) if path.is_file() else None


def _read(path: Path, read: Callable, errors=(SafetensorError, OSError, ValueError)):
    """``read(path)``, an error of ``errors`` turned into a one-line ``ResumeError`` naming the file."""
    try:
        return read(path)
    except errors as err:
        raise ResumeError(f"{path}: unreadable ({first_line(err)})") from None


def list_checkpoints(run_dir: Path) -> list[Path]:
    """Complete checkpoint folders of a run, oldest first."""
    root = Path(run_dir) / CHECKPOINTS
    return sorted(p for p in root.iterdir() if p.is_dir() and STEP_DIR.match(p.name)) if root.is_dir() else []


def latest_checkpoint(run_dir: Path, fallback: bool = False) -> Checkpoint:
    """The newest readable checkpoint of ``run_dir``. When the newest is unreadable, a ResumeError
    that names the newest intact one, which ``fallback=True`` (``--resume_fallback``) takes."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise ResumeError(f"--resume {run_dir}: no such run folder")
    found = list_checkpoints(run_dir)
    if not found:
        raise ResumeError(f"--resume {run_dir}: no checkpoint in {run_dir / CHECKPOINTS} "
                          f"(checkpoints are written every --save_every steps and at each epoch end)")
    newest_error = None
    for path in reversed(found):
        try:
            checkpoint = Checkpoint(path)
        except ResumeError as err:
            newest_error = newest_error or err
            continue
        if newest_error is None or fallback:
            return checkpoint
        raise ResumeError(f"the newest checkpoint is unreadable ({newest_error}); {path.name} is intact: "
                          f"add --resume_fallback to continue from it")
    raise ResumeError(f"--resume {run_dir}: no readable checkpoint ({newest_error})")


def remove_temporary_files(run_dir: Path) -> list[Path]:
    """Remove (and return) what an interrupted writer left in a run folder: half-written checkpoint
    folders, atomic writes' temporary files. A process killed with SIGKILL cannot, so ``--resume`` does."""
    run_dir = Path(run_dir)
    stale = [*(run_dir / CHECKPOINTS).glob(".tmp-step-*"), *run_dir.rglob(".*.tmp")]
    for path in stale:
        if path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
    return stale


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
