"""What an extension is: one object that the run, the checks, ``--help``, the report and the
ablation grid ask everything they need to know about it. An extension module defines its settings
dataclass (its flags), a subclass of ``Extension`` that overrides the hooks it uses, and
``EXTENSION``, its one instance; ``training/extensions/__init__.py`` lists the modules.

Some grid rows and table labels come from core settings rather than extensions (``--rr``,
``--private_layers``): those are ``Idea`` objects too (``training/extensions/core.py``), so the grid and
the report ask one list (``training.extensions.ideas()``) and never name an idea.
"""
from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Callable

import torch

from ..learning.callbacks import GradientHook

if TYPE_CHECKING:   # annotations only
    from ..configuration.sections import CoreSettings


class Idea:
    """A way a run departs from plain multi-task fine-tuning (FT): what the ablation grid and the
    results table know of it."""
    name: str                        # the flag that switches it on (--name)
    column: str | None = None        # its on/off column in the results table (None: no column)
    shows: tuple[str, ...] = ()      # saved settings whose values the results table shows, a column each where its
                                     # rows differ in them and its caption where they do not (a core idea's flags)
    variants: tuple[tuple[str, list[str]], ...] = ()   # grid rows of its settings on MEAN pooling: (name, flags)
    pinned: tuple[str, ...] = ()     # flags every grid row not about it gives, so the table does not hang
                                     # on its default (e.g. --private_layers 0)

    def on(self, saved: dict) -> bool:
        """Whether a run with the saved configuration ``saved`` (metrics.json "config") used it: such a
        run is not the FT baseline, and its on/off cell says so."""
        return is_on(saved_flag(saved, self.name))

    def seed_free(self, section: dict, seed) -> dict:
        """Its saved settings section without what differs between the seeds of one recipe (the report
        pools runs whose configurations agree but for the seed)."""
        return section


class Extension(Idea):
    name: str                        # its settings section and the flag that switches it on (--name)
    settings: type                   # its settings dataclass: one field per flag, the switch included
    column: str                      # its column in the results table
    short: str                       # its part of an ablation row's name
    costly: bool = False             # left out of the grid's "all but the costly" row
    budget: dict[str, str] = {}      # its part of scripts/ablate.sh's budget: flag -> value
    steps_flag: str | None = None    # the flag of its batches per epoch, which ablate.sh --stage_steps sets
    stages_alone: bool = False       # a run of the stages alone (--epochs 0) may consist of it
    joint: bool = False              # each multi-task step takes one batch of every task (a round), not one
    conflicts: dict[str, str] = {}   # extension it cannot run with -> what both decide (refused in one line; no
                                     # grid row has both)
    one_process: bool = False        # refused under torchrun (several processes), before the run folder exists

    def enabled(self, settings) -> bool:
        """Whether its section ``settings`` switches it on. Every hook below is given its own section,
        ``settings``, and the core ones, ``core`` (a ``CoreSettings``): no hook reads another extension's."""
        return bool(getattr(settings, self.name))

    def checks(self, settings, core: CoreSettings) -> list[tuple[bool, str]]:
        """(condition, one line naming the flag) for each setting that must hold. Checked whether the
        extension is on or not, so a bad value is caught before it is used."""
        return []

    def check(self, settings, core: CoreSettings) -> None:
        """Raise ValueError with the message of the first of ``checks`` that fails."""
        for ok, message in self.checks(settings, core):
            if not ok:
                raise ValueError(message)

    def idle_flags(self, settings) -> list[str]:
        """Its flags given (away from their defaults) while it is off, which would do nothing, except
        its budget flags: the ablation grid gives every row the same budget."""
        if self.enabled(settings):
            return []
        defaults = self.settings()
        return [f"--{f.name}" for f in dataclasses.fields(settings) if f.name != self.name
                and getattr(settings, f.name) != getattr(defaults, f.name) and f"--{f.name}" not in self.budget]

    def check_files(self, settings, core: CoreSettings) -> None:
        """Raise DataError when a file its flags name is missing (before the run folder exists)."""

    def batch_sizes(self, settings, core: CoreSettings) -> list[tuple[str, int]]:
        """Its training batch sizes as (flag, size), which data-parallel processes split."""
        return []

    def max_lengths(self, settings, core: CoreSettings) -> list[tuple[str, int | None]]:
        """Its sentence lengths as (flag, word pieces), checked against the model's positions."""
        return []

    def reads(self, settings, core: CoreSettings) -> set[str]:
        """The tasks whose training sets it builds its data from (what a run of the stages alone reads)."""
        return set()

    def extra_files(self, settings, core: CoreSettings) -> list[str]:
        """Files of the data directory it needs beyond the tasks' own."""
        return []

    stage = None   # or a method ``stage(run: Run) -> dict`` run before multi-task training, in registry order

    def after_stages(self, settings, core: CoreSettings) -> list[tuple[str, Callable]]:
        """(name, stage) of the stages it runs after multi-task training, in order, each ``stage(run) -> dict`` (its
        log) on the best multi-task weights; each is resumed as a stage of its own. Dev is then scored once, and the
        predictions, the final metrics and checkpoint/ are those of the weights they leave."""
        return []

    def loss_weighting(self, settings, core: CoreSettings):
        """A ``training.learning.losses.LossWeighting`` that makes each multi-task step one batch of every task
        with the weighted sum of their losses, or None."""
        return None

    def regularizer(self, settings, core: CoreSettings, model):
        """An object with ``add(loss, task, inputs, output) -> loss`` (and ``after_step()``) that adds a
        term to every task loss, or None."""
        return None

    def batch_order(self, settings, core: CoreSettings, epoch: int, sizes: dict[str, int],
                    steps: int, history: list[dict] = ()) -> list[str] | None:
        """The task of each training batch of multi-task epoch ``epoch`` (1 to ``--epochs``), in order, or
        None to keep ``--rr``'s order. ``sizes``: each task's training examples (in ``--tasks`` order);
        ``steps``: the batches ``--rr`` gives the epoch, which the order must keep (the
        learning-rate schedule is laid out over them); ``history``: the records of the epochs before ``epoch``
        (metrics.json's "epochs", with what ``measure_epoch`` added). A task drawn more often than it has batches
        starts its data over, reshuffled. The order must follow from these and the flags alone (``--seed``): a
        resumed run replays it (the records come back with the saved progress)."""
        return None

    def measure_epoch(self, settings, core: CoreSettings, run, history: list[dict]) -> None:
        """A batch-order extension's measurement of the model after each multi-task epoch (``run``: the kernel's
        ``stages.Run``), added to that epoch's record, ``history[-1]`` (the records so far), before dev is
        scored: what ``batch_order`` reads of later epochs. Saved with the progress, so a resumed run reads it
        back instead of measuring again."""

    def held_out(self, settings, core: CoreSettings) -> float:
        """The fraction of each task's training examples it holds out of training (0: none), as the split named
        after it (``run.splits[task][name]``) for its hooks to score: chosen as ``--val_fraction`` chooses
        (``training/data/holdout.py``, the same examples for every seed), from what ``--val_fraction`` leaves."""
        return 0.0

    def model_parts(self, settings, core: CoreSettings, model) -> dict[str, torch.nn.Module]:
        """Modules it adds to the model (``model``: the ``heads.MultitaskBert`` just built, before the optimizer), by
        name: each a ``heads.model_parts.ModelPart``, which says where it acts. The model applies them, the recipe
        trains each in an optimizer group of its own, the checkpoint saves them (``parts.<name>.*``) and ``load_run``
        builds them again from the saved configuration before the weights load. Made the same way every time
        (random draws from the run's seed only): a resumed run builds them as the first sitting did."""
        return {}

    def gradient_surgery(self, settings, core: CoreSettings, model) -> GradientHook | None:
        """A gradient hook (usually a ``GradientSurgery``) that takes each task's loss of a multi-task step and
        leaves the gradient to apply, or None."""
        return None


class GradientSurgery(GradientHook):
    """A gradient hook that combines the tasks' gradients on ``params`` (PCGrad: ``pcgrad.py``): each task's loss of
    a step is backpropagated alone and its gradient on ``params`` set aside; when the step's batches are done,
    ``combine`` turns them into the gradient to apply (before clipping). Other parameters (a task's head, its private
    layers) keep the plain sum of their tasks' gradients. Subclasses set ``params`` and implement ``combine``."""
    params: list[torch.Tensor]

    def combine(self, grads: dict[str, list[torch.Tensor | None]], step: int) -> list[torch.Tensor | None]:
        """Task -> its gradient of each of ``params`` (None where the task does not reach it) -> the gradient to
        apply to each; ``step`` is the run's optimizer step, from 1 (a seed for any randomness, so a resumed run
        draws the same)."""
        raise NotImplementedError

    def backward(self, losses: dict[str, torch.Tensor], backward: Callable[[torch.Tensor], None], batches: int) -> None:
        """Backpropagate each task's loss alone (divided by ``batches``, as the loop does) and move its gradient on
        ``params`` aside, added to what the step's earlier batches gave that task. Tasks' graphs share parameters,
        not activations, so no graph is kept for the next task."""
        grads = self.__dict__.setdefault("grads", {})   # this step's, task by task
        for task, loss in losses.items():
            if not loss.requires_grad:
                continue
            backward(loss / batches if batches > 1 else loss)
            kept = grads.setdefault(task, [None] * len(self.params))
            for i, p in enumerate(self.params):
                if p.grad is not None:
                    kept[i] = p.grad if kept[i] is None else kept[i] + p.grad
                    p.grad = None

    def apply(self, step: int) -> None:
        """Put the combination of the step's task gradients in ``.grad``; the next step starts afresh."""
        grads = self.__dict__.pop("grads", {})
        combined = self.combine(grads, step) if grads else [None] * len(self.params)
        for p, grad in zip(self.params, combined):
            p.grad = grad


def saved_flag(saved, name: str, default=None):
    """``saved[section][name]`` for whichever section holds it (searched depth-first), else ``default``:
    a saved configuration of any version, whose fields may sit in other sections."""
    if not isinstance(saved, dict):
        return default
    if name in saved and not isinstance(saved[name], dict):
        return saved[name]
    for value in saved.values():
        found = saved_flag(value, name, _MISSING)
        if found is not _MISSING:
            return found
    return default


_MISSING = object()


def is_on(value) -> bool:
    """A saved switch's value as a bool (hand-written configurations may say "yes" or "1")."""
    return value.strip().lower() in ("1", "true", "yes", "on") if isinstance(value, str) else bool(value)
