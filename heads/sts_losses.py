"""The losses an STS pair head can train with (``--sts_loss``), each of the head's 0..5 score ``s`` and the
gold similarity ``y`` over a batch. MSE is the task's own; the other two make the temperature τ
(``--head_temp``) part of the loss. Pearson r, the metric, does not change when every score is scaled or
shifted, so τ changes what is learned (how hard each pair is pushed), not how the scores are read.
A loss is a part of the STS pair head, beside its projection and scorer (``pair_parts.py``): it may change the
head's score (``probability``) and writes its line in the model card; ``STS_LOSSES`` is its registry.
"""
from __future__ import annotations

from functools import partial

import torch
import torch.nn.functional as F

SCALE = 5.0   # the STS scale: scores and gold similarities are 0..5


def mse_loss(scores: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """mean (s − y)²: the score regressed on the gold similarity."""
    return F.mse_loss(scores, labels.float())


def cosent_loss(scores: torch.Tensor, labels: torch.Tensor, temperature: float = 0.05) -> torch.Tensor:
    """CoSENT (Su 2022; sentence-transformers' ``CoSENTLoss``, whose scale 20 is 1/τ for τ = 0.05): only the
    order of the batch's pairs counts. With c = s/5 (the cosine, for the cosine head),

        L = log(1 + Σ_{(i, j): y_i > y_j} exp((c_j − c_i)/τ))

    over every two pairs of the batch whose gold similarities differ; 0 when none do (then
    ``scores.sum() * 0``, so that backward still works).
    """
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    c = scores / SCALE
    labels = labels.float()
    ordered = labels.unsqueeze(1) > labels.unsqueeze(0)                   # (i, j): y_i > y_j
    if not bool(ordered.any()):
        return scores.sum() * 0
    differences = (c.unsqueeze(0) - c.unsqueeze(1)) / temperature          # [i, j] = (c_j − c_i)/τ
    return torch.logsumexp(torch.cat([differences.new_zeros(1), differences[ordered]]), dim=0)


def probability_loss(scores: torch.Tensor, labels: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """The similarity read as a probability (``--sts_loss ce``): p = s/5 = sigmoid((cos(u, v) − b)/τ) for the
    cosine head (``PairHead(sigmoid_score=True)``), against the soft target y/5, with binary cross-entropy,

        L = −mean( (y/5)·log p + (1 − y/5)·log(1 − p) )

    (p clamped to [eps, 1 − eps]). Its minimum is at p = y/5, so each pair's score is pulled to the gold
    value as with MSE, but with the log-loss's weighting, sharpened by a small τ.
    """
    p = (scores / SCALE).clamp(eps, 1.0 - eps)
    return F.binary_cross_entropy(p, labels.float() / SCALE)


class StsLoss:
    """One ``--sts_loss``: the loss the STS head trains with (None: the task's own, MSE), what the model card
    and ``--help`` say of it, and whether the cosine head reads its score as a probability for it."""
    name: str
    help: str   # its part of --sts_loss's help, plain ASCII as --help prints it
    probability = False

    def loss(self, temperature: float):
        return None

    def trained(self, temperature: float) -> str:
        raise NotImplementedError


class MseLoss(StsLoss):
    name = "mse"
    help = "squared error of the 0..5 score"

    def trained(self, temperature):
        return "trained with MSE"


class CosentLoss(StsLoss):
    name = "cosent"
    help = "only the order of the batch's pairs counts, tau: --head_temp"

    def loss(self, temperature):
        return partial(cosent_loss, temperature=temperature)

    def trained(self, temperature):
        return f"trained with CoSENT (τ = {temperature})"


class ProbabilityLoss(StsLoss):
    name, probability = "ce", True
    help = "score/5 read as a probability against similarity/5 (the cosine head's score: 5*sigmoid((cos - b)/tau))"

    def loss(self, temperature):
        return probability_loss

    def trained(self, temperature):
        return "trained as a probability (score/5 against similarity/5, cross-entropy)"


# --sts_loss: the registry (a new loss is one class and one line); the task table's STS head asks it
STS_LOSSES: dict[str, StsLoss] = {loss.name: loss for loss in (MseLoss(), CosentLoss(), ProbabilityLoss())}
DEFAULT_STS_LOSS = "mse"
