"""A run's model: built from a ``RunConfig`` for training, or loaded back from a finished run.

``build_model`` is the one place that turns a configuration into a ``MultitaskBert`` (the encoder
plus one head per task of ``--tasks``, each made by its ``Task`` row), so a loaded run has exactly
the modules the training run had.
"""
from __future__ import annotations

from pathlib import Path

from heads import MultitaskBert, pooled_size
from minbert import BertModel

from .config import RunConfig
from .tasks import TASKS


def build_model(config: RunConfig, model_dir: Path) -> MultitaskBert:
    """Pretrained encoder + fresh heads; with ``--option pretrain`` the encoder is frozen."""
    overrides = {"hidden_dropout_prob": config.model.hidden_dropout_prob}
    if config.model.attention_probs_dropout_prob is not None:
        overrides["attention_probs_dropout_prob"] = config.model.attention_probs_dropout_prob
    bert = BertModel.from_pretrained(model_dir, **overrides)
    width = pooled_size(bert.config.hidden_size, config.model.pooling)
    heads = {name: TASKS[name].head(width, config.model) for name in config.task_names()}
    model = MultitaskBert(bert, heads, config.model.pooling)
    if config.model.option == "pretrain":
        for p in model.bert.parameters():
            p.requires_grad_(False)
    return model
