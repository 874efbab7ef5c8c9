"""Run configuration: one dataclass per concern, each field one command-line flag (``training/configuration/flags.py``).
The core sections are here, with what reads a configuration saved by any version (renamed, removed and
absent settings); each extension's section lives in its own module (``training/extensions``).
``RunSettings`` is a run's sections together, what the run's parts read, and the reading of a saved one.
This module imports no extension: ``training/harness/run_config.py``'s ``RunConfig``, above the registry,
adds the extensions' sections and defaults and the checks of the whole.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Self

from heads import POOLING_MODES
from heads.pair_parts import DEFAULTS as PAIR_DEFAULTS, PROJECTIONS, SCORERS
from heads.sts_losses import DEFAULT_STS_LOSS, STS_LOSSES

from .flags import (add_flags, device_name, flag, listing, optional_float, optional_int, optional_text,  # noqa: F401
                    per_task, section_from_args, some_of)
from .task_declarations import BUILTIN_NAMES, DEFAULT_TASKS, check_declaration, parse_tasks
from .task_shares import AUTO, tempered_batch_sizes

DEFAULT_SEED = 11711   # --seed's default; a grid's seeds count up from it (training/tools/grid.py)
STRATEGIES = ("min", "exhaust", "proportional")   # --rr: how long a round-robin epoch is (training/learning/schedule.py)
# --report_to: where a run's numbers go besides metrics.json, each a tracker of training/harness/trackers/ (or none)
TRACKERS = ("tensorboard", "mlflow", "wandb")


@dataclass(frozen=True)
class ModelConfig:
    model: str | None = flag(None, "local HF-format BERT directory (config.json, vocab.txt, model.safetensors), or a "
                                   "saved run (its folder or checkpoint/) to start from its encoder; default: the "
                                   "embedded all-MiniLM-L6-v2", type=str)
    pooling: str = flag("mean", "sentence vector from the encoder", choices=sorted(POOLING_MODES))
    # the choices and the help are the registries of the heads' parts (heads/pair_parts.py, heads/sts_losses.py),
    # read when the parser is built: a new part is one class and one line there
    para_head: str = flag(PAIR_DEFAULTS["para_head"],
                          listing("paraphrase (QQP) head, its logit", SCORERS, lambda scorer: scorer.logit_help),
                          choices=SCORERS)
    sts_head: str = flag(PAIR_DEFAULTS["sts_head"],
                         listing("similarity (STS) head, its 0..5 score", SCORERS, lambda scorer: scorer.score_help()),
                         choices=SCORERS)
    pair_projection: str = flag(PAIR_DEFAULTS["pair_projection"],
                                listing("the sentence vectors u, v before both pair heads", PROJECTIONS,
                                        lambda projection: projection.help), choices=PROJECTIONS)
    sts_loss: str = flag(DEFAULT_STS_LOSS, listing("STS loss", STS_LOSSES, lambda loss: loss.help), choices=STS_LOSSES)
    head_temp: float = flag(0.05, "temperature tau of the cosine heads' (cos(u, v) - b)/tau and of --sts_loss cosent")
    hidden_dropout_prob: float = flag(0.1, "dropout in the encoder and before the heads")
    attention_probs_dropout_prob: float | None = flag(None, "dropout on the attention weights (default: the "
                                                            "model's config.json value)", type=float)
    option: str = flag("finetune", "finetune: update BERT and heads; pretrain: BERT frozen, heads only",
                       choices=["finetune", "pretrain"])
    private_layers: int = flag(2, "give each task its own copy of the encoder's top K layers over the shared bottom "
                                  "(0: all shared, plain fine-tuning); STS keeps the encoder's own, the tower that "
                                  "checkpoint/ exports; no effect with one task")


@dataclass(frozen=True)
class DataConfig:
    data_dir: str | None = flag(None, "folder with the CS224N CSVs (default: $MINBERT_DATA, then ./data)", type=str)
    max_length: int = flag(128, "truncate each sentence to this many word pieces, [CLS]/[SEP] included")
    batch_size: int = flag(32, "examples (sentences or pairs) per batch, per task")
    task_batch_sizes: str | None = flag(AUTO, "training batch size of each task of --tasks, in its order, e.g. "
                                              "48,64,32; auto: each task's batch follows its training-set size N "
                                              "as N^(1/T) (--sampling_temperature), the smallest task's at "
                                              "--batch_size (docs/defaults.md: why it is the default); none: "
                                              "--batch_size each, the plain round robin (evaluation uses "
                                              "--batch_size)", type=optional_text)
    sampling_temperature: float = flag(1.0, "temperature T of --task_batch_sizes auto: 1 gives each task its whole "
                                            "training set each epoch, a large T every task --batch_size")
    strict: bool = flag(False, "stop at the first bad data row instead of skipping and reporting it")
    task_file: str | None = flag(None, "your own tasks, declared in a JSON (or YAML) file: name, kind, files, columns, "
                                       "classes or score range (docs/own-tasks.md); name them in --tasks", type=str,
                                 path=True)
    # a data setting, not an output one: it changes the dev numbers, so the report never pools a capped run
    # with uncapped ones (training/tools/report.py groups seeds by every section but output)
    max_eval_examples: int | None = flag(None, "score only the first N examples of each task's dev file, at every "
                                               "evaluation (a quick smoke run: its dev numbers are not comparable "
                                               "with full-dev ones; none: all)", type=optional_int)
    # a data setting too: a run scored on a validation split is never pooled or compared with dev-scored runs
    val_fraction: float = flag(0.0, "hold out this fraction of each task's training file (the same examples for "
                                    "every seed and run) and evaluate on it instead of the dev file, which is then "
                                    "not read: how minbert-search scores its trials (0: train on the whole file, "
                                    "evaluate on dev)")
    # not a flag: the checked declarations of --task_file, saved with the run so that it reloads, resumes
    # and predicts without the file (training/configuration/task_file.py)
    own_tasks: list = field(default_factory=list)

    def declared_tasks(self) -> list[dict]:
        """The run's own task declarations (``own_tasks``, those of ``--task_file``), checked again."""
        where = f"--task_file {self.task_file}" if self.task_file else "the run's configuration"
        return [check_declaration(d, where, i) for i, d in enumerate(self.own_tasks)]


@dataclass(frozen=True)
class TrainConfig:
    tasks: str = flag(",".join(DEFAULT_TASKS), "comma-separated tasks to train and predict, from "
                                               f"{', '.join(BUILTIN_NAMES)} and those --task_file declares")
    epochs: int = flag(3, "multi-task epochs; 0: the stages alone (e.g. --ucl), the run keeps the encoder they "
                          "leave (no heads, no predictions)")
    lr: float = flag(1e-4, "learning rate of the encoder")
    layer_lr_decay: float = flag(0.9, "layer-wise learning-rate decay: each encoder layer below the top at this "
                                      "times the rate of the one above, the embeddings below the bottom layer "
                                      "(1: every layer at --lr)")
    head_lr: float = flag(1e-3, "learning rate of the task heads (higher than the encoder's: they start from scratch)")
    weight_decay: float = flag(0.01, "decoupled weight decay of AdamW")
    seed: int = flag(DEFAULT_SEED, "seed for Python, NumPy and torch (a CPU run is repeatable)")
    rr: str = flag("min", "round-robin epoch length: 'min' = batches of the smallest task, "
                          "'exhaust' = until the largest task is used up, cycling the others, "
                          "'proportional' = every task's batches once, spread evenly", choices=list(STRATEGIES))
    max_steps_per_epoch: int | None = flag(None, "cap on round-robin rounds per epoch (a round: one batch of "
                                                 "each task, so one optimizer step per task)", type=optional_int)
    grad_accum: int = flag(1, "batches whose gradients make one optimizer step (gradient accumulation)")
    max_grad_norm: float | None = flag(1.0, "clip the global gradient norm to this before each optimizer step "
                                            "(none: no clipping)", type=optional_float)
    warmup_ratio: float | None = flag(0.1, "learning-rate schedule of every stage: linear warmup from 0 over this "
                                           "fraction of its steps, then linear decay to 0 (BERT's; 0: decay only; "
                                           "none: a constant learning rate)", type=optional_float)
    decay_bias_norm: bool = flag(False, "weight decay on biases and LayerNorm weights too (default: on the other "
                                        "weights only, as BERT's optimizer)")
    eval_every: int = flag(0, "evaluate dev, and keep the best weights, every N optimizer steps of multi-task "
                              "training and after its last (0: at every epoch end)")
    early_stopping: int = flag(0, "end multi-task training after N evaluations without a better overall dev score "
                                  "(0: never)")
    cl_temp: float = flag(0.05, "temperature tau of the contrastive losses: the InfoNCE of --ucl and --scl, the "
                                "label-contrastive loss of --lcl")
    device: str = flag("auto", "where to train: auto (CUDA when available), cpu, cuda or cuda:N (the GPU of index N)",
                       type=device_name)


@dataclass(frozen=True)
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


# settings that say where a run is and how it is driven, not what it trains: a configuration file never
# sets them (training/configuration/config_file.py), a resumed run takes them from its command line (training/harness/run_folder.py)
WHERE_A_RUN_IS = ("run_name", "resume", "resume_fallback", "log_file", "wait_after_eval")

# settings that say where a run's folder is and how the run was driven and watched, not what it trains, scores or
# writes: a run's "Reproduce" command (training/harness/model_card.py) gives every other setting off its default,
# so a new flag is in it unless it is named here; --run_name stays in it, naming the run.
NOT_REPRODUCED = (*(name for name in WHERE_A_RUN_IS if name != "run_name"), "out_dir", "quiet")


@dataclass(frozen=True)
class OutputConfig:
    out_dir: str = flag("predictions", "parent folder of run folders")
    run_name: str | None = flag(None, "run folder name (default: built from the main flags)", type=str)
    save_every: int = flag(200, "write a resumable checkpoint every N optimizer steps (0: only at epoch ends)")
    keep_checkpoints: int = flag(2, "resumable checkpoints kept (the newest)")
    resume: str | None = flag(None, "continue the run in this folder from its newest checkpoint, with the "
                                    "configuration saved there (other flags that differ from it are refused; --quiet, "
                                    "--log_file, --resume_fallback, --wait_after_eval and --data_dir are taken)",
                      type=str)
    resume_fallback: bool = flag(False, "with --resume: if the newest checkpoint is unreadable, continue from the "
                                        "newest intact one")
    keep_training_state: bool = flag(False, "keep the resumable checkpoints (checkpoints/) when the run finishes "
                                            "(default: removed; checkpoint/ holds the best weights)")
    test_predictions: bool = flag(True, "predict (and score, where labelled) the tasks' test files after training; "
                                        "off, dev predictions only (a quicker smoke run)")
    wait_after_eval: bool = flag(False, "after each evaluation print an EVALUATION line and wait for 'continue' or "
                                        "'stop' on stdin: a search's scheduler steps the run (minbert-search; "
                                        "training/harness/trial_control.py)")
    quiet: bool = flag(False, "no progress bars; only one line per epoch and the final summary")
    log_file: str | None = flag(None, "also append every log line to this file", type=str)
    # how the run is tracked, not where it is: a resumed run keeps its own (its mlflow run goes on), a settings file
    # may set them
    report_to: str = flag("tensorboard", "where the run's configuration, every step's numbers, its final scores and "
                                         "files go besides metrics.json: tensorboard (event files in the run folder), "
                                         "mlflow (a local store in --out_dir: mlflow.db and mlartifacts/), wandb (an "
                                         "offline run in the run folder, `wandb sync` uploads it), several "
                                         "comma-separated, or none; mlflow and wandb are extras: "
                                         "pip install -e '.[mlflow]' or '.[wandb]'", type=some_of(TRACKERS, "none"))
    experiment: str | None = flag(None, "the mlflow experiment (and wandb project) the run is tracked under (default: "
                                        "the --out_dir folder's name; minbert-grid gives its runs the grid's name)",
                                  type=str)

    def trackers(self) -> tuple[str, ...]:
        """The trackers of ``--report_to``, in its order; none: ``()``."""
        return () if self.report_to == "none" else tuple(self.report_to.split(","))


def saved_values(data: dict) -> dict:
    """Field name -> value of a saved configuration, whatever section each was saved in."""
    values = {}
    for name, section in data.items():
        if isinstance(section, dict):
            values.update(saved_values(section) if name == "extensions" else section)
    return values


def saved_dev_cap(data: dict) -> int | None:
    """A saved configuration's ``--max_eval_examples N`` (its dev scores are on the first N examples of each task's
    dev file), or None for a run scored on whole dev files."""
    cap = saved_values(data).get("max_eval_examples") if isinstance(data, dict) else None
    return cap if isinstance(cap, int) and not isinstance(cap, bool) and cap >= 1 else None


def scored_whole(dev_examples: dict[str, int], cap: int | None) -> str:
    """The tasks whose dev file was shorter than the cap, so scored whole, as the log, the model card and the
    report say them: " (sts: all 60)"; "" when none was (or the run is not capped)."""
    fewer = [f"{task}: all {n}" for task, n in dev_examples.items() if isinstance(n, int) and cap and n < cap]
    return f" ({', '.join(fewer)})" if fewer else ""


def capped_words(cap: int | None) -> str:
    """What a capped run's dev scores are labelled with wherever they appear (the log, curves.png):
    " (first N examples a task)"; "" for a run scored on whole dev files."""
    return f" (first {cap} examples a task)" if cap else ""


def removed_settings(data: dict) -> list[str]:
    """The settings of a saved configuration that this version no longer has code for, as flags
    (empty when it used none): such a run loads, but cannot be resumed as it trained."""
    values = saved_values(data)
    return [f"--{name} {values[name]}" for name, off in REMOVED.items() if values.get(name, off) != off]


# Fields whose default changed after they were first saved, with the value that does what a
# version without the field did: a saved configuration that lacks one is from such a version.
ABSENT_MEANS = {"warmup_ratio": None, "decay_bias_norm": True, "max_grad_norm": None,
                "attention": "manual", "bucket": False, "dropout_masks": "bernoulli", "sparse_embeddings": False,
                "private_layers": 0, "task_batch_sizes": None, "layer_lr_decay": 1.0}

# Fields saved under an older name: old name -> (the fields it became, the old value as their value).
RENAMED = {"no_decay_bias_norm": (("decay_bias_norm",), lambda no_decay: not no_decay),
           "temp": (("head_temp", "cl_temp"), lambda temp: temp)}   # one τ for the head and the contrastive losses

# Flags that are gone, refused by the parsers with what to give instead (``training.configuration.flags.add_refused``).
SPLIT_FLAGS = {"--temp": "--temp was split: give --head_temp (the cosine paraphrase head's tau) and/or --cl_temp "
                         "(the contrastive losses' tau)"}

# Probes measured as giving no gain and removed (docs/defaults.md), with the value that switched them off.
REMOVED = {"lp_steps": 0, "task_lr_scales": None}
REMOVED_IN = "was removed after commit 4be10e6 (docs/defaults.md); `git checkout 4be10e6` runs it"

# Extensions measured and removed: its switch -> (the commit that holds its code, where its numbers are kept, the
# other settings of its section). A saved run with the switch on is refused in one line (``removed_extension``,
# ``RunConfig.from_dict``); with it off, its section is read and ignored.
REMOVED_EXTENSIONS = {"distill": ("df5eb5b", "issue 73; docs/ablation.md keeps its numbers", ("teachers",))}
# every setting of the removed extensions' sections (what a saved configuration may hold of them)
REMOVED_EXTENSION_SETTINGS = {name for on, (_, _, others) in REMOVED_EXTENSIONS.items() for name in (on, *others)}


def removed_extension(values: dict) -> str | None:
    """The line refusing a saved configuration (``saved_values``) that used a removed extension, or None."""
    for name, (commit, kept, _) in REMOVED_EXTENSIONS.items():
        if values.get(name) not in (None, False):
            return (f"this run used --{name}, which was removed after commit {commit} ({kept}): "
                    f"`git checkout {commit}` runs it, or train again without it")
    return None

# The core sections of a RunConfig: field name -> dataclass (the first flag groups of run_multitask.py).
CORE_SECTIONS = {"model": ModelConfig, "data": DataConfig, "train": TrainConfig, "speed": SpeedConfig,
                 "output": OutputConfig}


@dataclass(frozen=True)
class CoreSettings:
    """The core sections, and what follows from them alone: the tasks of ``--tasks`` and their batch sizes.
    What an extension's hooks read beside their own section (``training/extensions/base.py``)."""
    model: ModelConfig
    data: DataConfig
    train: TrainConfig
    speed: SpeedConfig
    output: OutputConfig

    def task_names(self) -> list[str]:
        """The tasks of ``--tasks``, in their order (the order of round-robin and of the logs): built-in names or
        those of the run's own declarations."""
        own = [d["name"] for d in self.data.declared_tasks()]
        return parse_tasks(self.train.tasks, dict.fromkeys([*BUILTIN_NAMES, *own]))

    def batch_sizes(self, train_sizes: dict[str, int] | None = None) -> dict[str, int]:
        """The training batch size of each task: ``--task_batch_sizes 48,64,32`` as ``{"sst": 48, ...}``,
        or ``--batch_size`` each. ``--task_batch_sizes auto`` follows the tasks' training-set sizes
        ``train_sizes`` (task -> examples; ``task_shares.py``); without them, ``--batch_size`` each, the
        smallest a task's batch can be (what data-parallel processes split)."""
        if self.data.task_batch_sizes == AUTO:
            names = self.task_names()
            if train_sizes is None:
                return dict.fromkeys(names, self.data.batch_size)
            return tempered_batch_sizes({name: train_sizes[name] for name in names}, self.data.batch_size,
                                        self.data.sampling_temperature)
        return per_task("task_batch_sizes", self.data.task_batch_sizes, self.task_names(), self.data.batch_size,
                        int, lambda v: v >= 1, "positive whole numbers")


@dataclass(frozen=True)
class RunSettings(CoreSettings):
    """A run's settings: the core sections and each extension's (name -> its dataclass), as the run's parts read
    them (the module's docstring: ``RunConfig`` is the one that is made)."""
    extensions: dict = field(default_factory=dict)   # extension name -> its settings (absent: the defaults)

    def __getattr__(self, name: str):
        """``config.smart``, ``config.ucl``, ...: the settings of the extension of that name."""
        extensions = self.__dict__.get("extensions", {})
        if name in extensions:
            return extensions[name]
        raise AttributeError(f"{type(self).__name__} has no section {name!r}")

    def core(self) -> CoreSettings:
        """The core sections alone, without any extension's: what an extension's hooks are given."""
        return CoreSettings(**{name: getattr(self, name) for name in CORE_SECTIONS})

    def sections(self) -> dict:
        """Every settings section by name: the core ones, then the extensions' in registry order."""
        return {name: getattr(self, name) for name in CORE_SECTIONS} | self.extensions

    def with_sections(self, **sections) -> Self:
        """A copy with the ``sections`` given (name -> settings dataclass, core or extension) in place of its own."""
        core = {name: sections.pop(name) for name in CORE_SECTIONS if name in sections}
        return dataclasses.replace(self, **core, extensions=self.extensions | sections)

    def to_dict(self) -> dict:
        """Section -> field -> value, as saved in metrics.json and run_config.json."""
        return {name: dataclasses.asdict(section) for name, section in self.sections().items()}

    @classmethod
    def defaults(cls, **sections) -> Self:
        """Every section at its defaults, except the ``sections`` given (name -> settings dataclass); a
        ``RunConfig`` fills the extensions' sections not given."""
        core = {name: sections.pop(name, None) or section() for name, section in CORE_SECTIONS.items()}
        return cls(**core, extensions=sections)

    @classmethod
    def read(cls, data: dict, extensions: dict[str, type]) -> Self:
        """Inverse of ``to_dict``, the one reader of a saved configuration, given each extension's settings
        dataclass by name (the registry's). A field is found by name in whichever section it was saved (flag
        names are unique), so other versions' layouts read too; unknown names are ignored, an absent field
        takes ``ABSENT_MEANS`` (what the saving version did), else its default, and an older name is read
        through ``RENAMED``. A run that used a removed extension is refused in one line (``REMOVED_EXTENSIONS``)."""
        values = saved_values(data)
        if refused := removed_extension(values):
            raise ValueError(refused)
        for old, (names, convert) in RENAMED.items():
            if old in values:
                value = convert(values.pop(old))
                values |= {new: value for new in names if new not in values}
        values = ABSENT_MEANS | values
        for key in ("para_head", "sts_head"):
            if values.get(key) == "projected":
                raise ValueError(f"--{key} projected {REMOVED_IN}")

        def build(section: type):
            return section(**{f.name: values[f.name] for f in dataclasses.fields(section) if f.name in values})
        config = cls(**{name: build(section) for name, section in CORE_SECTIONS.items()},
                     extensions={name: build(section) for name, section in extensions.items()})
        config.data.declared_tasks()   # a saved run's own tasks, checked again (a saved file may be hand-edited)
        return config
