"""SMART (Jiang et al. 2020): the smoothness-inducing adversarial regulariser (§3.1) added to every
task loss, and optionally the momentum Bregman proximal term (§3.2). The maths is in
``training/learning/smart.py``; this module is the extension: its flags, checks and the term the task loss adds.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..configuration.flags import flag
from ..learning.smart import Ascent, BregmanProximal, smart_loss
from ..learning.task_schema import run_tasks
from .base import Extension


@dataclass(frozen=True)
class SmartConfig:
    smart: bool = flag(False, "add the SMART adversarial regulariser to every task loss")
    smart_weight: float = flag(0.5, "weight of the regulariser")
    smart_eps: float = flag(1e-5, "std of the initial Gaussian noise on the embeddings")
    smart_step: float = flag(1e-3, "ascent step size on the noise")
    smart_steps: int = flag(1, "ascent steps")
    smart_eps_norm: float = flag(1e-6, "epsilon of the gradient normalisation")
    smart_bregman: bool = flag(False, "add the momentum Bregman proximal point term")
    smart_mu: float = flag(1.0, "weight of the Bregman term")
    smart_beta: float = flag(0.99, "momentum of the Bregman EMA model")


class Smart(Extension):
    name, settings, column, short, costly = "smart", SmartConfig, "SMART", "smart", True
    variants = (("mean-smart-bregman", ["--smart", "--smart_bregman"]),)

    def checks(self, c, core) -> list[tuple[bool, str]]:
        return [(c.smart_weight >= 0 and c.smart_eps >= 0 and c.smart_step >= 0,
                 "--smart_weight, --smart_eps and --smart_step must not be negative"),
                (c.smart_steps >= 0, "--smart_steps must not be negative"),
                (0 <= c.smart_beta < 1, "--smart_beta must be in [0, 1)")]

    def regularizer(self, c, core, model) -> "SmartRegularizer":
        return SmartRegularizer(model, c, run_tasks(core))


class SmartRegularizer:
    """Adds λ_s·R_s (and μ·D_Breg with ``--smart_bregman``) to a task's loss on one batch. The extra
    forward passes use the model itself: their gradients join the clean pass's backward."""

    def __init__(self, model, settings: SmartConfig, tasks: dict):
        self.model, self.settings = model, settings
        self.divergence = {name: task.divergence for name, task in tasks.items()}   # ℓ_s of each task's output
        self.ascent = Ascent(settings.smart_eps, settings.smart_step, settings.smart_steps, settings.smart_eps_norm)
        self.bregman = (BregmanProximal(model, mu=settings.smart_mu, beta=settings.smart_beta)
                        if settings.smart_bregman else None)

    def states(self) -> dict[str, object]:
        """What a checkpoint saves: the Bregman term's moving average of the weights, θ̃."""
        return {"bregman.ema": self.bregman.ema} if self.bregman is not None else {}

    def add(self, loss, task: str, inputs: list[dict], output):
        s, kind = self.settings, self.divergence[task]
        loss = loss + smart_loss(self.model, task, inputs, output, kind, s.smart_weight, self.ascent)
        if self.bregman is not None:
            loss = loss + self.bregman.penalty(output, task, inputs, kind)
        return loss

    def after_step(self) -> None:
        if self.bregman is not None:
            self.bregman.update(self.model)


EXTENSION = Smart()
