"""A data-dependent start for the heads that cut a similarity with a threshold: the cosine/τ
paraphrase head's b in (cos(u, v) − b)/τ.

Why: a pretrained sentence encoder gives most sentence pairs a cosine well above 0 (for QQP with the
embedded MiniLM and mean pooling about 0.56 for non-duplicates and 0.87 for duplicates), so a threshold
that starts at 0 calls every pair a paraphrase and b cannot move far enough in time
(``heads.PairHead.calibrate``; the runs: docs/heads.md). Before a stage first trains such a head, the
head sees the cosines of the first ``CALIBRATION_PAIRS`` training pairs, through its own tower, with
the encoder in eval mode: no dropout, no random numbers drawn, so every other part of the run is as
without it.
"""
from __future__ import annotations

import torch

from .device import to_device

CALIBRATION_PAIRS = 512


@torch.no_grad()
def calibrate_heads(run, tasks) -> None:
    """``PairHead.calibrate`` on each of ``tasks`` whose head has a threshold to start; logs each start."""
    model = run.model
    for name in tasks:
        head = model.heads[name]
        if not getattr(head, "thresholded", False):
            continue
        examples = run.splits[name]["train"][:CALIBRATION_PAIRS]
        similarities, labels = pair_similarities(run, name, examples)
        cut = head.calibrate(similarities, labels)
        if cut is not None:
            positive = head.positives(labels)
            right = ((similarities > cut) == positive).float().mean().item()
            run.log(f"{name}: the cosine head's threshold starts at b = {cut:.3f} (right on {right:.1%} of the "
                    f"first {len(labels)} training pairs; b = 0 would be right on {positive.float().mean().item():.1%})")


def pair_similarities(run, name: str, examples) -> tuple[torch.Tensor, torch.Tensor]:
    """The head's ``similarity`` of each pair in ``examples`` (float32, on the CPU) and their labels."""
    model, head = run.model, run.model.heads[name]
    was_training = model.training
    model.eval()
    similarities, labels = [], []
    try:
        for batch in run.loader(examples, run.config.data.batch_size, False):
            u, v = (model.embed(to_device(encoding, run.device), head_name=name).float()
                    for encoding in batch["inputs"])
            similarities.append(head.similarity(u, v).float().cpu())
            labels.append(batch["labels"])
    finally:
        model.train(was_training)
    return torch.cat(similarities), torch.cat(labels)
