"""Per-task gradients of one optimizer step, for an extension's ``GradientSurgery`` (e.g. PCGrad,
``training/extensions/pcgrad.py``): each task's loss is backpropagated on its own and its gradient on
the surgery's parameters set aside; when the step's batches are done, the surgery's combination of
the tasks' gradients is what clipping and the optimizer see. Other parameters (a task's head or
private layers) add up their tasks' gradients as usual.
"""
from __future__ import annotations

from typing import Callable

import torch


class GradientSurgery:
    """The per-task gradient hook an extension gives (``Extension.gradient_surgery``): each task's loss of a step is
    backpropagated alone, and ``combine`` turns the tasks' gradients into the one the optimizer applies
    (before clipping). ``params``: the parameters it acts on; the others (a task's head, its private
    layers) keep the plain sum of gradients."""
    params: list[torch.Tensor]

    def combine(self, grads: dict[str, list[torch.Tensor | None]], step: int) -> list[torch.Tensor | None]:
        """Task -> its gradient of each of ``params`` (None where the task does not reach it) -> the
        gradient to apply to each; ``step`` is the run's optimizer step, from 1 (a seed for any randomness,
        so a resumed run draws the same)."""
        raise NotImplementedError


class TaskGradients:
    """One step's per-task gradients on ``surgery.params``: ``backward`` for each batch of the step,
    then ``apply`` once."""

    def __init__(self, surgery: GradientSurgery):
        self.surgery = surgery
        self.grads: dict[str, list[torch.Tensor | None]] = {}

    def backward(self, losses: dict[str, torch.Tensor], backward: Callable[[torch.Tensor], None], batches: int) -> None:
        """Backpropagate each task's loss alone (divided by ``batches``, the step's accumulation batches,
        as the loop does) and move its gradient on the surgery's parameters aside, added to what the
        step's earlier batches gave that task. Tasks' graphs share parameters, not activations, so no
        graph is kept for the next task."""
        params = self.surgery.params
        for task, loss in losses.items():
            if not loss.requires_grad:
                continue
            backward(loss / batches if batches > 1 else loss)
            kept = self.grads.setdefault(task, [None] * len(params))
            for i, p in enumerate(params):
                if p.grad is not None:
                    kept[i] = p.grad if kept[i] is None else kept[i] + p.grad
                    p.grad = None

    def apply(self, step: int) -> None:
        """Put the surgery's combination of the tasks' gradients in ``.grad`` (``step``: the run's optimizer step)."""
        combined = self.surgery.combine(self.grads, step) if self.grads else [None] * len(self.surgery.params)
        for p, grad in zip(self.surgery.params, combined):
            p.grad = grad
        self.grads = {}
