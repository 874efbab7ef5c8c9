"""BertConfig: the architecture hyper-parameters, read from a HuggingFace ``config.json``."""
from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path


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
    pad_token_id: int = 0
    model_type: str = "bert"   # "distilbert": read from (and saved as) a DistilBERT checkpoint

    def __post_init__(self):
        if self.hidden_size % self.num_attention_heads != 0:
            raise ValueError(
                f"hidden_size {self.hidden_size} is not a multiple of "
                f"num_attention_heads {self.num_attention_heads}"
            )
        if self.hidden_act not in ("gelu", "gelu_new", "relu"):
            raise ValueError(f"unsupported hidden_act {self.hidden_act!r} (gelu, gelu_new or relu)")

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
        """A HuggingFace ``config.json``'s values: a BERT's, or a DistilBERT's."""
        return cls.from_distilbert(values) if values.get("model_type") == "distilbert" else cls.from_dict(values)

    @classmethod
    def from_distilbert(cls, values: dict) -> "BertConfig":
        """A DistilBERT ``config.json`` (Sanh et al. 2019: a BERT without token types and pooler)."""
        ours = {bert: values[distil] for bert, distil in DISTILBERT_CONFIG.items() if distil in values}
        return cls.from_dict({**values, **ours, "type_vocab_size": 1, "model_type": "distilbert"})


# BertConfig field -> DistilBERT config.json key, where they differ
DISTILBERT_CONFIG = {"hidden_size": "dim", "num_hidden_layers": "n_layers", "num_attention_heads": "n_heads",
                     "intermediate_size": "hidden_dim", "hidden_act": "activation",
                     "hidden_dropout_prob": "dropout", "attention_probs_dropout_prob": "attention_dropout"}
