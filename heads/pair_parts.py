"""The parts a ``PairHead`` is made of (docs/heads.md): a projection of the two sentence vectors u, v, then a
scorer of the pair. Each part is a small class in its registry (``PROJECTIONS``, ``SCORERS``) that carries
its formula (the model card reads it) and its words in ``--help`` (the flags' help lists the registry), and
adds its parameters to the head under their own names (``project_u``, ``classifier``, ``threshold``), so
saved heads load whichever class holds the code. A new head kind is one class and one registry line;
``DEFAULTS`` are the heads' defaults, said once. A scorer made with a setting of its own (``ClassesScorer(k)``)
is given to the head as it is.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

# the pair heads' defaults (the flags --para_head, --sts_head, --pair_projection), said once
DEFAULTS = {"para_head": "concat", "sts_head": "cosine", "pair_projection": "none"}


class Projection:
    """No projection: u, v as pooled."""
    name = "none"
    formula = ""   # what the model card writes before the scorer's formula
    help = "u, v as pooled"   # its part of --pair_projection's help (plain ASCII, as --help prints)

    def build(self, head: nn.Module, in_dim: int, dropout: float) -> None:
        pass

    def __call__(self, head: nn.Module, u: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return u, v


class SharedProjection(Projection):
    """One linear layer on each dropped-out sentence vector, the same for both sides (Siamese)."""
    name = "shared"
    help = "one linear layer for both sides"
    formula = ("u ← `project_u`·dropout(u), v ← `project_u`·dropout(v) (one linear layer for both sides); "
               "then ")

    def build(self, head, in_dim, dropout):
        head.projection_dropout = nn.Dropout(dropout)
        head.project_u = nn.Linear(in_dim, in_dim)

    def second(self, head: nn.Module) -> nn.Module:
        return head.project_u   # one layer, so saved once

    def __call__(self, head, u, v):
        return head.project_u(head.projection_dropout(u)), self.second(head)(head.projection_dropout(v))


class SeparateProjection(SharedProjection):
    """One linear layer a side, as the CS224N seed design has."""
    name = "separate"
    help = "one linear layer a side"
    formula = "u ← `project_u`·dropout(u), v ← `project_v`·dropout(v) (one linear layer a side); then "

    def build(self, head, in_dim, dropout):
        super().build(head, in_dim, dropout)
        head.project_v = nn.Linear(in_dim, in_dim)

    def second(self, head):
        return head.project_v


class Scorer:
    """How a pair's (projected) vectors become one logit z (``output="logit"``, QQP) or a 0..5 similarity
    (``output="score"``, STS: 5·sigmoid(z) unless the scorer says otherwise)."""
    name: str
    logit_help: str             # z in --para_head's help, plain ASCII as --help prints it (--sts_head's: score_help)
    takes_probability = False   # whether --sts_loss ce makes its score 5·sigmoid(z) (the cosine head's 5·cos)

    def build(self, head: nn.Module, in_dim: int, dropout: float) -> None:
        raise NotImplementedError

    def logit(self, head: nn.Module, u: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def score(self, head: nn.Module, u: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return 5.0 * torch.sigmoid(self.logit(head, u, v))

    def score_help(self) -> str:
        """The 0..5 score in ``--sts_head``'s help, as ``score`` computes it."""
        return f"5*sigmoid({self.logit_help})"

    def thresholded(self, head: nn.Module) -> bool:
        """Whether the head cuts a similarity with a learned threshold (``PairHead.calibrate`` starts it)."""
        return False

    def formula(self, output: str, temp, probability: bool = False) -> str:
        """The head's formula for the model card: the logit, or the 0..5 score."""
        raise NotImplementedError


class ConcatScorer(Scorer):
    """z = w·[u; v; |u − v|] + c after dropout (Sentence-BERT, Reimers & Gurevych 2019, §3)."""
    name = "concat"
    logit_help = "linear[u; v; |u-v|]"
    outputs = 1   # the classifier's outputs: one logit

    def build(self, head, in_dim, dropout):
        head.dropout = nn.Dropout(dropout)
        head.classifier = nn.Linear(3 * in_dim, self.outputs)

    def concatenated(self, head, u, v):
        """The classifier's outputs on dropout([u; v; |u − v|]), one column each."""
        return head.classifier(head.dropout(torch.cat([u, v, (u - v).abs()], dim=-1)))

    def logit(self, head, u, v):
        return self.concatenated(head, u, v).squeeze(-1)

    def formula(self, output, temp, probability=False):
        if output == "logit":
            return "concat: logit = w·[u; v; |u−v|] + b (`classifier`)"
        return "concat: score = 5·sigmoid(w·[u; v; |u−v|] + b) (`classifier`), 0..5"


class SumScorer(Scorer):
    """z = w·(dropout(u) + dropout(v)) + c (the CS224N handout's baseline)."""
    name = "sum"
    logit_help = "linear(u + v)"

    def build(self, head, in_dim, dropout):
        head.dropout = nn.Dropout(dropout)
        head.classifier = nn.Linear(in_dim, 1)

    def logit(self, head, u, v):
        return head.classifier(head.dropout(u) + head.dropout(v)).squeeze(-1)

    def formula(self, output, temp, probability=False):
        if output == "logit":
            return "sum: logit = w·(dropout(u) + dropout(v)) + b (`classifier`)"
        return "sum: score = 5·sigmoid(w·(dropout(u) + dropout(v)) + b) (`classifier`), 0..5"


class CosineScorer(Scorer):
    """z = (cos(u, v) − b) / τ with a learned threshold b (started from the data: ``PairHead.calibrate``); its
    score is 5·cos(u, v), or 5·sigmoid(z) read as a probability (``--sts_loss ce``)."""
    name = "cosine"
    logit_help = "(cos(u, v) - b)/tau, b learned and started from the data, tau: --head_temp"
    takes_probability = True

    def build(self, head, in_dim, dropout):
        # cos/τ alone puts the decision boundary at cos = 0, but the sentence vectors of a
        # pretrained encoder give most question pairs a cosine well above 0: b learns the cut.
        head.threshold = nn.Parameter(torch.zeros(()))

    def logit(self, head, u, v):
        return (F.cosine_similarity(u, v, dim=-1) - head.threshold) / head.temperature

    def score(self, head, u, v):
        if head.sigmoid_score:
            return 5.0 * torch.sigmoid(self.logit(head, u, v))
        return 5.0 * F.cosine_similarity(u, v, dim=-1)

    def score_help(self):
        return "5*cos(u, v)"   # 5*sigmoid(z) under --sts_loss ce: that loss's help says so

    def thresholded(self, head):
        return head.output == "logit" or head.sigmoid_score

    def formula(self, output, temp, probability=False):
        if output == "logit":
            return f"cosine: logit = (cos(u, v) − threshold) / {temp}"
        if probability:
            return f"cosine: score = 5·sigmoid((cos(u, v) − threshold) / {temp}), 0..5"
        return "cosine: score = 5·cos(u, v), clamped to 0..5 (its `threshold` is unused)"


class ClassesScorer(ConcatScorer):
    """k logits = W·[u; v; |u − v|] + b after dropout (Sentence-BERT's classification objective, Reimers &
    Gurevych 2019, §3): a declared pair task of more than two classes, where one logit cannot say which class.
    Made with its class count (``PairHead(width, ClassesScorer(k))``), so it is no choice of --para_head."""
    name = "classes"

    def __init__(self, num_classes: int):
        self.num_classes = num_classes

    @property
    def outputs(self) -> int:
        return self.num_classes

    def logit(self, head, u, v):
        return self.concatenated(head, u, v)   # (batch, k): no column to squeeze

    def formula(self, output, temp, probability=False):
        return (f"`classifier` on [u; v; |u−v|]: logits = W·[u; v; |u−v|] + b ({self.num_classes} classes); the "
                "prediction is the argmax")


PROJECTIONS: dict[str, Projection] = {p.name: p for p in (Projection(), SharedProjection(), SeparateProjection())}
SCORERS: dict[str, Scorer] = {s.name: s for s in (ConcatScorer(), CosineScorer(), SumScorer())}
