"""Benchmarks (scripts, not tests): ``python -m bench.throughput --help``."""
from __future__ import annotations

import sys


def glued_sides(argv: list[str] | None) -> list[str]:
    """``--side FLAGS`` as ``--side=FLAGS``: argparse takes a value that starts with ``--`` and has no
    space, such as ``--smart``, for an option of its own and refuses the ``--side`` before it."""
    argv, glued = list(sys.argv[1:] if argv is None else argv), []
    while argv:
        arg = argv.pop(0)
        glued.append(f"--side={argv.pop(0)}" if arg == "--side" and argv else arg)
    return glued
