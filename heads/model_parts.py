"""What an extension may add to the multi-task model (``Extension.model_parts``): a ``ModelPart``, a module that says
where it acts, so that ``MultitaskBert`` applies it there without knowing what it is, and the recipe trains it, the
checkpoint saves it (under ``parts.<name>.*``) and ``load_run`` rebuilds it without a line about it elsewhere.

The sites, each given the task whose batch is run (``forward(head_name)``; None, as the SimCSE stages and ``encode``
run: the ``home`` task's, whose layers the encoder's own are):
  - ``"layer"``: ``after_layer(task, index, hidden) -> hidden`` on each encoder layer's output (index 0: the bottom
    layer; with ``--private_layers`` a tower's layers count on from the shared ones), before the next layer reads it;
  - ``"pooled"``: ``on_pooled(task, vector) -> vector`` on each pooled sentence vector, before the task's head.
"""
from __future__ import annotations

from torch import nn

SITES = ("layer", "pooled")


class ModelPart(nn.Module):
    """A module an extension adds to the model, acting at ``site`` (one of ``SITES``). ``lr``: its learning rate
    (None: ``--head_lr``); it trains in an optimizer group of its own."""
    site: str
    lr: float | None = None

    def after_layer(self, task: str, index: int, hidden):
        """Site "layer": encoder layer ``index``'s output (B, T, H) for ``task``, as the next layer is to read it."""
        raise NotImplementedError

    def on_pooled(self, task: str, vector):
        """Site "pooled": a pooled sentence vector (B, width) for ``task``, as its head is to read it."""
        raise NotImplementedError

    def describe(self) -> str:
        """What it is, in one line (the model card's list of parts)."""
        return type(self).__name__
