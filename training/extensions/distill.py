"""Teacher annealing (BAM! Born-Again Multi-Task Networks, Clark et al., ACL 2019, §3): single-task
teachers are distilled into the multi-task student, whose target is λ·gold + (1 − λ)·teacher, λ rising
linearly from 0 to 1 over multi-task training (§3.2): it first imitates its teachers and ends on the
gold labels. docs/flags.md says which teachers and how their outputs are cached. The stage leaves the
random state as it found it: the student trains the same whether its teachers were trained, found or given.
"""
from __future__ import annotations

import copy
import dataclasses
import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable

import torch
import torch.nn.functional as F

from training.data.batching import make_loader
from training.data.readers import DataError

from ..learning.evaluate import predict
from ..configuration.flags import flag
from ..harness.outputs import write_json
from ..harness.resume import list_checkpoints, rng_state, set_rng_state
from ..harness.checkpoint import saved_run_config
from ..learning.encoding import model_max_length
from .base import Extension, saved_flag

if TYPE_CHECKING:
    from ..configuration.sections import RunSettings
    from ..harness.loaded_run import LoadedRun


@dataclass
class DistillConfig:
    distill: bool = flag(False, "teacher annealing (BAM!): every task's target is l*gold + (1-l)*teacher, l rising "
                                "linearly from 0 to 1 over multi-task training")
    teachers: str = flag("auto", "the single-task teachers: auto (trained first: one run per task of --tasks with "
                                 "this run's recipe, in RUN/teachers/) or task=RUN_DIR for every task, e.g. "
                                 "sst=predictions/a,qqp=predictions/b,sts=predictions/c", path="pairs")


def given_teachers(config: RunSettings) -> dict[str, str] | None:
    """``--teachers`` as task -> run folder; None for ``auto``."""
    text, tasks = config.distill.teachers, config.task_names()
    if text == "auto":
        return None
    pairs = [part.split("=", 1) for part in text.split(",")]
    if any(len(pair) != 2 or not pair[1] for pair in pairs):
        raise ValueError(f"--teachers must be auto or task=RUN_DIR pairs separated by commas, got {text!r}")
    if sorted(task for task, _ in pairs) != sorted(tasks):
        raise ValueError(f"--teachers must name one run for each task of --tasks ({','.join(tasks)}), got {text!r}")
    return dict(pairs)


class Distill(Extension):
    name, settings, column, short, costly = "distill", DistillConfig, "distill", "distill", True

    def seed_free(self, section: dict, seed) -> dict:
        """``--teachers`` with each run folder cut to its name less ``-s<seed>``: each seed of a distilled row is
        taught by that seed's own single-task runs (``st-sst-s11712`` at seed 11712), one teacher recipe."""
        teachers = section.get("teachers")
        if not isinstance(teachers, str) or "=" not in teachers:
            return section   # auto, or not a task=RUN list
        pairs = (pair.partition("=") for pair in teachers.split(","))
        return {**section, "teachers": ",".join(f"{task}={Path(path).name.removesuffix(f'-s{seed}')}"
                                                for task, _, path in pairs)}

    def checks(self, config) -> list[tuple[bool, str]]:
        given_teachers(config)
        return [(not config.distill.distill or config.train.epochs > 0,
                 "--distill anneals multi-task training towards the gold labels: train at least one epoch")]

    def check_files(self, config) -> None:
        """Each teacher is a run folder that trained its task: found before the run folder is claimed
        and before any stage trains."""
        for task, path in (given_teachers(config) or {}).items():
            folder = Path(path) / "checkpoint" if (Path(path) / "checkpoint").is_dir() else Path(path)
            if not (folder / "model.safetensors").is_file():
                raise DataError(f"--teachers {task}={path}: not a run folder (no checkpoint/ in it)")
            saved = saved_run_config(folder)
            trained = [t.strip() for t in str(saved_flag(saved, "tasks", "sst,qqp,sts")).split(",")]
            if saved is not None and task not in trained:
                raise DataError(f"--teachers {task}={path}: that run trained {','.join(trained)}, not {task}")

    def stage(self, run) -> dict:
        saved_rng = rng_state()
        try:
            folder = run.loop.clock.run_dir / "teachers"
            sources = given_teachers(run.config) or train_teachers(run.config, folder, run.train_run)
            targets = next(t for t in run.task_loss.targets if isinstance(t, TeacherTargets))
            for task, source in sources.items():
                outputs = teacher_outputs(run.load_run(source), task, run.splits[task]["train"], run)
                targets.teach(task, *outputs)
                if run.loop.clock.enabled:
                    write_json(folder / f"{task}-train.json", {"teacher": str(source), "ids": outputs[0],
                                                               "outputs": outputs[1].tolist()})
        finally:
            set_rng_state(saved_rng)
        run.log(f"distill: teachers {', '.join(f'{task} {source}' for task, source in sources.items())}")
        return {"teachers": {task: str(source) for task, source in sources.items()}}

    def targets(self, run) -> "TeacherTargets":
        return TeacherTargets(run)


EXTENSION = Distill()


class TeacherTargets:
    """The targets of every multi-task batch: λ·gold + (1 − λ)·teacher (BAM! §3.2); elsewhere (QQP
    pre-training) the gold labels. Its state (the teachers' outputs) is saved with every checkpoint."""

    def __init__(self, run):
        self.run = run
        # what a teacher's outputs are mixed as, for each task: class probabilities (k classes) or numbers (None)
        self.classes = {name: row.num_classes if row.divergence == "multiclass" else None
                        for name, row in run.config.tasks().items()}
        self.teacher: dict[str, tuple[dict[str, int], torch.Tensor]] = {}   # task -> (row of each id, outputs)

    def teach(self, task: str, ids: list[str], outputs: torch.Tensor) -> None:
        self.teacher[task] = ({example_id: row for row, example_id in enumerate(ids)}, outputs)

    def annealing(self) -> float:
        """λ, the fraction of multi-task training done: 0 at its first optimizer step, 1 after its last."""
        loop = self.run.loop
        objective = loop.objective
        if objective is None or objective.name != "multitask":
            return 1.0
        total = -(-objective.steps() // loop.grad_accum) * objective.epochs
        start = max((stage["end_step"] for stage in loop.clock.finished_stages.values()), default=0)
        return min(1.0, (loop.clock.step - start) / total)

    def __call__(self, task: str, batch: dict, labels: torch.Tensor) -> torch.Tensor:
        weight = self.annealing()
        if weight >= 1.0 or task not in self.teacher:
            return labels
        rows, outputs = self.teacher[task]
        teacher = outputs[[rows[example_id] for example_id in batch["ids"]]].to(labels.device)
        return mix(labels, teacher, weight, self.classes[task])

    def state_dict(self) -> dict:
        return {task: {"ids": list(rows), "outputs": outputs} for task, (rows, outputs) in self.teacher.items()}

    def load_state_dict(self, state: dict) -> None:
        for task, saved in state.items():
            self.teach(task, saved["ids"], saved["outputs"])


def mix(gold: torch.Tensor, teacher: torch.Tensor, weight: float, num_classes: int | None) -> torch.Tensor:
    """weight·gold + (1 − weight)·teacher; class ids become one-hot rows against a teacher's softmax."""
    gold = F.one_hot(gold, num_classes) if num_classes is not None else gold
    return weight * gold.to(teacher.dtype) + (1.0 - weight) * teacher


# what a teacher contributes, by the kind of its head's output (``Task.divergence``)
SOFT_OUTPUT = {"multiclass": lambda logits: logits.softmax(dim=-1), "binary": torch.sigmoid,
               "regression": lambda scores: scores.clamp(0.0, 5.0)}


def teacher_outputs(teacher: LoadedRun, task: str, examples: list, run) -> tuple[list[str], torch.Tensor]:
    """The teacher's soft outputs on ``examples`` (ids in their order), batched as it evaluated dev."""
    teacher.check_head(task)
    row = teacher.config.known_tasks()[task]
    soft = dataclasses.replace(row, predict=SOFT_OUTPUT[row.divergence])
    loader = make_loader(examples, teacher.tokenizer, model_max_length(teacher.config.data.max_length,
                                                                       teacher.model.bert),
                         teacher.config.data.batch_size, shuffle=False, bucket=teacher.config.speed.bucket)
    result = predict(teacher.model.to(run.device), soft, loader, run.device, f"teacher {task}",
                     run.log.progress_bars)
    return result.ids, torch.from_numpy(result.predictions)


def train_teachers(config: RunSettings, folder: Path, train: Callable[[RunSettings], dict]) -> dict[str, Path]:
    """``--teachers auto``: one single-task run per task in ``folder/<task>``, each finished,
    resumed from its newest checkpoint or trained from the start by ``train`` (``trainer.run``, which
    the run hands over as ``Run.train_run``: this module is below the trainer)."""
    teachers = {}
    for task in config.task_names():
        teacher = teacher_config(config, task, folder)
        run_dir = folder / task
        status = json.loads((run_dir / "metrics.json").read_text()).get("status") \
            if (run_dir / "metrics.json").is_file() else None
        if status != "finished":
            if run_dir.exists() and list_checkpoints(run_dir):   # resumed with its saved configuration alone
                teacher = type(config).defaults(output=type(config.output)(
                    resume=str(run_dir), quiet=config.output.quiet, log_file=config.output.log_file))
            elif run_dir.exists():
                shutil.rmtree(run_dir)   # ours, stopped before its first checkpoint
            train(teacher)
        teachers[task] = run_dir
    return teachers


def teacher_config(config: RunSettings, task: str, folder: Path) -> RunSettings:
    """This run's recipe on ``task`` alone, with no extension and no private layers, as ``folder/<task>``."""
    teacher = copy.deepcopy(config)
    size = config.batch_sizes()[task]
    teacher.train.tasks = task
    teacher.data.task_batch_sizes = str(size) if config.data.task_batch_sizes else None
    teacher.extensions = {name: type(settings)() for name, settings in teacher.extensions.items()}
    teacher.model.private_layers = 0   # one task: every layer is its own
    teacher.output.out_dir, teacher.output.run_name, teacher.output.resume = str(folder), task, None
    teacher.output.keep_training_state = False
    return teacher
