"""Label-contrastive fine-tuning (Khosla et al. 2020; Gunel et al. 2021): a stage before multi-task training on the
training sentences of the first single-sentence classification task of ``--tasks`` (SST by default): sentences of one
class are pulled together, the others pushed apart (``losses.label_contrastive_loss``).
"""
from __future__ import annotations

from dataclasses import dataclass

from ..learning.contrastive import ContrastiveStage, budget_checks, train_contrastive
from ..configuration.flags import flag, optional_int
from ..learning.losses import label_contrastive_loss
from ..learning.task_schema import run_tasks
from .base import Extension


@dataclass(frozen=True)
class LclConfig:
    lcl: bool = flag(False, "label-contrastive stage on the training sentences of the first single-sentence "
                           "classification task of --tasks, SST by default (same class = positive)")
    lcl_epochs: int = flag(1, "label-contrastive epochs")
    lcl_steps: int | None = flag(None, "cap on label-contrastive batches per epoch", type=optional_int)
    lcl_batch_size: int = flag(32, "label-contrastive batch size")
    lcl_lr: float = flag(3e-5, "label-contrastive learning rate")


def lcl_task(core) -> str | None:
    """The stage's task: the first single-sentence classification task of ``--tasks``."""
    return next((name for name, task in run_tasks(core).items()
                 if not task.is_pair and task.label_type == "class"), None)


class LabelContrastive(Extension):
    name, settings, column, short = "lcl", LclConfig, "LCL", "lcl"
    budget, steps_flag, stages_alone = {"--lcl_epochs": "1", "--lcl_steps": "20"}, "--lcl_steps", True

    def checks(self, c, core) -> list[tuple[bool, str]]:
        return [*budget_checks("lcl", c.lcl_epochs, c.lcl_batch_size, c.lcl_lr),
                (not c.lcl or lcl_task(core) is not None,
                 "--lcl needs a single-sentence classification task (sst or cfimdb) in --tasks")]

    def batch_sizes(self, c, core):
        return [("--lcl_batch_size", c.lcl_batch_size)]

    def reads(self, c, core) -> set[str]:
        return {lcl_task(core)}

    def stage(self, run) -> dict:
        c, task = run.config.lcl, lcl_task(run.config)
        examples = run.splits[task]["train"]
        run.log(f"lcl: {len(examples)} labelled {task.upper()} sentences")

        def loss_fn(inputs, batch):
            embeddings = run.forward_model(None, inputs)[0]
            return label_contrastive_loss(embeddings, batch["labels"].to(run.device), run.config.train.cl_temp)

        source = f"the {task} training set ({run_tasks(run.config)[task].files['train']})"
        return train_contrastive(run, ContrastiveStage("lcl", examples, source, "sentence", loss_fn, c.lcl_epochs,
                                                       c.lcl_steps, c.lcl_batch_size, c.lcl_lr))


EXTENSION = LabelContrastive()
