"""Per-task adapters (Houlsby et al. 2019, "Parameter-Efficient Transfer Learning for NLP", §2.1): each task has a
small bottleneck after each encoder layer, h ← h + W_up·f(W_down·h + b_down) + b_up, with m ≪ H hidden units
(``--adapter_size``), so the shared encoder carries one set of weights and each task a few of its own. With
``--option pretrain`` (the encoder frozen) it is adapter tuning proper: the adapters, and the heads, alone train.

Where this differs from the paper: one adapter a layer, on the layer's output (after its last LayerNorm), where the
paper puts two, each on a sub-layer's output before the residual sum and LayerNorm (Figure 2), and trains the layer
norms too; f is GELU, BERT's own non-linearity. The start is the identity exactly: W_up and both biases start at
zero and W_down as the paper's near-identity start (N(0, 10⁻²) cut at two standard deviations, §3.6), so a run's
first step sees the encoder as it was and W_up's gradient, W_down·h, is not zero.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from heads.model_parts import ModelPart

from ..configuration.flags import flag, optional_float
from .base import Extension


@dataclass(frozen=True)
class AdaptersConfig:
    adapters: bool = flag(False, "per-task bottleneck adapters (Houlsby et al. 2019) after each encoder layer, "
                                 "trained in a group of their own")
    adapter_size: int = flag(64, "the adapters' bottleneck width m (hidden units of each)")
    adapter_lr: float | None = flag(None, "the adapters' learning rate (default: --head_lr)", type=optional_float)


class Adapters(Extension):
    name, settings, column, short = "adapters", AdaptersConfig, "Adapters", "adapters"
    variants = (("mean-adapters-pretrain", ["--adapters", "--option", "pretrain"]),)   # adapter tuning: encoder frozen

    def checks(self, c, core) -> list[tuple[bool, str]]:
        on = self.enabled(c)
        return [(c.adapter_size >= 1, "--adapter_size must be at least 1"),
                (c.adapter_lr is None or c.adapter_lr > 0, "--adapter_lr must be positive"),
                (not on or core.train.epochs > 0, "--adapters trains in multi-task epochs: give --epochs 1 or more "
                                                  "(a run of the stages alone saves the encoder only)")]

    def model_parts(self, c, core, model) -> dict[str, nn.Module]:
        bert = model.bert.config
        return {"adapters": TaskAdapters(list(model.heads), bert.num_hidden_layers, bert.hidden_size,
                                         c.adapter_size, c.adapter_lr)}


class TaskAdapters(ModelPart):
    """Each task's adapters, one per encoder layer (``adapters.<task>.<layer>``), at the "layer" site: a task's batch
    passes through its own; with ``--private_layers`` a tower's layers have theirs as the shared ones do."""
    site = "layer"

    def __init__(self, tasks: list[str], layers: int, width: int, bottleneck: int, lr: float | None = None):
        super().__init__()
        self.lr, self.bottleneck = lr, bottleneck
        self.adapters = nn.ModuleDict({task: nn.ModuleList(Adapter(width, bottleneck) for _ in range(layers))
                                       for task in tasks})

    def after_layer(self, task: str, index: int, hidden: torch.Tensor) -> torch.Tensor:
        return self.adapters[task][index](hidden) if task in self.adapters else hidden

    def describe(self) -> str:
        layers = len(next(iter(self.adapters.values()), ()))
        return (f"per-task bottleneck adapters (Houlsby et al. 2019) of width {self.bottleneck} after each of the "
                f"{layers} encoder layers, for {', '.join(self.adapters) or 'no task'}")


class Adapter(nn.Module):
    """h + W_up·GELU(W_down·h + b_down) + b_up (§2.1), the identity at the start."""

    def __init__(self, width: int, bottleneck: int):
        super().__init__()
        self.down, self.up = nn.Linear(width, bottleneck), nn.Linear(bottleneck, width)
        nn.init.trunc_normal_(self.down.weight, std=1e-2, a=-2e-2, b=2e-2)
        for tensor in (self.down.bias, self.up.weight, self.up.bias):
            nn.init.zeros_(tensor)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return hidden + self.up(F.gelu(self.down(hidden)))


EXTENSION = Adapters()
