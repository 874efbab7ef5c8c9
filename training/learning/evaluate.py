"""One evaluation loop for every task: predictions, and the metric where labels exist."""
from __future__ import annotations

import contextlib
from dataclasses import dataclass

import numpy as np
import torch
from tqdm.auto import tqdm

from training.data.batching import to_device
from .tasks import Task, loss_of


@dataclass
class TaskPredictions:
    ids: list[str]
    predictions: np.ndarray
    labels: np.ndarray | None
    loss: float | None = None   # the task's training loss on these examples (the dev loss), where labelled

    def score(self, task: Task) -> float | None:
        return None if self.labels is None else task.metric(self.predictions, self.labels)

    def to_dict(self) -> dict:
        """Plain lists (for a checkpoint's state.json); float32 values round-trip exactly."""
        return {"ids": list(self.ids), "predictions": self.predictions.tolist(),
                "labels": None if self.labels is None else self.labels.tolist()}

    @classmethod
    def from_dict(cls, data: dict) -> "TaskPredictions":
        return cls(ids=data["ids"], predictions=np.asarray(data["predictions"], dtype=np.float32),
                   labels=None if data["labels"] is None else np.asarray(data["labels"], dtype=np.float32))


@torch.no_grad()
def predict(model, task: Task, loader, device: torch.device, desc: str | None = None,
            progress_bar: bool = True, precision=None) -> TaskPredictions:
    """Run ``model`` over ``loader`` (batches of ``data.batching``) in eval mode and collect
    ``task.predict`` outputs by id; for a DataLoader of ``make_loader``, in the order of its
    examples (a length-bucketed one batches them in another order)."""
    was_training = model.training
    model.eval()
    ids, predictions, labels, loss_sum = [], [], [], 0.0
    loss = loss_of(model, task)
    for batch in tqdm(loader, desc=desc or f"predict {task.name}", leave=False, dynamic_ncols=True,
                      disable=not progress_bar):
        inputs = [to_device(encoding, device) for encoding in batch["inputs"]]
        with precision.autocast() if precision is not None else contextlib.nullcontext():
            output = model(task.name, inputs)
        predictions.append(task.predict(output).float().cpu().numpy())
        ids.extend(batch["ids"])
        if batch["labels"] is not None:
            labels.append(batch["labels"].float().numpy())
            loss_sum += loss(output.float(), batch["labels"].to(device)).item() * len(batch["ids"])
    model.train(was_training)
    examples = getattr(getattr(loader, "dataset", None), "examples", None)
    position = {example.id: i for i, example in enumerate(examples or [])}
    order = np.argsort([position.get(i, len(position)) for i in ids], kind="stable")
    return TaskPredictions(
        ids=[ids[i] for i in order],
        predictions=np.concatenate(predictions)[order] if predictions else np.zeros(0),
        labels=np.concatenate(labels)[order] if labels else None,
        loss=loss_sum / len(ids) if labels and ids else None,
    )


@dataclass(frozen=True)
class Evaluation:
    """What one dev evaluation measured."""
    dev: dict[str, TaskPredictions]   # each task's predictions (with its dev loss)
    metrics: dict[str, float | None]  # each task's metric
    score: float                      # the overall score (``tasks.overall_score``)
    seconds: float
    loss_weights: dict[str, float] | None = None   # a learned loss weighting's weights when dev was scored
