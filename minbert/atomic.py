"""Atomic file writes: a file is either its old complete version or its new complete version.

Write to a temporary file in the same folder, flush it to disk, then rename it over the target
(``os.replace`` is atomic on POSIX), so a crash never leaves a truncated checkpoint or CSV behind.
Ctrl-C and SIGTERM wait only while the temporary file is made and while it is renamed or removed
(``signals_deferred``): the body of the ``with`` block, which may compute for a minute (``embed``,
``quantize``), stops at once, and its temporary file is removed on the way out. Only SIGKILL leaves a
temporary file behind; its name carries the writer's process id, and the next write of the same
target removes those whose process is gone (``--resume`` removes a run folder's too).
"""
from __future__ import annotations

import errno
import glob
import os
import re
import shutil
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
    """Yield a temporary path to write; on success it replaces ``target``, on error (Ctrl-C included) it is
    removed. Signals wait only around making, renaming and removing it, never for the body."""
    target = Path(target)
    tmp = None
    try:
        with signals_deferred():  # a signal between mkstemp and ``tmp = ...`` would leave the file unnamed
            if target.is_dir():
                raise IsADirectoryError(errno.EISDIR, "is a folder, a file name is expected here", str(target))
            make_folder(target.parent)
            remove_stale_temporaries(target)
            fd, name = tempfile.mkstemp(prefix=f".{target.name}.{os.getpid()}-", suffix=".tmp", dir=target.parent)
            tmp = Path(name)
            os.close(fd)
        try:
            yield tmp
        except Exception as err:
            if disk_full(err):   # each writer says it its own way; one line naming the file instead
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(target)) from None
            raise
        # mkstemp makes 0600, and a body may replace the file (safetensors' save_file does): set the mode last
        os.chmod(tmp, usual_mode())
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        with signals_deferred():
            os.replace(tmp, target)
    finally:
        if tmp is not None:
            with signals_deferred():
                tmp.unlink(missing_ok=True)


@contextmanager
def output_set(folder: str | Path) -> Iterator[Path]:
    """A command's files as one set (``predict``'s CSVs and its metrics.json): yield a staging folder beside
    ``folder`` to write them into. When the block ends they move in together: the staging folder renamed into place
    where ``folder`` does not exist yet (one atomic rename), else each file renamed in, in the order written, with
    Ctrl-C and SIGTERM held for those milliseconds. A stop or an error at any moment before leaves ``folder`` as it
    was and removes the staging folder; one a SIGKILLed command left is removed by the next (``remove_stale_temporaries``)."""
    folder = Path(folder)
    check_folder(folder)   # it and its parents (an --out under a file): named in the error
    folder.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_temporaries(folder)
    staging = None
    try:
        with signals_deferred():   # named before anything can stop it, so that the finally removes it
            try:
                staging = Path(tempfile.mkdtemp(prefix=f".{folder.name}.{os.getpid()}-", suffix=".tmp",
                                                dir=folder.parent))
            except OSError as err:   # a read-only or full disk: named by the folder asked for, not our staging name
                raise OSError(err.errno, err.strerror, str(folder)) from None
        yield staging
        with signals_deferred():
            if not folder.exists():
                mode = usual_mode()
                os.chmod(staging, mode | (mode & 0o444) >> 2)   # mkdtemp's 0700 as mkdir makes it: x where r
                os.rename(staging, folder)
                staging = None
                return
            for path in sorted(staging.iterdir(), key=lambda p: (p.stat().st_mtime_ns, p.name)):
                os.replace(path, folder / path.name)
    finally:
        if staging is not None:
            with signals_deferred():
                shutil.rmtree(staging, ignore_errors=True)


# how writers report a full disk: errno, safetensors' Rust error, torch's zip writer, numpy's file writer
DISK_FULL_WORDS = ("no space left", "os error 28", "not enough free space", "unexpected pos", "file size limit")


def disk_full(err: BaseException) -> bool:
    """Whether ``err``, raised while writing a file, means the disk (or quota) is full."""
    if isinstance(err, OSError) and err.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
        return True
    return any(words in str(err).lower() for words in DISK_FULL_WORDS)


def usual_mode() -> int:
    """The mode a plain ``open(path, "w")`` gives a new file: 0o666 less the umask (0o644 under umask 022)."""
    try:  # Linux says it without changing it: another thread creating a file meanwhile would get umask 0
        with open("/proc/self/status", encoding="ascii") as f:
            umask = next(int(line.split()[1], 8) for line in f if line.startswith("Umask:"))
    except (OSError, StopIteration, ValueError, IndexError):
        umask = os.umask(0)  # elsewhere, reading the umask means setting it; put it straight back
        os.umask(umask)
    return 0o666 & ~umask


def remove_stale_temporaries(target: Path) -> list[Path]:
    """Remove (and return) the temporary files of ``target`` whose writer is gone (and the staging folders of
    ``output_set``, named alike): a SIGKILLed writer (``quantize``'s is 66 MB) cannot remove its own, and nothing
    else would. A name without a process id (written before ids were in the names) counts as gone; a live writer's
    file, ours included, is kept."""
    pattern = re.compile(rf"\.{re.escape(target.name)}\.(?:(\d+)-)?[a-z0-9_]{{8}}\.tmp")
    stale = []
    for path in target.parent.glob(f".{glob.escape(target.name)}.*.tmp"):
        match = pattern.fullmatch(path.name)
        if match and not (match[1] and _running(int(match[1]))):
            try:
                shutil.rmtree(path) if path.is_dir() and not path.is_symlink() else path.unlink()
            except OSError:  # removed meanwhile, or not ours to remove: the write goes on all the same
                continue
            stale.append(path)
    return stale


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)  # signal 0: only asks whether the process exists
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's live process
        return True
    return True


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
