"""Mixed precision (``--amp``): autocast for forward passes, a gradient scaler for fp16; parameters and
optimizer states stay fp32 in every mode.

- ``off``: fp32 everywhere (the default; what the reference-output tests check).
- ``bf16``: ``torch.autocast`` with bfloat16 — matmuls and attention in bf16, reductions, softmax and layer norm
  kept in fp32 by autocast's own op lists. bf16 has fp32's exponent range, so no loss scaling is needed. On CUDA
  and on CPUs with bf16 instructions (here: AVX512-BF16).
- ``fp16``: CUDA only. float16 gradients underflow, so the loss is multiplied by a scale before ``backward`` and
  the gradients divided by it before the optimizer step; a step whose gradients overflowed is skipped and the scale
  lowered (``torch.amp.GradScaler``, Micikevicius et al. 2018, "Mixed Precision Training", §3.2). The scaler's
  state is saved with training checkpoints.
"""
from __future__ import annotations

import contextlib

import torch

AMP_MODES = ("off", "bf16", "fp16")


class Precision:
    def __init__(self, mode: str, device: torch.device):
        if mode not in AMP_MODES:
            raise ValueError(f"unknown --amp {mode!r}; choose one of {', '.join(AMP_MODES)}")
        if mode == "fp16" and device.type != "cuda":
            raise ValueError("--amp fp16 needs a CUDA device (on CPU use --amp bf16)")
        if mode == "bf16" and device.type == "cuda" and not torch.cuda.is_bf16_supported():
            raise ValueError("--amp bf16: this GPU does not support bfloat16 (use --amp fp16)")
        self.mode, self.device = mode, device
        self.scaler = torch.amp.GradScaler(device.type) if mode == "fp16" else None

    def autocast(self):
        if self.mode == "off":
            return contextlib.nullcontext()
        dtype = torch.bfloat16 if self.mode == "bf16" else torch.float16
        return torch.autocast(self.device.type, dtype=dtype)

    def backward(self, loss: torch.Tensor) -> None:
        (self.scaler.scale(loss) if self.scaler else loss).backward()

    def unscale(self, optimizer: torch.optim.Optimizer) -> None:
        """Gradients back to their true size before they are read (e.g. clipped); fp16 only."""
        if self.scaler is not None:
            self.scaler.unscale_(optimizer)

    def step(self, optimizer: torch.optim.Optimizer) -> None:
        if self.scaler is None:
            optimizer.step()
            return
        self.scaler.step(optimizer)  # unscales; skips the step if a gradient is inf/nan
        self.scaler.update()
