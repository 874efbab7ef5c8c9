"""The ablation grid's rows and budget, derived from the registry of extensions
(``training.extensions.EXTENSIONS``):

    python -m training.tools.grid                  # one row a line: "<name> <run_multitask.py flags...>"
    python -m training.tools.grid --budget         # the budget flags of every run, one a line
    python -m training.tools.grid --stage_steps    # the flags that ablate.sh --stage_steps sets, one a line
    python -m training.tools.grid --all            # the three, each ended by a line "%%" (ablate.sh reads it)

``scripts/ablate.sh`` runs these rows (which, and why: docs/ablation.md, "The grid and its table").
Pooling and private layers are always given, so the table does not depend on the defaults.
"""
from __future__ import annotations

import itertools
import sys

from ..extensions import EXTENSIONS
from ..extensions.base import Extension
from ..tasks import DEFAULT_TASKS

# The multi-task budget of every run (the extensions add theirs): one epoch of 30 round-robin steps.
BUDGET = {"--epochs": "1", "--max_steps_per_epoch": "30"}
# Settings of the model and the round-robin scheduler other than their defaults, a row each on MEAN pooling:
# task-private top layers (docs/flags.md, "Private layers"), alone and under teacher annealing.
VARIANTS: tuple[tuple[str, list[str]], ...] = (
    ("mean-rr-exhaust", ["--rr", "exhaust"]), ("mean-rr-proportional", ["--rr", "proportional"]),
    ("mean-private2", ["--private_layers", "2"]),
    ("mean-distill-private2", ["--distill", "--private_layers", "2"]))
# The best combination of the CS224N default-project reports this grid follows.
PUBLISHED = ("published", ["--pre_qqp", "--joint_loss", "--smart", "--scl"])


def grid_rows() -> list[tuple[str, list[str]]]:
    """``(row name, flags)`` for every row of the grid, in order."""
    def row(pooling: str, extensions: tuple[Extension, ...], name: str | None = None):
        name = name or "-".join([pooling, *(e.short for e in extensions)])
        return name, ["--pooling", pooling, *(f"--{e.name}" for e in extensions)]

    rows = [("pt", ["--option", "pretrain", "--pooling", "mean"]), row("mean", (), "ft"),
            *((f"st-{task}", ["--pooling", "mean", "--tasks", task]) for task in DEFAULT_TASKS), row("cls", ())]
    rows += [row(pooling, (e,)) for pooling in ("cls", "mean") for e in EXTENSIONS]
    rows += [row("mean", pair) for pair in itertools.combinations(EXTENSIONS, 2)]
    variants = [variant for e in EXTENSIONS for variant in e.variants] + list(VARIANTS)
    rows += [(name, ["--pooling", "mean", *flags]) for name, flags in (*variants, PUBLISHED)]
    cheap = tuple(e for e in EXTENSIONS if not e.costly)
    costly = "-".join(e.short for e in EXTENSIONS if e.costly)
    rows += [row("mean", cheap, f"mean-all-but-{costly}"), row("cls", EXTENSIONS, "cls-all"),
             row("mean", EXTENSIONS, "mean-all")]
    # one shared encoder (FT, as the papers of the extensions) unless the row is about private layers
    return [(name, flags if "--private_layers" in flags else [*flags, "--private_layers", "0"]) for name, flags in rows]


def budget() -> dict[str, str]:
    """Flag -> value of every grid run's budget: the multi-task epochs, then each extension's stage."""
    return BUDGET | {flag: value for e in EXTENSIONS for flag, value in e.budget.items()}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    sections = {"": [" ".join([name, *flags]) for name, flags in grid_rows()],
                "--budget": [word for flag, value in budget().items() for word in (flag, value)],
                "--stage_steps": [e.steps_flag for e in EXTENSIONS if e.steps_flag]}
    chosen = " ".join(argv)   # one flag or none: a section's name has no space
    if chosen == "--all":   # the three, each ended by a line "%%": what ablate.sh reads in one start
        lines = [line for section in sections.values() for line in (*section, "%%")]
    elif chosen in sections:
        lines = sections[chosen]
    else:
        print("usage: python -m training.tools.grid [--budget | --stage_steps | --all]", file=sys.stderr)
        return 2
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
