"""Scored sentence-pair files for STS-style evaluation (docs/embeddings.md), read into ``PairSubset``
rows (two sentence lists and the gold scores). ``find_datasets`` takes files or folders; each is one
*dataset*, split into *subsets* (a file is one subset):

- CS224N ``sts-*.csv``: tab-separated, columns ``sentence1``, ``sentence2``, ``similarity``;
- SentEval STS12–16: ``STS.input.<name>.txt`` (tab-separated pairs) + ``STS.gs.<name>.txt`` (a score a
  line; blank = an unscored pair, skipped), either file naming that subset; a folder's ``<name>``s;
- SentEval STS-B ``sts-{train,dev,test}.csv``: no header, no quoting, 7 tab-separated columns genre, file,
  year, id, score, sentence1, sentence2 (extra ones ignored, as SentEval reads them); a folder's splits.
  CS224N files share these names, so a file's layout is told by its content (``file_layout``);
- SICK-R ``SICK_*.txt``: tab-separated, columns ``sentence_A``, ``sentence_B``, ``relatedness_score``;
  a folder's ``SICK*.txt`` files;
- a folder of such folders (SentEval's ``data/downstream/STS``): each subfolder is a dataset.

Malformed rows are skipped and listed in each subset's ``ReadReport``; every failure is a one-line ``DataError``.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Iterator, Sequence

import numpy as np

from .readers import BadRow, DataError, FileLayout, ReadReport, column_indices, read_examples, read_header, read_utf8

STS_INPUT = re.compile(r"^STS\.input\.(.+)\.txt$")
STS_GOLD = re.compile(r"^STS\.gs\.(.+)\.txt$")
SICK_FILE = re.compile(r"^SICK.*\.txt$")
STSB_FILE = re.compile(r"^sts-(train|dev|test)\.csv$")
CS224N_COLUMNS = ("sentence1", "sentence2", "similarity")
SICK_COLUMNS = ("sentence_A", "sentence_B", "relatedness_score")
STSB_COLUMNS = 7   # genre, file, year, id, score, sentence1, sentence2
LAYOUTS_HELP = ("expected a CS224N STS file (columns sentence1, sentence2, similarity), SentEval STS12-16 "
                "files (STS.input.<name>.txt + STS.gs.<name>.txt), SentEval STS-B files (sts-*.csv, no header, "
                "7 tab-separated columns) or SICK-R files (SICK_*.txt with columns sentence_A, sentence_B, "
                "relatedness_score)")


@dataclass
class PairSubset:
    """Scored sentence pairs of one file; ``report`` lists skipped malformed rows."""
    name: str
    first: list[str]
    second: list[str]
    gold: np.ndarray
    report: ReadReport
    unscored: int = 0  # SentEval pairs with a blank gold line

    def describe(self) -> str:
        return self.report.summary() + (f", {self.unscored} unscored pairs skipped" if self.unscored else "")


@dataclass
class PairDataset:
    """One input of ``find_datasets``: a file (one subset) or a folder (a subset per file)."""
    name: str
    path: Path
    layout: str  # "cs224n", "senteval-sts", "senteval-stsb" or "sick"
    subsets: list[PairSubset] = field(default_factory=list)


def find_datasets(paths: Sequence[Path]) -> list[PairDataset]:
    """One ``PairDataset`` per file or folder (a folder of dataset folders expands to each of them)."""
    datasets: list[PairDataset] = []
    for path in map(Path, paths):
        if path.is_dir() and _folder_files(path)[0] is None:
            found = [load_dataset(sub) for sub in _by_name(path.iterdir())
                     if sub.is_dir() and _folder_files(sub)[0] is not None]
            if not found:
                hint = " (to score CS224N CSVs, pass the sts-*.csv files themselves)" if any(path.glob("*.csv")) else ""
                raise DataError(f"{path}: no STS files in this folder or its subfolders{hint}; {LAYOUTS_HELP}")
            datasets.extend(found)
        else:
            datasets.append(load_dataset(path))
    names = [d.name for d in datasets]
    for dataset in datasets:  # two inputs with one name (sts-dev.csv from two folders): use the paths
        if names.count(dataset.name) > 1:
            dataset.name = str(dataset.path)
    return datasets


def load_dataset(path: Path) -> PairDataset:
    """Read one file (one subset) or one SentEval/SICK folder (its files are the subsets)."""
    path = Path(path)
    if not path.exists():
        raise DataError(f"STS data not found: {path}")
    if path.is_dir():
        layout, files = _folder_files(path)
        if layout is None:
            raise DataError(f"{path}: no STS files in this folder; {LAYOUTS_HELP}")
        return PairDataset(path.name, path, layout, [_READERS[layout](p) for p in files])
    if gold := STS_GOLD.match(path.name):
        path = path.with_name(f"STS.input.{gold.group(1)}.txt")
    if STS_INPUT.match(path.name):
        subset = read_senteval_sts(path)
        return PairDataset(f"{path.parent.name}/{subset.name}", path, "senteval-sts", [subset])
    if (layout := file_layout(path)) is not None:
        return PairDataset(path.stem, path, layout, [_READERS[layout](path)])
    header = read_header(path)
    if all(c in header for c in CS224N_COLUMNS[:2]):
        raise DataError(f"{path}: no '{CS224N_COLUMNS[2]}' column: an unlabelled (test) file "
                        "has no gold scores to correlate with")
    raise DataError(f"{path}: unknown layout (header {header}); {LAYOUTS_HELP}")


def file_layout(path: Path) -> str | None:
    """The layout of a scored pair file, told by its first line: a header naming the CS224N or SICK columns,
    or no header but a SentEval STS-B row (at least 7 tab-separated fields, the 5th a number); else None."""
    first = read_header(path)
    if all(c in first for c in CS224N_COLUMNS):
        return "cs224n"
    if all(c in first for c in SICK_COLUMNS):
        return "sick"
    if len(first) >= STSB_COLUMNS and _float(first[4]) is not None:
        return "senteval-stsb"
    return None


def read_stsb(path: Path) -> PairSubset:
    """A SentEval STS-B file (``sts-{train,dev,test}.csv``, layout above), the subset named by its split."""
    path = Path(path)
    split = STSB_FILE.match(path.name)
    pairs = _ScoredPairs(path)
    pairs.read(read_utf8(path).splitlines(), 1, (5, 6, 4), ("sentence1", "sentence2", "score"),
               lambda n: f"{n} tab-separated fields, want {STSB_COLUMNS}")
    return pairs.subset(split.group(1) if split else path.stem)


def read_cs224n_sts(path: Path) -> PairSubset:
    """A CS224N ``sts-*.csv`` (rows with a bad field are skipped and reported)."""
    examples, report = read_examples(path, FileLayout(CS224N_COLUMNS[:2], CS224N_COLUMNS[2], "score"))
    if not examples:
        raise DataError(f"{path}: no usable rows ({report.summary()})")
    return PairSubset(path.stem, [e.texts[0] for e in examples], [e.texts[1] for e in examples],
                      np.array([e.label for e in examples], dtype=np.float64), report)


def read_senteval_sts(input_path: Path) -> PairSubset:
    """``STS.input.<name>.txt`` (a tab-separated pair a line; extra columns ignored) and its ``STS.gs.<name>.txt``
    (a score a line; a blank line marks an unscored pair, skipped as SentEval does)."""
    input_path = Path(input_path)
    match = STS_INPUT.match(input_path.name)
    if not match:
        raise DataError(f"{input_path}: not a SentEval STS input file (STS.input.<name>.txt)")
    gold_path = input_path.with_name(f"STS.gs.{match.group(1)}.txt")
    if not input_path.is_file():
        raise DataError(f"STS input file not found: {input_path}")
    if not gold_path.is_file():
        raise DataError(f"{input_path}: gold-score file {gold_path.name} not found beside it")
    pairs, scores = read_utf8(input_path).splitlines(), read_utf8(gold_path).splitlines()
    if len(pairs) != len(scores):
        raise DataError(f"{input_path} has {len(pairs)} lines but {gold_path.name} has {len(scores)}")
    read, unscored = _ScoredPairs(input_path), 0
    read.report.n_rows = len(pairs)
    for line, (pair, score) in enumerate(zip(pairs, scores), start=1):
        if not score.strip():
            unscored += 1
            continue
        fields = pair.split("\t")
        if len(fields) < 2:
            read.report.bad_rows.append(BadRow(line, "row", f"{len(fields)} tab-separated field(s), want 2"))
        else:
            read.add(line, fields[0], fields[1], score, ("sentence1", "sentence2", "score"))
    if not read.gold:
        raise DataError(f"{input_path}: no scored pairs ({read.report.summary()}, {unscored} unscored)")
    return replace(read.subset(match.group(1)), unscored=unscored)


def read_sick(path: Path) -> PairSubset:
    """A SICK file: tab-separated, its header naming ``SICK_COLUMNS`` among others (ignored)."""
    path = Path(path)
    lines = read_utf8(path).splitlines()
    if not lines or not lines[0].strip():
        raise DataError(f"{path}: file is empty (expected a tab-separated header row)")
    header = lines[0].split("\t")
    index = column_indices(path, header, SICK_COLUMNS)
    pairs = _ScoredPairs(path)
    pairs.read(lines[1:], 2, tuple(index[c] for c in SICK_COLUMNS), SICK_COLUMNS,
               lambda n: f"{n} fields, header has {len(header)}")
    return pairs.subset(path.stem)


class _ScoredPairs:
    """The pairs of a SentEval STS, STS-B or SICK file, or its bad rows naming the file's column."""

    def __init__(self, path: Path):
        self.path = path
        self.first, self.second, self.gold = [], [], []
        self.report = ReadReport(path=path, n_rows=0)

    def read(self, lines: list[str], start: int, at: tuple[int, int, int], columns: Sequence[str], too_few) -> None:
        """Each non-blank line (numbered from ``start``) a row: its tab-separated fields at ``at`` (the two
        sentences, the score), or a bad row saying ``too_few(fields)`` when it has not that many."""
        for line, row in enumerate(lines, start=start):
            if row.strip():
                self.report.n_rows += 1
                fields = row.split("\t")
                if len(fields) <= max(at):
                    self.report.bad_rows.append(BadRow(line, "row", too_few(len(fields))))
                else:
                    self.add(line, *(fields[i] for i in at), columns)

    def add(self, line: int, a: str, b: str, score: str, columns: Sequence[str]) -> None:
        """``columns``: the file's names of the two sentences and the score."""
        a, b, value = a.strip(), b.strip(), _float(score)
        if not a or not b:
            self.report.bad_rows.append(BadRow(line, columns[0] if not a else columns[1], "empty sentence"))
        elif value is None:
            self.report.bad_rows.append(BadRow(line, columns[2], f"{score.strip()!r} is not a number"))
        else:
            self.first.append(a)
            self.second.append(b)
            self.gold.append(value)

    def subset(self, name: str) -> PairSubset:
        if not self.gold:
            raise DataError(f"{self.path}: no usable rows ({self.report.summary()})")
        return PairSubset(name, self.first, self.second, np.array(self.gold, dtype=np.float64), self.report)


# layout -> the reader of one of its files
_READERS = {"cs224n": read_cs224n_sts, "senteval-sts": read_senteval_sts, "senteval-stsb": read_stsb, "sick": read_sick}


def _folder_files(path: Path) -> tuple[str | None, list[Path]]:
    """A folder's layout and its files of that layout (SentEval STS12-16's inputs, SICK's, STS-B's splits)."""
    names = [p.name for p in path.iterdir() if p.is_file()]
    for layout, pattern in (("senteval-sts", STS_INPUT), ("sick", SICK_FILE)):
        if any(pattern.match(n) for n in names):
            return layout, _by_name(p for p in path.iterdir() if pattern.match(p.name))
    # the folder's sts-{train,dev,test}.csv in the SentEval STS-B layout (not CS224N's of the same names)
    files = [path / f"sts-{split}.csv" for split in ("train", "dev", "test")]
    files = [f for f in files if f.is_file() and file_layout(f) == "senteval-stsb"]
    return ("senteval-stsb" if files else None), files


def _by_name(paths: Iterator[Path]) -> list[Path]:
    return sorted(paths, key=lambda p: p.name.lower())


def _float(text: str) -> float | None:
    try:
        value = float(text.strip())
    except ValueError:
        return None
    return value if math.isfinite(value) else None
