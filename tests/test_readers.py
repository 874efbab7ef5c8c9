"""Tests for training/data/readers.py on small fixture files (tests/fixtures/data and tests/fixtures/bad).

The well-formed fixtures are also read with pandas, as an independent reference for the
quoting rules and the column lookup.
"""
from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from training.data.readers import BadRow, DataError, Example, FileLayout, read_examples, resolve_data_dir

FIXTURES = Path(__file__).parent / "fixtures"
DATA = FIXTURES / "data"
BAD = FIXTURES / "bad"

SST = dict(text_columns=["sentence"], label_column="sentiment", label_type="class", num_classes=5)
QQP = dict(text_columns=["sentence1", "sentence2"], label_column="is_duplicate", label_type="class",
           num_classes=2)
STS = dict(text_columns=["sentence1", "sentence2"], label_column="similarity", label_type="score",
           score_range=(0.0, 5.0))


def unlabelled(spec: dict) -> dict:
    return dict(text_columns=spec["text_columns"], label_column=None)


FIXTURE_FILES = {
    "ids-sst-train.csv": SST, "ids-sst-dev.csv": SST, "ids-sst-test-student.csv": unlabelled(SST),
    "quora-train.csv": QQP, "quora-dev.csv": QQP, "quora-test-student.csv": unlabelled(QQP),
    "sts-train.csv": STS, "sts-dev.csv": STS, "sts-test-student.csv": unlabelled(STS),
}


# --- well-formed files ------------------------------------------------------------------------


def test_sst_train_fixture_reads_every_row_with_int_labels():
    examples, report = read_examples(DATA / "ids-sst-train.csv", FileLayout(**SST))
    assert report.n_rows == 20 and report.bad_rows == [] and len(examples) == 20
    assert {ex.label for ex in examples} == {0, 1, 2, 3, 4}
    assert all(type(ex.label) is int for ex in examples)
    first = examples[0]
    assert isinstance(first, Example) and isinstance(first.id, str) and len(first.id) == 25
    # the release's SST sentences start with a space; it is stripped
    assert first.texts == ("A dull , lifeless mess that wastes every actor on screen .",)
    assert [ex.line for ex in examples] == list(range(2, 22))


@pytest.mark.parametrize("name", sorted(FIXTURE_FILES))
def test_fixture_dir_matches_pandas(name):
    """Ids, stripped sentences and labels agree with pandas' reading of the same file."""
    spec = FIXTURE_FILES[name]
    examples, report = read_examples(DATA / name, FileLayout(**spec))
    frame = pd.read_csv(DATA / name, sep="\t", dtype=str, keep_default_na=False)
    label_column = spec["label_column"]
    if label_column is not None:
        frame = frame[frame[label_column] != ""]
    assert len(examples) == len(frame) == report.n_rows - len(report.bad_rows)
    assert [ex.id for ex in examples] == list(frame["id"])
    for column_index, column in enumerate(spec["text_columns"]):
        assert [ex.texts[column_index] for ex in examples] == [s.strip() for s in frame[column]]
    if label_column is None:
        assert all(ex.label is None for ex in examples)
    else:
        assert [ex.label for ex in examples] == pytest.approx([float(v) for v in frame[label_column]])


def test_test_student_file_with_second_unnamed_column():
    examples, report = read_examples(DATA / "ids-sst-test-student.csv", FileLayout(["sentence"]))
    assert report.n_rows == 10 and not report.bad_rows
    assert examples[0].texts == ("A clumsy and forgettable sequel .",)
    assert examples[0].label is None
    # the id is the named column, not one of the two unnamed index columns ("1", "0.0")
    assert examples[0].id not in ("1", "0.0") and len(examples[0].id) == 25


def test_doubled_quotes_inside_quoted_fields():
    examples, _ = read_examples(BAD / "sst_bad_rows.csv", FileLayout(**SST))
    by_id = {ex.id: ex for ex in examples}
    assert by_id["sst7"].texts == ('He said "wow" , twice .',)
    qqp, _ = read_examples(DATA / "quora-train.csv", FileLayout(**QQP))
    assert ('What does "break a leg" mean?', 'What is the meaning of the phrase "break a leg"?') in [
        ex.texts for ex in qqp
    ]


def test_labelled_file_read_without_label_column():
    examples, report = read_examples(DATA / "sts-dev.csv", FileLayout(["sentence1", "sentence2"]))
    assert len(examples) == 10 and all(ex.label is None for ex in examples)


def test_crlf_line_endings_and_blank_lines():
    examples, report = read_examples(BAD / "crlf_blank_lines.csv", FileLayout(**SST))
    assert report.n_rows == 2 and not report.bad_rows
    assert [(ex.id, ex.texts, ex.label, ex.line) for ex in examples] == [
        ("a", ("One .",), 1, 2),
        ("b", ("Two .",), 2, 4),
    ]


# --- bad rows ---------------------------------------------------------------------------------


def test_bad_rows_are_skipped_and_reported_with_line_and_field():
    examples, report = read_examples(BAD / "sst_bad_rows.csv", FileLayout(**SST))
    assert [(ex.id, ex.label, ex.line) for ex in examples] == [("sst0", 4, 2), ("sst7", 3, 9), ("sst8", 1, 10)]
    assert report.n_rows == 11
    got = {b.line: (b.field, b.reason) for b in report.bad_rows}
    expected = {
        3: ("sentiment", "out of range 0..4"),
        4: ("sentiment", "not a number"),
        5: ("sentence", "empty sentence"),
        6: ("sentiment", "too few fields"),
        7: ("sentiment", "empty label"),
        8: ("sentiment", "not a whole number"),
        11: ("row", "5 fields, header has 4"),
        12: ("sentiment", "negative"),
    }
    assert set(got) == set(expected)
    for line, (field, fragment) in expected.items():
        assert got[line][0] == field and fragment in got[line][1], (line, got[line])


def test_summary_lists_five_bad_lines_then_counts_the_rest():
    _, report = read_examples(BAD / "sst_bad_rows.csv", FileLayout(**SST))
    summary = report.summary()
    assert summary.startswith("sst_bad_rows.csv: 11 rows, 8 skipped (line 3: sentiment: ")
    assert summary.count("line ") == 5 and summary.endswith("... and 3 more)")
    assert "\n" not in summary


def test_qqp_fixture_has_one_empty_label():
    examples, report = read_examples(DATA / "quora-train.csv", FileLayout(**QQP))
    assert len(examples) == 20 and report.n_rows == 21
    assert report.bad_rows == [BadRow(7, "is_duplicate", "empty label")]
    assert report.summary() == "quora-train.csv: 21 rows, 1 skipped (line 7: is_duplicate: empty label)"
    assert {ex.label for ex in examples} == {0, 1}


def test_qqp_float_class_labels():
    examples, report = read_examples(BAD / "quora_labels.csv", FileLayout(**QQP))
    assert [(ex.id, ex.label) for ex in examples] == [("q0", 1), ("q1", 0)]
    assert all(type(ex.label) is int for ex in examples)
    got = {b.line: (b.field, b.reason) for b in report.bad_rows}
    assert got == {
        4: ("is_duplicate", "class label 2.0 out of range 0..1"),
        5: ("is_duplicate", "class label 0.5 is not a whole number"),
        6: ("is_duplicate", "empty label"),
        7: ("sentence2", "empty sentence"),
    }


def test_sts_scores_are_floats_in_range():
    examples, report = read_examples(BAD / "sts_scores.csv", FileLayout(**STS))
    assert [ex.label for ex in examples] == [5.0, 0.0, 3.6]
    assert all(type(ex.label) is float for ex in examples)
    got = {b.line: b.reason for b in report.bad_rows}
    assert set(got) == {5, 6, 7, 8}
    assert "outside [0.0, 5.0]" in got[5] and "outside" in got[6]
    assert "not a number" in got[7] and "not a finite number" in got[8]


def test_strict_mode_raises_on_first_bad_row():
    path = BAD / "sst_bad_rows.csv"
    with pytest.raises(DataError) as err:
        read_examples(path, FileLayout(**SST), strict=True)
    assert str(err.value) == f"{path}, line 3, field sentiment: class label 7 out of range 0..4"


def test_strict_mode_accepts_a_clean_file():
    examples, report = read_examples(DATA / "sts-train.csv", FileLayout(**STS), strict=True)
    assert len(examples) == 16 and not report.bad_rows


def test_malformed_quoting_skips_only_that_row():
    examples, report = read_examples(BAD / "malformed_quote.csv", FileLayout(**SST))
    assert [(ex.id, ex.line) for ex in examples] == [("a", 2), ("c", 4)]
    assert len(report.bad_rows) == 1 and report.bad_rows[0].line == 3
    assert "malformed quoting" in report.bad_rows[0].reason


# --- file-level errors: one line, naming the file ---------------------------------------------


def one_line_error(path, **spec) -> str:
    with pytest.raises(DataError) as err:
        read_examples(path, FileLayout(**spec))
    message = str(err.value)
    assert "\n" not in message and Path(path).name in message
    return message


def test_missing_file():
    message = one_line_error(DATA / "no-such-file.csv", **SST)
    assert message.startswith("data file not found: ")
    assert "--data_dir" in message and "MINBERT_DATA" in message


def test_missing_column_names_it_and_the_columns_found():
    message = one_line_error(DATA / "ids-sst-test-student.csv", **SST)
    assert "missing column 'sentiment'" in message
    assert "'id'" in message and "'sentence'" in message


def test_empty_file():
    assert "file is empty" in one_line_error(BAD / "empty.csv", **SST)


def test_header_only_file():
    assert "no data rows" in one_line_error(BAD / "header_only.csv", **SST)


def test_non_utf8_byte_names_the_line():
    message = one_line_error(BAD / "not_utf8.csv", **SST)
    assert "line 3" in message and "UTF-8" in message and "0xe9" in message


def test_unclosed_quote_names_the_line():
    message = one_line_error(BAD / "unclosed_quote.csv", **SST)
    assert "line 3" in message and "never closed" in message


# --- resolve_data_dir -------------------------------------------------------------------------


@pytest.fixture
def dirs(tmp_path, monkeypatch):
    """A cli dir, an env dir and a ./data under a fresh cwd, each holding one marker file."""
    made = {}
    for name in ("cli", "env", "cwd/data"):
        d = tmp_path / name
        d.mkdir(parents=True)
        (d / "ids-sst-train.csv").write_text("x")
        made[name] = d
    monkeypatch.chdir(tmp_path / "cwd")
    monkeypatch.delenv("MINBERT_DATA", raising=False)
    return made


def test_cli_value_wins_over_env(dirs, monkeypatch):
    monkeypatch.setenv("MINBERT_DATA", str(dirs["env"]))
    assert resolve_data_dir(str(dirs["cli"]), ["ids-sst-train.csv"]) == dirs["cli"]


def test_env_used_without_cli(dirs, monkeypatch):
    monkeypatch.setenv("MINBERT_DATA", str(dirs["env"]))
    assert resolve_data_dir(None, ["ids-sst-train.csv"]) == dirs["env"]


def test_default_is_data_under_cwd(dirs):
    found = resolve_data_dir(None, ["ids-sst-train.csv"])
    assert found.resolve() == dirs["cwd/data"].resolve()


def test_bad_cli_value_does_not_fall_back(dirs, monkeypatch):
    monkeypatch.setenv("MINBERT_DATA", str(dirs["env"]))
    with pytest.raises(DataError) as err:
        resolve_data_dir(str(dirs["cli"] / "nope"))
    assert "from --data_dir" in str(err.value) and "nope" in str(err.value)


def test_missing_required_file_names_file_dir_and_source(dirs, monkeypatch):
    monkeypatch.setenv("MINBERT_DATA", str(dirs["env"]))
    with pytest.raises(DataError) as err:
        resolve_data_dir(None, ["ids-sst-train.csv", "sts-dev.csv", "quora-dev.csv"])
    message = str(err.value)
    assert "sts-dev.csv" in message and "quora-dev.csv" not in message
    assert str(dirs["env"]) in message and "from MINBERT_DATA" in message
    assert "--data_dir" in message  # says how to supply data


def test_missing_default_dir(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MINBERT_DATA", raising=False)
    with pytest.raises(DataError) as err:
        resolve_data_dir(None)
    assert "default ./data" in str(err.value)


def test_fixture_dir_holds_every_task_file():
    assert resolve_data_dir(str(DATA), sorted(FIXTURE_FILES)) == DATA


def test_a_file_that_lost_its_newlines_gives_a_short_error(tmp_path):
    """The whole file is one header line: the error quotes at most about 200 characters of it."""
    text = (DATA / "ids-sst-train.csv").read_text()
    flat = tmp_path / "ids-sst-train.csv"
    flat.write_text(text.replace("\n", " ") + "\n")
    with pytest.raises(DataError) as caught:
        read_examples(flat, FileLayout(**SST))
    message = str(caught.value)
    assert "missing column" in message and len(message) < 400 < len(text)
    long_label = tmp_path / "long-label.csv"
    long_label.write_text("id\tsentence\tsentiment\n1\tok\t" + "x" * 5000 + "\n")
    examples, report = read_examples(long_label, FileLayout(**SST))
    assert not examples and len(report.bad_rows[0].reason) < 300 and "characters)" in report.bad_rows[0].reason
