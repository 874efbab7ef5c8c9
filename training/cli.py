"""How every command of the project ends: a user's error is one line on stderr and exit code 1;
Ctrl-C and SIGTERM (what schedulers and ``docker stop`` send) are one line and 130 / 143; a file a
command would replace is refused unless it was given ``--overwrite`` (``check_overwrite``).
In ``run_command`` SIGTERM raises ``Terminated``, a ``KeyboardInterrupt``, so it unwinds like Ctrl-C:
every ``finally`` runs (temporary files and half-written checkpoints removed), a run marks itself "interrupted".
"""
from __future__ import annotations

import errno
import signal
import sys
import threading
import warnings
from pathlib import Path
from typing import Callable

from training.data.readers import DataError
from minbert.errors import describe
from minbert.weights import WeightsError

from .resume import ResumeError, TrainingDiverged

# what a user can cause and fix: bad data, weights, flags, folders, a run that diverged
USER_ERRORS = (DataError, WeightsError, ResumeError, TrainingDiverged, ValueError, OSError)


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised in the main thread like Ctrl-C's KeyboardInterrupt."""


def run_command(body: Callable[[], int | None]) -> int:
    """Run ``body`` (a command: its exit code, or None for 0); what it raises becomes one line and an exit code,
    and a warning one ``warning: ...`` line (not Python's two, with its source line)."""
    previous = _on_sigterm(_raise_terminated)
    formatter, warnings.formatwarning = warnings.formatwarning, _one_line_warning
    try:
        return body() or 0
    except USER_ERRORS as err:
        print(f"error: {describe(err)}", file=sys.stderr)
        return 1
    except Terminated:
        print("terminated (SIGTERM)", file=sys.stderr)
        return 128 + signal.SIGTERM
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 128 + signal.SIGINT
    finally:
        _on_sigterm(previous)
        warnings.formatwarning = formatter


def _one_line_warning(message, category, filename, lineno, line=None) -> str:
    return f"warning: {' '.join(str(message).split())}\n"


def check_overwrite(targets: list[Path], overwrite: bool, flag: str = "--out") -> None:
    """Refuse, naming the first, when any of ``targets`` exists and ``overwrite`` is not set."""
    existing = [path for path in targets if path.exists()]
    if existing and not overwrite:
        more = f" (and {len(existing) - 1} more of the files it would write)" if len(existing) > 1 else ""
        raise FileExistsError(errno.EEXIST, f"already exists{more}; pass --overwrite to replace it, or choose "
                                            f"another {flag}", str(existing[0]))


def _raise_terminated(signum, frame):
    raise Terminated()


def _on_sigterm(handler):
    """Install ``handler`` for SIGTERM (main thread only: nowhere else can take signals); returns the previous one."""
    if handler is None or threading.current_thread() is not threading.main_thread():
        return None
    return signal.signal(signal.SIGTERM, handler)
