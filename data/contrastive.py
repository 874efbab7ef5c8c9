"""Inputs for the SimCSE stages (Gao et al., 2021, "SimCSE: Simple Contrastive Learning of Sentence
Embeddings"): single sentences for unsupervised SimCSE (Sec. 3) and (anchor, positive, hard
negative) triples for supervised SimCSE (Sec. 4, the NLI ``sent0, sent1, hard_neg`` format).

Every function returns ``list[Example]`` with ``label=None``, so ``make_loader`` batches them
unchanged: a one-text Example gives ``inputs == [enc]``, a triple gives
``inputs == [enc_sent0, enc_sent1, enc_hard_neg]``. Ids are ``"L<line>"`` for rows read from a
file (``line`` is that line) and ``"i<k>"`` for the k-th generated item (``line`` is 0: not from a file).

No Wikipedia or NLI corpus is available here, so the defaults are built from the task files:
``sentences_from_examples`` (every training sentence once) and ``triples_from_pairs`` (QQP / STS
positives with QQP non-paraphrases as hard negatives).
"""
from __future__ import annotations

import random
from pathlib import Path
from typing import Callable, Iterable, Sequence

from .readers import BadRow, DataError, Example, ReadReport, column_indices, csv_records, read_utf8

TRIPLE_COLUMNS = ("sent0", "sent1", "hard_neg")


def read_sentences(path: str | Path, min_chars: int = 1) -> list[Example]:
    """One sentence per line (UTF-8): strip whitespace, skip blank lines and lines shorter than
    ``min_chars`` characters; each kept line becomes ``Example("L<line>", (sentence,), None, line)``.
    A missing file, non-UTF-8 bytes, or a file with no kept sentence raises a one-line ``DataError``.
    """
    path = Path(path)
    examples = []
    for line, raw in enumerate(read_utf8(path).split("\n"), start=1):  # "\r" goes with strip()
        sentence = raw.strip()
        if sentence and len(sentence) >= min_chars:
            examples.append(Example(id=f"L{line}", texts=(sentence,), label=None, line=line))
    if not examples:
        what = "no sentences" if min_chars <= 1 else f"no sentences of at least {min_chars} characters"
        raise DataError(f"{path}: {what} (expected one sentence per line)")
    return examples


def read_triples(path: str | Path) -> tuple[list[Example], ReadReport]:
    """Read a SimCSE NLI-style CSV: comma-separated, standard ``"`` quoting, a header naming the
    columns ``sent0``, ``sent1``, ``hard_neg`` (found by name; other columns are ignored).

    Returns the triples ``Example("L<line>", (sent0, sent1, hard_neg), None, line)`` and, as
    ``read_examples`` does, a ``ReadReport`` of the skipped rows (an empty field, too few / too many
    fields, bad quoting). A missing or empty file, non-UTF-8 bytes, a missing column, or a header
    with no data rows raise ``DataError``.
    """
    path = Path(path)
    rows = csv_records(path, read_utf8(path), delimiter=",")
    header_line, header = next(rows, (0, None))
    if not header:
        raise DataError(f"{path}: file is empty (expected a header row {','.join(TRIPLE_COLUMNS)})")
    if isinstance(header, BadRow):
        raise DataError(f"{path}, line {header_line}: header row: {header.reason}")
    index = column_indices(path, header, TRIPLE_COLUMNS)
    examples: list[Example] = []
    report = ReadReport(path=path, n_rows=0)
    for line, row in rows:
        if not row:  # blank line
            continue
        report.n_rows += 1
        parsed = row if isinstance(row, BadRow) else _parse_triple(row, line, len(header), index)
        if isinstance(parsed, BadRow):
            report.bad_rows.append(parsed)
        else:
            examples.append(parsed)
    if report.n_rows == 0:
        raise DataError(f"{path}: header only, no data rows")
    return examples, report


def sentences_from_examples(*example_lists: Iterable[Example]) -> list[Example]:
    """Every text of every example, first occurrence kept, in order (lists in argument order,
    texts of one example in column order): the default corpus for unsupervised SimCSE.

    Duplicates are exact string matches (the readers have already stripped whitespace).
    Returns ``Example("i<k>", (sentence,), None, 0)`` for k = 0, 1, ...
    """
    seen = dict.fromkeys(text for examples in example_lists for example in examples for text in example.texts)
    return [Example(id=f"i{k}", texts=(s,), label=None, line=0) for k, s in enumerate(seen)]


def triples_from_pairs(qqp: Sequence[Example], sts: Sequence[Example], sts_min_score: float = 4.0, seed: int = 0,
                       log: Callable[[str], None] | None = None) -> list[Example]:
    """Supervised-SimCSE triples (anchor, positive, hard negative) built from the labelled pairs.

    The rule, exactly:

    1. Positives, in this order: every QQP pair ``(a, p)`` with label 1 (file order), then every
       STS pair ``(a, p)`` with score ``>= sts_min_score`` (file order). Each pair is used once,
       as given (sentence1 is the anchor). A pair whose two sentences are identical is dropped.
    2. Hard negative of ``(a, p)``, *related* if possible: the QQP label-0 pairs are scanned in
       file order and, for each sentence, the other sentences of the label-0 pairs it appears in
       are listed. The hard negative is the first sentence on ``a``'s list that is neither ``a``
       nor ``p``; if there is none, the first such sentence on ``p``'s list. It is a question
       that annotators judged NOT a paraphrase of the anchor (or of its positive): the closest
       thing to an NLI contradiction this data has.
    3. Otherwise a *random* one: a sentence drawn uniformly from the distinct sentences of the
       QQP label-0 pairs (listed in order of first appearance) with ``random.Random(seed)``,
       redrawn while it equals ``a`` or ``p``. Draws happen in positive order, so the result is
       deterministic for a given ``seed`` and input lists.

    Returns ``Example("i<k>", (a, p, hard_negative), None, 0)``. With ``log`` given, one summary
    line is passed to it (positives per source, related vs random hard negatives).
    Raises ``DataError`` if an input example is not a labelled pair, or if a random hard negative
    is needed but QQP has no label-0 sentence other than ``a`` and ``p``.
    """
    for name, examples in (("QQP", qqp), ("STS", sts)):
        for ex in examples:
            if len(ex.texts) != 2 or ex.label is None:
                raise DataError(f"triples_from_pairs: {name} example {ex.id} (line {ex.line}) is not a "
                                "labelled sentence pair")

    related: dict[str, list[str]] = {}  # sentence -> other sides of its QQP label-0 pairs
    for ex in qqp:
        if ex.label == 0:
            s1, s2 = ex.texts
            related.setdefault(s1, []).append(s2)
            related.setdefault(s2, []).append(s1)
    pool = list(related)  # distinct label-0 sentences, in order of first appearance
    qqp_positives = [ex.texts for ex in qqp if ex.label == 1 and len(set(ex.texts)) == 2]
    sts_positives = [ex.texts for ex in sts if ex.label >= sts_min_score and len(set(ex.texts)) == 2]

    rng = random.Random(seed)
    triples: list[Example] = []
    n_related = 0
    for a, p in qqp_positives + sts_positives:
        negative = _related_negative(a, p, related)
        if negative is None:
            negative = _random_negative(a, p, pool, related, rng)
        else:
            n_related += 1
        triples.append(Example(id=f"i{len(triples)}", texts=(a, p, negative), label=None, line=0))
    if log is not None:
        log(f"supervised SimCSE triples: {len(triples)} ({len(qqp_positives)} QQP paraphrases, "
            f"{len(sts_positives)} STS pairs with score >= {sts_min_score}); hard negatives: "
            f"{n_related} related (QQP non-paraphrases), {len(triples) - n_related} random")
    return triples


def _parse_triple(row: list[str], line: int, n_header: int, index: dict[str, int]) -> Example | BadRow:
    """One CSV record as a triple, or the first problem with it."""
    if len(row) > n_header:
        return BadRow(line, "row", f"{len(row)} fields, header has {n_header}")
    texts = []
    for name in TRIPLE_COLUMNS:
        i = index[name]
        if i >= len(row):
            return BadRow(line, name, f"too few fields (got {len(row)}, header has {n_header})")
        text = row[i].strip()
        if not text:
            return BadRow(line, name, "empty sentence")
        texts.append(text)
    return Example(id=f"L{line}", texts=tuple(texts), label=None, line=line)


def _related_negative(a: str, p: str, related: dict[str, list[str]]) -> str | None:
    """Rule 2 of ``triples_from_pairs``: a QQP non-paraphrase of the anchor, else of the positive."""
    return next((other for sentence in (a, p) for other in related.get(sentence, ()) if other not in (a, p)), None)


def _random_negative(a: str, p: str, pool: list[str], in_pool: dict[str, list[str]], rng: random.Random) -> str:
    """Rule 3 of ``triples_from_pairs``: a seeded uniform draw from ``pool`` (distinct sentences;
    ``in_pool`` has the same keys, for O(1) membership) that is neither ``a`` nor ``p``."""
    if len(pool) - (a in in_pool) - (p in in_pool) <= 0:  # a != p, so nothing else to draw
        raise DataError("triples_from_pairs: no QQP pair labelled 0 offers a hard negative other than the "
                        "pair itself; give QQP pairs with label 0")
    while True:
        candidate = pool[rng.randrange(len(pool))]
        if candidate != a and candidate != p:
            return candidate
