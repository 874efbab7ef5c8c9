"""Shared test fixtures."""
import json
from pathlib import Path

import pytest
from safetensors import safe_open

REFERENCE = Path(__file__).resolve().parent / "fixtures" / "reference_minilm.safetensors"


@pytest.fixture(scope="session")
def ref():
    """HuggingFace transformers' outputs on the embedded model (tests/fixtures/make_reference.py):
    ``(tensors, metadata)``."""
    with safe_open(str(REFERENCE), framework="pt") as f:
        tensors = {k: f.get_tensor(k) for k in f.keys()}
        meta = {k: json.loads(v) for k, v in f.metadata().items()}
    return tensors, meta
