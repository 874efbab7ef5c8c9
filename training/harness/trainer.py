"""The multi-task run, ``run(config)``: read data, build the model, run the extensions' stages, then
multi-task training, keep the best epoch on dev, write predictions, metrics and the checkpoint. With
``--epochs 0`` the run is its stages alone; ``--resume RUN_DIR``: docs/long-runs.md, 'Resuming'.
"""
from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import torch

from training.data.holdout import hold_out
from training.data.readers import DataError, Example, read_header, resolve_data_dir
from heads import MultitaskBert
from minbert import BertTokenizer

from .checkpoint import save_checkpoint
from .run_config import RunConfig
from ..learning.task_schema import run_tasks
from ..configuration.flags import absolute_paths
from ..configuration.sections import capped_words, scored_whole
from .distributed import (Distributed, average_gradients, check_batch_size, init_distributed, pick_device, whole_batch,
                          wrap_model)
from ..learning.evaluate import TaskPredictions, predict
from ..learning.loop import TrainingDiverged
from ..learning.watch import per_second
from ..learning.precision import Precision
from .evaluations import RunEvaluations
from .resume import Checkpoint, TrainingClock
from .run_folder import RunFolder, resume_from
from .run_log import RunLog
from ..learning.rng import seed_everything
from ..learning.recipe import Callbacks, Inputs, Parallel, build_run
from ..learning.schedule import RoundRobinScheduler
from .runs import build_model, check_lengths, model_directory, tokenizer_for
from ..learning.stages import MULTITASK, Run, multitask_stage, task_batch_sizes
from ..learning.tasks import Task, format_metrics, overall_score
from .status import RunStatus
from .trackers import check_installed
from .trial_control import ask_scheduler
from .watching import recording_watch


def run(config: RunConfig, log: RunLog | None = None, given: set[str] | None = None) -> dict:
    """Train and evaluate one configuration; return the metrics of ``metrics.json`` (``RunFolder``). ``given``: the
    settings the command line gave (None: those off their defaults), which --resume checks against the saved run."""
    if not config.output.resume:   # a resumed run's saved configuration is validated by resume_from
        config = config.validate()
    started = time.time()
    config, resume, stale, lock = resume_from(config, given)
    try:
        check_installed(config.output.trackers())   # --report_to mlflow without mlflow: one line, nothing written
        place, device = init_distributed(pick_device(config.train.device))
        check_processes(config, place)
        precision = Precision(config.speed.amp, device)  # an impossible --amp fails before the run folder exists
    except BaseException:
        if lock is not None:
            lock.release()
        raise
    log = log or RunLog(config.output.quiet, config.output.log_file, enabled=place.is_main)
    for path in stale:
        log(f"removed {path} (left by an interrupted run)")
    seed_everything(config.train.seed)
    with RunFolder(config, resume, place, started, log, lock) as folder:
        inputs = read_inputs(config, log)   # before the run starts: a run that cannot start leaves nothing
        config = with_absolute_paths(config, inputs)   # the run's configuration from here on, never changed
        folder.start(config, inputs, device)
        parts = assemble(config, inputs, folder, device, place, precision, log, resume)
        for name, stage in config.stages():
            folder.metrics["stages"][name] = run_stage(parts, name, stage)
            folder.write.json(folder.metrics)
        if config.train.epochs == 0:
            finish_stages_only(parts, folder)
        else:
            train_and_predict(parts, folder)
    return folder.metrics


def run_stage(run: Run, name: str, stage) -> dict:
    """``stage(run)``'s log, or, in a run resumed after the stage had finished, its saved log (the clock moves past
    its steps)."""
    log = run.loop.clock.finished_stage(name)
    if log is None:
        log = stage(run)
        run.loop.clock.end_stage(name, log)
    return log


def check_processes(config: RunConfig, place: Distributed) -> None:
    """Settings that several processes (torchrun) cannot take, refused before the run folder exists."""
    for flag, size in config.training_batch_sizes():
        check_batch_size(size, place, flag)
    if place.enabled and config.speed.sparse_embeddings is True:
        raise ValueError("--sparse_embeddings runs in one process only (the multi-process all-reduce "
                         "is written for dense gradients)")
    for extension, _ in config.switched_on():
        if place.enabled and extension.one_process:
            raise ValueError(f"--{extension.name} runs in one process only: start it with python, not torchrun")


@dataclass(frozen=True)
class RunInputs(Inputs):
    """The kernel's ``Inputs`` (model, tokenizer, examples, data folder), read and checked before the run starts,
    and what the run folder records of them."""
    model_dir: Path | None = None
    data_report: dict = field(default_factory=dict)   # file -> rows read and skipped


def read_inputs(config: RunConfig, log: RunLog) -> RunInputs:
    """Data, weights, vocabulary, corpora and the settings the model cannot take, each checked."""
    data_files = config.data_files_needed()
    data_dir = resolve_data_dir(config.data.data_dir, data_files) if data_files else None
    model_dir = model_directory(config.model.model)
    for extension, settings in config.switched_on():
        extension.check_files(settings, config.core())
    tasks = run_tasks(config)
    model = build_model(config.model, tasks, model_dir)
    config.add_model_parts(model)   # the extensions' parts, before the optimizer and any saved state
    check_lengths(config.max_lengths(), model.bert.config, model_dir / "config.json")   # build_model checked the depth
    tokenizer = tokenizer_for(model_dir, model.bert)
    # a test file not predicted (--no_test_predictions) is neither read nor checked (nor fingerprinted for --resume)
    dropped = () if config.output.test_predictions else ("test",)
    needed = {name: tuple(s for s in splits if s not in dropped) for name, splits in config.splits_needed().items()}
    splits, data_report = read_all_splits(data_dir, needed, tasks, config.data.strict, log)
    hold_out_validation(splits, tasks, config.data.val_fraction, data_report, log)
    hold_out_for_extensions(splits, tasks, config.held_out(), data_report, log)
    cap_dev(splits, config.data.max_eval_examples, log)
    check_evaluations(config, splits)
    return RunInputs(model, tokenizer, splits, tasks, data_dir, model_dir, data_report)


def hold_out_validation(splits: dict[str, dict[str, list[Example]]], tasks: dict[str, Task], fraction: float,
                        report: dict, log) -> None:
    """``--val_fraction F``: each task's training examples split, in place, into training and the "dev" that
    every evaluation scores (``data.holdout``); the dev files were not read (``RunConfig.splits_needed``)."""
    if not fraction:
        return
    split_off(splits, tasks, "dev", fraction, "held_out", report)   # the validation examples
    log.result(f"note: --val_fraction {fraction}: evaluating on {fraction:.0%} of each task's training file, held "
               f"out of training; the dev files are not read")


def hold_out_for_extensions(splits: dict[str, dict[str, list[Example]]], tasks: dict[str, Task],
                            held: list[tuple[str, float]], report: dict, log) -> None:
    """An extension's split of each task's training examples (``Extension.held_out``), in place: ``(name,
    fraction)`` of ``held`` takes ``fraction`` of what ``--val_fraction`` left into the split ``name``, which its
    hooks score and no stage trains on."""
    for name, fraction in held:
        split_off(splits, tasks, name, fraction, f"held_out_{name}", report, f"--{name}")
        log(f"--{name}: {fraction:.0%} of each task's training file held out of training, for it to score")


def split_off(splits: dict[str, dict[str, list[Example]]], tasks: dict[str, Task], split: str, fraction: float,
              report_key: str, report: dict, *flag: str) -> None:
    """``fraction`` of each task's training examples moved, in place, into ``split`` (``data.holdout``; an error
    names ``flag``), and its count into the data report's ``report_key``."""
    for task, task_splits in splits.items():
        if "train" in task_splits:
            task_splits["train"], task_splits[split] = hold_out(task_splits["train"], fraction, *flag)
            report[tasks[task].files["train"]][report_key] = len(task_splits[split])


def cap_dev(splits: dict[str, dict[str, list[Example]]], cap: int | None, log: RunLog) -> None:
    """``--max_eval_examples N``: keep the first N usable examples of each dev file, in place, so every
    evaluation (the best-weights choice, early stopping, dev loss) and the dev prediction files see the same
    N. A smoke run's shortcut: the report never compares its dev numbers with full-dev ones."""
    if cap is None:
        return
    # a shorter dev file is scored whole
    shorter = scored_whole({task: len(task_splits["dev"]) for task, task_splits in splits.items()
                            if "dev" in task_splits}, cap)
    for task_splits in splits.values():
        if "dev" in task_splits:
            task_splits["dev"] = task_splits["dev"][:cap]
    log.result(f"note: --max_eval_examples {cap}: dev is scored on the first {cap} examples of each task's dev "
               f"file{shorter}, not comparable with full-dev scores")


def check_evaluations(config: RunConfig, splits: dict) -> None:
    """Refuse ``--eval_every`` and ``--early_stopping`` where they could do nothing, as other flags without
    effect are: an ``--eval_every`` of at least multi-task training's optimizer steps (the data's batches
    under ``--rr``, as one process takes them), or an ``--early_stopping`` of at least its evaluations."""
    t = config.train
    if t.epochs == 0 or not (t.eval_every or t.early_stopping) or not all(
            name in splits and "train" in splits[name] for name in config.task_names()):
        return
    sizes = task_batch_sizes(config, {name: splits[name] for name in config.task_names()})
    batches = {name: range(math.ceil(len(splits[name]["train"]) / sizes[name])) for name in config.task_names()}
    if not all(batches.values()):
        return   # an empty training set: the scheduler's own error says which
    order = len(RoundRobinScheduler(batches, t.rr, t.max_steps_per_epoch))
    joint = any(e.joint for e, _ in config.switched_on())
    steps = -(-(order // (len(batches) if joint else 1)) // t.grad_accum) * t.epochs
    if t.eval_every >= steps:
        raise ValueError(f"--eval_every {t.eval_every}: multi-task training has {steps} optimizer steps, so it would "
                         f"evaluate after the last one only, as the epochs do; give fewer steps (or leave it 0)")
    evaluations = -(-steps // t.eval_every) if t.eval_every else t.epochs
    if t.early_stopping and t.early_stopping >= evaluations:
        raise ValueError(f"--early_stopping {t.early_stopping}: multi-task training evaluates dev {evaluations} "
                         f"time{'s' if evaluations != 1 else ''} "
                         f"({'every --eval_every ' + str(t.eval_every) + ' steps' if t.eval_every else 'once an epoch'}), "
                         "so it could never stop early")


def with_absolute_paths(config: RunConfig, inputs: RunInputs) -> RunConfig:
    """A copy of ``config`` with absolute data and model folders and every path flag absolute: the run resumes,
    and its model loads, from any working directory."""
    data, model = config.data, config.model
    if inputs.data_dir is not None:
        data = dataclasses.replace(data, data_dir=str(inputs.data_dir.resolve()))
    if model.model is not None:
        model = dataclasses.replace(model, model=str(Path(model.model).resolve()))
    sections = config.sections() | {"data": data, "model": model}
    return config.with_sections(**{name: absolute_paths(section) for name, section in sections.items()})


def assemble(config: RunConfig, inputs: RunInputs, folder: RunFolder, device: torch.device, place: Distributed,
             precision: Precision, log: RunLog, resume: Checkpoint | None) -> Run:
    """The kernel's recipe (``learning.recipe.build_run``, with ``RunConfig.plugins``) and the harness's callbacks:
    the resume clock, each stage's watch (replay, checkpoints, the trackers of ``--report_to``: TensorBoard, mlflow,
    wandb; the bar, the processes' totals), each evaluation's (checkpoint/ of an improved one, metrics.json, the
    search's scheduler); DDP under torchrun."""
    log(f"data: {folder.metrics['data_dir'] or 'no task file'}   model: {folder.metrics['model_dir']}   "
        f"device: {device}")
    clock = TrainingClock(inputs.model, folder.dir, config.to_dict(), config.output.save_every,
                          config.output.keep_checkpoints, resume=resume, enabled=folder.write.enabled, log=log)
    scalars = folder.scalars(resume)
    watch = recording_watch(scalars, whole_batch(place, device) if place.enabled else None)
    evaluations = RunEvaluations(config.train.early_stopping, clock, scalars,
                                 epoch_saver(folder, inputs.model, inputs.tokenizer),
                                 ask_scheduler if config.output.wait_after_eval else None)   # minbert-search's ASHA
    parallel = Parallel(place.rank, place.shard, lambda model: wrap_model(model, place, device),
                        partial(average_gradients, place=place) if place.enabled else None)
    run = build_run(config, inputs, device, precision, config.plugins(),
                    Callbacks(log=log, clock=clock, watch=watch, evaluations=evaluations), parallel)
    clock.track(run)
    return run


def epoch_saver(folder: RunFolder, model: MultitaskBert, tokenizer: BertTokenizer):
    def on_epoch_end(progress: dict) -> None:
        """Save an improved epoch's weights in checkpoint/; metrics.json and the curves so far."""
        if progress["improved"] and folder.write.enabled:
            save_checkpoint(folder.dir / "checkpoint", progress["best"]["state"], model.bert.config,
                            folder.config.to_dict(), tokenizer)
        folder.metrics.update(epochs=progress["epochs"], loss_curves=progress["loss_curves"],
                              wall_seconds=folder.seconds())
        if progress["evaluations"]:   # --eval_every
            folder.metrics["evaluations"] = progress["evaluations"]
        folder.write.json(folder.metrics)
        folder.write.curves(folder.metrics, folder.log)
    return on_epoch_end


def say_stopped(run: Run, stopped: dict, metrics: dict) -> None:
    """Why multi-task training ended before its last epoch: in metrics.json ("early_stopped") and the log."""
    metrics["early_stopped"] = stopped
    why = ("stopped by the search's scheduler" if stopped.get("by") == "scheduler"
           else f"no better overall dev score in {stopped['patience']} evaluations")
    run.log.result(f"early stopping at step {stopped['step']} (epoch {stopped['epoch']}): {why}")


def train_and_predict(run: Run, folder: RunFolder) -> None:
    """Multi-task training; the best epoch's weights, trained further by the extensions' stages after it (if any),
    write the predictions and the final metrics."""
    after = folder.config.after_stages()
    result = multitask_result(run) if after else multitask_stage(run)
    history, best, metrics = result["epochs"], result["best"], folder.metrics
    metrics.update(loss_curves=result["loss_curves"], lr_curve=result["lr_curve"])
    if best["state"] is None:
        raise TrainingDiverged(f"no epoch reached a finite dev score; {run.loop.clock.last_good()}")
    run.model.load_state_dict(best["state"])
    if after:
        metrics["after_stages"] = {"stages": {}}
        for name, stage in after:
            metrics["after_stages"]["stages"][name] = run_stage(run, name, stage)
            folder.write.json(metrics)
    if not folder.write.enabled:  # only process 0 predicts and writes
        return
    at = f"step {best['step']} (epoch {best['epoch']})" if best["step"] is not None else f"epoch {best['epoch']}"
    stopped = result["stopped"]
    if stopped:
        say_stopped(run, stopped, metrics)
    then = f", then {', '.join(name for name, _ in after)}" if after else ""
    run.log(f"best {at} (dev overall {best['score']:.4f}){then}; writing predictions")
    def predict_split(task, examples, label):
        return predict(run.model, task, run.loader(examples, run.config.data.batch_size, False), run.device, label,
                       run.log.progress_bars, run.loop.precision)
    tasks, dev = run.task_loss.tasks, best["dev"]
    if after:   # the weights the stages after multi-task training leave: dev scored once more, and kept
        dev = {name: predict_split(task, run.splits[name]["dev"], f"dev {name}") for name, task in tasks.items()}
        save_checkpoint(folder.dir / "checkpoint", run.model.state_dict(), run.model.bert.config,
                        folder.config.to_dict(), run.tokenizer)
    written, skipped, test = folder.write.predictions(dev, tasks, run.splits, predict_split, run.log,
                                                      run.config.output.test_predictions)
    final_dev = {name: dev[name].score(task) for name, task in tasks.items()}
    dev_examples = {name: len(dev[name].ids) for name in run.config.task_names()}
    if after:
        before = {name: best["dev"][name].score(task) for name, task in tasks.items()}
        metrics["after_stages"].update(dev_before=before, dev_overall_before=overall_score(before, tasks),
                                       dev_after=final_dev, dev_overall_after=overall_score(final_dev, tasks))
        run.log.result(f"dev after {', '.join(name for name, _ in after)}: " + "  ".join(
            f"{name} {before[name]:.4f} -> {final_dev[name]:.4f}" for name in tasks if before[name] is not None))
    train_seconds = sum(e["train_seconds"] for e in history)
    train_examples = sum(e["train_examples"] for e in history)
    status = RunStatus.STOPPED_EARLY if stopped and stopped.get("by") == "scheduler" else RunStatus.FINISHED
    folder.finish(status, epochs=history, best_epoch=best["epoch"], **({"best_step": best["step"]} if best["step"] else {}),
                  dev=final_dev, dev_overall=overall_score(final_dev, tasks), dev_examples=dev_examples,
                  **({"test": test, "test_overall": overall_score(test, tasks)} if test else {}),
                  prediction_files=written, skipped_prediction_files=skipped, train_seconds=round(train_seconds, 1),
                  train_examples=train_examples, train_examples_per_second=per_second(train_examples, train_seconds))
    speed = metrics["train_examples_per_second"]
    cap = run.config.data.max_eval_examples
    run.log.result(f"dev{capped_words(cap)}: {format_metrics(final_dev, tasks, 4, '  ')}  "
                   f"overall {metrics['dev_overall']:.4f}  "
                   f"({metrics['wall_seconds']:.0f} s, {'-' if speed is None else f'{speed:.1f}'} train examples/s) "
                   f"-> {folder.dir}")
    if test:
        run.log.result(f"test (labelled test files): {format_metrics(test, tasks, 4, '  ')}  "
                       f"overall {metrics['test_overall']:.4f}")


def multitask_result(run: Run) -> dict:
    """``multitask_stage(run)``'s result, recorded as a finished stage (its best weights in checkpoint/, each
    checkpoint's copy of them) for the stages after it: a run resumed in one of those takes it from there instead of
    replaying multi-task training."""
    clock = run.loop.clock
    saved = clock.finished_stage(MULTITASK)
    if saved is not None:
        best = saved["best"]
        dev = {name: TaskPredictions.from_dict(p) for name, p in best["dev"].items()}
        return {**saved, "best": {**best, "dev": dev, "state": clock.saved_best_state()}}
    result = multitask_stage(run)
    best = result["best"]
    if best["state"] is not None:   # else the run stops here (no finite dev score)
        clock.end_stage(MULTITASK, {**result, "best": {**{key: best[key] for key in ("score", "epoch", "step")},
                                                       "dev": {name: p.to_dict() for name, p in best["dev"].items()}}})
    return result


def finish_stages_only(run: Run, folder: RunFolder) -> None:
    """``--epochs 0``: no epoch was scored on dev, so ``checkpoint/`` keeps the encoder the stages leave
    (after ``--ucl_eval_every``, the best step's), without heads; no predictions."""
    if not folder.write.enabled:  # only process 0 writes
        return
    encoder = {k: v for k, v in run.model.state_dict().items() if k.startswith("bert.")}
    save_checkpoint(folder.dir / "checkpoint", encoder, run.model.bert.config, run.config.to_dict(), run.tokenizer)
    folder.finish()
    run.log.result(f"stages {', '.join(folder.metrics['stages'])} done, no multi-task epochs (--epochs 0): encoder "
                   f"saved in {folder.dir / 'checkpoint'} ({folder.metrics['wall_seconds']:.0f} s) -> {folder.dir}")


def read_all_splits(data_dir: Path | None, needed: dict[str, tuple[str, ...]], tasks: dict[str, Task], strict: bool,
                    log) -> tuple[dict[str, dict[str, list[Example]]], dict]:
    """The ``needed`` splits of each task (``RunConfig.splits_needed``; ``tasks``: the rows by name); a test
    split only if present."""
    splits: dict[str, dict[str, list[Example]]] = {}
    report = {}
    for name, wanted in needed.items():
        task = tasks[name]
        splits[name] = {}
        for split, file_name in task.files.items():
            if split not in wanted:
                continue
            path = data_dir / file_name
            if split == "test" and not path.is_file():
                continue  # reported when predictions are written
            # a test file is unlabelled (CS224N's *-test-student.csv) unless it has the label column
            examples, read_report = task.read(path, labelled=split != "test" or task.label_column in read_header(path),
                                              strict=strict)
            if not examples:
                raise DataError(f"{path}: no usable rows ({read_report.summary()})")
            splits[name][split] = examples
            report[file_name] = {"rows": read_report.n_rows, "skipped": len(read_report.bad_rows)}
            if read_report.bad_rows:
                log.result(f"warning: {read_report.summary()}")
    return splits, report
