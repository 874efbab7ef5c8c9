"""Where a training step's time goes: ``torch.profiler``'s self CPU time of each side of
``bench.throughput``, summed by kind of op (matmuls, optimizer, copies, dropout masks, ...), in ms per step.

    python -m bench.step_profile [--model DIR] [--batch_size 32] [--seq_len 48] [--steps 5] [--warmup 2]
                                 [--also_ours_sparse] [...the other --also_ours_* of bench.throughput]

The same sides and inputs as ``bench.throughput`` (``ours`` = the library's defaults, ``hf`` when
``transformers`` is installed). Each side is warmed up, then profiled alone for ``--steps`` steps.
The profiler adds its own overhead to every op, so totals run above the benchmark's times: compare
the kinds and the sides within one table. docs/performance.md ("The step on this machine") has a table.
"""
from __future__ import annotations

import argparse
from collections import defaultdict

import torch
from torch.profiler import ProfilerActivity, profile

from minbert.weights import resolve_model_dir
from training.configuration.sections import ModelConfig, add_flags

from .throughput import add_variant_flags, chosen_variants, make_sides, random_inputs

# kind -> the aten ops counted in it; every other op counts as "other"
KINDS = {
    "matmuls": ("aten::mm", "aten::addmm", "aten::bmm", "aten::_scaled_dot_product_flash_attention_for_cpu",
                "aten::_scaled_dot_product_flash_attention_for_cpu_backward"),
    "optimizer (fused AdamW)": ("aten::_fused_adamw_",),
    "copies": ("aten::copy_",),
    "dropout masks, in-place mul/div": ("aten::uniform_", "aten::ge_", "aten::bernoulli_", "aten::native_dropout",
                                        "aten::native_dropout_backward", "aten::mul_", "aten::div_"),
    "layer norm": ("aten::native_layer_norm", "aten::native_layer_norm_backward"),
    "GELU": ("aten::gelu", "aten::gelu_backward"),
    "softmax": ("aten::_softmax", "aten::_softmax_backward_data"),
    "sums (bias gradients)": ("aten::sum",),
    "fills": ("aten::fill_", "aten::zero_"),
    "mul, add, div": ("aten::mul", "aten::add", "aten::add_", "aten::div"),
}
KIND_OF = {op: kind for kind, ops in KINDS.items() for op in ops}


def by_kind(op_times: dict[str, float]) -> dict[str, float]:
    """Op name -> self time, summed by ``KINDS`` (the rest as "other"), with the "total"."""
    sums = defaultdict(float)
    for op, seconds in op_times.items():
        sums[KIND_OF.get(op, "other")] += seconds
    return {kind: sums.get(kind, 0.0) for kind in (*KINDS, "other")} | {"total": sum(op_times.values())}


def profile_side(side, inputs: dict, steps: int, warmup: int) -> dict[str, float]:
    """ms per training step of each kind for one side."""
    for _ in range(warmup):
        side.train_step(inputs)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(steps):
            side.train_step(inputs)
    return {kind: ms / steps for kind, ms in
            by_kind({e.key: e.self_cpu_time_total / 1e3 for e in prof.key_averages()}).items()}


def markdown(table: dict[str, dict[str, float]]) -> str:
    names = list(table)
    lines = ["| kind (ms per step) | " + " | ".join(names) + " |", "|---|" + "--:|" * len(names)]
    lines += [f"| {kind} | " + " | ".join(f"{table[n][kind]:.0f}" for n in names) + " |"
              for kind in (*KINDS, "other", "total")]
    return "\n".join(lines)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.step_profile", description=__doc__.split("\n\n")[0])
    add_flags(parser, ModelConfig, only=("model",))
    parser.add_argument("--batch_size", type=int, default=32)
    parser.add_argument("--seq_len", type=int, default=48)
    parser.add_argument("--steps", type=int, default=5, help="profiled steps per side")
    parser.add_argument("--warmup", type=int, default=2)
    add_variant_flags(parser, "profile")
    args = parser.parse_args(argv)
    if args.steps < 1 or args.warmup < 0 or args.batch_size < 1 or args.seq_len < 2:
        parser.error("--steps, --batch_size must be at least 1, --seq_len at least 2, --warmup not negative")
    torch.manual_seed(0)
    sides = make_sides(resolve_model_dir(args.model), chosen_variants(args))
    inputs = random_inputs(sides[0].config.vocab_size, args.batch_size, args.seq_len, seed=0)
    print(f"B={args.batch_size} L={args.seq_len}, {torch.get_num_threads()} threads, {args.steps} profiled "
          f"steps per side after {args.warmup} warm-up; self CPU time")
    print(markdown({side.name: profile_side(side, inputs, args.steps, args.warmup) for side in sides}))


if __name__ == "__main__":
    main()
