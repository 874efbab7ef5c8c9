"""Training objectives beyond the per-task losses of ``training.learning.tasks``: SimCSE's InfoNCE, the
label-contrastive loss, and the joint loss's task weightings, each behind one interface
(``LossWeighting``, chosen by name with ``make_loss_weighting``) so the trainer has one code path.
"""
from __future__ import annotations

import math
from functools import partial
from types import MappingProxyType
from typing import Mapping

import torch
import torch.nn.functional as F
from torch import nn

from training.learning.tasks import Task


def info_nce(anchors: torch.Tensor, positives: torch.Tensor, temperature: float = 0.05,
             hard_negatives: torch.Tensor | None = None, hard_negative_weight: float = 1.0) -> torch.Tensor:
    """SimCSE's contrastive loss over a batch of (B, D) sentence vectors; returns the batch mean.

    Gao, Yao & Chen 2021, "SimCSE", §3 Eq. 1 (unsupervised; ``positives`` = a second dropout-noised encoding of the same
    sentences) and §4 Eq. 5 (supervised, with hard negatives):

        l_i = -log  e^{cos(a_i, p_i)/τ} / ( Σ_j e^{cos(a_i, p_j)/τ} + Σ_j α^{1_i^j} e^{cos(a_i, h_j)/τ} )

    i.e. a cross-entropy over the logits [cos(a_i, p_j)/τ | cos(a_i, h_j)/τ] (B x B, or B x 2B with hard negatives)
    whose target is the diagonal: every other in-batch positive and every in-batch hard negative is a negative for
    anchor i. The weight α (``hard_negative_weight``, 1_i^j = 1 only for j = i) scales anchor i's own hard negative,
    which is adding log α to logit (i, B + i); α = 1 is the plain loss.
    """
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    if not hard_negative_weight > 0:
        raise ValueError(f"hard_negative_weight must be > 0, got {hard_negative_weight}")
    _check_same_shape(anchors, positives, "positives")
    anchors = F.normalize(anchors, dim=-1)
    logits = anchors @ F.normalize(positives, dim=-1).T / temperature  # (B, B)
    if hard_negatives is not None:
        _check_same_shape(anchors, hard_negatives, "hard_negatives")
        negative_logits = anchors @ F.normalize(hard_negatives, dim=-1).T / temperature  # (B, B)
        if hard_negative_weight != 1.0:
            own = torch.eye(len(anchors), dtype=logits.dtype, device=logits.device)
            negative_logits = negative_logits + math.log(hard_negative_weight) * own
        logits = torch.cat([logits, negative_logits], dim=1)  # (B, 2B)
    targets = torch.arange(len(anchors), device=logits.device)
    return F.cross_entropy(logits, targets)


def label_contrastive_loss(embeddings: torch.Tensor, labels: torch.Tensor, temperature: float = 0.05) -> torch.Tensor:
    """Label-contrastive loss of a labelled single-sentence batch (SST, CFIMDB): (B, D) vectors, (B,) classes.

    Pulls together the sentences of one class and pushes apart the others (Khosla et al. 2020, "Supervised Contrastive
    Learning", §3.2; for fine-tuning a pretrained language model: Gunel et al. 2021, "Supervised Contrastive Learning
    for Pre-trained Language Model Fine-tuning", §2), in a KL-to-label-similarity form: each row's target is the batch's
    label similarity, the prediction a softmax over the embeddings' cosine similarities,

        S_ij = cos(e_i, e_j) / τ                       for j ≠ i (the diagonal is left out of the softmax)
        T_ij = [y_i = y_j] / Σ_{k≠i} [y_i = y_k]       for j ≠ i, T_ii = 0   (rows of Y·Yᵀ, normalised)
        L    = 1/|R| Σ_{i∈R} KL(T_i ‖ softmax_j(S_i)) = 1/|R| Σ_{i∈R} Σ_{j≠i} T_ij (log T_ij − log p_ij)

    With one positive per row this is InfoNCE over the in-batch others; with several, each row's target spreads evenly
    over its same-class neighbours (SupCon's L_out averages −log p over the positives instead; the two differ by the
    target's entropy, a constant, so their gradients agree).

    R is the rows whose class appears at least twice in the batch: a row without a same-class neighbour has no target
    distribution, so it is **skipped** (out of the sum and of |R|) but still a negative in the other rows. If every row
    is skipped (B = 1, or all labels distinct) the loss is ``embeddings.sum() * 0``, so ``backward()`` still works (all
    gradients zero).
    """
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    if embeddings.dim() != 2:
        raise ValueError(f"embeddings must be (B, D), got {tuple(embeddings.shape)}")
    if labels.dim() != 1 or len(labels) != len(embeddings):
        raise ValueError(f"labels must be (B,) with B = {len(embeddings)}, got {tuple(labels.shape)}")
    if labels.is_floating_point():
        raise ValueError(f"labels must be integer class ids, got dtype {labels.dtype}")
    n = len(embeddings)
    diagonal = torch.eye(n, dtype=torch.bool, device=embeddings.device)
    same = (labels.unsqueeze(0) == labels.unsqueeze(1)) & ~diagonal     # Y·Yᵀ without the diagonal
    counts = same.sum(dim=1)
    rows = counts > 0                                                   # R: rows with target mass
    if not bool(rows.any()):
        return embeddings.sum() * 0
    unit = F.normalize(embeddings, dim=-1)
    logits = (unit @ unit.T / temperature).masked_fill(diagonal, float("-inf"))
    log_p = torch.log_softmax(logits, dim=1).masked_fill(diagonal, 0.0)  # 0 · log p_ii must not be 0 · -inf
    target = same.to(log_p.dtype) / counts.clamp(min=1).unsqueeze(1).to(log_p.dtype)
    # Σ_j T_ij log T_ij: the target is uniform over the row's counts[i] positives, so it is -log counts[i].
    kl = -torch.log(counts.clamp(min=1).to(log_p.dtype)) - (target * log_p).sum(dim=1)
    return kl[rows].mean()


def make_loss_weighting(kind: str, task_names: list[str], weights: dict[str, float],
                        tasks: Mapping[str, Task] = MappingProxyType({})) -> "LossWeighting":
    """The weighting named ``kind`` ("fixed", "adaptive" or "learned") over ``task_names``, starting
    from the base ``weights`` (one finite, non-negative number per task, no more, no fewer); ``tasks``: the
    rows by name, whose metrics the adaptive weighting reads."""
    weightings = {"fixed": FixedWeighting, "adaptive": partial(AdaptiveWeighting, tasks=tasks),
                  "learned": LearnedWeighting}
    if kind not in weightings:
        raise ValueError(f"unknown loss weighting {kind!r}; choose one of {', '.join(weightings)}")
    if not task_names or len(set(task_names)) != len(task_names):
        raise ValueError(f"task names must be non-empty and distinct, got {task_names}")
    missing, extra = set(task_names) - set(weights), set(weights) - set(task_names)
    if missing or extra:
        raise ValueError(f"loss weights must name exactly the tasks {sorted(task_names)}: "
                         f"missing {sorted(missing)}, unknown {sorted(extra)}")
    bad = {name: w for name, w in weights.items() if not (math.isfinite(w) and w >= 0)}
    if bad:
        raise ValueError(f"loss weights must be finite and non-negative, got {bad}")
    base = {name: float(weights[name]) for name in task_names}
    return weightings[kind](base)


class LossWeighting(nn.Module):
    """Per-task losses into one scalar. ``forward`` takes the losses of any non-empty subset of the
    tasks (the joint step passes all); a task with base weight 0 contributes nothing."""

    def __init__(self, base_weights: dict[str, float]):
        super().__init__()
        self.task_names = list(base_weights)
        # Buffers, so the weights follow .to(device) and are saved with a state_dict.
        self.register_buffer("base_weights", torch.tensor([base_weights[n] for n in self.task_names]))
        self.register_buffer("weights", self.base_weights.clone())

    def forward(self, losses: dict[str, torch.Tensor]) -> torch.Tensor:
        return _total([self.weights[i] * losses[name] for i, name in self._present(losses)], losses)

    def update(self, dev_metrics: dict[str, float]) -> None:
        """Called after each dev evaluation; only adaptive weighting uses it."""

    def current_weights(self) -> dict[str, float]:
        """The multiplier each task's loss gets now (logged to metrics.json)."""
        return {name: float(w) for name, w in zip(self.task_names, self.weights)}

    def _present(self, losses: dict[str, torch.Tensor]) -> list[tuple[int, str]]:
        """(index, name) of each task in ``losses`` whose base weight is not 0; checks the names."""
        unknown = set(losses) - set(self.task_names)
        if unknown or not losses:
            raise ValueError(f"losses must name some of the tasks {self.task_names}, got {sorted(losses)}")
        return [(i, name) for i, name in enumerate(self.task_names) if name in losses and self.base_weights[i] != 0]


class FixedWeighting(LossWeighting):
    """Σ_t w_t L_t with the base weights throughout."""


class AdaptiveWeighting(LossWeighting):
    """Σ_t w_t L_t, the weights re-set after each epoch from the dev scores: the weaker task gets more.

    Each task's dev metric becomes a score s_t in [0, 1]: accuracy as it is, a Pearson r as
    (r + 1) / 2 (the normalisation of ``training.learning.tasks.overall_score``). With base weights b_t,

        w_t = b_t (1 - s_t) · (Σ_k b_k) / (Σ_k b_k (1 - s_k))

    so the weights keep the base weights' total Σ_k b_k, and tasks that score the same keep their base
    weights. Before the first update, and when no weighted task has any shortfall (the denominator is
    0, e.g. every s_t = 1), the weights are the base weights.
    """

    def __init__(self, base_weights: dict[str, float], tasks: Mapping[str, Task]):
        unknown = [name for name in base_weights if name not in tasks]
        if unknown:
            raise ValueError(f"adaptive weighting needs each task's metric; unknown tasks {unknown}")
        super().__init__(base_weights)
        self.tasks = {name: tasks[name] for name in base_weights}

    def update(self, dev_metrics: dict[str, float]) -> None:
        missing = [name for name in self.task_names if name not in dev_metrics]
        if missing:
            raise ValueError(f"adaptive weighting needs the dev metric of every task; missing {missing}")
        for name in self.task_names:
            if not math.isfinite(dev_metrics[name]):
                raise ValueError(f"dev metric of {self.tasks[name].name} is not finite: {dev_metrics[name]}")
        scores = [min(max(self.tasks[name].unit_score(dev_metrics[name]), 0.0), 1.0) for name in self.task_names]
        shortfall = torch.tensor([1.0 - score for score in scores], dtype=self.base_weights.dtype,
                                 device=self.base_weights.device)
        raw = self.base_weights * shortfall
        self.weights.copy_(raw * self.base_weights.sum() / raw.sum() if raw.sum() > 0 else self.base_weights)


class LearnedWeighting(LossWeighting):
    """Σ_t ( exp(-s_t) · b_t L_t + s_t ), one learned s_t = log σ_t² per task (initialised to 0).

    Kendall, Gal & Cipolla 2018, "Multi-Task Learning Using Uncertainty to Weigh Losses", §3.2 Eq. 7 (a regression term
    L / (2σ²) + log σ) and Eq. 10 (a classification term L / σ² + log σ), in the common simplified form: one expression
    for every task with the factors of 1/2 dropped, and s = log σ² learned rather than σ (the paper's own advice, end of
    §3.2) so that the weight exp(-s_t) stays positive and nothing divides by zero. The base weights b_t are kept as
    fixed multipliers on the losses (1 by default); at init the total is Σ_t b_t L_t. A task with b_t = 0 is left out
    entirely, as its s_t would otherwise fall without bound. The s_t are parameters: add ``weighting.parameters()`` to
    the optimizer (without weight decay).
    """

    def __init__(self, base_weights: dict[str, float]):
        super().__init__(base_weights)
        self.log_variances = nn.Parameter(torch.zeros(len(self.task_names)))

    def forward(self, losses: dict[str, torch.Tensor]) -> torch.Tensor:
        s = self.log_variances
        return _total([torch.exp(-s[i]) * self.base_weights[i] * losses[name] + s[i]
                       for i, name in self._present(losses)], losses)

    def current_weights(self) -> dict[str, float]:
        effective = self.base_weights * torch.exp(-self.log_variances.detach())
        return {name: float(w) for name, w in zip(self.task_names, effective)}


def _check_same_shape(anchors: torch.Tensor, other: torch.Tensor, what: str) -> None:
    if anchors.dim() != 2 or other.shape != anchors.shape:
        raise ValueError(f"anchors and {what} must both be (B, D), got {tuple(anchors.shape)} "
                         f"and {tuple(other.shape)}")


def _total(terms: list[torch.Tensor], losses: dict[str, torch.Tensor]) -> torch.Tensor:
    """The sum of the terms; a zero scalar (without a graph) when every task had base weight 0."""
    if not terms:
        return torch.zeros((), device=next(iter(losses.values())).device)
    return sum(terms[1:], terms[0])
