"""Training- and inference-step throughput: our minBERT + our AdamW against HuggingFace
``transformers`` BertModel + ``torch.optim.AdamW``, loaded from the same weights, on the same inputs.

    python -m bench.throughput [--model DIR] [--batch_size 32] [--seq_lens 48] [--reps 10]
                               [--warmup 2] [--also_ours_manual] [--also_ours_unfused] [--also_ours_bf16]
                               [--also_ours_compiled] [--also_ours_sparse] [--also_ours_bernoulli]
                               [--keep_freed_memory] [--threads N]

What is timed, for each sequence length L:
  * train step: forward (training mode, dropout on), loss = mean over the batch of the squared
    mean-pooled last hidden state, backward, optimizer step (AdamW, lr 1e-5, weight decay 0.01 on
    every parameter), zero_grad (set to None);
  * inference step: ``torch.no_grad()`` forward in eval mode.
Inputs are B × L random word-piece ids (ids 1000..vocab-1, no padding: attention mask all ones,
token types 0), the same tensors for every side. Each side is warmed up (``--warmup`` steps of
each kind), then the sides are timed interleaved — A, B, A, B, ... with the order alternating from
repetition to repetition — so slow drifts of the machine (frequency, other processes) hit all sides
alike. Reported: the median over ``--reps`` repetitions, as sequences/s, and our speed over HF's.

Sides: ``ours`` = the library's defaults, what a user of ``minbert`` gets: ``BertModel.from_pretrained``
(auto attention: PyTorch's fused kernel, except in a CPU training step with attention dropout,
where the written-out path measured faster; dropout masks from one uniform draw) + ``AdamW(params,
lr, weight_decay)`` (PyTorch's one-pass fused AdamW kernel on the CPU and CUDA, given our ε
placement). Extra sides, each with its ``--also_<name>`` flag: ``ours-sparse`` = ``ours`` with
sparse word-embedding gradients and the lazy AdamW update of the batch's rows (what
``run_multitask.py`` adds by default); ``ours-bernoulli`` = ``ours`` with ``F.dropout`` masks;
``ours-unfused`` = ``ours`` with ``AdamW(fused=False)`` (the cache-blocked loop on the CPU,
``torch._foreach_*`` on a GPU); ``ours-manual`` = the written-out reference (``--reference``:
written-out attention, ``F.dropout`` masks, the loop AdamW); ``ours-bf16`` = ``ours`` under
``torch.autocast(bfloat16)`` (``--amp bf16``); ``ours-compiled`` = ``ours`` after
``torch.compile`` (``--compile``; its warm-up includes the compilation). ``hf`` =
``transformers.BertModel`` (its default attention implementation) + ``torch.optim.AdamW`` with its
defaults (on CPU: the per-parameter loop). ``transformers`` is an optional, benchmark-only
dependency: without it only our sides are timed.

Achieved fraction of peak. The peak is a float32 2048×2048 @ 2048×2048 matmul (2·2048³ FLOP)
timed in the same run (best of 10). The work of a step is estimated from the parameters that do
matmuls per token, N = parameters of the encoder layers (not the embeddings, whose lookup is no
matmul, nor the pooler, which runs once per sequence), plus attention's two (L × L) products:
  inference: 2·N·B·L + 4·B·L²·H·layers      (forward: 2 FLOP per multiply-add)
  training:  6·N·B·L + 12·B·L²·H·layers     (backward ≈ 2 × forward)
Element-wise work (softmax, GELU, LayerNorm, dropout, AdamW) is not counted, so the fraction is of
the useful matmul work; the rest is what a lean implementation can cut.
"""
from __future__ import annotations

import argparse
import contextlib
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

from minbert import AdamW, BertModel
from minbert.weights import resolve_model_dir
from training.configuration.sections import ModelConfig, add_flags
from training.harness.memory import keep_freed_memory

LR = 1e-5
WEIGHT_DECAY = 0.01


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.keep_freed_memory:  # process-wide: every side, HF's included, allocates through it
        print(f"keep_freed_memory (training/harness/memory.py): {'applied' if keep_freed_memory() else 'not applied'}")
    model_dir = resolve_model_dir(args.model)
    sides = make_sides(model_dir, chosen_variants(args))
    config = sides[0].config
    print(f"model: {model_dir}  ({config.num_hidden_layers} layers, hidden {config.hidden_size}, "
          f"{config.num_attention_heads} heads, vocab {config.vocab_size})")
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; batch {args.batch_size}; "
          f"reps {args.reps} after {args.warmup} warm-up; median reported")
    peak = matmul_peak()
    print(f"fp32 matmul peak (2048², best of 10): {peak:.1f} GFLOP/s")
    n_matmul = encoder_matmul_params(sides[0].model)
    for seq_len in args.seq_lens:
        inputs = random_inputs(config.vocab_size, args.batch_size, seq_len, args.seed)
        results = time_sides(sides, inputs, args.reps, args.warmup)
        tokens = args.batch_size * seq_len
        attention = 4 * args.batch_size * seq_len**2 * config.hidden_size * config.num_hidden_layers
        flops = {"train": 6 * n_matmul * tokens + 3 * attention, "infer": 2 * n_matmul * tokens + attention}
        print(f"\nB={args.batch_size} L={seq_len}: est. {flops['train'] / 1e9:.1f} GFLOP per train step, "
              f"{flops['infer'] / 1e9:.1f} per inference step")
        for kind, label in (("train", "train step"), ("infer", "inference")):
            for side in sides:
                seconds = statistics.median(results[side.name][kind])
                print(f"  {label:10s} {side.name:12s} {args.batch_size / seconds:8.1f} seq/s  "
                      f"{seconds * 1e3:8.1f} ms  {flops[kind] / seconds / 1e9:6.1f} GFLOP/s "
                      f"= {flops[kind] / seconds / 1e9 / peak:5.1%} of peak")
            base = next((s for s in sides if s.name == "hf"), None)
            if base is not None:
                t_hf = statistics.median(results["hf"][kind])
                ratios = "  ".join(f"{s.name}/hf = {t_hf / statistics.median(results[s.name][kind]):.2f}x"
                                   for s in sides if s is not base)
                print(f"  {label:10s} speed-up: {ratios}")


def parse_args(argv):
    parser = argparse.ArgumentParser(prog="python -m bench.throughput", description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_flags(parser, ModelConfig, only=("model",))
    parser.add_argument("--batch_size", type=int, default=32, help="sequences per step (32)")
    parser.add_argument("--seq_lens", type=_int_list, default=[48], help="comma-separated lengths (48)")
    parser.add_argument("--reps", type=int, default=10, help="timed repetitions per side and kind (10)")
    parser.add_argument("--warmup", type=int, default=2, help="untimed steps per side and kind first (2)")
    add_variant_flags(parser, "time")
    parser.add_argument("--keep_freed_memory", action="store_true",
                        help="raise glibc's mmap/trim thresholds first, as run_multitask.py does (all sides)")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (default: torch's choice)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random inputs (0)")
    args = parser.parse_args(argv)
    if args.reps < 1 or args.warmup < 0 or args.batch_size < 1:
        parser.error("--reps and --batch_size must be >= 1, --warmup >= 0")
    return args


def _int_list(text: str) -> list[int]:
    return [int(x) for x in text.replace(" ", ",").split(",") if x]


class Side:
    """One implementation under test: a model, its optimizer, and how to get the last hidden state."""

    def __init__(self, name: str, model, optimizer, config, last_hidden, autocast=None):
        self.name, self.model, self.optimizer, self.config = name, model, optimizer, config
        self.last_hidden = last_hidden
        self.autocast = autocast or contextlib.nullcontext

    def train_step(self, inputs: dict) -> None:
        self.model.train()
        with self.autocast():
            hidden = self.last_hidden(self.model(**inputs))
            loss = mean_pool(hidden.float(), inputs["attention_mask"]).pow(2).sum(dim=1).mean()
        loss.backward()
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)

    def infer_step(self, inputs: dict) -> None:
        self.model.eval()
        with torch.no_grad(), self.autocast():
            self.last_hidden(self.model(**inputs))


@dataclass(frozen=True)
class OurVariant:
    """How one of our sides differs from ``ours``, the library's defaults (None: the default)."""
    help: str
    attention: str | None = None
    adamw: dict = field(default_factory=dict)
    bf16: bool = False
    compile: bool = False
    sparse_embeddings: bool = False
    dropout_masks: str | None = None


# name -> variant; each is timed when its flag --also_ours_<suffix> is given, in this order.
OUR_VARIANTS = {
    "ours-bf16": OurVariant("ours under bf16 autocast", bf16=True),
    "ours-compiled": OurVariant("ours after torch.compile", compile=True),
    "ours-sparse": OurVariant("ours with sparse word-embedding gradients (lazy AdamW rows)", sparse_embeddings=True),
    "ours-bernoulli": OurVariant("ours with F.dropout masks", dropout_masks="bernoulli"),
    "ours-unfused": OurVariant("our model with our AdamW's own (non-fused-kernel) update", adamw={"fused": False}),
    "ours-manual": OurVariant("the written-out reference: attention, F.dropout masks, loop AdamW",
                              attention="manual", dropout_masks="bernoulli", adamw={"fused": False, "foreach": False}),
}


def _flag(name: str) -> str:
    return "--also_" + name.replace("-", "_")


def add_variant_flags(parser: argparse.ArgumentParser, verb: str) -> None:
    """One switch ``--also_<name>`` per ``OUR_VARIANTS`` entry, its help "also <verb> <the variant>"."""
    for name, variant in OUR_VARIANTS.items():
        parser.add_argument(_flag(name), action="store_true", help=f"also {verb} {variant.help}")


def chosen_variants(args: argparse.Namespace) -> list[str]:
    """The ``OUR_VARIANTS`` names whose switch is on, in the table's order."""
    return [name for name in OUR_VARIANTS if getattr(args, _flag(name)[2:])]


def make_sides(model_dir: Path, variants: list[str] = ()) -> list[Side]:
    """``ours``, then the named ``OUR_VARIANTS``, then HF's side when transformers is installed."""
    def our_side(name: str, variant: OurVariant) -> Side:
        model = BertModel.from_pretrained(model_dir)
        if variant.attention is not None:
            model.set_attention(variant.attention)
        if variant.dropout_masks is not None:
            model.set_dropout(variant.dropout_masks)
        model.set_sparse_word_embeddings(variant.sparse_embeddings)
        if variant.compile:
            model.compile(dynamic=False)
        autocast = (lambda: torch.autocast("cpu", dtype=torch.bfloat16)) if variant.bf16 else None
        return Side(name, model, AdamW(model.parameters(), lr=LR, weight_decay=WEIGHT_DECAY, **variant.adamw),
                    model.config, lambda out: out["last_hidden_state"], autocast)

    sides = [our_side("ours", OurVariant("ours"))] + [our_side(name, OUR_VARIANTS[name]) for name in variants]
    ours = sides[0].model
    try:
        import transformers
    except ImportError:
        print("transformers is not installed: timing our side only "
              "(pip install transformers in a separate environment to compare)")
        return sides
    hf = transformers.BertModel.from_pretrained(str(model_dir))
    attn = getattr(hf.config, "_attn_implementation", "?")
    print(f"hf: transformers {transformers.__version__}, attention implementation {attn!r}")
    sides.append(Side("hf", hf, torch.optim.AdamW(hf.parameters(), lr=LR, weight_decay=WEIGHT_DECAY),
                      ours.config, lambda out: out.last_hidden_state))
    check_same_weights(ours, hf)
    return sides


def check_same_weights(ours: BertModel, hf) -> None:
    """Both sides start from the same numbers: same parameter count, same word embeddings."""
    n_ours = sum(p.numel() for p in ours.parameters())
    n_hf = sum(p.numel() for p in hf.parameters())
    if n_ours != n_hf or not torch.equal(ours.embeddings.word_embeddings.weight,
                                         hf.embeddings.word_embeddings.weight):
        raise SystemExit(f"the two models differ ({n_ours:,} vs {n_hf:,} parameters)")


def mean_pool(hidden: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    weights = mask.unsqueeze(-1).to(hidden.dtype)
    return (hidden * weights).sum(dim=1) / weights.sum(dim=1).clamp(min=1.0)


def random_inputs(vocab_size: int, batch_size: int, seq_len: int, seed: int) -> dict:
    g = torch.Generator().manual_seed(seed)
    input_ids = torch.randint(1000, vocab_size, (batch_size, seq_len), generator=g)
    return {"input_ids": input_ids, "attention_mask": torch.ones_like(input_ids),
            "token_type_ids": torch.zeros_like(input_ids)}


def time_sides(sides: list[Side], inputs: dict, reps: int, warmup: int) -> dict:
    """``{side: {"train": [seconds], "infer": [seconds]}}``, interleaved with alternating order."""
    for side in sides:
        for _ in range(warmup):
            side.train_step(inputs)
            side.infer_step(inputs)
    results = {side.name: {"train": [], "infer": []} for side in sides}
    for rep in range(reps):
        order = sides if rep % 2 == 0 else sides[::-1]
        for kind in ("train", "infer"):
            for side in order:
                step = side.train_step if kind == "train" else side.infer_step
                start = time.perf_counter()
                step(inputs)
                results[side.name][kind].append(time.perf_counter() - start)
    return results


def encoder_matmul_params(model: BertModel) -> int:
    """Weights of the encoder's Linear layers (the per-token matmuls)."""
    return sum(m.weight.numel() for m in model.encoder.modules() if isinstance(m, torch.nn.Linear))


def matmul_peak(n: int = 2048, reps: int = 10) -> float:
    """GFLOP/s of the best of ``reps`` float32 n×n matmuls (after one warm-up)."""
    a, b = torch.randn(n, n), torch.randn(n, n)
    a @ b
    best = float("inf")
    for _ in range(reps):
        start = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - start)
    return 2 * n**3 / best / 1e9


if __name__ == "__main__":
    main()
