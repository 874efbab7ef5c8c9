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
    assert json.loads((out / "sst-reviews-metrics.json").read_text(encoding="utf-8"))["scores"] == {}


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
    (out / "sst-gone-output.csv").write_text("")   # refused without --overwrite: the missing file comes first
    for name in ("gone.txt", "gone.csv"):
        assert predict.main([str(run_dir), "--input", str(tmp_path / name), "--task", "sst", "--out", str(out)]) == 1
        assert capsys.readouterr().err.strip() == f"error: --input {tmp_path / name}: no such file"


def test_several_files_predicted_into_one_out_keep_their_own_files_and_records(run_dir, tmp_path, capsys):
    """Issue 87: docs/outputs.md predicts reviews.txt, then pairs.txt, into one --out, and the second was refused
    (metrics.json: already exists). Each file's CSV and record are named for the task and the file now; the same
    file again is refused naming both, --overwrite replaces them alone, and the report lists no run there."""
    from training.tools.report import read_runs
    reviews, pairs = tmp_path / "reviews.txt", tmp_path / "pairs.txt"
    reviews.write_text("\n".join(REVIEWS) + "\n", encoding="utf-8")
    pairs.write_text("".join(f"{a}\t{b}\n" for a, b in PAIRS), encoding="utf-8")
    out = tmp_path / "predictions" / "preds"

    def command(path: Path, task: str, *extra: str) -> list[str]:
        return [str(run_dir), "--input", str(path), "--task", task, "--out", str(out), *extra]

    assert predict.main(command(reviews, "sst")) == 0
    assert predict.main(command(pairs, "qqp")) == 0
    assert sorted(p.name for p in out.iterdir()) == ["para-pairs-metrics.json", "para-pairs-output.csv",
                                                     "sst-reviews-metrics.json", "sst-reviews-output.csv"]
    run = load_run(run_dir)
    sst = read_csv(out / "sst-reviews-output.csv")
    assert [row["sentence"] for row in sst] == REVIEWS
    assert [int(row["Predicted_Sentiment"]) for row in sst] == run.predict("sst", REVIEWS).tolist()
    para = read_csv(out / "para-pairs-output.csv")
    assert [(row["sentence1"], row["sentence2"]) for row in para] == PAIRS
    assert [int(row["Predicted_Is_Paraphrase"]) for row in para] == run.predict("qqp", PAIRS).tolist()
    records = {name: json.loads((out / f"{name}-metrics.json").read_text(encoding="utf-8"))
               for name in ("sst-reviews", "para-pairs")}
    assert records["sst-reviews"] == {"run": str(run.source), "input": str(reviews.resolve()), "task": "sst",
                                      "columns": ["sentence"], "label_column": None, "scores": {}}
    assert records["para-pairs"] == {"run": str(run.source), "input": str(pairs.resolve()), "task": "qqp",
                                     "columns": ["sentence1", "sentence2"], "label_column": None, "scores": {}}

    before = {p.name: p.read_bytes() for p in out.iterdir()}
    capsys.readouterr()
    assert predict.main(command(reviews, "sst")) == 1   # the same file again would replace its two files
    assert capsys.readouterr().err.strip() == (
        f"error: {out / 'sst-reviews-output.csv'}: already exists (and sst-reviews-metrics.json beside it); "
        "pass --overwrite to replace them, or choose another --out")
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before

    labelled = tmp_path / "reviews.csv"   # the same stem: the same two files, replaced with --overwrite
    with open(labelled, "w", encoding="utf-8", newline="") as f:
        csv.writer(f).writerows([["id", "sentence", "sentiment"], ["a", REVIEWS[0], 4], ["b", REVIEWS[1], 0]])
    assert predict.main(command(labelled, "sst")) == 1
    assert "already exists" in capsys.readouterr().err
    assert predict.main(command(labelled, "sst", "--overwrite")) == 0
    expected = run.predict("sst", REVIEWS[:2]).tolist()
    sst = read_csv(out / "sst-reviews-output.csv")
    assert [row["id"] for row in sst] == ["a", "b"]
    assert [int(row["Predicted_Sentiment"]) for row in sst] == expected
    record = json.loads((out / "sst-reviews-metrics.json").read_text(encoding="utf-8"))
    assert record["input"] == str(labelled.resolve()) and record["label_column"] == "sentiment"
    assert record["scores"] == {"reviews.csv": pytest.approx(sum(p == g for p, g in zip(expected, [4, 0])) / 2)}
    assert {name: (out / name).read_bytes() for name in ("para-pairs-metrics.json", "para-pairs-output.csv")} == \
        {name: before[name] for name in ("para-pairs-metrics.json", "para-pairs-output.csv")}   # left as they were
    assert len(list(out.iterdir())) == 4
    assert read_runs(tmp_path / "predictions") == []   # a folder of predict's files is no run of the report


def test_input_never_writes_beside_a_metrics_json_predict_did_not_write(run_dir, tmp_path, capsys):
    """--input no longer writes metrics.json, so an --out holding a run's (a run stopped before its checkpoint/)
    is refused as it is: predictions would go into the run's folder. --overwrite replaces predict's records alone."""
    sentences = tmp_path / "reviews.txt"
    sentences.write_text(REVIEWS[0] + "\n", encoding="utf-8")
    out = tmp_path / "stopped-run"
    out.mkdir()
    (out / "metrics.json").write_text(json.dumps({"run_name": "stopped-run", "status": "interrupted"}))
    argv = [str(run_dir), "--input", str(sentences), "--task", "sst", "--out", str(out)]
    capsys.readouterr()
    for extra in ([], ["--overwrite"]):
        assert predict.main(argv + extra) == 1
        assert "its metrics.json was not written by predict" in capsys.readouterr().err
    (out / "metrics.json").unlink()
    (out / "sst-reviews-metrics.json").write_text("mine\n")
    assert predict.main(argv + ["--overwrite"]) == 1
    assert "its sst-reviews-metrics.json was not written by predict" in capsys.readouterr().err
    assert sorted(p.name for p in out.iterdir()) == ["sst-reviews-metrics.json"]
    assert (out / "sst-reviews-metrics.json").read_text() == "mine\n"


def test_the_report_skips_a_folder_of_input_predictions_and_lists_the_runs_beside_it(tmp_path):
    """The README's smoke predicts into predictions/smoke-reviews: its files are named for the input now, with no
    metrics.json, and the report must still not list the folder as a run."""
    from training.tools.report import read_runs
    reviews = tmp_path / "smoke-reviews"
    reviews.mkdir()
    (reviews / "sst-reviews-output.csv").write_text("id,sentence,Predicted_Sentiment,label_name\n1,Fine.,3,positive\n")
    (reviews / "sst-reviews-metrics.json").write_text(json.dumps({"run": "predictions/smoke/checkpoint",
                                                                  "input": "reviews.txt", "task": "sst", "scores": {}}))
    cut = tmp_path / "cut"   # a run stopped before its metrics.json was written: its prediction files make it a row
    cut.mkdir()
    (cut / "sst-dev-output.csv").write_text("id,Predicted_Sentiment\n")
    (cut / "notes-metrics.json").write_text(json.dumps({"status": "mine"}))   # not predict's record
    assert [(row.run, row.status) for row in read_runs(tmp_path)] == [("cut", "incomplete (no metrics.json)")]
