"""BertConfig: the architecture hyper-parameters, read from a HuggingFace ``config.json``."""
from __future__ import annotations

import dataclasses
import json
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable


@dataclass
class BertConfig:
    """Sizes and dropout rates of a BERT encoder (Devlin et al. 2019, §3).

    Field names match HuggingFace's ``config.json`` so a checkpoint's config reads as-is;
    keys we do not use (``architectures``, ``transformers_version``, ...) are ignored.
    """

    vocab_size: int = 30522
    hidden_size: int = 768
    num_hidden_layers: int = 12
    num_attention_heads: int = 12
    intermediate_size: int = 3072
    hidden_act: str = "gelu"
    hidden_dropout_prob: float = 0.1
    attention_probs_dropout_prob: float = 0.1
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    layer_norm_eps: float = 1e-12
    pad_token_id: int | None = 0  # null: no padding row
    model_type: str = "bert"   # "distilbert": read from (and saved as) a DistilBERT checkpoint

    def __post_init__(self):
        self.validate()

    def validate(self) -> None:
        """Every field's type and range (``FIELD_RULES``), then the sizes that must agree, so an
        impossible ``config.json`` is one line naming the field, not a torch error deep in the model.
        Fields are named as this config's ``config.json`` spells them (DistilBERT's ``dim``, ...)."""
        for f in dataclasses.fields(self):
            what, ok = FIELD_RULES[f.name]
            value = getattr(self, f.name)
            if not ok(value):
                raise ValueError(f"{self.json_key(f.name)} must be {what}, got {value!r}")
        for name, bound in MAX_SIZES.items():
            if getattr(self, name) > bound:
                raise ValueError(f"{self.json_key(name)} {getattr(self, name)} is above {bound:,}, the largest this "
                                 f"model builds (its weights alone would take about {gib(self.weight_bytes())})")
        if (memory := machine_memory()) and self.weight_bytes() > memory:
            raise ValueError(f"the weights alone would take about {gib(self.weight_bytes())}, more than this "
                             f"machine's {gib(memory)} of memory")
        if self.hidden_size % self.num_attention_heads != 0:
            raise ValueError(f"{self.json_key('hidden_size')} {self.hidden_size} is not a multiple of "
                             f"{self.json_key('num_attention_heads')} {self.num_attention_heads}")
        if self.pad_token_id is not None and self.pad_token_id >= self.vocab_size:
            raise ValueError(f"pad_token_id must be below vocab_size {self.vocab_size}, got {self.pad_token_id}")

    def weight_bytes(self) -> int:
        """The float32 bytes of this encoder's weights, from its sizes alone (nothing allocated): embeddings,
        L layers of attention (4 H×H) and feed-forward (2 H×I) with their biases and layer norms, and the pooler."""
        h, i = self.hidden_size, self.intermediate_size
        embeddings = (self.vocab_size + self.max_position_embeddings + self.type_vocab_size) * h + 2 * h
        layer = 4 * (h * h + h) + 2 * h * i + i + h + 4 * h
        return 4 * (embeddings + self.num_hidden_layers * layer + h * h + h)

    def json_key(self, name: str) -> str:
        """The ``config.json`` key of field ``name``: DistilBERT's own where it differs."""
        return DISTILBERT_CONFIG.get(name, name) if self.model_type == "distilbert" else name

    @classmethod
    def from_dict(cls, values: dict) -> "BertConfig":
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{key: value for key, value in values.items() if key in names})

    @classmethod
    def from_json(cls, path: str | Path) -> "BertConfig":
        path = Path(path)
        try:
            values = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise FileNotFoundError(f"model config not found: {path}") from None
        except (json.JSONDecodeError, UnicodeDecodeError) as err:
            raise ValueError(f"{path}: not valid JSON ({err})") from None
        if not isinstance(values, dict):
            raise ValueError(f"{path}: expected a JSON object")
        try:
            return cls.from_hf(values)
        except (TypeError, ValueError) as err:
            raise ValueError(f"{path}: {err}") from None

    def to_dict(self) -> dict:
        """The HuggingFace ``config.json`` of this model: a BERT's, or a DistilBERT's names."""
        if self.model_type == "distilbert":
            values = {DISTILBERT_CONFIG.get(k, k): v for k, v in dataclasses.asdict(self).items()
                      if k not in ("type_vocab_size", "layer_norm_eps")}
            return dict(values, architectures=["DistilBertModel"])
        return dict(dataclasses.asdict(self), architectures=["BertModel"])

    @classmethod
    def from_hf(cls, values: dict) -> "BertConfig":
        """A HuggingFace ``config.json``'s values: a BERT's, or a DistilBERT's (Sanh et al. 2019: a BERT
        without token types and pooler)."""
        if values.get("model_type") != "distilbert":
            return cls.from_dict(values)
        ours = {bert: values[distil] for bert, distil in DISTILBERT_CONFIG.items() if distil in values}
        return cls.from_dict({**values, **ours, "type_vocab_size": 1, "model_type": "distilbert"})


# BertConfig field -> DistilBERT config.json key, where they differ
DISTILBERT_CONFIG = {"hidden_size": "dim", "num_hidden_layers": "n_layers", "num_attention_heads": "n_heads",
                     "intermediate_size": "hidden_dim", "hidden_act": "activation",
                     "hidden_dropout_prob": "dropout", "attention_probs_dropout_prob": "attention_dropout"}


# the largest size of each kind a config.json may ask for: checked before anything is allocated (10**6 layers
# allocated for minutes; hidden_size 10**7 was an allocator traceback). Far above every published BERT.
MAX_SIZES = {"vocab_size": 1_000_000, "hidden_size": 16_384, "num_hidden_layers": 256, "num_attention_heads": 256,
             "intermediate_size": 65_536, "max_position_embeddings": 65_536, "type_vocab_size": 1_024}


def machine_memory() -> int | None:
    """This machine's physical memory in bytes, where the system says (Linux, macOS); None elsewhere."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, OSError, ValueError):
        return None


def gib(n_bytes: int) -> str:
    return f"{n_bytes / 2 ** 30:,.1f} GiB"


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)  # JSON true is not a size


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


POSITIVE_INT = ("a positive integer", lambda v: _is_int(v) and v > 0)
PROBABILITY = ("a number in [0, 1)", lambda v: _is_number(v) and 0 <= v < 1)
HIDDEN_ACTS = ("gelu", "gelu_new", "relu")

# BertConfig field -> (what it must be, test); ``validate`` wants a row for every field
FIELD_RULES: dict[str, tuple[str, Callable[[object], bool]]] = {
    **dict.fromkeys(("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
                     "max_position_embeddings", "type_vocab_size"), POSITIVE_INT),
    **dict.fromkeys(("hidden_dropout_prob", "attention_probs_dropout_prob"), PROBABILITY),
    "hidden_act": (f"one of {', '.join(HIDDEN_ACTS)}", lambda v: isinstance(v, str) and v in HIDDEN_ACTS),
    "layer_norm_eps": ("a positive finite number", lambda v: _is_number(v) and v > 0),
    "pad_token_id": ("a non-negative integer or null", lambda v: v is None or _is_int(v) and v >= 0),
    "model_type": ("a string", lambda v: isinstance(v, str)),
}
