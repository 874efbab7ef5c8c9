"""The speed flags of run_multitask.py: each runs end to end and changes nothing but float rounding
(except --bucket, which regroups examples, and --sparse_embeddings, which updates only the word
embeddings of the batch); mixed precision fails clearly where it cannot work."""
import csv
from pathlib import Path

import pytest
import torch

import run_multitask
from minbert import BertModel
from training.checkpoint import load_checkpoint
from training.precision import Precision

FIXTURE_DATA = Path(__file__).parent / "fixtures" / "data"


def run(tmp_path, model_dir, name, *extra):
    return run_multitask.main(["--data_dir", str(FIXTURE_DATA), "--model", str(model_dir), "--epochs", "2",
                               "--batch_size", "4", "--max_length", "24", "--out_dir", str(tmp_path),
                               "--run_name", name, "--save_every", "0", "--quiet", *extra])


def weights(tmp_path, name):
    return load_checkpoint(tmp_path / name / "checkpoint")[0]


def ids(path):
    with open(path, encoding="utf-8", newline="") as f:
        return sorted(row["id"] for row in csv.DictReader(f))


def test_fast_paths_train_the_same_model(tmp_path, tiny_model_dir):
    assert run(tmp_path, tiny_model_dir, "reference") == 0
    assert run(tmp_path, tiny_model_dir, "fast", "--attention", "sdpa", "--adamw", "fused") == 0
    reference, fast = weights(tmp_path, "reference"), weights(tmp_path, "fast")
    for name in reference:
        torch.testing.assert_close(fast[name], reference[name], rtol=1e-4, atol=1e-5, msg=name)


def test_bucketed_batches_predict_every_example(tmp_path, tiny_model_dir):
    assert run(tmp_path, tiny_model_dir, "plain") == 0
    assert run(tmp_path, tiny_model_dir, "bucket", "--bucket") == 0
    for name in ("sst-dev-output.csv", "para-dev-output.csv", "sts-test-output.csv"):
        assert ids(tmp_path / "bucket" / name) == ids(tmp_path / "plain" / name)
    assert not all(torch.equal(a, b) for a, b in zip(weights(tmp_path, "plain").values(),
                                                    weights(tmp_path, "bucket").values()))


def test_sparse_embeddings_move_only_the_rows_of_seen_word_pieces(tmp_path, tiny_model_dir):
    name = "embeddings.word_embeddings.weight"
    start = BertModel.from_pretrained(tiny_model_dir).state_dict()[name]
    assert run(tmp_path, tiny_model_dir, "dense") == 0
    assert run(tmp_path, tiny_model_dir, "sparse", "--sparse_embeddings") == 0
    dense, sparse = (next(v for k, v in weights(tmp_path, r).items() if k.endswith(name)) for r in ("dense", "sparse"))
    moved = (sparse != start).any(dim=1)
    assert 50 < moved.sum() < 5000       # the fixture's word pieces, out of 30522 rows
    assert (dense != start).any(dim=1).all()  # dense AdamW decays every row
    others = [k for k in weights(tmp_path, "dense") if not k.endswith(name)]
    assert not all(torch.equal(weights(tmp_path, "dense")[k], weights(tmp_path, "sparse")[k]) for k in others)


def test_uniform_dropout_masks_train_another_model(tmp_path, tiny_model_dir):
    assert run(tmp_path, tiny_model_dir, "bernoulli", "--epochs", "1") == 0
    assert run(tmp_path, tiny_model_dir, "uniform", "--epochs", "1", "--dropout_masks", "uniform") == 0
    a, b = weights(tmp_path, "bernoulli"), weights(tmp_path, "uniform")
    assert not all(torch.equal(a[k], b[k]) for k in a)  # other masks, so other weights


def test_sparse_embeddings_refuse_compile(tmp_path, tiny_model_dir, capsys):
    assert run(tmp_path, tiny_model_dir, "both", "--sparse_embeddings", "--compile") == 1
    assert "--sparse_embeddings and --compile do not go together" in capsys.readouterr().err
    assert not (tmp_path / "both").exists()


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
