"""TensorBoard scalars of a run in its folder (``train_loss/<stage>/<part>``, ``lr/<stage>[/group<i>]``,
``grad_norm/<stage>``, ``examples_per_second/<stage>``, ``dev/<task>``, ``dev/overall``, ``dev_loss/<task>``)
against the run's optimizer step, and its configuration as text, so that ``tensorboard --logdir predictions/``
shows a grid side by side (docs/long-runs.md, 'Curves and logging'). A side output: a writer that fails
costs the scalars from then on and one warning line, never the run.
"""
from __future__ import annotations

import os
import sys
import threading
from pathlib import Path
from typing import Callable

from minbert.atomic import signals_deferred
from minbert.errors import describe

from ..learning.callbacks import Scalars

OLD_FOLDER = "tensorboard"   # where runs begun before the event files moved into the run folder keep them


def _warn(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


class TensorBoardScalars(Scalars):
    """The loop's ``Scalars`` kept in ``run_dir``'s event files (None: writes nothing). Ctrl-C and SIGTERM wait
    for each call: raised inside the writer's queue, they would leave its lock held and ``close`` hang."""

    def __init__(self, run_dir: Path | None = None, purge_step: int | None = None,
                 warn: Callable[[str], None] = _warn):
        self.writer, self.missing, self.warn, self.failed = None, None, warn, False
        if run_dir is None:
            return
        try:
            from torch.utils.tensorboard import SummaryWriter   # needs the tensorboard package
        except ImportError:
            self.missing = "note: tensorboard is not installed, so no TensorBoard scalars (pip install tensorboard)"
            return
        # TensorBoard names a run by its event files' folder: the run folder itself (``--logdir predictions/``
        # lists ``<run>``), or the RUN/tensorboard/ a run begun with, so that it stays one run on --resume
        folder = run_dir / OLD_FOLDER if (run_dir / OLD_FOLDER).is_dir() else run_dir
        try:
            self.writer = SummaryWriter(str(folder), purge_step=purge_step)
        except Exception as err:
            self._stop(err)
            return
        _quiet(self.writer)

    @property
    def recording(self) -> bool:
        return self.writer is not None

    def add(self, tag: str, value: float | None, step: int) -> None:
        if value is not None:
            self._write(lambda writer: writer.add_scalar(tag, value, step))

    def text(self, tag: str, text: str) -> None:
        """Markdown under TensorBoard's Text tab (the run's configuration)."""
        self._write(lambda writer: writer.add_text(tag, text, 0))

    def close(self) -> None:
        self._write(lambda writer: writer.close())
        self.writer = None

    def _write(self, call: Callable) -> None:
        """``call(writer)`` with signals held, any error of it turned into ``_stop``; nothing without a writer."""
        if self.writer is not None:
            with signals_deferred():
                try:
                    call(self.writer)
                except Exception as err:
                    self._stop(err)

    def _stop(self, err: Exception) -> None:
        """No more scalars; warn once. The broken writer is dropped (closing it would raise the same error)."""
        self.writer = None
        if isinstance(err, OSError) and isinstance(err.filename, bytes):  # tensorboard names its file in bytes
            err.filename = os.fsdecode(err.filename)
        if not self.failed:
            self.failed = True
            self.warn(f"warning: TensorBoard scalars stopped, the run goes on without them ({describe(err)})")


def _quiet(writer) -> None:
    """Silence the traceback that ``writer``'s background thread prints when it re-raises its error (the main
    thread gets the same error at its next call and warns). Only that thread's hook is replaced, found
    defensively (tensorboard's and threading's own attributes), never the process's ``threading.excepthook``."""
    for file_writer in getattr(writer, "all_writers", {}).values():
        thread = getattr(getattr(getattr(file_writer, "event_writer", None), "_async_writer", None), "_worker", None)
        if isinstance(thread, threading.Thread) and hasattr(thread, "_invoke_excepthook"):
            thread._invoke_excepthook = lambda thread: None
