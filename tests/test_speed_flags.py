"""The speed flags of run_multitask.py: the fast paths are the defaults and --reference the written-out
ones; each runs end to end and changes nothing but float rounding (except bucketing, which regroups
examples, uniform dropout masks, which are other random draws, and sparse embeddings, which update
only the word embeddings of the batch); mixed precision fails clearly where it cannot work."""
import csv
import json
from pathlib import Path

import pytest
import torch

import run_multitask
from minbert import BertModel
from training.harness.checkpoint import load_checkpoint
from training.configuration.sections import SpeedConfig
from training.learning.precision import Precision

FIXTURE_DATA = Path(__file__).parent / "fixtures" / "data"


def run(tmp_path, model_dir, name, *extra):
    return run_multitask.main(["--data_dir", str(FIXTURE_DATA), "--model", str(model_dir), "--epochs", "2",
                               "--batch_size", "4", "--max_length", "24", "--out_dir", str(tmp_path),
                               "--run_name", name, "--save_every", "0", "--quiet", *extra])


def weights(tmp_path, name):
    return load_checkpoint(tmp_path / name / "checkpoint")[0]


def ids(path):
    with open(path, encoding="utf-8", newline="") as f:
        return [row["id"] for row in csv.DictReader(f)]


def speed(tmp_path, name):
    return json.loads((tmp_path / name / "metrics.json").read_text())["config"]["speed"]


@pytest.mark.slow
def test_reference_is_the_written_out_paths_and_explicit_flags_win(tmp_path, tiny_model_dir):
    assert run(tmp_path, tiny_model_dir, "default", "--epochs", "1") == 0
    assert speed(tmp_path, "default") | {"sparse_embeddings": None} == {
        "attention": "auto", "adamw": "auto", "bucket": True, "amp": "off", "compile": False,
        "dropout_masks": "uniform", "sparse_embeddings": None}
    assert run(tmp_path, tiny_model_dir, "reference", "--epochs", "1", "--reference") == 0
    assert speed(tmp_path, "reference") == {"attention": "manual", "adamw": "loop", "bucket": False, "amp": "off",
                                            "compile": False, "dropout_masks": "bernoulli", "sparse_embeddings": False}
    assert run(tmp_path, tiny_model_dir, "spelled", "--epochs", "1", "--attention", "manual", "--adamw", "loop",
               "--no_bucket", "--dropout_masks", "bernoulli", "--no_sparse_embeddings") == 0
    a, b = weights(tmp_path, "reference"), weights(tmp_path, "spelled")
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert run(tmp_path, tiny_model_dir, "mixed", "--epochs", "1", "--reference", "--attention", "sdpa") == 0
    assert speed(tmp_path, "mixed")["attention"] == "sdpa" and speed(tmp_path, "mixed")["adamw"] == "loop"


def test_sparse_embeddings_default_applies_to_one_process_without_compile():
    assert SpeedConfig().sparse(distributed=False)
    assert not SpeedConfig().sparse(distributed=True)
    assert not SpeedConfig(compile=True).sparse(distributed=False)
    assert not SpeedConfig(sparse_embeddings=False).sparse(distributed=False)


@pytest.mark.slow
def test_fast_paths_train_the_same_model(tmp_path, tiny_model_dir):
    assert run(tmp_path, tiny_model_dir, "reference", "--reference") == 0
    assert run(tmp_path, tiny_model_dir, "fast", "--reference", "--attention", "sdpa", "--adamw", "fused") == 0
    reference, fast = weights(tmp_path, "reference"), weights(tmp_path, "fast")
    for name in reference:
        torch.testing.assert_close(fast[name], reference[name], rtol=1e-4, atol=1e-5, msg=name)


@pytest.mark.slow
def test_bucketed_batches_predict_every_example_in_file_order(tmp_path, tiny_model_dir):
    assert run(tmp_path, tiny_model_dir, "plain", "--reference") == 0
    assert run(tmp_path, tiny_model_dir, "bucket", "--reference", "--bucket") == 0
    for name in ("sst-dev-output.csv", "para-dev-output.csv", "sts-test-output.csv"):
        assert ids(tmp_path / "bucket" / name) == ids(tmp_path / "plain" / name)
    assert not all(torch.equal(a, b) for a, b in zip(weights(tmp_path, "plain").values(),
                                                    weights(tmp_path, "bucket").values()))


@pytest.mark.slow
def test_sparse_embeddings_move_only_the_rows_of_seen_word_pieces(tmp_path, tiny_model_dir):
    name = "embeddings.word_embeddings.weight"
    start = BertModel.from_pretrained(tiny_model_dir).state_dict()[name]
    assert run(tmp_path, tiny_model_dir, "dense", "--no_sparse_embeddings") == 0
    assert run(tmp_path, tiny_model_dir, "sparse") == 0
    dense, sparse = (next(v for k, v in weights(tmp_path, r).items() if k.endswith(name)) for r in ("dense", "sparse"))
    moved = (sparse != start).any(dim=1)
    assert 50 < moved.sum() < 5000       # the fixture's word pieces, out of 30522 rows
    assert (dense != start).any(dim=1).all()  # dense AdamW decays every row
    others = [k for k in weights(tmp_path, "dense") if not k.endswith(name)]
    assert not all(torch.equal(weights(tmp_path, "dense")[k], weights(tmp_path, "sparse")[k]) for k in others)


@pytest.mark.slow
def test_uniform_dropout_masks_train_another_model(tmp_path, tiny_model_dir):
    assert run(tmp_path, tiny_model_dir, "bernoulli", "--epochs", "1", "--dropout_masks", "bernoulli") == 0
    assert run(tmp_path, tiny_model_dir, "uniform", "--epochs", "1") == 0
    a, b = weights(tmp_path, "bernoulli"), weights(tmp_path, "uniform")
    assert not all(torch.equal(a[k], b[k]) for k in a)  # other masks, so other weights


def test_sparse_embeddings_refuse_compile(tmp_path, tiny_model_dir, capsys):
    assert run(tmp_path, tiny_model_dir, "both", "--sparse_embeddings", "--compile") == 1
    assert "--sparse_embeddings and --compile do not go together" in capsys.readouterr().err
    assert not (tmp_path / "both").exists()


@pytest.mark.slow
def test_bf16_autocast_runs_on_cpu(tmp_path, tiny_model_dir):
    assert run(tmp_path, tiny_model_dir, "bf16", "--amp", "bf16") == 0
    assert all(v.dtype == torch.float32 for v in weights(tmp_path, "bf16").values())  # parameters stay fp32
    with Precision("bf16", torch.device("cpu")).autocast():
        assert (torch.ones(2, 2) @ torch.ones(2, 2)).dtype == torch.bfloat16


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU error")
def test_fp16_without_cuda_is_a_one_line_error(tmp_path, tiny_model_dir, capsys):
    assert run(tmp_path, tiny_model_dir, "fp16", "--amp", "fp16") == 1
    assert capsys.readouterr().err.strip() == "error: --amp fp16 needs a CUDA device (on CPU use --amp bf16)"
    assert not (tmp_path / "fp16").exists()  # refused before a run folder was made
