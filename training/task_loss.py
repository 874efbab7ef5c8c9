"""The loss of one supervised step on task batches, shared by QQP pre-training and multi-task
training: each task's loss (from its ``Task`` row), plus the SMART regulariser and its Bregman
proximal term (Jiang et al. 2020), combined by the joint-loss weighting. Round-robin training
passes one task's batch; the joint loss passes one batch of every task. The optimizer step itself
is the training loop's (``training/loop.py``).
"""
from __future__ import annotations

import torch

from .config import SmartConfig
from .device import to_device
from .distributed import Distributed, average_gradients
from .losses import LossWeighting
from .smart import BregmanProximal, smart_loss
from .tasks import TASKS


class TaskLoss:
    def __init__(self, model, device: torch.device, smart: SmartConfig, weighting: LossWeighting | None = None,
                 forward_model=None, place: Distributed = Distributed()):
        self.model, self.device, self.smart, self.weighting, self.place = model, device, smart, weighting, place
        # the clean forward goes through the DistributedDataParallel wrapper when there is one;
        # SMART's extra passes use the model itself (their gradients join the same backward)
        self.forward_model = forward_model if forward_model is not None else model
        self.bregman = (BregmanProximal(model, mu=smart.smart_mu, beta=smart.smart_beta)
                        if smart.smart and smart.smart_bregman else None)

    def __call__(self, batches: dict[str, dict]) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """The (weighted) sum of the given task batches' losses, and each task's loss."""
        if self.place.enabled and len(batches) > 1:
            # DistributedDataParallel allows one forward per backward: all tasks in one call
            names = tuple(batches)
            inputs = tuple(self.inputs(batches[name]) for name in names)
            outputs = self.forward_model(names, inputs)
            losses = {name: self.task_loss(name, batches[name], output, task_inputs)
                      for name, output, task_inputs in zip(names, outputs, inputs)}
        else:
            losses = {name: self.task_loss(name, batch) for name, batch in batches.items()}
        if self.weighting is not None and len(losses) > 1:
            return self.weighting(losses), losses
        return sum(losses.values()), losses

    def task_loss(self, name: str, batch: dict, output: torch.Tensor | None = None,
                  inputs: list[dict] | None = None) -> torch.Tensor:
        """The task's loss on one batch, plus the SMART terms when ``--smart`` is on. ``output`` and
        ``inputs``: the model's output on the batch and the batch on the device, when already computed."""
        task = TASKS[name]
        inputs = self.inputs(batch) if inputs is None else inputs
        output = self.forward_model(name, inputs) if output is None else output
        loss = task.loss(output, batch["labels"].to(self.device))
        if self.smart.smart:
            loss = loss + smart_loss(self.model, name, inputs, output, task.divergence,
                                     weight=self.smart.smart_weight, eps=self.smart.smart_eps,
                                     step=self.smart.smart_step, steps=self.smart.smart_steps,
                                     eps_norm=self.smart.smart_eps_norm)
            if self.bregman is not None:
                loss = loss + self.bregman.penalty(output, name, inputs, task.divergence)
        return loss

    def inputs(self, batch: dict) -> list[dict]:
        return [to_device(encoding, self.device) for encoding in batch["inputs"]]

    def after_backward(self) -> None:
        """Learned loss weights are no part of the DDP model: average their gradients by hand."""
        if self.weighting is not None:
            average_gradients(self.weighting.parameters(), self.place)

    def after_step(self) -> None:
        if self.bregman is not None:
            self.bregman.update(self.model)
