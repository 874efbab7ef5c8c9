"""Fine-tune the encoder on one labelled single-sentence task (SST, CFIMDB) with cross-entropy or
a label-contrastive loss, and save it for the embedding evaluations.

    python -m training.sentence_finetune --task sst --loss lcl --data_dir ../shared/data/cs224n \\
        --out predictions/lcl_study/runs/sst-lcl --max_steps 150
    python -m training.probe --checkpoint predictions/lcl_study/runs/sst-lcl --task sst \\
        --data_dir ../shared/data/cs224n --pooling mean

Two objectives on the pooled sentence vector u = pool(BERT(x)) (``heads.pooling``, ``--pooling``):

- ``ce``: a fresh head (dropout + linear, ``heads.SentimentHead``) on u, cross-entropy against the
  class. The encoder learns at ``--lr``, the head at ``--head_lr`` (1e-3, as in the multi-task runs).
- ``lcl``: no head; the loss is on the batch's pooled vectors themselves,
  ``training.losses.label_contrastive_loss`` — supervised contrastive learning (Khosla et al. 2020,
  "Supervised Contrastive Learning", §3.2), used to fine-tune a pretrained language model by
  Gunel et al. 2021 ("Supervised Contrastive Learning for Pre-trained Language Model
  Fine-tuning", §2), here in its KL form and alone (Gunel et al. mix it with cross-entropy):

      S_ij = cos(u_i, u_j) / τ,   T_ij = [y_i = y_j] / Σ_{k≠i} [y_i = y_k]   (j ≠ i; rows of Y·Yᵀ, normalised)
      L    = mean over rows i with a same-class neighbour of KL(T_i ‖ softmax_{j≠i}(S_i))

  Batches of fewer than two sentences have no pair to contrast and are skipped.

The task's files and columns come from ``training.probe.PROBE_TASKS`` (one table for both tools).
``train_sentences`` is the loop itself, on any ``heads.MultitaskBert``, so a training stage can
reuse it. The output folder (refused if it already holds files) gets

- ``checkpoint/``: ``model.safetensors`` (the encoder as ``bert.*``; with ``ce`` also the head as
  ``heads.<task>.*``), ``config.json`` (``{"bert": BertConfig, "run": this run's settings}``) and
  the model's ``vocab.txt`` — the layout of ``training.checkpoint.save_checkpoint``, which
  ``training.probe --checkpoint`` and ``training.evaluate_embeddings --checkpoint`` read (either the
  folder or ``checkpoint/``);
- ``metrics.json``: settings, steps, examples, wall and CPU seconds, the loss curve (mean of every
  10 batches).
"""
from __future__ import annotations

import argparse
import math
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Sequence

import torch
import torch.nn.functional as F
from tqdm.auto import tqdm

from data.batching import make_loader
from data.readers import DataError, resolve_data_dir
from heads import MultitaskBert, SentimentHead, pooled_size
from heads.pooling import POOLING_MODES
from minbert import AdamW, WeightsError
from minbert.atomic import write_text_atomic

from .checkpoint import save_checkpoint
from .evaluate import pick_device, to_device
from .evaluate_embeddings import load_encoder
from .losses import label_contrastive_loss
from .outputs import write_json
from .probe import PROBE_TASKS, read_split

OBJECTIVES = ("ce", "lcl")
CURVE_EVERY = 10  # batches per point of the logged loss curve


@dataclass
class FinetuneSettings:
    """Everything that shapes one fine-tuning run (the flags of ``main``, recorded in the checkpoint)."""

    task: str
    loss: str = "lcl"                 # "ce" or "lcl"
    model: str | None = None          # HF-format BERT directory; None = the embedded model
    pooling: str = "mean"
    epochs: int = 1
    max_steps: int | None = None      # batches per epoch (None: the whole training set)
    batch_size: int = 32
    lr: float = 3e-5
    head_lr: float = 1e-3
    weight_decay: float = 0.01
    temp: float = 0.05
    max_length: int = 128
    seed: int = 11711


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    settings = FinetuneSettings(**{k: v for k, v in vars(args).items() if k not in ("data_dir", "out", "device")})
    started = time.time()
    try:
        check_settings(settings)
        out = Path(args.out)
        if out.exists() and (not out.is_dir() or any(out.iterdir())):
            raise ValueError(f"--out {out} already holds files; give a new folder")
        task = PROBE_TASKS[settings.task]
        data_dir = resolve_data_dir(args.data_dir, [task.files["train"]])
        examples, read_report = read_split(data_dir / task.files["train"], task)
        device = pick_device(args.device)
        bert, tokenizer, source = load_encoder(None, settings.model)
    except (DataError, WeightsError, ValueError, FileNotFoundError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1

    torch.manual_seed(settings.seed)  # the head's initialisation and the dropout masks
    heads = {}
    if settings.loss == "ce":
        heads[task.name] = SentimentHead(pooled_size(bert.config.hidden_size, settings.pooling), task.num_classes,
                                         bert.config.hidden_dropout_prob)
    model = MultitaskBert(bert, heads, settings.pooling).to(device)
    loader = make_loader(examples, tokenizer, settings.max_length, settings.batch_size, shuffle=True,
                         seed=settings.seed, bucket=True)
    print(f"{task.name}: {len(examples)} training sentences from {data_dir / task.files['train']}; "
          f"encoder {source}; loss {settings.loss}; device {device}", file=sys.stderr)
    log = train_sentences(model, loader, settings.loss, head=task.name if heads else None,
                          epochs=settings.epochs, max_steps=settings.max_steps, lr=settings.lr,
                          head_lr=settings.head_lr, weight_decay=settings.weight_decay,
                          temperature=settings.temp, device=device, desc=f"{task.name} {settings.loss}")

    state = {f"bert.{k}": v for k, v in model.bert.state_dict().items()}
    state.update({f"heads.{k}": v for k, v in model.heads.state_dict().items()})
    run_config = {"kind": "sentence_finetune", **asdict(settings), "model": {"model": settings.model},
                  "data_dir": str(data_dir), "encoder": source}
    save_checkpoint(out / "checkpoint", state, model.bert.config, run_config)
    write_text_atomic(out / "checkpoint" / "vocab.txt",
                      (Path(source) / "vocab.txt").read_text(encoding="utf-8"))
    metrics = {"status": "finished", "settings": asdict(settings), "encoder": source, "device": str(device),
               "train_file": str(data_dir / task.files["train"]), "rows": read_report.n_rows,
               "skipped": len(read_report.bad_rows), **log,
               "torch_threads": torch.get_num_threads(), "wall_seconds": round(time.time() - started, 1)}
    write_json(out / "metrics.json", metrics)
    print(f"{task.name} {settings.loss}: {log['steps']} steps, loss {log['first_loss']:.4f} -> "
          f"{log['last_loss']:.4f} (means of the first and last {CURVE_EVERY} batches), "
          f"{log['seconds']:.0f} s -> {out / 'checkpoint'}", file=sys.stderr)
    return 0


def build_parser() -> argparse.ArgumentParser:
    defaults = FinetuneSettings(task="sst")
    parser = _OneLineErrorParser(prog="python -m training.sentence_finetune", description=__doc__.split("\n\n")[0])
    parser.add_argument("--task", required=True,
                        help="; ".join(f"{t.name}: {t.description}" for t in PROBE_TASKS.values()))
    parser.add_argument("--loss", default=defaults.loss,
                        help="ce: linear head + cross-entropy; lcl: label-contrastive loss on the pooled vectors, "
                             f"no head (default: {defaults.loss})")
    parser.add_argument("--data_dir", default=None,
                        help="folder with the task's training file (default: $MINBERT_DATA, else ./data)")
    parser.add_argument("--out", required=True, help="a new folder for checkpoint/ and metrics.json")
    parser.add_argument("--model", default=None,
                        help="local HF-format BERT directory or the embedded model's name (default: the embedded model)")
    parser.add_argument("--pooling", default=defaults.pooling,
                        help=f"pooling mode, one of {', '.join(POOLING_MODES)} (default: {defaults.pooling})")
    parser.add_argument("--epochs", type=int, default=defaults.epochs, help=f"default: {defaults.epochs}")
    parser.add_argument("--max_steps", type=int, default=None,
                        help="batches per epoch (default: the whole training set)")
    parser.add_argument("--batch_size", type=int, default=defaults.batch_size, help=f"default: {defaults.batch_size}")
    parser.add_argument("--lr", type=float, default=defaults.lr, help=f"encoder learning rate (default: {defaults.lr})")
    parser.add_argument("--head_lr", type=float, default=defaults.head_lr,
                        help=f"learning rate of the ce head (default: {defaults.head_lr})")
    parser.add_argument("--weight_decay", type=float, default=defaults.weight_decay,
                        help=f"AdamW decoupled weight decay (default: {defaults.weight_decay})")
    parser.add_argument("--temp", type=float, default=defaults.temp,
                        help=f"temperature τ of the lcl loss (default: {defaults.temp})")
    parser.add_argument("--max_length", type=int, default=defaults.max_length,
                        help=f"word pieces per sentence (default: {defaults.max_length})")
    parser.add_argument("--seed", type=int, default=defaults.seed,
                        help=f"seed of the head, dropout and batch order (default: {defaults.seed})")
    parser.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"], help="default: cuda if available")
    return parser


def check_settings(s: FinetuneSettings) -> None:
    """A ``ValueError`` naming the first flag out of range."""
    if s.task not in PROBE_TASKS:
        raise ValueError(f"unknown --task {s.task!r}; choose one of {', '.join(PROBE_TASKS)}")
    if s.loss not in OBJECTIVES:
        raise ValueError(f"unknown --loss {s.loss!r}; choose one of {', '.join(OBJECTIVES)}")
    if s.pooling not in POOLING_MODES:
        raise ValueError(f"unknown --pooling {s.pooling!r}; choose one of {', '.join(POOLING_MODES)}")
    for name in ("epochs", "batch_size", "max_length"):
        if getattr(s, name) < 1:
            raise ValueError(f"--{name} must be at least 1, got {getattr(s, name)}")
    if s.max_steps is not None and s.max_steps < 1:
        raise ValueError(f"--max_steps must be at least 1, got {s.max_steps}")
    if s.loss == "lcl" and s.batch_size < 2:
        raise ValueError("--loss lcl needs --batch_size of at least 2 (it contrasts the sentences of a batch)")
    if not s.temp > 0:
        raise ValueError(f"--temp must be > 0, got {s.temp}")
    for name in ("lr", "head_lr", "weight_decay"):
        if not (math.isfinite(getattr(s, name)) and getattr(s, name) >= 0):
            raise ValueError(f"--{name} must be a finite number >= 0, got {getattr(s, name)}")


# ---------------------------------------------------------------------------------------------
# the training loop


def train_sentences(model: MultitaskBert, loader, objective: str, *, head: str | None, epochs: int,
                    max_steps: int | None, lr: float, head_lr: float, weight_decay: float, temperature: float,
                    device: torch.device, desc: str = "finetune") -> dict:
    """Train ``model`` in place on labelled single-sentence batches of ``loader`` (``data.batching``:
    one text column, class labels) with ``objective`` "ce" (``model.heads[head]`` + cross-entropy)
    or "lcl" (``label_contrastive_loss`` on ``model.embed``; ``head`` is not used or trained).

    One AdamW: the encoder's trainable parameters at ``lr``, the head's (ce) at ``head_lr``.
    ``max_steps`` caps the batches of each epoch. Returns the log:
    ``{"steps", "examples", "seconds", "cpu_seconds", "loss_curve": [[step, mean of CURVE_EVERY batches]],
    "first_loss", "last_loss"}`` (``cpu_seconds``: this process's CPU time, the cost on a shared machine).
    """
    if objective not in OBJECTIVES:
        raise ValueError(f"unknown objective {objective!r}; choose one of {', '.join(OBJECTIVES)}")
    if objective == "ce" and head not in model.heads:
        raise ValueError(f"objective ce needs a head; the model has {sorted(model.heads) or 'none'}, asked for {head!r}")
    groups = [{"params": [p for p in model.bert.parameters() if p.requires_grad], "lr": lr}]
    if objective == "ce":
        groups.append({"params": [p for p in model.heads[head].parameters() if p.requires_grad], "lr": head_lr})
    optimizer = AdamW([g for g in groups if g["params"]], lr=lr, weight_decay=weight_decay)
    per_epoch = len(loader) if max_steps is None else min(len(loader), max_steps)
    losses: list[float] = []
    examples, started, cpu_started = 0, time.time(), time.process_time()
    model.train()
    bar = tqdm(total=epochs * per_epoch, desc=desc, dynamic_ncols=True)
    for _ in range(epochs):
        for i, batch in enumerate(loader):
            if i >= per_epoch:
                break
            bar.update(1)
            labels = batch["labels"].to(device)
            if objective == "lcl" and len(labels) < 2:  # nothing to contrast
                continue
            encoding = to_device(batch["inputs"][0], device)
            if objective == "ce":
                loss = F.cross_entropy(model(head, [encoding]), labels)
            else:
                loss = label_contrastive_loss(model.embed(encoding), labels, temperature)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
            examples += len(labels)
            bar.set_postfix(loss=f"{losses[-1]:.4f}")
    bar.close()
    if not losses:
        raise ValueError("no training step was taken (every batch had fewer than two sentences)")
    curve = [[min(end, len(losses)), round(_mean(losses[end - CURVE_EVERY:end]), 5)]
             for end in range(CURVE_EVERY, len(losses) + CURVE_EVERY, CURVE_EVERY)]
    return {"steps": len(losses), "examples": examples, "seconds": round(time.time() - started, 1),
            "cpu_seconds": round(time.process_time() - cpu_started, 1),
            "loss_curve": curve, "first_loss": _mean(losses[:CURVE_EVERY]), "last_loss": _mean(losses[-CURVE_EVERY:])}


def _mean(values: list[float]) -> float:
    return sum(values) / len(values)


class _OneLineErrorParser(argparse.ArgumentParser):
    """argparse, but a usage error is one line (``prog: error: ...``) rather than usage + error."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


if __name__ == "__main__":
    sys.exit(main())
