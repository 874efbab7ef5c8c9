"""training.harness.runs: ``load_run`` on a run made by the real entry point (tiny random BERT, fixture data),
the one ``encode`` loop against encoding each sentence alone, and one-line errors for bad paths."""
import csv
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import save_file

import run_multitask
import training
from training.data.batching import make_loader
from training.data.readers import read_examples
from heads import MultitaskBert
from heads.pooling import pool
from minbert import BertModel, BertTokenizer, WeightsError
from training.harness.run_config import RunConfig
from training.learning.evaluate import predict
from training.harness.checkpoint import load_checkpoint
from training.learning.encoding import encode
from training.harness.runs import load_run, pretrained_run
from training.learning.task_schema import BUILTIN_TASKS

FIXTURE_DATA = Path(__file__).parent / "fixtures" / "data"
SENTENCES = ["a short one", "a much longer sentence than the others in this list, with a clause", "mid length text",
             "", "one more sentence of some length", "tiny"]


@pytest.fixture(scope="module")
def run_dir(tiny_model_dir, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("runs")
    argv = ["--data_dir", str(FIXTURE_DATA), "--model", str(tiny_model_dir), "--epochs", "1", "--batch_size", "4",
            "--max_length", "32", "--out_dir", str(out), "--run_name", "tiny", "--quiet"]
    assert run_multitask.main(argv) == 0
    return out / "tiny"


@pytest.fixture(scope="module")
def run(run_dir):
    return load_run(run_dir)


@pytest.mark.slow
def test_run_folder_and_checkpoint_folder_load_the_same_run(run_dir, run):
    again = load_run(run_dir / "checkpoint")
    saved = json.loads((run_dir / "checkpoint" / "run_config.json").read_text())
    assert run.source == again.source == run_dir / "checkpoint"
    assert run.config == again.config == RunConfig.from_dict(saved)
    assert (run.config.train.epochs, run.config.data.max_length) == (1, 32)
    state, weights = run.model.state_dict(), load_checkpoint(run_dir / "checkpoint")[0]
    assert state.keys() == again.model.state_dict().keys() == weights.keys()
    for key, value in state.items():
        assert torch.equal(value, again.model.state_dict()[key]) and torch.equal(value, weights[key]), key


def test_loaded_model_is_the_run_model(run, run_dir):
    """Its heads are the run's tasks, it is in eval mode, and it predicts what the run wrote."""
    assert isinstance(run.model, MultitaskBert) and not run.model.training
    assert list(run.model.heads) == run.config.task_names() == ["sst", "qqp", "sts"]
    assert run.model.bert.config.to_dict() == json.loads((run_dir / "checkpoint" / "config.json").read_text())
    assert training.load_run is load_run  # the package's export
    task = BUILTIN_TASKS["sst"]
    examples, _ = read_examples(FIXTURE_DATA / task.files["dev"], task.layout())
    loader = make_loader(examples, run.tokenizer, run.config.data.max_length, 4, shuffle=False)
    result = predict(run.model, task, loader, torch.device("cpu"), progress_bar=False)
    with open(run_dir / "sst-dev-output.csv", encoding="utf-8", newline="") as f:
        written = {row["id"]: int(row["Predicted_Sentiment"]) for row in csv.DictReader(f)}
    assert dict(zip(result.ids, result.predictions.astype(int).tolist())) == written


def _alone(bert: BertModel, tokenizer: BertTokenizer, sentence: str, pooling: str, reduction: str = "mean",
           max_length: int = 32) -> np.ndarray:
    """The reference: one sentence, no padding, straight through the encoder and ``pool``."""
    enc = tokenizer.encode_batch([sentence], max_length=max_length)
    with torch.no_grad():
        outputs = bert(enc["input_ids"], enc["attention_mask"], enc["token_type_ids"])
    return pool(outputs, enc["attention_mask"], pooling, reduction)[0].numpy()


def test_encode_keeps_input_order_and_matches_one_by_one_encoding(run):
    vectors = run.encode(SENTENCES, batch_size=2, progress=False)
    assert vectors.shape == (len(SENTENCES), run.model.bert.config.hidden_size) and vectors.dtype == np.float32
    for i, sentence in enumerate(SENTENCES):
        np.testing.assert_allclose(vectors[i], _alone(run.model.bert, run.tokenizer, sentence, run.model.pooling),
                                   rtol=0, atol=1e-5)


def test_encode_pooling_modes_and_mode_restored(tiny_model_dir):
    base = pretrained_run(tiny_model_dir)
    bert, tokenizer = base.model.bert, base.tokenizer
    bert.train()
    vectors = encode(bert, tokenizer, SENTENCES, "first_last", "max", batch_size=4, max_length=32, progress=True)
    assert bert.training  # put back in the mode it was in
    bert.eval()
    for i, sentence in enumerate(SENTENCES):
        np.testing.assert_allclose(vectors[i], _alone(bert, tokenizer, sentence, "first_last", "max"), rtol=0, atol=1e-5)
    assert encode(bert, tokenizer, [], "last4_concat").shape == (0, 64)
    with pytest.raises(ValueError, match="reduction"):
        encode(bert, tokenizer, SENTENCES, "mean", "median")
    assert base.source == tiny_model_dir and not base.model.heads


def _one_line_error(path) -> str:
    with pytest.raises(WeightsError) as err:
        load_run(path)
    message = str(err.value)
    assert "\n" not in message
    return message


def test_bad_paths_are_one_line_errors(run_dir, tiny_model_dir, tmp_path):
    assert _one_line_error(tmp_path / "nowhere") == f"run or checkpoint folder not found: {tmp_path / 'nowhere'}"
    (tmp_path / "file.txt").write_text("x")
    assert str(tmp_path / "file.txt") in _one_line_error(tmp_path / "file.txt")
    (tmp_path / "empty").mkdir()
    assert f"{tmp_path / 'empty' / 'config.json'} not found" in _one_line_error(tmp_path / "empty")
    # an HF-format BERT directory is a model, not a run
    assert _one_line_error(tiny_model_dir).startswith(f"{tiny_model_dir}: no run_config.json, so not a run's")

    corrupt = tmp_path / "corrupt"
    shutil.copytree(run_dir / "checkpoint", corrupt)
    data = (corrupt / "model.safetensors").read_bytes()
    (corrupt / "model.safetensors").write_bytes(data[: len(data) // 2])
    assert _one_line_error(corrupt).startswith(f"cannot read checkpoint file {corrupt / 'model.safetensors'}")

    wrong = tmp_path / "wrong"
    shutil.copytree(run_dir / "checkpoint", wrong)
    config = json.loads((wrong / "run_config.json").read_text())
    config["model"]["sts_head"] = "concat"  # a head with a Linear the checkpoint does not have
    (wrong / "run_config.json").write_text(json.dumps(config))
    assert _one_line_error(wrong).startswith(f"{wrong / 'model.safetensors'}: the weights do not fit")


def test_tolerant_config_and_encoder_only_checkpoint(run_dir, tmp_path):
    """Unknown names are ignored, missing sections are read as the version before them had them; a
    checkpoint without heads is an encoder."""
    folder = tmp_path / "encoder"
    shutil.copytree(run_dir / "checkpoint", folder)
    run_config = json.loads((folder / "run_config.json").read_text())
    run_config = {"model": {**run_config["model"], "a_future_flag": 1}, "data": run_config["data"],
                  "speed": run_config["speed"], "extra": {}}
    (folder / "run_config.json").write_text(json.dumps(run_config))
    save_file({}, str(folder / "heads.safetensors"))
    loaded = load_run(folder)
    assert not loaded.model.heads and loaded.config.train == RunConfig.from_dict({}).train
    assert loaded.config.data.max_length == 32
    np.testing.assert_allclose(loaded.encode(SENTENCES[:3]), load_run(run_dir).encode(SENTENCES[:3]), rtol=0, atol=0)


def test_a_saved_configuration_without_a_newer_field_does_what_its_version_did():
    # a run saved before the fast paths, the schedule and the no-decay groups existed resumes on the
    # paths it trained with; a complete saved configuration reads back as it was
    old = RunConfig.from_dict({"train": {"lr": 5e-5}, "speed": {"adamw": "auto"}})
    assert (old.train.warmup_ratio, old.train.decay_bias_norm, old.train.max_grad_norm) == (None, True, None)
    assert (old.speed.attention, old.speed.bucket, old.speed.dropout_masks, old.speed.sparse_embeddings) == (
        "manual", False, "bernoulli", False)
    assert not RunConfig.from_dict({"train": {"no_decay_bias_norm": True}}).train.decay_bias_norm  # its old name
    assert RunConfig.from_dict({"train": {"no_decay_bias_norm": False}}).train.decay_bias_norm
    new = RunConfig.defaults()
    assert RunConfig.from_dict(new.to_dict()) == new
    assert new.speed != old.speed
