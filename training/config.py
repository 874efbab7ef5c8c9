"""Run configuration: one dataclass per concern, each field one command-line flag.

``run_multitask.py`` builds its argument parser from these fields (name, default, ``help``,
``choices`` in the field metadata), so every flag has exactly one home.
"""
from __future__ import annotations

import argparse
import dataclasses
import math
from dataclasses import dataclass, field
from pathlib import Path

from heads import POOLING_MODES
from minbert import decay_groups

from .tasks import DEFAULT_TASKS, TASKS, parse_tasks


def optional_float(text: str, convert=float, what: str = "number") -> float | None:
    """A flag value that is a number or ``none`` (the setting off)."""
    if text.lower() == "none":
        return None
    try:
        return convert(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is neither a {what} nor 'none'") from None


def optional_int(text: str) -> int | None:
    """A count that is a whole number or ``none`` (no cap)."""
    return optional_float(text, int, "whole number")


def flag(default, help: str, choices=None, type=None):
    """A dataclass field that is also a command-line flag."""
    meta = {"help": help, "choices": choices, "type": type}
    return field(default=default, metadata={key: value for key, value in meta.items() if value is not None})


@dataclass
class ModelConfig:
    model: str | None = flag(None, "local HF-format BERT directory (config.json, vocab.txt, model.safetensors), or a "
                                   "saved run (its folder or checkpoint/) to start from its encoder; default: the "
                                   "embedded all-MiniLM-L6-v2", type=str)
    pooling: str = flag("mean", "sentence vector from the encoder", choices=sorted(POOLING_MODES))
    para_head: str = flag("concat", "paraphrase (QQP) head: linear on [u; v; |u-v|], (cos(u, v) - b)/temp with b "
                                    "learned, or projected: the same on cos(Wu, Wv), W learned from the identity",
                          choices=["concat", "cosine", "projected"])
    sts_head: str = flag("cosine", "similarity (STS) head: 5*sigmoid(linear[u; v; |u-v|]), 5*cos(u, v), or "
                                   "projected: 5*cos(Wu, Wv), W learned from the identity",
                         choices=["concat", "cosine", "projected"])
    temp: float = flag(0.05, "temperature of the cosine paraphrase head")
    hidden_dropout_prob: float = flag(0.1, "dropout in the encoder and before the heads")
    attention_probs_dropout_prob: float | None = flag(None, "dropout on the attention weights (default: the "
                                                            "model's config.json value)", type=float)
    option: str = flag("finetune", "finetune: update BERT and heads; pretrain: BERT frozen, heads only",
                       choices=["finetune", "pretrain"])


@dataclass
class DataConfig:
    data_dir: str | None = flag(None, "folder with the CS224N CSVs (default: $MINBERT_DATA, then ./data)", type=str)
    max_length: int = flag(128, "truncate each sentence to this many word pieces, [CLS]/[SEP] included")
    batch_size: int = flag(32, "examples (sentences or pairs) per batch, per task")
    task_batch_sizes: str | None = flag(None, "training batch size of each task of --tasks, in its order, e.g. "
                                              "48,64,32 (default: --batch_size each; evaluation uses --batch_size)",
                                        type=str)
    strict: bool = flag(False, "stop at the first bad data row instead of skipping and reporting it")


@dataclass
class TrainConfig:
    tasks: str = flag(",".join(DEFAULT_TASKS), f"comma-separated tasks to train and predict, from {', '.join(TASKS)}")
    epochs: int = flag(3, "multi-task epochs; 0: the stages alone (e.g. --ucl), the run keeps the encoder they "
                          "leave (no heads, no predictions)")
    lr: float = flag(1e-4, "learning rate of the encoder")
    head_lr: float = flag(1e-3, "learning rate of the task heads (higher than the encoder's: they start from scratch)")
    weight_decay: float = flag(0.01, "decoupled weight decay of AdamW")
    seed: int = flag(11711, "seed for Python, NumPy and torch (a CPU run is repeatable)")
    rr: str = flag("min", "round-robin epoch length: 'min' = batches of the smallest task, "
                          "'exhaust' = until the largest task is used up, cycling the others",
                   choices=["min", "exhaust"])
    max_steps_per_epoch: int | None = flag(None, "cap on round-robin steps per epoch (one step = one batch of each task)",
                                           type=optional_int)
    grad_accum: int = flag(1, "batches whose gradients make one optimizer step (gradient accumulation)")
    max_grad_norm: float | None = flag(1.0, "clip the global gradient norm to this before each optimizer step "
                                            "(none: no clipping)", type=optional_float)
    warmup_ratio: float | None = flag(0.1, "learning-rate schedule of every stage: linear warmup from 0 over this "
                                           "fraction of its steps, then linear decay to 0 (BERT's; 0: decay only; "
                                           "none: a constant learning rate)", type=optional_float)
    decay_bias_norm: bool = flag(False, "weight decay on biases and LayerNorm weights too (default: on the other "
                                        "weights only, as BERT's optimizer)")
    device: str = flag("auto", "where to train", choices=["auto", "cpu", "cuda"])
    pre_qqp: bool = flag(False, "before multi-task training, train encoder + paraphrase head on QQP alone")
    pre_qqp_epochs: int = flag(1, "QQP pre-training epochs (the CS224N study used 10)")
    pre_qqp_steps: int | None = flag(None, "QQP pre-training batches per epoch (default: all of quora-train; "
                                           "the study used 1000)", type=optional_int)
    joint_loss: bool = flag(False, "one batch of every task, weighted sum of the losses, one optimizer step "
                                   "(instead of one step per task batch)")
    loss_weights: str | None = flag(None, "joint-loss weights, one per task of --tasks in its order, e.g. 1,2,1 "
                                          "(default: 1 each)", type=str)
    loss_weighting: str = flag("fixed", "joint-loss weights: fixed, adaptive (from last epoch's dev scores) or "
                                        "learned (uncertainty weighting)", choices=["fixed", "adaptive", "learned"])
    lp_steps: int = flag(0, "linear probing before fine-tuning (LP-FT): round-robin steps that train the heads "
                            "alone on a frozen encoder before multi-task training (0: none)")
    task_lr_scales: str | None = flag(None, "learning-rate multiplier of each task's round-robin steps, one per "
                                            "task of --tasks in its order, e.g. 1,1,2 (default: 1 each; not with "
                                            "--joint_loss or --grad_accum, whose steps mix tasks)", type=str)

    def optimizer_groups(self, named_parameters, **options) -> list[dict]:
        """AdamW parameter groups of these parameters: no weight decay on biases and LayerNorm weights
        (``minbert.decay_groups``) unless ``--decay_bias_norm``, then one group. ``options`` (e.g.
        ``lr``) go in every group; an empty group is left out."""
        if not self.decay_bias_norm:
            return decay_groups(named_parameters, self.weight_decay, **options)
        params = [p for _, p in named_parameters]
        return [{"params": params, **options}] if params else []


@dataclass
class SmartConfig:
    """SMART (Jiang et al. 2020): adversarial smoothness regulariser + optional Bregman proximal term."""
    smart: bool = flag(False, "add the SMART adversarial regulariser to every task loss")
    smart_weight: float = flag(0.5, "weight of the regulariser")
    smart_eps: float = flag(1e-5, "std of the initial Gaussian noise on the embeddings")
    smart_step: float = flag(1e-3, "ascent step size on the noise")
    smart_steps: int = flag(1, "ascent steps")
    smart_eps_norm: float = flag(1e-6, "epsilon of the gradient normalisation")
    smart_bregman: bool = flag(False, "add the momentum Bregman proximal point term")
    smart_mu: float = flag(1.0, "weight of the Bregman term")
    smart_beta: float = flag(0.99, "momentum of the Bregman EMA model")


@dataclass
class ContrastiveConfig:
    """SimCSE stages (Gao et al. 2021) run before multi-task training; --temp is their temperature."""
    ucl: bool = flag(False, "unsupervised SimCSE stage (dropout positives, in-batch negatives)")
    ucl_data: str | None = flag(None, "one sentence per line (default: the training sets' sentences)", type=str)
    ucl_epochs: int = flag(1, "unsupervised SimCSE epochs")
    ucl_steps: int | None = flag(None, "cap on unsupervised SimCSE batches per epoch", type=optional_int)
    ucl_batch_size: int = flag(64, "unsupervised SimCSE batch size")
    ucl_lr: float = flag(3e-5, "unsupervised SimCSE learning rate")
    ucl_max_length: int | None = flag(None, "truncate unsupervised SimCSE sentences to this many word pieces "
                                            "(Gao et al. use 32; unset: --max_length)", type=int)
    ucl_eval_every: int = flag(0, "every N unsupervised SimCSE steps (and before the first, and after the last) "
                                  "score the encoder on STS dev (Spearman of cosines, the run's --pooling) and end "
                                  "the stage with the best step's encoder (0: never)")
    ucl_eval_data: str | None = flag(None, "STS file for --ucl_eval_every, any layout training.tools."
                                           "evaluate_embeddings reads (default: sts-dev.csv of --data_dir)", type=str)
    scl: bool = flag(False, "supervised SimCSE stage (positives and hard negatives)")
    scl_data: str | None = flag(None, "CSV of sent0,sent1,hard_neg triples (default: built from QQP and STS "
                                      "training pairs)", type=str)
    scl_epochs: int = flag(1, "supervised SimCSE epochs")
    scl_steps: int | None = flag(None, "cap on supervised SimCSE batches per epoch", type=optional_int)
    scl_batch_size: int = flag(16, "supervised SimCSE batch size")
    scl_lr: float = flag(3e-5, "supervised SimCSE learning rate")
    hard_negative_weight: float = flag(1.0, "alpha: weight of each anchor's own hard negative")
    lcl: bool = flag(False, "label-contrastive stage on the SST training sentences (same class = positive)")
    lcl_epochs: int = flag(1, "label-contrastive epochs")
    lcl_steps: int | None = flag(None, "cap on label-contrastive batches per epoch", type=optional_int)
    lcl_batch_size: int = flag(32, "label-contrastive batch size")
    lcl_lr: float = flag(3e-5, "label-contrastive learning rate")


@dataclass
class SpeedConfig:
    """How fast, not what: the defaults are the fastest paths measured on CPU (docs/performance.md),
    ``--reference`` (``REFERENCE_SPEED``) the written-out ones the tests check them against. They agree
    up to float rounding, except bucketing (other batches), uniform dropout masks (other, equally
    distributed draws) and sparse embeddings (lazy Adam on the word embeddings)."""
    attention: str = flag("auto", "attention implementation: manual (written out, the reference), sdpa "
                                  "(torch's fused kernel), auto (sdpa where it is faster)",
                          choices=["manual", "sdpa", "auto"])
    adamw: str = flag("auto", "AdamW update: loop (per tensor, cache-blocked on CPU, the reference), foreach "
                              "(multi-tensor), fused (torch's fused kernel), auto (fused on CPU and CUDA)",
                      choices=["auto", "loop", "foreach", "fused"])
    bucket: bool = flag(True, "length-bucketed batches (shuffled buckets) for training and evaluation: less padding "
                              "(--no_bucket: batches in random order)")
    amp: str = flag("off", "mixed precision: bf16 autocast (CPU with bf16 instructions, or CUDA), fp16 autocast "
                           "+ gradient scaling (CUDA)", choices=["off", "bf16", "fp16"])
    compile: bool = flag(False, "torch.compile the encoder (first steps are slow while it compiles)")
    dropout_masks: str = flag("uniform", "how encoder dropout masks are drawn: bernoulli (F.dropout, the reference) "
                                         "or uniform (u >= p, u ~ U[0,1): same distribution, cheaper on CPU)",
                              choices=["bernoulli", "uniform"])
    sparse_embeddings: bool | None = flag(None, "sparse word-embedding gradients: AdamW updates only the rows of the "
                                                "batch's word pieces (lazy Adam; other rows' moments and decay wait) "
                                                "(default: on for one process without --compile; "
                                                "--no_sparse_embeddings: dense)")

    def sparse(self, distributed: bool) -> bool:
        """Sparse word-embedding gradients: as given, else where they apply (one process, no ``--compile``)."""
        return not (distributed or self.compile) if self.sparse_embeddings is None else self.sparse_embeddings

    def adamw_options(self) -> dict:
        """``minbert.AdamW`` keyword arguments for ``--adamw``."""
        return {"auto": {}, "loop": {"fused": False, "foreach": False}, "foreach": {"fused": False, "foreach": True},
                "fused": {"fused": True}}[self.adamw]


# --reference: the written-out paths (the defaults before the fast paths became the defaults).
REFERENCE_SPEED = {"attention": "manual", "adamw": "loop", "bucket": False, "dropout_masks": "bernoulli",
                   "sparse_embeddings": False}


@dataclass
class OutputConfig:
    out_dir: str = flag("predictions", "parent folder of run folders")
    run_name: str | None = flag(None, "run folder name (default: built from the main flags)", type=str)
    save_every: int = flag(200, "write a resumable checkpoint every N optimizer steps (0: only at epoch ends)")
    keep_checkpoints: int = flag(2, "resumable checkpoints kept (the newest)")
    resume: str | None = flag(None, "continue the run in this folder from its newest checkpoint, with the "
                                    "configuration saved there (other flags are ignored)", type=str)
    resume_fallback: bool = flag(False, "with --resume: if the newest checkpoint is unreadable, continue from the "
                                        "newest intact one")
    keep_training_state: bool = flag(False, "keep the resumable checkpoints (checkpoints/) when the run finishes "
                                            "(default: removed; checkpoint/ holds the best weights)")
    quiet: bool = flag(False, "no progress bars; only one line per epoch and the final summary")
    log_file: str | None = flag(None, "also append every log line to this file", type=str)


@dataclass
class RunConfig:
    model: ModelConfig
    data: DataConfig
    train: TrainConfig
    smart: SmartConfig
    contrastive: ContrastiveConfig
    speed: SpeedConfig
    output: OutputConfig

    @classmethod
    def defaults(cls, **sections) -> "RunConfig":
        """Every section at its defaults, except the ``sections`` given (name -> dataclass)."""
        return cls(**{name: section() for name, section in SECTIONS.items()} | sections)

    @classmethod
    def from_dict(cls, data: dict) -> "RunConfig":
        """Inverse of ``dataclasses.asdict``: the one reader of a saved run configuration. Tolerant of
        other versions: names it does not know are ignored, and a field it lacks is one the saving
        version did not have, so it takes the value that does what that version did
        (``ABSENT_MEANS``), else its default; a field saved under an older name is read (``RENAMED``)."""
        sections = {}
        for name, section in SECTIONS.items():
            saved = dict(data.get(name) or {})
            for old, (new, convert) in RENAMED.get(name, {}).items():
                if old in saved and new not in saved:
                    saved[new] = convert(saved.pop(old))
            known = {f.name for f in dataclasses.fields(section)}
            absent = {key: value for key, value in ABSENT_MEANS.get(name, {}).items() if key not in saved}
            sections[name] = section(**absent | {key: value for key, value in saved.items() if key in known})
        return cls(**sections)

    def validate(self) -> None:
        """Reject nonsense values with one line naming the flag."""
        for section in vars(self).values():
            for f in dataclasses.fields(section):
                value = getattr(section, f.name)
                if isinstance(value, float) and not math.isfinite(value):
                    raise ValueError(f"--{f.name} must be a finite number, got {value}")
        tasks = self.task_names()  # a bad --tasks first: the checks below read it
        name = self.output.run_name
        if name is not None and (name in ("", ".", "..") or Path(name).name != name or "\\" in name):
            raise ValueError(f"--run_name {name!r} must be a plain folder name (no '/', not '..'): runs are "
                             f"written inside --out_dir")
        stages_only = self.train.epochs == 0
        checks = [
            (self.train.epochs >= 0, "--epochs must not be negative"),
            (self.train.lr > 0, "--lr must be positive"),
            (self.train.head_lr > 0, "--head_lr must be positive"),
            (self.train.weight_decay >= 0, "--weight_decay must not be negative"),
            (self.train.grad_accum >= 1, "--grad_accum must be at least 1"),
            (self.train.max_grad_norm is None or self.train.max_grad_norm > 0, "--max_grad_norm must be positive"),
            (self.train.warmup_ratio is None or 0 <= self.train.warmup_ratio < 1, "--warmup_ratio must be in [0, 1)"),
            (self.train.max_steps_per_epoch is None or self.train.max_steps_per_epoch >= 1,
             "--max_steps_per_epoch must be at least 1"),
            (self.data.batch_size >= 1, "--batch_size must be at least 1"),
            (self.data.max_length >= 3, "--max_length must be at least 3"),
            (0 <= self.model.hidden_dropout_prob < 1, "--hidden_dropout_prob must be in [0, 1)"),
            (self.model.attention_probs_dropout_prob is None or 0 <= self.model.attention_probs_dropout_prob < 1,
             "--attention_probs_dropout_prob must be in [0, 1)"),
            (self.model.temp > 0, "--temp must be positive"),
            (self.train.lp_steps >= 0, "--lp_steps must not be negative"),
            (self.train.pre_qqp_epochs >= 1, "--pre_qqp_epochs must be at least 1"),
            (self.train.pre_qqp_steps is None or self.train.pre_qqp_steps >= 1, "--pre_qqp_steps must be at least 1"),
            (self.smart.smart_weight >= 0 and self.smart.smart_eps >= 0 and self.smart.smart_step >= 0,
             "--smart_weight, --smart_eps and --smart_step must not be negative"),
            (self.smart.smart_steps >= 0, "--smart_steps must not be negative"),
            (0 <= self.smart.smart_beta < 1, "--smart_beta must be in [0, 1)"),
            (min(self.contrastive.ucl_epochs, self.contrastive.scl_epochs, self.contrastive.lcl_epochs) >= 1,
             "--ucl_epochs, --scl_epochs and --lcl_epochs must be at least 1"),
            (min(self.contrastive.ucl_batch_size, self.contrastive.scl_batch_size, self.contrastive.lcl_batch_size) >= 2,
             "--ucl_batch_size, --scl_batch_size and --lcl_batch_size must be at least 2 (in-batch negatives)"),
            (min(self.contrastive.ucl_lr, self.contrastive.scl_lr, self.contrastive.lcl_lr) > 0,
             "--ucl_lr, --scl_lr and --lcl_lr must be positive"),
            (self.contrastive.hard_negative_weight > 0, "--hard_negative_weight must be positive"),
            (self.contrastive.ucl_max_length is None or self.contrastive.ucl_max_length >= 3,
             "--ucl_max_length must be at least 3"),
            (self.contrastive.ucl_eval_every >= 0, "--ucl_eval_every must not be negative"),
            (self.output.save_every >= 0, "--save_every must not be negative"),
            (self.output.keep_checkpoints >= 1, "--keep_checkpoints must be at least 1"),
            (not (self.speed.sparse_embeddings is True and self.speed.compile),
             "--sparse_embeddings and --compile do not go together (torch.compile cannot build the sparse "
             "embedding backward); choose one"),
            (not stages_only or any((self.contrastive.ucl, self.contrastive.scl, self.contrastive.lcl)),
             "--epochs 0 runs the stages alone: give --ucl, --scl or --lcl (or train at least one epoch)"),
            (not (stages_only and self.train.pre_qqp),
             "--pre_qqp trains the paraphrase head, which a run with --epochs 0 does not keep (it keeps the "
             "encoder alone); train at least one epoch"),
            (not self.train.pre_qqp or "qqp" in tasks, "--pre_qqp trains the qqp task: add qqp to --tasks"),
            (not self.contrastive.scl or self.contrastive.scl_data or {"qqp", "sts"} <= set(tasks),
             "--scl builds its triples from QQP and STS pairs: add qqp and sts to --tasks, or give --scl_data"),
            (not self.contrastive.lcl or self.lcl_task() is not None,
             "--lcl needs a single-sentence classification task (sst or cfimdb) in --tasks"),
            (self.train.task_lr_scales is None or not (self.train.joint_loss or self.train.grad_accum > 1),
             "--task_lr_scales scales one task's optimizer steps: a step of --joint_loss or --grad_accum mixes "
             "tasks; drop one of them"),
        ]
        for ok, message in checks:
            if not ok:
                raise ValueError(message)
        self.parsed_loss_weights()
        self.lr_scales()
        self.batch_sizes()

    def lcl_task(self) -> str | None:
        """The label-contrastive stage's task: the first single-sentence classification task of ``--tasks``."""
        return next((name for name in self.task_names()
                     if not TASKS[name].is_pair and TASKS[name].label_type == "class"), None)

    def task_names(self) -> list[str]:
        """The tasks of ``--tasks``, in their order (the order of round-robin and of the logs)."""
        return parse_tasks(self.train.tasks)

    def batch_sizes(self) -> dict[str, int]:
        """The training batch size of each task: ``--task_batch_sizes 48,64,32`` as ``{"sst": 48, ...}``,
        or ``--batch_size`` each."""
        return self._per_task("task_batch_sizes", self.data.task_batch_sizes, self.data.batch_size, int,
                              lambda v: v >= 1, "positive whole numbers")

    def training_batch_sizes(self) -> list[tuple[str, int]]:
        """Every training batch size as (the flag that sets it, size): the global batches that
        data-parallel processes split. ``--batch_size`` is named only when it is what the tasks use."""
        task_flag = "--task_batch_sizes ({})" if self.data.task_batch_sizes else "--batch_size"
        c = self.contrastive
        return [*((task_flag.format(name), size) for name, size in self.batch_sizes().items()),
                ("--ucl_batch_size", c.ucl_batch_size), ("--scl_batch_size", c.scl_batch_size),
                ("--lcl_batch_size", c.lcl_batch_size)]

    def parsed_loss_weights(self) -> dict[str, float]:
        """``--tasks sst,qqp,sts --loss_weights 1,2,1`` as ``{"sst": 1.0, "qqp": 2.0, "sts": 1.0}``."""
        return self._per_task("loss_weights", self.train.loss_weights, 1.0, float, lambda v: v >= 0,
                              "non-negative numbers")

    def lr_scales(self) -> dict[str, float]:
        """``--tasks sst,qqp,sts --task_lr_scales 1,1,2`` as ``{"sst": 1.0, "qqp": 1.0, "sts": 2.0}``."""
        return self._per_task("task_lr_scales", self.train.task_lr_scales, 1.0, float,
                              lambda v: math.isfinite(v) and v > 0, "positive numbers")

    def _per_task(self, flag: str, text: str | None, default, convert, ok, what: str) -> dict:
        """A comma-separated flag value with one entry per task of ``--tasks`` (``default`` each when
        not given), as task -> value; one error line naming the flag otherwise."""
        names = self.task_names()
        if text is None:
            return {name: default for name in names}
        try:
            values = [convert(p) for p in text.split(",")]
        except ValueError:
            values = []
        if len(values) != len(names) or not all(ok(v) for v in values):
            raise ValueError(f"--{flag} must be {len(names)} {what}, one per task of --tasks "
                             f"({','.join(names)}), got {text!r}")
        return dict(zip(names, values))


# Fields whose default changed after they were first saved, with the value that does what a
# version without the field did: a saved configuration that lacks one is from such a version.
ABSENT_MEANS = {
    "train": {"warmup_ratio": None, "decay_bias_norm": True, "max_grad_norm": None},
    "speed": {"attention": "manual", "bucket": False, "dropout_masks": "bernoulli", "sparse_embeddings": False},
}

# Fields saved under an older name: old name -> (field, the old value as the field's value).
RENAMED = {"train": {"no_decay_bias_norm": ("decay_bias_norm", lambda no_decay: not no_decay)}}

# The sections of a RunConfig: field name -> dataclass (the flag groups of run_multitask.py).
SECTIONS = {"model": ModelConfig, "data": DataConfig, "train": TrainConfig, "smart": SmartConfig,
            "contrastive": ContrastiveConfig, "speed": SpeedConfig, "output": OutputConfig}


def add_flags(parser: argparse.ArgumentParser, section: type, only: tuple[str, ...] | None = None,
              title: str | None = None, **overrides) -> None:
    """One flag per field of the config dataclass ``section`` (or of the fields named in ``only``),
    in an argument group; the help ends with the default. ``overrides`` replace defaults,
    so a side tool can share a flag's home but start from another value."""
    group = parser.add_argument_group(title or section.__name__.removesuffix("Config").lower())
    for f in dataclasses.fields(section):
        if only is not None and f.name not in only:
            continue
        meta = dict(f.metadata)
        default = overrides.get(f.name, f.default)
        if f.type in (bool, "bool", "bool | None"):
            group.add_argument(f"--{f.name}", action="store_true", default=default, help=meta["help"])
            group.add_argument(f"--no_{f.name}", action="store_false", dest=f.name, default=default,
                               help=argparse.SUPPRESS)  # every switch has its off form
            continue
        if default is not None or "default" not in meta["help"]:  # else the help says what None means
            meta["help"] += f" (default: {'none' if default is None else default})"
        kind = meta.pop("type", None) or type(f.default)
        group.add_argument(f"--{f.name}", type=kind, default=default, **meta)


def section_from_args(section: type, args: argparse.Namespace, **values):
    """The dataclass ``section`` filled from parsed flags (fields without a flag keep their default)."""
    given = vars(args)
    return section(**{f.name: given[f.name] for f in dataclasses.fields(section) if f.name in given} | values)
