"""Atomic file writes: a file is either its old complete version or its new complete version.

Write to a temporary file in the same folder, flush it to disk, then rename it over the target
(``os.replace`` is atomic on POSIX), so a crash never leaves a truncated checkpoint or CSV behind.
Ctrl-C and SIGTERM wait until the write is done (``signals_deferred``): a signal that could be
handled never leaves a temporary file behind, only SIGKILL can (``--resume`` removes those).
"""
from __future__ import annotations

import errno
import os
import signal
import tempfile
import threading
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Iterator


DEFERRED_SIGNALS = (signal.SIGINT, signal.SIGTERM)


@contextmanager
def signals_deferred() -> Iterator[None]:
    """Hold Ctrl-C and SIGTERM until the block ends, then deliver them to the handlers that were there.

    A signal handler raises wherever the main thread happens to be, also between creating a
    temporary file and the ``try`` that removes it, or halfway through removing a folder. Writes of
    a second or two are better finished than interrupted. Outside the main thread (which alone
    receives signals) this does nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list[int] = []
    try:
        # ExitStack runs every callback even when one raises (a signal whose handler is back already),
        # and each is registered before the swap it undoes, so a signal between two swaps leaves none behind
        with ExitStack() as put_back:
            for sig in DEFERRED_SIGNALS:
                handler = signal.getsignal(sig)
                if handler is None:  # installed outside Python: it cannot be put back, so is left alone
                    continue
                put_back.callback(signal.signal, sig, handler)
                signal.signal(sig, lambda signum, frame: caught.append(signum))
            yield
    finally:
        for sig in dict.fromkeys(caught):  # each signal once, in the order it came
            signal.raise_signal(sig)


@contextmanager
def atomic_path(target: str | Path) -> Iterator[Path]:
    """Yield a temporary path to write; on success it replaces ``target``, on error it is removed."""
    target = Path(target)
    with signals_deferred():
        if target.is_dir():
            raise IsADirectoryError(errno.EISDIR, "is a folder, a file name is expected here", str(target))
        make_folder(target.parent)
        fd, name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
        umask = os.umask(0)  # reading the umask means setting it; put it straight back
        os.umask(umask)
        os.fchmod(fd, 0o666 & ~umask)  # mkstemp makes 0600; a written file gets the usual permissions
        os.close(fd)
        tmp = Path(name)
        try:
            yield tmp
            with open(tmp, "rb+") as f:
                os.fsync(f.fileno())
            os.replace(tmp, target)
        finally:
            tmp.unlink(missing_ok=True)


def make_folder(path: str | Path) -> None:
    """``mkdir -p path``; where a file is in the way, an error that names that file."""
    check_folder(path)
    Path(path).mkdir(parents=True, exist_ok=True)


def check_folder(path: str | Path) -> None:
    """Raise, naming it, if ``path`` or an ancestor is a file (the folder can never be made); creates nothing."""
    path = Path(path)
    blocker = next((p for p in (path, *path.parents) if p.exists() and not p.is_dir()), None)
    if blocker is not None:
        why = "is a file, not a folder" if blocker == path else f"is a file, so the folder {path} cannot be made"
        raise NotADirectoryError(errno.ENOTDIR, why, str(blocker))


def write_text_atomic(target: str | Path, text: str) -> None:
    with atomic_path(target) as tmp:
        tmp.write_text(text, encoding="utf-8")
