"""How well sentence vectors rank sentence pairs: the cosine of each pair's vectors against the gold
similarity, as Spearman's and Pearson's correlation (the STS evaluation of SentEval, Conneau & Kiela
2018, and of SimCSE, Gao et al. 2021, Appendix B). Used by ``scripts.evaluate_embeddings`` and
by the unsupervised SimCSE stage's STS dev curve (``--ucl_eval_every``)."""
from __future__ import annotations

from typing import Callable

import numpy as np
import torch
import torch.nn.functional as F

from training.data.senteval import PairDataset

from .tasks import pearson

DEFAULT_BATCH_SIZE = 64  # sentences per encoder batch when scoring


def score_dataset(embed: Callable[[list[str]], np.ndarray],
                  dataset: PairDataset) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """``{subset: (cosine similarities, golds)}``; ``embed`` turns sentences into vectors (``encoding.encode``
    with an encoder and a pooling), each distinct sentence encoded once."""
    sentences = sorted({s for subset in dataset.subsets for s in (*subset.first, *subset.second)})
    index = {s: i for i, s in enumerate(sentences)}
    vectors = torch.from_numpy(embed(sentences))
    scored = {}
    for subset in dataset.subsets:
        u = vectors[[index[s] for s in subset.first]]
        v = vectors[[index[s] for s in subset.second]]
        scored[subset.name] = (F.cosine_similarity(u, v, dim=-1).numpy(), subset.gold)
    return scored


def correlations(subsets: dict[str, tuple]) -> dict:
    """Spearman and Pearson for each subset, for all subsets concatenated, and averaged over subsets.

    ``subsets`` maps a name to ``(predictions, golds)``. Returns
    ``{"all": {"spearman", "pearson", "n"}, "mean": {...}, "wmean": {...}, "subsets": {name: {...}}}``: ``all`` is
    one correlation over the concatenation (SimCSE's "all"), ``mean`` the plain average of the subsets' correlations
    (SentEval's default), ``wmean`` their average weighted by subset size. A correlation is None where it is
    undefined (fewer than two pairs, or a constant side); the averages take the defined ones (None when there are none).
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
    mean, wmean = {}, {}
    for metric in ("spearman", "pearson"):
        defined = [(s[metric], s["n"]) for s in per_subset.values() if s[metric] is not None]
        values, sizes = np.array([v for v, _ in defined]), np.array([n for _, n in defined], dtype=np.float64)
        mean[metric] = float(values.mean()) if defined else None
        wmean[metric] = float((values * sizes).sum() / sizes.sum()) if defined and sizes.sum() > 0 else None
    return {"all": {**_correlate(preds, golds), "n": int(len(preds))},
            "mean": mean, "wmean": wmean, "subsets": per_subset}


def average_over_datasets(results: dict[str, dict]) -> dict:
    """The plain mean over the datasets of each one's "all" and "mean" Spearman and Pearson (each
    dataset counts once, whatever its size): ``{"datasets": n, "all": {...}, "mean": {...}}``."""
    def mean(values: list) -> float | None:
        defined = [v for v in values if v is not None]
        return float(np.mean(defined)) if defined else None
    return {"datasets": len(results),
            **{kind: {metric: mean([r[kind][metric] for r in results.values()])
                      for metric in ("spearman", "pearson")} for kind in ("all", "mean")}}


def _correlate(pred: np.ndarray, gold: np.ndarray) -> dict[str, float | None]:
    """Spearman's rho is Pearson's r of the ranks (ties share their average rank, as in scipy);
    None where undefined (fewer than two pairs, or a constant side)."""
    if len(pred) < 2 or np.std(pred) == 0 or np.std(gold) == 0:
        return {"spearman": None, "pearson": None}
    from scipy.stats import rankdata  # imported here: scipy.stats takes over a second (tasks.pearson)
    return {"spearman": pearson(rankdata(pred), rankdata(gold)), "pearson": pearson(pred, gold)}
