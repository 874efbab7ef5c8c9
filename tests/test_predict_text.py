"""Predictions on plain sentences (issue 75): ``training.tools.predict --input`` takes a .txt file, one
sentence (or one tab-separated pair) a line, as ``embed`` does; its output keeps the text and names the
class beside its id (SST's five, QQP's two, a declared task's ``label_names``); a CSV row it cannot read
is an error naming file, line and field unless ``--skip_bad_rows``."""
import csv
import json
import shutil
from pathlib import Path

import pytest

from test_own_tasks import DECLARATION, toy_rows, write_tsv
from test_predict_embed import FIXTURE_DATA, train
from training import load_run
from training.configuration import task_file
from training.configuration import task_declarations
from training.tools import predict

SST_NAMES = ["negative", "somewhat negative", "neutral", "somewhat positive", "positive"]
NLI_NAMES = ["entails", "neutral", "contradicts"]
REVIEWS = ["A gripping, beautiful film.", "Dull, long and, frankly, boring.", "A fine film."]
PAIRS = [("A man plays.", "A man is playing."), ("How old are you?", "What is your age?")]


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory, tiny_model_dir):
    """One run of the three built-in tasks and a declared one with label names (nli, 3 classes)."""
    root = tmp_path_factory.mktemp("text")
    data = root / "data"
    shutil.copytree(FIXTURE_DATA, data)
    write_tsv(data / "nli-train.tsv", toy_rows(16, 1))
    write_tsv(data / "nli-dev.tsv", toy_rows(8, 2))
    declared = root / "tasks.json"
    declared.write_text(json.dumps({"tasks": [{**DECLARATION, "label_names": NLI_NAMES}]}), encoding="utf-8")
    return train(root, tiny_model_dir, "four", "--data_dir", str(data), "--task_file", str(declared),
                 "--tasks", "sst,qqp,sts,nli", "--no_test_predictions")


def read_csv(path: Path) -> list[dict]:
    with open(path, encoding="utf-8", newline="") as f:
        return list(csv.DictReader(f))


def test_a_txt_file_of_sentences_keeps_the_text_and_names_sst_classes(run_dir, tmp_path, capsys):
    sentences = tmp_path / "reviews.txt"
    sentences.write_text("\n".join(REVIEWS[:2]) + "\n\n" + REVIEWS[2] + "\n", encoding="utf-8")   # a blank line
    out = tmp_path / "out"
    assert predict.main([str(run_dir), "--input", str(sentences), "--task", "sst", "--out", str(out)]) == 0
    rows = read_csv(out / "sst-reviews-output.csv")
    assert list(rows[0]) == ["id", "sentence", "Predicted_Sentiment", "label_name"]
    assert [row["sentence"] for row in rows] == REVIEWS and [row["id"] for row in rows] == ["1", "2", "4"]
    expected = load_run(run_dir).predict("sst", REVIEWS)
    assert [int(row["Predicted_Sentiment"]) for row in rows] == expected.tolist()
    assert [row["label_name"] for row in rows] == [SST_NAMES[c] for c in expected]
    assert "3 predictions (sst)" in capsys.readouterr().out
    assert json.loads((out / "metrics.json").read_text(encoding="utf-8"))["scores"] == {}


def test_a_txt_file_of_tab_separated_pairs_for_qqp_and_sts(run_dir, tmp_path):
    pairs = tmp_path / "pairs.txt"
    pairs.write_text("".join(f"{a}\t{b}\r\n" for a, b in PAIRS), encoding="utf-8")
    out = tmp_path / "out"
    run = load_run(run_dir)
    assert predict.main([str(run_dir), "--input", str(pairs), "--task", "qqp", "--out", str(out)]) == 0
    rows = read_csv(out / "para-pairs-output.csv")
    assert list(rows[0]) == ["id", "sentence1", "sentence2", "Predicted_Is_Paraphrase", "label_name"]
    assert [(row["sentence1"], row["sentence2"]) for row in rows] == PAIRS
    expected = run.predict("qqp", PAIRS)
    assert [int(row["Predicted_Is_Paraphrase"]) for row in rows] == expected.tolist()
    assert [row["label_name"] for row in rows] == [["not duplicate", "duplicate"][c] for c in expected]
    assert predict.main([str(run_dir), "--input", str(pairs), "--task", "sts", "--out", str(tmp_path / "sts")]) == 0
    rows = read_csv(tmp_path / "sts" / "sts-pairs-output.csv")
    assert list(rows[0]) == ["id", "sentence1", "sentence2", "Predicted_Similiarity"]   # a score: no name
    assert [float(row["Predicted_Similiarity"]) for row in rows] == pytest.approx(run.predict("sts", PAIRS), abs=1e-4)


def test_a_declared_task_names_its_classes_with_its_label_names(run_dir, tmp_path):
    pairs = tmp_path / "nli.txt"
    pairs.write_text("".join(f"{a}\t{b}\n" for a, b in PAIRS), encoding="utf-8")
    assert predict.main([str(run_dir), "--input", str(pairs), "--task", "nli", "--out", str(tmp_path / "o")]) == 0
    rows = read_csv(tmp_path / "o" / "nli-nli-output.csv")
    assert list(rows[0]) == ["id", "premise", "hypothesis", "Predicted_gold", "label_name"]
    assert [row["label_name"] for row in rows] == [NLI_NAMES[int(row["Predicted_gold"])] for row in rows]
    # the CS224N prediction files a run writes are as before: id and the class, no text or names
    assert (run_dir / "nli-dev-output.csv").read_text().splitlines()[0] == "id,Predicted_gold"
    assert (run_dir / "sst-dev-output.csv").read_text().splitlines()[0] == "id,Predicted_Sentiment"


def test_a_csv_row_that_cannot_be_read_is_an_error_unless_skipped(run_dir, tmp_path, capsys):
    """Issue 75: commas inside unquoted sentences predicted 1 of 3 rows, warned and exited 0."""
    reviews = tmp_path / "reviews.csv"
    reviews.write_text("sentence\n" + "\n".join(REVIEWS) + "\n", encoding="utf-8")
    argv = [str(run_dir), "--input", str(reviews), "--task", "sst", "--out", str(tmp_path / "o")]
    capsys.readouterr()
    assert predict.main(argv) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"{reviews}, line 2, field row: 2 fields, header has 1" in err, err
    assert "--skip_bad_rows" in err and "quote" in err
    assert not (tmp_path / "o").exists()
    assert predict.main(argv + ["--skip_bad_rows"]) == 0
    assert [row["sentence"] for row in read_csv(tmp_path / "o" / "sst-reviews-output.csv")] == [REVIEWS[2]]
    assert "2 skipped (line 2: row: 2 fields, header has 1; line 3" in capsys.readouterr().err
    with open(reviews, "w", encoding="utf-8", newline="") as f:   # quoted, every row reads
        csv.writer(f).writerows([["sentence"], *([r] for r in REVIEWS)])
    assert predict.main(argv + ["--overwrite"]) == 0
    assert [row["sentence"] for row in read_csv(tmp_path / "o" / "sst-reviews-output.csv")] == REVIEWS


def test_a_txt_line_that_is_no_pair_and_csv_flags_on_a_txt_file_are_refused(run_dir, tmp_path, capsys):
    pairs = tmp_path / "pairs.txt"
    pairs.write_text(f"{PAIRS[0][0]}\t{PAIRS[0][1]}\nno tab here\n", encoding="utf-8")
    argv = [str(run_dir), "--input", str(pairs), "--task", "sts", "--out", str(tmp_path / "o")]
    capsys.readouterr()
    assert predict.main(argv) == 1
    assert f"{pairs}, line 2, field sentence2: no tab" in capsys.readouterr().err
    assert predict.main(argv + ["--columns", "a,b"]) == 1
    assert "--columns goes with a CSV/TSV --input" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()
    assert predict.main(argv + ["--skip_bad_rows"]) == 0
    assert len(read_csv(tmp_path / "o" / "sts-pairs-output.csv")) == 1


def test_label_names_are_checked_against_the_classes_and_optional(tmp_path):
    def declare(**fields):
        path = tmp_path / "tasks.json"
        path.write_text(json.dumps({**DECLARATION, **fields}), encoding="utf-8")
        return path

    assert "label_names" not in task_file.read_task_file(declare())[0]   # absent: saved as before
    assert task_file.read_task_file(declare(label_names=[" a", "b", "c"]))[0]["label_names"] == ["a", "b", "c"]
    with pytest.raises(task_declarations.TaskFileError, match=r"field 'label_names': 2 names for 3 classes"):
        task_file.read_task_file(declare(label_names=["yes", "no"]))
    with pytest.raises(task_declarations.TaskFileError, match=r"field 'label_names': a list of 3 distinct"):
        task_file.read_task_file(declare(label_names=["a", "a", "b"]))
    with pytest.raises(task_declarations.TaskFileError, match=r"field 'label_names': a pair_regression predicts a score"):
        task_file.read_task_file(declare(kind="pair_regression", num_classes=None, score_range=[0, 1],
                                         label_names=["low", "high"]))
    assert task_declarations.label_names("sst") == SST_NAMES and task_declarations.label_names("sts") is None


def test_a_missing_input_is_named_first_whatever_its_kind(run_dir, tmp_path, capsys):
    """A missing --input is one line naming it, before the out folder's checks, for a .txt file as for a CSV."""
    out = tmp_path / "out"
    out.mkdir()
    (out / "metrics.json").write_text("{}")   # would be refused without --overwrite: the missing file comes first
    for name in ("gone.txt", "gone.csv"):
        assert predict.main([str(run_dir), "--input", str(tmp_path / name), "--task", "sst", "--out", str(out)]) == 1
        assert capsys.readouterr().err.strip() == f"error: --input {tmp_path / name}: no such file"
