"""Shared test fixtures."""
import os

if os.environ.get("PYTEST_XDIST_WORKER"):   # `-n 2`: one thread a worker (and its subprocesses), so that two
    os.environ.setdefault("OMP_NUM_THREADS", "1")   # workers share 2 cores instead of fighting over them

import json
import shutil
import signal
from pathlib import Path

import pytest
import torch
from safetensors import safe_open

from minbert import BertConfig, BertModel, default_model_dir

REFERENCE = Path(__file__).resolve().parent / "fixtures" / "reference_minilm.safetensors"

# A suite started in the background (`nohup ... &`, a non-interactive shell's job) inherits SIGINT ignored;
# Python then never raises KeyboardInterrupt, nor do the runs the tests start. The Ctrl-C tests need it.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture(scope="session")
def ref():
    """HuggingFace transformers' outputs on the embedded model (tests/fixtures/make_reference.py):
    ``(tensors, metadata)``."""
    with safe_open(str(REFERENCE), framework="pt") as f:
        tensors = {k: f.get_tensor(k) for k in f.keys()}
        meta = {k: json.loads(v) for k, v in f.metadata().items()}
    return tensors, meta


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> Path:
    """A 2-layer, 16-wide random BERT saved in HF format with the embedded WordPiece vocab."""
    directory = tmp_path_factory.mktemp("tiny-bert")
    torch.manual_seed(0)
    config = BertConfig(vocab_size=30522, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=32, max_position_embeddings=64)
    BertModel(config).save_pretrained(directory)
    shutil.copy(default_model_dir() / "vocab.txt", directory / "vocab.txt")
    return directory
