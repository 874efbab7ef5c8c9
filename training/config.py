"""Run configuration: one dataclass per concern, each field one command-line flag.

``run_multitask.py`` builds its argument parser from these fields (name, default, ``help``,
``choices`` in the field metadata), so every flag has exactly one home.
"""
from __future__ import annotations

from dataclasses import dataclass, field


def flag(default, help: str, choices=None, type=None):
    """A dataclass field that is also a command-line flag."""
    meta = {"help": help}
    if choices is not None:
        meta["choices"] = choices
    if type is not None:
        meta["type"] = type
    return field(default=default, metadata=meta)


@dataclass
class ModelConfig:
    model: str | None = flag(None, "local HF-format BERT directory (config.json, vocab.txt, model.safetensors); "
                                   "default: the embedded all-MiniLM-L6-v2", type=str)
    pooling: str = flag("mean", "sentence vector from the encoder",
                        choices=["cls", "pooler", "mean", "max", "first_last", "second_last", "last4_mean", "last4_concat"])
    para_head: str = flag("concat", "paraphrase (QQP) head: linear on [u; v; |u-v|] or (cos(u, v) - b)/temp, b learned",
                          choices=["concat", "cosine"])
    sts_head: str = flag("cosine", "similarity (STS) head: 5*sigmoid(linear[u; v; |u-v|]) or 5*cos(u, v)",
                         choices=["concat", "cosine"])
    temp: float = flag(0.05, "temperature of the cosine paraphrase head")
    hidden_dropout_prob: float = flag(0.1, "dropout in the encoder and before the heads")
    option: str = flag("finetune", "finetune: update BERT and heads; pretrain: BERT frozen, heads only",
                       choices=["finetune", "pretrain"])


@dataclass
class DataConfig:
    data_dir: str | None = flag(None, "folder with the CS224N CSVs (default: $MINBERT_DATA, then ./data)", type=str)
    max_length: int = flag(128, "truncate each sentence to this many word pieces, [CLS]/[SEP] included")
    batch_size: int = flag(32, "examples (sentences or pairs) per batch, per task")
    strict: bool = flag(False, "stop at the first bad data row instead of skipping and reporting it")


@dataclass
class TrainConfig:
    epochs: int = flag(3, "multi-task epochs (the default run takes about 30 minutes on 2 CPU cores)")
    lr: float = flag(5e-5, "learning rate of the encoder")
    head_lr: float = flag(1e-3, "learning rate of the task heads (higher than the encoder's: they start from scratch)")
    weight_decay: float = flag(0.01, "decoupled weight decay of AdamW")
    seed: int = flag(11711, "seed for Python, NumPy and torch (a CPU run is repeatable)")
    rr: str = flag("min", "round-robin epoch length: 'min' = batches of the smallest task, "
                          "'exhaust' = until the largest task is used up, cycling the others",
                   choices=["min", "exhaust"])
    max_steps_per_epoch: int | None = flag(None, "cap on round-robin steps per epoch (one step = one batch of each task)",
                                           type=int)
    device: str = flag("auto", "where to train", choices=["auto", "cpu", "cuda"])


@dataclass
class OutputConfig:
    out_dir: str = flag("predictions", "parent folder of run folders")
    run_name: str | None = flag(None, "run folder name (default: built from the main flags)", type=str)


@dataclass
class RunConfig:
    model: ModelConfig
    data: DataConfig
    train: TrainConfig
    output: OutputConfig

    def validate(self) -> None:
        """Reject nonsense values with one line naming the flag."""
        checks = [
            (self.train.epochs >= 1, "--epochs must be at least 1"),
            (self.train.lr > 0, "--lr must be positive"),
            (self.train.head_lr > 0, "--head_lr must be positive"),
            (self.train.weight_decay >= 0, "--weight_decay must not be negative"),
            (self.train.max_steps_per_epoch is None or self.train.max_steps_per_epoch >= 1,
             "--max_steps_per_epoch must be at least 1"),
            (self.data.batch_size >= 1, "--batch_size must be at least 1"),
            (self.data.max_length >= 3, "--max_length must be at least 3"),
            (0 <= self.model.hidden_dropout_prob < 1, "--hidden_dropout_prob must be in [0, 1)"),
            (self.model.temp > 0, "--temp must be positive"),
        ]
        for ok, message in checks:
            if not ok:
                raise ValueError(message)

