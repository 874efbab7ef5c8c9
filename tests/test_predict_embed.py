"""A trained run taken away: training.tools.predict reproduces the run's own prediction files and
scores labelled ones, training.tools.embed writes load_run().encode's vectors, LoadedRun.predict
takes sentences and pairs, and --model takes a saved run (runs chain)."""
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

import run_multitask
from minbert import BertConfig, BertModel
from training import load_run
from training.harness.checkpoint import load_checkpoint, save_checkpoint
from training.tools import embed, predict

FIXTURE_DATA = Path(__file__).parent / "fixtures" / "data"


def train(tmp_path, model, name, *extra):
    argv = ["--data_dir", str(FIXTURE_DATA), "--model", str(model), "--epochs", "1", "--batch_size", "4",
            "--max_length", "32", "--out_dir", str(tmp_path), "--run_name", name, "--quiet", *extra]
    assert run_multitask.main(argv) == 0
    return tmp_path / name


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory, tiny_model_dir):
    return train(tmp_path_factory.mktemp("runs"), tiny_model_dir, "first")


@pytest.mark.slow
def test_predict_reproduces_the_runs_own_files_and_scores_labelled_ones(run_dir, tmp_path, capsys):
    out = tmp_path / "preds"
    assert predict.main([str(run_dir), "--data_dir", str(FIXTURE_DATA), "--out", str(out)]) == 0
    written = sorted(p.name for p in out.glob("*.csv"))
    assert written == sorted(p.name for p in run_dir.glob("*-output.csv"))
    for name in written:
        assert (out / name).read_bytes() == (run_dir / name).read_bytes(), name
    scores = json.loads((out / "metrics.json").read_text())["scores"]
    dev = json.loads((run_dir / "metrics.json").read_text())["dev"]
    assert scores == {"ids-sst-dev.csv": dev["sst"], "quora-dev.csv": dev["qqp"], "sts-dev.csv": dev["sts"]}
    assert "SST acc" in capsys.readouterr().out

    data = tmp_path / "data"   # a labelled test file of one's own is scored too
    data.mkdir()
    shutil.copy(FIXTURE_DATA / "sts-dev.csv", data / "sts-test-student.csv")
    assert predict.main([str(run_dir / "checkpoint"), "--data_dir", str(data), "--out", str(tmp_path / "p2"),
                         "--tasks", "sts"]) == 0
    assert json.loads((tmp_path / "p2" / "metrics.json").read_text())["scores"] == {"sts-test-student.csv": dev["sts"]}


def test_predict_errors_are_one_line(run_dir, tmp_path, capsys):
    assert predict.main([str(run_dir), "--data_dir", str(tmp_path), "--out", str(tmp_path / "o")]) == 1
    assert predict.main([str(run_dir), "--data_dir", str(FIXTURE_DATA), "--out", str(tmp_path / "o"),
                         "--tasks", "cfimdb"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("error: ") and "has no 'cfimdb' head" in err[-1]
    assert not (tmp_path / "o").exists()   # refused before any file was written


def test_loaded_run_predicts_sentences_and_pairs(run_dir):
    run = load_run(run_dir)
    classes = run.predict("sst", ["a fine film .", "dull .", "a mess ."])
    scores = run.predict("sts", [("A man plays.", "A man is playing."), ("A cat.", "A stock market.")])
    assert classes.shape == (3,) and set(classes) <= set(range(5))
    assert scores.shape == (2,) and ((0 <= scores) & (scores <= 5)).all()
    with pytest.raises(ValueError, match="pairs of sentences"):
        run.predict("qqp", ["one sentence"])
    with pytest.raises(ValueError, match="no 'cfimdb' head"):
        run.predict("cfimdb", ["a film"])


def test_embed_writes_the_runs_vectors_from_text_and_csv(run_dir, tmp_path):
    sentences = ["A man is playing a guitar.", "Two dogs run.", "A man is playing a guitar."]
    (tmp_path / "s.txt").write_text("\n".join(sentences) + "\n\n", encoding="utf-8")
    assert embed.main([str(run_dir), "--input", str(tmp_path / "s.txt"), "--out", str(tmp_path / "v.npy")]) == 0
    vectors = np.load(tmp_path / "v.npy")
    assert vectors.shape == (3, 16) and np.array_equal(vectors[0], vectors[2])
    assert np.allclose(vectors, load_run(run_dir).encode(sentences), atol=1e-6)
    assert embed.main([str(run_dir), "--input", str(FIXTURE_DATA / "sts-dev.csv"), "--column", "sentence2",
                       "--out", str(tmp_path / "c.npy")]) == 0
    assert np.load(tmp_path / "c.npy").shape[0] == sum(1 for _ in open(FIXTURE_DATA / "sts-dev.csv")) - 1
    assert embed.main([str(run_dir), "--input", str(FIXTURE_DATA / "sts-dev.csv"), "--column", "nope",
                       "--out", str(tmp_path / "x.npy")]) == 1
    assert not (tmp_path / "x.npy").exists()


@pytest.mark.slow
def test_a_saved_run_is_a_model_to_start_from(run_dir, tmp_path):
    assert (run_dir / "checkpoint" / "vocab.txt").is_file()
    chained = train(tmp_path, run_dir, "second", "--option", "pretrain")   # frozen: the encoder stays as loaded
    first, _ = load_checkpoint(run_dir / "checkpoint")
    second, _ = load_checkpoint(chained / "checkpoint")
    bert = [k for k in first if k.startswith("bert.")]
    assert bert and all(torch.equal(first[k], second[k]) for k in bert)
    assert json.loads((chained / "metrics.json").read_text())["model_dir"] == str(run_dir / "checkpoint")


def test_tools_take_a_saved_run_as_their_model(run_dir):
    from training.harness.runs import pretrained_run
    encoder = pretrained_run(run_dir, pooling="cls")
    assert list(encoder.model.heads) == [] and encoder.model.pooling == "cls"
    trained = load_run(run_dir).model.bert.state_dict()
    assert all(torch.equal(v, trained[k]) for k, v in encoder.model.bert.state_dict().items())


def test_the_tokenizer_follows_do_lower_case(run_dir, tiny_model_dir, tmp_path):
    from training.harness.runs import tokenizer_for
    cased = tmp_path / "cased"
    shutil.copytree(tiny_model_dir, cased)
    (cased / "tokenizer_config.json").write_text('{"do_lower_case": false}')
    assert tokenizer_for(tiny_model_dir).tokenize("Hello World") == ["hello", "world"]
    assert tokenizer_for(cased).tokenize("Hello World") != ["hello", "world"]
    assert json.loads((run_dir / "checkpoint" / "tokenizer_config.json").read_text())["do_lower_case"] is True


def test_checkpoint_is_a_standard_model_folder(run_dir, tmp_path):
    """HF config and names (what transformers' AutoModel reads; checked against transformers and
    sentence-transformers outside the suite, see docs/outputs.md), sentence-transformers files for
    a pooling it has, heads and run configuration in files of their own."""
    folder = run_dir / "checkpoint"
    config = json.loads((folder / "config.json").read_text())
    assert config["model_type"] == "bert" and "bert" not in config and "run" not in config
    names = load_file(str(folder / "model.safetensors")).keys()
    assert "encoder.layer.0.attention.self.query.weight" in names and not any(k.startswith("heads.") for k in names)
    assert all(k.startswith(("heads.", "towers.")) for k in load_file(str(folder / "heads.safetensors")))
    assert json.loads((folder / "run_config.json").read_text())["model"]["pooling"] == "mean"
    modules = json.loads((folder / "modules.json").read_text())
    assert [m["type"].rsplit(".", 1)[1] for m in modules] == ["Transformer", "Pooling"]
    pooling = json.loads((folder / "1_Pooling" / "config.json").read_text())
    assert pooling["pooling_mode_mean_tokens"] and not pooling["pooling_mode_cls_token"]
    assert pooling["word_embedding_dimension"] == 16
    # any HF-format reader gets the run's encoder: ours as a plain --model directory
    plain = BertModel.from_pretrained(folder).state_dict()
    trained = load_run(run_dir).model.bert.state_dict()
    assert all(torch.equal(plain[k], trained[k]) for k in trained)

    state, saved = load_checkpoint(folder)
    saved["run"]["model"]["pooling"] = "last4_mean"   # a mode sentence-transformers lacks: no ST files
    save_checkpoint(tmp_path / "other", state, BertConfig.from_dict(saved["bert"]), saved["run"])
    assert not (tmp_path / "other" / "modules.json").exists() and (tmp_path / "other" / "run_config.json").is_file()
