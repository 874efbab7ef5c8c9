"""A final phase on some tasks alone, after a finished multi-task run: does training one task (STS)
at the end close its gap to single-task training without costing the others?

    python scripts/final_task_phase.py predictions/<run> --data_dir ../shared/data/multitask --tasks sts

Loads the run (encoder and every head), trains encoder and the named tasks' heads round-robin on
those tasks for ``--steps`` rounds (AdamW, ``--lr``/``--head_lr``, warmup then linear decay,
gradient-norm clip 1.0, no decay on biases and LayerNorm, as the default run), and prints the dev
metrics of every task before, every ``--eval_every`` rounds and after. Writes nothing. The result is
in docs/defaults.md.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from data.batching import make_loader  # noqa: E402
from data.readers import read_examples, resolve_data_dir  # noqa: E402
from minbert import AdamW, decay_groups  # noqa: E402
from training import load_run  # noqa: E402
from training.evaluate import predict  # noqa: E402
from training.loop import clip_grad_norm, warmup_then_linear_decay  # noqa: E402
from training.tasks import TASKS, format_metrics, overall_score  # noqa: E402


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run", help="a finished run folder")
    parser.add_argument("--data_dir", help="the CS224N CSVs (default: $MINBERT_DATA, then ./data)")
    parser.add_argument("--tasks", default="sts", help="tasks of the final phase, comma-separated (default: sts)")
    parser.add_argument("--steps", type=int, default=189, help="round-robin rounds (default: 189, one epoch of STS)")
    parser.add_argument("--lr", type=float, default=1e-4)
    parser.add_argument("--head_lr", type=float, default=1e-3)
    parser.add_argument("--warmup_ratio", type=float, default=0.1)
    parser.add_argument("--eval_every", type=int, default=0, help="rounds between dev evaluations (0: at the end)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    torch.manual_seed(args.seed)
    run = load_run(args.run)
    model, trained = run.model, args.tasks.split(",")
    names = list(model.heads)
    data_dir = resolve_data_dir(args.data_dir, [TASKS[n].files[s] for n in names for s in ("train", "dev")])

    def loader(name: str, split: str, shuffle: bool):
        task = TASKS[name]
        examples, _ = read_examples(data_dir / task.files[split], task.text_columns, task.label_column,
                                    task.label_type, task.num_classes, task.score_range)
        return make_loader(examples, run.tokenizer, run.config.data.max_length, run.config.data.batch_size,
                           shuffle=shuffle, seed=args.seed, bucket=True)

    dev = {name: loader(name, "dev", False) for name in names}

    def evaluate(label: str) -> None:
        metrics = {n: predict(model, TASKS[n], dev[n], torch.device("cpu"), None, False).score(TASKS[n])
                   for n in names}
        print(f"{label}: dev {format_metrics(metrics, 4)} overall {overall_score(metrics):.4f}", flush=True)

    train = {name: loader(name, "train", True) for name in trained}
    groups = decay_groups(model.bert.named_parameters(), 0.01, lr=args.lr)
    groups += decay_groups([(n, p) for t in trained for n, p in model.heads[t].named_parameters()], 0.01,
                           lr=args.head_lr)
    optimizer = AdamW(groups, lr=args.lr)
    schedule = warmup_then_linear_decay(args.warmup_ratio)(optimizer, args.steps * len(trained))
    evaluate("before")
    model.train()
    iterators, started = {n: iter(l) for n, l in train.items()}, time.time()
    for step in range(1, args.steps + 1):
        for name in trained:
            batch = next(iterators[name], None)
            if batch is None:   # that task's data is used up: start it over
                iterators[name] = iter(train[name])
                batch = next(iterators[name])
            loss = TASKS[name].loss(model(name, batch["inputs"]), batch["labels"])
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            clip_grad_norm([p for g in optimizer.param_groups for p in g["params"]], 1.0)
            optimizer.step()
            schedule.step()
        if args.eval_every and step % args.eval_every == 0 and step < args.steps:
            evaluate(f"round {step}")
    evaluate(f"after {args.steps} rounds ({time.time() - started:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
