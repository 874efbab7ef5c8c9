"""Sentence vectors from BERT's hidden states: one function, ``pool``, and a table of modes
(docs/flags.md, "Pooling modes").

Layer-combining modes combine layers token by token, then reduce over the real tokens with
``reduction`` ("mean", the papers' default, or "max"), as the SimCSE "first-last avg." baseline
(Gao et al. 2021, §7 and Table 10; Su et al. 2021, BERT-whitening). ``first_last`` and ``all_mean``
count the *embeddings output* as a layer, as SimCSE's released code first did (its maintainers later
took the first Transformer layer, princeton-nlp/SimCSE#133). ``cls`` and ``pooler`` pick one vector;
``mean``/``max`` are the last layer with that reduction. ``applied_reduction`` tells which a mode used.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

TOKEN_REDUCTIONS = ("mean", "max")

# (B, T, H) hidden states, (B, T) mask -> (B, H): masked_mean or masked_max
Reduce = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def pool(outputs: dict, attention_mask: torch.Tensor, mode: str, reduction: str = "mean") -> torch.Tensor:
    """One vector per sequence of a ``BertModel`` output dict. ``reduction`` ("mean" or "max"): how
    the layer-combining modes reduce over real tokens (``last4_concat``: each layer, then concatenated);
    ``cls``, ``pooler``, ``mean`` and ``max`` ignore it (see ``applied_reduction``)."""
    entry = _mode(mode)
    if reduction not in _REDUCERS:
        raise ValueError(f"unknown reduction {reduction!r}; choose one of {list(TOKEN_REDUCTIONS)}")
    return entry.fn(outputs["hidden_states"], outputs["pooler_output"], attention_mask, _REDUCERS[reduction])


def pooled_size(hidden_size: int, mode: str) -> int:
    """Width of the pooled vector: 4H for ``last4_concat``, H otherwise."""
    return 4 * hidden_size if mode == "last4_concat" else hidden_size


def applied_reduction(mode: str, reduction: str = "mean") -> str | None:
    """The token reduction ``pool(..., mode, reduction)`` really applies: ``reduction`` for the
    layer-combining modes, the fixed one for ``mean``/``max``, ``None`` for ``cls``/``pooler``."""
    entry = _mode(mode)
    return reduction if entry.takes_reduction else entry.fixed_reduction


def takes_reduction(mode: str) -> bool:
    """Whether ``mode`` honours the ``reduction`` argument of ``pool``."""
    return _mode(mode).takes_reduction


def layers_read(mode: str) -> int:
    """How many Transformer layers, counted from the top, ``mode`` reads (4 for ``last4_mean``).
    A model with fewer would not fail: ``hidden_states[-4:]`` of a 2-layer model is just shorter
    (and holds the embeddings output), so the caller must compare this with the model's depth."""
    return _mode(mode).layers


def masked_mean(hidden: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """Average of (B, T, H) over the positions where ``attention_mask`` is 1."""
    mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
    return (hidden * mask).sum(1) / mask.sum(1).clamp(min=1.0)


def masked_max(hidden: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """Element-wise maximum of (B, T, H) over the real tokens (padding never wins)."""
    mask = attention_mask.unsqueeze(-1).bool()
    return hidden.masked_fill(~mask, torch.finfo(hidden.dtype).min).max(dim=1).values


@dataclass(frozen=True)
class PoolingMode:
    """One row of the table: ``fn(hidden_states, pooler_output, mask, reduce) -> (B, D)``, with
    ``hidden_states`` = (embeddings output, layer 1, ..., layer N). A mode with ``fixed_reduction``
    or ``picks_vector`` ignores ``reduce``; ``layers``: how many top layers it reads (``layers_read``).
    """

    fn: Callable[[tuple, torch.Tensor, torch.Tensor, Reduce], torch.Tensor]
    fixed_reduction: str | None = None
    picks_vector: bool = False
    layers: int = 1

    @property
    def takes_reduction(self) -> bool:
        return self.fixed_reduction is None and not self.picks_vector


def _combine(layers, attention_mask: torch.Tensor, reduce: Reduce) -> torch.Tensor:
    """Average ``layers`` token by token, then reduce over the real tokens."""
    return reduce(torch.stack(list(layers)).mean(0), attention_mask)


POOLING_MODES: dict[str, PoolingMode] = {
    # [CLS] token of the last layer, as it is (BERT §3 uses it for classification).
    "cls": PoolingMode(lambda hs, pooler, mask, reduce: hs[-1][:, 0], picks_vector=True),
    # tanh(W h_[CLS] + b): the NSP pooler output.
    "pooler": PoolingMode(lambda hs, pooler, mask, reduce: pooler, picks_vector=True),
    "mean": PoolingMode(lambda hs, pooler, mask, reduce: masked_mean(hs[-1], mask), fixed_reduction="mean"),
    "max": PoolingMode(lambda hs, pooler, mask, reduce: masked_max(hs[-1], mask), fixed_reduction="max"),
    # Average of the embeddings output and the last layer, then reduce over tokens.
    "first_last": PoolingMode(lambda hs, pooler, mask, reduce: _combine([hs[0], hs[-1]], mask, reduce)),
    "second_last": PoolingMode(lambda hs, pooler, mask, reduce: reduce(hs[-2], mask), layers=2),
    # Average of every hidden state (embeddings output and all N layers), then reduce over tokens.
    "all_mean": PoolingMode(lambda hs, pooler, mask, reduce: _combine(hs, mask, reduce)),
    "last2_mean": PoolingMode(lambda hs, pooler, mask, reduce: _combine(hs[-2:], mask, reduce), layers=2),
    "last4_mean": PoolingMode(lambda hs, pooler, mask, reduce: _combine(hs[-4:], mask, reduce), layers=4),
    "last4_concat": PoolingMode(lambda hs, pooler, mask, reduce: torch.cat([reduce(h, mask) for h in hs[-4:]], dim=-1),
                                layers=4),
}

_REDUCERS: dict[str, Reduce] = {"mean": masked_mean, "max": masked_max}


def _mode(mode: str) -> PoolingMode:
    try:
        return POOLING_MODES[mode]
    except KeyError:
        raise ValueError(f"unknown pooling mode {mode!r}; choose one of {sorted(POOLING_MODES)}") from None
