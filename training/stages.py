"""The stages of a run and the one table of extensions.

A run is a sequence of stages, each an *objective* trained by the one loop (``training/loop.py``):
unsupervised SimCSE → supervised SimCSE → label-contrastive → QQP pre-training → multi-task
training, the first four switched on by their flags. ``EXTENSIONS`` is the only list of the
extensions: the stage order, the report's columns and the ablation grid's rows all come from it.
``Run`` is everything a stage needs, built once by ``training/trainer.py``. With ``--epochs 0`` a run
is its stages alone (``splits_needed`` says which files that reads).
"""
from __future__ import annotations

import itertools
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch

from data.contrastive import read_sentences, read_triples, sentences_from_examples, triples_from_pairs
from data.readers import DataError, Example
from data.senteval import PairDataset, load_dataset
from minbert import AdamW, BertTokenizer

from .config import RunConfig
from .device import to_device
from .evaluate import TaskPredictions, predict
from .losses import info_nce, label_contrastive_loss
from .loop import Objective, TrainingLoop
from .resume import rng_state, set_rng_state
from .run_log import RunLog
from .runs import encode
from .schedule import RoundRobinScheduler
from .similarity import DEFAULT_BATCH_SIZE, correlations, score_dataset
from .task_loss import TaskLoss
from .tasks import TASKS, format_metrics, overall_score

STS_DEV_FILE = TASKS["sts"].files["dev"]   # --ucl_eval_every scores this file of the data directory by default


@dataclass
class Run:
    """One training run's parts, built once. The resume clock saves the state of everything
    reachable from here (``resume.resumable_state``), so a new stateful part needs no registering."""
    config: RunConfig
    model: torch.nn.Module                     # heads.MultitaskBert
    forward_model: torch.nn.Module             # the same, or its DistributedDataParallel wrapper
    splits: dict[str, dict[str, list[Example]]]   # task -> split -> examples, as ``splits_needed`` says
    loader: Callable                           # (examples, batch_size, shuffle, seed, max_length=None) -> DataLoader
    device: torch.device
    log: RunLog                                # log(info), log.result(epoch lines, warnings)
    optimizer: torch.optim.Optimizer           # encoder + heads (+ learned loss weights)
    task_loss: TaskLoss
    loop: TrainingLoop
    on_epoch_end: Callable[[dict], None] = lambda record: None   # e.g. write metrics.json so far
    tokenizer: BertTokenizer | None = None     # for scoring the encoder on STS (--ucl_eval_every)
    data_dir: Path | None = None               # None when the run reads no task file


# ---- the stages before multi-task training -------------------------------------------------------
def ucl_stage(run: Run) -> dict:
    """Unsupervised SimCSE (Gao et al. 2021, §3): each sentence encoded twice with dropout on is
    its own positive; the other sentences of the batch are negatives (``info_nce``)."""
    c = run.config.contrastive
    if c.ucl_data:
        corpus, source = read_sentences(c.ucl_data), f"--ucl_data {c.ucl_data}"
    else:
        corpus, source = sentences_from_examples(*(s["train"] for s in run.splits.values())), "the training sets"
    run.log(f"ucl: {len(corpus)} sentences from {source}")

    def loss_fn(inputs, batch):
        # two dropout masks; the first pass goes through the DDP wrapper (if any), which then
        # averages the gradients of the whole loss across processes
        first, second = run.forward_model(None, [inputs[0]])[0], run.model.embed(inputs[0])
        return info_nce(first, second, run.config.model.temp)

    sts_dev = None
    if c.ucl_eval_every:
        path = Path(c.ucl_eval_data) if c.ucl_eval_data else run.data_dir / STS_DEV_FILE
        sts_dev = StsDevCurve(run, load_dataset(path), c.ucl_eval_every)
        run.log(f"ucl: STS dev Spearman every {c.ucl_eval_every} steps on {sts_dev.pairs} pairs of {path}")
    return _contrastive(run, "ucl", corpus, c.ucl_epochs, c.ucl_steps, c.ucl_batch_size, c.ucl_lr, loss_fn,
                        source=source, unit="sentence", max_length=c.ucl_max_length, sts_dev=sts_dev)


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
    """Label-contrastive fine-tuning of the encoder on the first single-sentence classification task's
    training sentences (SST by default): same-class sentences of a batch are pulled together, others
    pushed apart (``losses.label_contrastive_loss``; Khosla et al. 2020, Gunel et al. 2021)."""
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
    loader = run.loader(run.splits["qqp"]["train"], run.config.batch_sizes()["qqp"], True, t.seed + 100)
    return run.loop.train(TaskObjective(run, {"qqp": loader}, "min", t.pre_qqp_steps, t.pre_qqp_epochs, joint=False,
                                        name="pre_qqp", log_prefix="pre-QQP "))


def lp_stage(run: Run) -> dict:
    """Linear probing before fine-tuning (LP-FT; Kumar et al. 2022, §4): the heads start random, and
    fine-tuning through random heads distorts the pretrained features before the heads are any good.
    So the heads are first trained alone on the frozen encoder (round-robin, ``--head_lr``, their
    own AdamW); multi-task training then starts from heads that already fit the features."""
    t = run.config.train
    optimizer = AdamW(t.optimizer_groups(run.model.heads.named_parameters()), lr=t.head_lr,
                      weight_decay=t.weight_decay, **run.config.speed.adamw_options())
    encoder = [p for p in run.model.bert.parameters() if p.requires_grad]
    for p in encoder:
        p.requires_grad_(False)
    try:
        return run.loop.train(TaskObjective(run, task_loaders(run, t.seed + 300), "min", t.lp_steps, 1, joint=False,
                                            name="lp", log_prefix="LP ", optimizer=optimizer))
    finally:
        for p in encoder:
            p.requires_grad_(True)


def task_loaders(run: Run, seed: int) -> dict:
    """A shuffled training loader for every task of the run, the i-th task's seeded ``seed + i``."""
    sizes = run.config.batch_sizes()
    return {name: run.loader(split["train"], sizes[name], True, seed + i)
            for i, (name, split) in enumerate(run.splits.items())}


def multitask_stage(run: Run) -> dict:
    """Round-robin (or joint-loss) training on every task of ``--tasks``, keeping the best epoch on dev."""
    t = run.config.train
    return run.loop.train(MultitaskObjective(run, task_loaders(run, t.seed), t.rr, t.max_steps_per_epoch, t.epochs,
                                             t.joint_loss, lr_scales=run.config.lr_scales()))


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
    """The stages before multi-task training that the flags switch on, in their fixed order; linear
    probing (``--lp_steps``) last, right before the multi-task epochs whose heads it trains."""
    stages = [(e.flag, e.stage) for e in EXTENSIONS if e.stage is not None and e.enabled(config)]
    if config.train.lp_steps and config.train.epochs > 0:
        stages.append(("lp", lp_stage))
    return stages


def splits_needed(config: RunConfig) -> dict[str, tuple[str, ...]]:
    """Task -> the splits a run reads. Multi-task training reads every task's train, dev and (if
    there is one) test file. The stages alone (``--epochs 0``) read only the training sets they build
    their data from: none when their corpora come from files (``--ucl_data``, ``--scl_data``)."""
    tasks = config.task_names()
    if config.train.epochs > 0:
        return {name: ("train", "dev", "test") for name in tasks}
    c, read = config.contrastive, set()
    if c.ucl and not c.ucl_data:
        read.update(tasks)
    if c.scl and not c.scl_data:
        read.update(("qqp", "sts"))
    if c.lcl:
        read.add(config.lcl_task())
    return {name: ("train",) for name in tasks if name in read}


def data_files_needed(config: RunConfig) -> list[str]:
    """The files the run needs in the data directory (a task's test file is optional)."""
    files = [TASKS[name].files[split] for name, splits in splits_needed(config).items()
             for split in splits if split != "test"]
    c = config.contrastive
    if c.ucl and c.ucl_eval_every and not c.ucl_eval_data and STS_DEV_FILE not in files:
        files.append(STS_DEV_FILE)
    return files


# ---- objectives ----------------------------------------------------------------------------------
class ContrastiveObjective(Objective):
    """A SimCSE-style stage: its own AdamW over the encoder, a loss on sentence vectors.
    A batch of one sentence has no in-batch negative and is left out. With ``sts_dev`` the stage is
    scored on STS dev as it trains and ends with its best step's encoder (``StsDevCurve``)."""

    def __init__(self, run: Run, name: str, loader, epochs: int, max_steps: int | None, lr: float, loss_fn,
                 encoder_params: list, sts_dev: StsDevCurve | None = None):
        self.run, self.name, self.log_prefix, self.epochs = run, name, f"{name} ", epochs
        self.loader, self.loss_fn, self.sts_dev = loader, loss_fn, sts_dev
        self.per_epoch = len(loader) if max_steps is None else min(len(loader), max_steps)
        self.optimizer = AdamW(encoder_params, lr=lr, weight_decay=run.config.train.weight_decay,
                               **run.config.speed.adamw_options())

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

    def start(self, progress: dict) -> None:
        if self.sts_dev is not None:
            self.sts_dev.start(progress.setdefault("sts_dev", {}))

    def after_step(self) -> None:
        if self.sts_dev is not None:
            self.sts_dev.step_done()

    def end_epoch(self, record: dict, progress: dict) -> str:
        if self.sts_dev is None:
            return ""
        if record["epoch"] == self.epochs:
            self.sts_dev.score_last_step()
        return self.sts_dev.describe()

    def result(self, progress: dict) -> dict:
        result = super().result(progress)
        if self.sts_dev is not None:
            result["sts_dev"] = self.sts_dev.end_with_best()
        return result


class StsDevCurve:
    """SimCSE's model selection (Gao et al. 2021, Appendix A; ``--eval_steps 125`` and
    ``--load_best_model_at_end`` in their script): the encoder is scored on STS dev (Spearman of cosines,
    the run's ``--pooling``, as ``training.tools.evaluate_embeddings``) every ``every`` steps, before the
    first and after the last, and the stage ends with the best step's encoder. The ``[step, spearman]``
    points live in ``data`` (the stage's checkpointed progress), the best weights in ``best`` (saved with
    the optimizer states), so a resumed stage continues both. Scoring restores every RNG: the stage
    trains exactly as without the curve."""

    def __init__(self, run: Run, dataset: PairDataset, every: int):
        self.run, self.dataset, self.every = run, dataset, every
        self.pairs = sum(len(subset.gold) for subset in dataset.subsets)
        self.best = EncoderSnapshot()
        self.data: dict = {}

    def start(self, data: dict) -> None:
        """Take the curve's state (the saved one when resuming); a fresh curve scores step 0."""
        self.data = data
        for key, empty in (("data", str(self.dataset.path)), ("every", self.every), ("step", 0), ("curve", []),
                           ("best", None)):
            data.setdefault(key, empty)
        if not data["curve"]:
            self.score()

    def step_done(self) -> None:
        self.data["step"] += 1
        if self.data["step"] % self.every == 0:
            self.score()

    def score_last_step(self) -> None:
        if self.data["curve"][-1][0] != self.data["step"]:
            self.score()

    def score(self) -> None:
        run, saved_rng = self.run, rng_state()
        try:
            scored = score_dataset(lambda sentences: encode(
                run.model.bert, run.tokenizer, sentences, run.config.model.pooling, batch_size=DEFAULT_BATCH_SIZE,
                max_length=run.config.data.max_length, progress=False), self.dataset)
        finally:
            set_rng_state(saved_rng)
        spearman, step = correlations(scored)["all"]["spearman"], self.data["step"]
        self.data["curve"].append([step, spearman])
        if self.data["best"] is None or spearman > self.data["best"]["spearman"]:
            self.data["best"] = {"step": step, "spearman": spearman}
            self.best.take(run.model.bert)

    def describe(self) -> str:
        step, spearman = self.data["curve"][-1]
        best = self.data["best"]
        return f" | STS dev Spearman {spearman:.4f} at step {step} (best {best['spearman']:.4f} at step {best['step']})"

    def end_with_best(self) -> dict:
        """Load the best step's encoder; returns the curve for the stage's log."""
        self.best.restore(self.run.model.bert)
        best = self.data["best"]
        self.run.log(f"ucl: ending with the encoder of step {best['step']} (STS dev Spearman {best['spearman']:.4f})")
        return dict(self.data)


class EncoderSnapshot:
    """A copy of the encoder's weights on the CPU. Having ``state_dict``, it is saved with every
    training checkpoint (``resume.resumable_state``) and restored on resume."""

    def __init__(self):
        self.weights: dict[str, torch.Tensor] = {}

    def take(self, encoder: torch.nn.Module) -> None:
        self.weights = {k: v.detach().to("cpu", copy=True) for k, v in encoder.state_dict().items()}

    def restore(self, encoder: torch.nn.Module) -> None:
        encoder.load_state_dict(self.weights)

    def state_dict(self) -> dict[str, torch.Tensor]:
        return dict(self.weights)

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        self.weights = dict(state)


def _contrastive(run: Run, name: str, examples: list, epochs: int, max_steps: int | None, batch_size: int,
                 lr: float, loss_fn, *, source: str, unit: str, max_length: int | None = None,
                 sts_dev: StsDevCurve | None = None) -> dict:
    """Train the encoder on ``examples`` (``unit``s read from ``source``, for the error message),
    truncated to ``max_length`` word pieces (None: ``--max_length``). ``ContrastiveObjective`` leaves
    out a batch of one, so fewer than 2 examples would make a stage of no step: an error."""
    if len(examples) < 2:
        raise DataError(f"{source}: only {len(examples)} {unit}{'' if len(examples) == 1 else 's'}; a {name} "
                        f"batch (--{name}_batch_size {batch_size}) needs at least 2, for in-batch negatives")
    encoder = [(name, p) for name, p in run.model.bert.named_parameters() if p.requires_grad]
    encoder_params = run.config.train.optimizer_groups(encoder)
    if not encoder_params:
        run.log(f"{name}: the encoder is frozen (--option pretrain); skipping this stage")
        return {"skipped": "encoder frozen"}
    loader = run.loader(examples, batch_size, True, run.config.train.seed + 200, max_length=max_length)
    return run.loop.train(ContrastiveObjective(run, name, loader, epochs, max_steps, lr, loss_fn, encoder_params,
                                               sts_dev))


class TaskObjective(Objective):
    """Supervised training on task batches (``TaskLoss``) with the run's optimizer (or ``optimizer``): one step per
    task batch in round-robin order, or with ``joint`` one step per round of every task's batch.
    ``lr_scales``: a learning-rate multiplier per task, for the steps on that task's batches alone."""

    def __init__(self, run: Run, loaders: dict, rr: str, max_steps: int | None, epochs: int, joint: bool,
                 name: str = "multitask", log_prefix: str = "", lr_scales: dict[str, float] | None = None,
                 optimizer: torch.optim.Optimizer | None = None):
        self.run, self.epochs, self.joint, self.name, self.log_prefix = run, epochs, joint, name, log_prefix
        self.lr_scales = lr_scales or {}
        self.scheduler = RoundRobinScheduler(loaders, rr, max_steps)
        self.optimizer = optimizer or run.optimizer

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

    def lr_scale(self, batches: list) -> float:
        tasks = {name for step_batches in batches for name in step_batches}
        return self.lr_scales.get(tasks.pop(), 1.0) if len(tasks) == 1 else 1.0

    def after_backward(self) -> None:
        self.run.task_loss.after_backward()

    def after_step(self) -> None:
        self.run.task_loss.after_step()


class MultitaskObjective(TaskObjective):
    """The multi-task stage: after each epoch, dev predictions, metrics, loss-weight update and the
    best epoch so far (its weights kept, and saved by ``run.on_epoch_end``)."""

    def start(self, progress: dict) -> None:
        saved = progress.setdefault("best", None)
        self.best = {"score": -float("inf"), "epoch": None, "state": None, "dev": None}
        if saved is not None:  # resuming: the best epoch before the crash
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
        return {"epochs": progress["epochs"], "best": self.best, "loss_curves": self.curves(progress),
                "lr_curve": progress["lr"]}

    @staticmethod
    def curves(progress: dict) -> dict:
        return {name: data["points"] for name, data in progress["curves"].items()}
