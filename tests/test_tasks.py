"""The task table: rows, the overall score, --tasks and one run of a task outside the benchmark."""
import csv
import dataclasses
import json
from pathlib import Path

import pytest

import run_multitask
from training.harness.run_config import RunConfig
from training.extensions.joint_loss import loss_weights
from training.extensions.lcl import lcl_task
from training.configuration.task_declarations import (BUILTIN_DECLARATIONS, OPTIONAL, REQUIRED, check_declaration,
                                                      parse_tasks)
from training.learning.task_schema import BUILTIN_TASKS, task_from_declaration
from training.learning.tasks import format_metrics, overall_score, pearson

CFIMDB_DATA = Path(__file__).parent / "fixtures" / "cfimdb"
# a row's fields that are data (the others are functions, made anew by each build)
ROW_DATA = ("name", "description", "files", "text_columns", "label_column", "label_type", "num_classes",
            "score_range", "metric_name", "divergence", "output_prefix", "prediction_column", "id_column")


def test_pearson_gives_scipys_bits():
    """training.learning.tasks.pearson repeats scipy.stats.pearsonr's arithmetic in numpy (scipy.stats is a slow
    import): the same float, bit for bit, on float32 predictions against float64 gold scores (as a run
    scores STS), float64 on both sides, shifted and scaled data, and two points; 0 where r is undefined."""
    import numpy as np
    from scipy.stats import pearsonr

    rng = np.random.default_rng(0)
    cases = 0
    for trial in range(300):
        size = 2 if trial % 10 == 0 else int(rng.integers(3, 1500))
        pred = (rng.normal(size=size) * rng.uniform(0.01, 100) + rng.normal() * 10).astype(
            np.float32 if trial % 2 else np.float64)
        gold = rng.uniform(0, 5, size=size).round(1)
        if np.std(pred) == 0 or np.std(gold) == 0:
            continue
        assert pearson(pred, gold) == float(pearsonr(pred, gold)[0]), (trial, size)
        cases += 1
    assert cases > 250
    assert pearson(np.array([1.0, 2.0]), np.array([3.0, 1.0])) == -1.0
    assert pearson(np.ones(5), np.arange(5.0)) == 0.0 and pearson(np.array([1.0]), np.array([2.0])) == 0.0


@pytest.mark.slow
def test_scoring_sts_does_not_import_scipy_stats():
    """The reason pearson is written out: a run that scores STS pays no scipy.stats import."""
    import subprocess
    import sys

    code = ("import sys, numpy as np; from training.learning.tasks import pearson; "
            "print(round(pearson(np.array([1., 2., 4.]), np.array([1., 3., 2.])), 6), 'scipy.stats' in sys.modules)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                            cwd=Path(__file__).resolve().parents[1])
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["0.327327", "False"]


def test_overall_score_is_the_cs224n_formula_for_the_benchmark_tasks():
    metrics = {"sst": 0.48, "qqp": 0.81, "sts": 0.87}
    assert overall_score(metrics, BUILTIN_TASKS) == pytest.approx((0.48 + 0.81 + (0.87 + 1) / 2) / 3, abs=1e-15)


def test_overall_score_of_one_task_is_its_unit_score():
    assert overall_score({"cfimdb": 0.75}, BUILTIN_TASKS) == 0.75
    assert overall_score({"sts": -1.0}, BUILTIN_TASKS) == 0.0


def test_every_row_is_complete():
    for name, task in BUILTIN_TASKS.items():
        assert task.name == name
        assert set(task.files) == {"train", "dev", "test"}
        assert task.divergence in ("multiclass", "binary", "regression")
        assert (task.label_type == "class") == (task.num_classes is not None)
        assert (task.label_type == "score") == (task.score_range is not None)


def test_the_built_in_tasks_are_declarations_in_the_task_file_schema():
    """SST, QQP, STS and CFIMDB are declared in the schema a --task_file uses and built by the same function;
    their rows keep the CS224N release's files, prefixes and prediction columns."""
    for declaration in BUILTIN_DECLARATIONS:
        assert set(declaration) <= set(REQUIRED + OPTIONAL)
        checked = check_declaration(declaration, "test", reserved=())
        task = BUILTIN_TASKS[declaration["name"]]
        again = task_from_declaration(checked)
        assert {f: getattr(task, f) for f in ROW_DATA} == {f: getattr(again, f) for f in ROW_DATA}
    rows = {name: (t.output_prefix, t.prediction_column, t.divergence, t.metric_name)
            for name, t in BUILTIN_TASKS.items()}
    assert rows == {"sst": ("sst", "Predicted_Sentiment", "multiclass", "accuracy"),
                    "qqp": ("para", "Predicted_Is_Paraphrase", "binary", "accuracy"),
                    "sts": ("sts", "Predicted_Similiarity", "regression", "pearson"),
                    "cfimdb": ("cfimdb", "Predicted_Sentiment", "multiclass", "accuracy")}
    assert BUILTIN_TASKS["sts"].score_range == (0.0, 5.0) and BUILTIN_TASKS["sst"].num_classes == 5


def test_format_metrics_names_each_task_and_its_metric():
    assert format_metrics({"sst": 0.5, "sts": 0.25}, BUILTIN_TASKS) == "SST acc 0.500 STS pearson 0.250"


@pytest.mark.parametrize("value", ["", "sst,sst", "sst,imdb", ","])
def test_bad_task_lists_are_refused(value):
    with pytest.raises(ValueError, match="--tasks"):
        parse_tasks(value, BUILTIN_TASKS)


def config(**settings) -> RunConfig:
    """The default configuration with ``settings`` (field name -> value) set in whichever section has them."""
    c = run_multitask.parse_config([])
    for key, value in settings.items():
        name, section = next((n, s) for n, s in c.sections().items() if hasattr(s, key))
        c = c.with_sections(**{name: dataclasses.replace(section, **{key: value})})
    return c


def sections(extension: str, **settings) -> tuple:
    """An extension's section and the core ones of ``config(**settings)``: what its hooks are given."""
    c = config(**settings)
    return c.extensions[extension], c.core()


def test_loss_weights_follow_the_chosen_tasks():
    assert loss_weights(*sections("joint_loss", tasks="sts,sst", loss_weights="2,0.5")) == {"sts": 2.0, "sst": 0.5}
    assert loss_weights(*sections("joint_loss", tasks="qqp")) == {"qqp": 1.0}
    with pytest.raises(ValueError, match="2 non-negative numbers, one per task of --tasks"):
        config(tasks="sts,sst", loss_weights="1,1,1").validate()


@pytest.mark.parametrize("flags, message", [
    ({"tasks": "sst,sts", "pre_qqp": True}, "--pre_qqp trains the qqp task"),
])
def test_stages_that_need_a_missing_task_are_refused(flags, message):
    with pytest.raises(ValueError, match=message):
        config(**flags).validate()


def test_scl_and_lcl_need_their_tasks():
    with pytest.raises(ValueError, match="--scl builds its triples"):
        config(tasks="qqp", scl=True).validate()
    with pytest.raises(ValueError, match="--lcl needs a single-sentence classification task"):
        config(tasks="qqp", lcl=True).validate()
    assert lcl_task(config(tasks="sts,cfimdb,sst").core()) == "cfimdb"


@pytest.mark.slow
def test_tasks_cfimdb_trains_and_predicts_through_the_same_run(tmp_path, tiny_model_dir, capsys):
    argv = ["--data_dir", str(CFIMDB_DATA), "--model", str(tiny_model_dir), "--tasks", "cfimdb", "--epochs", "1",
            "--batch_size", "4", "--max_length", "32", "--out_dir", str(tmp_path), "--run_name", "cf", "--quiet",
            "--lcl", "--lcl_steps", "1", "--lcl_batch_size", "4"]
    assert run_multitask.main(argv) == 0
    run_dir = tmp_path / "cf"
    with open(run_dir / "cfimdb-dev-output.csv", encoding="utf-8", newline="") as f:
        rows = list(csv.DictReader(f))
    with open(CFIMDB_DATA / "ids-cfimdb-dev.csv", encoding="utf-8", newline="") as f:
        gold = [row["id"] for row in csv.DictReader(f, delimiter="\t")]
    assert [r["id"] for r in rows] == gold
    assert {r["Predicted_Sentiment"] for r in rows} <= {"0", "1"}
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert set(metrics["dev"]) == {"cfimdb"}
    assert metrics["dev_overall"] == metrics["dev"]["cfimdb"]
    assert metrics["skipped_prediction_files"] == ["cfimdb-test-output.csv"]
    assert not (run_dir / "sst-dev-output.csv").exists()
    out = capsys.readouterr().out
    assert "CFIMDB acc" in out and "SST" not in out
