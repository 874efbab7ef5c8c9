"""Settings dataclasses whose fields are command-line flags. A field made with ``flag`` carries its
help (and ``choices`` / ``type``); ``add_flags`` turns a dataclass into one argparse group and
``section_from_args`` fills it back, so a flag has exactly one home: a field of one settings
dataclass (``training/configuration/sections.py`` for the core, the extension's own module for an extension).
"""
from __future__ import annotations

import argparse
import dataclasses
import re
from dataclasses import field
from pathlib import Path
from typing import Callable


def flag(default, help: str | Callable[[], str], choices=None, type=None, path=None):
    """A dataclass field that is also a command-line flag. ``path=True``: the value names a file or folder;
    the run saves it absolute (``absolute_paths``), so it resumes and reloads from any working directory.
    ``help`` may be a function that writes it, called as the parser is built: a help that lists a registry
    (``listing``) then says what the registry holds, as ``choices`` do."""
    meta = {"help": help, "choices": choices, "type": type, "path": path}
    return field(default=default, metadata={key: value for key, value in meta.items() if value is not None})


def listing(what: str, registry: dict, says: Callable[[object], str]) -> Callable[[], str]:
    """The help of a flag whose choices are ``registry``: ``what``, then each entry's name and what it ``says``,
    written when the parser is built (``flag``), so a new entry shows in ``--help`` with no other edit."""
    return lambda: f"{what} ({'; '.join(f'{name}: {says(part)}' for name, part in registry.items())})"


def absolute_paths(section):
    """A copy of the settings dataclass ``section`` with each path flag (``flag(..., path=...)``) absolute."""
    paths = {item.name: str(Path(getattr(section, item.name)).resolve()) for item in dataclasses.fields(section)
             if item.metadata.get("path") is not None and isinstance(getattr(section, item.name), str)}
    return dataclasses.replace(section, **paths)


def optional_float(text: str, convert=float, what: str = "number") -> float | None:
    """A flag value that is a number or ``none`` (the setting off)."""
    if text.lower() == "none":
        return None
    try:
        return convert(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is neither a {what} nor 'none'") from None


def optional_int(text: str) -> int | None:
    """A count that is a whole number or ``none`` (no cap)."""
    return optional_float(text, int, "whole number")


def optional_text(text: str) -> str | None:
    """A flag value that is a word or ``none`` (the setting off)."""
    return None if text.lower() == "none" else text


def device_name(text: str) -> str:
    """A ``--device`` value: ``auto``, ``cpu``, ``cuda`` or ``cuda:N`` (N a GPU's index, written as torch
    writes it), checked as the flag is parsed, so a typo is a usage line before anything starts; whether
    that GPU exists is ``training.harness.distributed.pick_device``'s question."""
    found = re.fullmatch(r"(auto|cpu|cuda)(?::([0-9]+))?", text.strip())
    if found is None or (found[2] is not None and found[1] != "cuda"):
        raise argparse.ArgumentTypeError(f"{text!r}: give auto, cpu, cuda or cuda:N (N a GPU's index, e.g. cuda:1)")
    return found[1] if found[2] is None else f"cuda:{int(found[2])}"


def some_of(choices: tuple[str, ...], alone: str):
    """The type of a flag that takes one or more of ``choices``, comma-separated, or ``alone`` by itself (e.g.
    ``none``): checked as the flag is parsed, so a typo is a usage line naming the flag and the choices; the value
    comes back lower-case, without spaces (``MLflow, wandb`` -> ``mlflow,wandb``)."""
    def read(text: str) -> str:
        names = [name.strip().lower() for name in text.split(",")]
        if names == [alone]:
            return alone
        if not all(name in choices for name in names) or len(set(names)) != len(names):
            raise argparse.ArgumentTypeError(f"{text!r}: give one or more of {', '.join(choices)} (comma-separated, "
                                             f"each once), or {alone} alone")
        return ",".join(names)
    return read


def per_task(flag_name: str, text: str | None, names: list[str], default, convert, ok, what: str) -> dict:
    """A comma-separated flag value with one entry per task of ``--tasks`` (``names``; ``default`` each
    when not given), as task -> value; one error line naming the flag otherwise."""
    if text is None:
        return {name: default for name in names}
    try:
        values = [convert(p) for p in text.split(",")]
    except ValueError:
        values = []
    if len(values) != len(names) or not all(ok(v) for v in values):
        raise ValueError(f"--{flag_name} must be {len(names)} {what}, one per task of --tasks "
                         f"({','.join(names)}), got {text!r}")
    return dict(zip(names, values))


def flag_fields(sections) -> dict[str, dataclasses.Field]:
    """Every flag's field by its name, across the settings dataclasses ``sections`` (flag names are unique)."""
    return {f.name: f for section in sections for f in dataclasses.fields(section) if "help" in f.metadata}


def is_switch(f: dataclasses.Field) -> bool:
    """An on/off flag: ``--name`` and ``--no_name``."""
    return f.type in (bool, "bool", "bool | None")


def converter(f: dataclasses.Field):
    """What reads the flag's text: its ``type`` (``optional_float``, ``device_name``, ...), else its default's."""
    return f.metadata.get("type") or type(f.default)


def add_flags(parser: argparse.ArgumentParser, section: type, only: tuple[str, ...] | None = None,
              title: str | None = None, **overrides) -> None:
    """One flag per field of the settings dataclass ``section`` (or of the fields named in ``only``),
    in an argument group; the help ends with the default. ``overrides`` replace defaults,
    so a side tool can share a flag's home but start from another value."""
    group = parser.add_argument_group(title or section.__name__.removesuffix("Config").lower())
    for f in dataclasses.fields(section):
        if (only is not None and f.name not in only) or "help" not in f.metadata:
            continue   # not asked for, or a field the run saves that is no flag (DataConfig.own_tasks)
        # path: what the run saves (``absolute_paths``); type: ``converter``'s; neither is argparse's business
        meta = {key: value for key, value in f.metadata.items() if key not in ("path", "type")}
        if callable(meta["help"]):
            meta["help"] = meta["help"]()
        default = overrides.get(f.name, f.default)
        if is_switch(f):
            said = "" if default is None else f" (default: {'on' if default else 'off'}; off: --no_{f.name})"
            group.add_argument(f"--{f.name}", action="store_true", default=default,   # None: the help says
                               help=f"{meta['help']}{said}")
            group.add_argument(f"--no_{f.name}", action="store_false", dest=f.name, default=default,
                               help=argparse.SUPPRESS)  # every switch has its off form
            continue
        if default is not None or "default" not in meta["help"]:  # else the help says what None means
            meta["help"] += f" (default: {'none' if default is None else default})"
        group.add_argument(f"--{f.name}", type=converter(f), default=default, **meta)


def section_from_args(section: type, args: argparse.Namespace, **values):
    """The dataclass ``section`` filled from parsed flags (fields without a flag keep their default)."""
    given = vars(args)
    return section(**{f.name: given[f.name] for f in dataclasses.fields(section) if f.name in given} | values)


def add_refused(parser: argparse.ArgumentParser, refused: dict[str, str]) -> None:
    """Flags that are gone (hidden from ``--help``): giving one is a usage error saying what to give instead."""
    class Refused(argparse.Action):
        def __call__(self, parser, namespace, values, option_string=None):
            parser.error(refused[option_string])

    for option in refused:
        parser.add_argument(option, nargs="?", action=Refused, help=argparse.SUPPRESS)
