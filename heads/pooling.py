"""Sentence vectors from BERT's hidden states: one function, ``pool``, and a table of modes.

Layer-combining modes (``first_last``, ``last4_mean``, ``second_last``, ...) first combine
layers token by token, then average over the real (unmasked) tokens, as in the SimCSE
"first-last avg." baseline (Gao et al. 2021, §7 and Table 10; Su et al. 2021, BERT-whitening).
``first_last`` averages the *embeddings output* with the last layer, as SimCSE's released code
first did; its maintainers later switched to the first Transformer layer (princeton-nlp/SimCSE#133).
"""
from __future__ import annotations

from typing import Callable

import torch

# Each mode: (hidden_states tuple [embeddings, layer 1, ..., layer N], pooler output, mask (B, T)) -> (B, D)
PoolFn = Callable[[tuple, torch.Tensor, torch.Tensor], torch.Tensor]


def pool(outputs: dict, attention_mask: torch.Tensor, mode: str) -> torch.Tensor:
    """Pool a ``BertModel`` output dict into one vector per sequence using ``mode``."""
    try:
        fn = POOLING_MODES[mode]
    except KeyError:
        raise ValueError(f"unknown pooling mode {mode!r}; choose one of {sorted(POOLING_MODES)}") from None
    return fn(outputs["hidden_states"], outputs["pooler_output"], attention_mask)


def pooled_size(hidden_size: int, mode: str) -> int:
    """Width of the pooled vector: 4H for ``last4_concat``, H otherwise."""
    return 4 * hidden_size if mode == "last4_concat" else hidden_size


def masked_mean(hidden: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """Average of (B, T, H) over the positions where ``attention_mask`` is 1."""
    mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
    return (hidden * mask).sum(1) / mask.sum(1).clamp(min=1.0)


def masked_max(hidden: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """Element-wise maximum of (B, T, H) over the real tokens (padding never wins)."""
    mask = attention_mask.unsqueeze(-1).bool()
    return hidden.masked_fill(~mask, torch.finfo(hidden.dtype).min).max(dim=1).values


def _mean_of_layers(layers: list[torch.Tensor], attention_mask: torch.Tensor) -> torch.Tensor:
    return masked_mean(torch.stack(layers).mean(0), attention_mask)


POOLING_MODES: dict[str, PoolFn] = {
    # [CLS] token of the last layer, as it is (BERT §3 uses it for classification).
    "cls": lambda hs, pooler, mask: hs[-1][:, 0],
    # tanh(W h_[CLS] + b): the NSP pooler output.
    "pooler": lambda hs, pooler, mask: pooler,
    "mean": lambda hs, pooler, mask: masked_mean(hs[-1], mask),
    "max": lambda hs, pooler, mask: masked_max(hs[-1], mask),
    # Average of the embeddings output and the last layer, then mean over tokens.
    "first_last": lambda hs, pooler, mask: _mean_of_layers([hs[0], hs[-1]], mask),
    "second_last": lambda hs, pooler, mask: masked_mean(hs[-2], mask),
    "last4_mean": lambda hs, pooler, mask: _mean_of_layers(list(hs[-4:]), mask),
    "last4_concat": lambda hs, pooler, mask: torch.cat([masked_mean(h, mask) for h in hs[-4:]], dim=-1),
}
