"""Where tensors live: the device a run trains on, and moving a batch's encodings there."""
from __future__ import annotations

import torch


def pick_device(choice: str) -> torch.device:
    """``auto``: CUDA when available, else CPU; ``cuda`` (or ``cuda:N``) without that GPU is a one-line error."""
    if choice.startswith("cuda"):
        if not torch.cuda.is_available():
            raise ValueError(f"--device {choice}: no CUDA device is available (use --device cpu or auto)")
        index = torch.device(choice).index
        if index is not None and index >= torch.cuda.device_count():
            raise ValueError(f"--device {choice}: this machine has {torch.cuda.device_count()} CUDA device(s)")
    if choice == "auto":
        choice = "cuda" if torch.cuda.is_available() else "cpu"
    return torch.device(choice)


def to_device(encoding: dict, device: torch.device) -> dict:
    return {key: value.to(device, non_blocking=True) for key, value in encoding.items()}
