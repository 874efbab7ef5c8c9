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

import torch
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


class ModelParts(nn.ModuleDict):
    """A model's parts by name (``MultitaskBert.parts``, saved as ``parts.<name>.*``), applied at their sites; empty,
    it holds no weight and changes nothing."""

    def add(self, parts: dict[str, ModelPart]) -> None:
        """Attach an extension's parts, each a ``ModelPart`` at a known site, under names not taken."""
        for name, part in parts.items():
            if not isinstance(part, ModelPart) or getattr(part, "site", None) not in SITES:
                raise ValueError(f"model part {name!r} must be a heads.model_parts.ModelPart acting at one of "
                                 f"{', '.join(SITES)}")
            if name in self:
                raise ValueError(f"two model parts are named {name!r}")
            self[name] = part

    def layer_hook(self, task: str):
        """What ``BertModel`` applies to each layer's output for ``task``'s batch: the "layer" parts in order, or
        None when there are none (the encoder as it is)."""
        at_layers = [part for part in self.values() if part.site == "layer"]
        if not at_layers:
            return None

        def after_layer(index: int, hidden: torch.Tensor) -> torch.Tensor:
            for part in at_layers:
                hidden = part.after_layer(task, index, hidden)
            return hidden
        return after_layer

    def encoder(self, bert: nn.Module, task: str) -> nn.Module:
        """``bert`` as ``task``'s batches see it, for what calls the encoder alone (``encode``): itself when no part
        acts at the layers."""
        hook = self.layer_hook(task)
        return bert if hook is None else _EncoderWithParts(bert, hook)

    def on_pooled(self, task: str, vector: torch.Tensor) -> torch.Tensor:
        """``vector`` through the "pooled" parts in order, as ``task``'s head is to read it."""
        for part in self.values():
            if part.site == "pooled":
                vector = part.on_pooled(task, vector)
        return vector


class _EncoderWithParts(nn.Module):
    """A ``BertModel`` whose every call applies ``hook`` (``ModelParts.layer_hook``) to its layers' outputs."""

    def __init__(self, bert: nn.Module, hook):
        super().__init__()
        self.bert, self.hook, self.config = bert, hook, bert.config

    def forward(self, *args, **kwargs):
        return self.bert(*args, layer_hook=self.hook, **kwargs)
