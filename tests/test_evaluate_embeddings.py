"""scripts.evaluate_embeddings: correlations against hand-computed values, the SentEval (STS12-16,
STS-B) / SICK / CS224N readers (data.senteval) on tiny fixture files, the average over datasets, and
main() end to end on a tiny random BERT."""
import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from scipy.stats import pearsonr, spearmanr

from training.data.readers import DataError
from training.data.senteval import file_layout, find_datasets, load_dataset, read_senteval_sts, read_sick, read_stsb
from minbert import BertModel, BertTokenizer
from training.harness.checkpoint import save_checkpoint
from training.configuration.sections import ModelConfig
from training.harness.run_config import RunConfig
from training.learning.encoding import encode
from training.harness.runs import build_model
from training.learning.task_schema import run_tasks
from training.learning.similarity import average_over_datasets, correlations
from scripts.evaluate_embeddings import main, render_table

FIXTURES = Path(__file__).resolve().parent / "fixtures"
SENTEVAL = FIXTURES / "senteval"
STSB = SENTEVAL / "STSBenchmark"
STS_DEV = FIXTURES / "data" / "sts-dev.csv"


# --- correlations: "all" vs the per-subset mean --------------------------------------------------
# Two subsets, each ranked perfectly (Spearman 1 and Pearson 1 within each), but subset b's
# predictions sit higher while its golds sit lower, so pooled together the ranking is poor.
#   a: pred 0.1 0.2 0.3   gold 1 2 3
#   b: pred 0.7 0.8 0.9   gold 0 1 2
# all, Spearman: pred ranks 1..6 (deviations -2.5 -1.5 -0.5 0.5 1.5 2.5); gold 1 2 3 0 1 2 has ranks
#   2.5 4.5 6 1 2.5 4.5 (ties averaged; mean 3.5, deviations -1 1 2.5 -2.5 -1 1):
#   Σxy = -0.5, Σx² = 17.5, Σy² = 16.5  ->  ρ = -0.5 / sqrt(288.75) = -0.0294245
# all, Pearson: pred deviations -0.4 -0.3 -0.2 0.2 0.3 0.4, gold deviations -0.5 0.5 1.5 -1.5 -0.5 0.5:
#   Σxy = -0.5, Σx² = 0.58, Σy² = 5.5  ->  r = -0.5 / sqrt(3.19) = -0.2799471
# mean of the subsets: 1 (Spearman), 1 (Pearson).
SUBSETS = {"a": ([0.1, 0.2, 0.3], [1.0, 2.0, 3.0]), "b": ([0.7, 0.8, 0.9], [0.0, 1.0, 2.0])}


def test_all_and_mean_differ_on_hand_made_example():
    result = correlations(SUBSETS)
    assert result["all"]["spearman"] == pytest.approx(-0.5 / math.sqrt(288.75), abs=1e-9)
    assert result["all"]["spearman"] == pytest.approx(-0.0294245, abs=1e-6)
    assert result["all"]["pearson"] == pytest.approx(-0.5 / math.sqrt(3.19), abs=1e-9)
    assert result["all"]["n"] == 6
    assert result["mean"] == pytest.approx({"spearman": 1.0, "pearson": 1.0})
    assert result["subsets"]["a"] == pytest.approx({"spearman": 1.0, "pearson": 1.0, "n": 3})
    assert result["subsets"]["b"] == pytest.approx({"spearman": 1.0, "pearson": 1.0, "n": 3})


def test_all_agrees_with_scipy_on_the_concatenation():
    pred = np.concatenate([SUBSETS["a"][0], SUBSETS["b"][0]])
    gold = np.concatenate([SUBSETS["a"][1], SUBSETS["b"][1]])
    result = correlations(SUBSETS)
    assert result["all"]["spearman"] == pytest.approx(spearmanr(pred, gold)[0], abs=1e-12)
    assert result["all"]["pearson"] == pytest.approx(pearsonr(pred, gold)[0], abs=1e-12)


def test_weighted_mean_weights_by_subset_size():
    # a, b: Spearman 1 (3 pairs each); c: Spearman -1 (4 pairs)
    subsets = {**SUBSETS, "c": ([1.0, 2.0, 3.0, 4.0], [4.0, 3.0, 2.0, 1.0])}
    result = correlations(subsets)
    assert result["mean"]["spearman"] == pytest.approx(1 / 3)
    assert result["wmean"]["spearman"] == pytest.approx((3 + 3 - 4) / 10)


def test_an_undefined_correlation_is_said_to_be_undefined_and_left_out_of_the_means():
    """A constant side or a single pair has no correlation: None (null in the JSON), "undefined" in
    the table, not 0.00."""
    result = correlations({"flat": ([0.5, 0.5, 0.5], [1.0, 2.0, 3.0]), "ok": ([1.0, 2.0], [1.0, 2.0]),
                           "one": ([0.3], [4.0])})
    assert result["subsets"]["flat"] == {"spearman": None, "pearson": None, "n": 3}
    assert result["subsets"]["one"] == {"spearman": None, "pearson": None, "n": 1}
    assert result["subsets"]["ok"]["spearman"] == pytest.approx(1.0)
    assert result["mean"]["pearson"] == pytest.approx(1.0) and result["wmean"]["pearson"] == pytest.approx(1.0)
    alone = correlations({"one": ([0.3], [4.0])})
    assert alone["all"]["spearman"] is None and alone["mean"]["pearson"] is None
    table = render_table({"one-pair": alone})
    assert "undefined" in table.splitlines()[-1] and "0.00" not in table


def test_correlations_rejects_mismatched_lengths():
    with pytest.raises(ValueError, match="'x'"):
        correlations({"x": ([1.0, 2.0], [1.0, 2.0, 3.0])})


# --- readers ---------------------------------------------------------------------------------


def test_senteval_reader_skips_blank_gold_lines():
    alpha = read_senteval_sts(SENTEVAL / "STS12" / "STS.input.alpha.txt")
    assert alpha.name == "alpha"
    assert alpha.first == ["A man is playing a guitar.", "A dog runs in the park.", "Two children are reading."]
    assert alpha.second == ["A man plays the guitar.", "A cat sleeps on the sofa.", "Kids read books together."]
    np.testing.assert_array_equal(alpha.gold, [4.8, 0.4, 3.2])
    assert alpha.unscored == 1 and not alpha.report.bad_rows


def test_senteval_reader_uses_first_two_columns():
    beta = read_senteval_sts(SENTEVAL / "STS12" / "STS.input.beta.txt")
    assert beta.first[0] == "A woman slices an onion." and beta.second[0] == "A woman is cutting an onion."
    np.testing.assert_array_equal(beta.gold, [5.0, 0.0, 3.6])


def test_senteval_folder_is_one_dataset_with_a_subset_per_file():
    dataset = load_dataset(SENTEVAL / "STS12")
    assert (dataset.name, dataset.layout) == ("STS12", "senteval-sts")
    assert [s.name for s in dataset.subsets] == ["alpha", "beta"]
    # a gold file names the same single subset as its input file
    single = load_dataset(SENTEVAL / "STS12" / "STS.gs.beta.txt")
    assert single.name == "STS12/beta" and [s.name for s in single.subsets] == ["beta"]


def test_senteval_reader_errors(tmp_path):
    (tmp_path / "STS.input.x.txt").write_text("a\tb\nc\td\n", encoding="utf-8")
    with pytest.raises(DataError, match="STS.gs.x.txt not found"):
        read_senteval_sts(tmp_path / "STS.input.x.txt")
    (tmp_path / "STS.gs.x.txt").write_text("1.0\n", encoding="utf-8")
    with pytest.raises(DataError, match="2 lines but STS.gs.x.txt has 1"):
        read_senteval_sts(tmp_path / "STS.input.x.txt")
    (tmp_path / "STS.gs.x.txt").write_text("1.0\nhigh\n", encoding="utf-8")
    subset = read_senteval_sts(tmp_path / "STS.input.x.txt")
    assert subset.first == ["a"] and [(b.line, b.field) for b in subset.report.bad_rows] == [(2, "score")]
    # an empty sentence is a bad row naming its side, as in the other layouts; a blank gold line an unscored pair
    (tmp_path / "STS.input.x.txt").write_text("a\tb\nc\t \ne\tf\n", encoding="utf-8")
    (tmp_path / "STS.gs.x.txt").write_text("1.0\n2.0\n\n", encoding="utf-8")
    subset = read_senteval_sts(tmp_path / "STS.input.x.txt")
    assert subset.second == ["b"] and subset.unscored == 1 and subset.report.n_rows == 3
    assert [(b.line, b.field, b.reason) for b in subset.report.bad_rows] == [(2, "sentence2", "empty sentence")]


def test_sick_reader_finds_columns_by_name():
    test = read_sick(SENTEVAL / "SICK" / "SICK_test_annotated.txt")
    assert test.name == "SICK_test_annotated"
    assert test.first[0] == "A man is riding a horse." and test.second[3] == "Nobody is chasing a mouse."
    np.testing.assert_array_equal(test.gold, [4.7, 1.2, 3.9, 2.5])
    folder = load_dataset(SENTEVAL / "SICK")
    assert folder.layout == "sick" and [s.name for s in folder.subsets] == ["SICK_test_annotated", "SICK_trial"]


def test_sick_reader_names_a_missing_column(tmp_path):
    path = tmp_path / "SICK_x.txt"
    path.write_text("pair_ID\tsentence_A\tsentence_B\tscore\n1\ta\tb\t3\n", encoding="utf-8")
    with pytest.raises(DataError, match="missing column 'relatedness_score'"):
        read_sick(path)


def test_cs224n_file_and_parent_folder_expansion():
    sts = load_dataset(STS_DEV)
    assert (sts.name, sts.layout, len(sts.subsets[0].gold)) == ("sts-dev", "cs224n", 10)
    assert [d.name for d in find_datasets([SENTEVAL])] == ["SICK", "STS12", "STSBenchmark"]


def test_stsb_folder_is_one_dataset_with_its_splits_as_subsets():
    dataset = load_dataset(STSB)
    assert (dataset.name, dataset.layout) == ("STSBenchmark", "senteval-stsb")
    assert [(s.name, len(s.gold)) for s in dataset.subsets] == [("train", 3), ("dev", 3), ("test", 4)]
    train = dataset.subsets[0]
    # columns 6 and 7 are the sentences, column 5 the score; the third row's two extra columns are ignored
    assert train.first == ["A plane is taking off.", "Stocks fell sharply on Monday.", "I think the plan can work."]
    assert train.second[2] == "The plan might work, I believe."
    np.testing.assert_array_equal(train.gold, [5.0, 0.6, 3.2])
    assert not train.report.bad_rows
    single = load_dataset(STSB / "sts-test.csv")
    assert (single.name, single.layout, [s.name for s in single.subsets]) == ("sts-test", "senteval-stsb", ["test"])


def test_sts_dev_csv_layout_is_told_by_content():
    """CS224N's and SentEval's STS-B files share the name sts-dev.csv: header or not, 7 columns or not."""
    assert file_layout(STS_DEV) == "cs224n" and file_layout(STSB / "sts-dev.csv") == "senteval-stsb"
    assert file_layout(SENTEVAL / "SICK" / "SICK_trial.txt") == "sick"
    assert file_layout(FIXTURES / "data" / "ids-sst-dev.csv") is None
    assert load_dataset(STS_DEV).layout == "cs224n" and load_dataset(STSB / "sts-dev.csv").layout == "senteval-stsb"


def test_stsb_reader_skips_and_reports_bad_rows(tmp_path):
    path = tmp_path / "sts-dev.csv"
    path.write_text("g\tf\t2012\t1\t4.0\ta\tb\n"
                    "g\tf\t2012\t2\t3.0\tonly six fields\n"
                    "\n"
                    "g\tf\t2012\t3\thigh\tc\td\n"
                    "g\tf\t2012\t4\t1.0\t \te\n"
                    "g\tf\t2012\t5\t2.5\tf\tg\n", encoding="utf-8")
    subset = read_stsb(path)
    assert subset.name == "dev" and subset.first == ["a", "f"] and subset.second == ["b", "g"]
    np.testing.assert_array_equal(subset.gold, [4.0, 2.5])
    assert [(b.line, b.field) for b in subset.report.bad_rows] == [(2, "row"), (4, "score"), (5, "sentence1")]
    assert subset.report.n_rows == 5


@pytest.mark.parametrize("path, message", [
    (FIXTURES / "nope.csv", "STS data not found"),
    (FIXTURES / "data" / "ids-sst-dev.csv", "unknown layout"),
    (FIXTURES / "data" / "sts-test-student.csv", "no 'similarity' column"),
    (FIXTURES / "data", "pass the sts-\\*.csv files themselves"),
])
def test_unknown_inputs_are_one_line_errors(path, message):
    with pytest.raises(DataError, match=message) as err:
        find_datasets([path])
    assert "\n" not in str(err.value)


# --- encoding and main() on a tiny random BERT -----------------------------------------------


@pytest.fixture(scope="module")
def tiny(tiny_model_dir):
    return BertModel.from_pretrained(tiny_model_dir), BertTokenizer(tiny_model_dir / "vocab.txt")


def _expected_spearman(model, tokenizer, path, pooling="mean"):
    """Independent of main(): encode each pair directly, cosine, scipy."""
    subset = load_dataset(path).subsets[0]
    u = torch.from_numpy(encode(model, tokenizer, subset.first, pooling, batch_size=4))
    v = torch.from_numpy(encode(model, tokenizer, subset.second, pooling, batch_size=4))
    cos = F.cosine_similarity(u, v, dim=-1).numpy()
    return spearmanr(cos, subset.gold)[0], pearsonr(cos, subset.gold)[0]


def test_main_end_to_end_writes_json(tiny, tiny_model_dir, tmp_path, capsys):
    out = tmp_path / "sts.json"
    rc = main(["--model", str(tiny_model_dir), "--data", str(STS_DEV), str(SENTEVAL / "STS12"),
               "--pooling", "mean", "--batch_size", "3", "--out", str(out)])
    assert rc == 0
    report = json.loads(out.read_text(encoding="utf-8"))
    assert report["pooling"] == "mean" and report["reduction"] == "mean" and report["encoder"] == str(tiny_model_dir)
    assert list(report["datasets"]) == ["sts-dev", "STS12"]
    sts = report["datasets"]["sts-dev"]
    assert sts["layout"] == "cs224n" and sts["all"]["n"] == 10 and list(sts["subsets"]) == ["sts-dev"]
    spearman, pearson = _expected_spearman(*tiny, STS_DEV)
    assert sts["all"]["spearman"] == pytest.approx(spearman, abs=1e-6)
    assert sts["all"]["pearson"] == pytest.approx(pearson, abs=1e-5)
    assert sts["mean"]["spearman"] == pytest.approx(spearman, abs=1e-6)  # one subset: all == mean
    sts12 = report["datasets"]["STS12"]
    assert sts12["all"]["n"] == 6 and {k: v["n"] for k, v in sts12["subsets"].items()} == {"alpha": 3, "beta": 3}
    assert sts12["mean"]["spearman"] == pytest.approx(
        (sts12["subsets"]["alpha"]["spearman"] + sts12["subsets"]["beta"]["spearman"]) / 2)
    printed = capsys.readouterr().out
    assert "Spearman all" in printed and "Spearman mean" in printed and "alpha" in printed


def test_main_reads_a_run_checkpoint(tiny_model_dir, tmp_path):
    """A run checkpoint's encoder gives the same numbers as the model it started from (untrained
    here); its heads play no part."""
    config = RunConfig.defaults(model=ModelConfig(model=str(tiny_model_dir)))
    model = build_model(config.model, run_tasks(config), tiny_model_dir)
    save_checkpoint(tmp_path / "run" / "checkpoint", model.state_dict(), model.bert.config, config.to_dict())
    out_ckpt, out_model = tmp_path / "ckpt.json", tmp_path / "model.json"
    assert main(["--checkpoint", str(tmp_path / "run"), "--data", str(STS_DEV), "--pooling", "cls",
                 "--out", str(out_ckpt)]) == 0
    assert main(["--model", str(tiny_model_dir), "--data", str(STS_DEV), "--pooling", "cls",
                 "--out", str(out_model)]) == 0
    from_ckpt = json.loads(out_ckpt.read_text())["datasets"]["sts-dev"]["all"]
    from_model = json.loads(out_model.read_text())["datasets"]["sts-dev"]["all"]
    assert from_ckpt == pytest.approx(from_model, abs=1e-6)


def test_main_errors_are_one_line(tiny_model_dir, tmp_path, capsys):
    assert main(["--model", str(tiny_model_dir), "--data", str(tmp_path / "missing.csv")]) == 1
    assert main(["--checkpoint", str(tmp_path), "--data", str(STS_DEV)]) == 1
    assert main(["--checkpoint", str(tmp_path), "--model", str(tiny_model_dir), "--data", str(STS_DEV)]) == 1
    assert main(["--checkpoint", str(tiny_model_dir), "--data", str(STS_DEV)]) == 1  # a --model, not a run
    errors = capsys.readouterr().err.strip().splitlines()
    assert len(errors) == 4
    assert errors[0].startswith("error: STS data not found")
    assert errors[1].startswith("error: checkpoint file") and "config.json not found" in errors[1]
    assert errors[2] == "error: give --checkpoint or --model, not both"
    assert errors[3].startswith(f"error: {tiny_model_dir}: no run_config.json, so not a run's")


def test_average_row_is_the_plain_mean_over_datasets(tiny_model_dir, tmp_path, capsys):
    out = tmp_path / "sts.json"
    assert main(["--model", str(tiny_model_dir), "--data", str(STS_DEV), str(STSB), str(SENTEVAL / "STS12"),
                 "--out", str(out)]) == 0
    report = json.loads(out.read_text(encoding="utf-8"))
    datasets = report["datasets"]
    assert list(datasets) == ["sts-dev", "STSBenchmark", "STS12"]
    assert datasets["STSBenchmark"]["layout"] == "senteval-stsb" and datasets["STSBenchmark"]["all"]["n"] == 10
    average = report["average"]
    assert average["datasets"] == 3
    for kind in ("all", "mean"):
        for metric in ("spearman", "pearson"):
            by_hand = (datasets["sts-dev"][kind][metric] + datasets["STSBenchmark"][kind][metric]
                       + datasets["STS12"][kind][metric]) / 3
            assert average[kind][metric] == pytest.approx(by_hand, abs=1e-12)
    row = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("average of 3 datasets"))
    assert row.split()[-4:] == [f"{100 * average['all']['spearman']:.2f}", f"{100 * average['mean']['spearman']:.2f}",
                                f"{100 * average['all']['pearson']:.2f}", f"{100 * average['mean']['pearson']:.2f}"]


def test_one_dataset_has_no_average_row(tiny_model_dir, capsys):
    assert main(["--model", str(tiny_model_dir), "--data", str(STS_DEV)]) == 0
    assert "average of" not in capsys.readouterr().out
    assert average_over_datasets({"x": {"all": {"spearman": 0.5, "pearson": 0.25},
                                        "mean": {"spearman": 0.5, "pearson": 0.25}}})["all"]["spearman"] == 0.5
