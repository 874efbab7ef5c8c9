"""One tracker of a run (``--report_to``): told that the run starts, each number of each step, and how the run ended.
What every tracker is handed is here: the run (``TrackedRun``), its final scores (``final_scores``) and the names of
the files it keeps (``RUN_FILES``). ``Trackers`` (``fanout.py``) hands each call to every tracker of the run.
"""
from __future__ import annotations

import math
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

# the run's files a tracker keeps at its end, where they exist (relative to the run folder): the run's record,
# its curves and its model card
RUN_FILES = ("metrics.json", "curves.png", "checkpoint/README.md")


def warn_on_stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


@dataclass(frozen=True)
class TrackedRun:
    """What a tracker is told of the run when it starts."""
    name: str                        # the run folder's name: the tracked run's
    experiment: str                  # --experiment, else the --out_dir folder's name
    config: dict                     # section -> setting -> value, as metrics.json holds it
    folder: Path                     # the run folder
    resumed_at: int | None = None    # a resumed run's checkpoint step (None: the run starts from its first step)
    earlier: dict = field(default_factory=dict)   # tracker name -> what it recorded of this run in a sitting before


class Tracker:
    """Where a run's numbers go besides metrics.json. A method may raise: ``Trackers`` turns the error into one
    warning and calls that tracker no more (the run goes on). ``warn``: a line a user should see; ``note``: a
    line of the run's log."""
    name = ""        # as --report_to names it
    title = ""       # as a warning names it
    recording = True   # the numbers are kept (a tracker that keeps none spares the loop a device sync for them)

    def __init__(self, warn: Callable[[str], None] = warn_on_stderr, note: Callable[[str], None] = print):
        self.warn, self.note = warn, note

    def start(self, run: TrackedRun) -> dict | None:
        """Begin tracking ``run`` (a resumed run: go on with what ``run.earlier`` names, where the tracker can);
        returns what to remember of it for a resumed run (metrics.json's ``tracked``), or None."""
        return None

    def add(self, tag: str, value: float, step: int) -> None:
        """One number (never None) of the run's optimizer step ``step`` (``Scalars.add``, e.g. ``dev/overall``)."""

    def end(self, status: str, scores: dict[str, float], files: list[str]) -> None:
        """The run ended with ``status`` (a ``RunStatus``): its final ``scores`` (``final_scores``) and ``files``
        (those of ``RUN_FILES`` it has)."""


def final_scores(metrics: dict) -> dict[str, float]:
    """The run's final numbers as the trackers keep them, from its metrics.json: ``final/dev/<task>`` and
    ``final/dev/overall`` (the predictions' weights, after any stage that follows multi-task training),
    ``final/test/...`` where the test files are labelled, ``wall_seconds`` and ``train_examples_per_second``.
    Finite numbers only: a run that failed before its end has fewer."""
    scores = {}
    for split in ("dev", "test"):
        per_task = metrics.get(split)
        for task, value in (per_task.items() if isinstance(per_task, dict) else ()):
            scores[f"final/{split}/{task}"] = value
        scores[f"final/{split}/overall"] = metrics.get(f"{split}_overall")
    for key in ("wall_seconds", "train_examples_per_second"):
        scores[key] = metrics.get(key)
    return {key: float(value) for key, value in scores.items()
            if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)}
