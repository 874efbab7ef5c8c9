"""Sentence-embedding evaluation on STS: Spearman and Pearson of cosine similarity against gold scores.

    python -m training.tools.evaluate_embeddings --data ../shared/data/multitask/sts-dev.csv --pooling mean
    python -m training.tools.evaluate_embeddings --checkpoint predictions/<run>/checkpoint --pooling first_last \\
        --data SentEval/data/downstream/STS SentEval/data/downstream/SICK --out sts.json

The encoder alone embeds each sentence of a pair (no task head; ``heads.pooling`` gives the vector),
and the cosine of the two vectors is the predicted similarity. Unsupervised, as in SentEval's STS
tasks and SimCSE's evaluation (Gao et al. 2021, §B "Different evaluation settings").

Inputs (``--data``, files or folders) are CS224N ``sts-*.csv`` files, SentEval STS12–16 folders and
SICK-R files, read by ``data.senteval``; each names one *dataset*, split into *subsets*.

Per dataset it reports, side by side, the **all** correlation (every subset's predictions and golds
concatenated, one correlation: SimCSE's "all" setting, the number its papers report for STS12–16)
and the **mean** of the per-subset correlations (SentEval's default), plus the size-weighted mean
and every subset's own value. For STS-B and SICK-R, SimCSE reports the ``test`` subset alone.
Pearson is ``training.tasks.pearson``, the project's one rule: 0.0 where it is undefined (fewer
than two pairs, or a constant side); Spearman is that Pearson of the ranks.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Sequence

import numpy as np
import torch
import torch.nn.functional as F
from scipy.stats import rankdata

from data.senteval import PairDataset, find_datasets
from heads.pooling import TOKEN_REDUCTIONS, applied_reduction

from ..cli import run_command
from ..config import DataConfig, ModelConfig, TrainConfig, add_flags
from ..device import pick_device
from ..outputs import write_json
from ..runs import LoadedRun, load_run, pretrained_run
from ..tasks import pearson


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return run_command(lambda: execute(args))


def execute(args: argparse.Namespace) -> int:
    """The tool's work; its errors become one line in ``main``."""
    started = time.time()
    datasets = find_datasets(args.data)
    run, reduction = open_encoder(args)
    results = {}
    for dataset in datasets:
        for subset in dataset.subsets:
            if subset.report.bad_rows or subset.unscored:
                print(f"note: {subset.describe()}", file=sys.stderr)
        scored = score_dataset(run, dataset, args.pooling, args.reduction, args.batch_size, args.max_length)
        results[dataset.name] = {"path": str(dataset.path), "layout": dataset.layout,
                                 **correlations(scored)}
        print(f"{dataset.name}: done", file=sys.stderr)
    print(render_table(results))
    if args.out is not None:
        report = {"encoder": str(run.source), "pooling": args.pooling, "reduction": reduction,
                  "max_length": args.max_length, "batch_size": args.batch_size,
                  "wall_seconds": round(time.time() - started, 1), "datasets": results}
        write_json(Path(args.out), report)
        print(f"wrote {args.out}", file=sys.stderr)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m training.tools.evaluate_embeddings",
                                     description=__doc__.split("\n\n")[0])
    add_encoder_flags(parser)
    parser.add_argument("--data", nargs="+", type=Path, required=True,
                        help="STS files or folders (CS224N sts-*.csv, SentEval STS12-16 folders, SICK-R files)")
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
    add_flags(parser, DataConfig, only=("max_length", "batch_size"), title="batches", batch_size=64)
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


# ---------------------------------------------------------------------------------------------
# scores and correlations


def score_dataset(run: LoadedRun, dataset: PairDataset, pooling: str, reduction: str, batch_size: int,
                  max_length: int) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """``{subset: (cosine similarities, golds)}``; each distinct sentence is encoded once."""
    sentences = sorted({s for subset in dataset.subsets for s in (*subset.first, *subset.second)})
    index = {s: i for i, s in enumerate(sentences)}
    vectors = torch.from_numpy(run.encode(sentences, batch_size, pooling=pooling, reduction=reduction,
                                          max_length=max_length))
    scored = {}
    for subset in dataset.subsets:
        u = vectors[[index[s] for s in subset.first]]
        v = vectors[[index[s] for s in subset.second]]
        scored[subset.name] = (F.cosine_similarity(u, v, dim=-1).numpy(), subset.gold)
    return scored


def correlations(subsets: dict[str, tuple]) -> dict:
    """Spearman and Pearson for each subset, for all subsets concatenated, and averaged over subsets.

    ``subsets`` maps a name to ``(predictions, golds)``. Returns
    ``{"all": {"spearman", "pearson", "n"}, "mean": {...}, "wmean": {...}, "subsets": {name: {...}}}``:
    ``all`` is one correlation over the concatenation (SimCSE's "all"), ``mean`` the plain average of
    the subsets' correlations (SentEval's default), ``wmean`` their average weighted by subset size.
    An undefined correlation is 0.0 (``training.tasks.pearson``).
    """
    if not subsets:
        raise ValueError("correlations() needs at least one subset")
    per_subset = {}
    for name, (pred, gold) in subsets.items():
        pred, gold = np.asarray(pred, dtype=np.float64), np.asarray(gold, dtype=np.float64)
        if pred.shape != gold.shape or pred.ndim != 1:
            raise ValueError(f"subset {name!r}: predictions {pred.shape} and golds {gold.shape} differ")
        per_subset[name] = {**_correlate(pred, gold), "n": int(len(pred))}
    preds = np.concatenate([np.asarray(p, dtype=np.float64) for p, _ in subsets.values()])
    golds = np.concatenate([np.asarray(g, dtype=np.float64) for _, g in subsets.values()])
    sizes = np.array([s["n"] for s in per_subset.values()], dtype=np.float64)
    mean, wmean = {}, {}
    for metric in ("spearman", "pearson"):
        values = np.array([s[metric] for s in per_subset.values()])
        mean[metric] = float(values.mean())
        wmean[metric] = float((values * sizes).sum() / sizes.sum()) if sizes.sum() > 0 else 0.0
    return {"all": {**_correlate(preds, golds), "n": int(len(preds))},
            "mean": mean, "wmean": wmean, "subsets": per_subset}


def _correlate(pred: np.ndarray, gold: np.ndarray) -> dict[str, float]:
    """Spearman's rho is Pearson's r of the ranks (ties share their average rank, as in scipy)."""
    return {"spearman": pearson(rankdata(pred), rankdata(gold)), "pearson": pearson(pred, gold)}


# ---------------------------------------------------------------------------------------------
# output


def render_table(results: dict[str, dict]) -> str:
    """Per dataset: pairs, Spearman and Pearson (×100) over all subsets and averaged over subsets;
    then, if any dataset has several subsets, one row per subset."""
    lines = ["correlation of cosine similarity with gold scores (x100); all = subsets concatenated, "
             "mean = average over subsets",
             f"{'dataset':<28} {'subsets':>7} {'pairs':>7} {'Spearman all':>13} {'Spearman mean':>14} "
             f"{'Pearson all':>12} {'Pearson mean':>13}"]
    for name, r in results.items():
        lines.append(f"{name:<28} {len(r['subsets']):>7} {r['all']['n']:>7} "
                     f"{_pct(r['all']['spearman']):>13} {_pct(r['mean']['spearman']):>14} "
                     f"{_pct(r['all']['pearson']):>12} {_pct(r['mean']['pearson']):>13}")
    if any(len(r["subsets"]) > 1 for r in results.values()):
        lines += ["", f"{'dataset':<28} {'subset':<24} {'pairs':>7} {'Spearman':>9} {'Pearson':>9}"]
        for name, r in results.items():
            for subset, s in r["subsets"].items():
                lines.append(f"{name:<28} {subset:<24} {s['n']:>7} {_pct(s['spearman']):>9} {_pct(s['pearson']):>9}")
    return "\n".join(lines)


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.2f}"


if __name__ == "__main__":
    sys.exit(main())
