"""Round-robin iteration over several task loaders (one batch per task per step)."""
from __future__ import annotations

from typing import Iterator

from torch.utils.data import DataLoader

STRATEGIES = ("min", "exhaust", "proportional")


class RoundRobinScheduler:
    """Yield ``(task_name, batch)`` taking one batch from each task in turn. An epoch has ``steps``
    rounds, each visiting every task once, in the loaders' order; as many rounds as
      - ``strategy="min"``: the smallest loader has batches (every task seen equally often, none repeats);
      - ``strategy="exhaust"``: the largest loader has batches; a smaller loader that runs out starts
        over (re-shuffled) so the larger data is fully used;
    at most ``max_steps`` (quick runs). ``strategy="proportional"`` has no rounds: every loader's
    batches once an epoch, spread evenly (batch k of a task of n at (k + ½)/n of the epoch), so a task
    is trained on in proportion to its size, as when MT-DNN (Liu et al. 2019, Algorithm 1) shuffles batches
    from the union of the tasks; ``max_steps`` caps it at as many batches as that many rounds."""

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
        self.steps = min(sizes) if strategy == "min" else max(sizes)
        if max_steps is not None:
            self.steps = min(self.steps, max_steps)
        spread = sorted(((k + 0.5) / n, i, name) for i, (name, n) in enumerate(zip(loaders, sizes)) for k in range(n))
        self.order = [name for _, _, name in spread][:max_steps * len(loaders) if max_steps is not None else None]

    def __len__(self) -> int:
        """Batches per epoch (rounds × tasks, or every batch once)."""
        return len(self.order) if self.strategy == "proportional" else self.steps * len(self.loaders)

    def __iter__(self) -> Iterator[tuple[str, dict]]:
        if self.strategy == "proportional":
            iterators = {name: iter(loader) for name, loader in self.loaders.items()}
            yield from ((name, next(iterators[name])) for name in self.order)
            return
        for batches in self.rounds():
            yield from batches.items()

    def rounds(self) -> Iterator[dict[str, dict]]:
        """One ``{task_name: batch}`` per step (the joint loss trains on a whole round at once)."""
        if self.strategy == "proportional":
            raise ValueError("--rr proportional has no rounds of one batch per task (the joint loss needs them)")
        iterators = {name: iter(loader) for name, loader in self.loaders.items()}
        for _ in range(self.steps):
            batches = {}
            for name, loader in self.loaders.items():
                try:
                    batches[name] = next(iterators[name])
                except StopIteration:  # only with "exhaust": start this task's data over
                    iterators[name] = iter(loader)
                    batches[name] = next(iterators[name])
            yield batches
