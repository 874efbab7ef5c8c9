"""A user's own tasks, declared in a small JSON (or YAML) file and trained with no code change:
``--task_file my_tasks.json --tasks sst,mytask`` (docs/own-tasks.md).

A declaration is in the schema the built-in tasks are declared in (``task_declarations.py``) and becomes a
``Task`` row by the same function (``training/learning/task_schema.py``). The run saves the checked
declarations in its configuration (``DataConfig.own_tasks``), and its task table (``known_tasks(config.data)``) is
built from them: ``load_run``, ``--resume``, predict and the report work without the original file.
"""
from __future__ import annotations

from pathlib import Path

from .settings_file import read_settings_file
from .task_declarations import TaskFileError, check_declaration


def read_task_file(path: str | Path) -> list[dict]:
    """The checked, complete declarations of a task file (every optional field filled in, but ``label_names`` only where
    given): a JSON (or, with PyYAML, YAML) object with a ``tasks`` list, a list of declarations, or one declaration."""
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
    for field in ("name", "output_prefix"):   # a task each, and prediction files of its own
        values = [d[field] for d in declarations]
        if repeated := sorted({n for n in values if values.count(n) > 1}):
            raise TaskFileError(f"--task_file {path}: field '{field}': {repeated[0]!r} is declared twice")
    return declarations


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


def own_declarations(saved: dict) -> list[dict]:
    """The declarations a saved configuration (a run's ``config`` in metrics.json) carries, or none."""
    data = saved.get("data") if isinstance(saved, dict) else None
    found = data.get("own_tasks") if isinstance(data, dict) else None
    return found if isinstance(found, list) else []

