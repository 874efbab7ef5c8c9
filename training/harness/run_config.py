"""``RunConfig``: a run's whole configuration, the core sections of ``training/configuration/sections.py`` and each
enabled or not extension's section from the registry (``training/extensions``), checked as a whole (``validate``)
and read back from any version's saved form (``from_dict``). It sits above the registry, so the configuration
package imports no extension; what the run's parts read of it is ``RunSettings``, below the registry. It is also
where the run asks what its extensions add (files, splits, batch sizes, lengths, stages, the kernel's ``Plugins``):
each hook is given its extension's own section and the core ones, never the whole.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Callable

from .. import extensions as registry   # the registry's one list, read where it is (tests extend it)
from ..configuration.sections import TRACKERS, RunSettings
from ..configuration.task_file import read_task_file
from ..configuration.task_shares import AUTO
from ..extensions.base import Extension
from ..learning.recipe import Plugins
from ..learning.schedule import BatchOrder
from ..learning.task_schema import known_tasks


@dataclass(frozen=True)
class RunConfig(RunSettings):
    """``RunSettings`` with every extension of the registry given its section (its defaults where none is).
    Frozen, as every section is: a change is a new value (``with_sections``), made before the run starts."""

    def __post_init__(self):
        filled = {e.name: self.extensions.get(e.name) or e.settings() for e in registry.EXTENSIONS}
        object.__setattr__(self, "extensions", filled)   # the frozen dataclass's own way to set a field once

    @classmethod
    def from_dict(cls, data: dict) -> "RunConfig":
        """Inverse of ``to_dict``: ``RunSettings.read`` with the registry's sections."""
        return cls.read(data, extension_sections())

    def validate(self) -> "RunConfig":
        """Reject nonsense values with one line naming the flag; returns the configuration to run, with the
        declarations of ``--task_file`` read in (``declare_own_tasks``)."""
        for section in self.sections().values():
            for f in dataclasses.fields(section):
                value = getattr(section, f.name)
                if isinstance(value, float) and not math.isfinite(value):
                    raise ValueError(f"--{f.name} must be a finite number, got {value}")
        config = self.declare_own_tasks()
        config.check()
        return config

    def check(self) -> None:
        """``validate``'s checks of a configuration whose own tasks are declared."""
        self.task_names()  # a bad --tasks first: the checks below read it
        name = self.output.run_name
        if name is not None and (name in ("", ".", "..") or Path(name).name != name or "\\" in name):
            raise ValueError(f"--run_name {name!r} must be a plain folder name (no '/', not '..'): runs are "
                             f"written inside --out_dir")
        for ok, message in self._core_checks():
            if not ok:
                raise ValueError(message)
        core, on = self.core(), {e.name for e, _ in self.switched_on()}
        for extension in registry.EXTENSIONS:
            settings = self.extensions[extension.name]
            extension.check(settings, core)
            if extension.name in on and (other := next((o for o in extension.conflicts if o in on), None)):
                raise ValueError(f"--{extension.name} and --{other} both decide {extension.conflicts[other]}: "
                                 f"choose one")
            if idle := extension.idle_flags(settings):
                one = len(idle) == 1
                raise ValueError(f"{', '.join(idle)} {'has' if one else 'have'} no effect without --{extension.name}: "
                                 f"add --{extension.name}, or drop {'it' if one else 'them'}")
        self.batch_sizes()
        for hook, what in registry.ONE_AT_A_TIME.items():   # two extensions deciding one thing (e.g. the batch order)
            if len(found := self.providers(hook)) > 1:
                raise ValueError(f"{' and '.join(f'--{e.name}' for e, _ in found)} both decide {what}: choose one")

    def _core_checks(self) -> list[tuple[bool, str]]:
        t, d, m = self.train, self.data, self.model
        alone = [f"--{e.name}" for e in registry.EXTENSIONS if e.stages_alone]
        return [
            (t.epochs >= 0, "--epochs must not be negative"),
            (0 <= t.seed < 2 ** 32, f"--seed must be between 0 and 2**32 - 1, got {t.seed}"),
            (t.lr > 0, "--lr must be positive"),
            (t.head_lr > 0, "--head_lr must be positive"),
            (t.weight_decay >= 0, "--weight_decay must not be negative"),
            (t.grad_accum >= 1, "--grad_accum must be at least 1"),
            (t.eval_every >= 0 and t.early_stopping >= 0, "--eval_every and --early_stopping must not be negative"),
            (t.max_grad_norm is None or t.max_grad_norm > 0, "--max_grad_norm must be positive"),
            (t.warmup_ratio is None or 0 <= t.warmup_ratio < 1, "--warmup_ratio must be in [0, 1)"),
            (t.max_steps_per_epoch is None or t.max_steps_per_epoch >= 1, "--max_steps_per_epoch must be at least 1"),
            (d.batch_size >= 1, "--batch_size must be at least 1"),
            (d.sampling_temperature > 0, "--sampling_temperature must be positive"),
            (d.task_batch_sizes == AUTO or d.sampling_temperature == 1.0,
             "--sampling_temperature has no effect without --task_batch_sizes auto: add it, or drop the temperature"),
            (0 < t.layer_lr_decay <= 1, "--layer_lr_decay must be in (0, 1]"),
            (d.max_eval_examples is None or d.max_eval_examples >= 1, "--max_eval_examples must be at least 1"),
            (d.max_length >= 3, "--max_length must be at least 3"),
            (0 <= d.val_fraction < 1, "--val_fraction must be in [0, 1)"),
            (not (d.val_fraction and d.max_eval_examples), "--val_fraction and --max_eval_examples do not go "
             "together: the validation split is scored whole (make it smaller with --val_fraction)"),
            (0 <= m.hidden_dropout_prob < 1, "--hidden_dropout_prob must be in [0, 1)"),
            (m.attention_probs_dropout_prob is None or 0 <= m.attention_probs_dropout_prob < 1,
             "--attention_probs_dropout_prob must be in [0, 1)"),
            (m.head_temp > 0, "--head_temp must be positive"),
            (t.cl_temp > 0, "--cl_temp must be positive"),
            (m.private_layers >= 0, "--private_layers must not be negative"),
            (self.output.save_every >= 0, "--save_every must not be negative"),
            (self.output.keep_checkpoints >= 1, "--keep_checkpoints must be at least 1"),
            # the flag's type checks what the command line gives; this, a saved configuration edited by hand
            (self.output.report_to == "none" or isinstance(self.output.report_to, str)
             and set(self.output.report_to.split(",")) <= set(TRACKERS),
             f"--report_to {self.output.report_to!r}: give one or more of {', '.join(TRACKERS)}, or none"),
            (self.output.experiment is None or str(self.output.experiment).strip() != "",
             "--experiment must not be empty (leave it out: the --out_dir folder's name)"),
            (not (self.speed.sparse_embeddings is True and self.speed.compile),
             "--sparse_embeddings and --compile do not go together (torch.compile cannot build the sparse "
             "embedding backward); choose one"),
            # private towers: K > 0 and two or more tasks (one task's layers are all its own already)
            (not (self.speed.compile and m.private_layers > 0 and len(self.task_names()) > 1 and t.epochs),
             "--compile compiles the shared encoder only, not the private towers: add --private_layers 0"),
            (t.epochs > 0 or any(e.stages_alone for e, _ in self.switched_on()),
             f"--epochs 0 runs the stages alone: give {', '.join(alone[:-1])} or {alone[-1]} (or train at least "
             f"one epoch)"),
        ]

    def declare_own_tasks(self) -> "RunConfig":
        """The configuration with the tasks of ``--task_file`` read in (once: the declarations a run saved win over the
        file, which may have changed or gone since), refusing a file none of whose tasks ``--tasks`` names."""
        d, config = self.data, self
        if d.task_file and not d.own_tasks:
            config = self.with_sections(data=dataclasses.replace(d, own_tasks=read_task_file(d.task_file)))
            declared = [task["name"] for task in config.data.own_tasks]
            if not set(declared) & {name.strip() for name in self.train.tasks.split(",")}:
                raise ValueError(f"--task_file {d.task_file} declares {', '.join(declared)}, but --tasks "
                                 f"{self.train.tasks} names none of them: add them to --tasks")
        return config

    def training_batch_sizes(self) -> list[tuple[str, int]]:
        """Every training batch size in use as (the flag that sets it, size): the global batches that
        data-parallel processes split. ``--batch_size`` is named only when it is what the tasks use (with
        ``--task_batch_sizes auto``, the smallest task's: the others follow the training sets, read later)."""
        given = self.data.task_batch_sizes not in (None, AUTO)
        task_flag = "--task_batch_sizes ({})" if given else "--batch_size"
        sizes = [(task_flag.format(name), size) for name, size in self.batch_sizes().items()]
        return sizes + [size for e, settings in self.switched_on() for size in e.batch_sizes(settings, self.core())]

    def max_lengths(self) -> list[tuple[str, int | None]]:
        """Every sentence length in use as (the flag that sets it, word pieces), checked against the model's."""
        extras = [n for e, settings in self.switched_on() for n in e.max_lengths(settings, self.core())]
        return [("--max_length", self.data.max_length), *extras]

    def switched_on(self) -> list[tuple[Extension, object]]:
        """The extensions it switches on, in registry order, each with its section."""
        return [(e, self.extensions[e.name]) for e in registry.EXTENSIONS if e.enabled(self.extensions[e.name])]

    def providers(self, hook: str) -> list[tuple[Extension, object]]:
        """The enabled extensions (with their sections) that override the method ``hook`` of ``Extension``."""
        return [(e, s) for e, s in self.switched_on() if getattr(type(e), hook) is not getattr(Extension, hook)]

    def plugins(self) -> Plugins:
        """What the enabled extensions add to the kernel's multi-task recipe (``learning.recipe.build_run``): the
        loss weighting, the regularizers, joint steps, the batch order, the gradient surgery (one extension at a
        time may provide each of the last two: ``check`` refuses two)."""
        on, core = self.switched_on(), self.core()
        weightings = [w for w in (e.loss_weighting(s, core) for e, s in on) if w is not None]
        order, surgeon = (next(iter(self.providers(hook)), None) for hook in ("batch_order", "gradient_surgery"))
        return Plugins(weighting=weightings[0] if weightings else None,
                       regularizers=lambda model: tuple(r for r in (e.regularizer(s, core, model) for e, s in on)
                                                        if r is not None),
                       joint=any(e.joint for e, _ in on),
                       batch_order=None if order is None else BatchOrder(
                           order[0].name, partial(order[0].batch_order, order[1], core),
                           partial(order[0].measure_epoch, order[1], core)),
                       surgery=None if surgeon is None else partial(surgeon[0].gradient_surgery, surgeon[1], core))

    def add_model_parts(self, model) -> None:
        """Attach to ``model`` (a ``heads.MultitaskBert``) the parts the enabled extensions add
        (``Extension.model_parts``), in registry order: when it is built for training and when ``load_run`` builds it
        again, before weights load."""
        for extension, settings in self.switched_on():
            model.parts.add(extension.model_parts(settings, self.core(), model))

    def held_out(self) -> list[tuple[str, float]]:
        """(name, fraction) of each enabled extension that holds a split out of every training file
        (``Extension.held_out``), in registry order."""
        return [(e.name, fraction) for e, s in self.switched_on() if (fraction := e.held_out(s, self.core()))]

    def stages(self) -> list[tuple[str, Callable]]:
        """(name, stage) of the stages before multi-task training that the flags switch on, in order."""
        return [(e.name, e.stage) for e, _ in self.switched_on() if e.stage is not None]

    def after_stages(self) -> list[tuple[str, Callable]]:
        """(name, stage) of the stages after multi-task training that the flags switch on (``Extension.after_stages``),
        in registry order."""
        return [stage for e, s in self.switched_on() for stage in e.after_stages(s, self.core())]

    def splits_needed(self) -> dict[str, tuple[str, ...]]:
        """Task -> the splits a run reads. Multi-task training reads every task's train, dev and (if
        there is one) test file; under ``--val_fraction`` not dev (it evaluates on a split of train).
        The stages alone (``--epochs 0``) read only the training sets they build their data from: none when
        their corpora come from files (``--ucl_data``, ``--scl_data``)."""
        tasks = self.task_names()
        if self.train.epochs > 0:
            return {name: ("train", "test") if self.data.val_fraction else ("train", "dev", "test") for name in tasks}
        read = set().union(*(e.reads(s, self.core()) for e, s in self.switched_on()))
        return {name: ("train",) for name in tasks if name in read}

    def data_files_needed(self) -> list[str]:
        """The files the run needs in the data directory (a task's test file is optional)."""
        known = known_tasks(self.data)
        files = [known[name].files[split] for name, splits in self.splits_needed().items()
                 for split in splits if split != "test"]
        for extension, settings in self.switched_on():
            files += [name for name in extension.extra_files(settings, self.core()) if name not in files]
        return files


def extension_sections() -> dict[str, type]:
    """Each extension's settings dataclass by name, in registry order."""
    return {e.name: e.settings for e in registry.EXTENSIONS}
