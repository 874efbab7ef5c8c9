"""The run's trackers, ``--report_to``: where a run's configuration, every step's numbers, its final scores, its
files and how it ended go besides metrics.json. TensorBoard (the default) writes event files into the run folder,
mlflow a local store beside the run folders, wandb an offline run inside the run folder (docs/long-runs.md, "Curves
and logging"). Each is a ``Tracker`` (``tracker.py``) in a module of its own; ``Trackers`` (``fanout.py``) is the one
``Scalars`` the loop and the evaluations see. mlflow and wandb are optional packages (``pip install -e '.[mlflow]'``,
``'.[wandb]'``), imported only by a run that chose them; ``check_installed`` refuses a run that chose a missing one
before its folder exists.
"""
from __future__ import annotations

from importlib.util import find_spec
from typing import Callable

from .fanout import Trackers
from .mlflow_tracker import MlflowTracker
from .tensorboard_tracker import TensorBoardTracker
from .tracker import RUN_FILES, TrackedRun, Tracker, final_scores
from .wandb_tracker import WandbTracker

# --report_to's names (training/configuration/sections.py, TRACKERS) -> their trackers
TRACKER_TYPES = {"tensorboard": TensorBoardTracker, "mlflow": MlflowTracker, "wandb": WandbTracker}
# tracker -> the package it needs, which setup.cfg's extra of the tracker's name installs (TensorBoard's is required)
PACKAGES = {"mlflow": "mlflow", "wandb": "wandb"}

__all__ = ["RUN_FILES", "TRACKER_TYPES", "TrackedRun", "Tracker", "Trackers", "check_installed", "final_scores",
           "open_trackers"]


def check_installed(names) -> None:
    """A ``ValueError``, one line, for the first tracker of ``names`` whose package is not installed, saying how to
    install it: a run says it before its folder exists, a grid or a search before Ray starts."""
    for name in names:
        package = PACKAGES.get(name)
        if package is not None and find_spec(package) is None:
            raise ValueError(f"--report_to {name} needs the {package} package: pip install -e '.[{name}]' (in the "
                             f"clone) or pip install {package}")


def open_trackers(names, warn: Callable[[str], None], note: Callable[[str], None]) -> Trackers:
    """The trackers of ``names`` (``OutputConfig.trackers``), not started; ``warn``: a line a user should see,
    ``note``: a line of the run's log."""
    return Trackers([TRACKER_TYPES[name](warn, note) for name in names], warn)
