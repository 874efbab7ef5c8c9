"""``--config FILE``: the settings of a file, read as their flags read them, and ``--print_config``'s file.

A file is a recipe, not a run: a run's ``checkpoint/run_config.json`` or ``metrics.json`` (in sections), or a
file of one's own, flat or in sections, JSON or YAML. Where a run is and what it resumes come from the command
line (``WHERE_A_RUN_IS``, said in a note when a file holds them), but for a recipe's own ``run_name``: honoured.
Each value goes through its flag's own type and choices (``flags.py``), so YAML 1.1's ``1e-4`` (text) is a number
and ``none`` / null is None where the flag takes none; older names are read through ``RENAMED``, removed settings
read when off and refused when on. Every problem is a ``ConfigFileError``: one line naming the file and the key.
"""
from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

from minbert.errors import first_line

from .sections import (REMOVED, REMOVED_EXTENSION_SETTINGS, REMOVED_IN, RENAMED, WHERE_A_RUN_IS, RunSettings,
                       saved_values)
from .flags import converter, is_switch
from .settings_file import read_settings_file

# settings a run saves that are no flag: a run's own configuration file carries its declared tasks
SAVED_ONLY = ("own_tasks",)


class ConfigFileError(ValueError):
    """A file ``--config`` cannot take: one line naming the file and the key."""


def read_config_file(path: str | Path, fields: dict[str, dataclasses.Field], extensions: dict[str, type]) -> dict:
    """The settings the file gives (no more), by field name, typed and checked as their flags (``fields``:
    every flag's field, ``flag_fields``; ``extensions``: each extension's settings dataclass by name)."""
    file = Path(path)
    data = read_settings_file(file, "--config")   # unreadable, not JSON / YAML, PyYAML missing: a ValueError
    if isinstance(data, dict) and isinstance(data.get("config"), dict):
        data = data["config"]   # a run's metrics.json
    if not isinstance(data, dict):
        raise ConfigFileError(f"--config {file}: expected settings by name (a JSON object), got {type(data).__name__}")
    named = saved_values(data) | {k: v for k, v in data.items() if not isinstance(v, dict)}
    unknown = sorted(set(named) - {*fields, *RENAMED, *SAVED_ONLY, *REMOVED, *REMOVED_EXTENSION_SETTINGS})
    if unknown:
        raise ConfigFileError(f"--config {file}: unknown settings {', '.join(unknown)}")
    for name, off in REMOVED.items():   # a setting whose code is gone: read when off, refused when on
        if named.pop(name, off) != off:
            raise ConfigFileError(f"--config {file}: {name} {REMOVED_IN}")
    # the run_name of a run's own saved file (RUN/metrics.json, RUN/checkpoint/run_config.json) is that run's
    own = file.parent.parent.name if file.parent.name == "checkpoint" else file.parent.name
    not_taken = WHERE_A_RUN_IS if named.get("run_name") in (None, own) else \
        tuple(name for name in WHERE_A_RUN_IS if name != "run_name")   # a recipe's name for its run: honoured
    where = [name for name in not_taken if name in named and named[name] not in (None, False)]
    if where:   # a run's own saved file has them: said, not taken (give them as flags)
        print(f"note: --config {file}: {', '.join(where)} not taken from the file (give them as flags)",
              file=sys.stderr)
    for name, value in list(named.items()):
        field = RENAMED[name][0][0] if name in RENAMED else name   # an older name: typed as the field it became
        if field in fields and name not in not_taken:
            named[name] = typed(fields[field], value, f"--config {file}: {name}")
    try:
        config = RunSettings.read({"file": named}, extensions)
    except (TypeError, ValueError) as err:
        raise ConfigFileError(f"--config {file}: {first_line(err)}") from None
    present = {new for old in named for new in (RENAMED[old][0] if old in RENAMED else (old,))}
    values = {f.name: getattr(section, f.name) for section in config.sections().values()
              for f in dataclasses.fields(section) if f.name in present and f.name not in not_taken}
    for name, value in values.items():
        if name in fields:
            check_choice(fields[name], value, f"--config {file}: {name}")
    return values


def typed(field: dataclasses.Field, value, where: str):
    """A value of a configuration file as its flag reads it: an on/off flag takes true or false (or null
    where its default is none: "decide for me"); other flags take text through the flag's type, a number (a
    whole one for a whole-number flag), a list where the flag takes comma-separated values, or null where
    the flag takes none; a ``ConfigFileError`` naming ``where`` otherwise."""
    if is_switch(field):
        if not isinstance(value, bool) and not (value is None and field.default is None):
            raise ConfigFileError(f"{where}: {value!r}: give true or false")
        return value
    convert = converter(field)
    if value is None:
        if field.default is None or takes_none(convert):
            return None
        raise ConfigFileError(f"{where}: null: give a value (its default is {field.default!r})")
    if isinstance(value, list) and all(isinstance(v, (str, int, float)) and not isinstance(v, bool) for v in value):
        value = ",".join(str(v) for v in value)
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise ConfigFileError(f"{where}: {value!r} is not a value this flag takes")
    if convert is float and isinstance(value, (int, float)):
        return float(value)
    if convert is int and isinstance(value, float) and value.is_integer():
        return int(value)
    try:
        return convert(str(value))   # text as the command line gives it: "1e-4", "none", "32,86,32"
    except (argparse.ArgumentTypeError, TypeError, ValueError) as err:
        raise ConfigFileError(f"{where}: {value!r}: {first_line(err)}") from None


def takes_none(convert) -> bool:
    """Whether a flag's type reads ``none`` as None (``--max_grad_norm none``, ``--warmup_ratio none``)."""
    try:
        return convert("none") is None
    except (argparse.ArgumentTypeError, TypeError, ValueError):
        return False


def check_choice(field: dataclasses.Field, value, where: str) -> None:
    """A setting from a file checked as its flag would be: text through the flag's type (e.g. ``--device``'s
    ``device_name``), any value against its choices."""
    convert, choices = field.metadata.get("type"), field.metadata.get("choices")
    if isinstance(value, str) and convert is not None:
        try:
            convert(value)
        except (argparse.ArgumentTypeError, TypeError, ValueError) as err:
            raise ConfigFileError(f"{where}: {first_line(err)}") from None
    if choices is not None and value not in choices:
        raise ConfigFileError(f"{where} {value!r}: choose one of {', '.join(map(str, choices))}")


def config_as_file(config: RunSettings) -> dict:
    """``--print_config``'s file: every section of ``config`` (validated by the caller), declared tasks
    included, less where a run goes (``WHERE_A_RUN_IS``): ``read_config_file`` reads it back to the same."""
    return {name: {key: value for key, value in values.items() if key not in WHERE_A_RUN_IS}
            for name, values in config.to_dict().items()}
