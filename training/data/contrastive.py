"""Inputs for the SimCSE stages (Gao et al., 2021, "SimCSE: Simple Contrastive Learning of Sentence
Embeddings"): single sentences for unsupervised SimCSE (Sec. 3) and (anchor, positive, hard
negative) triples for supervised SimCSE (Sec. 4, the NLI ``sent0, sent1, hard_neg`` format).

Every function returns ``list[Example]`` with ``label=None``, so ``make_loader`` batches them unchanged
(a triple gives ``inputs == [enc_sent0, enc_sent1, enc_hard_neg]``). Ids are ``"L<line>"`` for rows read
from a file and ``"i<k>"`` for the k-th generated item (``line`` is 0: not from a file).

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
    """One sentence per line (UTF-8), stripped; blank lines and lines shorter than ``min_chars`` are skipped."""
    path = Path(path)
    lines = enumerate((raw.strip() for raw in read_utf8(path).split("\n")), start=1)  # "\r" goes with strip()
    examples = [Example(id=f"L{line}", texts=(sentence,), label=None, line=line)
                for line, sentence in lines if sentence and len(sentence) >= min_chars]
    if not examples:
        what = "no sentences" if min_chars <= 1 else f"no sentences of at least {min_chars} characters"
        raise DataError(f"{path}: {what} (expected one sentence per line)")
    return examples


def read_triples(path: str | Path, strict: bool = False) -> tuple[list[Example], ReadReport]:
    """A SimCSE NLI-style CSV: comma-separated, standard ``"`` quoting, a header naming ``sent0``, ``sent1``,
    ``hard_neg`` (other columns ignored); its triples and, as ``read_examples``, a report of the skipped rows
    (``strict``: the first refused)."""
    return read_table(Path(path), ",", TRIPLE_COLUMNS, f"a header row {','.join(TRIPLE_COLUMNS)}", _parse_triple,
                      strict)


def sentences_from_examples(*example_lists: Iterable[Example]) -> list[Example]:
    """Every text of every example, in order, first occurrence kept (exact string matches): the default
    corpus for unsupervised SimCSE."""
    seen = dict.fromkeys(text for examples in example_lists for example in examples for text in example.texts)
    return [Example(id=f"i{k}", texts=(s,), label=None, line=0) for k, s in enumerate(seen)]


def triples_from_pairs(qqp: Sequence[Example], sts: Sequence[Example], sts_min_score: float = 4.0, seed: int = 0,
                       log: Callable[[str], None] | None = None) -> list[Example]:
    """Supervised-SimCSE triples (anchor, positive, hard negative) built from the labelled pairs:

    1. Positives ``(a, p)``, as given: the QQP pairs labelled 1, then the STS pairs scored ``>= sts_min_score``
       (file order); a pair of two identical sentences is dropped.
    2. Hard negative, *related* if possible: the first sentence that a QQP label-0 pair (file order) pairs
       with ``a``, else with ``p``, other than ``a`` and ``p``: a question annotators judged NOT a paraphrase,
       the closest thing to an NLI contradiction this data has.
    3. Otherwise a *random* one: drawn uniformly (``random.Random(seed)``, in positive order) from the distinct
       sentences of the QQP label-0 pairs in order of first appearance, redrawn while it equals ``a`` or ``p``.

    ``log``, if given, gets one summary line. Raises ``DataError`` if an input example is not a labelled pair,
    or if a random hard negative is needed but QQP has no label-0 sentence other than ``a`` and ``p``.
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
        if index[name] >= len(row):
            return BadRow(line, name, f"too few fields (got {len(row)}, header has {len(header)})")
        texts.append(row[index[name]].strip())
        if not texts[-1]:
            return BadRow(line, name, "empty sentence")
    return Example(id=f"L{line}", texts=tuple(texts), label=None, line=line)

