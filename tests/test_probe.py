"""scripts.probe: k-means ARI/AMI and the logistic-regression probe on synthetic embeddings whose
answers are known, and main() end to end on a tiny random BERT and a tiny CFIMDB-format fixture."""
import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from training.harness.checkpoint import save_checkpoint
from training.configuration.sections import ModelConfig, TrainConfig
from training.harness.run_config import RunConfig
from training.harness.runs import build_model
from training.learning.task_schema import run_tasks
from scripts.probe import TASK_CHOICES, build_parser, cluster_scores, main, probe_scores, subsample

CFIMDB = Path(__file__).resolve().parent / "fixtures" / "cfimdb"


def _blobs(n_per_class, centres, spread, seed):
    """Points scattered (std ``spread``) around each centre; labels 0..len(centres)-1."""
    rng = np.random.default_rng(seed)
    x = np.concatenate([c + spread * rng.standard_normal((n_per_class, len(c))) for c in centres])
    y = np.repeat(np.arange(len(centres)), n_per_class)
    order = rng.permutation(len(y))
    return x[order], y[order]


CENTRES = [np.array([10.0, 0.0, 0.0]), np.array([0.0, 10.0, 0.0]), np.array([0.0, 0.0, 10.0])]


def test_separated_blobs_cluster_perfectly():
    x, y = _blobs(20, CENTRES, 0.1, seed=0)
    scores = cluster_scores(x, y, k=3, seed=0)
    assert scores["ari"] == pytest.approx(1.0)
    assert scores["ami"] == pytest.approx(1.0)
    assert (scores["k"], scores["n"]) == (3, 60)


def test_cluster_scores_ignore_cluster_names_and_accept_tensors():
    # The labels are a renaming of the blobs' ids: still a perfect match.
    x, y = _blobs(10, CENTRES[:2], 0.1, seed=1)
    scores = cluster_scores(torch.from_numpy(x).float(), torch.from_numpy(1 - y) + 5, k=2, seed=3)
    assert scores["ari"] == pytest.approx(1.0) and scores["ami"] == pytest.approx(1.0)


def test_random_labels_score_about_zero():
    x, _ = _blobs(100, CENTRES, 0.1, seed=2)
    y = np.random.default_rng(3).integers(0, 3, size=len(x))
    scores = cluster_scores(x, y, k=3, seed=0)
    assert abs(scores["ari"]) < 0.05
    assert abs(scores["ami"]) < 0.05


def test_cluster_scores_are_deterministic_for_a_seed():
    x, _ = _blobs(30, CENTRES, 6.0, seed=4)          # overlapping blobs: k-means' start matters
    y = np.repeat(np.arange(3), 30)
    assert cluster_scores(x, y, 3, seed=7) == cluster_scores(x, y, 3, seed=7)


def test_probe_separates_blobs():
    train_x, train_y = _blobs(15, CENTRES, 0.5, seed=5)
    dev_x, dev_y = _blobs(5, CENTRES, 0.5, seed=6)
    scores = probe_scores(train_x, train_y, dev_x, dev_y, seed=0)
    assert scores["train_accuracy"] == 1.0 and scores["dev_accuracy"] == 1.0
    assert (scores["n_train"], scores["n_dev"]) == (45, 15)
    assert scores["converged"]


def test_probe_on_random_labels_is_near_chance_on_dev():
    rng = np.random.default_rng(7)
    train_x, dev_x = rng.standard_normal((400, 5)), rng.standard_normal((400, 5))
    train_y, dev_y = rng.integers(0, 2, 400), rng.integers(0, 2, 400)
    assert abs(probe_scores(train_x, train_y, dev_x, dev_y, seed=0)["dev_accuracy"] - 0.5) < 0.1


@pytest.mark.parametrize("call, message", [
    (lambda: cluster_scores(np.zeros((3, 2)), np.zeros(4), 2, 0), "3 embeddings but 4 labels"),
    (lambda: cluster_scores(np.zeros((3, 2)), np.zeros(3), 4, 0), "k = 4 for 3 examples"),
    (lambda: cluster_scores(np.zeros(3), np.zeros(3), 2, 0), r"\(N, D\)"),
    (lambda: probe_scores(np.zeros((3, 2)), np.zeros(3), np.zeros((2, 2)), np.zeros(2), 0), "two classes"),
    (lambda: probe_scores(np.zeros((3, 2)), [0, 1, 0], np.zeros((2, 3)), [0, 1], 0), "width"),
])
def test_errors(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_subsample_is_seeded_and_keeps_file_order():
    examples = list(range(50))
    first, _ = subsample((examples, None), 10, seed=1)
    again, _ = subsample((examples, None), 10, seed=1)
    assert first == again and first == sorted(first) and len(set(first)) == 10
    assert subsample((examples, None), 80, seed=1)[0] == examples


def test_tasks_are_the_single_sentence_classification_rows():
    assert TASK_CHOICES == ["sst", "cfimdb"]
    with pytest.raises(SystemExit):
        build_parser().parse_args(["--task", "qqp"])  # a pair task has no single sentences to probe


# --- main() end to end ---------------------------------------------------------------------------


def test_main_end_to_end_on_cfimdb_fixture(tiny_model_dir, tmp_path, capsys):
    out = tmp_path / "probe.json"
    assert main(["--model", str(tiny_model_dir), "--task", "cfimdb", "--data_dir", str(CFIMDB),
                 "--pooling", "mean", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "k-means (k = classes) on dev" in printed and "logistic-regression probe, dev" in printed
    report = json.loads(out.read_text())
    assert report["task"] == "cfimdb" and report["pooling"] == "mean" and report["num_classes"] == 2
    assert report["files"]["train"]["used"] == 8 and report["files"]["dev"]["used"] == 4
    for split, n in (("train", 8), ("dev", 4)):
        scores = report["clustering"][split]
        assert scores["n"] == n and scores["k"] == 2
        assert -1.0 <= scores["ari"] <= 1.0 and -1.0 <= scores["ami"] <= 1.0
    probe = report["probe"]
    assert (probe["n_train"], probe["n_dev"]) == (8, 4)
    assert 0.0 <= probe["dev_accuracy"] <= 1.0 and 0.5 <= probe["train_accuracy"] <= 1.0


def test_main_max_train_and_checkpoint_give_the_model_numbers(tiny_model_dir, tmp_path):
    """A run checkpoint's encoder gives the same report as the model it started from (untrained here)."""
    config = RunConfig.defaults(model=ModelConfig(model=str(tiny_model_dir)), train=TrainConfig(tasks="sst,cfimdb"))
    model = build_model(config.model, run_tasks(config), tiny_model_dir)
    save_checkpoint(tmp_path / "run" / "checkpoint", model.state_dict(), model.bert.config, config.to_dict())
    common = ["--task", "cfimdb", "--data_dir", str(CFIMDB), "--pooling", "cls", "--max_train", "6", "--normalize"]
    assert main(["--model", str(tiny_model_dir), *common, "--out", str(tmp_path / "a.json")]) == 0
    assert main(["--checkpoint", str(tmp_path / "run"), *common, "--out", str(tmp_path / "b.json")]) == 0
    a, b = (json.loads((tmp_path / name).read_text()) for name in ("a.json", "b.json"))
    assert a["files"]["train"]["used"] == 6 and a["normalize"] is True
    assert a["clustering"] == b["clustering"] and a["probe"] == b["probe"]


def test_main_errors_are_one_line(tiny_model_dir, tmp_path, capsys):
    assert main(["--model", str(tiny_model_dir), "--task", "sst", "--data_dir", str(CFIMDB)]) == 1
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert error.startswith("error: data file ids-sst-train.csv not found")
    assert main(["--model", str(tiny_model_dir), "--task", "cfimdb", "--data_dir", str(CFIMDB),
                 "--max_train", "0"]) == 1
    assert "--max_train must be at least 1" in capsys.readouterr().err
