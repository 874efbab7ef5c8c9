"""Saving and loading the multi-task model: ``model.safetensors`` (every parameter, encoder and
heads) beside ``config.json`` (the encoder's BertConfig and the run configuration)."""
from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from minbert import BertConfig, BertTokenizer
from minbert.atomic import atomic_path, write_text_atomic


def save_checkpoint(directory: Path, state: dict[str, torch.Tensor], bert_config: BertConfig, run_config: dict,
                    tokenizer: BertTokenizer | None = None) -> None:
    """Write the tokenizer's files (vocab.txt, tokenizer_config.json), the weights, then the config,
    each atomically (a reader never sees a half-written file)."""
    directory.mkdir(parents=True, exist_ok=True)
    if tokenizer is not None and not (directory / "vocab.txt").is_file():
        write_text_atomic(directory / "vocab.txt", tokenizer.vocab_file.read_text(encoding="utf-8"))
        write_text_atomic(directory / "tokenizer_config.json",
                          json.dumps({"do_lower_case": tokenizer.lowercase, "tokenizer_class": "BertTokenizer"}) + "\n")
    with atomic_path(directory / "model.safetensors") as tmp:
        save_file({k: v.contiguous().cpu() for k, v in state.items()}, str(tmp), metadata={"format": "pt"})
    config = {"bert": bert_config.to_dict(), "run": run_config}
    write_text_atomic(directory / "config.json", json.dumps(config, indent=2, default=str) + "\n")


def load_checkpoint(directory: Path) -> tuple[dict[str, torch.Tensor], dict]:
    """Return ``(state_dict, config)`` as written by ``save_checkpoint``."""
    config = json.loads((directory / "config.json").read_text(encoding="utf-8"))
    return load_file(str(directory / "model.safetensors")), config
