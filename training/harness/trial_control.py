"""``--wait_after_eval``: a run that a search's scheduler (minbert-search's ASHA) steps one evaluation at a time.
After each evaluation (metrics.json written) the run prints ``EVALUATION {json}`` and reads one line from stdin:
``continue`` trains on; ``stop`` ends multi-task training there, as ``--early_stopping`` would ("stopped early");
the end of stdin (the scheduler gone) ends the run "interrupted", resumable. The scheduler decides while the run
waits, so where a trial stops does not depend on timing.
"""
from __future__ import annotations

import json
import sys

MARK = "EVALUATION "


class SchedulerGone(KeyboardInterrupt):
    """stdin closed while the run waited: it unwinds as on Ctrl-C and ends "interrupted"."""


def ask_scheduler(record: dict) -> bool:
    """Announce one evaluation (``record``: its number, steps and scores) and wait; True when told to stop."""
    print(MARK + json.dumps(record), flush=True)
    answer = sys.stdin.readline()
    if not answer:
        raise SchedulerGone()
    word = answer.strip()
    if word not in ("continue", "stop"):
        raise ValueError(f"--wait_after_eval: expected 'continue' or 'stop' on stdin, got {word[:40]!r}")
    return word == "stop"
