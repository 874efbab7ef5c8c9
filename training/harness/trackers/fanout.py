"""``Trackers``: the run's trackers behind the one ``Scalars`` that the loop and the evaluations call. Trackers are
side outputs, as curves.png is: one that raises costs its tracking from then on and one warning line, never the run.
"""
from __future__ import annotations

from typing import Callable

from minbert.atomic import signals_deferred
from minbert.errors import describe

from ...learning.callbacks import Scalars
from .tracker import TrackedRun, Tracker, warn_on_stderr


class Trackers(Scalars):
    """Each call handed to every tracker still at work, in ``--report_to``'s order. Ctrl-C and SIGTERM wait for
    each call: a tracker's file, database or socket is not left half-written (the stop comes right after)."""

    def __init__(self, trackers: list[Tracker] | tuple = (), warn: Callable[[str], None] = warn_on_stderr):
        self.trackers, self.warn = list(trackers), warn

    @property
    def recording(self) -> bool:
        return any(tracker.recording for tracker in self.trackers)

    def start(self, run: TrackedRun) -> dict:
        """Start every tracker; what each recorded of the run (tracker name -> its record: metrics.json's
        ``tracked``, which a resumed run hands back as ``run.earlier``)."""
        records = {}
        for tracker in list(self.trackers):
            record = self._call(tracker, lambda t: t.start(run))
            if record:
                records[tracker.name] = record
        return records

    def add(self, tag: str, value: float | None, step: int) -> None:
        if value is None:   # a score the task has none of
            return
        for tracker in list(self.trackers):
            self._call(tracker, lambda t: t.add(tag, value, step))

    def end(self, status: str, scores: dict[str, float], files: list[str]) -> None:
        """Every tracker's end (``Tracker.end``); nothing is tracked after it."""
        for tracker in list(self.trackers):
            self._call(tracker, lambda t: t.end(status, scores, files))
        self.trackers = []

    def _call(self, tracker: Tracker, call: Callable[[Tracker], object]):
        """``call(tracker)``'s result, with signals held; an error of it drops the tracker, with one warning."""
        with signals_deferred():
            try:
                return call(tracker)
            except Exception as err:
                self.trackers.remove(tracker)
                self.warn(f"warning: {tracker.title} stopped tracking this run, which goes on without it "
                          f"({describe(err)})")
                return None
