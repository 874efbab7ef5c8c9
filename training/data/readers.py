"""Read the CS224N minBERT task files into validated ``Example`` rows.

The release's files are pandas-written, tab-separated tables with a few quirks: a leading unnamed
index column, a second unnamed one in the SST/CFIMDB test-student files, ``"`` doubled inside
quoted fields, and a handful of bad rows (e.g. a QQP pair with an empty label). The ``csv`` module
follows pandas' quoting rules and tells the physical line of every row, so each bad row is skipped
and reported by line and field (``strict=True``: refused), columns are found by name, and every
failure is a one-line ``DataError`` instead of a parser stack trace.
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
    """A skipped row: where it is and what is wrong with it."""

    line: int
    field: str
    reason: str


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
    """What a task file holds and where: its text columns (one sentence or a pair), its label column (None:
    read as unlabelled, labels if present ignored) and what a label must be, its id column and delimiter.

    ``label_type="class"`` wants a whole number in ``[0, num_classes)`` (QQP's ``0.0``/``1.0`` are
    accepted as 0/1); ``"score"`` wants a finite float in ``score_range`` (inclusive). ``id_column=None``:
    the file has no ids, and each row's id is its line number (the header is line 1). ``delimiter``: tab
    (the CS224N files), or ``,`` for a comma-separated file of your own.
    """
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
        return ([self.id_column] if self.id_column is not None else []) + [*self.text_columns] + \
            ([self.label_column] if self.label_column is not None else [])


def read_examples(path: str | Path, layout: FileLayout, strict: bool = False) -> tuple[list[Example], ReadReport]:
    """Read one task file of ``layout``; return its valid rows and a report of the skipped ones.

    Bad rows are skipped and recorded; with ``strict=True`` the first one raises ``DataError``.
    A row whose id an earlier kept row has is a bad row too (ids must be unique).
    """
    path = Path(path)
    if not path.is_file():
        raise DataError(f"data file not found: {path}. {HOW_TO_SUPPLY}")
    label_of = partial(_parse_label, label_type=layout.label_type, num_classes=layout.num_classes,
                       score_range=layout.score_range)
    parse = partial(_parse_row, text_columns=layout.text_columns, label_column=layout.label_column,
                    id_column=layout.id_column, label_of=label_of)
    delimiter = layout.delimiter
    header = "a tab-separated header row" if delimiter == "\t" else f"a header row separated by {delimiter!r}"
    return read_table(path, delimiter, layout.columns(), header, parse, strict, layout.id_column or "id")


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
            raise DataError(f"{path}, line {parsed.line}, field {parsed.field}: {parsed.reason}")
        else:
            report.bad_rows.append(parsed)
    if report.n_rows == 0:
        raise DataError(f"{path}: header only, no data rows")
    return examples, report


def resolve_data_dir(cli_value: str | None, required_files: Sequence[str] = ()) -> Path:
    """Pick the data directory: ``--data_dir`` if given, else ``$MINBERT_DATA``, else ``./data``.

    There is no fallback between them (a typo in --data_dir must not silently read other data);
    the chosen directory must exist and hold every file in ``required_files``.
    """
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
    """The column names of a tab-separated (or ``delimiter``-separated) file's header row."""
    first_line = read_utf8(path).split("\n", 1)[0].rstrip("\r")
    return [name.strip() for name in first_line.split(delimiter)]


def guess_delimiter(path: Path) -> str:
    """Tab when the header row has one (the CS224N files, whatever their suffix), else comma: a file of
    your own may be either."""
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
    last_line = 0
    while True:
        start = last_line + 1
        try:
            row = next(reader)
        except StopIteration:
            return
        except csv.Error as err:
            if "unexpected end of data" in str(err):
                raise DataError(f"{path}, line {start}: quoted field is never closed "
                                "(runs to the end of the file)") from None
            last_line = reader.line_num
            if "field larger than field limit" in str(err):
                # csv's own guard against a runaway quote or a non-text file; the row is skipped
                reason = f"a field longer than {csv.field_size_limit()} characters (runaway quote or not a text file?)"
            else:
                reason = "malformed quoting: " + str(err).replace("\t", "\\t")  # no raw tab in a message
            if last_line > start:  # an opened quote swallowed the lines after it: say which are lost
                reason += f" (lines {start}-{last_line} read as one record)"
            yield start, BadRow(start, "row", reason)
            continue
        last_line = reader.line_num
        yield start, row


def column_indices(path: Path, header: list[str], wanted: Sequence[str]) -> dict[str, int]:
    """Map each wanted column name to its position, or explain which one is missing."""
    index: dict[str, int] = {}
    for name in wanted:
        positions = [i for i, h in enumerate(header) if h.strip() == name]
        if not positions:
            raise DataError(f"{path}: missing column '{name}' (columns found: {clip(str(header))})")
        if len(positions) > 1:
            raise DataError(f"{path}: column '{name}' appears {len(positions)} times in the header")
        index[name] = positions[0]
    return index


def _parse_row(row: list[str], line: int, header: list[str], index: dict[str, int], text_columns: Sequence[str],
               label_column: str | None, id_column: str | None, label_of: Callable[[str], int | float | str]
               ) -> Example | BadRow:
    """Validate one row; the first problem found (in column order id, texts, label) is reported.
    ``label_of`` turns the label field into the label, or a string saying why it is invalid."""
    if len(row) > len(header):
        return BadRow(line, "row", f"{len(row)} fields, header has {len(header)}")
    for name, i in index.items():
        if i >= len(row):
            return BadRow(line, name, f"too few fields (got {len(row)}, header has {len(header)})")
    example_id = row[index[id_column]].strip() if id_column is not None else str(line)
    if not example_id:
        return BadRow(line, id_column, "empty id")
    texts = tuple(row[index[name]].strip() for name in text_columns)
    for name, text in zip(text_columns, texts):
        if not text:
            return BadRow(line, name, "empty sentence")
    label: int | float | None = None
    if label_column is not None:
        label = label_of(row[index[label_column]])
        if isinstance(label, str):
            return BadRow(line, label_column, label)
    return Example(id=example_id, texts=texts, label=label, line=line)


def _parse_label(raw: str, label_type: str, num_classes: int | None,
                 score_range: tuple[float, float] | None) -> int | float | str:
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
    if label_type == "score":
        if score_range is not None and not score_range[0] <= value <= score_range[1]:
            return f"score {raw} outside [{score_range[0]}, {score_range[1]}]"
        return value
    if not value.is_integer():
        return f"class label {raw} is not a whole number"
    if value < 0:
        return f"class label {raw} is negative"
    if num_classes is not None and value >= num_classes:
        return f"class label {raw} out of range 0..{num_classes - 1}"
    return int(value)


def clip(text: str, limit: int = 200) -> str:
    """``text`` cut to ``limit`` characters for an error line (a file that lost its newlines is one
    huge field or header)."""
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"
