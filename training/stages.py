"""The stages of a run and the one table of extensions.

A run is a sequence of stages, each an *objective* trained by the one loop (``training/loop.py``):
unsupervised SimCSE → supervised SimCSE → label-contrastive → QQP pre-training → multi-task
training, the first four switched on by their flags. ``EXTENSIONS`` is the only list of the
extensions: the stage order, the report's columns and the ablation grid's rows all come from it.
``Run`` is everything a stage needs, built once by ``training/trainer.py``.
"""
from __future__ import annotations

import itertools
import time
from dataclasses import dataclass
from typing import Callable

import torch

from data.contrastive import read_sentences, read_triples, sentences_from_examples, triples_from_pairs
from data.readers import DataError, Example
from minbert import AdamW

from .config import RunConfig
from .device import to_device
from .evaluate import TaskPredictions, predict
from .losses import info_nce, label_contrastive_loss
from .loop import Objective, TrainingLoop
from .run_log import RunLog
from .schedule import RoundRobinScheduler
from .task_loss import TaskLoss
from .tasks import TASKS, format_metrics, overall_score


@dataclass
class Run:
    """One training run's parts, built once. The resume clock saves the state of everything
    reachable from here (``resume.resumable_state``), so a new stateful part needs no registering."""
    config: RunConfig
    model: torch.nn.Module                     # heads.MultitaskBert
    forward_model: torch.nn.Module             # the same, or its DistributedDataParallel wrapper
    splits: dict[str, dict[str, list[Example]]]   # task -> split -> examples, for the tasks of --tasks
    loader: Callable                           # (examples, batch_size, shuffle, seed) -> DataLoader
    device: torch.device
    log: RunLog                                # log(info), log.result(epoch lines, warnings)
    optimizer: torch.optim.Optimizer           # encoder + heads (+ learned loss weights)
    task_loss: TaskLoss
    loop: TrainingLoop
    on_epoch_end: Callable[[dict], None] = lambda record: None   # e.g. write metrics.json so far


# ---- the stages before multi-task training -------------------------------------------------------
def ucl_stage(run: Run) -> dict:
    """Unsupervised SimCSE (Gao et al. 2021, §3): each sentence encoded twice with dropout on is
    its own positive; the other sentences of the batch are negatives (``info_nce``)."""
    c = run.config.contrastive
    if c.ucl_data:
        corpus, source = read_sentences(c.ucl_data), f"--ucl_data {c.ucl_data}"
    else:
        corpus = sentences_from_examples(*(split["train"] for split in run.splits.values()))
        source = "the training sets"
    run.log(f"ucl: {len(corpus)} sentences from {source}")

    def loss_fn(inputs, batch):
        # two dropout masks; the first pass goes through the DDP wrapper (if any), which then
        # averages the gradients of the whole loss across processes
        first, second = run.forward_model(None, [inputs[0]])[0], run.model.embed(inputs[0])
        return info_nce(first, second, run.config.model.temp)

    return _contrastive(run, "ucl", corpus, c.ucl_epochs, c.ucl_steps, c.ucl_batch_size, c.ucl_lr, loss_fn,
                        source=source, unit="sentence")


def scl_stage(run: Run) -> dict:
    """Supervised SimCSE (Gao et al. 2021, §4): (anchor, positive, hard negative) triples; every
    in-batch positive and hard negative is a candidate, the anchor's own hard negative weighted α."""
    c = run.config.contrastive
    if c.scl_data:
        triples, report = read_triples(c.scl_data)
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
        return info_nce(anchors, positives, run.config.model.temp, negatives, c.hard_negative_weight)

    return _contrastive(run, "scl", triples, c.scl_epochs, c.scl_steps, c.scl_batch_size, c.scl_lr, loss_fn,
                        source=source, unit="triple")


def lcl_stage(run: Run) -> dict:
    """Label-contrastive fine-tuning of the encoder on the training sentences of the first
    single-sentence classification task (SST by default): in each batch, sentences of the same
    class are pulled together and others pushed apart (``losses.label_contrastive_loss``: KL
    between the row-normalised same-class matrix Y·Yᵀ and the softmax of the cosine similarities
    over τ; Khosla et al. 2020, Gunel et al. 2021)."""
    c = run.config.contrastive
    task = run.config.lcl_task()
    examples = run.splits[task]["train"]
    run.log(f"lcl: {len(examples)} labelled {task.upper()} sentences")

    def loss_fn(inputs, batch):
        embeddings = run.forward_model(None, inputs)[0]
        return label_contrastive_loss(embeddings, batch["labels"].to(run.device), run.config.model.temp)

    return _contrastive(run, "lcl", examples, c.lcl_epochs, c.lcl_steps, c.lcl_batch_size, c.lcl_lr, loss_fn,
                        source=f"the {task} training set ({TASKS[task].files['train']})", unit="sentence")


def pre_qqp_stage(run: Run) -> dict:
    """Train encoder + paraphrase head on QQP alone before multi-task training (the CS224N
    study's "pre-QQP": QQP is by far the largest task, so it gets a head start)."""
    t = run.config.train
    loader = run.loader(run.splits["qqp"]["train"], run.config.data.batch_size, True, t.seed + 100)
    return run.loop.train(TaskObjective(run, {"qqp": loader}, "min", t.pre_qqp_steps, t.pre_qqp_epochs, joint=False,
                                        name="pre_qqp", log_prefix="pre-QQP "))


def multitask_stage(run: Run) -> dict:
    """Round-robin (or joint-loss) training on every task of ``--tasks``; after each epoch evaluate
    on dev and keep the best epoch by the overall score."""
    t = run.config.train
    loaders = {name: run.loader(split["train"], run.config.data.batch_size, True, t.seed + i)
               for i, (name, split) in enumerate(run.splits.items())}
    return run.loop.train(MultitaskObjective(run, loaders, t.rr, t.max_steps_per_epoch, t.epochs, t.joint_loss))


# ---- the one table of extensions -----------------------------------------------------------------
@dataclass(frozen=True)
class Extension:
    flag: str                                   # the RunConfig field (and command-line flag) that switches it on
    section: str                                # the RunConfig section holding that field
    column: str                                 # its column in the results table
    short: str                                  # its part of an ablation row's name
    stage: Callable[[Run], dict] | None = None  # a stage run before multi-task training, or None
    costly: bool = False                        # left out of the grid's "all but the costly" row

    def enabled(self, config: RunConfig) -> bool:
        return bool(getattr(getattr(config, self.section), self.flag))


EXTENSIONS: tuple[Extension, ...] = (   # in stage order
    Extension("ucl", "contrastive", "U-CL", "ucl", ucl_stage),
    Extension("scl", "contrastive", "S-CL", "scl", scl_stage),
    Extension("lcl", "contrastive", "LCL", "lcl", lcl_stage),
    Extension("pre_qqp", "train", "pre-QQP", "preqqp", pre_qqp_stage),
    Extension("joint_loss", "train", "joint-loss", "joint"),
    Extension("smart", "smart", "SMART", "smart", costly=True),
)


def enabled_stages(config: RunConfig) -> list[tuple[str, Callable[[Run], dict]]]:
    """The stages before multi-task training that the flags switch on, in their fixed order."""
    return [(e.flag, e.stage) for e in EXTENSIONS if e.stage is not None and e.enabled(config)]


# ---- objectives ----------------------------------------------------------------------------------
class ContrastiveObjective(Objective):
    """A SimCSE-style stage: its own AdamW over the encoder, a loss on sentence vectors.
    A batch of one sentence has no in-batch negative and is left out."""

    def __init__(self, run: Run, name: str, loader, epochs: int, max_steps: int | None, lr: float, loss_fn,
                 encoder_params: list[torch.nn.Parameter]):
        self.run, self.name, self.log_prefix, self.epochs = run, name, f"{name} ", epochs
        self.loader, self.loss_fn = loader, loss_fn
        self.per_epoch = len(loader) if max_steps is None else min(len(loader), max_steps)
        self.optimizer = AdamW(encoder_params, lr=lr, weight_decay=run.config.train.weight_decay)

    def batches(self):
        # Starting an iterator draws the loader's worker seed from its generator. Earlier versions
        # started one more per epoch (a progress bar wrapped the loader itself); drawing it here too
        # keeps runs bit-identical to theirs.
        iter(self.loader)
        return (batch for batch in itertools.islice(self.loader, self.per_epoch) if len(batch["ids"]) >= 2)

    def steps(self) -> int:
        return self.per_epoch

    def loss(self, batch):
        loss = self.loss_fn([to_device(encoding, self.run.device) for encoding in batch["inputs"]], batch)
        return loss, {self.name: loss}


def _contrastive(run: Run, name: str, examples: list, epochs: int, max_steps: int | None, batch_size: int,
                 lr: float, loss_fn, *, source: str, unit: str) -> dict:
    """Train the encoder on ``examples`` (``unit``s read from ``source``, for the error message).

    The loader keeps a short last batch, but ``ContrastiveObjective`` leaves out a batch of one:
    fewer than 2 examples would make a stage of no step at all, so that is an error."""
    if len(examples) < 2:
        raise DataError(f"{source}: only {len(examples)} {unit}{'' if len(examples) == 1 else 's'}; a {name} "
                        f"batch (--{name}_batch_size {batch_size}) needs at least 2, for in-batch negatives")
    encoder_params = [p for p in run.model.bert.parameters() if p.requires_grad]
    if not encoder_params:
        run.log(f"{name}: the encoder is frozen (--option pretrain); skipping this stage")
        return {"skipped": "encoder frozen"}
    loader = run.loader(examples, batch_size, True, run.config.train.seed + 200)
    return run.loop.train(ContrastiveObjective(run, name, loader, epochs, max_steps, lr, loss_fn, encoder_params))


class TaskObjective(Objective):
    """Supervised training on task batches (``TaskLoss``) with the run's optimizer: one step per
    task batch in round-robin order, or with ``joint`` one step per round of every task's batch."""

    def __init__(self, run: Run, loaders: dict, rr: str, max_steps: int | None, epochs: int, joint: bool,
                 name: str = "multitask", log_prefix: str = ""):
        self.run, self.epochs, self.joint, self.name, self.log_prefix = run, epochs, joint, name, log_prefix
        self.scheduler = RoundRobinScheduler(loaders, rr, max_steps)
        self.optimizer = run.optimizer

    def batches(self):
        for batches in self.scheduler.rounds():
            if self.joint:
                yield batches
            else:
                yield from ({name: batch} for name, batch in batches.items())

    def steps(self) -> int:
        return self.scheduler.steps * (1 if self.joint else len(self.scheduler.loaders))

    def loss(self, batches):
        return self.run.task_loss(batches)

    def examples(self, batches) -> int:
        return sum(len(batch["ids"]) for batch in batches.values())

    def after_backward(self) -> None:
        self.run.task_loss.after_backward()

    def after_step(self) -> None:
        self.run.task_loss.after_step()


class MultitaskObjective(TaskObjective):
    """The multi-task stage: after each epoch, dev predictions, metrics, loss-weight update and the
    best epoch so far (its weights kept, and saved by ``run.on_epoch_end``)."""

    def start(self, progress: dict) -> None:
        progress.setdefault("best", None)
        self.best = {"score": -float("inf"), "epoch": None, "state": None, "dev": None}
        if progress["best"] is not None:  # resuming: the best epoch before the crash
            saved = progress["best"]
            self.best = {**saved, "dev": {k: TaskPredictions.from_dict(v) for k, v in saved["dev"].items()},
                         "state": self.run.loop.clock.checkpoint.best_state()}

    def end_epoch(self, record: dict, progress: dict) -> str:
        run, started = self.run, time.time()
        dev = {name: predict(run.model, TASKS[name], run.loader(split["dev"], run.config.data.batch_size, False, 0),
                             run.device, f"dev {name}", run.log.progress_bars, run.loop.precision)
               for name, split in run.splits.items()}
        metrics = {name: dev[name].score(TASKS[name]) for name in dev}
        score = overall_score(metrics)
        record.update(dev=metrics, dev_overall=score, eval_seconds=round(time.time() - started, 1))
        weighting = run.task_loss.weighting
        if weighting is not None:
            record["loss_weights"] = weighting.current_weights()
            weighting.update(metrics)
        improved = score > self.best["score"]
        if improved:
            self.best = {"score": score, "epoch": record["epoch"], "dev": dev,
                         "state": {k: v.detach().clone() for k, v in run.model.state_dict().items()}}
            progress["best"] = {"score": score, "epoch": record["epoch"],
                                "dev": {k: v.to_dict() for k, v in dev.items()}}
        run.on_epoch_end({"epochs": progress["epochs"], "best": self.best, "improved": improved,
                          "loss_curves": self.curves(progress)})
        return f" | dev {format_metrics(metrics)} overall {score:.3f}" + ("  (best so far)" if improved else "")

    def result(self, progress: dict) -> dict:
        return {"epochs": progress["epochs"], "best": self.best, "loss_curves": self.curves(progress)}

    @staticmethod
    def curves(progress: dict) -> dict:
        return {name: data["points"] for name, data in progress["curves"].items()}
