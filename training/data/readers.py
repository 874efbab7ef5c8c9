"""Read the CS224N minBERT task files into validated ``Example`` rows.

The release's files are pandas-written, tab-separated tables with a few quirks: a leading unnamed index column, a second
unnamed one in the SST/CFIMDB test-student files, ``"`` doubled inside quoted fields, and a handful of bad rows (e.g. a
QQP pair with an empty label). The ``csv`` module follows pandas' quoting rules and tells the physical line of every
row, so each bad row is skipped and reported by line and field (``strict=True``: refused), columns are found by name,
and every failure is a one-line ``DataError`` instead of a parser stack trace.
"""
from __future__ import annotations

import csv
import io
import math
import os
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Callable, Sequence

HOW_TO_SUPPLY = ("Put the CS224N CSVs there, or point --data_dir / MINBERT_DATA at a folder holding them "
                 "(for example ../shared/data/multitask)")
MAX_LISTED_BAD_ROWS = 5


class DataError(Exception):
    """One-line, user-facing error (names file, and line/field where there is one)."""


@dataclass(frozen=True)
class Example:
    """One data row: the sentence(s) to encode and, for labelled files, the gold label."""
    id: str
    texts: tuple[str, ...]  # 1 sentence (SST) or 2 (QQP, STS)
    label: int | float | None  # None for unlabelled (test-student) files
    line: int  # 1-based line number in the file (the header is line 1)


@dataclass(frozen=True)
class BadRow:
    line: int
    field: str
    reason: str

    def where(self, path: Path) -> str:
        """The one line naming it: file, line and field, then why."""
        return f"{path}, line {self.line}, field {self.field}: {self.reason}"


@dataclass
class ReadReport:
    """What ``read_examples`` saw in one file, so callers can log skipped rows."""
    path: Path
    n_rows: int  # data rows seen (blank lines are not rows)
    bad_rows: list[BadRow] = field(default_factory=list)

    @property
    def n_kept(self) -> int:
        return self.n_rows - len(self.bad_rows)

    def summary(self) -> str:
        """E.g. ``quora-train.csv: 16214 rows, 1 skipped (line 2071: is_duplicate: empty label)``."""
        text = f"{self.path.name}: {self.n_rows} rows, {len(self.bad_rows)} skipped"
        if not self.bad_rows:
            return text
        listed = [f"line {b.line}: {b.field}: {b.reason}" for b in self.bad_rows[:MAX_LISTED_BAD_ROWS]]
        if len(self.bad_rows) > MAX_LISTED_BAD_ROWS:
            listed.append(f"... and {len(self.bad_rows) - MAX_LISTED_BAD_ROWS} more")
        return f"{text} ({'; '.join(listed)})"


@dataclass(frozen=True)
class FileLayout:
    """What a task file holds and where. ``label_column=None``: read as unlabelled (labels, if present, ignored).
    ``label_type="class"`` wants a whole number in ``[0, num_classes)`` (QQP's ``0.0``/``1.0`` are 0/1),
    ``"score"`` a finite float in ``score_range`` (inclusive). ``id_column=None``: each row's id is its line
    number (the header is line 1). ``delimiter``: tab (the CS224N files), or ``,`` for a file of your own."""
    text_columns: Sequence[str]
    label_column: str | None = None
    label_type: str = "class"
    num_classes: int | None = None
    score_range: tuple[float, float] | None = None
    id_column: str | None = "id"
    delimiter: str = "\t"

    def __post_init__(self):
        if self.label_type not in ("class", "score"):
            raise ValueError(f"label_type must be 'class' or 'score', got {self.label_type!r}")
        if not self.text_columns:
            raise ValueError("text_columns must name at least one column")

    def columns(self) -> list[str]:
        """The columns the file's header must name, in the order the errors name them."""
        return [name for name in (self.id_column, *self.text_columns, self.label_column) if name is not None]


def read_examples(path: str | Path, layout: FileLayout, strict: bool = False) -> tuple[list[Example], ReadReport]:
    """Read one task file of ``layout``: its valid rows and a report of the bad ones (``strict=True``: the first
    raises ``DataError``), a row whose id an earlier kept row has among them (ids must be unique)."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"data file not found: {path}. {HOW_TO_SUPPLY}")
    delimiter = layout.delimiter
    header = "a tab-separated header row" if delimiter == "\t" else f"a header row separated by {delimiter!r}"
    return read_table(path, delimiter, layout.columns(), header, partial(_parse_row, layout=layout), strict,
                      layout.id_column or "id")


def read_table(path: Path, delimiter: str, wanted: Sequence[str], expected_header: str,
               parse: Callable[[list[str], int, list[str], dict[str, int]], Example | BadRow],
               strict: bool = False, id_column: str = "id") -> tuple[list[Example], ReadReport]:
    """The rows of a delimited file whose header names the ``wanted`` columns, each turned by
    ``parse(row, line, header, index)`` into an ``Example`` or a ``BadRow``; rule and errors as in
    ``read_examples`` (``expected_header`` completes the empty-file message)."""
    rows = csv_records(path, read_utf8(path), delimiter=delimiter)
    header_line, header = next(rows, (0, None))
    if not header:
        raise DataError(f"{path}: file is empty (expected {expected_header})")
    if isinstance(header, BadRow):
        raise DataError(f"{path}, line {header_line}: header row: {header.reason}")
    index = column_indices(path, header, wanted)
    examples: list[Example] = []
    report = ReadReport(path=path, n_rows=0)
    first_line: dict[str, int] = {}  # id -> line of the row kept with it
    for line, row in rows:
        if not row:  # a blank line, which pandas skips too
            continue
        report.n_rows += 1
        parsed = row if isinstance(row, BadRow) else parse(row, line, header, index)
        if isinstance(parsed, Example) and parsed.id in first_line:
            # ids key the prediction files, so a second row with the same id is a bad row
            parsed = BadRow(line, id_column, f"duplicate id {clip(repr(parsed.id))} (first on line "
                                             f"{first_line[parsed.id]})")
        if isinstance(parsed, Example):
            first_line[parsed.id] = line
            examples.append(parsed)
        elif strict:
            raise DataError(parsed.where(path))
        else:
            report.bad_rows.append(parsed)
    if report.n_rows == 0:
        raise DataError(f"{path}: header only, no data rows")
    return examples, report


def resolve_data_dir(cli_value: str | None, required_files: Sequence[str] = ()) -> Path:
    """``--data_dir`` if given, else ``$MINBERT_DATA``, else ``./data``, which must hold ``required_files``; no
    fallback between them (a typo in --data_dir must not silently read other data)."""
    if cli_value:
        directory, how = Path(cli_value).expanduser(), "from --data_dir"
    elif env_value := os.environ.get("MINBERT_DATA"):
        directory, how = Path(env_value).expanduser(), "from MINBERT_DATA"
    else:
        directory, how = Path("data"), "default ./data"
    if not directory.is_dir():
        raise DataError(f"data directory not found: {directory} ({how}). {HOW_TO_SUPPLY}")
    for name in required_files:
        if not (directory / name).is_file():
            raise DataError(f"data file {name} not found in data directory {directory} ({how}). {HOW_TO_SUPPLY}")
    return directory


def read_header(path: Path, delimiter: str = "\t") -> list[str]:
    first_line = read_utf8(path).split("\n", 1)[0].rstrip("\r")
    return [name.strip() for name in first_line.split(delimiter)]


def guess_delimiter(path: Path) -> str:
    """Tab when the header row has one (the CS224N files, whatever their suffix), else comma."""
    return "\t" if "\t" in read_utf8(path).split("\n", 1)[0] else ","


def read_utf8(path: Path) -> str:
    """The file's text (a UTF-8 BOM is dropped), decoded whole so that a non-UTF-8 byte is a
    one-line ``DataError`` naming file and line."""
    if not path.is_file():
        raise DataError(f"data file not found: {path}")
    raw = path.read_bytes()
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        line = raw.count(b"\n", 0, err.start) + 1
        raise DataError(f"{path}, line {line}: not valid UTF-8 (byte 0x{raw[err.start]:02x}); "
                        "re-save the file as UTF-8") from None


def csv_records(path: Path, text: str, delimiter: str):
    """Yield ``(first_line, fields)`` per record; a malformed record yields ``(line, BadRow)``."""
    # strict=True: quoting damage (text after a closing quote) is a csv.Error, not guessed at; the release passes.
    reader = csv.reader(io.StringIO(text, newline=""), delimiter=delimiter, quotechar='"',
                        doublequote=True, strict=True)
    start = 1
    while True:
        try:
            row = next(reader)
        except StopIteration:
            return
        except csv.Error as err:
            if "unexpected end of data" in str(err):
                raise DataError(f"{path}, line {start}: quoted field is never closed "
                                "(runs to the end of the file)") from None
            if "field larger than field limit" in str(err):
                # csv's own guard against a runaway quote or a non-text file; the row is skipped
                reason = f"a field longer than {csv.field_size_limit()} characters (runaway quote or not a text file?)"
            else:
                reason = "malformed quoting: " + str(err).replace("\t", "\\t")  # no raw tab in a message
            if reader.line_num > start:  # an opened quote swallowed the lines after it: say which are lost
                reason += f" (lines {start}-{reader.line_num} read as one record)"
            row = BadRow(start, "row", reason)
        yield start, row
        start = reader.line_num + 1


def column_indices(path: Path, header: list[str], wanted: Sequence[str]) -> dict[str, int]:
    """Map each wanted column name to its position, or explain which one is missing."""
    index: dict[str, int] = {}
    for name in wanted:
        positions = [i for i, h in enumerate(header) if h.strip() == name]
        if not positions and len(header) == 1:   # not a table as read (another file, or other separators): not quoted
            split = next((repr(d) for d in (",", "\t", ";", "|") if d in header[0]), None)
            hint = f"; it holds {split}: is the file separated otherwise?" if split else ": is it the task's data file?"
            raise DataError(f"{path}: missing column '{name}': line 1 is one field, not a header naming the columns "
                            f"{', '.join(repr(w) for w in wanted)}{hint}")
        if not positions:
            raise DataError(f"{path}: missing column '{name}' (columns found: {clip(str(header))})")
        if len(positions) > 1:
            raise DataError(f"{path}: column '{name}' appears {len(positions)} times in the header")
        index[name] = positions[0]
    return index


def _parse_row(row: list[str], line: int, header: list[str], index: dict[str, int],
               layout: FileLayout) -> Example | BadRow:
    """Validate one row; the first problem found (in column order id, texts, label) is reported."""
    if len(row) > len(header):
        return BadRow(line, "row", f"{len(row)} fields, header has {len(header)}")
    for name, i in index.items():
        if i >= len(row):
            return BadRow(line, name, f"too few fields (got {len(row)}, header has {len(header)})")
    example_id = row[index[layout.id_column]].strip() if layout.id_column is not None else str(line)
    if not example_id:
        return BadRow(line, layout.id_column, "empty id")
    texts = tuple(row[index[name]].strip() for name in layout.text_columns)
    if empty := next((name for name, text in zip(layout.text_columns, texts) if not text), None):
        return BadRow(line, empty, "empty sentence")
    label = None if layout.label_column is None else _parse_label(row[index[layout.label_column]], layout)
    if isinstance(label, str):
        return BadRow(line, layout.label_column, label)
    return Example(id=example_id, texts=texts, label=label, line=line)


def _parse_label(raw: str, layout: FileLayout) -> int | float | str:
    """The label as int (class) or float (score), or a string saying why it is invalid."""
    raw = raw.strip()
    if not raw:
        return "empty label"
    try:
        value = float(raw)
    except ValueError:
        return f"label {clip(repr(raw))} is not a number"
    if not math.isfinite(value):
        return f"label {clip(repr(raw))} is not a finite number"
    if layout.label_type == "score":
        low, high = layout.score_range or (-math.inf, math.inf)
        return value if low <= value <= high else f"score {raw} outside [{low}, {high}]"
    if not value.is_integer():
        return f"class label {raw} is not a whole number"
    if value < 0:
        return f"class label {raw} is negative"
    if layout.num_classes is not None and value >= layout.num_classes:
        return f"class label {raw} out of range 0..{layout.num_classes - 1}"
    return int(value)


def clip(text: str, limit: int = 200) -> str:
    """``text`` cut to ``limit`` characters for an error line (a file that lost its newlines is one huge field)."""
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"
