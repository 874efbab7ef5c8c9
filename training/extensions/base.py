"""What an extension is: one object that the run, the checks, ``--help``, the report and the
ablation grid ask everything they need to know about it. An extension module defines its settings
dataclass (its flags), a subclass of ``Extension`` that overrides the hooks it uses, and
``EXTENSION``, its one instance; ``training/extensions/__init__.py`` lists the modules.
"""
from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

if TYPE_CHECKING:   # the run's parts import the configuration, which reads this package's registry
    from ..config import RunConfig
    from ..stages import Run


class Extension:
    name: str                        # its settings section and the flag that switches it on (--name)
    settings: type                   # its settings dataclass: one field per flag, the switch included
    column: str                      # its column in the results table
    short: str                       # its part of an ablation row's name
    costly: bool = False             # left out of the grid's "all but the costly" row
    budget: dict[str, str] = {}      # its part of scripts/ablate.sh's budget: flag -> value
    steps_flag: str | None = None    # the flag of its batches per epoch, which ablate.sh --stage_steps sets
    variants: tuple[tuple[str, list[str]], ...] = ()   # grid rows of its other settings: (name, flags)
    stages_alone: bool = False       # a run of the stages alone (--epochs 0) may consist of it

    def enabled(self, config: RunConfig) -> bool:
        return bool(getattr(config.extensions[self.name], self.name))

    def checks(self, config: RunConfig) -> list[tuple[bool, str]]:
        """(condition, one line naming the flag) for each setting that must hold. Checked whether the
        extension is on or not, so a bad value is caught before it is used."""
        return []

    def check(self, config: RunConfig) -> None:
        """Raise ValueError with the message of the first of ``checks`` that fails."""
        for ok, message in self.checks(config):
            if not ok:
                raise ValueError(message)

    def idle_flags(self, config: RunConfig) -> list[str]:
        """Its flags given (away from their defaults) while it is off, which would do nothing, except
        its budget flags: the ablation grid gives every row the same budget."""
        if self.enabled(config):
            return []
        section, defaults = config.extensions[self.name], self.settings()
        return [f"--{f.name}" for f in dataclasses.fields(section) if f.name != self.name
                and getattr(section, f.name) != getattr(defaults, f.name) and f"--{f.name}" not in self.budget]

    def check_files(self, config: RunConfig) -> None:
        """Raise DataError when a file its flags name is missing (before the run folder exists)."""

    def batch_sizes(self, config: RunConfig) -> list[tuple[str, int]]:
        """Its training batch sizes as (flag, size), which data-parallel processes split."""
        return []

    def max_lengths(self, config: RunConfig) -> list[tuple[str, int | None]]:
        """Its sentence lengths as (flag, word pieces), checked against the model's positions."""
        return []

    def reads(self, config: RunConfig) -> set[str]:
        """The tasks whose training sets it builds its data from (what a run of the stages alone reads)."""
        return set()

    def extra_files(self, config: RunConfig) -> list[str]:
        """Files of the data directory it needs beyond the tasks' own."""
        return []

    stage = None   # or a method ``stage(run: Run) -> dict`` run before multi-task training, in registry order

    def loss_weighting(self, config: RunConfig):
        """A ``training.losses.LossWeighting`` that makes each multi-task step one batch of every task
        with the weighted sum of their losses, or None."""
        return None

    def regularizer(self, config: RunConfig, model):
        """An object with ``add(loss, task, inputs, output) -> loss`` (and ``after_step()``) that adds a
        term to every task loss, or None."""
        return None

    def targets(self, run: Run):
        """An object with ``__call__(task, batch, labels) -> targets`` (and ``after_step()``) that
        replaces the gold labels of every task batch by the targets the task loss is taken against
        (e.g. mixed with a teacher's predictions), or None. Made once the run's parts exist."""
        return None
