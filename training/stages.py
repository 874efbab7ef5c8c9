"""The training stages, run in this order when switched on:

    --ucl  unsupervised SimCSE  →  --scl  supervised SimCSE  →  --lcl  label-contrastive on SST
    →  --pre_qqp  QQP alone  →  multi-task

Every stage has the same signature, ``stage(ctx) -> dict``, and returns its log (loss curve,
seconds, batches); ``multitask_stage`` also returns the per-epoch dev history and the best state.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable

import torch
from tqdm.auto import tqdm

from data.contrastive import read_sentences, read_triples, sentences_from_examples, triples_from_pairs
from data.readers import DataError, Example
from minbert import AdamW

from .config import RunConfig
from .evaluate import TaskPredictions, predict, to_device
from .losses import info_nce, label_contrastive_loss
from .precision import Precision
from .resume import TrainingClock
from .run_log import RunLog
from .schedule import RoundRobinScheduler
from .task_step import TaskStep
from .tasks import TASKS, format_metrics, overall_score

CURVE_EVERY = 10  # batches per point of a logged loss curve


@dataclass
class StageContext:
    config: RunConfig
    model: torch.nn.Module                     # heads.MultitaskBert
    forward_model: torch.nn.Module             # the same, or its DistributedDataParallel wrapper
    splits: dict[str, dict[str, list[Example]]]
    loader: Callable                           # (examples, batch_size, shuffle, seed) -> DataLoader
    task_step: TaskStep
    device: torch.device
    log: RunLog                                # log(info), log.result(epoch lines, warnings)
    clock: TrainingClock                       # step counting, checkpoints, replay on resume
    precision: Precision                       # --amp: autocast and gradient scaling
    on_epoch_end: Callable[[dict], None] = lambda record: None   # e.g. write metrics.json so far


def ucl_stage(ctx: StageContext) -> dict:
    """Unsupervised SimCSE (Gao et al. 2021, §3): each sentence encoded twice with dropout on is
    its own positive; the other sentences of the batch are negatives (``info_nce``)."""
    c = ctx.config.contrastive
    if c.ucl_data:
        corpus = read_sentences(c.ucl_data)
    else:
        corpus = sentences_from_examples(*(split["train"] for split in ctx.splits.values()))
    ctx.log(f"ucl: {len(corpus)} sentences from {c.ucl_data or 'the training sets'}")

    def loss_fn(inputs, batch):
        # two dropout masks; the first pass goes through the DDP wrapper (if any), which then
        # averages the gradients of the whole loss across processes
        first, second = ctx.forward_model(None, [inputs[0]])[0], ctx.model.embed(inputs[0])
        return info_nce(first, second, ctx.config.model.temp)

    return _contrastive_loop(ctx, "ucl", corpus, c.ucl_epochs, c.ucl_steps, c.ucl_batch_size, c.ucl_lr, loss_fn)


def scl_stage(ctx: StageContext) -> dict:
    """Supervised SimCSE (Gao et al. 2021, §4): (anchor, positive, hard negative) triples; every
    in-batch positive and hard negative is a candidate, the anchor's own hard negative weighted α."""
    c = ctx.config.contrastive
    if c.scl_data:
        triples, report = read_triples(c.scl_data)
        if report.bad_rows:
            ctx.log.result(f"warning: {report.summary()}")
    else:
        triples = triples_from_pairs(ctx.splits["qqp"]["train"], ctx.splits["sts"]["train"],
                                     seed=ctx.config.train.seed)
    if len(triples) < 2:
        raise DataError(f"supervised SimCSE needs at least 2 triples, got {len(triples)}")
    ctx.log(f"scl: {len(triples)} triples from {c.scl_data or 'QQP duplicates and STS pairs scored >= 4'}")

    def loss_fn(inputs, batch):
        anchors, positives, negatives = ctx.forward_model(None, inputs)
        return info_nce(anchors, positives, ctx.config.model.temp, negatives, c.hard_negative_weight)

    return _contrastive_loop(ctx, "scl", triples, c.scl_epochs, c.scl_steps, c.scl_batch_size, c.scl_lr, loss_fn)


def lcl_stage(ctx: StageContext) -> dict:
    """Label-contrastive fine-tuning of the encoder on the training sentences of the first
    single-sentence classification task (SST by default): in each batch, sentences of the same
    class are pulled together and others pushed apart
    (``losses.label_contrastive_loss``: KL between the row-normalised same-class matrix Y·Yᵀ and the
    softmax of the cosine similarities over τ; Khosla et al. 2020, Gunel et al. 2021)."""
    c = ctx.config.contrastive
    task = ctx.config.lcl_task()
    examples = ctx.splits[task]["train"]
    ctx.log(f"lcl: {len(examples)} labelled {task.upper()} sentences")

    def loss_fn(inputs, batch):
        embeddings = ctx.forward_model(None, inputs)[0]
        return label_contrastive_loss(embeddings, batch["labels"].to(ctx.device), ctx.config.model.temp)

    return _contrastive_loop(ctx, "lcl", examples, c.lcl_epochs, c.lcl_steps, c.lcl_batch_size, c.lcl_lr, loss_fn)


def pre_qqp_stage(ctx: StageContext) -> dict:
    """Train encoder + paraphrase head on QQP alone before multi-task training (the CS224N
    study's "pre-QQP": QQP is by far the largest task, so it gets a head start)."""
    t = ctx.config.train
    loader = ctx.loader(ctx.splits["qqp"]["train"], ctx.config.data.batch_size, True, t.seed + 100)
    scheduler = RoundRobinScheduler({"qqp": loader}, "min", t.pre_qqp_steps)
    progress = ctx.clock.begin_stage("pre_qqp", {"curve": {}, "batches": 0, "seconds": 0.0})
    curve = LossCurve(progress["curve"])
    for epoch in range(1, t.pre_qqp_epochs + 1):
        for name, batch in tqdm(scheduler, desc=f"pre-QQP {epoch}/{t.pre_qqp_epochs}", dynamic_ncols=True,
                                disable=not ctx.log.progress_bars):
            _logged_step(ctx, progress, curve, lambda: ctx.task_step.step({name: batch})[name])
        _log_epoch(ctx, "pre-QQP", epoch, curve)
    return _stage_log(progress, curve)


def multitask_stage(ctx: StageContext) -> dict:
    """Round-robin (or joint-loss) training on all tasks; after each epoch evaluate on dev and keep
    the best epoch by the overall score."""
    t = ctx.config.train
    train_loaders = {name: ctx.loader(ctx.splits[name]["train"], ctx.config.data.batch_size, True, t.seed + i)
                     for i, name in enumerate(ctx.splits)}
    scheduler = RoundRobinScheduler(train_loaders, t.rr, t.max_steps_per_epoch)
    weighting = ctx.task_step.weighting
    # Everything the rest of the run depends on, saved with each checkpoint of this stage.
    progress = ctx.clock.begin_stage("multitask", {"epochs": [], "best": None, "current": None,
                                                   "curves": {name: {} for name in ctx.splits}})
    history = progress["epochs"]
    curves = {name: LossCurve(progress["curves"][name]) for name in ctx.splits}  # per task, by its own batches
    best = {"score": -float("inf"), "epoch": None, "state": None, "dev": None}
    if progress["best"] is not None:  # resuming: the best epoch before the crash
        best = {**progress["best"], "dev": {k: TaskPredictions.from_dict(v) for k, v in progress["best"]["dev"].items()},
                "state": ctx.clock.checkpoint.best_state()}
    for epoch in range(1, t.epochs + 1):
        if progress["current"] is None or progress["current"]["epoch"] < epoch:
            progress["current"] = {"epoch": epoch, "losses": {name: [] for name in ctx.splits}, "examples": 0,
                                   "seconds": 0.0}
        current, totals = progress["current"], progress["current"]["losses"]
        bar = tqdm(scheduler.rounds(), desc=f"epoch {epoch}/{t.epochs}", total=scheduler.steps, dynamic_ncols=True,
                   disable=not ctx.log.progress_bars)
        mark = time.time()  # wall time of real steps, data loading included; replayed steps excluded
        for batches in bar:
            # the joint loss takes one step per round; round-robin one step per task batch
            for step_batches in ([batches] if t.joint_loss else [{n: b} for n, b in batches.items()]):
                if ctx.clock.skip_step():
                    mark = time.time()
                    continue
                for name, value in ctx.task_step.step(step_batches).items():
                    totals[name].append(value)
                    curves[name].add(value)
                current["examples"] += sum(len(batch["ids"]) for batch in step_batches.values())
                current["seconds"] += time.time() - mark
                mark = time.time()
                ctx.clock.step_done()
            first = next(iter(totals.values()))
            if first and len(first) % 20 == 0:
                bar.set_postfix({k: f"{sum(v) / len(v):.3f}" for k, v in totals.items() if v}, refresh=False)
        if epoch <= len(history):  # evaluated before the crash
            continue
        ctx.clock.catch_up()
        started = time.time()
        dev = {name: predict(ctx.model, TASKS[name], ctx.loader(split["dev"], ctx.config.data.batch_size, False, 0),
                             ctx.device, f"dev {name}", ctx.log.progress_bars, ctx.precision)
               for name, split in ctx.splits.items()}
        metrics = {name: dev[name].score(TASKS[name]) for name in dev}
        score = overall_score(metrics)
        record = {"epoch": epoch, "train_loss": {k: sum(v) / max(len(v), 1) for k, v in totals.items()},
                  "dev": metrics, "dev_overall": score,
                  "train_seconds": round(current["seconds"], 1), "train_examples": current["examples"],
                  "train_examples_per_second": round(current["examples"] / max(current["seconds"], 1e-9), 1),
                  "eval_seconds": round(time.time() - started, 1)}
        if weighting is not None:
            record["loss_weights"] = weighting.current_weights()
            weighting.update(metrics)
        history.append(record)
        improved = score > best["score"]
        ctx.log.result(f"epoch {epoch}: train loss " + " ".join(f"{k} {v:.3f}" for k, v in record["train_loss"].items())
                + f" | dev {format_metrics(metrics)} overall {score:.3f}" + ("  (best so far)" if improved else ""))
        if improved:
            best = {"score": score, "epoch": epoch, "dev": dev,
                    "state": {k: v.detach().clone() for k, v in ctx.model.state_dict().items()}}
            progress["best"] = {"score": score, "epoch": epoch, "dev": {k: v.to_dict() for k, v in dev.items()}}
        ctx.on_epoch_end({"epochs": history, "best": best, "improved": improved,
                          "loss_curves": {name: curve.points for name, curve in curves.items()}})
        ctx.clock.save()
    ctx.clock.catch_up()  # a run killed after its last checkpoint still needs the saved state
    return {"epochs": history, "best": best, "loss_curves": {name: curve.points for name, curve in curves.items()}}


def _contrastive_loop(ctx: StageContext, name: str, examples: list[Example], epochs: int, max_steps,
                      batch_size: int, lr: float, loss_fn) -> dict:
    """Shared loop of the SimCSE stages: its own AdamW over the encoder, a logged loss curve."""
    encoder_params = [p for p in ctx.model.bert.parameters() if p.requires_grad]
    if not encoder_params:
        ctx.log(f"{name}: the encoder is frozen (--option pretrain); skipping this stage")
        return {"skipped": "encoder frozen"}
    optimizer = AdamW(encoder_params, lr=lr, weight_decay=ctx.config.train.weight_decay)
    loader = ctx.loader(examples, batch_size, True, ctx.config.train.seed + 200)
    steps = len(loader) if max_steps is None else min(len(loader), max_steps)
    progress = ctx.clock.begin_stage(name, {"curve": {}, "batches": 0, "seconds": 0.0}, optimizer)
    curve = LossCurve(progress["curve"])
    ctx.model.train()
    for epoch in range(1, epochs + 1):
        for i, batch in enumerate(tqdm(loader, desc=f"{name} {epoch}/{epochs}", total=steps, dynamic_ncols=True,
                                             disable=not ctx.log.progress_bars)):
            if i >= steps:
                break
            if len(batch["ids"]) < 2:  # a last batch of one has no in-batch negative
                continue

            def step(batch=batch) -> float:
                with ctx.precision.autocast():
                    loss = loss_fn([to_device(encoding, ctx.device) for encoding in batch["inputs"]], batch)
                optimizer.zero_grad(set_to_none=True)
                ctx.precision.backward(loss)
                ctx.precision.step(optimizer)
                return loss.item()

            _logged_step(ctx, progress, curve, step)
        _log_epoch(ctx, name, epoch, curve)
    return _stage_log(progress, curve)


def _logged_step(ctx: StageContext, progress: dict, curve: "LossCurve", step: Callable[[], float]) -> None:
    """One optimizer step of a stage before multi-task training (``step()`` returns its loss),
    counted, timed and added to the loss curve — or skipped if the resume replay already did it."""
    if ctx.clock.skip_step():
        return
    started = time.time()
    curve.add(step())
    progress["batches"] += 1
    progress["seconds"] += time.time() - started
    ctx.clock.step_done()


def _log_epoch(ctx: StageContext, name: str, epoch: int, curve: "LossCurve") -> None:
    """The epoch's mean loss (not for epochs the resume replay only walked through)."""
    if not ctx.clock.replaying:
        ctx.log(f"{name} epoch {epoch}: loss {curve.last_epoch_mean():.4f}")


def _stage_log(progress: dict, curve: "LossCurve") -> dict:
    return {"batches": progress["batches"], "seconds": round(progress["seconds"], 1), "loss_curve": curve.points}


class LossCurve:
    """Mean loss every ``CURVE_EVERY`` batches, as ``[batch, mean]`` points for metrics.json.

    Its whole state lives in the dict ``data`` (JSON-serialisable), which a stage keeps in its
    checkpointed progress; pass the saved dict back to continue a curve after a resume.
    """

    def __init__(self, data: dict | None = None):
        self.data = data if data is not None else {}
        for key, empty in (("points", []), ("window", []), ("epoch", []), ("count", 0)):
            self.data.setdefault(key, empty)

    @property
    def points(self) -> list[list[float]]:
        return self.data["points"]

    def add(self, value: float) -> None:
        d = self.data
        d["count"] += 1
        d["window"].append(value)
        d["epoch"].append(value)
        if len(d["window"]) == CURVE_EVERY:
            d["points"].append([d["count"], round(sum(d["window"]) / CURVE_EVERY, 5)])
            d["window"] = []

    def last_epoch_mean(self) -> float:
        """Mean since the previous call (one epoch), then start a new epoch."""
        mean = sum(self.data["epoch"]) / max(len(self.data["epoch"]), 1)
        self.data["epoch"] = []
        return mean


def enabled_stages(config: RunConfig) -> list[tuple[str, Callable[[StageContext], dict]]]:
    """The stages before multi-task training that the flags switch on, in their fixed order."""
    switches = [("ucl", config.contrastive.ucl, ucl_stage), ("scl", config.contrastive.scl, scl_stage),
                ("lcl", config.contrastive.lcl, lcl_stage), ("pre_qqp", config.train.pre_qqp, pre_qqp_stage)]
    return [(name, stage) for name, on, stage in switches if on]
