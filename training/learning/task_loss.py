"""The loss of one supervised step on task batches (QQP pre-training and multi-task training): each
task's loss (its ``Task`` row) against the gold labels, plus the extensions' ``regularizers`` (e.g. SMART),
combined by a loss weighting when a step holds one batch of every task (the joint loss).
"""
from __future__ import annotations

from typing import Callable, Iterable

import torch

from training.data.batching import to_device, weighted_by_share
from .tasks import Task, loss_of


class TaskLoss:
    """``weighting``: a ``losses.LossWeighting`` that combines the task losses of a step holding several (the joint
    loss). ``forward_model``: the model to call (its DistributedDataParallel wrapper under torchrun).
    ``average_gradients``: given only with several processes, the all-reduce (``training/harness/distributed.py``)
    of the gradients the DDP wrapper does not average (learned loss weights); then a step's tasks share one
    forward call, as DDP allows one forward per backward."""

    def __init__(self, model, tasks: dict[str, Task], device: torch.device, regularizers: tuple = (),
                 weighting: torch.nn.Module | None = None, forward_model=None,
                 average_gradients: Callable[[Iterable[torch.Tensor]], None] | None = None):
        self.model, self.device, self.weighting = model, device, weighting
        self.average_gradients = average_gradients
        self.tasks = tasks                        # the run's Task rows by name
        self.regularizers = tuple(regularizers)   # each adds its term to every task loss, in this order
        # the regularizers' extra passes use the model itself (their gradients join the same backward)
        self.forward_model = forward_model if forward_model is not None else model

    def __call__(self, batches: list[tuple[str, dict]]) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """The (weighted) sum of the losses of ``batches``, ``(task, batch)`` pairs, and each task's loss
        (the sum of its batches' losses, when a group holds a task twice)."""
        if self.average_gradients is not None and len(batches) > 1:   # DDP: one forward per backward
            names = tuple(name for name, _ in batches)
            inputs = tuple(self.inputs(batch) for _, batch in batches)
            outputs = self.forward_model(names, inputs)
            parts = [(name, self.task_loss(name, batch, output, task_inputs))
                     for (name, batch), output, task_inputs in zip(batches, outputs, inputs)]
        else:
            parts = [(name, self.task_loss(name, batch)) for name, batch in batches]
        losses: dict[str, torch.Tensor] = {}
        for name, loss in parts:
            losses[name] = losses[name] + loss if name in losses else loss
        if self.weighting is not None and len(losses) > 1:
            return self.weighting(losses), losses
        return sum(losses.values()), losses

    def task_loss(self, name: str, batch: dict, output: torch.Tensor | None = None,
                  inputs: list[dict] | None = None) -> torch.Tensor:
        """The task's loss on one batch, plus the regularizers' terms. ``output`` and ``inputs``: the
        model's output on the batch and the batch on the device, when already computed."""
        inputs = self.inputs(batch) if inputs is None else inputs
        output = self.forward_model(name, inputs) if output is None else output
        loss = loss_of(self.model, self.tasks[name])(output, batch["labels"].to(self.device))
        for regularizer in self.regularizers:
            loss = regularizer.add(loss, name, inputs, output)
        return weighted_by_share(loss, batch)   # several processes: this slice's share of the global batch

    def inputs(self, batch: dict) -> list[dict]:
        return [to_device(encoding, self.device) for encoding in batch["inputs"]]

    def after_backward(self) -> None:
        """Learned loss weights are no part of the DDP model: average their gradients by hand."""
        if self.weighting is not None and self.average_gradients is not None:
            self.average_gradients(self.weighting.parameters())

    def after_step(self) -> None:
        for hook in self.regularizers:
            if hasattr(hook, "after_step"):
                hook.after_step()
