"""Sentence-encoding throughput: ``load_run(RUN).encode`` against sentence-transformers'
``SentenceTransformer(RUN/checkpoint).encode`` on the same checkpoint and the same sentences, the
two sides interleaved in one process (these machines are noisy), plus their largest difference.

    python -m bench.encode predictions/<run> --data_dir ../shared/data/multitask --n 10000 --threads 2

sentence-transformers is no dependency of this project: run it from an environment that has it
(and this project's requirements). Sentences: the SST and STS training sentences, distinct, the
first ``--n``.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time

import numpy as np
import torch

from data.readers import read_examples, resolve_data_dir
from training import load_run
from training.tasks import TASKS


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.encode", description=__doc__.split("\n\n")[0])
    parser.add_argument("run", help="a run folder or its checkpoint/")
    parser.add_argument("--data_dir", default=None, help="CS224N data folder (default: $MINBERT_DATA, then ./data)")
    parser.add_argument("--n", type=int, default=10000, help="sentences (10000)")
    parser.add_argument("--batch_size", type=int, default=64, help="sentences per batch, both sides (64)")
    parser.add_argument("--reps", type=int, default=3, help="timed passes per side, interleaved (3)")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (default: torch's choice)")
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
    return 0


def corpus(data_dir, n: int) -> list[str]:
    folder = resolve_data_dir(data_dir, [TASKS["sst"].files["train"], TASKS["sts"].files["train"]])
    seen: dict[str, None] = {}
    for name in ("sst", "sts"):
        task = TASKS[name]
        examples, _ = read_examples(folder / task.files["train"], task.text_columns, task.label_column,
                                    task.label_type, task.num_classes, task.score_range)
        for example in examples:
            for text in example.texts:
                seen.setdefault(text, None)
    return list(seen)[:n]


if __name__ == "__main__":
    sys.exit(main())
