"""What a configuration costs per training step: the run's multi-task model built for each side's
flags, stepped on the same real batches in turns, each step timed alone.

    python -m bench.steps --data_dir ../shared/data/multitask [--side FLAGS ...] [--rounds 60] [--threads 2]

Sides default to ``--private_layers 0`` and ``--private_layers 2`` (a round-robin step trains one
task's batch through the shared bottom and that task's top layers, its tower or the encoder's own
for the home task, so a tower should cost memory, not time); ``--side "--smart"`` etc. time an
extension's step (its regularizer's extra passes included). Why in one process: whole runs
(``bench.interleaved_runs``) carry start-up, tokenising and evaluation, whose run-to-run spread (±6 %
at 40 rounds here) hides a few per cent; here every model is built once, as ``training/harness/trainer.py``
builds it (the run's AdamW groups, speed flags, sparse word-embedding rows, the extensions'
regularizers), warmed up, and every round gives each side the same SST, QQP and STS batch, the side
going first rotating from round to round. Only ``TrainingLoop.step`` is timed (forward, loss and
regularizer passes, backward, clipping, optimizer step). Reported: each side's median seconds per
step, examples per second, and its examples per second over the first side's.
"""
from __future__ import annotations

import argparse
import shlex
import statistics
import time

import torch

import run_multitask
from bench import glued_sides
from training.data.readers import resolve_data_dir
from minbert.weights import resolve_model_dir
from training.learning.loop import TrainingLoop
from training.learning.objective import Objective
from training.learning.precision import Precision
from training.harness.run_log import RunLog
from training.harness.runs import build_model, tokenizer_for
from training.learning.task_loss import TaskLoss
from training.configuration.task_declarations import DEFAULT_TASKS
from training.learning.task_schema import BUILTIN_TASKS, run_tasks
from training.learning.recipe import loader_for, run_adamw, set_speed
from training.learning.rng import seed_everything


class Side(Objective):
    """One configuration's model, optimizer and loop; ``step(task, batch)`` is one timed training step."""

    def __init__(self, flags: list[str], model_dir, device: torch.device):
        self.config = run_multitask.parse_config(flags)
        self.config.validate()
        t = self.config.train
        seed_everything(t.seed)
        self.model = build_model(self.config.model, run_tasks(self.config), model_dir).to(device)
        self.optimizer = run_adamw(self.config, self.model)
        forward_model = set_speed(self.model, self.config)
        self.task_loss = TaskLoss(self.model, run_tasks(self.config), device, self.config.plugins().regularizers(self.model),
                                  forward_model=forward_model)
        self.loop = TrainingLoop(Precision("off", device), RunLog(quiet=True), max_grad_norm=t.max_grad_norm)
        self.model.train()
        self.task, self.seconds = None, []

    def loss(self, batch):
        return self.task_loss([(self.task, batch)])

    def after_step(self) -> None:
        self.task_loss.after_step()

    def step(self, task: str, batch: dict, timed: bool = True) -> None:
        self.task = task
        started = time.perf_counter()
        self.loop.step(self, batch)
        if timed:
            self.seconds.append(time.perf_counter() - started)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.steps", description=__doc__.split("\n\n")[0])
    parser.add_argument("--data_dir", default=None, help="the CS224N files (default: as run_multitask finds them)")
    parser.add_argument("--model", default=None, help="an HF-format BERT folder (default: the embedded model)")
    parser.add_argument("--batch_size", type=int, default=32, help="examples per batch (default: 32, the run's)")
    parser.add_argument("--max_length", type=int, default=128, help="word pieces per sentence (default: 128)")
    parser.add_argument("--side", action="append", default=None, metavar="FLAGS",
                        help="run_multitask.py flags of one side, quoted; repeat for each side "
                             "(default: --private_layers 0, then --private_layers 2)")
    parser.add_argument("--rounds", type=int, default=60, help="timed rounds, one batch of each task (default: 60)")
    parser.add_argument("--warmup", type=int, default=3, help="untimed rounds first (default: 3)")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (default: torch's choice)")
    args = parser.parse_args(glued_sides(argv))
    flags = args.side or ["--private_layers 0", "--private_layers 2"]
    if len(set(flags)) != len(flags):
        parser.error("two --side options give the same flags")
    if args.threads:
        torch.set_num_threads(args.threads)
    common = [*(["--data_dir", args.data_dir] if args.data_dir else []), *(["--model", args.model] if args.model else []),
              "--batch_size", str(args.batch_size), "--max_length", str(args.max_length)]
    probe = run_multitask.parse_config(common)
    data_dir = resolve_data_dir(probe.data.data_dir)
    model_dir = resolve_model_dir(probe.model.model)
    device = torch.device("cpu")
    sides = {side: Side([*common, *shlex.split(side)], model_dir, device) for side in flags}
    loader = loader_for(probe, tokenizer_for(model_dir))
    batches = {}
    for name in DEFAULT_TASKS:
        examples, _ = BUILTIN_TASKS[name].read(data_dir / BUILTIN_TASKS[name].files["train"])
        batches[name] = endless(loader(examples, probe.data.batch_size, shuffle=True, seed=probe.train.seed))
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, {torch.backends.cpu.get_cpu_capability()}; "
          f"{args.warmup} + {args.rounds} rounds of {', '.join(DEFAULT_TASKS)}, batch {probe.data.batch_size}")
    examples = 0
    for round_ in range(args.warmup + args.rounds):
        shift = round_ % len(sides)
        order = list(sides.values())[shift:] + list(sides.values())[:shift]
        for name in DEFAULT_TASKS:
            batch = next(batches[name])
            for side in order:
                side.step(name, batch, timed=round_ >= args.warmup)
            examples += len(batch["ids"]) if round_ >= args.warmup else 0
    print("| side | median s/step | mean s/step | examples/s | examples/s vs the first |\n|---|--:|--:|--:|--:|")
    base = sum(next(iter(sides.values())).seconds)
    for flags_, side in sides.items():
        total = sum(side.seconds)
        print(f"| {flags_} | {statistics.median(side.seconds):.4f} | {total / len(side.seconds):.4f} | "
              f"{examples / total:.1f} | {base / total:.3f} |")
    return 0


def endless(loader):
    """The loader's batches, epoch after epoch (a small training set runs out before the rounds do)."""
    while True:
        yield from loader


if __name__ == "__main__":
    raise SystemExit(main())
