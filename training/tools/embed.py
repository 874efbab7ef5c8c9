"""Embed sentences with a trained run's encoder and pooling: a .txt file with one sentence per line,
or one column of a CSV file (tab-separated like the CS224N files, or comma-separated); writes a
float32 ``.npy`` of shape (sentences, width), in input order. An existing ``--out`` file is refused
(nothing written) unless ``--overwrite`` is given.

    python -m training.tools.embed predictions/<run> --input sentences.txt --out vectors.npy
    python -m training.tools.embed predictions/<run> --input ids-sst-dev.csv --column sentence --out sst-dev.npy
"""
from __future__ import annotations

if __name__ == "__main__":   # a stop while torch imports: one line, not a traceback (training/tools/starting.py)
    from training.tools.starting import stop_cleanly_while_starting
    stop_cleanly_while_starting()

import argparse
import re
import sys
from pathlib import Path
from typing import Sequence

import numpy as np

from training.data.readers import BadRow, DataError, csv_records, guess_delimiter, read_utf8
from minbert.atomic import atomic_path

from .command import check_overwrite, run_command
from ..configuration.sections import DataConfig, TrainConfig, add_flags
from ..harness.runs import load_run


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return run_command(lambda: execute(args))


def execute(args: argparse.Namespace) -> int:
    if args.batch_size < 1:
        raise ValueError(f"--batch_size must be at least 1, got {args.batch_size}")
    out = Path(args.out)
    if not out.is_dir():  # a folder is atomic_path's error, below
        check_overwrite([out], args.overwrite)
    sentences = read_sentences(Path(args.input), args.column)
    run = load_run(args.run, device=args.device)
    with atomic_path(out) as tmp:  # an --out that cannot be written fails before the encoding
        vectors = run.encode(sentences, batch_size=args.batch_size)
        with open(tmp, "wb") as f:
            np.save(f, vectors)
    print(f"{len(sentences)} sentences -> {out} {vectors.shape} ({run.config.model.pooling} pooling)", file=sys.stderr)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m training.tools.embed", description=__doc__.split("\n\n")[0])
    parser.add_argument("run", help="a run folder or its checkpoint/")
    parser.add_argument("--input", required=True, help=".txt (one sentence per line) or .csv/.tsv with a header")
    parser.add_argument("--column", default=None, help="the CSV column to embed (default: sentence)")
    parser.add_argument("--out", required=True, help="the .npy file to write")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing --out file (default: refuse)")
    add_flags(parser, DataConfig, only=("batch_size",), batch_size=64)
    add_flags(parser, TrainConfig, only=("device",), title="device")
    return parser


def read_sentences(path: Path, column: str | None = None) -> list[str]:
    """The sentences of ``path``: its non-empty lines (.txt), or one column of a CSV file."""
    if not path.is_file():
        raise DataError(f"--input {path}: no such file")
    text = read_utf8(path)
    if path.suffix.lower() not in (".csv", ".tsv"):
        if column is not None:
            raise ValueError(f"--column applies to .csv/.tsv files, not {path.name}")
        sentences = [line for _, line in text_lines(text)]
    else:
        records = csv_records(path, text, guess_delimiter(path))   # as the run's readers read a file
        line, header = next(records, (1, []))
        if isinstance(header, BadRow):
            raise DataError(f"{path}, line {line}: header row: {header.reason}")
        header = [name.strip() for name in header]
        column = column or "sentence"
        if column not in header:
            raise DataError(f"{path}: no column {column!r} (columns: {header}); choose one with --column")
        index = header.index(column)
        sentences = []
        for line, row in records:
            if isinstance(row, BadRow):
                raise DataError(f"{path}, line {line}: {row.reason}")
            if not row:  # a blank line
                continue
            if len(row) > len(header):
                raise DataError(f"{path}, line {line}: {len(row)} fields, header has {len(header)}; a comma inside an "
                                'unquoted sentence splits it: quote the field ("..."), or give a .txt file')
            if len(row) <= index or not row[index].strip():
                raise DataError(f"{path}, line {line}, field {column}: empty or missing sentence")
            sentences.append(row[index].strip())
    if not sentences:
        raise DataError(f"{path}: no sentences")
    return sentences


def text_lines(text: str) -> list[tuple[int, str]]:
    """The non-empty lines of a .txt file's ``text``, stripped, each with its line number (1-based, as an editor
    counts: ``\\n``, ``\\r\\n`` or ``\\r`` ends a line): what ``embed`` and ``predict`` read from a .txt file."""
    return [(number, line.strip()) for number, line in enumerate(re.split(r"\r\n|\r|\n", text), start=1)
            if line.strip()]


if __name__ == "__main__":
    from training.tools.starting import python_handlers_back
    python_handlers_back()
    sys.exit(main())
