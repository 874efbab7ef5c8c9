"""The joint loss: each multi-task step takes one batch of every task and one optimizer step on the
weighted sum of their losses, instead of one step per task batch. The weights are fixed, adaptive
(from the last epoch's dev scores) or learned (uncertainty weighting): ``training/learning/losses.py``.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..configuration.flags import flag, per_task
from ..learning.losses import make_loss_weighting
from ..learning.task_schema import run_tasks
from .base import Extension


@dataclass(frozen=True)
class JointLossConfig:
    joint_loss: bool = flag(False, "one batch of every task, weighted sum of the losses, one optimizer step "
                                   "(instead of one step per task batch)")
    loss_weights: str | None = flag(None, "joint-loss weights, one per task of --tasks in its order, e.g. 1,2,1 "
                                          "(default: 1 each)", type=str)
    loss_weighting: str = flag("fixed", "joint-loss weights: fixed, adaptive (from last epoch's dev scores) or "
                                        "learned (uncertainty weighting)", choices=["fixed", "adaptive", "learned"])


def loss_weights(c: JointLossConfig, core) -> dict[str, float]:
    """``--tasks sst,qqp,sts --loss_weights 1,2,1`` as ``{"sst": 1.0, "qqp": 2.0, "sts": 1.0}``."""
    return per_task("loss_weights", c.loss_weights, core.task_names(), 1.0, float,
                    lambda v: v >= 0, "non-negative numbers")


class JointLoss(Extension):
    name, settings, column, short, joint = "joint_loss", JointLossConfig, "joint-loss", "joint", True
    variants = (("mean-joint-adaptive", ["--joint_loss", "--loss_weighting", "adaptive"]),
                ("mean-joint-learned", ["--joint_loss", "--loss_weighting", "learned"]))

    def check(self, c, core) -> None:
        loss_weights(c, core)
        if self.enabled(c) and core.train.rr == "proportional":
            raise ValueError("--joint_loss steps on one batch of every task at once; --rr proportional has no such "
                             "rounds: choose --rr min or exhaust")

    def loss_weighting(self, c, core):
        return make_loss_weighting(c.loss_weighting, core.task_names(), loss_weights(c, core), run_tasks(core))


EXTENSION = JointLoss()
