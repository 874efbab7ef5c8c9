"""A validation split held out of a training file (``--val_fraction``): what a hyperparameter search
scores its trials on, so that the dev files, on which the winner is compared with the default, are
never seen while choosing (minbert-search). The split is fixed: the same examples for every seed, run
and trial (a seed of its own, not ``--seed``), so trials differ only in their flags.
"""
from __future__ import annotations

import numpy as np

from .readers import Example

HOLDOUT_SEED = 20261127   # fixed forever: changing it changes every search's validation split


def hold_out(examples: list[Example], fraction: float,
             flag: str = "--val_fraction") -> tuple[list[Example], list[Example]]:
    """(training, validation): ``fraction`` of ``examples`` (rounded, at least one, at most all but one)
    drawn at random with ``HOLDOUT_SEED``, each part in file order. ``flag``: what an error names."""
    if not 0 < fraction < 1:
        raise ValueError(f"{flag} must be in (0, 1), got {fraction}")
    if len(examples) < 2:
        raise ValueError(f"{flag} needs at least 2 training examples a task, got {len(examples)}")
    size = min(max(1, round(len(examples) * fraction)), len(examples) - 1)
    held = np.zeros(len(examples), dtype=bool)
    held[np.random.default_rng(HOLDOUT_SEED).permutation(len(examples))[:size]] = True
    return ([e for e, h in zip(examples, held) if not h], [e for e, h in zip(examples, held) if h])
