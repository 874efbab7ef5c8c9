"""Turn lists of ``Example`` into padded tensor batches.

Every text column is encoded on its own (``inputs[k]`` holds the k-th sentence of each pair), not
as one ``[CLS] a [SEP] b [SEP]`` sequence: the siamese pair heads need the embeddings u and v of
the two sentences separately. Padding is dynamic (to the longest sentence in the batch), and the
collate function is a small top-level class so DataLoader worker processes can pickle it.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Sequence

import torch
from torch.utils.data import DataLoader, Dataset

from .readers import Example

if TYPE_CHECKING:  # the tokenizer object is passed in; data/ does not depend on minbert at run time
    from minbert.tokenizer import BertTokenizer


class ExampleDataset(Dataset):
    """A map-style dataset over a list of ``Example``."""

    def __init__(self, examples: Sequence[Example]):
        self.examples = list(examples)

    def __len__(self) -> int:
        return len(self.examples)

    def __getitem__(self, i: int) -> Example:
        return self.examples[i]


def make_collate(tokenizer: BertTokenizer, max_length: int) -> Callable[[list[Example]], dict]:
    """A collate function: ``{"ids": [str], "inputs": [encoding per text column], "labels": ...}``."""
    return ExampleCollator(tokenizer, max_length)


def make_loader(
    examples: Sequence[Example],
    tokenizer: BertTokenizer,
    max_length: int,
    batch_size: int,
    shuffle: bool,
    seed: int = 0,
) -> DataLoader:
    """A DataLoader in the main process; shuffling draws from a generator seeded with ``seed``.

    Two loaders built with the same seed yield the same batches in the same order, epoch after
    epoch (the generator advances between epochs, so each epoch's order differs).
    """
    generator = torch.Generator().manual_seed(seed) if shuffle else None
    return DataLoader(
        ExampleDataset(examples),
        batch_size=batch_size,
        shuffle=shuffle,
        generator=generator,
        collate_fn=make_collate(tokenizer, max_length),
        num_workers=0,
    )


class ExampleCollator:
    """Picklable collate: one ``tokenizer.encode_batch`` per text column, plus stacked labels."""

    def __init__(self, tokenizer: BertTokenizer, max_length: int):
        self.tokenizer = tokenizer
        self.max_length = max_length

    def __call__(self, batch: list[Example]) -> dict:
        if not batch:
            raise ValueError("cannot collate an empty batch")
        n_texts = len(batch[0].texts)
        if any(len(ex.texts) != n_texts for ex in batch):
            raise ValueError("all examples in a batch must have the same number of texts")
        inputs = [
            self.tokenizer.encode_batch([ex.texts[k] for ex in batch], max_length=self.max_length)
            for k in range(n_texts)
        ]
        return {"ids": [ex.id for ex in batch], "inputs": inputs, "labels": _labels_tensor(batch)}


def _labels_tensor(batch: list[Example]) -> torch.Tensor | None:
    """LongTensor for class labels, FloatTensor for scores, None for unlabelled examples."""
    labels = [ex.label for ex in batch]
    if all(label is None for label in labels):
        return None
    if any(label is None for label in labels):
        raise ValueError("a batch mixes labelled and unlabelled examples")
    if all(isinstance(label, int) for label in labels):
        return torch.tensor(labels, dtype=torch.long)
    return torch.tensor(labels, dtype=torch.float)
