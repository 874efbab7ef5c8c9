"""The registry of extensions: each is one module of this package (``base.Extension`` says what it can
provide) and ``EXTENSIONS`` lists them. Everything else reads this list, never an extension's name, so
a new extension is a new module and its name added below (docs/ablation.md, "The extensions").
``ideas()`` adds the core settings the grid varies (``core.py``): what the grid and the report read.
"""
from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Callable

from ..learning.recipe import Plugins
from ..learning.task_schema import known_tasks
from .base import Extension, Idea
from .core import CORE_IDEAS

if TYPE_CHECKING:
    from ..configuration.sections import RunSettings

# in stage order: the stages run in this order before multi-task training
EXTENSIONS: tuple[Extension, ...] = tuple(import_module(f"{__name__}.{name}").EXTENSION for name in (
    "ucl", "scl", "lcl", "pre_qqp", "joint_loss", "smart", "pcgrad", "anneal_sampling",
))



def ideas() -> tuple[Idea, ...]:
    """The extensions, then the core settings of ``core.py``: whatever the grid and the results table know."""
    return (*EXTENSIONS, *CORE_IDEAS)

# hooks that one extension at a time may provide: what two would both decide
ONE_AT_A_TIME = {"batch_order": "the order of the task batches", "gradient_surgery": "how the tasks' gradients combine"}


def enabled(config: RunSettings) -> list[Extension]:
    return [e for e in EXTENSIONS if e.enabled(config)]


def provider(config: RunSettings, hook: str) -> Extension | None:
    """The enabled extension that provides ``hook`` (one of ``ONE_AT_A_TIME``), or None (``check_hooks``
    refuses two)."""
    return next(iter(providers(config, hook)), None)


def check_hooks(config: RunSettings) -> None:
    """Refuse two enabled extensions providing a hook of ``ONE_AT_A_TIME``, in one line naming their flags."""
    for hook, what in ONE_AT_A_TIME.items():
        if len(found := providers(config, hook)) > 1:
            raise ValueError(f"{' and '.join(f'--{e.name}' for e in found)} both decide {what}: choose one")


def providers(config: RunSettings, hook: str) -> list[Extension]:
    """The enabled extensions that override the method ``hook`` of ``Extension``."""
    return [e for e in enabled(config) if getattr(type(e), hook) is not getattr(Extension, hook)]


def plugins(config: RunSettings) -> Plugins:
    """What the enabled extensions add to the kernel's multi-task recipe (``learning.recipe.build_run``): the
    loss weighting, the regularizers, joint steps, the batch order, the gradient surgery."""
    on = enabled(config)
    weightings = [w for w in (e.loss_weighting(config) for e in on) if w is not None]
    surgeon = provider(config, "gradient_surgery")
    return Plugins(weighting=weightings[0] if weightings else None,
                   regularizers=lambda model: tuple(r for r in (e.regularizer(config, model) for e in on)
                                                    if r is not None),
                   joint=any(e.joint for e in on), batch_order=provider(config, "batch_order"),
                   surgery=None if surgeon is None else lambda model: surgeon.gradient_surgery(config, model))


def enabled_stages(config: RunSettings) -> list[tuple[str, Callable]]:
    """(name, stage) of the stages before multi-task training that the flags switch on, in order."""
    return [(e.name, e.stage) for e in enabled(config) if e.stage is not None]


def splits_needed(config: RunSettings) -> dict[str, tuple[str, ...]]:
    """Task -> the splits a run reads. Multi-task training reads every task's train, dev and (if
    there is one) test file; under ``--val_fraction`` not dev (it evaluates on a split of train).
    The stages alone (``--epochs 0``) read only the training sets they build their data from: none when
    their corpora come from files (``--ucl_data``, ``--scl_data``)."""
    tasks = config.task_names()
    if config.train.epochs > 0:
        return {name: ("train", "test") if config.data.val_fraction else ("train", "dev", "test") for name in tasks}
    read = set().union(*(e.reads(config) for e in enabled(config)))
    return {name: ("train",) for name in tasks if name in read}


def data_files_needed(config: RunSettings) -> list[str]:
    """The files the run needs in the data directory (a task's test file is optional)."""
    known = known_tasks(config)
    files = [known[name].files[split] for name, splits in splits_needed(config).items()
             for split in splits if split != "test"]
    for extension in enabled(config):
        files += [name for name in extension.extra_files(config) if name not in files]
    return files
