"""The multi-task run: read data, build the model, train round-robin, keep the best epoch on dev,
write predictions, metrics and the checkpoint.

``run(config)`` is the whole job; ``run_multitask.py`` only turns flags into a ``RunConfig``.
"""
from __future__ import annotations

import dataclasses
import random
import time
from datetime import datetime
from pathlib import Path

import numpy as np
import torch
from tqdm.auto import tqdm

from data.batching import make_loader
from data.readers import DataError, Example, read_examples, resolve_data_dir
from heads import MultitaskBert, PairHead, SentimentHead, pooled_size
from minbert import AdamW, BertModel, BertTokenizer
from minbert.weights import resolve_model_dir

from .checkpoint import save_checkpoint
from .config import RunConfig
from .evaluate import TaskPredictions, predict, to_device
from .outputs import prediction_path, write_json, write_predictions
from .schedule import RoundRobinScheduler
from .tasks import TASKS, Task, overall_score


def run(config: RunConfig, log=print) -> dict:
    """Train and evaluate one configuration; return the metrics written to ``metrics.json``."""
    config.validate()
    started = time.time()
    seed_everything(config.train.seed)
    device = pick_device(config.train.device)
    run_dir = make_run_dir(config)
    log(f"run folder: {run_dir}")

    data_dir = resolve_data_dir(config.data.data_dir, [t.files[s] for t in TASKS.values() for s in ("train", "dev")])
    model_dir = resolve_model_dir(config.model.model)
    tokenizer = BertTokenizer(model_dir / "vocab.txt")
    log(f"data: {data_dir}   model: {model_dir}   device: {device}")
    splits, data_report = read_all_splits(data_dir, config.data.strict, log)

    model = build_model(config, model_dir).to(device)
    if tokenizer.vocab_size > model.bert.config.vocab_size:
        raise DataError(f"{model_dir / 'vocab.txt'} has {tokenizer.vocab_size} tokens but the model's "
                        f"embedding has {model.bert.config.vocab_size} rows")
    trainable = [p for p in model.parameters() if p.requires_grad]
    groups = [{"params": [p for p in model.bert.parameters() if p.requires_grad]},
              {"params": list(model.heads.parameters()), "lr": config.train.head_lr}]
    optimizer = AdamW([g for g in groups if g["params"]], lr=config.train.lr,
                      weight_decay=config.train.weight_decay)
    log(f"parameters: {sum(p.numel() for p in model.parameters()):,} "
        f"({sum(p.numel() for p in trainable):,} trained, option {config.model.option})")

    def loader(task: Task, split: str, shuffle: bool, seed: int = 0):
        return make_loader(splits[task.name][split], tokenizer, config.data.max_length,
                           config.data.batch_size, shuffle=shuffle, seed=seed)

    train_loaders = {name: loader(task, "train", True, config.train.seed + i)
                     for i, (name, task) in enumerate(TASKS.items())}
    scheduler = RoundRobinScheduler(train_loaders, config.train.rr, config.train.max_steps_per_epoch)

    history, best = [], {"score": -float("inf"), "epoch": None, "state": None}
    train_seconds, train_examples = 0.0, 0
    for epoch in range(1, config.train.epochs + 1):
        epoch_start = time.time()
        losses, examples = train_one_epoch(model, scheduler, optimizer, device, epoch, config.train.epochs)
        epoch_train_seconds = time.time() - epoch_start
        train_seconds += epoch_train_seconds
        train_examples += examples
        dev = {name: predict(model, task, loader(task, "dev", False), device, f"dev {name}")
               for name, task in TASKS.items()}
        metrics = {name: dev[name].score(task) for name, task in TASKS.items()}
        score = overall_score(metrics)
        history.append({"epoch": epoch, "train_loss": losses, "dev": metrics, "dev_overall": score,
                        "train_seconds": round(epoch_train_seconds, 1),
                        "train_examples_per_second": round(examples / epoch_train_seconds, 1),
                        "eval_seconds": round(time.time() - epoch_start - epoch_train_seconds, 1)})
        improved = score > best["score"]
        log(f"epoch {epoch}: train loss " + " ".join(f"{k} {v:.3f}" for k, v in losses.items())
            + f" | dev SST acc {metrics['sst']:.3f} QQP acc {metrics['qqp']:.3f} "
              f"STS pearson {metrics['sts']:.3f} overall {score:.3f}" + ("  (best so far)" if improved else ""))
        if improved:
            best = {"score": score, "epoch": epoch, "dev": dev,
                    "state": {k: v.detach().clone() for k, v in model.state_dict().items()}}
            save_checkpoint(run_dir / "checkpoint", best["state"], model.bert.config, config_dict(config))

    model.load_state_dict(best["state"])
    log(f"best epoch {best['epoch']} (dev overall {best['score']:.4f}); writing predictions")
    written, skipped = write_all_predictions(model, best["dev"], splits, loader, device, run_dir, log)
    final_dev = {name: best["dev"][name].score(task) for name, task in TASKS.items()}
    metrics_out = {
        "run_name": run_dir.name,
        "config": config_dict(config),
        "data_dir": str(data_dir.resolve()),
        "model_dir": str(model_dir),
        "device": str(device),
        "data": data_report,
        "epochs": history,
        "best_epoch": best["epoch"],
        "dev": final_dev,
        "dev_overall": overall_score(final_dev),
        "prediction_files": written,
        "skipped_prediction_files": skipped,
        "train_seconds": round(train_seconds, 1),
        "train_examples": train_examples,
        "train_examples_per_second": round(train_examples / max(train_seconds, 1e-9), 1),
        "wall_seconds": round(time.time() - started, 1),
        "torch_threads": torch.get_num_threads(),
        "finished": datetime.now().isoformat(timespec="seconds"),
    }
    write_json(run_dir / "metrics.json", metrics_out)
    log(f"dev: SST acc {final_dev['sst']:.4f}  QQP acc {final_dev['qqp']:.4f}  STS pearson {final_dev['sts']:.4f}  "
        f"overall {metrics_out['dev_overall']:.4f}  ({metrics_out['wall_seconds']:.0f} s, "
        f"{metrics_out['train_examples_per_second']:.1f} train examples/s) -> {run_dir}")
    return metrics_out


def train_one_epoch(model, scheduler: RoundRobinScheduler, optimizer, device, epoch: int, epochs: int):
    """One optimizer step per task batch, tasks in turn; returns mean loss per task and #examples."""
    model.train()
    totals = {name: 0.0 for name in scheduler.loaders}
    counts = {name: 0 for name in scheduler.loaders}
    examples = 0
    bar = tqdm(scheduler, desc=f"epoch {epoch}/{epochs}", total=len(scheduler), dynamic_ncols=True)
    for name, batch in bar:
        task = TASKS[name]
        inputs = [to_device(encoding, device) for encoding in batch["inputs"]]
        loss = task.loss(model(name, inputs), batch["labels"].to(device))
        if loss.requires_grad:  # a frozen encoder under a parameter-free head has nothing to learn
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
        totals[name] += loss.item()
        counts[name] += 1
        examples += len(batch["ids"])
        if counts[name] % 20 == 0:
            bar.set_postfix({k: f"{totals[k] / max(counts[k], 1):.3f}" for k in totals}, refresh=False)
    return {name: totals[name] / max(counts[name], 1) for name in totals}, examples


def build_model(config: RunConfig, model_dir: Path) -> MultitaskBert:
    """Pretrained encoder + fresh heads; with ``--option pretrain`` the encoder is frozen."""
    dropout = config.model.hidden_dropout_prob
    bert = BertModel.from_pretrained(model_dir, hidden_dropout_prob=dropout)
    width = pooled_size(bert.config.hidden_size, config.model.pooling)
    heads = {
        "sst": SentimentHead(width, TASKS["sst"].num_classes, dropout),
        "qqp": PairHead(width, config.model.para_head, "logit", config.model.temp, dropout),
        "sts": PairHead(width, config.model.sts_head, "score", config.model.temp, dropout),
    }
    model = MultitaskBert(bert, heads, config.model.pooling)
    if config.model.option == "pretrain":
        for p in model.bert.parameters():
            p.requires_grad_(False)
    return model


def read_all_splits(data_dir: Path, strict: bool, log) -> tuple[dict[str, dict[str, list[Example]]], dict]:
    """Every task's train/dev (labelled) and test (unlabelled, if present) examples."""
    splits: dict[str, dict[str, list[Example]]] = {}
    report = {}
    for name, task in TASKS.items():
        splits[name] = {}
        for split, file_name in task.files.items():
            path = data_dir / file_name
            if split == "test" and not path.is_file():
                continue  # reported when predictions are written
            examples, read_report = read_examples(
                path, task.text_columns, None if split == "test" else task.label_column,
                task.label_type, task.num_classes, task.score_range, strict=strict)
            if not examples:
                raise DataError(f"{path}: no usable rows ({read_report.summary()})")
            splits[name][split] = examples
            report[file_name] = {"rows": read_report.n_rows, "skipped": len(read_report.bad_rows)}
            if read_report.bad_rows:
                log(f"warning: {read_report.summary()}")
    return splits, report


def write_all_predictions(model, dev: dict[str, TaskPredictions], splits, loader, device, run_dir: Path, log):
    """Dev (already predicted by the best epoch) and test prediction CSVs; returns file lists."""
    written, skipped = [], []
    for name, task in TASKS.items():
        for split in ("dev", "test"):
            path = prediction_path(run_dir, task, split)
            if split == "dev":
                result = dev[name]
            elif split in splits[name]:
                result = predict(model, task, loader(task, split, False), device, f"{split} {name}")
            else:
                skipped.append(path.name)
                log(f"note: no {task.files[split]} in the data directory; skipping {path.name}")
                continue
            write_predictions(path, task, result)
            written.append(path.name)
    return written, skipped


def make_run_dir(config: RunConfig) -> Path:
    """``<out_dir>/<run_name>``; refuses a folder that already holds a run (nothing is overwritten)."""
    name = config.output.run_name or "-".join([
        config.model.option, config.model.pooling, config.model.para_head, config.model.sts_head,
        datetime.now().strftime("%Y%m%d-%H%M%S")])
    run_dir = Path(config.output.out_dir) / name
    if run_dir.exists() and any(run_dir.iterdir()):
        raise FileExistsError(f"{run_dir} already holds a run; choose another --run_name or remove it")
    run_dir.mkdir(parents=True, exist_ok=True)
    return run_dir


def config_dict(config: RunConfig) -> dict:
    return dataclasses.asdict(config)


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def pick_device(choice: str) -> torch.device:
    if choice == "cuda" and not torch.cuda.is_available():
        raise ValueError("--device cuda: no CUDA device is available (use --device cpu or auto)")
    if choice == "auto":
        choice = "cuda" if torch.cuda.is_available() else "cpu"
    return torch.device(choice)
