"""A run folder knows it is live: the process that trains it holds an exclusive ``flock`` on ``RUN/.lock``,
which the kernel releases on any exit (SIGKILL included), so a lock is never stale. ``--resume RUN`` takes it
before touching anything in RUN: a run still training is refused in one line instead of being trained twice.
Under torchrun process 0 holds it for all. Without ``fcntl`` (Windows), nothing is locked.
"""
from __future__ import annotations

import os
from pathlib import Path

from .resume import ResumeError

try:
    import fcntl
except ImportError:   # not POSIX
    fcntl = None

LOCK = ".lock"


class RunLive(ResumeError):
    """The run folder is held by a process that is training it now (one line, as every resume error)."""


class RunLock:
    def __init__(self, run_dir: Path):
        self.path, self.fd = Path(run_dir) / LOCK, None

    def acquire(self) -> "RunLock":
        """Hold the lock, writing this process's id into it; ``RunLive`` naming the holder when it is taken."""
        if fcntl is None or int(os.environ.get("RANK", "0")) != 0:
            return self
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o666)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 32).decode(errors="replace").strip() or "?"
            os.close(fd)
            raise RunLive(f"{self.path.parent} is being trained now (process {holder} holds {self.path}): wait for "
                          "it to end, or stop it, then --resume") from None
        os.ftruncate(fd, 0)
        os.write(fd, str(os.getpid()).encode())
        self.fd = fd
        return self

    def release(self) -> None:
        """Remove the lock file and let go; a finished or stopped run folder holds no ``.lock``."""
        if self.fd is None:
            return
        try:
            self.path.unlink(missing_ok=True)
        finally:
            os.close(self.fd)   # closing the last descriptor releases the flock
            self.fd = None


def is_live(run_dir: Path) -> bool:
    """Does a process hold the run folder's lock now? Read-only (nothing created, nothing written): a lock
    file left by a killed process is not held, the kernel released it. Without ``fcntl``, never."""
    if fcntl is None:
        return False
    try:
        fd = os.open(Path(run_dir) / LOCK, os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)   # taken: nobody held it (closing fd lets go)
        return False
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
