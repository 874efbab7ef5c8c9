"""The run settings a table of the report shows (``report.py``'s Markdown and CSV, ``latex.py``'s LaTeX): a column for
each setting in which the rows shown differ, and one sentence for the table's own settings in which they do not
("All rows: pooling MEAN, rr min, ...; no extension."), so that a table printed in a paper tells every way its rows
differ and no row that differs from FT in a setting without an on/off column passes for FT.

A row's settings are those of its saved configuration (metrics.json's "config") as this version reads them
(``RunConfig.from_dict``: a field added after a run was saved takes what that run's version did), less what says
where and how the run reported, where its files are, and what the table shows elsewhere (``LEFT_OUT``). The table's
own settings come first, in this order: pooling, each extension's on/off column (its ``column``), the core ideas'
settings (their ``shows``: ``--rr``, ``--private_layers``, the pair heads); then any other setting in which the rows
differ, in the configuration's order, named as its flag. An extension's settings count only in the rows that have it
on: in the others their cell is "–" (they do nothing there).
"""
from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass
from functools import partial
from typing import Any

from .. import extensions
from ..configuration.sections import saved_values
from ..harness.run_config import RunConfig

RunRow = Any   # a report.RunRow (``flags``, ``pooling``, ``settings``): report imports this module, not the reverse

ON, OFF = "✓", "×"
NOT_APPLICABLE = "–"   # the cell of an extension's setting in a row that has the extension off
# What a row's settings leave out: where and how a run reports or is stored (the whole section), and the fields below.
LEFT_OUT_SECTIONS = ("output",)
LEFT_OUT = {
    "seed": "what the seeds of one row differ in: the seeds column counts them",
    "device": "where the run trained, not what",
    "data_dir": "where the data files are (the same files in another folder are the same data)",
    "task_file": "where the own tasks were declared: the metric columns name the tasks",
    "own_tasks": "the own tasks' declarations: the metric columns name the tasks",
    "tasks": "the metric columns and the run column's (ST) mark",
    "option": "the run column's (PT) mark",
    "max_eval_examples": "the capped mark (†) and the status",
    "val_fraction": "the status (a search trial, never compared)",
}


@dataclass(frozen=True)
class Setting:
    """A setting a table may give a column: its header and a row's cell (None: unknown, no readable config)."""
    header: str
    cell: Callable[[RunRow], str | None]
    switch: bool = False   # an extension's on/off (✓/×)
    named: bool = False    # one of the table's own settings: the caption names it where every row has one value


@dataclass(frozen=True)
class Shown:
    """The settings columns of a table of some rows, and the sentence for the table's own settings they agree on."""
    columns: list[Setting]
    all_rows: str


def run_settings(config: dict) -> dict[str, object]:
    """A saved configuration's settings as the table compares them: flag name -> value, as this version reads them
    (as saved where this version cannot), less ``LEFT_OUT_SECTIONS`` and ``LEFT_OUT``."""
    with suppress(ValueError, TypeError, KeyError, AttributeError):   # one this version refuses is kept as saved
        config = RunConfig.from_dict(config).to_dict()
    kept = {section: values for section, values in config.items() if section not in LEFT_OUT_SECTIONS}
    return {name: value for name, value in saved_values(kept).items() if name not in LEFT_OUT}


def setting_text(value) -> str:
    """A setting's value as its cell: ``none``, ✓/× for a switch, a number as short as it stays exact."""
    if value is None:
        return "none"
    if isinstance(value, bool):
        return ON if value else OFF
    if isinstance(value, float):
        short = f"{value:g}"
        return short if float(short) == value else repr(value)
    if isinstance(value, (list, dict)):
        return json.dumps(value, sort_keys=True)
    return str(value)


def shown_settings(rows: list[RunRow]) -> Shown:
    """The settings columns of a table of ``rows`` (those in which two rows with a known value differ) and the
    sentence naming the table's own settings that every row has alike."""
    owners = extension_settings()
    columns, alike = [], []
    for setting in [*own_settings(owners), *other_settings(rows, owners)]:
        values = {text for row in rows if (text := setting.cell(row)) not in (None, "", NOT_APPLICABLE)}
        if len(values) > 1:
            columns.append(setting)
        elif values and setting.named:
            alike.append((setting, values.pop()))
    return Shown(columns, all_rows_sentence(alike, columns))


def own_settings(owners: dict[str, str]) -> list[Setting]:
    """The table's own settings, in their order: pooling, each extension's on/off, the core ideas' settings."""
    ideas = extensions.ideas()
    return [Setting("pooling", lambda row: row.pooling, named=True),
            *(Setting(idea.column, partial(_switch, idea.name), switch=True, named=True)
              for idea in ideas if idea.column),
            *(Setting(flag, partial(_value, flag, owners), named=True) for idea in ideas for flag in idea.shows)]


def other_settings(rows: list[RunRow], owners: dict[str, str]) -> list[Setting]:
    """Every other setting of the rows' configurations, in the order the first row that has it saves it."""
    own = {"pooling", *(idea.name for idea in extensions.ideas() if idea.column),
           *(flag for idea in extensions.ideas() for flag in idea.shows)}
    flags = dict.fromkeys(flag for row in rows if row.settings for flag in row.settings if flag not in own)
    return [Setting(flag, partial(_value, flag, owners)) for flag in flags]


def extension_settings() -> dict[str, str]:
    """Each extension's setting (its switch aside) -> the extension's name: a setting that does nothing while it is
    off. Read from the registry when asked (tests extend it)."""
    return {f.name: extension.name for extension in extensions.EXTENSIONS
            for f in dataclasses.fields(extension.settings) if f.name != extension.name}


def _switch(name: str, row: RunRow) -> str | None:
    return None if row.flags is None else ON if row.flags.get(name) else OFF


def _value(flag: str, owners: dict[str, str], row: RunRow) -> str | None:
    if row.settings is None or flag not in row.settings:
        return None
    owner = owners.get(flag)
    if owner is not None and row.flags is not None and not row.flags.get(owner):
        return NOT_APPLICABLE
    return setting_text(row.settings[flag])


def all_rows_sentence(alike: list[tuple[Setting, str]], columns: list[Setting]) -> str:
    """"All rows: pooling MEAN, rr min, SMART on; every other extension off." from the table's own settings that
    every row has alike (setting, its one cell); the extensions off in every row are said together; "" if none."""
    on = [setting.header for setting, text in alike if setting.switch and text == ON]
    said = [f"{setting.header} {text}" for setting, text in alike if not setting.switch] + [f"{h} on" for h in on]
    off = ""
    if any(setting.switch and text == OFF for setting, text in alike):
        off = "every other extension off" if on or any(setting.switch for setting in columns) else "no extension"
    if not said and not off:
        return ""
    return "All rows: " + "; ".join(part for part in (", ".join(said), off) if part) + "."


def caption_opening(title: str, all_rows: str) -> str:
    """A caption's first sentences: ``--caption``'s text (its whitespace made single spaces, a full stop added where
    it ends without one), then ``all_rows``."""
    title = " ".join(title.split())
    if title and not title.endswith((".", "!", "?")):
        title += "."
    return " ".join(part for part in (title, all_rows) if part)
