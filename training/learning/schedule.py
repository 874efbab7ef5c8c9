"""The order of a stage's task batches: round-robin over several task loaders (one batch per task per step), or an
extension's order (``BatchOrder``)."""
from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Callable, Iterator

from torch.utils.data import DataLoader

from ..configuration.sections import STRATEGIES


@dataclass(frozen=True)
class BatchOrder:
    """An extension's order of the multi-task batches (``Extension.batch_order``): its flag, ``order`` and what
    it measures after each epoch for later orders (``Extension.measure_epoch``)."""
    name: str
    # (epoch, each task's examples, batches, the records of the epochs before it) -> the epoch's tasks, or None
    order: Callable[[int, dict[str, int], int, list[dict]], list[str] | None]
    measure: Callable[..., None] | None = None   # (the stage's Run, the records so far): adds to the last one


class RoundRobinScheduler:
    """Yield ``(task_name, batch)`` in the epoch's ``order`` of task names. With ``strategy="min"`` or
    ``"exhaust"`` the order is rounds, each visiting every task once in the loaders' order; as many as
      - ``"min"``: the smallest loader has batches (every task seen equally often, none repeats);
      - ``"exhaust"``: the largest loader has batches; a smaller loader that runs out starts over
        (re-shuffled) so the larger data is fully used.
    ``"proportional"`` has no rounds: every loader's batches once an epoch, spread evenly (batch k of a
    task of n at (k + ½)/n of the epoch), so a task is trained on in proportion to its size, as when
    MT-DNN (Liu et al. 2019, Algorithm 1) shuffles batches from the union of the tasks. ``max_steps``
    caps an epoch at as many batches as that many rounds (quick runs)."""

    def __init__(self, loaders: dict[str, DataLoader], strategy: str = "min", max_steps: int | None = None):
        if strategy not in STRATEGIES:
            raise ValueError(f"unknown round-robin strategy {strategy!r}; choose one of {', '.join(STRATEGIES)}")
        if not loaders:
            raise ValueError("no task loaders to schedule")
        empty = [name for name, loader in loaders.items() if len(loader) == 0]
        if empty:
            raise ValueError(f"no training batches for task(s) {', '.join(empty)}")
        self.loaders, self.strategy = loaders, strategy
        sizes = [len(loader) for loader in loaders.values()]
        if strategy == "proportional":
            spread = sorted(((k + 0.5) / n, i, name) for i, (name, n) in enumerate(zip(loaders, sizes))
                            for k in range(n))
            order = [name for _, _, name in spread]
        else:
            order = list(loaders) * (min(sizes) if strategy == "min" else max(sizes))
        self.order = order[:None if max_steps is None else max_steps * len(loaders)]

    def __len__(self) -> int:
        """Batches per epoch."""
        return len(self.order)

    def __iter__(self) -> Iterator[tuple[str, dict]]:
        return self.walk(self.order)

    def walk(self, order: list[str]) -> Iterator[tuple[str, dict]]:
        """``(task_name, batch)`` for each task name of ``order`` (``self.order``, or an extension's
        ``batch_order``): the task's next batch; a task whose batches are used up starts its data over
        (re-shuffled), as with "exhaust"."""
        iterators = {name: iter(loader) for name, loader in self.loaders.items()}
        for name in order:
            try:
                batch = next(iterators[name])
            except StopIteration:
                iterators[name] = iter(self.loaders[name])
                batch = next(iterators[name])
            yield name, batch

    def rounds(self, order: list[str] | None = None) -> Iterator[list[tuple[str, dict]]]:
        """The batches of ``order`` (default ``self.order``) in groups of as many as there are tasks, one
        group per step (the joint loss and PCGrad train on a group at once). In ``self.order`` a group
        is a round: one batch of every task."""
        if order is None and self.strategy == "proportional":
            raise ValueError("--rr proportional has no rounds of one batch per task (the joint loss needs them)")
        batches = self.walk(self.order if order is None else order)
        while round_ := list(itertools.islice(batches, len(self.loaders))):
            yield round_
