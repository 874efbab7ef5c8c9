"""Annealed sampling (Stickland & Murray 2019, "BERT and PALs", §4): each multi-task batch comes from task i with
probability p_i ∝ N_i^α (N_i its training examples), α = 1 − 0.8·(e − 1)/(E − 1) in epoch e of E: the first epoch
samples in proportion to the tasks' sizes, the last nearly uniformly (α = 0.2), so the small tasks are not left behind
at the end. An epoch keeps the number of batches ``--rr`` gives it (the learning-rate schedule is laid out over them);
the draws follow ``--seed`` and the epoch. A batch-order extension (``Extension.batch_order``).
"""
from __future__ import annotations

import random
from dataclasses import dataclass

from ..configuration.flags import flag
from .base import Extension


@dataclass(frozen=True)
class AnnealSamplingConfig:
    anneal_sampling: bool = flag(False, "annealed sampling (BERT and PALs): each batch's task drawn with probability "
                                        "proportional to N_i^a, a falling from 1 to 0.2 over the epochs")


def alpha(epoch: int, epochs: int) -> float:
    """α = 1 − 0.8·(e − 1)/(E − 1) (§4); 1 when there is one epoch."""
    return 1.0 if epochs == 1 else 1.0 - 0.8 * (epoch - 1) / (epochs - 1)


def probabilities(sizes: dict[str, int], a: float) -> dict[str, float]:
    """p_i = N_i^α / Σ_j N_j^α."""
    weights = {task: n ** a for task, n in sizes.items()}
    total = sum(weights.values())
    return {task: w / total for task, w in weights.items()}


class AnnealSampling(Extension):
    name, settings, column, short = "anneal_sampling", AnnealSamplingConfig, "anneal", "anneal"
    variants = (("mean-anneal-private2", ["--anneal_sampling", "--private_layers", "2"]),   # over the default towers
                ("mean-pcgrad-anneal-private2", ["--pcgrad", "--anneal_sampling", "--private_layers", "2"]))

    def checks(self, c, core) -> list[tuple[bool, str]]:
        return [(not self.enabled(c) or len(core.task_names()) > 1,
                 "--anneal_sampling draws each batch's task among --tasks: give two or more")]

    def batch_order(self, c, core, epoch: int, sizes: dict[str, int], steps: int, history=()) -> list[str]:
        p = probabilities(sizes, alpha(epoch, core.train.epochs))
        draw = random.Random(f"anneal_sampling {core.train.seed} {epoch}")
        return draw.choices(list(p), weights=list(p.values()), k=steps)


EXTENSION = AnnealSampling()
