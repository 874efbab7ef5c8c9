"""How every command of the project ends: a user's error is one line on stderr and exit code 1;
Ctrl-C and SIGTERM (what schedulers and ``docker stop`` send) are one line and 130 / 143; a file a
command would replace is refused unless it was given ``--overwrite`` (``check_overwrite``).
In ``run_command`` SIGTERM raises ``Terminated``, a ``KeyboardInterrupt``, so it unwinds like Ctrl-C:
every ``finally`` runs (temporary files and half-written checkpoints removed), a run marks itself "interrupted".
"""
from __future__ import annotations

import errno
import io
import json
import os
import signal
import sys
import threading
import time
import warnings
from contextlib import contextmanager, redirect_stderr
from pathlib import Path
from typing import Callable

from training.data.readers import DataError
from minbert.errors import describe, first_line
from minbert.weights import WeightsError

from ..learning.loop import TrainingDiverged
from ..harness.distributed import LOST_PEER, peer_lost
from ..harness.resume import ResumeError

# what a user can cause and fix: bad data, weights, flags, folders, a run that diverged
USER_ERRORS = (DataError, WeightsError, ResumeError, TrainingDiverged, ValueError, OSError)


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised in the main thread like Ctrl-C's KeyboardInterrupt."""


def run_command(body: Callable[[], int | None]) -> int:
    """Run ``body`` (a command: its exit code, or None for 0); what it raises becomes one line and an exit code,
    and a warning one ``warning: ...`` line (not Python's two, with its source line)."""
    previous = _on_sigterm(_raise_terminated)
    formatter, warnings.formatwarning = warnings.formatwarning, _one_line_warning
    code = None
    try:
        code = body() or 0
        sys.stdout.flush()   # a reader that went away is seen here, not at exit
        return code
    except BrokenPipeError:   # the reader of stdout went away (| head): no error, nor a second one at exit
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 128 + signal.SIGPIPE   # a tool's exit code when ended by SIGPIPE
    except USER_ERRORS as err:
        _ending()
        return _say(f"error: {describe(err)}", 1)
    except RuntimeError as err:
        if not peer_lost(err):
            raise
        _ending()   # the launcher is about to end this process too (torchrun's SIGTERM): its line says why
        # another process of the run ended first: its line is the one the launcher prints; this one is recorded
        return _say(f"error: {LOST_PEER} ({first_line(err)})", 1, printed=True, lost_peer=True)
    except KeyboardInterrupt as stop:
        _ending()
        if code is not None:   # the command had ended: a stop after it changes nothing
            return code
        # under training.tools.launch the launcher says it, once (it sent the stop, or got it itself)
        if isinstance(stop, Terminated):
            return _say("terminated (SIGTERM)", 128 + signal.SIGTERM, printed=launched())
        return _say("interrupted", 128 + signal.SIGINT, printed=launched())
    finally:
        _on_sigterm(previous)
        warnings.formatwarning = formatter


@contextmanager
def usage_errors_once():
    """argparse's usage error (exit code 2) as ``run_command``'s lines: in a multi-process run, process 0
    prints it and every process records its last line (every process parses the same flags)."""
    if not _error_file():
        yield
        return
    captured = io.StringIO()
    try:
        with redirect_stderr(captured):
            yield
    except SystemExit as stop:
        if stop.code:
            printed = not _recorded_only()
            if printed:
                sys.stderr.write(captured.getvalue())
            lines = captured.getvalue().strip().splitlines()
            _say(lines[-1] if lines else "bad flags", stop.code, printed)   # said here too if not recorded
        raise


def _say(line: str, code: int, printed: bool = False, lost_peer: bool = False) -> int:
    """A command's last line on stderr, and its exit code. A process of several that torchrun (or
    training.tools.launch) started records both in its error file (torchelastic's ``TORCHELASTIC_ERROR_FILE``),
    where the launcher reads them; there, only process 0 prints the line: every process checks the same
    configuration, so one line says it."""
    shown = not _recorded_only()
    if _error_file():
        record = {**_earlier_record(), "message": line, "timestamp": int(time.time()), "exit_code": code,
                  **({"lost_peer": True} if lost_peer else {})}   # lost_peer: not the cause (launch.py)
        try:
            Path(_error_file()).write_text(json.dumps(record))
        except OSError:   # not recorded: said here, whichever process this is
            shown = True
    if shown and not printed:
        print(line, file=sys.stderr)
    return code


def _earlier_record() -> dict:
    """What the run wrote in the error file before its end (process 0's run folder: ``distributed.record_run_dir``)."""
    try:
        record = json.loads(Path(_error_file()).read_text())
    except (OSError, ValueError):
        return {}
    return record if isinstance(record, dict) else {}


# set by training.tools.launch for the processes it starts (torchrun does not): it prints how the run ended
LAUNCHED = "MINBERT_LAUNCHED"


def launched() -> bool:
    """A process of a multi-process run started by training.tools.launch."""
    return bool(_error_file()) and os.environ.get(LAUNCHED) == "1"


def _error_file() -> str | None:
    """The error file torchelastic gives each process of a multi-process run, or None."""
    return os.environ.get("TORCHELASTIC_ERROR_FILE") if int(os.environ.get("WORLD_SIZE", "1")) > 1 else None


def _recorded_only() -> bool:
    """A process other than 0 with an error file: its last line is recorded there, not printed."""
    return bool(_error_file()) and os.environ.get("RANK", "0") != "0"


def _one_line_warning(message, category, filename, lineno, line=None) -> str:
    return f"warning: {' '.join(str(message).split())}\n"


def check_overwrite(targets: list[Path], overwrite: bool, flag: str = "--out") -> None:
    """Refuse, naming the first (and a second by name, more by their number), when any of ``targets`` exists and
    ``overwrite`` is not set."""
    existing = [path for path in targets if path.exists()]
    if existing and not overwrite:
        others = existing[1:]
        more = (f" (and {others[0].name} beside it)" if len(others) == 1 else
                f" (and {len(others)} more of the files it would write)" if others else "")
        raise FileExistsError(errno.EEXIST, f"already exists{more}; pass --overwrite to replace "
                                            f"{'them' if others else 'it'}, or choose another {flag}",
                              str(existing[0]))


def _ending() -> None:
    """How the command ends is decided: a SIGTERM from now on (a launcher ending the run's other processes, a second
    stop) changes nothing, instead of raising out of the lines that say how it ended."""
    _on_sigterm(signal.SIG_IGN)


def _raise_terminated(signum, frame):
    raise Terminated()


def _on_sigterm(handler):
    """Install ``handler`` for SIGTERM (main thread only: nowhere else can take signals); returns the previous one."""
    if handler is None or threading.current_thread() is not threading.main_thread():
        return None
    return signal.signal(signal.SIGTERM, handler)
