"""The registry of extensions: each is one module of this package (``base.Extension`` says what it can
provide) and ``EXTENSIONS`` lists them. Everything else reads this list, never an extension's name, so
a new extension is a new module and its name added below (docs/ablation.md, "The extensions"); a run asks
the enabled ones through its ``RunConfig`` (training/harness/run_config.py).
``ideas()`` adds the core settings the grid varies (``core.py``): what the grid and the report read.
"""
from __future__ import annotations

from importlib import import_module

from .base import Extension, Idea
from .core import CORE_IDEAS

# in stage order: the stages run in this order before multi-task training (and those after it, after it)
EXTENSIONS: tuple[Extension, ...] = tuple(import_module(f"{__name__}.{name}").EXTENSION for name in (
    "ucl", "scl", "lcl", "pre_qqp", "joint_loss", "smart", "pcgrad", "anneal_sampling", "gap_sampling",
    "task_finetune", "adapters",
))

# hooks that one extension at a time may provide: what two would both decide
ONE_AT_A_TIME = {"batch_order": "the order of the task batches", "gradient_surgery": "how the tasks' gradients combine"}


def ideas() -> tuple[Idea, ...]:
    """The extensions, then the core settings of ``core.py``: whatever the grid and the results table know."""
    return (*EXTENSIONS, *CORE_IDEAS)
