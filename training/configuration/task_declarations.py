"""A task as a declaration, the schema every task is written in: the built-in SST, QQP, STS and CFIMDB below,
and a user's own in a ``--task_file`` (docs/own-tasks.md). A declaration is data (names, files, columns,
classes or a score range), so it is checked here, in the configuration; the ``Task`` row a run trains with is
built from it by the learning kernel (``training/learning/task_schema.py``).
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import PurePath
from typing import Any, Callable, Collection

KINDS = ("classification", "pair_classification", "pair_regression")
METRICS = {"classification": "accuracy", "pair_classification": "accuracy", "pair_regression": "pearson"}
SPLITS = ("train", "dev", "test")   # train and dev required, test optional
NAME = re.compile(r"[a-z][a-z0-9_]*$")
# words a task name may not be: the run's overall score has the TensorBoard tag dev/overall beside dev/<task>
RESERVED_WORDS = {"overall"}
MAX_NAME = 40          # a name is in every prediction file's name (<name>-dev-output.csv): well under 255
MAX_CLASSES = 10_000   # a head of num_classes outputs: more is a typo (10**12 was an allocator traceback)
STS_SCALE = (0.0, 5.0)  # the pair regression head's own scale; a declared score_range is mapped onto it


class TaskFileError(ValueError):
    """A bad declaration: one line naming the file, the task and the field."""


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
    return isinstance(columns, list) and len(columns) == _wanted(d) and all(isinstance(c, str) and c for c in columns) \
        and len(set(columns)) == len(columns)


def _wanted(d: dict) -> int:
    return 1 if d["kind"] == "classification" else 2


def _climbing(files: dict) -> list[str]:
    """The relative file names that leave ``--data_dir`` through ``..`` (an absolute path is the user's own choice)."""
    return [f for f in files.values() if not PurePath(f).is_absolute() and ".." in PurePath(f).parts]


def _range_ok(value) -> bool:
    return isinstance(value, list) and len(value) == 2 and all(
        isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in value) \
        and value[0] < value[1]


def _regression(d: dict) -> bool:
    return d["kind"] == "pair_regression"


def _label_names_ok(value, d: dict) -> bool:
    return not _regression(d) and isinstance(value, list) and len(value) == d["num_classes"] and all(
        isinstance(name, str) and name.strip() for name in value) and len({n.strip() for n in value}) == len(value)


def _label_names_wrong(value, d: dict) -> str:
    if _regression(d):
        return "a pair_regression predicts a score: it has no label names"
    n = d["num_classes"]
    if isinstance(value, list) and len(value) != n:
        return f"{len(value)} names for {n} classes: one name per class, in class order (0..{n - 1})"
    return f"a list of {n} distinct non-empty names, one per class in class order (0..{n - 1}), got {value!r}"


# the schema, in the order the fields are checked and saved (a rule may read the fields above it)
SCHEMA = (
    Rule("name", lambda v, d: isinstance(v, str) and bool(NAME.match(v)),
         lambda v, d: f"{v!r} must be lower-case letters, digits and _, starting with a letter"),
    Rule("name", lambda v, d: len(v) <= MAX_NAME,
         lambda v, d: f"{len(v)} characters; at most {MAX_NAME} (it is part of every prediction file's name)"),
    Rule("name", lambda v, d: v not in RESERVED_WORDS,
         lambda v, d: f"{v!r} is reserved (the run's overall score is reported under it); choose another"),
    Rule("kind", lambda v, d: v in KINDS, lambda v, d: f"unknown kind {v!r}; choose one of {', '.join(KINDS)}"),
    Rule("files", lambda v, d: isinstance(v, dict) and not set(v) - set(SPLITS) and {"train", "dev"} <= set(v),
         lambda v, d: f"an object with train and dev (and optionally test) file names, got {v!r}",
         keep=lambda v, d: dict(v)),
    Rule("files", lambda v, d: all(isinstance(f, str) and f.strip() for f in v.values()),
         lambda v, d: f"file names must be non-empty strings, got {v!r}"),
    Rule("files", lambda v, d: not _climbing(v),
         lambda v, d: f"{_climbing(v)[0]!r} climbs out of --data_dir (..): name a file inside it, or give an absolute "
                      f"path"),
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
    Rule("output_prefix", lambda v, d: isinstance(v, str) and bool(NAME.match(v)) and len(v) <= MAX_NAME,
         lambda v, d: f"{v!r}: prediction files are <output_prefix>-dev-output.csv; lower-case letters, digits "
                      f"and _, starting with a letter, at most {MAX_NAME}", default=lambda d: d["name"]),
    Rule("prediction_column", lambda v, d: isinstance(v, str) and bool(v.strip()),
         lambda v, d: f"the prediction files' column name, got {v!r}",
         default=lambda d: f"Predicted_{d['label_column']}"),
    # absent, it stays absent (a declaration without it is saved as before): predict --input writes no names
    Rule("label_names", lambda v, d: v is None or _label_names_ok(v, d), lambda v, d: _label_names_wrong(v, d),
         default=lambda d: None, keep=lambda v, d: None if v is None else [name.strip() for name in v]),
)
REQUIRED = tuple(dict.fromkeys(rule.field for rule in SCHEMA if rule.default is None))
OPTIONAL = tuple(dict.fromkeys(rule.field for rule in SCHEMA if rule.default is not None))
KEPT_ONLY_WHEN_GIVEN = ("label_names",)   # optional fields a checked declaration holds only when given

# The built-in tasks, declared in the schema a --task_file uses. Their output prefixes and prediction
# columns are the CS224N release's ("Similiarity" is spelled as in its output files).
BUILTIN_DECLARATIONS = (
    {"name": "sst", "kind": "classification", "num_classes": 5, "text_columns": ["sentence"],
     "label_column": "sentiment", "prediction_column": "Predicted_Sentiment",
     "files": {"train": "ids-sst-train.csv", "dev": "ids-sst-dev.csv", "test": "ids-sst-test-student.csv"},
     "label_names": ["negative", "somewhat negative", "neutral", "somewhat positive", "positive"],
     "description": "Stanford Sentiment Treebank, 5 classes (0 negative .. 4 positive)"},
    {"name": "qqp", "kind": "pair_classification", "num_classes": 2, "text_columns": ["sentence1", "sentence2"],
     "label_column": "is_duplicate", "output_prefix": "para", "prediction_column": "Predicted_Is_Paraphrase",
     "files": {"train": "quora-train.csv", "dev": "quora-dev.csv", "test": "quora-test-student.csv"},
     "label_names": ["not duplicate", "duplicate"],
     "description": "Quora question pairs: paraphrase or not"},
    {"name": "sts", "kind": "pair_regression", "score_range": list(STS_SCALE),
     "text_columns": ["sentence1", "sentence2"], "label_column": "similarity",
     "prediction_column": "Predicted_Similiarity",
     "files": {"train": "sts-train.csv", "dev": "sts-dev.csv", "test": "sts-test-student.csv"},
     "description": "STS-B sentence pairs: similarity 0.0 .. 5.0"},
    {"name": "cfimdb", "kind": "classification", "num_classes": 2, "text_columns": ["sentence"],
     "label_column": "sentiment", "prediction_column": "Predicted_Sentiment",
     "files": {"train": "ids-cfimdb-train.csv", "dev": "ids-cfimdb-dev.csv", "test": "ids-cfimdb-test-student.csv"},
     "label_names": ["negative", "positive"],
     "description": "CFIMDB movie reviews, 2 classes (0 negative, 1 positive)"},
)
# names and prediction prefixes a user's task may not take: the built-in tasks'
RESERVED = frozenset(d[key] for d in BUILTIN_DECLARATIONS for key in ("name", "output_prefix") if key in d)


def check_declaration(item, where: str, index: int = 0, reserved=RESERVED) -> dict:
    """One declaration checked against ``SCHEMA``, its optional fields filled in (in the schema's order);
    a ``TaskFileError`` naming ``where``, the task and the field otherwise. ``reserved``: names and
    prediction prefixes the task may not take (a user's may not take the built-in tasks')."""
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
        if value is None and rule.field in KEPT_ONLY_WHEN_GIVEN:
            continue
        checked[rule.field] = rule.keep(value, checked)
        if rule.field in ("name", "output_prefix") and value in reserved:
            raise TaskFileError(f"{at}: field '{rule.field}': {value!r} is a built-in task's name or prediction "
                                f"prefix ({', '.join(sorted(reserved))}); choose another")
    return checked


def label_names(task: str, declarations: list[dict] = ()) -> list[str] | None:
    """The class names of ``task`` (a built-in one, or one of ``declarations``, a run's saved ``own_tasks``):
    its declaration's ``label_names``, in class order; None for a score, or a task declared without them."""
    found = next((d for d in (*BUILTIN_DECLARATIONS, *declarations) if isinstance(d, dict) and d.get("name") == task),
                 None)
    names = found.get("label_names") if found is not None else None
    return list(names) if isinstance(names, list) else None


BUILTIN_NAMES = tuple(d["name"] for d in BUILTIN_DECLARATIONS)
DEFAULT_TASKS = ("sst", "qqp", "sts")


def parse_tasks(value: str, known: Collection[str]) -> list[str]:
    """``--tasks sst,qqp`` as ``["sst", "qqp"]``: names ``known`` has, no repeats, at least one."""
    names = [name.strip() for name in value.split(",") if name.strip()]
    unknown = [name for name in names if name not in known]
    if unknown or not names or len(set(names)) != len(names):
        hint = f" (your own tasks: declare {', '.join(unknown)} in a --task_file)" if unknown else ""
        raise ValueError(f"--tasks must be distinct names from {', '.join(known)}, comma-separated; got {value!r}"
                         f"{hint}")
    return names
