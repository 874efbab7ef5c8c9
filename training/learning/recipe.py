"""The recipe: a run's parts, built once from its configuration. nanoGPT's train.py in one function.

``build_run`` takes the configuration (read, never changed), what the harness read for it (``Inputs``: the model
with its pretrained weights, the tokenizer, the examples), what the enabled extensions add (``Plugins``, made by
the registry: ``training.extensions.plugins``), the harness's callbacks (``Callbacks``: the log, the step clock,
each stage's watch, each dev evaluation's decision) and, under torchrun, the data-parallel pieces (``Parallel``). It
returns the ``Run`` (stages.py) that every stage trains: the model on its device, AdamW with the encoder at
``--lr`` and the heads at ``--head_lr``, the task loss with the extensions' terms, the training loop.
``build_adamw`` is the one place an AdamW is made (every stage and tool: nanoGPT's ``configure_optimizers``):
no weight decay on biases and LayerNorm weights unless ``--decay_bias_norm``, per-group learning rates and
the update kernel (``--adamw``: fused / foreach / loop) chosen once.
``stages.multitask_stage(run)`` then trains it.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterable, Sequence

import torch

from heads import MultitaskBert
from minbert import AdamW, BertTokenizer, decay_groups
from minbert.optimizer import check_all_trained
from minbert.model import set_attention, set_dropout
from training.data.batching import make_loader
from training.data.readers import Example

from .callbacks import GradientHook, Log, StepClock
from .loop import TrainingLoop, warmup_then_linear_decay
from .precision import Precision
from .keep_best import KeepBest
from .schedule import BatchOrder
from .stages import Run
from .watch import StageWatch
from .task_loss import TaskLoss
from .tasks import Task

if TYPE_CHECKING:   # annotations only
    from ..configuration.sections import RunSettings, SpeedConfig, TrainConfig


@dataclass(frozen=True)
class Inputs:
    """What a run reads before it starts (the harness reads and checks it)."""
    model: MultitaskBert                          # pretrained encoder, fresh heads
    tokenizer: BertTokenizer
    splits: dict[str, dict[str, list[Example]]]   # task -> split -> examples
    tasks: dict[str, Task]                        # the Task rows of --tasks, in their order
    data_dir: Path | None = None                  # None when the run reads no task file


@dataclass(frozen=True)
class Plugins:
    """What the enabled extensions add to multi-task training (their ``Extension`` hooks). The two factories
    take the model as the recipe has made it ready (on its device, attention and dropout set)."""
    weighting: torch.nn.Module | None = None      # a losses.LossWeighting: one batch of every task a step, weighted
    regularizers: Callable[[MultitaskBert], tuple] = lambda model: ()   # each adds a term to every task loss
    joint: bool = False                           # each multi-task step takes one batch of every task
    batch_order: BatchOrder | None = None         # the extension deciding the order of the task batches
    surgery: Callable[[MultitaskBert], GradientHook] | None = None   # how the tasks' gradients combine


@dataclass(frozen=True)
class Callbacks:
    """What the harness plugs in (``callbacks.py``, ``watch.py``); the defaults print, count and keep nothing."""
    log: Log = field(default_factory=Log)
    clock: StepClock = field(default_factory=StepClock)
    watch: Callable = StageWatch                               # (objective, loop) -> each stage's watch
    evaluations: KeepBest | None = None                        # each dev evaluation's decision (None: KeepBest)


@dataclass(frozen=True)
class Parallel:
    """Several processes (torchrun) training one model: each takes its ``shard`` of every training batch,
    calls the model through ``wrap`` (DistributedDataParallel) and averages the gradients DDP does not see."""
    rank: int = 0
    shard: tuple[int, int] | None = None                               # (rank, processes) or None: one process
    wrap: Callable[[torch.nn.Module], torch.nn.Module] = lambda model: model
    average_gradients: Callable[[Iterable[torch.Tensor]], None] | None = None


def build_run(config: RunSettings, inputs: Inputs, device: torch.device, precision: Precision,
              plugins: Plugins = Plugins(), callbacks: Callbacks = Callbacks(), parallel: Parallel = Parallel()) -> Run:
    """Every part of a run, once, in the order that fixes its random draws (a run is replayed bit for bit)."""
    t, model = config.train, inputs.model.to(device)
    weighting = plugins.weighting.to(device) if plugins.weighting is not None else None
    optimizer = run_adamw(config, model, weighting)
    check_all_trained(model, optimizer)
    trained = sum(p.numel() for g in optimizer.param_groups for p in g["params"])
    callbacks.log(f"parameters: {sum(p.numel() for p in model.parameters()):,} in the model, {trained:,} trained "
                  f"(option {config.model.option})")
    forward_model = set_speed(model, config, parallel)
    task_loss = TaskLoss(model, inputs.tasks, device, plugins.regularizers(model), weighting, forward_model,
                         parallel.average_gradients)
    loop = TrainingLoop(precision, callbacks.log, callbacks.clock, t.max_grad_norm, grad_accum=t.grad_accum,
                        schedule=None if t.warmup_ratio is None else warmup_then_linear_decay(t.warmup_ratio),
                        watch=callbacks.watch)
    evaluations = callbacks.evaluations or KeepBest(t.early_stopping)   # keeps the best weights, stops early
    return Run(config=config, model=model, forward_model=forward_model, device=device, splits=inputs.splits,
               loader=loader_for(config, inputs.tokenizer, parallel.shard), optimizer=optimizer, task_loss=task_loss,
               loop=loop, log=callbacks.log, evaluations=evaluations.bind(model, inputs.tasks, callbacks.log),
               joint=plugins.joint, batch_order=plugins.batch_order,
               surgery=plugins.surgery(model) if plugins.surgery is not None else None, tokenizer=inputs.tokenizer,
               data_dir=inputs.data_dir)


def run_adamw(config: RunSettings, model: MultitaskBert, weighting: torch.nn.Module | None = None):
    """A multi-task run's AdamW: the encoder (and its towers) at ``--lr`` (``--layer_lr_decay``: layer by layer),
    the heads and any learned loss weights (no weight decay on those) at ``--head_lr``, then each model part that
    an extension added in a group of its own, at its ``lr`` (None: ``--head_lr``)."""
    t = config.train
    return build_adamw(t, config.speed, [*encoder_sets(model, t.lr, t.layer_lr_decay),
                                         ParamSet(model.heads.named_parameters(), lr=t.head_lr),
                                         ParamSet(weighting.named_parameters() if weighting else [], lr=t.head_lr,
                                                  decay=False),
                                         *(ParamSet(part.named_parameters(prefix=f"parts.{name}"),
                                                    lr=t.head_lr if part.lr is None else part.lr)
                                           for name, part in model.parts.items())], lr=t.lr)


def encoder_sets(model: MultitaskBert, lr: float, decay: float) -> list[ParamSet]:
    """The encoder's parameters (and the towers') at ``lr``; with ``--layer_lr_decay`` γ < 1, layer by layer
    (Sun et al. 2019, "How to fine-tune BERT for text classification?", §5.3: θ^(l−1) = ξ·θ^l): the top layer and
    the pooler above it at ``lr``, each layer below at γ times the rate of the one above, the embeddings at γ^L
    (L layers); a task's tower layer at the rate of the encoder layer it copies."""
    if decay == 1.0:   # one set, as before the flag: the same optimizer, bit for bit
        return [ParamSet(model.encoder_parameters())]
    below_top: dict[int, list] = {}
    for name, parameter in model.encoder_parameters():
        below_top.setdefault(layers_below_top(model, name), []).append((name, parameter))
    return [ParamSet(named, lr=lr * decay ** k) for k, named in sorted(below_top.items())]


def layers_below_top(model: MultitaskBert, name: str) -> int:
    """How many layers below the top the encoder parameter ``name`` (as ``encoder_parameters`` names it) sits: 0
    for the top layer and the pooler, L for the embeddings; layer j of a task's tower of K copies layer L − K + j."""
    parts, depth = name.split("."), len(model.bert.encoder.layer)
    if parts[:3] == ["bert", "encoder", "layer"]:
        return depth - 1 - int(parts[3])
    if parts[:2] == ["bert", "embeddings"]:
        return depth
    if parts[0] == "towers":   # towers.<task>.<j>.<...>
        return len(model.towers[parts[1]]) - 1 - int(parts[2])
    return 0   # the pooler, above the top layer


def set_speed(model: MultitaskBert, config: RunSettings, parallel: Parallel = Parallel()) -> torch.nn.Module:
    """Apply ``SpeedConfig``; returns the model to call in training (``parallel.wrap``'s, under torchrun)."""
    set_attention(model, config.speed.attention)   # the whole model: the encoder and any private towers
    model.bert.set_sparse_word_embeddings(config.speed.sparse(parallel.shard is not None))
    set_dropout(model, config.speed.dropout_masks)
    if config.speed.compile:
        model.bert.compile(dynamic=True)  # in place: parameter names (and checkpoints) are unchanged
    forward_model = parallel.wrap(model)
    if parallel.rank > 0:  # same initial weights (DDP copies process 0's), own dropout masks
        torch.manual_seed(config.train.seed + parallel.rank)
    return forward_model


def loader_for(config: RunSettings, tokenizer: BertTokenizer, shard: tuple[int, int] | None = None):
    def loader(examples, batch_size: int, shuffle: bool, seed: int = 0, max_length: int | None = None):
        """Training loaders (shuffled) are sharded across processes; ``max_length`` None: ``--max_length``."""
        return make_loader(examples, tokenizer, max_length or config.data.max_length, batch_size, shuffle=shuffle,
                           seed=seed, bucket=config.speed.bucket, shard=shard if shuffle else None)
    return loader


@dataclass
class ParamSet:
    """Parameters that share a learning rate. Frozen ones (``requires_grad`` off) are left out."""
    named: Iterable[tuple[str, torch.nn.Parameter]]
    lr: float | None = None   # None: the optimizer's learning rate
    decay: bool = True        # False: no weight decay at all (e.g. learned loss weights, pulled to 0 by it)


def build_adamw(train: TrainConfig, speed: SpeedConfig, sets: Sequence[ParamSet], lr: float) -> AdamW | None:
    """AdamW over ``sets`` at ``lr`` (a set's own ``lr`` wins), with the run's weight decay and
    ``--adamw`` kernel; None when nothing is left to train (a frozen encoder and no head)."""
    groups = []
    for part in sets:
        named = [(name, p) for name, p in part.named if p.requires_grad]
        options = {} if part.lr is None else {"lr": part.lr}
        if part.decay and not train.decay_bias_norm:   # biases and LayerNorm weights in groups of their own
            groups += decay_groups(named, train.weight_decay, **options)
        elif named:
            groups.append({"params": [p for _, p in named], **options})
            if not part.decay:
                groups[-1]["weight_decay"] = 0.0
    if not groups:
        return None
    return AdamW(groups, lr=lr, weight_decay=train.weight_decay, **speed.adamw_options())
