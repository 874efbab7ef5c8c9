"""Where a run's messages go: the terminal and, with ``--log_file``, a file. ``log.result(message)`` lines
(epoch lines, warnings, the summary) are the only ones ``--quiet`` keeps on the terminal. The file gets every
line, time-stamped, appended one at a time so that a crash loses nothing already logged.
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

from minbert.atomic import make_folder
from minbert.errors import describe

from ..learning.callbacks import Log


class RunLog(Log):
    """The kernel's ``Log`` with ``--quiet``, ``--log_file`` and silent processes (DDP ranks above 0)."""

    def __init__(self, quiet: bool = False, log_file: str | Path | None = None, enabled: bool = True):
        self.quiet, self.enabled = quiet, enabled   # enabled=False: a silent process (DDP rank > 0)
        self.log_file = Path(log_file) if log_file else None
        if self.log_file is not None and enabled:
            try:  # a log file that cannot be written fails the run now, not at its first line
                make_folder(self.log_file.parent)
                open(self.log_file, "a", encoding="utf-8").close()
            except OSError as err:
                raise OSError(err.errno, f"--log_file {self.log_file} cannot be written ({describe(err)})") from None

    @property
    def progress_bars(self) -> bool:
        return self.enabled and not self.quiet

    @property
    def nested_progress_bars(self) -> bool:
        """Bars drawn while another is open (dev scoring inside an epoch's bar): only on a terminal. Written
        to a file, tqdm's cursor moves for them would leave ``ESC[A`` sequences in it."""
        return self.progress_bars and sys.stderr.isatty()

    def __call__(self, message: str) -> None:
        self._emit(message, to_terminal=not self.quiet)

    def result(self, message: str) -> None:
        self._emit(message, to_terminal=True)

    def last(self, message: str) -> None:
        """How the run ended, in the log file only: the console has it from the command's own end."""
        self._emit(message, to_terminal=False)

    def _emit(self, message: str, to_terminal: bool) -> None:
        if not self.enabled:
            return
        if to_terminal:
            print(message, flush=True)
        if self.log_file is not None:
            with open(self.log_file, "a", encoding="utf-8") as f:
                f.write(f"{time.strftime('%Y-%m-%d %H:%M:%S')} {message}\n")
