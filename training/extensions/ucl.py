"""Unsupervised SimCSE (Gao et al. 2021, §3): a stage before multi-task training in which each
sentence, encoded twice with dropout on, is its own positive and the other sentences of the batch
are the negatives (``losses.info_nce``). With ``--ucl_eval_every`` the stage is scored on STS dev as
it trains and ends with its best step's encoder (``StsDevCurve``).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from training.data.contrastive import read_sentences, sentences_from_examples
from training.data.readers import DataError
from training.data.senteval import PairDataset, load_dataset

from ..learning.contrastive import ContrastiveStage, budget_checks, train_contrastive
from ..configuration.flags import flag, optional_int
from ..learning.losses import info_nce
from ..learning.rng import rng_state, set_rng_state
from ..learning.encoding import encode
from ..learning.similarity import DEFAULT_BATCH_SIZE, correlations, score_dataset
from ..learning.task_schema import BUILTIN_TASKS
from .base import Extension

STS_DEV_FILE = BUILTIN_TASKS["sts"].files["dev"]   # --ucl_eval_every scores this file of the data directory by default


@dataclass(frozen=True)
class UclConfig:
    ucl: bool = flag(False, "unsupervised SimCSE stage (dropout positives, in-batch negatives)")
    ucl_data: str | None = flag(None, "one sentence per line (default: the training sets' sentences)", type=str,
                                path=True)
    ucl_epochs: int = flag(1, "unsupervised SimCSE epochs")
    ucl_steps: int | None = flag(None, "cap on unsupervised SimCSE batches per epoch", type=optional_int)
    ucl_batch_size: int = flag(64, "unsupervised SimCSE batch size")
    ucl_lr: float = flag(3e-5, "unsupervised SimCSE learning rate")
    ucl_max_length: int | None = flag(None, "truncate unsupervised SimCSE sentences to this many word pieces "
                                            "(Gao et al. use 32; unset: --max_length)", type=int)
    ucl_eval_every: int = flag(0, "every N unsupervised SimCSE steps (and before the first, and after the last) "
                                  "score the encoder on STS dev (Spearman of cosines, the run's --pooling) and end "
                                  "the stage with the best step's encoder (0: never)")
    ucl_eval_data: str | None = flag(None, "STS file for --ucl_eval_every, any layout training/data/senteval.py "
                                           "reads (default: sts-dev.csv of --data_dir)", type=str, path=True)


class UnsupervisedSimCSE(Extension):
    name, settings, column, short = "ucl", UclConfig, "U-CL", "ucl"
    budget, steps_flag, stages_alone = {"--ucl_epochs": "1", "--ucl_steps": "20"}, "--ucl_steps", True

    def checks(self, c, core) -> list[tuple[bool, str]]:
        return [*budget_checks("ucl", c.ucl_epochs, c.ucl_batch_size, c.ucl_lr),
                (c.ucl_max_length is None or c.ucl_max_length >= 3, "--ucl_max_length must be at least 3"),
                (c.ucl_eval_every >= 0, "--ucl_eval_every must not be negative")]

    def check_files(self, c, core) -> None:
        if c.ucl and c.ucl_data and not Path(c.ucl_data).is_file():
            raise DataError(f"--ucl_data {c.ucl_data}: no such file")
        if c.ucl and c.ucl_eval_every and c.ucl_eval_data and not Path(c.ucl_eval_data).exists():
            raise DataError(f"--ucl_eval_data {c.ucl_eval_data}: no such file or folder")

    def batch_sizes(self, c, core):
        return [("--ucl_batch_size", c.ucl_batch_size)]

    def max_lengths(self, c, core):
        return [("--ucl_max_length", c.ucl_max_length)]

    def reads(self, c, core) -> set[str]:
        return set() if c.ucl_data else set(core.task_names())

    def extra_files(self, c, core) -> list[str]:
        return [STS_DEV_FILE] if c.ucl_eval_every and not c.ucl_eval_data else []

    def stage(self, run) -> dict:
        c = run.config.ucl
        if c.ucl_data:
            corpus, source = read_sentences(c.ucl_data), f"--ucl_data {c.ucl_data}"
        else:
            corpus, source = sentences_from_examples(*(s["train"] for s in run.splits.values())), "the training sets"
        run.log(f"ucl: {len(corpus)} sentences from {source}")

        def loss_fn(inputs, batch):
            # two dropout masks; the first pass goes through the DDP wrapper (if any), which then
            # averages the gradients of the whole loss across processes
            first, second = run.forward_model(None, [inputs[0]])[0], run.model.embed(inputs[0])
            return info_nce(first, second, run.config.train.cl_temp)

        sts_dev = None
        if c.ucl_eval_every:
            path = Path(c.ucl_eval_data) if c.ucl_eval_data else run.data_dir / STS_DEV_FILE
            sts_dev = StsDevCurve(run, load_dataset(path), c.ucl_eval_every)
            for subset in sts_dev.dataset.subsets:   # its skipped rows, as a task file's (--strict: refused)
                if subset.report.bad_rows and run.config.data.strict:
                    raise DataError(subset.report.bad_rows[0].where(subset.report.path))
                if subset.report.bad_rows:
                    run.log.result(f"warning: {subset.describe()}")
            run.log(f"ucl: STS dev Spearman every {c.ucl_eval_every} steps on {sts_dev.pairs} pairs of {path}")
        return train_contrastive(run, ContrastiveStage(
            "ucl", corpus, source, "sentence", loss_fn, c.ucl_epochs, c.ucl_steps, c.ucl_batch_size, c.ucl_lr,
            max_length=c.ucl_max_length, sts_dev=sts_dev))


EXTENSION = UnsupervisedSimCSE()


class StsDevCurve:
    """SimCSE's model selection (Gao et al. 2021, Appendix A; ``--eval_steps 125`` and ``--load_best_model_at_end`` in
    their script), as ``--ucl_eval_every`` describes. The ``[step, spearman]`` points live in ``data`` (the stage's
    checkpointed progress), the best weights in ``best`` (saved with the optimizer states), so a resumed stage continues
    both. Scoring restores every RNG: the stage trains exactly as without the curve."""

    def __init__(self, run, dataset: PairDataset, every: int):
        self.run, self.dataset, self.every = run, dataset, every
        self.pairs = sum(len(subset.gold) for subset in dataset.subsets)
        self.best = EncoderSnapshot()
        self.data: dict = {}

    def states(self) -> dict[str, object]:
        return {"best": self.best}

    def start(self, data: dict) -> None:
        """Take the curve's state (the saved one when resuming); a fresh curve scores step 0."""
        self.data = data
        for key, empty in (("data", str(self.dataset.path)), ("every", self.every), ("step", 0), ("curve", []),
                           ("best", None)):
            data.setdefault(key, empty)
        if not data["curve"]:
            self.score()

    def step_done(self) -> None:
        self.data["step"] += 1
        if self.data["step"] % self.every == 0:
            self.score()

    def score(self) -> None:
        run, saved_rng = self.run, rng_state()
        try:
            scored = score_dataset(lambda sentences: encode(
                run.model.bert, run.tokenizer, sentences, run.config.model.pooling, batch_size=DEFAULT_BATCH_SIZE,
                max_length=run.config.data.max_length, progress=False), self.dataset)
        finally:
            set_rng_state(saved_rng)
        spearman, step = correlations(scored)["all"]["spearman"] or 0.0, self.data["step"]   # undefined: 0
        self.data["curve"].append([step, spearman])
        if self.data["best"] is None or spearman > self.data["best"]["spearman"]:
            self.data["best"] = {"step": step, "spearman": spearman}
            self.best.weights = {k: v.detach().to("cpu", copy=True) for k, v in run.model.bert.state_dict().items()}

    def end_epoch(self, last: bool) -> str:
        """The epoch's log tail; the stage's ``last`` step is scored too if it was not."""
        if last and self.data["curve"][-1][0] != self.data["step"]:
            self.score()
        step, spearman = self.data["curve"][-1]
        best = self.data["best"]
        return f" | STS dev Spearman {spearman:.4f} at step {step} (best {best['spearman']:.4f} at step {best['step']})"

    def end_with_best(self) -> dict:
        """Load the best step's encoder; returns the curve for the stage's log."""
        self.run.model.bert.load_state_dict(self.best.weights)
        best = self.data["best"]
        self.run.log(f"ucl: ending with the encoder of step {best['step']} (STS dev Spearman {best['spearman']:.4f})")
        return dict(self.data)


class EncoderSnapshot:
    """A copy of the encoder's weights on the CPU (``weights``). Having ``state_dict``, it is saved with every
    training checkpoint (``StsDevCurve.states``) and restored on resume."""

    def __init__(self):
        self.weights: dict[str, torch.Tensor] = {}

    def state_dict(self) -> dict[str, torch.Tensor]:
        return dict(self.weights)

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        self.weights = dict(state)
