"""Keep freed memory in the process for reuse instead of handing it back to the system (glibc).

Every training step allocates and frees the same large buffers, which glibc serves with fresh ``mmap`` pages,
so each step pays a page fault per 4 KiB page first written (45 ms of a MiniLM step, B=32, L=48). Raising the
mmap and trim thresholds with ``mallopt(3)`` keeps those pages for the next step; the numbers computed are
unchanged. Nothing happens without ``mallopt`` (not glibc) or when the user set the ``MALLOC_*_`` variables.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys

# mallopt(3) parameters and the values used: the largest mmap threshold glibc accepts on 64-bit
# (32 MiB), and trim / top-pad sizes large enough that a step's buffers are never given back.
M_TRIM_THRESHOLD, M_TOP_PAD, M_MMAP_THRESHOLD = -1, -2, -3
SETTINGS = ((M_MMAP_THRESHOLD, 32 << 20), (M_TRIM_THRESHOLD, 1 << 30), (M_TOP_PAD, 64 << 20))
USER_VARIABLES = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_")


def keep_freed_memory() -> bool:
    """Apply ``SETTINGS`` through ``mallopt``; True if all of them took effect."""
    if not sys.platform.startswith("linux") or any(v in os.environ for v in USER_VARIABLES):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    return all(mallopt(param, value) == 1 for param, value in SETTINGS)
