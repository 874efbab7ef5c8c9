"""The report's row names for a paper (``--row_names FILE``, ``--row_name KEY=NAME``): a row is named after its
run folders (``ablate-mean-preqqp``, its seeds' ``-s<seed>`` left off); these give it the name a reader should see,
in every view (Markdown, CSV, LaTeX, the terminal, the forest plot) and in the footer's sentences.

A file holds one ``KEY=NAME`` a line, KEY a row as the table names it without its mark (``ablate-ft``, not
``ablate-ft (FT)``) and NAME its new name, spaces around either left off; blank lines and lines that start with ``#``
are skipped, and the file is UTF-8. ``--row_name`` gives one such line on the command line, and wins over the file's.
A name the rows do not have is a note (one file may serve several tables); two rows that would share a name are
refused.

    # names.txt
    ablate-ft = Multi-task fine-tuning
    ablate-mean-preqqp = + QQP first
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

RunRow = Any   # a report.RunRow (its ``run``): report imports this module, not the reverse

LINE = "KEY=NAME (a row as the table names it, without its mark, then its new name)"


def row_names(file: Path | None, given: list[str]) -> dict[str, str]:
    """Row key -> display name: the ``--row_names`` file's, then the ``--row_name`` flags' over them ({} when none)."""
    names = read_row_names(file) if file is not None else {}
    flagged: dict[str, str] = {}
    for text in given:
        key, name = parse_row_name(text, f"--row_name {text!r}")
        if key in flagged:
            raise ValueError(f"--row_name {key}: given twice ({flagged[key]!r} and {name!r})")
        flagged[key] = name
    return names | flagged


def read_row_names(path: Path) -> dict[str, str]:
    """The ``KEY=NAME`` lines of ``path``; one line naming the file (and the line) for anything else."""
    try:
        text = path.read_bytes().decode("utf-8-sig")   # a byte-order mark (Windows editors) is no part of a key
    except OSError as err:
        raise OSError(f"--row_names {path}: {err.strerror or err}") from err
    except UnicodeDecodeError as err:
        raise ValueError(f"--row_names {path}: not UTF-8 text (byte {err.start})") from None
    names: dict[str, str] = {}
    lines: dict[str, int] = {}
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        where = f"--row_names {path} line {number}"
        key, name = parse_row_name(line, where)
        if key in names:
            raise ValueError(f"{where}: {key!r} is named on line {lines[key]} already")
        names[key], lines[key] = name, number
    return names


def parse_row_name(text: str, where: str) -> tuple[str, str]:
    """``KEY=NAME`` -> (KEY, NAME), spaces around each left off; ``where`` starts the error line for anything else."""
    key, equals, name = text.partition("=")
    key, name = key.strip(), " ".join(name.split())
    if not equals or not key or not name:
        raise ValueError(f"{where}: want {LINE}, got {text.strip()!r}")
    return key, name


def name_rows(rows: list[RunRow], names: dict[str, str]) -> list[str]:
    """Give each row that ``names`` names its display name; return a note for each name no row has. Refused in one
    line, before any row is renamed, where two rows of different names would end with one name."""
    sources: dict[str, set[str]] = {}
    for row in rows:
        sources.setdefault(names.get(row.run, row.run), set()).add(row.run)
    for name, keys in sources.items():
        if len(keys) > 1:
            raise ValueError(f"row names: {', '.join(sorted(keys))} would all be named {name!r}; give each row a "
                             f"name of its own")
    present = {row.run for row in rows}
    for row in rows:
        row.run = names.get(row.run, row.run)
    return [f"note: row names: no row {key!r} in the table (its rows: {', '.join(sorted(present)) or 'none'})"
            for key in names if key not in present]
