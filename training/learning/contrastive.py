"""What the contrastive stages share (unsupervised and supervised SimCSE, label-contrastive): the
encoder alone is trained, by its own AdamW, on a loss over the sentence vectors of a batch
(``training/learning/losses.py``); the other sentences of the batch are the negatives.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Callable

from training.data.readers import DataError

from training.data.batching import examples_in_whole_batch, to_device, weighted_by_share
from .objective import Objective
from .recipe import ParamSet, build_adamw
from .stages import Run


@dataclass
class ContrastiveStage:
    """One contrastive stage: its examples and loss, and its budget from the extension's flags."""
    name: str                 # the extension (log lines, checkpointed progress, the --<name>_* flags)
    examples: list            # sentences, triples or labelled examples
    source: str               # where they came from, for messages
    unit: str                 # what one example is ("sentence", "triple")
    loss_fn: Callable         # (inputs on the device, batch) -> loss
    epochs: int
    steps: int | None         # cap on batches per epoch
    batch_size: int
    lr: float
    max_length: int | None = None   # word pieces per sentence (None: --max_length)
    sts_dev: object = None          # ucl's STS dev curve (``--ucl_eval_every``), or None


def budget_checks(name: str, epochs: int, batch_size: int, lr: float) -> list[tuple[bool, str]]:
    """The checks every contrastive stage's ``--<name>_epochs``, ``_batch_size`` and ``_lr`` must pass."""
    return [(epochs >= 1, f"--{name}_epochs must be at least 1"),
            (batch_size >= 2, f"--{name}_batch_size must be at least 2 (in-batch negatives)"),
            (lr > 0, f"--{name}_lr must be positive")]


def train_contrastive(run: Run, stage: ContrastiveStage) -> dict:
    """Train the encoder on ``stage``. ``ContrastiveObjective`` leaves out a batch of one, so fewer
    than 2 examples would make a stage of no step: an error."""
    n = len(stage.examples)
    if n < 2:
        raise DataError(f"{stage.source}: only {n} {stage.unit}{'' if n == 1 else 's'}; a {stage.name} batch "
                        f"(--{stage.name}_batch_size {stage.batch_size}) needs at least 2, for in-batch negatives")
    optimizer = build_adamw(run.config.train, run.config.speed, [ParamSet(run.model.bert.named_parameters())], stage.lr)
    if optimizer is None:
        run.log(f"{stage.name}: the encoder is frozen (--option pretrain); skipping this stage")
        return {"skipped": "encoder frozen"}
    loader = run.loader(stage.examples, stage.batch_size, True, run.config.train.seed + 200,
                        max_length=stage.max_length)
    return run.loop.train(ContrastiveObjective(run, stage, loader, optimizer))


class ContrastiveObjective(Objective):
    """A contrastive stage for the training loop. A batch of one sentence has no in-batch negative and is left out
    (under several processes, a global batch of one: every process leaves it out alike, else DDP would wait). With
    ``stage.sts_dev`` the stage is scored on STS dev as it trains and ends with its best step's encoder."""

    def __init__(self, run: Run, stage: ContrastiveStage, loader, optimizer):
        self.run, self.name, self.log_prefix, self.epochs = run, stage.name, f"{stage.name} ", stage.epochs
        self.loader, self.loss_fn, self.sts_dev, self.optimizer = loader, stage.loss_fn, stage.sts_dev, optimizer
        self.per_epoch = len(loader) if stage.steps is None else min(len(loader), stage.steps)

    def batches(self, epoch: int):
        # Starting an iterator draws the loader's worker seed from its generator. Earlier versions
        # started one more per epoch (a progress bar wrapped the loader itself); drawing it here too
        # keeps runs bit-identical to theirs.
        iter(self.loader)
        return (batch for batch in itertools.islice(self.loader, self.per_epoch) if examples_in_whole_batch(batch) >= 2)

    def steps(self) -> int:
        return self.per_epoch

    def loss(self, batch):
        loss = self.loss_fn([to_device(encoding, self.run.device) for encoding in batch["inputs"]], batch)
        loss = weighted_by_share(loss, batch)   # several processes: this slice's share of the global batch
        return loss, {self.name: loss}

    def states(self) -> dict[str, object]:
        curve = self.sts_dev.states() if self.sts_dev is not None else {}
        return {"optimizer": self.optimizer, **{f"sts_dev.{name}": state for name, state in curve.items()}}

    def start(self, progress: dict) -> None:
        if self.sts_dev is not None:
            self.sts_dev.start(progress.setdefault("sts_dev", {}))

    def after_step(self) -> None:
        if self.sts_dev is not None:
            self.sts_dev.step_done()

    def end_epoch(self, record: dict, progress: dict) -> str:
        return "" if self.sts_dev is None else self.sts_dev.end_epoch(last=record["epoch"] == self.epochs)

    def result(self, progress: dict) -> dict:
        result = super().result(progress)
        if self.sts_dev is not None:
            result["sts_dev"] = self.sts_dev.end_with_best()
        return result
