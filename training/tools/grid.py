"""The ablation grid's rows, derived from the one table of extensions (``training.stages.EXTENSIONS``):

    python -m training.tools.grid          # one row a line: "<name> <run_multitask.py flags...>"

``scripts/ablate.sh`` runs these rows: the PT (frozen encoder) and FT (fine-tuning, MEAN) baselines,
the CLS control, each extension alone on CLS and on MEAN, every pair on MEAN, the ``VARIANTS``, the
published best, all but the costly extensions on MEAN, and all on CLS and on MEAN. Pooling is always
given so the table does not depend on the default.
"""
from __future__ import annotations

import itertools
import sys

from ..stages import EXTENSIONS, Extension

# Settings of one extension other than its default, each a row of its own on MEAN pooling.
VARIANTS: tuple[tuple[str, list[str]], ...] = (
    ("mean-joint-adaptive", ["--joint_loss", "--loss_weighting", "adaptive"]),
    ("mean-joint-learned", ["--joint_loss", "--loss_weighting", "learned"]),
    ("mean-smart-bregman", ["--smart", "--smart_bregman"]),
    ("mean-rr-exhaust", ["--rr", "exhaust"]),
)
# The best combination of the CS224N default-project reports this grid follows.
PUBLISHED = ("published", ["--pre_qqp", "--joint_loss", "--smart", "--scl"])


def grid_rows() -> list[tuple[str, list[str]]]:
    """``(row name, flags)`` for every row of the grid, in order."""
    def row(pooling: str, extensions: tuple[Extension, ...], name: str | None = None):
        name = name or "-".join([pooling, *(e.short for e in extensions)])
        return name, ["--pooling", pooling, *(f"--{e.flag}" for e in extensions)]

    rows = [("pt", ["--option", "pretrain", "--pooling", "mean"]), row("mean", (), "ft"), row("cls", ())]
    rows += [row(pooling, (e,)) for pooling in ("cls", "mean") for e in EXTENSIONS]
    rows += [row("mean", pair) for pair in itertools.combinations(EXTENSIONS, 2)]
    rows += [(name, ["--pooling", "mean", *flags]) for name, flags in (*VARIANTS, PUBLISHED)]
    cheap = tuple(e for e in EXTENSIONS if not e.costly)
    costly = "-".join(e.short for e in EXTENSIONS if e.costly)
    rows += [row("mean", cheap, f"mean-all-but-{costly}"), row("cls", EXTENSIONS, "cls-all"),
             row("mean", EXTENSIONS, "mean-all")]
    return rows


def main() -> int:
    for name, flags in grid_rows():
        print(" ".join([name, *flags]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
