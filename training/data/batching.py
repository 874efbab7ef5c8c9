"""Turn lists of ``Example`` into padded tensor batches.

Every text column is encoded on its own (``inputs[k]`` holds the k-th sentence of each pair), not as one ``[CLS] a [SEP]
b [SEP]`` sequence: the siamese pair heads need the embeddings u and v of the two sentences separately. Padding is
dynamic (to the longest sentence in the batch, which ``BucketBatchSampler`` keeps close to the shortest), and the
collate function is a small top-level class so DataLoader worker processes can pickle it.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Iterator, Sequence

import torch
from torch.utils.data import BatchSampler, DataLoader, Dataset, RandomSampler, Sampler, SequentialSampler

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

    def __getitems__(self, indices: list[int]) -> list[Example]:
        """A batch's examples (DataLoader's fetch with a batch sampler), keeping a process's ``share`` of it."""
        examples = [self.examples[i] for i in indices]
        return Shard(examples, indices.share, indices.whole) if isinstance(indices, Shard) else examples


def make_loader(examples: Sequence[Example], tokenizer: BertTokenizer, max_length: int, batch_size: int,
                shuffle: bool, seed: int = 0, bucket: bool = False, shard: tuple[int, int] | None = None) -> DataLoader:
    """A DataLoader in the main process; shuffling draws from a generator seeded with ``seed``, so two loaders
    with one seed yield the same batches, epoch after epoch. ``bucket=True``: length-bucketed batches
    (unshuffled: shortest first, not in file order). ``shard=(rank, world_size)`` (data-parallel training):
    each process keeps its slice of the same global batches, so together they see a single process's batches."""
    generator = torch.Generator().manual_seed(seed) if shuffle else None
    dataset = ExampleDataset(examples)
    if bucket:
        lengths = example_lengths(dataset.examples, tokenizer, max_length)
        sampler = BucketBatchSampler(lengths, batch_size, shuffle, generator)
    else:
        # what DataLoader(batch_size=..., shuffle=...) builds itself, spelled out so it can be sharded
        order = RandomSampler(dataset, generator=generator) if shuffle else SequentialSampler(dataset)
        sampler = BatchSampler(order, batch_size, drop_last=False)
    if shard is not None:
        sampler = ShardedBatchSampler(sampler, *shard)
    # the generator is passed on too so iterating never draws from torch's global RNG
    return DataLoader(dataset, batch_sampler=sampler, generator=generator,
                      collate_fn=ExampleCollator(tokenizer, max_length), num_workers=0)


class Shard(list):
    """One process's slice of a global batch (indices, then examples), with its ``share``: the weight of its mean
    loss, ``world_size · n_slice / n_batch``, so that the gradients DDP averages over the processes are the whole
    batch's mean (PyTorch's DDP divides their sum by ``world_size``). 1 for an even split. ``whole``: the global
    batch's examples, what every process decides on alike (a contrastive stage leaves out a batch of one)."""

    def __init__(self, items, share: float, whole: int):
        super().__init__(items)
        self.share, self.whole = share, whole


class ShardedBatchSampler(Sampler[list[int]]):
    """Process ``rank``'s slice ``batch[rank::world_size]`` of every batch of ``batches``, as a ``Shard`` with its
    share. A slice a short last batch leaves empty is the batch's first example with share 0: the process still
    takes the step (DDP's all-reduce needs every process), and its loss and example count are nothing."""

    def __init__(self, batches: Sampler[list[int]], rank: int, world_size: int):
        if not 0 <= rank < world_size:
            raise ValueError(f"rank must be in [0, {world_size}), got {rank}")
        self.batches, self.rank, self.world_size = batches, rank, world_size

    def __len__(self) -> int:
        return len(self.batches)

    def __iter__(self) -> Iterator[Shard]:
        for batch in self.batches:
            mine = batch[self.rank::self.world_size]
            yield Shard(mine or batch[:1], self.world_size * len(mine) / len(batch), len(batch))


def example_lengths(examples: Sequence[Example], tokenizer: BertTokenizer | None = None,
                    max_length: int | None = None) -> list[int]:
    """The bucketing key of each example: the length of its longest text, in word pieces with [CLS] and [SEP]
    capped at ``max_length`` (the padded width it needs) given a tokenizer, else in characters. Tokens after
    padding / real tokens on SST / QQP / STS train, shuffled buckets of 32: word pieces 1.04 / 1.20 / 1.13,
    characters 1.29 / 1.53 / 1.41, no buckets 2.06 / 2.43 / 2.42; the longer text of a pair beats the sum of
    both (QQP: 1.20 vs 1.41). The extra tokenizing costs ~60 µs a sentence (1 s for all of QQP train)."""
    if tokenizer is None:
        return [max(len(text) for text in ex.texts) for ex in examples]
    cap = max_length if max_length is not None else float("inf")
    return [int(min(max(len(tokenizer.tokenize(text)) for text in ex.texts) + 2, cap)) for ex in examples]


class BucketBatchSampler(Sampler[list[int]]):
    """Batches of indices whose examples have similar ``lengths``.

    Shuffled (training): each epoch, a random permutation is cut into chunks of ``chunk_batches`` batches,
    each chunk sorted by length and cut into batches, and the batches shuffled, so which examples meet, and
    when, changes every epoch; all draws come from ``generator``. Not shuffled (evaluation): all examples
    sorted by length (stable: ties keep file order) and cut into batches in that order.
    """

    def __init__(self, lengths: Sequence[int], batch_size: int, shuffle: bool,
                 generator: torch.Generator | None = None, chunk_batches: int = 50):
        if batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, got {batch_size}")
        if chunk_batches < 1:
            raise ValueError(f"chunk_batches must be at least 1, got {chunk_batches}")
        self.lengths = torch.as_tensor(list(lengths), dtype=torch.long)
        self.batch_size, self.shuffle = batch_size, shuffle
        self.generator, self.chunk_batches = generator, chunk_batches

    def __len__(self) -> int:
        return -(-len(self.lengths) // self.batch_size)

    def __iter__(self) -> Iterator[list[int]]:
        if not self.shuffle:
            yield from _cut(torch.sort(self.lengths, stable=True).indices.tolist(), self.batch_size)
            return
        permutation = torch.randperm(len(self.lengths), generator=self.generator)
        chunk = self.batch_size * self.chunk_batches
        batches: list[list[int]] = []
        for start in range(0, len(permutation), chunk):
            indices = permutation[start : start + chunk]
            by_length = indices[torch.sort(self.lengths[indices], stable=True).indices]
            batches.extend(_cut(by_length.tolist(), self.batch_size))
        for i in torch.randperm(len(batches), generator=self.generator).tolist():
            yield batches[i]


def _cut(indices: list[int], size: int) -> list[list[int]]:
    return [indices[i : i + size] for i in range(0, len(indices), size)]


class ExampleCollator:
    """Picklable collate: one ``tokenizer.encode_batch`` per text column, plus stacked labels, as
    ``{"ids": [str], "inputs": [encoding per text column], "labels": ...}``."""

    def __init__(self, tokenizer: BertTokenizer, max_length: int):
        self.tokenizer, self.max_length = tokenizer, max_length

    def __call__(self, batch: list[Example]) -> dict:
        if not batch:
            raise ValueError("cannot collate an empty batch")
        n_texts = len(batch[0].texts)
        if any(len(ex.texts) != n_texts for ex in batch):
            raise ValueError("all examples in a batch must have the same number of texts")
        inputs = [self.tokenizer.encode_batch([ex.texts[k] for ex in batch], max_length=self.max_length)
                  for k in range(n_texts)]
        labels = [ex.label for ex in batch]
        if all(label is None for label in labels):
            tensor = None
        elif any(label is None for label in labels):
            raise ValueError("a batch mixes labelled and unlabelled examples")
        else:  # LongTensor for class labels, FloatTensor for scores
            dtype = torch.long if all(isinstance(label, int) for label in labels) else torch.float
            tensor = torch.tensor(labels, dtype=dtype)
        collated = {"ids": [ex.id for ex in batch], "inputs": inputs, "labels": tensor}
        if isinstance(batch, Shard):
            collated["share"], collated["whole"] = batch.share, batch.whole
        return collated


def examples_in(batch: dict) -> int:
    """The examples a batch trains on: none in a process's stand-in for an empty slice (share 0)."""
    return 0 if batch.get("share") == 0 else len(batch["ids"])


def weighted_by_share(loss: torch.Tensor, batch: dict) -> torch.Tensor:
    """A slice's mean loss weighted by its share of the global batch (``Shard``): unchanged with one process."""
    share = batch.get("share", 1.0)
    return loss if share == 1.0 else loss * share


def examples_in_whole_batch(batch: dict) -> int:
    """The examples of the global batch a process's slice comes from (its own, with one process)."""
    return batch.get("whole", len(batch["ids"]))


def to_device(encoding: dict, device: torch.device) -> dict:
    """A batch's encoding (``input_ids``, ``attention_mask``, ...) on ``device``."""
    return {key: value.to(device, non_blocking=True) for key, value in encoding.items()}
