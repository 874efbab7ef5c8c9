"""PCGrad (Yu et al. 2020, "Gradient Surgery for Multi-Task Learning", §2.2 and Algorithm 1): each multi-task step takes
one batch of every task; where two tasks' gradients on the shared encoder conflict (negative dot product), a task's
gradient is projected onto the normal plane of the other's, g_i ← g_i − (g_i·g_j)/‖g_j‖² g_j, over the other tasks in
random order; the projected gradients are summed. A task's private layers and head keep their own gradient.
``ProjectConflicting`` is the loop's gradient hook (``Extension.gradient_surgery``, ``base.GradientSurgery``): the loop
hands it each task's loss of a step instead of backpropagating their sum.
"""
from __future__ import annotations

import random
from dataclasses import dataclass
import torch

from ..configuration.flags import flag
from .base import Extension, GradientSurgery


@dataclass(frozen=True)
class PcgradConfig:
    pcgrad: bool = flag(False, "PCGrad: one batch of every task per step; a task's gradient on the shared encoder is "
                               "projected off each other task's it conflicts with (random order), then summed")


class Pcgrad(Extension):
    name, settings, column, short = "pcgrad", PcgradConfig, "PCGrad", "pcgrad"
    joint, one_process = True, True   # the step is a round of every task; each task's backward is its own
    conflicts = {"joint_loss": "how the tasks' losses of a step combine"}
    variants = (("mean-pcgrad-private2", ["--pcgrad", "--private_layers", "2"]),)   # over the default towers

    def checks(self, c, core) -> list[tuple[bool, str]]:
        on = self.enabled(c)
        return [(not on or len(core.task_names()) > 1,
                 "--pcgrad projects the tasks' gradients against each other: give two or more --tasks"),
                (not on or core.train.rr != "proportional",
                 "--pcgrad steps on one batch of every task at once; --rr proportional has no such rounds: choose "
                 "--rr min or exhaust"),
                (not on or core.model.option == "finetune",
                 "--pcgrad acts on the shared encoder, which --option pretrain freezes: drop one of them")]

    def gradient_surgery(self, c, core, model) -> "ProjectConflicting":
        return ProjectConflicting([p for _, p in model.encoder_parameters() if p.requires_grad], core.train.seed)


class ProjectConflicting(GradientSurgery):
    """Algorithm 1 on the parameters that two or more tasks' losses reach in the step (the shared
    encoder; a private tower or the top layers only one task uses pass through): their gradients are
    one vector per task, g_i. The order of the other tasks is drawn from ``--seed`` and the step."""

    def __init__(self, params: list[torch.Tensor], seed: int):
        self.params, self.seed = params, seed

    def combine(self, grads: dict[str, list[torch.Tensor | None]], step: int) -> list[torch.Tensor | None]:
        tasks = list(grads)
        grads = {task: [_coalesced(g) for g in grads[task]] for task in tasks}
        reached = [[grads[task][i] for task in tasks if grads[task][i] is not None] for i in range(len(self.params))]
        shared = [i for i, given in enumerate(reached) if len(given) > 1]
        combined = [given[0] if len(given) == 1 else None for given in reached]
        if not shared:
            return combined
        vectors = {task: [grads[task][i] for i in shared] for task in tasks}   # g_i on the shared parameters
        norms = {task: _dot(vectors[task], vectors[task]) for task in tasks}
        draw = random.Random(f"pcgrad {self.seed} {step}")
        total = None
        for task in tasks:
            projected = vectors[task]
            others = [other for other in tasks if other != task]
            draw.shuffle(others)
            for other in others:
                dot = _dot(projected, vectors[other])
                if dot < 0 and norms[other] > 0:
                    projected = _add(projected, vectors[other], -dot / norms[other])
            total = projected if total is None else _add(total, projected, 1.0)
        for i, grad in zip(shared, total):
            combined[i] = _coalesced(grad)
        return combined


def _dot(a: list, b: list) -> float:
    """The dot product of two gradients given as lists of tensors (None: zero; sparse rows allowed)."""
    return sum(float((x * y).sum()) for x, y in zip(a, b) if x is not None and y is not None)


def _add(a: list, b: list, scale: float) -> list:
    """a + scale·b, tensor by tensor (None: zero)."""
    return [x if y is None else scale * y if x is None else x + scale * y for x, y in zip(a, b)]


def _coalesced(grad: torch.Tensor | None) -> torch.Tensor | None:
    return grad.coalesce() if grad is not None and grad.is_sparse else grad


EXTENSION = Pcgrad()
