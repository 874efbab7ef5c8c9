"""Sentence-encoding throughput: ``load_run(RUN).encode`` against sentence-transformers'
``SentenceTransformer(RUN/checkpoint).encode`` on the same checkpoint and the same sentences, the
two sides interleaved in one process (these machines are noisy), plus their largest difference.

    python -m bench.encode predictions/<run> --data_dir ../shared/data/multitask --n 10000 --threads 2

sentence-transformers is no dependency of this project: run it from an environment that has it
(and this project's requirements). Sentences: the SST and STS training sentences, distinct, the
first ``--n``. ``--int8`` adds a third side, our encoder with every Linear dynamically quantized to
int8 (``scripts/quantize.py``, per-channel), and each of our sides' STS-B dev Spearman (cosine of
the pair's vectors against the gold score).
"""
from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch
from scipy.stats import spearmanr

from training.data.readers import resolve_data_dir
from training import load_run
from training.learning.task_schema import BUILTIN_TASKS


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.encode", description=__doc__.split("\n\n")[0])
    parser.add_argument("run", help="a run folder or its checkpoint/")
    parser.add_argument("--data_dir", default=None, help="CS224N data folder (default: $MINBERT_DATA, then ./data)")
    parser.add_argument("--n", type=int, default=10000, help="sentences (10000)")
    parser.add_argument("--batch_size", type=int, default=64, help="sentences per batch, both sides (64)")
    parser.add_argument("--reps", type=int, default=3, help="timed passes per side, interleaved (3)")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (default: torch's choice)")
    parser.add_argument("--int8", action="store_true", help="also time our encoder quantized to int8, and compare "
                                                             "STS-B dev Spearman")
    args = parser.parse_args(argv)
    try:
        from sentence_transformers import SentenceTransformer
    except ImportError:
        print("error: this benchmark needs sentence-transformers (pip install sentence-transformers, in an "
              "environment of its own)", file=sys.stderr)
        return 1
    if args.threads:
        torch.set_num_threads(args.threads)
    sentences = corpus(args.data_dir, args.n)
    run = load_run(args.run)
    theirs = SentenceTransformer(str(run.source), device="cpu")
    theirs.max_seq_length = run.config.data.max_length
    sides = {"ours": lambda: run.encode(sentences, batch_size=args.batch_size, progress=False),
             "sentence-transformers": lambda: theirs.encode(sentences, batch_size=args.batch_size,
                                                            convert_to_numpy=True, show_progress_bar=False)}
    if args.int8:
        int8 = dataclasses.replace(run, model=_quantize(run.model, per_channel=True))
        sides["ours int8"] = lambda: int8.encode(sentences, batch_size=args.batch_size, progress=False)
    vectors = {name: side() for name, side in sides.items()}  # warm-up, and the outputs compared
    times = {name: [] for name in sides}
    for _ in range(args.reps):
        for name, side in sides.items():
            started = time.perf_counter()
            side()
            times[name].append(time.perf_counter() - started)
    speed = {name: len(sentences) / statistics.median(t) for name, t in times.items()}
    print(f"{len(sentences)} sentences, batch {args.batch_size}, {torch.get_num_threads()} threads, "
          f"pooling {run.config.model.pooling}, max_length {run.config.data.max_length}")
    for name in sides:
        print(f"  {name:22s} {speed[name]:8.1f} sentences/s   (passes: {', '.join(f'{t:.1f} s' for t in times[name])})")
    print(f"  ours / sentence-transformers: {speed['ours'] / speed['sentence-transformers']:.2f}x; "
          f"largest difference {float(np.abs(vectors['ours'] - vectors['sentence-transformers']).max()):.2e}")
    if args.int8:
        print(f"  ours int8 / sentence-transformers: {speed['ours int8'] / speed['sentence-transformers']:.2f}x; "
              f"ours int8 / ours: {speed['ours int8'] / speed['ours']:.2f}x")
        first, second, gold = sts_dev(args.data_dir)
        for name, encoder in (("ours", run), ("ours int8", int8)):
            u, v = (encoder.encode(s, batch_size=args.batch_size, progress=False) for s in (first, second))
            cosine = (u * v).sum(1) / (np.linalg.norm(u, axis=1) * np.linalg.norm(v, axis=1))
            print(f"  STS-B dev Spearman, {name}: {spearmanr(cosine, gold).statistic:.4f} ({len(gold)} pairs)")
    return 0


def sts_dev(data_dir) -> tuple[list[str], list[str], np.ndarray]:
    task = BUILTIN_TASKS["sts"]
    folder = resolve_data_dir(data_dir, [task.files["dev"]])
    examples, _ = task.read(folder / task.files["dev"])
    return [e.texts[0] for e in examples], [e.texts[1] for e in examples], np.array([e.label for e in examples])


def _quantize(model, per_channel: bool):
    """``scripts/quantize.py``'s int8 dynamic quantization (a script, so loaded from its file)."""
    path = Path(__file__).resolve().parents[1] / "scripts" / "quantize.py"
    spec = importlib.util.spec_from_file_location("quantize", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.quantize(model, per_channel)


def corpus(data_dir, n: int) -> list[str]:
    folder = resolve_data_dir(data_dir, [BUILTIN_TASKS["sst"].files["train"], BUILTIN_TASKS["sts"].files["train"]])
    seen: dict[str, None] = {}
    for name in ("sst", "sts"):
        task = BUILTIN_TASKS[name]
        examples, _ = task.read(folder / task.files["train"])
        for example in examples:
            for text in example.texts:
                seen.setdefault(text, None)
    return list(seen)[:n]


if __name__ == "__main__":
    sys.exit(main())
