"""Sentence-embedding evaluation on STS: Spearman and Pearson of cosine similarity against gold scores.

    python -m scripts.evaluate_embeddings --data ../shared/data/multitask/sts-dev.csv --pooling mean
    python -m scripts.evaluate_embeddings --checkpoint predictions/<run>/checkpoint --pooling first_last \\
        --data SentEval/data/downstream/STS SentEval/data/downstream/SICK --out sts.json

The encoder alone embeds each sentence of a pair (no task head; ``heads.pooling`` gives the vector);
the cosine of the two vectors is the predicted similarity, unsupervised, as in SentEval's STS tasks
and SimCSE's evaluation (Gao et al. 2021, §B "Different evaluation settings"). Each ``--data`` input
(the layouts of ``data.senteval``; docs/embeddings.md, "Embedding evaluation on STS") is a dataset of
subsets: it reports the **all** correlation (subsets concatenated: SimCSE's "all" setting, its number
for STS12–16) beside the **mean** of the per-subset ones (SentEval's default), the size-weighted mean
and each subset's own (for STS-B and SICK-R SimCSE reports the ``test`` subset alone); with several
datasets an **average** row is the plain mean of their values (SimCSE's "Avg."). An undefined
correlation (fewer than two pairs, a constant side) is "undefined" in the table and null in the JSON.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Sequence

from training.data.senteval import find_datasets
from heads.pooling import TOKEN_REDUCTIONS, applied_reduction
from training.tools.command import run_command
from training.configuration.sections import DataConfig, ModelConfig, TrainConfig, add_flags
from training.harness.distributed import pick_device
from training.harness.outputs import write_json
from training.harness.runs import LoadedRun, load_run, pretrained_run
from training.learning.similarity import DEFAULT_BATCH_SIZE, average_over_datasets, correlations, score_dataset


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return run_command(lambda: execute(args))


def execute(args: argparse.Namespace) -> int:
    started = time.time()
    datasets = find_datasets(args.data)
    run, reduction = open_encoder(args)
    results = {}
    for dataset in datasets:
        for subset in dataset.subsets:
            if subset.report.bad_rows or subset.unscored:
                print(f"note: {subset.describe()}", file=sys.stderr)
        scored = score_dataset(lambda sentences: run.encode(sentences, args.batch_size, pooling=args.pooling,
                                                            reduction=args.reduction, max_length=args.max_length),
                               dataset)
        results[dataset.name] = {"path": str(dataset.path), "layout": dataset.layout, **correlations(scored)}
        print(f"{dataset.name}: done", file=sys.stderr)
    average = average_over_datasets(results)
    print(render_table(results, average))
    if args.out is not None:
        report = {"encoder": str(run.source), "pooling": args.pooling, "reduction": reduction,
                  "max_length": args.max_length, "batch_size": args.batch_size,
                  "wall_seconds": round(time.time() - started, 1), "datasets": results, "average": average}
        write_json(Path(args.out), report)
        print(f"wrote {args.out}", file=sys.stderr)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m scripts.evaluate_embeddings",
                                     description=__doc__.split("\n\n")[0])
    add_encoder_flags(parser)
    parser.add_argument("--data", nargs="+", type=Path, required=True, help="STS files or folders (CS224N sts-*.csv, "
                        "SentEval STS12-16 folders, SentEval STS-B sts-*.csv or their folder, SICK-R files)")
    parser.add_argument("--out", type=Path, default=None, help="write the results as JSON to this file")
    return parser


def add_encoder_flags(parser: argparse.ArgumentParser) -> None:
    """The flags of an embedding tool: which encoder (``--checkpoint`` or ``--model``), how it pools
    and batches, and where it runs; those that exist in the config dataclasses come from there."""
    parser.add_argument("--checkpoint", type=Path, default=None,
                        help="a run folder or its checkpoint/ folder: its encoder, no heads (not with --model)")
    add_flags(parser, ModelConfig, only=("model", "pooling"), title="encoder")
    parser.add_argument("--reduction", default="mean", choices=list(TOKEN_REDUCTIONS),
                        help="token reduction of the layer-combining modes (default: mean)")
    add_flags(parser, DataConfig, only=("max_length", "batch_size"), title="batches", batch_size=DEFAULT_BATCH_SIZE)
    add_flags(parser, TrainConfig, only=("device",), title="device")


def open_encoder(args) -> tuple[LoadedRun, str | None]:
    """The run of ``--checkpoint`` (or the pretrained ``--model``) on ``--device``, and the token
    reduction that ``--pooling``/``--reduction`` amount to; says on stderr what is used."""
    if args.checkpoint is not None and args.model is not None:
        raise ValueError("give --checkpoint or --model, not both")
    run = load_run(args.checkpoint) if args.checkpoint is not None else pretrained_run(args.model)
    device = pick_device(args.device)
    run.model.to(device)
    reduction = applied_reduction(args.pooling, args.reduction)
    if args.reduction != "mean" and reduction != args.reduction:
        print(f"note: --reduction {args.reduction} does not apply to pooling {args.pooling}", file=sys.stderr)
    print(f"encoder: {run.source}   pooling: {args.pooling} (reduction: {reduction or 'none'})   device: {device}",
          file=sys.stderr)
    return run, reduction


def render_table(results: dict[str, dict], average: dict | None = None) -> str:
    """Per dataset: pairs, Spearman and Pearson (×100) over all subsets and averaged over subsets,
    and with several datasets their ``average`` (``average_over_datasets``); then, if any dataset
    has several subsets, one row per subset."""
    lines = ["correlation of cosine similarity with gold scores (x100); all = subsets concatenated, "
             "mean = average over subsets",
             f"{'dataset':<28} {'subsets':>7} {'pairs':>7} {'Spearman all':>13} {'Spearman mean':>14} "
             f"{'Pearson all':>12} {'Pearson mean':>13}"]
    rows = [(name, str(len(r["subsets"])), str(r["all"]["n"]), r) for name, r in results.items()]
    if average is not None and average["datasets"] > 1:
        rows.append((f"average of {average['datasets']} datasets", "", "", average))
    for name, subsets, pairs, r in rows:
        lines.append(f"{name:<28} {subsets:>7} {pairs:>7} "
                     f"{_pct(r['all']['spearman']):>13} {_pct(r['mean']['spearman']):>14} "
                     f"{_pct(r['all']['pearson']):>12} {_pct(r['mean']['pearson']):>13}")
    if any(len(r["subsets"]) > 1 for r in results.values()):
        lines += ["", f"{'dataset':<28} {'subset':<24} {'pairs':>7} {'Spearman':>9} {'Pearson':>9}"]
        for name, r in results.items():
            for subset, s in r["subsets"].items():
                lines.append(f"{name:<28} {subset:<24} {s['n']:>7} {_pct(s['spearman']):>9} {_pct(s['pearson']):>9}")
    return "\n".join(lines)


def _pct(value: float | None) -> str:
    return "undefined" if value is None else f"{100 * value:.2f}"


if __name__ == "__main__":
    sys.exit(main())
