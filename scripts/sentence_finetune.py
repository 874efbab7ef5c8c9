"""Fine-tune the encoder on one labelled single-sentence task (SST, CFIMDB) with cross-entropy or
a label-contrastive loss, and save it for the embedding evaluations.

    python -m scripts.sentence_finetune --task sst --loss lcl --data_dir ../shared/data/cs224n \\
        --out predictions/lcl_study/runs/sst-lcl --max_steps 150
    python -m scripts.probe --checkpoint predictions/lcl_study/runs/sst-lcl --task sst \\
        --data_dir ../shared/data/cs224n --pooling mean

Two objectives on the pooled sentence vector u = pool(BERT(x)) (``heads.pooling``, ``--pooling``):

- ``ce``: the task's head (its ``Task`` row: dropout + linear, ``heads.SentimentHead``) on u,
  cross-entropy against the class. The encoder learns at ``--lr``, the head at ``--head_lr``.
- ``lcl``: no head; ``training.learning.losses.label_contrastive_loss`` (its docstring has the equation) on the
  batch's pooled vectors: supervised contrastive learning (Khosla et al. 2020, §3.2) as Gunel et al.
  2021 (§2) fine-tune with it, here in its KL form and alone (they mix it with cross-entropy). Batches
  of fewer than two sentences have no pair to contrast and are skipped.

It trains through the run's loop (``training/learning/loop.py``) with the run's flags. The new ``--out`` folder
gets ``checkpoint/`` as a multi-task run writes it, so ``load_run`` and the embedding tools'
``--checkpoint`` read it (with ``ce`` the head as ``heads.<task>.*``; the tool's settings under "tool"
in its run config), and ``metrics.json`` (settings, steps, the loss curve, wall and CPU seconds).
"""
from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from pathlib import Path
from typing import Sequence

import torch
import torch.nn.functional as F

from training.data.batching import make_loader
from training.data.readers import resolve_data_dir
from scripts.probe import TASK_CHOICES, read_split
from training.learning.recipe import ParamSet, build_adamw
from training.harness.checkpoint import save_checkpoint
from training.tools.command import run_command
from training.configuration.sections import SPLIT_FLAGS, DataConfig, ModelConfig, TrainConfig, add_flags, section_from_args
from training.harness.run_config import RunConfig
from training.data.batching import to_device
from training.harness.distributed import pick_device
from training.configuration.flags import add_refused
from training.learning.loop import TrainingLoop
from training.learning.objective import Objective
from training.learning.watch import CURVE_EVERY
from training.learning.losses import label_contrastive_loss
from training.harness.outputs import write_json
from training.learning.precision import Precision
from training.harness.resume import TrainingClock
from training.harness.run_log import RunLog
from training.harness.watching import recording_watch
from training.learning.callbacks import Scalars
from training.harness.runs import pretrained_run, with_heads
from training.learning.task_schema import BUILTIN_TASKS

OBJECTIVES = ("ce", "lcl")


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return run_command(lambda: execute(args))


def execute(args: argparse.Namespace) -> int:
    started = time.time()
    config = run_config(args)
    out = Path(args.out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ValueError(f"--out {out} already holds files; give a new folder")
    task = BUILTIN_TASKS[args.task]
    train_file = resolve_data_dir(args.data_dir, [task.files["train"]]) / task.files["train"]
    examples, read_report = read_split(train_file, task)
    device = pick_device(config.train.device)
    encoder = pretrained_run(config.model.model, config.model.pooling)

    bert = encoder.model.bert
    # the head's dropout, as the encoder's
    config = config.with_sections(model=dataclasses.replace(config.model,
                                                            hidden_dropout_prob=bert.config.hidden_dropout_prob))
    torch.manual_seed(config.train.seed)  # the head's initialisation and the dropout masks
    model = with_heads(bert, config.model, {task.name: task} if args.loss == "ce" else {}).to(device).train()
    loader = make_loader(examples, encoder.tokenizer, config.data.max_length, config.data.batch_size, shuffle=True,
                         seed=config.train.seed, bucket=True)
    print(f"{task.name}: {len(examples)} training sentences from {train_file}; "
          f"encoder {encoder.source}; loss {args.loss}; device {device}", file=sys.stderr)
    head = task.name if args.loss == "ce" else None
    optimizer = build_adamw(config.train, config.speed, [ParamSet(model.bert.named_parameters()),
                                                         ParamSet(model.heads.named_parameters(),
                                                                  lr=config.train.head_lr)], config.train.lr)
    objective = SentenceObjective(model, loader, optimizer, config, args.loss, head, args.max_steps)
    train_started, cpu_started = time.time(), time.process_time()
    clock = TrainingClock(None, None, {}, enabled=False)   # no checkpoints: the harness's watch for its bar
    log = TrainingLoop(Precision("off", device), RunLog(), clock, watch=recording_watch(Scalars())).train(objective)
    log.update(seconds=round(time.time() - train_started, 1), cpu_seconds=round(time.process_time() - cpu_started, 1))

    tool = {"name": "sentence_finetune", "task": task.name, "loss": args.loss, "max_steps": args.max_steps}
    save_checkpoint(out / "checkpoint", model.state_dict(), bert.config,
                    {**config.to_dict(), "tool": tool, "encoder": str(encoder.source)}, encoder.tokenizer)
    write_json(out / "metrics.json", {
        "status": "finished", "tool": tool, "config": config.to_dict(), "encoder": str(encoder.source),
        "device": str(device), "train_file": str(train_file), "rows": read_report.n_rows,
        "skipped": len(read_report.bad_rows), **log, "torch_threads": torch.get_num_threads(),
        "wall_seconds": round(time.time() - started, 1)})
    print(f"{task.name} {args.loss}: {log['steps']} steps, loss {log['first_loss']:.4f} -> "
          f"{log['last_loss']:.4f} (means of the first and last {CURVE_EVERY} batches), "
          f"{log['seconds']:.0f} s -> {out / 'checkpoint'}", file=sys.stderr)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = _OneLineErrorParser(prog="python -m scripts.sentence_finetune",
                                 description=__doc__.split("\n\n")[0])
    parser.add_argument("--task", required=True,
                        help="; ".join(f"{name}: {BUILTIN_TASKS[name].description}" for name in TASK_CHOICES))
    parser.add_argument("--loss", default="lcl", help="ce: the task's head + cross-entropy; lcl: label-contrastive "
                                                      "loss on the pooled vectors, no head (default: lcl)")
    parser.add_argument("--out", required=True, help="a new folder for checkpoint/ and metrics.json")
    parser.add_argument("--max_steps", type=int, default=None, help="batches per epoch (default: the whole training set)")
    add_flags(parser, ModelConfig, only=("model", "pooling"), title="model")
    add_flags(parser, DataConfig, only=("data_dir", "max_length", "batch_size"), title="data")
    add_flags(parser, TrainConfig, only=("epochs", "lr", "head_lr", "weight_decay", "seed", "cl_temp", "device"),
              title="training", epochs=1, lr=3e-5)  # this tool's defaults where they differ from a run's
    add_refused(parser, SPLIT_FLAGS)
    return parser


def run_config(args: argparse.Namespace) -> RunConfig:
    """The flags as a ``RunConfig`` (checked: a ``ValueError`` naming the first flag out of range)."""
    if args.task not in TASK_CHOICES:
        raise ValueError(f"unknown --task {args.task!r}; choose one of {', '.join(TASK_CHOICES)}")
    if args.loss not in OBJECTIVES:
        raise ValueError(f"unknown --loss {args.loss!r}; choose one of {', '.join(OBJECTIVES)}")
    if args.max_steps is not None and args.max_steps < 1:
        raise ValueError(f"--max_steps must be at least 1, got {args.max_steps}")
    if args.epochs < 1:   # before the run's own check, which names stages this tool does not have
        raise ValueError(f"--epochs must be at least 1, got {args.epochs}")
    if args.loss == "lcl" and args.batch_size < 2:
        raise ValueError("--loss lcl needs --batch_size of at least 2 (it contrasts the sentences of a batch)")
    config = RunConfig.defaults(model=section_from_args(ModelConfig, args), data=section_from_args(DataConfig, args),
                                train=section_from_args(TrainConfig, args, tasks=args.task))
    return config.validate()


class SentenceObjective(Objective):
    """Labelled single-sentence batches with ``objective`` "ce" (``model.heads[head]`` + cross-entropy)
    or "lcl" (``label_contrastive_loss``, no head); ``max_steps`` caps the batches of each epoch."""

    name = "sentence_finetune"

    def __init__(self, model, loader, optimizer, config: RunConfig, objective: str, head: str | None,
                 max_steps: int | None):
        self.model, self.loader, self.optimizer, self.objective, self.head = model, loader, optimizer, objective, head
        self.epochs, self.temperature = config.train.epochs, config.train.cl_temp
        self.device = next(model.parameters()).device
        self.per_epoch = len(loader) if max_steps is None else min(len(loader), max_steps)
        self.losses: list[torch.Tensor] = []

    def batches(self, epoch: int):
        for i, batch in enumerate(self.loader):
            if i >= self.per_epoch:
                return
            if self.objective == "ce" or len(batch["ids"]) >= 2:  # lcl: a single sentence has nothing to contrast
                yield batch

    def steps(self) -> int:
        return self.per_epoch

    def loss(self, batch):
        labels, encoding = batch["labels"].to(self.device), to_device(batch["inputs"][0], self.device)
        if self.objective == "ce":
            loss = F.cross_entropy(self.model(self.head, [encoding]), labels)
        else:
            loss = label_contrastive_loss(self.model.embed(encoding), labels, self.temperature)
        self.losses.append(loss.detach())
        return loss, {self.objective: loss}

    def result(self, progress: dict) -> dict:
        """``{"steps", "examples", "loss_curve", "first_loss", "last_loss"}``; the curve's last point
        is the mean of the batches after the last full window."""
        if not self.losses:
            raise ValueError("no training step was taken (every batch had fewer than two sentences)")
        losses = [loss.item() for loss in self.losses]
        curve = [[min(end, len(losses)), round(_mean(losses[end - CURVE_EVERY:end]), 5)]
                 for end in range(CURVE_EVERY, len(losses) + CURVE_EVERY, CURVE_EVERY)]
        return {"steps": len(losses), "examples": sum(e["train_examples"] for e in progress["epochs"]),
                "loss_curve": curve, "first_loss": _mean(losses[:CURVE_EVERY]), "last_loss": _mean(losses[-CURVE_EVERY:])}


def _mean(values: list[float]) -> float:
    return sum(values) / len(values)


class _OneLineErrorParser(argparse.ArgumentParser):
    """argparse, but a usage error is one line (``prog: error: ...``) rather than usage + error."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


if __name__ == "__main__":
    sys.exit(main())
