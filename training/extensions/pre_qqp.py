"""QQP pre-training (the CS224N study's "pre-QQP"): before multi-task training, the encoder and the
paraphrase head train on QQP alone. QQP is by far the largest task, so it gets a head start.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..configuration.flags import flag, optional_int
from ..learning.stages import TaskObjective
from .base import Extension


@dataclass(frozen=True)
class PreQqpConfig:
    pre_qqp: bool = flag(False, "before multi-task training, train encoder + paraphrase head on QQP alone")
    pre_qqp_epochs: int = flag(1, "QQP pre-training epochs (the CS224N study used 10)")
    pre_qqp_steps: int | None = flag(None, "QQP pre-training batches per epoch (default: all of quora-train; "
                                           "the study used 1000)", type=optional_int)


class PreQqp(Extension):
    name, settings, column, short = "pre_qqp", PreQqpConfig, "pre-QQP", "preqqp"
    budget, steps_flag = {"--pre_qqp_epochs": "1", "--pre_qqp_steps": "20"}, "--pre_qqp_steps"

    def checks(self, c, core) -> list[tuple[bool, str]]:
        return [(c.pre_qqp_epochs >= 1, "--pre_qqp_epochs must be at least 1"),
                (c.pre_qqp_steps is None or c.pre_qqp_steps >= 1, "--pre_qqp_steps must be at least 1"),
                (not (c.pre_qqp and core.train.epochs == 0),
                 "--pre_qqp trains the paraphrase head, which a run with --epochs 0 does not keep (it "
                 "keeps the encoder alone); train at least one epoch"),
                (not c.pre_qqp or "qqp" in core.task_names(),
                 "--pre_qqp trains the qqp task: add qqp to --tasks")]

    def reads(self, c, core) -> set[str]:
        return {"qqp"}

    def stage(self, run) -> dict:
        c = run.config.pre_qqp
        loader = run.loader(run.splits["qqp"]["train"], run.config.batch_sizes()["qqp"], True,
                            run.config.train.seed + 100)
        return run.loop.train(TaskObjective(run, {"qqp": loader}, "min", c.pre_qqp_steps, c.pre_qqp_epochs,
                                            joint=False, name="pre_qqp", log_prefix="pre-QQP "))


EXTENSION = PreQqp()
