"""One-line error messages: every user-facing error in the project is a single line."""
from __future__ import annotations


def first_line(err: BaseException) -> str:
    """``err``'s first message line (else its type name), to embed a library's multi-line error in ours."""
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__


def describe(err: BaseException) -> str:
    """One line for ``err``: an OS error as "<path>: <reason>" (no errno, no quotes), else its first line."""
    if isinstance(err, OSError) and err.strerror:
        paths = [str(p) for p in (err.filename, err.filename2) if p is not None]
        return f"{' -> '.join(paths)}: {err.strerror}" if paths else err.strerror
    return first_line(err)
