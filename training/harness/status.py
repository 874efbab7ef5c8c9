"""A run's status, as metrics.json records it: one type, each value written here once."""
from __future__ import annotations

from enum import StrEnum


class RunStatus(StrEnum):
    """Where a run is. Its values are the strings metrics.json has always held (a ``str``: JSON writes it as one)."""
    RUNNING = "running"              # training now, or killed outright (SIGKILL, power loss): --resume continues it
    FINISHED = "finished"            # its predictions, metrics and checkpoint are final
    STOPPED_EARLY = "stopped early"  # a search's scheduler stopped it (--wait_after_eval); final like finished
    INTERRUPTED = "interrupted"      # Ctrl-C, SIGTERM, a grid or search stopped: --resume continues it
    FAILED = "failed"                # an error, named in metrics.json's "error"


FINAL = (RunStatus.FINISHED, RunStatus.STOPPED_EARLY)       # its weights and scores are the run's last
UNFINISHED = (RunStatus.RUNNING, RunStatus.INTERRUPTED)   # what --resume (and a grid's second pass) continues
