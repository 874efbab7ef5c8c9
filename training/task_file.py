"""A user's own tasks, declared in a small JSON (or YAML) file and trained with no code change:
``--task_file my_tasks.json --tasks sst,mytask`` (docs/own-tasks.md).

A declaration becomes one ``Task`` row, registered in ``training.tasks.TASKS`` beside the built-in
ones, so every loop, writer and tool that reads the table serves it. The run saves the checked
declarations in its configuration (``DataConfig.own_tasks``), and ``RunConfig.from_dict`` registers
them again: ``load_run``, ``--resume``, predict and the report work without the original file.
"""
from __future__ import annotations

import dataclasses
import math
import re
from pathlib import Path

import torch.nn.functional as F

from heads import PairClassifierHead, PairHead, SentimentHead

from .settings_file import read_settings_file
from .tasks import BUILTIN_TASKS, QQP, TASKS, Task, argmax

KINDS = ("classification", "pair_classification", "pair_regression")
METRICS = {"classification": "accuracy", "pair_classification": "accuracy", "pair_regression": "pearson"}
REQUIRED = ("name", "kind", "files", "text_columns", "label_column")
OPTIONAL = ("num_classes", "score_range", "metric", "id_column", "description")
SPLITS = ("train", "dev", "test")   # train and dev required, test optional
NAME = re.compile(r"[a-z][a-z0-9_]*$")
# names a declared task may not take: the built-in tasks' and their prediction files' prefixes
RESERVED = {name for task in BUILTIN_TASKS.values() for name in (task.name, task.output_prefix)}
# words a task name may not be: the run's overall score has the TensorBoard tag dev/overall beside dev/<task>
RESERVED_WORDS = {"overall"}
MAX_NAME = 40          # a name is in every prediction file's name (<name>-dev-output.csv): well under 255
MAX_CLASSES = 10_000   # a head of num_classes outputs: more is a typo (10**12 was an allocator traceback)


class TaskFileError(ValueError):
    """A bad declaration: one line naming the file, the task and the field."""


def read_task_file(path: str | Path) -> list[dict]:
    """The checked, complete declarations of a task file (every optional field filled in): a JSON
    (or, with PyYAML, YAML) object with a ``tasks`` list, a list of declarations, or one declaration."""
    path = Path(path)
    try:
        data = read_settings_file(path, "--task_file")
    except ValueError as err:
        raise TaskFileError(str(err)) from None
    if isinstance(data, dict) and "tasks" in data:
        data = data["tasks"]
    elif isinstance(data, dict):
        data = [data]
    if not isinstance(data, list) or not data:
        raise TaskFileError(f"--task_file {path}: expected a 'tasks' list of declarations (or one declaration), "
                            f"got {type(data).__name__ if data else 'nothing'}")
    declarations = [check_declaration(item, f"--task_file {path}", i) for i, item in enumerate(data)]
    names = [d["name"] for d in declarations]
    if repeated := sorted({n for n in names if names.count(n) > 1}):
        raise TaskFileError(f"--task_file {path}: field 'name': {repeated[0]!r} is declared twice")
    return declarations


def check_declaration(item, where: str, index: int = 0) -> dict:
    """One declaration checked, its optional fields filled in; a ``TaskFileError`` naming ``where``, the
    task and the field otherwise."""
    if not isinstance(item, dict):
        raise TaskFileError(f"{where}: task {index + 1}: expected an object of fields, got {type(item).__name__}")
    name = item.get("name")
    at = f"{where}: task {name!r}" if isinstance(name, str) else f"{where}: task {index + 1}"

    def fail(field: str, message: str):
        raise TaskFileError(f"{at}: field '{field}': {message}")

    if unknown := sorted(set(item) - set(REQUIRED) - set(OPTIONAL)):
        fail(unknown[0], f"unknown field; the fields are {', '.join(REQUIRED + OPTIONAL)}")
    for field in REQUIRED:
        if field not in item:
            fail(field, "missing (required: " + ", ".join(REQUIRED) + ")")
    if not isinstance(name, str) or not NAME.match(name):
        fail("name", f"{name!r} must be lower-case letters, digits and _, starting with a letter")
    if len(name) > MAX_NAME:
        fail("name", f"{len(name)} characters; at most {MAX_NAME} (it is part of every prediction file's name)")
    if name in RESERVED_WORDS:
        fail("name", f"{name!r} is reserved (the run's overall score is reported under it); choose another")
    if name in RESERVED:
        fail("name", f"{name!r} is a built-in task's name or prediction prefix ({', '.join(sorted(RESERVED))}); "
                     "choose another")
    kind = item["kind"]
    if kind not in KINDS:
        fail("kind", f"unknown kind {kind!r}; choose one of {', '.join(KINDS)}")
    files = item["files"]
    if not isinstance(files, dict) or set(files) - set(SPLITS) or not {"train", "dev"} <= set(files):
        fail("files", f"an object with train and dev (and optionally test) file names, got {files!r}")
    if not all(isinstance(f, str) and f.strip() for f in files.values()):
        fail("files", f"file names must be non-empty strings, got {files!r}")
    columns = item["text_columns"]
    columns = [columns] if isinstance(columns, str) else columns
    wanted = 1 if kind == "classification" else 2
    if not isinstance(columns, list) or len(columns) != wanted or not all(isinstance(c, str) and c for c in columns) \
            or len(set(columns)) != len(columns):
        fail("text_columns", f"kind {kind} reads {wanted} distinct column name{'s' if wanted > 1 else ''}, "
                             f"got {item['text_columns']!r}")
    label = item["label_column"]
    if not isinstance(label, str) or not label or label in columns:
        fail("label_column", f"a column name other than the text columns, got {label!r}")
    id_column = item.get("id_column", "id")
    if not isinstance(id_column, str) or not id_column or id_column in (*columns, label):
        fail("id_column", f"a column name other than the text and label columns, got {id_column!r}")
    num_classes, score_range = item.get("num_classes"), item.get("score_range")
    if kind == "pair_regression":
        if num_classes is not None:
            fail("num_classes", "a pair_regression has a score_range, not classes")
        if not (isinstance(score_range, list) and len(score_range) == 2
                and all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
                        for v in score_range) and score_range[0] < score_range[1]):
            fail("score_range", f"[low, high] with low < high, got {score_range!r}")
        score_range = [float(v) for v in score_range]
    else:
        if score_range is not None:
            fail("score_range", f"a {kind} has num_classes, not a score_range")
        if isinstance(num_classes, bool) or not isinstance(num_classes, int) or not 2 <= num_classes <= MAX_CLASSES:
            fail("num_classes", f"a whole number of classes from 2 to {MAX_CLASSES}, got {num_classes!r}")
    metric = item.get("metric", METRICS[kind])
    if metric != METRICS[kind]:
        fail("metric", f"{metric!r} does not fit kind {kind}: a {kind} is scored by {METRICS[kind]}")
    description = item.get("description", f"{name}: your {kind.replace('_', ' ')} task")
    if not isinstance(description, str):
        fail("description", f"a string, got {description!r}")
    return {"name": name, "kind": kind, "files": dict(files), "text_columns": list(columns), "label_column": label,
            "num_classes": num_classes if kind != "pair_regression" else None,
            "score_range": score_range if kind == "pair_regression" else None,
            "metric": metric, "id_column": id_column, "description": description}


def check_agreement(path: str | Path, saved: list[dict], saved_where: str) -> None:
    """``--task_file`` given beside declarations a run saved (``--config`` of a run's configuration, or
    ``--resume``): one source of truth, so the two must declare the same tasks field for field; a
    ``TaskFileError`` naming both and the first difference otherwise (the saved ones would train silently)."""
    ours = {d["name"]: d for d in read_task_file(path)}
    theirs = {d["name"]: d for d in (check_declaration(item, saved_where, i) for i, item in enumerate(saved))}
    if ours.keys() != theirs.keys():
        difference = (f"it declares {', '.join(ours) or 'none'}, {saved_where} "
                      f"{', '.join(theirs) or 'no task of its own'}")
    else:
        difference = next((f"task {name!r}, field {key!r}: {ours[name][key]!r} against {theirs[name][key]!r}"
                           for name in ours for key in ours[name] if ours[name][key] != theirs[name][key]), None)
    if difference:
        raise TaskFileError(f"--task_file {path} and {saved_where} declare the tasks differently ({difference}): "
                            f"drop --task_file to keep the saved declarations, or start from the file alone")


def task_from_declaration(d: dict) -> Task:
    """The ``Task`` row of a checked declaration: a single-sentence classifier is SST's kind of head;
    a two-class pair task QQP's (``--para_head``, one logit); a pair task of more classes a linear
    layer on [u; v; |u − v|] to the classes (``PairClassifierHead``); a pair regression STS's kind of
    head (``--sts_head``) on 0..5, which the task maps onto its score range (MSE, Pearson)."""
    n, common = d["num_classes"], dict(
        name=d["name"], description=d["description"], files=dict(d["files"]), text_columns=tuple(d["text_columns"]),
        label_column=d["label_column"], metric_name=d["metric"], output_prefix=d["name"],
        prediction_column=f"Predicted_{d['label_column']}", id_column=d["id_column"])
    if d["kind"] == "classification":
        return Task(**common, label_type="class", num_classes=n, score_range=None,
                    head=lambda width, m: SentimentHead(width, n, m.hidden_dropout_prob),
                    loss=F.cross_entropy, predict=argmax, divergence="multiclass")
    if d["kind"] == "pair_classification" and n == 2:
        return dataclasses.replace(QQP, **common)   # QQP's head, loss, prediction and divergence
    if d["kind"] == "pair_classification":
        return Task(**common, label_type="class", num_classes=n, score_range=None,
                    head=lambda width, m: PairClassifierHead(width, n, m.hidden_dropout_prob),
                    loss=F.cross_entropy, predict=argmax, divergence="multiclass")
    low, high = d["score_range"]
    return Task(**common, label_type="score", num_classes=None, score_range=(low, high),
                head=lambda width, m: PairHead(width, m.sts_head, "score", m.head_temp, m.hidden_dropout_prob,
                                               m.pair_projection),
                loss=lambda scores, labels: F.mse_loss(scores.float(), (labels.float() - low) * (5.0 / (high - low))),
                predict=lambda scores: low + scores.clamp(0.0, 5.0) * ((high - low) / 5.0),
                divergence="regression")


def register(declarations: list[dict], where: str = "the run's configuration") -> None:
    """Each declaration's task into ``TASKS`` (checked again: a saved one may be hand-edited). A declared
    task of the same name as an earlier one replaces it; a built-in task is never replaced."""
    for i, declaration in enumerate(declarations):
        task = task_from_declaration(check_declaration(declaration, where, i))
        TASKS[task.name] = task


def own_declarations(saved: dict) -> list[dict]:
    """The declarations a saved configuration (a run's ``config`` in metrics.json) carries, or none."""
    data = saved.get("data") if isinstance(saved, dict) else None
    found = data.get("own_tasks") if isinstance(data, dict) else None
    return found if isinstance(found, list) else []
