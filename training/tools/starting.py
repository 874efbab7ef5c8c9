"""A stop while a command starts: one line and exit code 130 (Ctrl-C) or 143 (SIGTERM), nothing written.

Python takes seconds to import torch, and a ``KeyboardInterrupt`` raised inside an import is a traceback of 14 to
91 lines, an abort (exit 134) or, swallowed by a library's import fallback, no stop at all. Until a command's work
begins nothing of it is written, so a stop then ends the process at once: ``stop_cleanly_while_starting()`` is the
first thing a command's module does when it runs as a command, and ``python_handlers_back()`` the last before its
``main``, from where a stop unwinds as each command says (``finally`` blocks, "interrupted", Ray shut down).

The installed commands (``minbert-*``, setup.cfg) start here, for the same reason: ``minbert-predict`` imports
training.tools.predict, and torch with it, before its ``main`` runs. This module imports nothing of the project.
"""
from __future__ import annotations

import importlib
import os
import signal
import threading
from functools import partial

SAID = {signal.SIGINT: "interrupted", signal.SIGTERM: "terminated (SIGTERM)"}   # as run_command says them


def _stopped(signum, frame) -> None:
    os.write(2, f"{SAID[signum]}\n".encode())
    os._exit(128 + signum)


def stop_cleanly_while_starting() -> None:
    """Ctrl-C and SIGTERM end the process with one line until ``python_handlers_back``; the main thread only."""
    if threading.current_thread() is threading.main_thread():
        for sig in SAID:
            signal.signal(sig, _stopped)


def python_handlers_back() -> None:
    """Python's own handlers where the start's are still set: Ctrl-C raises ``KeyboardInterrupt``, SIGTERM ends."""
    if threading.current_thread() is not threading.main_thread():
        return
    for sig, python_s in ((signal.SIGINT, signal.default_int_handler), (signal.SIGTERM, signal.SIG_DFL)):
        if signal.getsignal(sig) is _stopped:
            signal.signal(sig, python_s)


def _command(module: str):
    stop_cleanly_while_starting()
    main = importlib.import_module(module).main
    python_handlers_back()
    return main()


# the installed commands (setup.cfg's console_scripts)
train = partial(_command, "run_multitask")
predict = partial(_command, "training.tools.predict")
embed = partial(_command, "training.tools.embed")
report = partial(_command, "training.tools.report")
grid = partial(_command, "training.tools.ray_grid")
search = partial(_command, "training.tools.search")
launch = partial(_command, "training.tools.launch")
