"""One supervised training step on task batches, shared by QQP pre-training and multi-task training.

``TaskStep`` owns what a step needs beyond the model: the optimizer, the SMART regulariser and
its Bregman proximal term (Jiang et al. 2020), and the joint-loss weighting. Round-robin training
calls ``step({task: batch})`` with one task; the joint loss calls it with one batch of every task.
"""
from __future__ import annotations

import torch

from .config import SmartConfig
from .distributed import Distributed, average_gradients
from .precision import Precision
from .evaluate import to_device
from .losses import LossWeighting
from .smart import BregmanProximal, smart_loss
from .tasks import TASKS


class TaskStep:
    def __init__(self, model, optimizer, device: torch.device, smart: SmartConfig,
                 weighting: LossWeighting | None = None, forward_model=None, place: Distributed = Distributed(),
                 precision: Precision | None = None):
        self.model, self.optimizer, self.device, self.smart = model, optimizer, device, smart
        self.weighting = weighting
        # the clean forward goes through the DistributedDataParallel wrapper when there is one;
        # SMART's extra passes use the model itself (their gradients join the same backward)
        self.forward_model = forward_model if forward_model is not None else model
        self.place = place
        self.precision = precision or Precision("off", device)
        self.bregman = (BregmanProximal(model, mu=smart.smart_mu, beta=smart.smart_beta)
                        if smart.smart and smart.smart_bregman else None)

    def task_loss(self, name: str, batch: dict, output: torch.Tensor | None = None,
                  inputs: list[dict] | None = None) -> torch.Tensor:
        """The task's loss on one batch, plus the SMART terms when ``--smart`` is on. ``output`` and
        ``inputs``: the model's output on the batch and the batch on the device, when already computed."""
        task = TASKS[name]
        if inputs is None:
            inputs = self.inputs(batch)
        if output is None:
            output = self.forward_model(name, inputs)
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

    def step(self, batches: dict[str, dict]) -> dict[str, float]:
        """One optimizer step on the (weighted) sum of the given task batches' losses."""
        with self.precision.autocast():
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
                total = self.weighting(losses)
            else:
                total = sum(losses.values())
        if total.requires_grad:  # a frozen encoder under a parameter-free head has nothing to learn
            self.optimizer.zero_grad(set_to_none=True)
            self.precision.backward(total)
            if self.weighting is not None:
                average_gradients(self.weighting.parameters(), self.place)
            self.precision.step(self.optimizer)
            if self.bregman is not None:
                self.bregman.update(self.model)
        return {name: loss.item() for name, loss in losses.items()}
