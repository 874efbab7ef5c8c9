"""The ``Task`` row of a task's declaration (``training/configuration/task_declarations.py``: the schema, the
built-in SST, QQP, STS and CFIMDB, a user's own in a ``--task_file``), and the table of the tasks a run knows.

A run's table is the built-in tasks and the declarations it saved (``DataConfig.own_tasks``):
``known_tasks(config.data)`` builds it, so nothing is ever registered into a module-global table.
"""
from __future__ import annotations

from types import MappingProxyType
from typing import Iterable, Mapping

import torch.nn.functional as F

from heads import ClassesScorer, PairHead, SentimentHead
from heads.sts_losses import STS_LOSSES, mse_loss

from ..configuration.sections import CoreSettings, DataConfig
from ..configuration.task_declarations import BUILTIN_DECLARATIONS, STS_SCALE, check_declaration, parse_tasks
from ..configuration.task_file import own_declarations
from .tasks import Task, argmax


def task_from_declaration(d: dict) -> Task:
    """The ``Task`` row of a checked declaration: a single-sentence classifier is a linear layer on u (SST's
    head); a two-class pair task one logit from ``--para_head`` (QQP's); a pair task of more classes a linear
    layer on [u; v; |u − v|] to the classes (``ClassesScorer``); a pair regression ``--sts_head``'s score
    on 0..5 trained with ``--sts_loss`` (STS's), which a declared score_range is mapped onto."""
    n, common = d["num_classes"], dict(
        name=d["name"], description=d["description"], files=dict(d["files"]), text_columns=tuple(d["text_columns"]),
        label_column=d["label_column"], metric_name=d["metric"], output_prefix=d["output_prefix"],
        prediction_column=d["prediction_column"], id_column=d["id_column"])
    if d["kind"] == "classification":
        return Task(**common, label_type="class", num_classes=n, score_range=None,
                    head=lambda width, m: SentimentHead(width, n, m.hidden_dropout_prob),
                    loss=F.cross_entropy, predict=argmax, divergence="multiclass")
    if d["kind"] == "pair_classification" and n == 2:
        return Task(**common, label_type="class", num_classes=2, score_range=None,
                    head=lambda width, m: PairHead(width, m.para_head, "logit", m.head_temp, m.hidden_dropout_prob,
                                                   m.pair_projection),
                    loss=lambda logits, labels: F.binary_cross_entropy_with_logits(logits, labels.float()),
                    predict=lambda logits: (logits > 0).long(), divergence="binary")
    if d["kind"] == "pair_classification":
        return Task(**common, label_type="class", num_classes=n, score_range=None,
                    head=lambda width, m: PairHead(width, ClassesScorer(n), dropout=m.hidden_dropout_prob),
                    loss=F.cross_entropy, predict=argmax, divergence="multiclass")
    return _pair_regression(common, *d["score_range"])


def _pair_regression(common: dict, low: float, high: float) -> Task:
    """A pair regression's row. On the head's own scale (STS) labels and scores are used as they are; another
    range is mapped onto 0..5 for the loss, and the 0..5 prediction back onto the range."""
    if (low, high) == STS_SCALE:
        to_scale, loss, predict = None, mse_loss, (lambda scores: scores.clamp(*STS_SCALE))
    else:
        def to_scale(labels):
            return (labels.float() - low) * (5.0 / (high - low))

        def loss(scores, labels):
            return F.mse_loss(scores.float(), to_scale(labels))

        def predict(scores):
            return low + scores.clamp(*STS_SCALE) * ((high - low) / 5.0)

    def head(width: int, m) -> PairHead:
        chosen = STS_LOSSES[m.sts_loss]
        own = chosen.loss(m.head_temp)   # None: the task's own loss (MSE)
        if own is not None and to_scale is not None:
            own = (lambda scores, labels, trained=own: trained(scores, to_scale(labels)))
        return PairHead(width, m.sts_head, "score", m.head_temp, m.hidden_dropout_prob, m.pair_projection,
                        sigmoid_score=chosen.probability, loss=own)

    return Task(**common, label_type="score", num_classes=None, score_range=(low, high), head=head, loss=loss,
                predict=predict, divergence="regression")


BUILTIN_TASKS: Mapping[str, Task] = MappingProxyType(
    {d["name"]: task_from_declaration(check_declaration(d, "training/configuration/task_declarations.py",
                                                          reserved=())) for d in BUILTIN_DECLARATIONS})


def known_tasks(data: DataConfig) -> dict[str, Task]:
    """Every task this run can name, by name: the built-in ones and its own (``own_tasks``, the checked
    declarations of ``--task_file``, saved with the run). Built here, never registered anywhere."""
    return _with_builtin(data.declared_tasks())


def run_tasks(config: CoreSettings) -> dict[str, Task]:
    """The ``Task`` rows of ``--tasks``, in their order (the order of round-robin and of the logs)."""
    known = known_tasks(config.data)
    return {name: known[name] for name in parse_tasks(config.train.tasks, known)}


def saved_tasks(saved: dict, where: str = "the run's saved configuration") -> dict[str, Task]:
    """The task table of a saved configuration (a run's ``config`` in metrics.json): the built-in tasks and
    the declarations it carries (checked again: a saved one may be hand-edited)."""
    return _with_builtin(check_declaration(d, where, i) for i, d in enumerate(own_declarations(saved)))


def _with_builtin(checked: Iterable[dict]) -> dict[str, Task]:
    """The built-in tasks, then the ``Task`` row of each checked declaration."""
    return {**BUILTIN_TASKS, **{task.name: task for task in map(task_from_declaration, checked)}}
