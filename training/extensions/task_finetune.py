"""Per-task fine-tuning after multi-task training (MT-DNN's second stage: Liu et al. 2019, "Multi-Task Deep Neural
Networks for Natural Language Understanding", §3: multi-task learning, then the model fine-tuned on each task's data).
Unlike MT-DNN, which fine-tunes every layer, only the task's own part trains here: its private top layers
(``--private_layers K``: its tower, or for the home task the encoder's own top K layers) and its head, on that task's
training data alone, ``--task_finetune_steps`` batches (of its ``--task_batch_sizes`` size; ``--batch_size`` under
``auto``, whose sizes are shares of a mixed round), with a fresh AdamW and the run's warmup/decay schedule.
Everything else is frozen (the embeddings, the shared bottom layers, the pooler, the other tasks' towers and heads):
no gradient, no optimizer state, no weight decay. A task's part serves that task alone, so its stage moves that
task's predictions only. With ``--private_layers 0`` the heads alone train. One stage per task of ``--tasks``, in order
(``Extension.after_stages``); the harness runs them on the best multi-task weights, then scores dev once.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass
from functools import partial
from typing import Callable

import torch

from ..configuration.flags import flag, optional_float
from ..learning.recipe import ParamSet, build_adamw
from ..learning.stages import Run, TaskObjective
from .base import Extension


@dataclass(frozen=True)
class TaskFinetuneConfig:
    task_finetune: bool = flag(False, "after multi-task training, fine-tune each task alone: its private top layers "
                                      "(--private_layers) and its head train on its data, the shared bottom and the "
                                      "other tasks frozen (MT-DNN's second stage); with --private_layers 0 its head "
                                      "alone")
    task_finetune_steps: int = flag(63, "batches of each task in its fine-tuning stage (a third of the default "
                                        "epoch's 189 rounds)")
    task_finetune_lr: float | None = flag(None, "learning rate of a task's top layers in its fine-tuning stage "
                                                "(default: --lr; the head trains at --head_lr)", type=optional_float)


class TaskFinetune(Extension):
    name, settings, column, short = "task_finetune", TaskFinetuneConfig, "task-FT", "taskft"
    budget, steps_flag = {"--task_finetune_steps": "10"}, "--task_finetune_steps"   # a third of the grid's 30 rounds
    variants = (("mean-taskft-private2", ["--task_finetune", "--private_layers", "2"]),)   # over towers of their own

    def checks(self, c, core) -> list[tuple[bool, str]]:
        return [(c.task_finetune_steps >= 1, "--task_finetune_steps must be at least 1"),
                (c.task_finetune_lr is None or c.task_finetune_lr > 0, "--task_finetune_lr must be positive"),
                (not (c.task_finetune and core.train.epochs == 0),
                 "--task_finetune fine-tunes each task after multi-task training, which --epochs 0 does not run; "
                 "train at least one epoch")]

    def after_stages(self, c, core) -> list[tuple[str, Callable[[Run], dict]]]:
        return [(stage_name(task), partial(finetune, task)) for task in core.task_names()]


def stage_name(task: str) -> str:
    """A task's stage: its checkpointed progress, its entry of metrics.json ``after_stages``, its TensorBoard tags."""
    return f"task_finetune.{task}"


def finetune(task: str, run: Run) -> dict:
    """Train ``task``'s own layers and head on its training data alone, everything else frozen; returns the stage's
    log. Parameters frozen before (``--option pretrain``: the encoder and towers) stay frozen."""
    c, t, model = run.config.task_finetune, run.config.train, run.model
    layers = own_layers(model, task, run.config.model.private_layers)
    head = list(model.heads[task].named_parameters(prefix=f"heads.{task}"))
    trained = [p for _, p in (*layers, *head) if p.requires_grad]
    with only_trained(model, trained):
        optimizer = build_adamw(t, run.config.speed, [ParamSet(layers), ParamSet(head, lr=t.head_lr)],
                                lr=t.lr if c.task_finetune_lr is None else c.task_finetune_lr)
        count = sum(p.numel() for p in trained)
        if optimizer is None:
            run.log(f"{task} fine-tuning: nothing of its own to train; skipping this stage")
            return {"task": task, "trained_parameters": 0, "batches": 0}
        what = "its top layers and head" if any(p.requires_grad for _, p in layers) else "its head"
        run.log(f"{task} fine-tuning: {count:,} parameters trained ({what}), the rest frozen")
        index = list(run.splits).index(task)
        loader = run.loader(run.splits[task]["train"], run.config.batch_sizes()[task], True, t.seed + 200 + index)
        result = run.loop.train(TaskFinetuneObjective(run, task, loader, c.task_finetune_steps, optimizer))
    return {"task": task, "trained_parameters": count, **result}


def own_layers(model, task: str, k: int) -> list[tuple[str, torch.nn.Parameter]]:
    """The task's top layers, named: its tower, or for the home task (no tower) the encoder's own top ``k``
    layers; none with ``k`` = 0."""
    if task in model.towers:
        return list(model.towers[task].named_parameters(prefix=f"towers.{task}"))
    layers = model.bert.encoder.layer
    return [(f"bert.encoder.layer.{i}.{name}", p) for i in range(len(layers) - k, len(layers))
            for name, p in layers[i].named_parameters()]


@contextlib.contextmanager
def only_trained(model: torch.nn.Module, trained: list[torch.Tensor]):
    """Every parameter of ``model`` but ``trained`` frozen (``requires_grad`` off, any gradient left from earlier
    training dropped) for the block; each parameter's ``requires_grad`` as it was afterwards."""
    keep = {id(p) for p in trained}
    before = [(p, p.requires_grad) for p in model.parameters()]
    model.zero_grad(set_to_none=True)
    try:
        for p, _ in before:
            if id(p) not in keep:
                p.requires_grad_(False)
        yield
    finally:
        for p, was in before:
            p.requires_grad_(was)


class TaskFinetuneObjective(TaskObjective):
    """One task's batches, exactly ``steps`` of them (its data started over, reshuffled, when it has fewer), stepped by
    ``optimizer`` (the task's own part alone); one epoch."""

    def __init__(self, run: Run, task: str, loader, steps: int, optimizer: torch.optim.Optimizer):
        super().__init__(run, {task: loader}, "min", None, 1, joint=False, name=stage_name(task),
                         log_prefix=f"{task} fine-tuning ")
        self.scheduler.order = [task] * steps
        self.optimizer = optimizer

    def start(self, progress: dict) -> None:
        """Nothing: the head's threshold (``calibrate_heads``) was trained by multi-task training, and stays."""


EXTENSION = TaskFinetune()
