"""Clustering and linear-probe evaluation of frozen sentence embeddings on a labelled single-sentence task.

    python -m scripts.probe --task cfimdb --data_dir ../shared/data/cs224n --pooling mean
    python -m scripts.probe --checkpoint predictions/<run>/checkpoint --task sst \\
        --data_dir ../shared/data/cs224n --pooling mean --out probe-sst.json

The frozen encoder alone (no task head; ``heads.pooling`` gives the vector) embeds the train and dev
sentences of a single-sentence classification task, judged as contrastive fine-tuning studies judge
embeddings rather than a head (docs/embeddings.md, "Clustering and linear probe"):

- **clustering**: k-means with k = the number of classes, on dev and on train separately, scored by
  the adjusted Rand index and adjusted mutual information (1: the classes; about 0: unrelated).
- **linear probe**: a logistic regression trained on the train embeddings; its train and dev accuracy.

``--normalize`` L2-normalises the vectors first (the geometry a cosine-based contrastive loss shapes);
``--max_train N`` keeps a seeded random N training sentences (for speed).
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Sequence

import numpy as np
from sklearn.cluster import KMeans
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import adjusted_mutual_info_score, adjusted_rand_score

from training.data.readers import DataError, Example, resolve_data_dir
from scripts.evaluate_embeddings import add_encoder_flags, open_encoder
from training.tools.command import run_command
from training.configuration.sections import DataConfig, TrainConfig, add_flags
from training.harness.outputs import write_json
from training.learning.task_schema import BUILTIN_TASKS
from training.learning.tasks import Task

DEFAULT_SEED = TrainConfig.seed
SPLITS = ("train", "dev")
# The tasks a probe applies to: every labelled single-sentence classification row of BUILTIN_TASKS.
TASK_CHOICES = [name for name, task in BUILTIN_TASKS.items() if not task.is_pair and task.label_type == "class"]


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return run_command(lambda: execute(args))


def execute(args: argparse.Namespace) -> int:
    started = time.time()
    task = BUILTIN_TASKS[args.task]
    if args.max_train is not None and args.max_train < 1:
        raise ValueError(f"--max_train must be at least 1, got {args.max_train}")
    data_dir = resolve_data_dir(args.data_dir, [task.files[split] for split in SPLITS])
    splits = {split: read_split(data_dir / task.files[split], task) for split in SPLITS}
    if args.max_train is not None:
        splits["train"] = subsample(splits["train"], args.max_train, args.seed)
    run, reduction = open_encoder(args)
    vectors, labels = {}, {}
    encode_started = time.time()
    for split, (examples, _) in splits.items():
        x = run.encode([e.texts[0] for e in examples], args.batch_size, pooling=args.pooling,
                       reduction=args.reduction, max_length=args.max_length).astype(np.float64)
        if args.normalize:
            x = x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)
        vectors[split], labels[split] = x, np.array([e.label for e in examples], dtype=np.int64)
        print(f"{split}: encoded {len(examples)} sentences", file=sys.stderr)
    encode_seconds = time.time() - encode_started
    fit_started = time.time()
    clustering = {split: cluster_scores(vectors[split], labels[split], task.num_classes, args.seed)
                  for split in ("dev", "train")}
    probe = probe_scores(vectors["train"], labels["train"], vectors["dev"], labels["dev"], args.seed)
    fit_seconds = time.time() - fit_started
    report = {
        "encoder": str(run.source), "task": task.name, "data_dir": str(data_dir), "pooling": args.pooling,
        "reduction": reduction, "normalize": args.normalize, "max_length": args.max_length,
        "max_train": args.max_train, "seed": args.seed, "num_classes": task.num_classes,
        "files": {split: {"path": str(data_dir / task.files[split]), "rows": read.n_rows,
                          "skipped": len(read.bad_rows), "used": len(labels[split])}
                  for split, (_, read) in splits.items()},
        "clustering": clustering, "probe": probe,
        "seconds": {"encode": round(encode_seconds, 1), "fit": round(fit_seconds, 1),
                    "total": round(time.time() - started, 1)},
    }
    print(render_table(report))
    if args.out is not None:
        write_json(Path(args.out), report)
        print(f"wrote {args.out}", file=sys.stderr)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m scripts.probe", description=__doc__.split("\n\n")[0])
    parser.add_argument("--task", required=True, choices=TASK_CHOICES,
                        help="; ".join(f"{name}: {BUILTIN_TASKS[name].description}, {BUILTIN_TASKS[name].files['train']} / "
                                       f"{BUILTIN_TASKS[name].files['dev']}" for name in TASK_CHOICES))
    add_encoder_flags(parser)
    add_flags(parser, DataConfig, only=("data_dir",), title="data")
    add_flags(parser, TrainConfig, only=("seed",), title="seed")
    parser.add_argument("--normalize", action="store_true", help="L2-normalise the vectors before k-means and the probe")
    parser.add_argument("--max_train", type=int, default=None,
                        help="use a seeded random subset of this many training sentences (default: all)")
    parser.add_argument("--out", type=Path, default=None, help="write the results as JSON to this file")
    return parser


def cluster_scores(embeddings, labels, k: int, seed: int = DEFAULT_SEED) -> dict:
    """k-means (k clusters, ``n_init=10``, ``random_state=seed``) on (N, D) ``embeddings``, scored
    against the gold ``labels``: ``{"ari", "ami", "k", "n"}``."""
    x, y = _as_matrix(embeddings), _as_labels(labels)
    if len(x) != len(y):
        raise ValueError(f"{len(x)} embeddings but {len(y)} labels")
    if k < 1 or k > len(x):
        raise ValueError(f"k-means needs 1 <= k <= number of examples, got k = {k} for {len(x)} examples")
    clusters = KMeans(n_clusters=k, n_init=10, random_state=seed).fit_predict(x)
    return {"ari": float(adjusted_rand_score(y, clusters)), "ami": float(adjusted_mutual_info_score(y, clusters)),
            "k": int(k), "n": int(len(x))}


def probe_scores(train_x, train_y, dev_x, dev_y, seed: int = DEFAULT_SEED) -> dict:
    """A logistic-regression probe (L2, C = 1, lbfgs, ``max_iter=1000``, ``random_state=seed``) fitted on
    the train embeddings: ``{"train_accuracy", "dev_accuracy", "n_train", "n_dev", "converged"}``."""
    train_x, dev_x = _as_matrix(train_x), _as_matrix(dev_x)
    train_y, dev_y = _as_labels(train_y), _as_labels(dev_y)
    if len(train_x) != len(train_y) or len(dev_x) != len(dev_y):
        raise ValueError(f"embeddings and labels differ in length: train {len(train_x)} vs {len(train_y)}, "
                         f"dev {len(dev_x)} vs {len(dev_y)}")
    if train_x.shape[1] != dev_x.shape[1]:
        raise ValueError(f"train and dev embeddings differ in width: {train_x.shape[1]} vs {dev_x.shape[1]}")
    if len(dev_x) == 0:
        raise ValueError("the probe needs at least one dev example")
    if len(np.unique(train_y)) < 2:
        raise ValueError(f"the probe needs at least two classes in the training set, got {np.unique(train_y).tolist()}")
    probe = LogisticRegression(max_iter=1000, random_state=seed).fit(train_x, train_y)
    return {"train_accuracy": float((probe.predict(train_x) == train_y).mean()),
            "dev_accuracy": float((probe.predict(dev_x) == dev_y).mean()), "n_train": int(len(train_x)),
            "n_dev": int(len(dev_x)), "converged": bool(np.all(probe.n_iter_ < probe.max_iter))}


def read_split(path: Path, task: Task):
    """``(examples, ReadReport)`` of a single-sentence task's labelled file; bad rows skipped and reported."""
    examples, report = task.read(path)
    if report.bad_rows:
        print(f"note: {report.summary()}", file=sys.stderr)
    if not examples:
        raise DataError(f"{path}: no usable rows ({report.summary()})")
    return examples, report


def subsample(split: tuple[list[Example], object], n: int, seed: int):
    """A seeded random ``n`` of the examples, kept in file order (all of them if there are no more)."""
    examples, report = split
    if n >= len(examples):
        return examples, report
    keep = np.sort(np.random.default_rng(seed).choice(len(examples), size=n, replace=False))
    return [examples[i] for i in keep], report


def _as_matrix(x) -> np.ndarray:
    x = np.asarray(x.detach().cpu() if hasattr(x, "detach") else x, dtype=np.float64)
    if x.ndim != 2:
        raise ValueError(f"embeddings must be (N, D), got shape {x.shape}")
    return x


def _as_labels(y) -> np.ndarray:
    y = np.asarray(y.detach().cpu() if hasattr(y, "detach") else y)
    if y.ndim != 1:
        raise ValueError(f"labels must be (N,), got shape {y.shape}")
    return y


def render_table(report: dict) -> str:
    c, p = report["clustering"], report["probe"]
    return "\n".join([
        f"task {report['task']} ({report['num_classes']} classes)   pooling {report['pooling']}"
        f"{'' if report['reduction'] in (None, 'mean') else ' (' + report['reduction'] + ')'}"
        f"{'   L2-normalised' if report['normalize'] else ''}   encoder {report['encoder']}",
        f"{'':<34} {'n':>6} {'ARI':>8} {'AMI':>8} {'accuracy':>9}",
        f"{'k-means (k = classes) on dev':<34} {c['dev']['n']:>6} {c['dev']['ari']:>8.4f} {c['dev']['ami']:>8.4f} {'':>9}",
        f"{'k-means (k = classes) on train':<34} {c['train']['n']:>6} {c['train']['ari']:>8.4f} "
        f"{c['train']['ami']:>8.4f} {'':>9}",
        f"{'logistic-regression probe, train':<34} {p['n_train']:>6} {'':>8} {'':>8} {p['train_accuracy']:>9.4f}",
        f"{'logistic-regression probe, dev':<34} {p['n_dev']:>6} {'':>8} {'':>8} {p['dev_accuracy']:>9.4f}",
    ] + ([] if p["converged"] else ["note: the probe did not converge in 1000 iterations"]))


if __name__ == "__main__":
    sys.exit(main())
