"""Data-parallel training across processes with PyTorch's own engine (``torch.distributed``), under ``torchrun
--nproc_per_node=2 run_multitask.py ...``; without torchrun (no ``WORLD_SIZE``) nothing happens. ``gloo`` on CPU,
``nccl`` on CUDA; ``DistributedDataParallel`` with ``find_unused_parameters`` (a round-robin step uses one task head);
``--batch_size`` stays the global batch, each process training on its slice, its loss weighted by its share of it (an
uneven last batch: the same step as one process, ``batching.Shard``). Every process evaluates the whole dev set,
so they agree on the best epoch; only process 0 logs and writes. More: docs/long-runs.md.
"""
from __future__ import annotations

import contextlib
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel


@dataclass(frozen=True)
class Distributed:
    rank: int = 0
    world_size: int = 1

    @property
    def enabled(self) -> bool:
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def shard(self) -> tuple[int, int] | None:
        """``make_loader``'s ``shard`` argument for training loaders."""
        return (self.rank, self.world_size) if self.enabled else None


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


def init_distributed(device: torch.device) -> tuple[Distributed, torch.device]:
    """Join the process group torchrun set up (if any); returns this process's place and device."""
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    if world_size <= 1:
        return Distributed(), device
    rank, local_rank = int(os.environ["RANK"]), int(os.environ.get("LOCAL_RANK", "0"))
    if device.type == "cuda":
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
    if not dist.is_initialized():
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo", rank=rank, world_size=world_size)
    return Distributed(rank, world_size), device


def wrap_model(model: nn.Module, place: Distributed, device: torch.device) -> nn.Module:
    """The module to call for training forwards: DDP around ``model``, or ``model`` itself."""
    if not place.enabled:
        return model
    return DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None,
                                   find_unused_parameters=True)


def average_gradients(parameters, place: Distributed) -> None:
    """All-reduce the mean gradient of parameters outside the DDP model (learned loss weights), under torchrun."""
    for p in parameters:
        if p.grad is not None:
            dist.all_reduce(p.grad, op=dist.ReduceOp.SUM)
            p.grad.div_(place.world_size)


def whole_batch(place: Distributed, device: torch.device):
    """The stage watch's ``combine`` (``watching.RecordingWatch``; one all-reduce a step): each process's step losses, its means weighted by its
    share of the global batch (``batching.Shard``), and its examples, summed over the processes: the global batch's
    mean losses (the sum over ``world_size``, as DDP averages gradients) and its examples, what one process logs."""
    def combine(losses: dict[str, float], examples: int) -> tuple[dict[str, float], int]:
        values = torch.tensor([*losses.values(), float(examples)], dtype=torch.float64, device=device)
        dist.all_reduce(values, op=dist.ReduceOp.SUM)
        *sums, total = values.tolist()
        return {name: value / place.world_size for name, value in zip(losses, sums)}, round(total)
    return combine


# metrics.json's error (and process 0's line) where another process of the run ended first: the launcher then writes
# which one and how into metrics.json (training/tools/launch.py)
LOST_PEER = "another process of the run ended first"
# what a collective says when another process of the run is gone (gloo's words; NCCL's errors are DistErrors)
PEER_LOST_WORDS = ("Connection closed by peer", "Connection reset by peer", "Broken pipe", "Connection refused")


def peer_lost(err: BaseException) -> bool:
    """Whether ``err`` is a collective's failure because another process of the run ended (killed, crashed): that
    process is the cause, and the launcher names it (training/tools/launch.py); this one's traceback says nothing."""
    # a run of several processes (torchrun's WORLD_SIZE): asked after the run has ended its process group too
    if int(os.environ.get("WORLD_SIZE", "1")) < 2 or not dist.is_available() or not isinstance(err, RuntimeError):
        return False
    return isinstance(err, (dist.DistError, dist.DistBackendError, dist.DistNetworkError)) or any(
        words in str(err) for words in PEER_LOST_WORDS)


def record_run_dir(run_dir, place: Distributed) -> None:
    """Process 0 of a run under the launcher writes where its run is into its error file (torchelastic's
    ``TORCHELASTIC_ERROR_FILE``), for the launcher to name a process that died in the run's metrics.json. An empty
    message: torchelastic's own for a process that ends without another (a signal)."""
    error_file = os.environ.get("TORCHELASTIC_ERROR_FILE")
    if place.enabled and place.is_main and error_file:
        with contextlib.suppress(OSError):
            Path(error_file).write_text(json.dumps({"message": "", "timestamp": int(time.time()),
                                                    "run_dir": str(Path(run_dir).resolve())}))


def check_batch_size(batch_size: int, place: Distributed, flag: str = "--batch_size") -> None:
    if place.enabled and batch_size % place.world_size:
        raise ValueError(f"{flag} {batch_size} is the global batch: it must be divisible by the "
                         f"{place.world_size} processes")


def shutdown() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()
