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
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import torch.nn.functional as F

from heads import PairClassifierHead, PairHead, SentimentHead

from .settings_file import read_settings_file
from .tasks import BUILTIN_TASKS, QQP, TASKS, Task, argmax

KINDS = ("classification", "pair_classification", "pair_regression")
METRICS = {"classification": "accuracy", "pair_classification": "accuracy", "pair_regression": "pearson"}
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


@dataclass(frozen=True)
class Rule:
    """One field of a declaration: when its value is right (``ok``, given the fields checked before it), what
    to say when it is not, what an absent optional field is (``default``; None: required), and how the
    checked value is kept (``keep``)."""
    field: str
    ok: Callable[[Any, dict], bool]
    says: Callable[[Any, dict], str]
    default: Callable[[dict], Any] | None = None
    keep: Callable[[Any, dict], Any] = lambda value, d: value


def _columns(value) -> list:
    return [value] if isinstance(value, str) else value


def _text_columns_ok(value, d) -> bool:
    columns = _columns(value)
    return isinstance(columns, list) and len(columns) == _wanted(d) and len(set(columns)) == len(columns) \
        and all(isinstance(c, str) and c for c in columns)


def _wanted(d: dict) -> int:
    return 1 if d["kind"] == "classification" else 2


def _range_ok(value) -> bool:
    return isinstance(value, list) and len(value) == 2 and value[0] < value[1] and all(
        isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in value)


def _regression(d: dict) -> bool:
    return d["kind"] == "pair_regression"


# the schema, in the order the fields are checked and saved (a rule may read the fields above it)
SCHEMA = (
    Rule("name", lambda v, d: isinstance(v, str) and bool(NAME.match(v)),
         lambda v, d: f"{v!r} must be lower-case letters, digits and _, starting with a letter"),
    Rule("name", lambda v, d: len(v) <= MAX_NAME,
         lambda v, d: f"{len(v)} characters; at most {MAX_NAME} (it is part of every prediction file's name)"),
    Rule("name", lambda v, d: v not in RESERVED_WORDS,
         lambda v, d: f"{v!r} is reserved (the run's overall score is reported under it); choose another"),
    Rule("name", lambda v, d: v not in RESERVED,
         lambda v, d: f"{v!r} is a built-in task's name or prediction prefix ({', '.join(sorted(RESERVED))}); "
                      "choose another"),
    Rule("kind", lambda v, d: v in KINDS, lambda v, d: f"unknown kind {v!r}; choose one of {', '.join(KINDS)}"),
    Rule("files", lambda v, d: isinstance(v, dict) and not set(v) - set(SPLITS) and {"train", "dev"} <= set(v),
         lambda v, d: f"an object with train and dev (and optionally test) file names, got {v!r}",
         keep=lambda v, d: dict(v)),
    Rule("files", lambda v, d: all(isinstance(f, str) and f.strip() for f in v.values()),
         lambda v, d: f"file names must be non-empty strings, got {v!r}"),
    Rule("text_columns", _text_columns_ok,
         lambda v, d: f"kind {d['kind']} reads {_wanted(d)} distinct column name{'s' if _wanted(d) > 1 else ''}, "
                      f"got {v!r}", keep=lambda v, d: list(_columns(v))),
    Rule("label_column", lambda v, d: isinstance(v, str) and bool(v) and v not in d["text_columns"],
         lambda v, d: f"a column name other than the text columns, got {v!r}"),
    Rule("num_classes", lambda v, d: v is None if _regression(d) else
         not isinstance(v, bool) and isinstance(v, int) and 2 <= v <= MAX_CLASSES,
         lambda v, d: "a pair_regression has a score_range, not classes" if _regression(d) else
         f"a whole number of classes from 2 to {MAX_CLASSES}, got {v!r}", default=lambda d: None),
    Rule("score_range", lambda v, d: _range_ok(v) if _regression(d) else v is None,
         lambda v, d: f"[low, high] with low < high, got {v!r}" if _regression(d) else
         f"a {d['kind']} has num_classes, not a score_range", default=lambda d: None,
         keep=lambda v, d: [float(x) for x in v] if _regression(d) else None),
    Rule("metric", lambda v, d: v == METRICS[d["kind"]],
         lambda v, d: f"{v!r} does not fit kind {d['kind']}: a {d['kind']} is scored by {METRICS[d['kind']]}",
         default=lambda d: METRICS[d["kind"]]),
    Rule("id_column", lambda v, d: isinstance(v, str) and bool(v) and v not in (*d["text_columns"], d["label_column"]),
         lambda v, d: f"a column name other than the text and label columns, got {v!r}", default=lambda d: "id"),
    Rule("description", lambda v, d: isinstance(v, str), lambda v, d: f"a string, got {v!r}",
         default=lambda d: f"{d['name']}: your {d['kind'].replace('_', ' ')} task"),
)
REQUIRED = tuple(dict.fromkeys(rule.field for rule in SCHEMA if rule.default is None))
OPTIONAL = tuple(dict.fromkeys(rule.field for rule in SCHEMA if rule.default is not None))


def check_declaration(item, where: str, index: int = 0) -> dict:
    """One declaration checked against ``SCHEMA``, its optional fields filled in (in the schema's order);
    a ``TaskFileError`` naming ``where``, the task and the field otherwise."""
    if not isinstance(item, dict):
        raise TaskFileError(f"{where}: task {index + 1}: expected an object of fields, got {type(item).__name__}")
    name = item.get("name")
    at = f"{where}: task {name!r}" if isinstance(name, str) else f"{where}: task {index + 1}"
    if unknown := sorted(set(item) - set(REQUIRED) - set(OPTIONAL)):
        raise TaskFileError(f"{at}: field '{unknown[0]}': unknown field; the fields are "
                            f"{', '.join(REQUIRED + OPTIONAL)}")
    if missing := [field for field in REQUIRED if field not in item]:
        raise TaskFileError(f"{at}: field '{missing[0]}': missing (required: {', '.join(REQUIRED)})")
    checked: dict = {}
    for rule in SCHEMA:
        value = checked.get(rule.field, item[rule.field] if rule.field in item else rule.default(checked))
        if not rule.ok(value, checked):
            raise TaskFileError(f"{at}: field '{rule.field}': {rule.says(value, checked)}")
        checked[rule.field] = rule.keep(value, checked)
    return checked


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
