"""One SST training epoch, end to end, for three ways of batching: fixed-width padding, dynamic
padding, and length buckets — seconds, padding, and dev accuracy after the epoch.

    python -m bench.sst_epoch [--data_dir DIR] [--model DIR] [--variants fixed,dynamic,bucket]
                              [--batch_size 32] [--max_length 128] [--max_batches N]
                              [--attention {manual,auto}] [--threads N] [--seed 11711] [--out FILE.json]

Why. ``bench/throughput.py`` times one training step on a fixed B × L batch, so it cannot show
what batching saves: how many padding tokens a real epoch pushes through the encoder. Here the
same model trains on the same SST sentences three times, and only the batching differs:

  * ``fixed``: every batch right-padded to ``--max_length`` word pieces (input ids with [PAD],
    attention mask and token types with 0), as in code without dynamic padding. The batches are
    ``dynamic``'s batches — the same sampler, seed and order — widened by a collate wrapper in this
    file (``FixedWidthCollator``); the library has no such mode;
  * ``dynamic``: the project's default loader, ``make_loader(..., shuffle=True)``: each batch is
    padded to its longest sentence;
  * ``bucket``: ``make_loader(..., bucket=True)``: shuffled batches of similar-length sentences
    (``data.batching.BucketBatchSampler``), so the longest in a batch is close to the rest.

What each variant runs, exactly as ``run_multitask.py`` would with its defaults (the RunConfig
comes from ``run_multitask.parse_config``): ``seed_everything(--seed)``; the model of
``training.harness.runs.build_model`` (pretrained encoder + freshly initialised heads, so every
variant starts from identical weights); ``set_attention(--attention)``; our ``AdamW`` with the
run's parameter groups (encoder at lr 5e-5, heads at 1e-3, weight decay 0.01); the SST training
loader seeded as the run seeds it; one optimizer step per batch through the run's training loop
(``training.learning.loop``: SST's cross-entropy, zero_grad, backward, step, ``loss.item()``).

What is timed: the wall time of the whole training epoch, from building the loader (for ``bucket``
that includes tokenising every sentence once more for its length key) through fetching and
collating every batch (tokenisation, padding, tensors) and every optimizer step, to the end of the
last one. Reading the CSV and building the model are common to all variants and not timed; nor is
the dev evaluation (timed apart, as ``eval_seconds``). Before the first variant a throw-away model
takes two untimed steps on one full-width batch, so thread pools, allocator and lazy
initialisation are warm for every variant alike. The variants run one after the other in
``--variants`` order on an otherwise idle machine; compare numbers from the same run.

Reported per variant: batches, padding = tokens after padding / real tokens (attention-mask ones)
over the epoch's training batches, training seconds, training examples/s, speed-up over ``fixed``
and over ``dynamic`` (their seconds over this variant's), the mean training loss, and SST dev
accuracy after the epoch through ``training.learning.evaluate.predict``, with the variant's own loader,
unshuffled (``fixed``: padded to ``--max_length``; ``bucket``: shortest sentences first — the
accuracy does not depend on the order). ``--max_batches N`` caps both the training and the dev
batches, for quick checks only: the epoch is then partial and the accuracy is on part of dev.
With ``--out`` everything is also written to a JSON file (atomically).
"""
from __future__ import annotations

import argparse
import itertools
import json
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader

import run_multitask
from training.data.batching import make_loader
from training.data.readers import resolve_data_dir
from minbert import BertTokenizer
from minbert.atomic import write_text_atomic
from minbert.weights import resolve_model_dir
from training.learning.recipe import ParamSet, build_adamw
from training.configuration.sections import DataConfig, ModelConfig, SpeedConfig, TrainConfig, add_flags
from training.harness.distributed import pick_device
from training.learning.evaluate import predict
from training.learning.loop import TrainingLoop
from training.learning.objective import Objective
from training.learning.precision import Precision
from training.harness.run_log import RunLog
from training.harness.runs import build_model, tokenizer_for
from training.learning.task_loss import TaskLoss
from training.learning.task_schema import BUILTIN_TASKS, run_tasks
from training.learning.rng import seed_everything

VARIANTS = ("fixed", "dynamic", "bucket")
TASK = BUILTIN_TASKS["sst"]


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    config = run_multitask.parse_config(
        ["--max_length", str(args.max_length), "--batch_size", str(args.batch_size), "--seed", str(args.seed),
         "--attention", args.attention, "--device", args.device]
        + (["--model", args.model] if args.model else []) + (["--data_dir", args.data_dir] if args.data_dir else []))
    config.validate()
    device = pick_device(config.train.device)
    data_dir = resolve_data_dir(config.data.data_dir, [TASK.files["train"], TASK.files["dev"]])
    model_dir = resolve_model_dir(config.model.model)
    tokenizer = tokenizer_for(model_dir)
    train, dev = (read_split(data_dir, split) for split in ("train", "dev"))

    bench = SstEpoch(config, model_dir, tokenizer, device, args.max_batches)
    print(f"model: {model_dir}   data: {data_dir}   device: {device}")
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; SST train {len(train)}, dev {len(dev)}; "
          f"batch {args.batch_size}, max_length {args.max_length}, attention {args.attention}, seed {args.seed}"
          + (f"; capped at {args.max_batches} batches" if args.max_batches else ""))
    bench.warm_up(train)

    results = {}
    for variant in args.variants:
        results[variant] = bench.run(variant, train, dev)
        r = results[variant]
        print(f"  {variant}: {r['batches']} batches in {r['train_seconds']:.1f} s, "
              f"dev acc {r['dev_accuracy']:.4f} ({r['eval_seconds']:.1f} s)", flush=True)
    add_speedups(results)
    print()
    print(format_table(results))
    report = {
        "benchmark": "sst_epoch",
        "settings": {"data_dir": str(data_dir), "model": str(model_dir), "device": str(device),
                     "torch": torch.__version__, "threads": torch.get_num_threads(),
                     "batch_size": args.batch_size, "max_length": args.max_length, "attention": args.attention,
                     "adamw": config.speed.adamw, "seed": args.seed, "max_batches": args.max_batches,
                     "train_examples": len(train), "dev_examples": len(dev)},
        "variants": results,
    }
    if args.out:
        write_text_atomic(args.out, json.dumps(report, indent=2) + "\n")
        print(f"\nwrote {args.out}")
    return report


def parse_args(argv):
    parser = argparse.ArgumentParser(prog="python -m bench.sst_epoch", description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--variants", type=_variant_list, default=list(VARIANTS),
                        help="comma-separated, run in this order (fixed,dynamic,bucket)")
    parser.add_argument("--max_batches", type=int, default=None,
                        help="cap on training and on dev batches per variant (quick checks only)")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (default: torch's choice)")
    parser.add_argument("--out", default=None, help="also write the results to this JSON file")
    add_flags(parser, ModelConfig, only=("model",))
    add_flags(parser, DataConfig, only=("data_dir", "batch_size", "max_length"))
    add_flags(parser, SpeedConfig, only=("attention",))
    add_flags(parser, TrainConfig, only=("device", "seed"), device="cpu")
    args = parser.parse_args(argv)
    if args.batch_size < 1 or args.max_length < 3 or (args.max_batches is not None and args.max_batches < 1):
        parser.error("--batch_size and --max_batches must be >= 1, --max_length >= 3")
    return args


def _variant_list(text: str) -> list[str]:
    names = [x for x in text.replace(" ", ",").split(",") if x]
    unknown = [x for x in names if x not in VARIANTS]
    if unknown or not names or len(set(names)) != len(names):
        raise argparse.ArgumentTypeError(f"want distinct names from {','.join(VARIANTS)}, got {text!r}")
    return names


def read_split(data_dir: Path, split: str):
    examples, report = TASK.read(data_dir / TASK.files[split])
    if report.bad_rows:
        print(f"warning: {report.summary()}")
    return examples


class FixedWidthCollator:
    """The project's collate, then every encoding right-padded to ``width`` columns: input ids with
    the tokenizer's [PAD] id, attention mask and token types with 0 — what a batch looks like when
    the tokenizer pads to ``max_length`` instead of to the longest sentence."""

    def __init__(self, collate, width: int, pad_id: int):
        self.collate, self.width, self.pad_id = collate, width, pad_id

    def __call__(self, batch):
        out = self.collate(batch)
        out["inputs"] = [{key: F.pad(value, (0, self.width - value.shape[1]),
                                     value=self.pad_id if key == "input_ids" else 0)
                          for key, value in encoding.items()}
                         for encoding in out["inputs"]]
        return out


def make_variant_loader(variant: str, examples, tokenizer: BertTokenizer, max_length: int, batch_size: int,
                        shuffle: bool, seed: int) -> DataLoader:
    """``data.batching.make_loader`` for ``dynamic``/``bucket``; for ``fixed``, the dynamic loader's
    sampler and generator (same batches, same order) with ``FixedWidthCollator``."""
    loader = make_loader(examples, tokenizer, max_length, batch_size, shuffle=shuffle, seed=seed,
                         bucket=variant == "bucket")
    if variant != "fixed":
        return loader
    return DataLoader(loader.dataset, batch_sampler=loader.batch_sampler, generator=loader.generator,
                      collate_fn=FixedWidthCollator(loader.collate_fn, max_length, tokenizer.pad_token_id),
                      num_workers=0)


class SstStep(Objective):
    """One SST training step of a multi-task run: the task loss, taken by ``TrainingLoop.step``."""

    def __init__(self, task_loss: TaskLoss, optimizer, loop: TrainingLoop):
        self.task_loss, self.optimizer, self.loop = task_loss, optimizer, loop

    def loss(self, batch):
        return self.task_loss([(TASK.name, batch)])

    def step(self, batches: dict) -> dict[str, float]:
        losses, _ = self.loop.step(self, batches[TASK.name])   # (each part's loss, the gradient norm)
        return losses


class SstEpoch:
    """Builds the run's model and optimizer and trains / evaluates one variant."""

    def __init__(self, config, model_dir: Path, tokenizer: BertTokenizer, device: torch.device,
                 max_batches: int | None):
        self.config, self.model_dir, self.tokenizer, self.device = config, model_dir, tokenizer, device
        self.max_batches = max_batches

    def new_model(self):
        model = build_model(self.config.model, run_tasks(self.config), self.model_dir).to(self.device)
        model.bert.set_attention(self.config.speed.attention)
        return model

    def new_step(self, model) -> "SstStep":
        """Our AdamW over the run's parameter groups, stepped by the run's training loop."""
        t = self.config.train
        optimizer = build_adamw(t, self.config.speed, [ParamSet(model.bert.named_parameters()),
                                                       ParamSet(model.heads.named_parameters(), lr=t.head_lr)], t.lr)
        return SstStep(TaskLoss(model, {"sst": TASK}, self.device), optimizer,
                       TrainingLoop(Precision("off", self.device), RunLog(quiet=True)))

    def warm_up(self, train) -> None:
        """Two untimed steps of a throw-away model on one full-width batch."""
        seed_everything(self.config.train.seed)
        model = self.new_model()
        positions = model.bert.config.max_position_embeddings
        if self.config.data.max_length > positions:  # a fixed batch would index past the position table
            raise SystemExit(f"--max_length {self.config.data.max_length} exceeds the model's {positions} "
                             "position embeddings")
        model.train()
        step = self.new_step(model)
        batch = next(iter(make_variant_loader("fixed", train, self.tokenizer, self.config.data.max_length,
                                              self.config.data.batch_size, True, self.config.train.seed)))
        for _ in range(2):
            step.step({TASK.name: batch})

    def run(self, variant: str, train, dev) -> dict:
        c = self.config
        seed_everything(c.train.seed)
        model = self.new_model()
        model.train()
        step = self.new_step(model)
        losses, padded, real, widths, examples = [], 0, 0, [], 0

        started = time.perf_counter()
        # seeded as run_multitask seeds the SST training loader (the multi-task stage: seed + task index 0)
        loader = make_variant_loader(variant, train, self.tokenizer, c.data.max_length, c.data.batch_size,
                                     True, c.train.seed)
        loader_seconds = time.perf_counter() - started
        for batch in itertools.islice(loader, self.max_batches):
            mask = batch["inputs"][0]["attention_mask"]
            padded += mask.numel()
            real += int(mask.sum())
            widths.append(mask.shape[1])
            examples += len(batch["ids"])
            losses.append(step.step({TASK.name: batch})[TASK.name])
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        train_seconds = time.perf_counter() - started

        started = time.perf_counter()
        dev_loader = make_variant_loader(variant, dev, self.tokenizer, c.data.max_length, c.data.batch_size,
                                         False, 0)
        predictions = predict(model, TASK, itertools.islice(dev_loader, self.max_batches), self.device,
                              progress_bar=False)
        eval_seconds = time.perf_counter() - started
        return {
            "batches": len(widths),
            "train_examples": examples,
            "padded_tokens": padded,
            "real_tokens": real,
            "padding_ratio": padded / max(real, 1),
            "min_width": min(widths, default=0),
            "max_width": max(widths, default=0),
            "mean_width": sum(widths) / max(len(widths), 1),
            "loader_seconds": loader_seconds,
            "train_seconds": train_seconds,
            "examples_per_second": examples / max(train_seconds, 1e-9),
            "train_loss": sum(losses) / max(len(losses), 1),
            "dev_examples": len(predictions.ids),
            "dev_accuracy": predictions.score(TASK),
            "eval_seconds": eval_seconds,
        }


def add_speedups(results: dict) -> None:
    """``speedup_vs_fixed`` / ``speedup_vs_dynamic``: that variant's seconds over this one's
    (None when that variant was not run)."""
    for base in ("fixed", "dynamic"):
        for r in results.values():
            r[f"speedup_vs_{base}"] = (results[base]["train_seconds"] / max(r["train_seconds"], 1e-9)
                                       if base in results else None)


def format_table(results: dict) -> str:
    header = (f"{'variant':8s} {'batches':>7s} {'padded/real':>11s} {'train s':>8s} {'examples/s':>10s} "
              f"{'vs fixed':>8s} {'vs dynamic':>10s} {'dev acc':>7s}")
    lines = [header, "-" * len(header)]
    for name, r in results.items():
        ratios = [f"{r[k]:.2f}x" if r[k] is not None else "-" for k in ("speedup_vs_fixed", "speedup_vs_dynamic")]
        lines.append(f"{name:8s} {r['batches']:7d} {r['padding_ratio']:11.2f} {r['train_seconds']:8.1f} "
                     f"{r['examples_per_second']:10.1f} {ratios[0]:>8s} {ratios[1]:>10s} {r['dev_accuracy']:7.4f}")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
