"""A thresholded pair head's data-dependent start (docs/heads.md), run once before the first stage that trains it."""
from __future__ import annotations

import torch

from training.data.batching import to_device


CALIBRATION_PAIRS = 512   # training pairs a thresholded head sees before its first stage


@torch.no_grad()
def calibrate_heads(run, tasks) -> None:
    """A data-dependent start for the heads that cut a similarity with a threshold (the cosine/τ paraphrase head's
    b in (cos(u, v) − b)/τ): ``PairHead.calibrate`` on each of ``tasks`` whose head has one; logs each start.
    Why: a pretrained sentence encoder gives most pairs a cosine well above 0 (QQP with the embedded MiniLM and
    mean pooling: about 0.56 for non-duplicates, 0.87 for duplicates), so a threshold that starts at 0 calls every
    pair a paraphrase and b cannot move far enough in time (docs/heads.md). The head sees the cosines of the first
    ``CALIBRATION_PAIRS`` training pairs through its own tower, the encoder in eval mode: no dropout, no random
    numbers drawn, so every other part of the run is as without it."""
    model, was_training = run.model, run.model.training
    model.eval()
    try:
        for name in tasks:
            head = model.heads[name]
            if not getattr(head, "thresholded", False):
                continue
            similarities, labels = [], []
            for batch in run.loader(run.splits[name]["train"][:CALIBRATION_PAIRS], run.config.data.batch_size, False):
                u, v = (model.embed(to_device(encoding, run.device), head_name=name).float()
                        for encoding in batch["inputs"])
                similarities.append(head.similarity(u, v).float().cpu())
                labels.append(batch["labels"])
            similarities, labels = torch.cat(similarities), torch.cat(labels)
            cut = head.calibrate(similarities, labels)
            if cut is not None:
                positive = head.positives(labels)
                right = ((similarities > cut) == positive).float().mean().item()
                run.log(f"{name}: the cosine head's threshold starts at b = {cut:.3f} (right on {right:.1%} of the "
                        f"first {len(labels)} training pairs; b = 0 would be right on "
                        f"{positive.float().mean().item():.1%})")
    finally:
        model.train(was_training)
