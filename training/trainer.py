"""The multi-task run, ``run(config)``: read data, build the model, run the stages (SimCSE, pre-QQP,
multi-task), keep the best epoch on dev, write predictions, metrics and the checkpoint. With
``--epochs 0`` the run is its stages alone and keeps the encoder they leave (``finish_stages_only``);
with ``--resume RUN_DIR`` it takes the saved configuration and continues from the newest checkpoint
in ``RUN_DIR/checkpoints/`` (``training/resume.py``).
"""
from __future__ import annotations

import dataclasses
import random
import time
from datetime import datetime
from pathlib import Path

import numpy as np
import torch

from data.batching import make_loader
from data.readers import DataError, Example, read_examples, read_header, resolve_data_dir
from heads import MultitaskBert
from minbert import AdamW, BertConfig, BertTokenizer
from minbert.errors import first_line

from .checkpoint import save_checkpoint
from .config import RunConfig
from .device import pick_device
from .distributed import Distributed, check_batch_size, init_distributed, shutdown, wrap_model
from .loop import TrainingLoop, per_second, warmup_then_linear_decay
from .losses import make_loss_weighting
from .memory import keep_freed_memory
from .outputs import RunFiles, claim_run_dir, read_metrics, release_run_dir
from .precision import Precision
from .resume import (Checkpoint, TrainingClock, latest_checkpoint, remove_temporary_files, remove_training_state,
                     TrainingDiverged)
from .run_log import RunLog
from .runs import build_model, model_directory, tokenizer_for
from .stages import Run, data_files_needed, enabled_stages, multitask_stage, splits_needed
from .task_loss import TaskLoss
from .tasks import TASKS, format_metrics, overall_score


def run(config: RunConfig, log: RunLog | None = None) -> dict:
    """Train and evaluate one configuration; return the metrics of ``metrics.json``, written at the start
    (status "running"), after every epoch and at the end ("finished"); a run that raises is marked
    "failed" with the error ("interrupted" on Ctrl-C and SIGTERM), then the error propagates."""
    config.validate()
    keep_freed_memory()  # fewer page faults per step; changes no number (training/memory.py)
    started = time.time()
    resume, stale = None, []
    if config.output.resume:
        run_dir = Path(config.output.resume)
        stale = remove_temporary_files(run_dir)
        resume = latest_checkpoint(run_dir, fallback=config.output.resume_fallback)
        config = resumed_config(config, resume)
    place, device = init_distributed(pick_device(config.train.device))
    for flag, size in config.training_batch_sizes():
        check_batch_size(size, place, flag)
    if place.enabled and config.speed.sparse_embeddings is True:
        raise ValueError("--sparse_embeddings runs in one process only (the multi-process all-reduce "
                         "is written for dense gradients)")
    if place.enabled and config.train.lp_steps:
        raise ValueError("--lp_steps runs in one process only (DistributedDataParallel expects a gradient "
                         "for every encoder parameter)")
    precision = Precision(config.speed.amp, device)  # an impossible --amp fails before the run folder exists
    log = log or RunLog(config.output.quiet, config.output.log_file, enabled=place.is_main)
    for path in stale:
        log(f"removed {path} (left by an interrupted run)")
    seed_everything(config.train.seed)
    if resume is None:
        run_dir = claim_run_dir(config, claim=place.is_main)
    # Everything that can be wrong with the inputs (data, weights, vocabulary, corpora, settings the
    # model cannot take) is found before the run starts: a run that cannot start leaves nothing behind.
    try:
        data_files = data_files_needed(config)
        data_dir = resolve_data_dir(config.data.data_dir, data_files) if data_files else None
        model_dir = model_directory(config.model.model)
        check_corpus_files(config)
        model = build_model(config, model_dir)
        check_against_model(config, model.bert.config, model_dir)
        tokenizer = tokenizer_for(model_dir, model.bert)
        splits, data_report = read_all_splits(data_dir, splits_needed(config), config.data.strict, log)
    except BaseException:
        if resume is None and place.is_main:
            release_run_dir(run_dir)
        raise
    if resume is None:
        metrics = {"run_name": run_dir.name, "status": "running", "config": config_dict(config),
                   "started": datetime.now().isoformat(timespec="seconds")}
    else:
        metrics = read_metrics(run_dir) | {"status": "running"}
        # wall_seconds adds up the sittings: those that ended by an error or a signal recorded theirs
        # (one killed outright did not, and counts nothing)
        earlier = metrics.get("wall_seconds")
        started -= earlier if isinstance(earlier, (int, float)) and earlier > 0 else 0
        metrics.setdefault("resumed", []).append({"step": resume.step, "checkpoint": resume.path.name,
                                                  "at": datetime.now().isoformat(timespec="seconds")})
    write = RunFiles(run_dir, place.is_main)
    try:
        write.json(metrics)
        log(f"run folder: {run_dir}" + (f"   processes: {place.world_size}" if place.enabled else ""))
        metrics.update(data_dir=str(data_dir.resolve()) if data_dir else None, model_dir=str(model_dir),
                       device=str(device), data=data_report)
        _run(config, tokenizer, data_dir, splits, model.to(device), write, device, place, precision, metrics, started,
             log, resume)
    except BaseException as err:
        metrics.update(status="interrupted" if isinstance(err, KeyboardInterrupt) else "failed",
                       error=f"{type(err).__name__}: {first_line(err)}", wall_seconds=round(time.time() - started, 1))
        try:
            write.json(metrics)
        except OSError:
            pass  # the disk that failed the run may fail this too; the run's own error says why
        raise
    finally:
        shutdown()
    return metrics


def check_against_model(config: RunConfig, bert: BertConfig, model_dir: Path) -> None:
    """Settings the model cannot take, found before the run starts rather than at the first long
    sentence (which may come in the test file, after all the training)."""
    for flag, length in (("--max_length", config.data.max_length),
                         ("--ucl_max_length", config.contrastive.ucl_max_length)):
        if length is not None and length > bert.max_position_embeddings:
            raise ValueError(f"{flag} {length} is more than the model's {bert.max_position_embeddings} positions "
                             f"(max_position_embeddings in {model_dir / 'config.json'}); give at most "
                             f"{bert.max_position_embeddings}")


def _run(config: RunConfig, tokenizer: BertTokenizer, data_dir: Path | None, splits: dict, model: MultitaskBert,
         write: "RunFiles", device: torch.device, place: Distributed, precision: Precision, metrics: dict,
         started: float, log: RunLog, resume: Checkpoint | None) -> None:
    run_dir = write.run_dir
    log(f"data: {metrics['data_dir'] or 'no task file'}   model: {metrics['model_dir']}   device: {device}")
    t = config.train
    weighting = (make_loss_weighting(t.loss_weighting, config.task_names(), config.parsed_loss_weights()).to(device)
                 if t.joint_loss else None)
    encoder = [(name, p) for name, p in model.bert.named_parameters() if p.requires_grad]
    groups = [*t.optimizer_groups(encoder), *t.optimizer_groups(model.heads.named_parameters(), lr=t.head_lr)]
    # learned loss weights (log-variances): no decay pulling them towards 0
    groups.append({"params": list(weighting.parameters()) if weighting else [], "lr": t.head_lr, "weight_decay": 0.0})
    optimizer = AdamW([g for g in groups if g["params"]], lr=t.lr, weight_decay=t.weight_decay, **config.speed.adamw_options())
    trained = sum(p.numel() for g in groups for p in g["params"])
    log(f"parameters: {sum(p.numel() for p in model.parameters()):,} in the model, {trained:,} trained "
        f"(option {config.model.option})")

    def loader(examples, batch_size: int, shuffle: bool, seed: int = 0, max_length: int | None = None):
        """Training loaders (shuffled) are sharded across processes; evaluation loaders are not.
        Sentences are cut to ``max_length`` word pieces (None: ``--max_length``)."""
        return make_loader(examples, tokenizer, max_length or config.data.max_length, batch_size, shuffle=shuffle,
                           seed=seed, bucket=config.speed.bucket, shard=place.shard if shuffle else None)

    def on_epoch_end(progress: dict) -> None:
        if progress["improved"] and write.enabled:
            save_checkpoint(run_dir / "checkpoint", progress["best"]["state"], model.bert.config,
                            config_dict(config), tokenizer)
        metrics.update(epochs=progress["epochs"], loss_curves=progress["loss_curves"],
                       wall_seconds=round(time.time() - started, 1))
        write.json(metrics)
        write.curves(metrics, log)

    model.bert.set_attention(config.speed.attention)
    model.bert.set_sparse_word_embeddings(config.speed.sparse(place.enabled))
    model.bert.set_dropout(config.speed.dropout_masks)
    if config.speed.compile:
        model.bert.compile(dynamic=True)  # in place: parameter names (and checkpoints) are unchanged
    forward_model = wrap_model(model, place, device)
    if place.rank > 0:  # same initial weights (DDP copies process 0's), own dropout masks
        torch.manual_seed(config.train.seed + place.rank)
    clock = TrainingClock(model, run_dir, config_dict(config), config.output.save_every, config.output.keep_checkpoints,
                          resume=resume, best_dir=run_dir / "checkpoint", enabled=write.enabled, log=log)
    task_loss = TaskLoss(model, device, config.smart, weighting, forward_model, place)
    run = Run(config, model, forward_model, splits, loader, device, log, optimizer, task_loss,
              TrainingLoop(precision, log, clock, t.max_grad_norm, grad_accum=t.grad_accum,
                           schedule=None if t.warmup_ratio is None else warmup_then_linear_decay(t.warmup_ratio)),
              on_epoch_end, tokenizer, data_dir)
    clock.components = {"run": run}
    metrics["stages"] = {}
    for name, stage in enabled_stages(config):
        stage_log = clock.finished_stage(name)
        if stage_log is None:
            stage_log = stage(run)
            clock.end_stage(name, stage_log)
        metrics["stages"][name] = stage_log
        write.json(metrics)
    if config.train.epochs == 0:
        finish_stages_only(config, model, tokenizer, write, place, metrics, started, log)
        return
    result = multitask_stage(run)
    history, best = result["epochs"], result["best"]
    metrics.update(loss_curves=result["loss_curves"], lr_curve=result["lr_curve"])
    if best["state"] is None:
        raise TrainingDiverged(f"no epoch reached a finite dev score; {clock.last_good()}")

    model.load_state_dict(best["state"])
    if not write.enabled:  # only process 0 predicts and writes
        return
    log(f"best epoch {best['epoch']} (dev overall {best['score']:.4f}); writing predictions")
    written, skipped, test = write.predictions(model, best["dev"], splits, loader, config.data.batch_size, device, log,
                                         precision)
    final_dev = {name: best["dev"][name].score(TASKS[name]) for name in config.task_names()}
    train_seconds = sum(e["train_seconds"] for e in history)
    train_examples = sum(e["train_examples"] for e in history)
    finish(config, write, place, metrics, started, log, epochs=history, best_epoch=best["epoch"], dev=final_dev,
           dev_overall=overall_score(final_dev),
           **({"test": test, "test_overall": overall_score(test)} if test else {}),
           prediction_files=written, skipped_prediction_files=skipped, train_seconds=round(train_seconds, 1),
           train_examples=train_examples, train_examples_per_second=per_second(train_examples, train_seconds))
    speed = metrics["train_examples_per_second"]
    log.result(f"dev: {format_metrics(final_dev, 4, '  ')}  overall {metrics['dev_overall']:.4f}  "
               f"({metrics['wall_seconds']:.0f} s, {'-' if speed is None else f'{speed:.1f}'} train examples/s) "
               f"-> {run_dir}")
    if test:
        log.result(f"test (labelled test files): {format_metrics(test, 4, '  ')}  overall {metrics['test_overall']:.4f}")


def finish_stages_only(config: RunConfig, model: MultitaskBert, tokenizer: BertTokenizer, write: RunFiles,
                       place: Distributed, metrics: dict, started: float, log: RunLog) -> None:
    """End a run of the stages alone (``--epochs 0``): no epoch was scored on dev, so the run keeps the
    encoder the stages leave (after ``--ucl_eval_every``, the best step's), without heads, in
    ``checkpoint/`` (for ``--model RUN`` and the embedding tools); no predictions."""
    if not write.enabled:  # only process 0 writes
        return
    run_dir = write.run_dir
    encoder = {k: v for k, v in model.state_dict().items() if k.startswith("bert.")}
    save_checkpoint(run_dir / "checkpoint", encoder, model.bert.config, config_dict(config), tokenizer)
    finish(config, write, place, metrics, started, log)
    log.result(f"stages {', '.join(metrics['stages'])} done, no multi-task epochs (--epochs 0): encoder saved in "
               f"{run_dir / 'checkpoint'} ({metrics['wall_seconds']:.0f} s) -> {run_dir}")


def finish(config: RunConfig, write: RunFiles, place: Distributed, metrics: dict, started: float, log: RunLog,
           **results) -> None:
    """Mark the run finished in metrics.json (``results`` first), draw its curves, drop its training state."""
    metrics.update(status="finished", **results, wall_seconds=round(time.time() - started, 1),
                   torch_threads=torch.get_num_threads(), finished=datetime.now().isoformat(timespec="seconds"),
                   processes=place.world_size)
    write.json(metrics)
    write.curves(metrics, log)
    if not config.output.keep_training_state:
        remove_training_state(write.run_dir)


def read_all_splits(data_dir: Path | None, needed: dict[str, tuple[str, ...]], strict: bool,
                    log) -> tuple[dict[str, dict[str, list[Example]]], dict]:
    """The ``needed`` splits of each task (``stages.splits_needed``): train/dev (labelled) and test
    (if present; labelled when the file has the label column, a user's own split) examples."""
    splits: dict[str, dict[str, list[Example]]] = {}
    report = {}
    for name, wanted in needed.items():
        task = TASKS[name]
        splits[name] = {}
        for split, file_name in task.files.items():
            if split not in wanted:
                continue
            path = data_dir / file_name
            if split == "test" and not path.is_file():
                continue  # reported when predictions are written
            # a test file is unlabelled (CS224N's *-test-student.csv) unless it has the label column
            labelled = split != "test" or task.label_column in read_header(path)
            examples, read_report = read_examples(
                path, task.text_columns, task.label_column if labelled else None,
                task.label_type, task.num_classes, task.score_range, strict=strict)
            if not examples:
                raise DataError(f"{path}: no usable rows ({read_report.summary()})")
            splits[name][split] = examples
            report[file_name] = {"rows": read_report.n_rows, "skipped": len(read_report.bad_rows)}
            if read_report.bad_rows:
                log.result(f"warning: {read_report.summary()}")
    return splits, report


def check_corpus_files(config: RunConfig) -> None:
    """The SimCSE corpus files (and ``--ucl_eval_every``'s STS file) given by flag exist (one line naming the flag)."""
    c = config.contrastive
    for on, flag, path in ((c.ucl, "--ucl_data", c.ucl_data), (c.scl, "--scl_data", c.scl_data)):
        if on and path and not Path(path).is_file():
            raise DataError(f"{flag} {path}: no such file")
    if c.ucl and c.ucl_eval_every and c.ucl_eval_data and not Path(c.ucl_eval_data).exists():
        raise DataError(f"--ucl_eval_data {c.ucl_eval_data}: no such file or folder")


def config_dict(config: RunConfig) -> dict:
    return dataclasses.asdict(config)


def resumed_config(flags: RunConfig, checkpoint: Checkpoint) -> RunConfig:
    """The configuration saved in the checkpoint; only how the run reports (``--quiet``,
    ``--log_file``) and the ``--resume`` folder itself come from the command line."""
    try:
        config = RunConfig.from_dict(checkpoint.config)
    except (TypeError, KeyError, ValueError) as err:
        raise ValueError(f"{checkpoint.path / 'state.json'}: saved configuration does not fit this version "
                         f"({err})") from None
    for name in ("resume", "quiet", "log_file"):
        setattr(config.output, name, getattr(flags.output, name))
    config.validate()
    return config


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
