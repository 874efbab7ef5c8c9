"""Sentences into pooled vectors with an encoder (``encode``), the one pass that the API
(``LoadedRun.encode``), the embedding tools and the unsupervised SimCSE stage's STS curve share.
It needs no run configuration, so an extension can use it without importing ``training.configuration.sections``."""
from __future__ import annotations

from typing import Sequence

import numpy as np
import torch
from tqdm.auto import tqdm

from training.data.batching import make_loader, to_device
from training.data.readers import Example
from heads import pooled_size
from heads.pooling import TOKEN_REDUCTIONS, applied_reduction, pool
from minbert import BertModel, BertTokenizer


PROGRESS_FROM = 2000  # sentences from which ``encode`` shows a progress bar unless told


def model_max_length(max_length: int, bert: BertModel) -> int:
    """``max_length`` capped at the model's positions: longer sentences are truncated, not an error."""
    return min(max_length, bert.config.max_position_embeddings)


@torch.no_grad()
def encode(bert: BertModel, tokenizer: BertTokenizer, sentences: Sequence[str], pooling: str = "mean",
           reduction: str = "mean", batch_size: int = 64, max_length: int = 128,
           progress: bool | str | None = None) -> np.ndarray:
    """Pooled vectors, float32 ``(len(sentences), width)`` in their order, from the encoder in eval mode
    (restored after) on its own device. ``progress``: a tqdm bar, with this description if a string;
    None: one from ``PROGRESS_FROM`` sentences."""
    if reduction not in TOKEN_REDUCTIONS:
        raise ValueError(f"unknown reduction {reduction!r}; choose one of {list(TOKEN_REDUCTIONS)}")
    applied_reduction(pooling, reduction)  # an unknown mode fails here, even for an empty list
    if batch_size < 1:
        raise ValueError(f"batch_size must be at least 1, got {batch_size}")
    vectors = np.zeros((len(sentences), pooled_size(bert.config.hidden_size, pooling)), dtype=np.float32)
    if not sentences:
        return vectors
    examples = [Example(str(i), (text,), None, 0) for i, text in enumerate(sentences)]
    loader = make_loader(examples, tokenizer, model_max_length(max_length, bert), batch_size, shuffle=False,
                         bucket=True)
    show = len(sentences) >= PROGRESS_FROM if progress is None else bool(progress)
    device = next(bert.parameters()).device
    was_training = bert.training
    bert.eval()
    try:
        for batch in tqdm(loader, desc=progress if isinstance(progress, str) else "encode", leave=False,
                          dynamic_ncols=True, disable=not show):
            encoding = to_device(batch["inputs"][0], device)
            outputs = bert(encoding["input_ids"], encoding["attention_mask"], encoding["token_type_ids"])
            pooled = pool(outputs, encoding["attention_mask"], pooling, reduction)
            vectors[[int(i) for i in batch["ids"]]] = pooled.float().cpu().numpy()
    finally:
        bert.train(was_training)
    return vectors
