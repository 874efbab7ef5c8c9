"""Defects found using a trained run after training: predict --data_dir leaves no half-written output when a
later file cannot be read; embed reads a CSV as the run's readers do (blank lines skipped, line numbers as an
editor counts them, an unclosed quote an error rather than rows merged into one sentence); load_run(...).predict
of no inputs gives float32 as it does for some, refuses a batch size of 0 and names a regression's own range."""
import dataclasses
import shutil

import numpy as np
import pytest

from test_predict_embed import FIXTURE_DATA, train
from training import load_run
from training.data.readers import DataError
from training.harness import loaded_run
from training.tools import predict
from training.tools.embed import read_sentences


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory, tiny_model_dir):
    return train(tmp_path_factory.mktemp("inputs"), tiny_model_dir, "inputs", "--no_test_predictions")


def test_predict_writes_nothing_when_a_later_file_of_the_data_folder_cannot_be_read(run_dir, tmp_path, capsys):
    data = tmp_path / "data"
    shutil.copytree(FIXTURE_DATA, data)
    with open(data / "sts-dev.csv", "ab") as f:
        f.write(b"\xe9")   # not UTF-8: read after the SST and QQP files
    out = tmp_path / "out"
    assert predict.main([str(run_dir), "--data_dir", str(data), "--out", str(out)]) == 1
    assert "sts-dev.csv, line 12: not valid UTF-8" in capsys.readouterr().err
    assert not out.exists() or not any(out.iterdir())
    assert predict.main([str(run_dir), "--data_dir", str(FIXTURE_DATA), "--out", str(out)]) == 0   # no --overwrite


def test_embed_skips_the_blank_lines_of_a_csv(tmp_path):
    path = tmp_path / "s.csv"
    path.write_text("id,sentence\na1,Good.\n\na2,Bad.\n\n", encoding="utf-8")
    assert read_sentences(path) == ["Good.", "Bad."]


def test_embed_names_the_line_of_a_bad_csv_row_after_a_quoted_line_break(tmp_path):
    path = tmp_path / "s.csv"
    path.write_text('id,sentence\na1,"Good,\nvery good."\na2,\n', encoding="utf-8")
    with pytest.raises(DataError, match=r"s\.csv, line 4, field sentence: empty or missing sentence"):
        read_sentences(path)


def test_embed_refuses_an_unclosed_quote_instead_of_merging_the_rows_after_it(tmp_path):
    path = tmp_path / "s.csv"
    path.write_text('id,sentence\na1,"Good\na2,Bad.\na3,Fine.\n', encoding="utf-8")
    with pytest.raises(DataError, match=r"s\.csv, line 2: quoted field is never closed"):
        read_sentences(path)


def test_load_run_predicts_no_inputs_as_float32_like_some(run_dir):
    run = load_run(run_dir)
    pairs = [("A man plays.", "A man is playing.")]
    for task, output in (("sts", "label"), ("sts", "logits"), ("qqp", "probabilities"), ("qqp", "logits")):
        some, none = run.predict(task, pairs, output=output), run.predict(task, [], output=output)
        assert some.dtype == none.dtype == np.float32 and none.shape == (0,)
    assert run.predict("sst", [], output="logits").dtype == np.float32
    assert run.predict("qqp", []).dtype == np.int64


def test_embed_refuses_a_csv_row_split_by_an_unquoted_comma_instead_of_embedding_its_first_part(tmp_path):
    path = tmp_path / "s.csv"
    path.write_text("sentence\nDull, long and boring.\nFine.\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"s\.csv, line 2: 2 fields, header has 1; a comma inside an unquoted"):
        read_sentences(path)


def test_load_run_refuses_a_batch_size_of_0_as_encode_does(run_dir):
    """``predict(..., batch_size=0)`` used the run's batch size without a word, where ``encode`` refuses 0."""
    run = load_run(run_dir)
    for call in (lambda: run.predict("sst", ["Fine."], batch_size=0), lambda: run.encode(["Fine."], batch_size=0)):
        with pytest.raises(ValueError, match="batch_size must be at least 1, got 0"):
            call()


def test_a_regression_s_refusal_of_probabilities_names_its_own_score_range(run_dir, monkeypatch):
    """A declared pair_regression on 1..5 (``--task_file``) asked for probabilities: the error named "the 0..5
    score", STS's range, not the task's."""
    run = load_run(run_dir)
    assert "its label is the 0..5 score" in str(pytest.raises(ValueError, run.predict, "sts", [("a", "b")],
                                                              output="probabilities").value)
    rows = loaded_run.known_tasks(run.config.data)
    rows["sts"] = dataclasses.replace(rows["sts"], score_range=(1.0, 5.0))
    monkeypatch.setattr(loaded_run, "known_tasks", lambda data: rows)
    with pytest.raises(ValueError, match=r"sts is a regression: its label is the 1\.\.5 score"):
        run.predict("sts", [("a", "b")], output="probabilities")
