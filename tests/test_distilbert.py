"""The DistilBERT family: HuggingFace DistilBERT folders load into our BertModel (outputs equal
transformers' DistilBertModel, from a committed fixture), save back under DistilBERT names, and
train and load through a run; --pooling pooler is refused (DistilBERT has no pooler)."""
import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

import run_multitask
from minbert import BertConfig, BertModel, default_model_dir
from training import load_run

FIXTURE = Path(__file__).parent / "fixtures" / "distilbert"   # tests/fixtures/make_distilbert_reference.py
DATA = Path(__file__).parent / "fixtures" / "data"


def test_outputs_equal_transformers_distilbert():
    model = BertModel.from_pretrained(FIXTURE).eval()
    ref = load_file(str(FIXTURE / "reference.safetensors"))
    assert model.config.model_type == "distilbert" and model.config.num_hidden_layers == 2
    with torch.no_grad():
        hidden = model(ref["input_ids"], ref["attention_mask"])["last_hidden_state"]
    assert torch.allclose(hidden, ref["last_hidden_state"], atol=1e-5, rtol=0)


def test_saved_under_distilbert_names_and_read_back(tmp_path):
    model = BertModel.from_pretrained(FIXTURE)
    model.save_pretrained(tmp_path / "again")
    assert set(load_file(str(tmp_path / "again" / "model.safetensors"))) == set(load_file(str(FIXTURE / "model.safetensors")))
    config = json.loads((tmp_path / "again" / "config.json").read_text())
    assert config["model_type"] == "distilbert" and config["dim"] == 16 and "hidden_size" not in config
    again = BertModel.from_pretrained(tmp_path / "again").state_dict()
    assert all(torch.equal(v, again[k]) for k, v in model.state_dict().items())


@pytest.fixture(scope="module")
def distil_dir(tmp_path_factory):
    """A tiny random DistilBERT with the embedded vocabulary, written by our own save."""
    folder = tmp_path_factory.mktemp("distil")
    torch.manual_seed(0)
    BertModel(BertConfig(hidden_size=16, num_hidden_layers=2, num_attention_heads=2, intermediate_size=32,
                         max_position_embeddings=64, type_vocab_size=1, model_type="distilbert")).save_pretrained(folder)
    shutil.copy(default_model_dir() / "vocab.txt", folder / "vocab.txt")
    return folder


@pytest.mark.slow
def test_a_run_starts_from_a_distilbert_and_saves_one(distil_dir, tmp_path):
    argv = ["--data_dir", str(DATA), "--model", str(distil_dir), "--epochs", "1", "--batch_size", "4",
            "--max_length", "32", "--out_dir", str(tmp_path), "--quiet"]
    assert run_multitask.main([*argv, "--run_name", "d"]) == 0
    checkpoint = tmp_path / "d" / "checkpoint"
    assert json.loads((checkpoint / "config.json").read_text())["model_type"] == "distilbert"
    assert any(k.startswith("transformer.layer.0.attention.q_lin") for k in load_file(str(checkpoint / "model.safetensors")))
    assert load_run(tmp_path / "d").encode(["a film", "two films"]).shape == (2, 16)


def test_pooler_pooling_is_refused_for_distilbert(distil_dir, tmp_path, capsys):
    argv = ["--data_dir", str(DATA), "--model", str(distil_dir), "--pooling", "pooler", "--out_dir", str(tmp_path),
            "--run_name", "p"]
    assert run_multitask.main(argv) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "DistilBERT model has no pooler" in err[0]
    assert not (tmp_path / "p").exists()
