"""The size-aware budget of a multi-task epoch (``--task_batch_sizes auto``): each task's share of a round-robin
round follows its training-set size N_t as N_t^(1/T), the temperature-scaled mixing of T5 (Raffel et al. 2020,
§3.5.2, "temperature-scaled mixing") and of multilingual NMT (Arivazhagan et al. 2019), at a fixed number
of rounds. Why a rule and not a number: ``--task_batch_sizes 32,86,32`` (QQP's whole training set each epoch)
fits one file; the rule gives any task set, own task files included, its share.

The rounds of an epoch stay those of the smallest task at ``--batch_size`` (``--rr min``): the smallest task keeps
``--batch_size`` and every other task's batch grows to ``--batch_size`` · (N_t / N_min)^(1/T). T = 1 gives each
task its whole training set each epoch (proportional); a large T gives every task ``--batch_size`` (equal, the
plain round robin). A task's batch is rounded to the nearest whole example, but never so large that the task has
fewer batches than the smallest task (the epoch keeps its rounds).
"""
from __future__ import annotations

import math

AUTO = "auto"   # the --task_batch_sizes value that asks for the rule


def tempered_batch_sizes(sizes: dict[str, int], batch_size: int, temperature: float) -> dict[str, int]:
    """Each task's training batch (task -> examples) for training sets of ``sizes`` (task -> examples):
    ``batch_size`` · (N_t / N_min)^(1/T), rounded, capped so that every task has at least the rounds of the
    smallest, ⌈N_min / batch_size⌉."""
    if temperature <= 0:
        raise ValueError(f"--sampling_temperature must be positive, got {temperature}")
    smallest = min(sizes.values())
    rounds = math.ceil(smallest / batch_size)
    batches = {}
    for task, n in sizes.items():
        share = round(batch_size * (n / smallest) ** (1 / temperature))
        if rounds > 1:   # the largest batch still giving ``rounds`` batches: ⌈n / b⌉ ≥ rounds ⟺ b < n / (rounds − 1)
            share = min(share, math.ceil(n / (rounds - 1)) - 1)
        batches[task] = share
    return batches
