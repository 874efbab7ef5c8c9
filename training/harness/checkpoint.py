"""A run's ``checkpoint/``: a standard model folder that ours (``load_run``), HuggingFace ``transformers``
and ``sentence_transformers`` load, plus what only we read (``heads.safetensors``: the task heads and, with
``--private_layers``, the other tasks' towers; ``run_config.json``); docs/outputs.md, '``checkpoint/`` in other
libraries'. The older layout (one ``model.safetensors`` with ``bert.*`` and ``heads.*``, a ``config.json`` of
``{"bert": ..., "run": ...}``) is still read.
"""
from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from minbert import BertConfig, BertTokenizer, WeightsError
from minbert.atomic import atomic_path, write_text_atomic
from minbert.errors import first_line
from minbert.weights import from_hf_names, to_hf_names

from .outputs import write_json

ENCODER, HEADS, RUN_CONFIG = "model.safetensors", "heads.safetensors", "run_config.json"
# With --private_layers, the task whose tower is the encoder itself (``heads.MultitaskBert``): the exported
# encoder, what transformers, sentence-transformers and ``encode`` read, is then the sentence-similarity model.
EXPORTED_TOWER = "sts"
# our pooling mode -> sentence-transformers' Pooling flag
SENTENCE_TRANSFORMERS_POOLING = {"mean": "pooling_mode_mean_tokens", "cls": "pooling_mode_cls_token",
                                 "max": "pooling_mode_max_tokens"}


def save_checkpoint(directory: Path, state: dict[str, torch.Tensor], bert_config: BertConfig, run_config: dict,
                    tokenizer: BertTokenizer | None = None) -> None:
    """Write the folder from the whole model's ``state`` (``bert.*``, ``heads.*``), each file atomically."""
    directory.mkdir(parents=True, exist_ok=True)
    encoder = {k.removeprefix("bert."): v.contiguous().cpu() for k, v in state.items() if k.startswith("bert.")}
    _save(to_hf_names(encoder, bert_config.model_type), directory / ENCODER)
    _save({k: v.contiguous().cpu() for k, v in state.items() if not k.startswith("bert.")}, directory / HEADS)
    write_json(directory / "config.json", bert_config.to_dict())
    write_json(directory / RUN_CONFIG, run_config)
    if tokenizer is not None:
        write_text_atomic(directory / "vocab.txt", tokenizer.vocab_file.read_text(encoding="utf-8"))
        write_json(directory / "tokenizer_config.json",
                    {"do_lower_case": tokenizer.lowercase, "tokenizer_class": "BertTokenizer",
                     # without it transformers' tokenizer does not truncate, and a longer input breaks the model
                     "model_max_length": bert_config.max_position_embeddings})
    pooling = SENTENCE_TRANSFORMERS_POOLING.get(run_config.get("model", {}).get("pooling"))
    if pooling is not None:
        write_json(directory / "modules.json", [
            {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
            {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}])
        write_json(directory / "sentence_bert_config.json",
                    {"max_seq_length": run_config.get("data", {}).get("max_length", 128), "do_lower_case": False})
        write_json(directory / "1_Pooling" / "config.json",
                    {"word_embedding_dimension": bert_config.hidden_size,
                     **{flag: flag == pooling for flag in SENTENCE_TRANSFORMERS_POOLING.values()}})


def load_checkpoint(directory: Path) -> tuple[dict[str, torch.Tensor], dict]:
    """``(state, config)``: the whole model's state under our names (``bert.*``, ``heads.*``) and
    ``{"bert": BertConfig dict, "run": RunConfig dict}``, from either layout. A file that is missing,
    truncated or not what it should be is a one-line ``WeightsError`` naming that file."""
    config = read_json(directory / "config.json")
    if not (directory / RUN_CONFIG).is_file():  # the older layout
        return read_tensors(directory / ENCODER), config
    run = read_json(directory / RUN_CONFIG)
    if not (directory / HEADS).is_file():
        raise WeightsError(f"{directory / HEADS}: missing; a run's checkpoint always has one (empty when the run "
                           "trained no head): copy the whole checkpoint/ folder")
    return model_state(directory / ENCODER, directory / HEADS, read=read_tensors), {"bert": config, "run": run}


def read_json(path: Path) -> dict:
    """A checkpoint's JSON file; unreadable or not JSON: a ``WeightsError`` naming it."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise WeightsError(f"cannot read checkpoint file {path}: {first_line(err)}") from None


def read_tensors(path: Path) -> dict[str, torch.Tensor]:
    """A checkpoint's safetensors file; unreadable, truncated or corrupt: a ``WeightsError`` naming it."""
    try:
        return load_file(str(path))
    except (SafetensorError, OSError) as err:
        raise WeightsError(f"cannot read checkpoint file {path}: {first_line(err)} (truncated or corrupt file?)") \
            from None


def saved_run_config(directory: Path) -> dict | None:
    """The run configuration a checkpoint folder holds (either layout), or None when ``directory``
    is no run's checkpoint (an HF-format model folder, or anything else)."""
    try:
        if (directory / RUN_CONFIG).is_file():
            return json.loads((directory / RUN_CONFIG).read_text(encoding="utf-8"))
        saved = json.loads((directory / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return saved.get("run") if isinstance(saved, dict) and "bert" in saved else None


def model_state(encoder_file: Path, heads_file: Path,
                read=lambda path: load_file(str(path))) -> dict[str, torch.Tensor]:
    """The whole model's state from an encoder file (HuggingFace's BERT or DistilBERT names) and a heads
    file (absent: no heads), each read by ``read``."""
    encoder = read(encoder_file)
    model_type = "distilbert" if any(k.startswith("transformer.layer.") for k in encoder) else "bert"
    state = {f"bert.{k}": v for k, v in from_hf_names(encoder, model_type).items()}
    return state | (read(heads_file) if heads_file.is_file() else {})


def _save(tensors: dict[str, torch.Tensor], path: Path) -> None:
    with atomic_path(path) as tmp:
        save_file(tensors, str(tmp), metadata={"format": "pt"})
