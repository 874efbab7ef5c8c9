"""minbert.weights: HF-format save / load round trip, the name variants real checkpoints use,
and a clear WeightsError for every way a checkpoint can be wrong.

The HuggingFace parameter names are written out by hand below and checked against the names in
the embedded all-MiniLM-L6-v2 checkpoint (a real HF file), not derived from the module's tables.
"""
import json
import re

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from minbert import BertConfig, BertModel
from minbert.weights import EMBEDDED_MODEL, WeightsError, resolve_model_dir

CONFIG = dict(vocab_size=50, hidden_size=8, num_hidden_layers=2, num_attention_heads=2,
              intermediate_size=16, max_position_embeddings=32)

_LAYER_NAMES = [
    "attention.self.query.weight", "attention.self.query.bias",
    "attention.self.key.weight", "attention.self.key.bias",
    "attention.self.value.weight", "attention.self.value.bias",
    "attention.output.dense.weight", "attention.output.dense.bias",
    "attention.output.LayerNorm.weight", "attention.output.LayerNorm.bias",
    "intermediate.dense.weight", "intermediate.dense.bias",
    "output.dense.weight", "output.dense.bias",
    "output.LayerNorm.weight", "output.LayerNorm.bias",
]
HF_NAMES = {
    "embeddings.word_embeddings.weight", "embeddings.position_embeddings.weight",
    "embeddings.token_type_embeddings.weight", "embeddings.LayerNorm.weight", "embeddings.LayerNorm.bias",
    "pooler.dense.weight", "pooler.dense.bias",
} | {f"encoder.layer.{i}.{name}" for i in range(2) for name in _LAYER_NAMES}


@pytest.fixture(scope="module")
def tiny():
    torch.manual_seed(0)
    model = BertModel(BertConfig(**CONFIG)).eval()
    with torch.no_grad():   # LayerNorms and biases start at 1 / 0: make them distinguishable
        for p in model.parameters():
            p.add_(0.01 * torch.randn_like(p))
    return model


@pytest.fixture
def saved(tiny, tmp_path):
    directory = tmp_path / "tiny"
    tiny.save_pretrained(directory)
    return directory


INPUT_IDS = torch.tensor([[2, 7, 9, 11, 3], [2, 5, 3, 0, 0]])
MASK = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]])
TYPES = torch.tensor([[0, 0, 0, 1, 1], [0, 0, 0, 0, 0]])


def _assert_same_model(a: BertModel, b: BertModel):
    sa, sb = a.state_dict(), b.state_dict()
    assert sa.keys() == sb.keys()
    for key in sa:
        assert torch.equal(sa[key], sb[key]), key
    a.eval(), b.eval()
    with torch.no_grad():
        oa, ob = a(INPUT_IDS, MASK, TYPES), b(INPUT_IDS, MASK, TYPES)
    assert torch.equal(oa["last_hidden_state"], ob["last_hidden_state"])
    assert torch.equal(oa["pooler_output"], ob["pooler_output"])


def _write_weights(directory, state: dict, like):
    """A checkpoint directory holding ``like``'s config.json and the given tensors."""
    directory.mkdir()
    (directory / "config.json").write_text((like / "config.json").read_text())
    save_file({k: v.contiguous() for k, v in state.items()}, str(directory / "model.safetensors"))
    return directory


# ----------------------------------------------------------------------------- round trip and names

def test_save_then_load_round_trips_exactly(tiny, saved):
    assert (saved / "config.json").is_file() and (saved / "model.safetensors").is_file()
    _assert_same_model(tiny, BertModel.from_pretrained(saved))


def test_saved_config_is_hf_config(saved):
    values = json.loads((saved / "config.json").read_text())
    for key, value in CONFIG.items():
        assert values[key] == value
    assert values["model_type"] == "bert"


def test_saved_file_uses_huggingface_names(saved):
    with safe_open(str(saved / "model.safetensors"), framework="pt") as f:
        keys = set(f.keys())
    for name in ("encoder.layer.0.attention.self.query.weight",
                 "encoder.layer.0.attention.output.LayerNorm.weight",
                 "encoder.layer.1.output.dense.bias",
                 "pooler.dense.weight"):
        assert name in keys
    assert keys == HF_NAMES


def test_hand_written_names_match_a_real_hf_checkpoint():
    """The embedded MiniLM (saved by transformers) has the same names for layers 0 and 1."""
    with safe_open(str(resolve_model_dir(None) / "model.safetensors"), framework="pt") as f:
        real = set(f.keys())
    real = {k for k in real if not re.match(r"encoder\.layer\.([2-9]|\d\d)\.", k)}
    assert real - {"embeddings.position_ids"} == HF_NAMES


def test_saved_tensors_are_the_models_own(tiny, saved):
    state = load_file(str(saved / "model.safetensors"))
    layer = tiny.encoder.layer[1]
    assert torch.equal(state["encoder.layer.1.attention.self.key.weight"], layer.attention.key.weight)
    assert torch.equal(state["encoder.layer.1.attention.output.dense.bias"], layer.attention_output.bias)
    assert torch.equal(state["encoder.layer.1.attention.output.LayerNorm.bias"], layer.attention_norm.bias)
    assert torch.equal(state["encoder.layer.1.intermediate.dense.weight"], layer.intermediate.weight)
    assert torch.equal(state["encoder.layer.1.output.dense.weight"], layer.output.weight)
    assert torch.equal(state["encoder.layer.1.output.LayerNorm.weight"], layer.output_norm.weight)
    assert torch.equal(state["pooler.dense.weight"], tiny.pooler.dense.weight)


# ----------------------------------------------------------------------------- name variants

def test_bert_prefix_mlm_head_and_position_ids_are_accepted(tiny, saved, tmp_path):
    state = {f"bert.{k}": v for k, v in load_file(str(saved / "model.safetensors")).items()}
    state["bert.embeddings.position_ids"] = torch.arange(CONFIG["max_position_embeddings"])[None]
    state["cls.predictions.bias"] = torch.zeros(CONFIG["vocab_size"])
    state["cls.predictions.transform.dense.weight"] = torch.zeros(8, 8)
    state["cls.predictions.transform.LayerNorm.gamma"] = torch.ones(8)
    state["cls.predictions.decoder.weight"] = torch.zeros(CONFIG["vocab_size"], 8)
    state["cls.seq_relationship.weight"] = torch.zeros(2, 8)
    directory = _write_weights(tmp_path / "pretraining", state, saved)
    _assert_same_model(tiny, BertModel.from_pretrained(directory))


def test_unprefixed_position_ids_are_accepted(tiny, saved, tmp_path):
    state = load_file(str(saved / "model.safetensors"))
    state["embeddings.position_ids"] = torch.arange(CONFIG["max_position_embeddings"])[None]
    _assert_same_model(tiny, BertModel.from_pretrained(_write_weights(tmp_path / "p", state, saved)))


def test_tensorflow_layernorm_gamma_beta_names(tiny, saved, tmp_path):
    state = {}
    for key, value in load_file(str(saved / "model.safetensors")).items():
        key = key.replace("LayerNorm.weight", "LayerNorm.gamma").replace("LayerNorm.bias", "LayerNorm.beta")
        state[key] = value
    assert "encoder.layer.0.output.LayerNorm.gamma" in state
    _assert_same_model(tiny, BertModel.from_pretrained(_write_weights(tmp_path / "tf", state, saved)))


def test_pytorch_model_bin_when_no_safetensors(tiny, saved, tmp_path):
    directory = tmp_path / "bin"
    directory.mkdir()
    (directory / "config.json").write_text((saved / "config.json").read_text())
    torch.save(load_file(str(saved / "model.safetensors")), directory / "pytorch_model.bin")
    _assert_same_model(tiny, BertModel.from_pretrained(directory))


def test_half_precision_checkpoint_is_cast_to_the_model_dtype(tiny, saved, tmp_path):
    state = {k: v.half() for k, v in load_file(str(saved / "model.safetensors")).items()}
    loaded = BertModel.from_pretrained(_write_weights(tmp_path / "fp16", state, saved))
    assert loaded.pooler.dense.weight.dtype == torch.float32
    torch.testing.assert_close(loaded.pooler.dense.weight, tiny.pooler.dense.weight.half().float())


def test_config_overrides(saved):
    model = BertModel.from_pretrained(saved, hidden_dropout_prob=0.3)
    assert model.config.hidden_dropout_prob == 0.3
    assert model.embeddings.dropout.p == 0.3


# ----------------------------------------------------------------------------- errors

def test_missing_key_is_named_with_its_hf_name(saved, tmp_path):
    state = load_file(str(saved / "model.safetensors"))
    del state["encoder.layer.1.attention.self.value.bias"]
    with pytest.raises(WeightsError, match="missing") as err:
        BertModel.from_pretrained(_write_weights(tmp_path / "m", state, saved))
    assert "encoder.layer.1.attention.self.value.bias" in str(err.value)


def test_unexpected_key_is_named(saved, tmp_path):
    state = load_file(str(saved / "model.safetensors"))
    state["encoder.layer.0.attention.self.rotary.weight"] = torch.zeros(8, 8)
    with pytest.raises(WeightsError, match="unexpected") as err:
        BertModel.from_pretrained(_write_weights(tmp_path / "u", state, saved))
    assert "encoder.layer.0.attention.self.rotary.weight" in str(err.value)


def test_extra_layer_is_unexpected(tiny, tmp_path, saved):
    """A 3-layer checkpoint with a config that says 2 layers."""
    state = load_file(str(saved / "model.safetensors"))
    state.update({k.replace("layer.1.", "layer.2."): v.clone() for k, v in state.items() if "layer.1." in k})
    with pytest.raises(WeightsError, match="unexpected") as err:
        BertModel.from_pretrained(_write_weights(tmp_path / "l3", state, saved))
    assert "'encoder.layer.2.attention.output.dense.weight', '... and 6 more'" in str(err.value)  # 10 of 16 named


def test_shape_mismatch_mentions_shapes(saved, tmp_path):
    directory = tmp_path / "wide"
    directory.mkdir()
    (directory / "model.safetensors").write_bytes((saved / "model.safetensors").read_bytes())
    (directory / "config.json").write_text(json.dumps(dict(CONFIG, hidden_size=16)))
    with pytest.raises(WeightsError, match="shape") as err:
        BertModel.from_pretrained(directory)
    assert "(50, 8)" in str(err.value) and "(50, 16)" in str(err.value)   # word embeddings


def test_truncated_safetensors(saved):
    path = saved / "model.safetensors"
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(WeightsError, match="model.safetensors|truncated|corrupt"):
        BertModel.from_pretrained(saved)


def test_truncated_pytorch_model_bin(saved, tmp_path):
    directory = tmp_path / "bin"
    directory.mkdir()
    (directory / "config.json").write_text((saved / "config.json").read_text())
    torch.save(load_file(str(saved / "model.safetensors")), directory / "pytorch_model.bin")
    data = (directory / "pytorch_model.bin").read_bytes()
    (directory / "pytorch_model.bin").write_bytes(data[: len(data) // 2])
    with pytest.raises(WeightsError, match="truncated|corrupt"):
        BertModel.from_pretrained(directory)


def test_directory_without_weights(saved):
    (saved / "model.safetensors").unlink()
    with pytest.raises(WeightsError, match="model.safetensors") as err:
        BertModel.from_pretrained(saved)
    assert "pytorch_model.bin" in str(err.value)


def test_missing_config(saved):
    (saved / "config.json").unlink()
    with pytest.raises(WeightsError, match="config"):
        BertModel.from_pretrained(saved)


def test_invalid_config_json(saved):
    (saved / "config.json").write_text("{not json")
    with pytest.raises(WeightsError, match="JSON"):
        BertModel.from_pretrained(saved)


def test_nonexistent_path_is_never_downloaded(tmp_path):
    missing = tmp_path / "bert-base-uncased"
    with pytest.raises(WeightsError) as err:
        BertModel.from_pretrained(missing)
    message = str(err.value)
    assert "never downloaded" in message
    assert "bert-base-uncased" in message
    assert "config.json" in message and "model.safetensors" in message
    with pytest.raises(WeightsError, match="never downloaded"):
        resolve_model_dir("bert-base-uncased")


# ----------------------------------------------------------------------------- embedded model

@pytest.mark.parametrize("name", [None, EMBEDDED_MODEL])
def test_resolve_embedded_model(name):
    directory = resolve_model_dir(name)
    assert directory.is_dir()
    assert (directory / "config.json").is_file()
    assert (directory / "model.safetensors").is_file()
    assert json.loads((directory / "config.json").read_text())["hidden_size"] == 384


def test_resolve_local_directory_as_given(saved):
    assert resolve_model_dir(saved) == saved
    assert resolve_model_dir(str(saved)) == saved


def test_pytorch_model_bin_that_is_not_a_checkpoint(saved):
    (saved / "model.safetensors").unlink()
    (saved / "pytorch_model.bin").write_bytes(b"not a checkpoint")
    with pytest.raises(WeightsError, match="plain tensors") as err:
        BertModel.from_pretrained(saved)
    assert "weights_only` set to `False" not in str(err.value)  # never advise unsafe loading


def test_pytorch_model_bin_with_a_non_tensor_value(saved):
    state = load_file(str(saved / "model.safetensors"))
    (saved / "model.safetensors").unlink()
    torch.save({**state, "pooler.dense.bias": [0.0] * 8}, saved / "pytorch_model.bin")
    with pytest.raises(WeightsError, match="tensors"):
        BertModel.from_pretrained(saved)


@pytest.mark.parametrize("overrides, message", [
    ({"num_attention_heads": 3}, "multiple of num_attention_heads"),
    ({"hidden_act": "swish"}, "hidden_act"),
    ({"hiden_dropout_prob": 0.3}, "hiden_dropout_prob"),
])
def test_config_overrides_are_validated(saved, overrides, message):
    with pytest.raises(WeightsError, match=message):
        BertModel.from_pretrained(saved, **overrides)


def test_a_foreign_checkpoint_error_names_its_model_type_and_lists_at_most_ten_keys(tiny_model_dir, tmp_path):
    import json
    import shutil

    from safetensors.torch import load_file, save_file

    from minbert import BertModel, WeightsError
    folder = tmp_path / "foreign"
    shutil.copytree(tiny_model_dir, folder)
    weights = load_file(str(folder / "model.safetensors"))
    save_file({k.replace("encoder.layer", "transformer.layer"): v for k, v in weights.items()},
              str(folder / "model.safetensors"))
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "model_type": "distilbert"}))
    with pytest.raises(WeightsError) as err:
        BertModel.from_pretrained(folder)
    message = str(err.value)
    assert "model_type 'distilbert'" in message and "\n" not in message
    missing = message.split("missing keys [")[1].split("]")[0]
    assert missing.count("encoder.layer") == 10 and "... and 22 more" in missing
