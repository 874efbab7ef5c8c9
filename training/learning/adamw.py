"""The one place that builds an AdamW: every stage of a run, and the tools that train, take their
optimizer from ``build_adamw``, so the parameter groups (no weight decay on biases and LayerNorm
weights unless ``--decay_bias_norm``), the per-group learning rates and the update kernel
(``--adamw``: fused / foreach / loop) are chosen once (nanoGPT's ``configure_optimizers``).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterable, Sequence

import torch

from minbert import AdamW, decay_groups

if TYPE_CHECKING:
    from ..configuration.sections import RunSettings


@dataclass
class ParamSet:
    """Parameters that share a learning rate. Frozen ones (``requires_grad`` off) are left out."""
    named: Iterable[tuple[str, torch.nn.Parameter]]
    lr: float | None = None   # None: the optimizer's learning rate
    decay: bool = True        # False: no weight decay at all (e.g. learned loss weights, pulled to 0 by it)


def build_adamw(config: RunSettings, sets: Sequence[ParamSet], lr: float) -> AdamW | None:
    """AdamW over ``sets`` at ``lr`` (a set's own ``lr`` wins), with the run's weight decay and
    ``--adamw`` kernel; None when nothing is left to train (a frozen encoder and no head)."""
    train, groups = config.train, []
    for part in sets:
        named = [(name, p) for name, p in part.named if p.requires_grad]
        options = {} if part.lr is None else {"lr": part.lr}
        if part.decay and not train.decay_bias_norm:   # biases and LayerNorm weights in groups of their own
            groups += decay_groups(named, train.weight_decay, **options)
        elif named:
            groups.append({"params": [p for _, p in named], **options})
            if not part.decay:
                groups[-1]["weight_decay"] = 0.0
    if not groups:
        return None
    return AdamW(groups, lr=lr, weight_decay=train.weight_decay, **config.speed.adamw_options())
