"""TensorBoard as a tracker (``--report_to tensorboard``, the default): the event files in the run folder
(``training/harness/tensorboard.py``, which keeps its own failures to one warning), the run's configuration under the
Text tab. A resumed run drops the events after its checkpoint's step: the steps done again are drawn once.
"""
from __future__ import annotations

import json

from ..tensorboard import TensorBoardScalars
from .tracker import TrackedRun, Tracker


class TensorBoardTracker(Tracker):
    name, title = "tensorboard", "TensorBoard"

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.scalars = TensorBoardScalars()   # writes nothing until the run starts

    @property
    def recording(self) -> bool:
        return self.scalars.recording

    def start(self, run: TrackedRun) -> None:
        self.scalars = TensorBoardScalars(run.folder, purge_step=run.resumed_at, warn=self.warn)
        if self.scalars.missing:
            self.note(self.scalars.missing)
        if run.resumed_at is None:   # a resumed run's event files have it already
            config = json.dumps(run.config, indent=1)
            self.scalars.text("config", "    " + config.replace("\n", "\n    "))

    def add(self, tag: str, value: float, step: int) -> None:
        self.scalars.add(tag, value, step)

    def end(self, status: str, scores: dict[str, float], files: list[str]) -> None:
        self.scalars.close()
