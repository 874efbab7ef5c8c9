"""Supervised SimCSE (Gao et al. 2021, §4): a stage before multi-task training on (anchor, positive,
hard negative) triples; every in-batch positive and hard negative is a candidate, the anchor's own
hard negative weighted α (``losses.info_nce``). The triples come from ``--scl_data`` (the SimCSE NLI
layout) or are built from the QQP duplicates and the STS pairs scored ≥ 4.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from training.data.contrastive import read_triples, triples_from_pairs
from training.data.readers import DataError

from ..learning.contrastive import ContrastiveStage, budget_checks, train_contrastive
from ..configuration.flags import flag, optional_int
from ..learning.losses import info_nce
from .base import Extension


@dataclass(frozen=True)
class SclConfig:
    scl: bool = flag(False, "supervised SimCSE stage (positives and hard negatives)")
    scl_data: str | None = flag(None, "CSV of sent0,sent1,hard_neg triples (default: built from QQP and STS "
                                      "training pairs)", type=str, path=True)
    scl_epochs: int = flag(1, "supervised SimCSE epochs")
    scl_steps: int | None = flag(None, "cap on supervised SimCSE batches per epoch", type=optional_int)
    scl_batch_size: int = flag(16, "supervised SimCSE batch size")
    scl_lr: float = flag(3e-5, "supervised SimCSE learning rate")
    hard_negative_weight: float = flag(1.0, "alpha: weight of each anchor's own hard negative")


class SupervisedSimCSE(Extension):
    name, settings, column, short = "scl", SclConfig, "S-CL", "scl"
    budget, steps_flag, stages_alone = {"--scl_epochs": "1", "--scl_steps": "20"}, "--scl_steps", True

    def checks(self, c, core) -> list[tuple[bool, str]]:
        return [*budget_checks("scl", c.scl_epochs, c.scl_batch_size, c.scl_lr),
                (c.hard_negative_weight > 0, "--hard_negative_weight must be positive"),
                (not c.scl or c.scl_data or {"qqp", "sts"} <= set(core.task_names()),
                 "--scl builds its triples from QQP and STS pairs: add qqp and sts to --tasks, or give "
                 "--scl_data")]

    def check_files(self, c, core) -> None:
        if c.scl and c.scl_data and not Path(c.scl_data).is_file():
            raise DataError(f"--scl_data {c.scl_data}: no such file")

    def batch_sizes(self, c, core):
        return [("--scl_batch_size", c.scl_batch_size)]

    def reads(self, c, core) -> set[str]:
        return set() if c.scl_data else {"qqp", "sts"}

    def stage(self, run) -> dict:
        c = run.config.scl
        if c.scl_data:
            triples, report = read_triples(c.scl_data, run.config.data.strict)
            source = f"--scl_data {c.scl_data}"
            if report.bad_rows:
                run.log.result(f"warning: {report.summary()}")
        else:
            triples = triples_from_pairs(run.splits["qqp"]["train"], run.splits["sts"]["train"],
                                         seed=run.config.train.seed)
            source = "QQP duplicates and STS pairs scored >= 4"
        run.log(f"scl: {len(triples)} triples from {source}")

        def loss_fn(inputs, batch):
            anchors, positives, negatives = run.forward_model(None, inputs)
            return info_nce(anchors, positives, run.config.train.cl_temp, negatives, c.hard_negative_weight)

        return train_contrastive(run, ContrastiveStage("scl", triples, source, "triple", loss_fn, c.scl_epochs,
                                                       c.scl_steps, c.scl_batch_size, c.scl_lr))


EXTENSION = SupervisedSimCSE()
