"""The random generators a run draws from: Python's, NumPy's and torch's (CPU and CUDA). ``seed_everything``
starts them from ``--seed``; ``rng_state`` and ``set_rng_state`` save and restore them as plain tensors and
lists, so that a checkpoint holds them and a stage can evaluate mid-way without changing what it draws next.
"""
from __future__ import annotations

import random

import numpy as np
import torch


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def rng_state() -> dict:
    """Python, NumPy and torch (CPU and CUDA) generator states as plain tensors and lists."""
    version, mt, gauss = random.getstate()
    name, keys, pos, has_gauss, cached = np.random.get_state()
    numpy = [torch.from_numpy(keys.astype(np.int64)), pos, has_gauss, cached]
    state = {"python": [version, list(mt), gauss], "numpy": numpy, "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict) -> None:
    version, mt, gauss = state["python"]
    random.setstate((version, tuple(mt), gauss))
    keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state(("MT19937", keys.numpy().astype(np.uint32), pos, has_gauss, cached))
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
