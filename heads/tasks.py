"""Task heads on top of one shared BERT (``SentimentHead`` for SST, the siamese ``PairHead`` for QQP
and STS), and the multi-task model that routes a task to its head."""
from __future__ import annotations

import copy

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from minbert import BertModel

from .model_parts import ModelParts
from .pair_parts import PROJECTIONS, SCORERS, Scorer
from .pooling import POOLING_MODES, pool

PAIR_HEAD_KINDS = tuple(SCORERS)   # the registries' names (heads/pair_parts.py); a test may add to them


class SentimentHead(nn.Module):
    """Dropout then a linear layer to ``num_classes`` logits."""

    def __init__(self, in_dim: int, num_classes: int = 5, dropout: float = 0.1):
        super().__init__()
        self.dropout = nn.Dropout(dropout)
        self.classifier = nn.Linear(in_dim, num_classes)

    def forward(self, u: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.dropout(u))


class PairHead(nn.Module):
    """Scores a sentence pair from its two sentence vectors u, v (docs/heads.md): a projection, then a scorer,
    each a part from its registry (``heads/pair_parts.py``).

    ``kind``: a scorer's name in ``SCORERS``, e.g. ``"concat"`` (w·[u; v; |u − v|] + c) or ``"cosine"``
    ((cos(u, v) − b)/τ, b learned); or a scorer itself, e.g. ``ClassesScorer(k)`` (k logits, ``output="logit"``).
    ``projection``: a projection's name in ``PROJECTIONS``: ``"none"``, or linear layers on the dropped-out
    sentence vectors first.
    ``output="logit"``: z, one unnormalised log-odds per pair (QQP; BCE-with-logits).
    ``output="score"``: a similarity on the STS scale 0..5: ``5·sigmoid(z)``, for ``cosine`` ``5·cos(u, v)``,
    or with ``sigmoid_score`` ``5·sigmoid((cos(u, v) − b)/τ)`` (STS read as a probability, ``--sts_loss ce``).
    ``loss``: the loss of the output against the labels when it is not the task's own (the task table sets
    it; None: the task's).
    """

    def __init__(self, in_dim: int, kind: str | Scorer = "concat", output: str = "logit",
                 temperature: float = 0.05, dropout: float = 0.1, projection: str = "none",
                 sigmoid_score: bool = False, loss=None):
        super().__init__()
        scorer = kind if isinstance(kind, Scorer) else SCORERS.get(kind)
        if scorer is None:
            raise ValueError(f"unknown pair head {kind!r}; choose one of {tuple(SCORERS)}")
        if output not in ("logit", "score"):
            raise ValueError(f"unknown pair head output {output!r}; choose logit or score")
        if projection not in PROJECTIONS:
            raise ValueError(f"unknown projection {projection!r}; choose one of {tuple(PROJECTIONS)}")
        if temperature <= 0:
            raise ValueError(f"temperature must be positive, got {temperature}")
        self.kind, self.output, self.temperature, self.projection = scorer.name, output, temperature, projection
        self.scorer, self.projector = scorer, PROJECTIONS[projection]
        self.sigmoid_score = sigmoid_score and self.scorer.takes_probability and output == "score"
        self.loss = loss
        self.scorer.build(self, in_dim, dropout)      # the scorer's parameters first, then the projection's:
        self.projector.build(self, in_dim, dropout)   # the order their random starts are drawn in

    def projected(self, u: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """u, v through the projection (after dropout), or as they are without one."""
        return self.projector(self, u, v)

    def forward(self, u: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        u, v = self.projected(u, v)
        return self.scorer.logit(self, u, v) if self.output == "logit" else self.scorer.score(self, u, v)

    @property
    def thresholded(self) -> bool:
        """Whether the head cuts a similarity with a learned threshold (``calibrate`` starts it)."""
        return self.scorer.thresholded(self)

    def similarity(self, u: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """cos(u, v) of the (projected) vectors: what the cosine head scores and its threshold cuts."""
        return F.cosine_similarity(*self.projected(u, v), dim=-1)

    @torch.no_grad()
    def calibrate(self, similarities: torch.Tensor, labels: torch.Tensor) -> float | None:
        """Start the threshold b of a cosine head where it best separates ``similarities`` (cos(u, v) of
        some training pairs) by their ``labels`` (0/1, or a 0..5 similarity cut at 2.5); returns b, or None
        for a head without a threshold (``concat``, ``sum``, the plain 5·cos score).

        Why: with b = 0 every pair of a pretrained encoder (cosines of about 0.5 to 0.95) starts as a
        paraphrase with a logit of 10 to 19 at τ = 0.05; b, one number moving about the head's learning
        rate a step, cannot travel the 0.7 or so it needs within a run, so the encoder is pushed to
        lower every cosine instead (docs/heads.md, 'Why the cosine paraphrase head failed').
        """
        if not self.thresholded or len(similarities) == 0:
            return None
        cut = best_threshold(similarities.double().cpu().numpy(), self.positives(labels).double().cpu().numpy())
        self.threshold.fill_(cut)
        return cut

    def positives(self, labels: torch.Tensor) -> torch.Tensor:
        """Which pairs the threshold should put above it: the paraphrases, or for a 0..5 similarity the
        pairs of its upper half (>= 2.5)."""
        return labels >= 2.5 if self.output == "score" else labels.bool()


def best_threshold(scores, labels) -> float:
    """The cut b that classifies the most pairs right with "label 1 when score > b": the midpoint
    between two neighbouring sorted scores (or just outside them all); the lowest such b on a tie."""
    order = np.argsort(scores, kind="stable")
    ranked, gold = np.asarray(scores, dtype=np.float64)[order], np.asarray(labels, dtype=np.float64)[order]
    # correct[i]: the cut between ranked[i-1] and ranked[i] (the first i pairs called 0, the rest 1)
    zeros_below = np.concatenate([[0.0], np.cumsum(1.0 - gold)])
    ones_above = gold.sum() - np.concatenate([[0.0], np.cumsum(gold)])
    i = int(np.argmax(zeros_below + ones_above))
    if i == 0:
        return float(ranked[0] - 1e-3)
    if i == len(ranked):
        return float(ranked[-1] + 1e-3)
    return float((ranked[i - 1] + ranked[i]) / 2)


class MultitaskBert(nn.Module):
    """One BERT encoder shared by named task heads.

    ``forward(head_name, inputs)`` encodes each tokenised sentence in ``inputs`` (one dict of
    ``input_ids``/``attention_mask``/``token_type_ids`` per sentence), pools each, and passes the
    vectors to the named head. ``embeddings_hook`` is forwarded to ``BertModel``.

    ``private_layers`` K > 0 gives each head but ``home`` a *tower*: its own copy of the encoder's top
    K layers, over the shared bottom (MT-DNN/PALs-style task-specific top layers; Liu et al. 2019,
    Stickland & Murray 2019). ``home`` (default: the first head) keeps the encoder's own top layers,
    so ``bert`` alone is that task's whole encoder. An optimizer step trains one task's batch, so a tower
    costs no compute per step, only memory.

    ``parts``: what extensions add (``heads/model_parts.py``), each at its site for the task being run (None: home's).
    """

    def __init__(self, bert: BertModel, heads: dict[str, nn.Module], pooling: str = "cls",
                 private_layers: int = 0, home: str | None = None):
        super().__init__()
        if pooling not in POOLING_MODES:
            raise ValueError(f"unknown pooling mode {pooling!r}; choose one of {sorted(POOLING_MODES)}")
        depth = len(bert.encoder.layer)
        if not 0 <= private_layers <= depth:
            raise ValueError(f"private_layers must be in [0, {depth}] (the encoder's layers), got {private_layers}")
        self.bert = bert
        self.heads = nn.ModuleDict(heads)
        self.pooling = pooling
        self.home = home if home is not None else next(iter(heads), None)
        top = bert.encoder.layer[depth - private_layers:] if private_layers else []
        self.towers = nn.ModuleDict({name: copy.deepcopy(nn.ModuleList(top)) for name in heads
                                     if private_layers and name != self.home})
        self.parts = ModelParts()

    def encoder_parameters(self):
        """The shared encoder's and the towers' parameters, named (what trains at the encoder's rate)."""
        yield from self.bert.named_parameters(prefix="bert")
        yield from self.towers.named_parameters(prefix="towers")

    def embed(self, encoding: dict, embeddings_hook=None, head_name: str | None = None) -> torch.Tensor:
        """The pooled vector of one tokenised sentence through ``head_name``'s tower (None: ``home``'s)."""
        task = self.home if head_name is None else head_name
        tower = self.towers[task] if task in self.towers else None
        outputs = self.bert(encoding["input_ids"], encoding["attention_mask"], encoding.get("token_type_ids"),
                            embeddings_hook=embeddings_hook, top_layers=tower, layer_hook=self.parts.layer_hook(task))
        return self.parts.on_pooled(task, pool(outputs, encoding["attention_mask"], self.pooling))

    def forward(self, head_name: str | None | tuple[str, ...], inputs, embeddings_hook=None):
        """The named head's output on ``inputs`` (one encoding per sentence of the task).

        Two more forms, so that a DistributedDataParallel wrapper sees every training pass as one
        call of ``forward``: ``head_name=None`` gives the list of sentence vectors (the SimCSE
        stages train on those); a tuple of head names with a tuple of per-task inputs gives the
        tuple of those heads' outputs (a joint-loss step).
        """
        if isinstance(head_name, tuple):
            return tuple(self(name, task_inputs, embeddings_hook) for name, task_inputs in zip(head_name, inputs))
        vectors = [self.embed(encoding, embeddings_hook, head_name) for encoding in inputs]
        if head_name is None:
            return vectors
        return self.heads[head_name](*vectors)
