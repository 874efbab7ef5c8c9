"""wandb as a tracker (``--report_to wandb``): an offline run inside the run folder, ``RUN/wandb/offline-run-*``;
nothing is sent and no login is asked for (``wandb sync RUN/wandb/offline-run-*`` uploads it later). The run is named
for its folder, in the project ``--experiment``: its configuration, every step's numbers at the run's step, its final
scores and status in its summary, metrics.json, curves.png and the model card as its files, its end as its exit code.
wandb cannot resume an offline run: each sitting of a resumed run is an offline run of its own, of the same name.
"""
from __future__ import annotations

import os
from pathlib import Path

from ..status import RunStatus
from .tracker import TrackedRun, Tracker

# a run's end as wandb's exit code: 0 finished (a search's scheduler's stop included), 130 stopped; else 1, failed
EXIT_CODES = {RunStatus.FINISHED: 0, RunStatus.STOPPED_EARLY: 0, RunStatus.INTERRUPTED: 130}


class WandbTracker(Tracker):
    name, title = "wandb", "wandb"

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.run = self.folder = None

    def start(self, run: TrackedRun) -> dict:
        import wandb
        self.folder = run.folder
        # console off: wandb leaves this process's stdout and stderr as they are; silent: no lines of its own
        self.run = wandb.init(mode="offline", dir=str(run.folder), project=run.experiment, name=run.name,
                              config=run.config, settings=wandb.Settings(console="off", silent=True))
        return {"run_id": self.run.id, "folder": os.path.relpath(Path(self.run.dir).parent, run.folder)}

    def add(self, tag: str, value: float, step: int) -> None:
        # with a step given, wandb gathers a step's numbers into one row, written when a later step comes
        self.run.log({tag: float(value)}, step=step)

    def end(self, status: str, scores: dict[str, float], files: list[str]) -> None:
        self.run.summary.update({**scores, "status": str(status)})
        for name in files:   # each under its own name in the run's files: checkpoint/README.md as it is
            self.run.save(str(self.folder / name), base_path=str(self.folder), policy="now")
        self.run.finish(exit_code=EXIT_CODES.get(status, 1))
