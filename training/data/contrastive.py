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

from .readers import BadRow, DataError, Example, ReadReport, read_table, read_utf8

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
    return read_table(Path(path), ",", TRIPLE_COLUMNS, f"a header row {','.join(TRIPLE_COLUMNS)}", _parse_triple)


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
        # rule 2: a QQP non-paraphrase of the anchor, else of the positive
        negative = next((other for s in (a, p) for other in related.get(s, ()) if other not in (a, p)), None)
        if negative is not None:
            n_related += 1
        elif len(pool) - (a in related) - (p in related) <= 0:  # a != p, so nothing else to draw
            raise DataError("triples_from_pairs: no QQP pair labelled 0 offers a hard negative other than the "
                            "pair itself; give QQP pairs with label 0")
        while negative is None or negative in (a, p):  # rule 3: a seeded uniform draw from the pool
            negative = pool[rng.randrange(len(pool))]
        triples.append(Example(id=f"i{len(triples)}", texts=(a, p, negative), label=None, line=0))
    if log is not None:
        log(f"supervised SimCSE triples: {len(triples)} ({len(qqp_positives)} QQP paraphrases, "
            f"{len(sts_positives)} STS pairs with score >= {sts_min_score}); hard negatives: "
            f"{n_related} related (QQP non-paraphrases), {len(triples) - n_related} random")
    return triples


def _parse_triple(row: list[str], line: int, header: list[str], index: dict[str, int]) -> Example | BadRow:
    """One CSV record as a triple, or the first problem with it."""
    if len(row) > len(header):
        return BadRow(line, "row", f"{len(row)} fields, header has {len(header)}")
    texts = []
    for name in TRIPLE_COLUMNS:
        i = index[name]
        if i >= len(row):
            return BadRow(line, name, f"too few fields (got {len(row)}, header has {len(header)})")
        text = row[i].strip()
        if not text:
            return BadRow(line, name, "empty sentence")
        texts.append(text)
    return Example(id=f"L{line}", texts=tuple(texts), label=None, line=line)

