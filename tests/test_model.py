"""Our BertModel on the embedded MiniLM weights against HuggingFace transformers' BertModel.

The reference outputs were computed by transformers (eager attention, float32, eval mode) and
stored in ``tests/fixtures/reference_minilm.safetensors`` by ``tests/fixtures/make_reference.py``,
so transformers is not needed here. The batch: three single sentences of different lengths and
one sentence pair (token_type_ids 1 on the second segment), right-padded to 15 tokens.

Tolerances: at real tokens both implementations compute the same formula in float32 and agree
to ~6e-6 (measured; our model in float64 is ~3e-6 from HF's float32, i.e. that is HF's own
round-off), so atol=1e-5. Padded positions are computed too (padded queries attend to the real
keys) and agree in formula, but carry more float32 round-off: ~6e-5 (float32) / ~2e-5 (our
float64 vs HF) by the last layers, so they are checked at atol=1e-4; any real difference in the
math shows up at 1e-2 or more.
"""

import pytest
import torch

from minbert import BertModel, BertTokenizer
from minbert.weights import default_model_dir

ATOL_REAL = 1e-5
ATOL_PAD = 1e-4


@pytest.fixture(scope="module")
def model():
    m = BertModel.from_pretrained(default_model_dir())
    m.eval()
    return m


@pytest.fixture(scope="module")
def out(model, ref):
    tensors, _ = ref
    with torch.no_grad():
        return model(tensors["input_ids"], tensors["attention_mask"], tensors["token_type_ids"])


def _close(actual, expected, atol):
    torch.testing.assert_close(actual, expected, rtol=0, atol=atol)


def test_output_structure(out, ref, model):
    tensors, meta = ref
    B, T = tensors["input_ids"].shape
    H = model.config.hidden_size
    n_layers = model.config.num_hidden_layers
    assert (H, n_layers) == (meta["model"]["hidden_size"], meta["model"]["num_hidden_layers"]) == (384, 6)
    assert out["last_hidden_state"].shape == (B, T, H)
    assert out["pooler_output"].shape == (B, H)
    assert len(out["hidden_states"]) == n_layers + 1
    for h in out["hidden_states"]:
        assert h.shape == (B, T, H) and h.dtype == torch.float32
    assert torch.equal(out["hidden_states"][-1], out["last_hidden_state"])


def test_last_hidden_state_matches_hf_at_real_tokens(out, ref):
    tensors, _ = ref
    real = tensors["attention_mask"].bool()
    _close(out["last_hidden_state"][real], tensors["last_hidden_state"][real], ATOL_REAL)


@pytest.mark.parametrize("layer", range(7))
def test_hidden_states_match_hf_at_real_tokens(out, ref, layer):
    # layer 0 is the embeddings output (word + position + token type, LayerNorm)
    tensors, _ = ref
    real = tensors["attention_mask"].bool()
    _close(out["hidden_states"][layer][real], tensors["hidden_states"][layer][real], ATOL_REAL)


def test_pooler_output_matches_hf(out, ref):
    tensors, _ = ref
    _close(out["pooler_output"], tensors["pooler_output"], ATOL_REAL)


def test_padded_positions_match_hf_loosely(out, ref):
    # see the module docstring for why padded positions get ATOL_PAD
    tensors, _ = ref
    pad = ~tensors["attention_mask"].bool()
    assert pad.any()
    for layer in range(7):
        _close(out["hidden_states"][layer][pad], tensors["hidden_states"][layer][pad], ATOL_PAD)


def test_result_does_not_depend_on_padding(model, out, ref):
    # each row alone (no padding at all) vs. the same row inside the padded batch
    tensors, _ = ref
    for row in range(tensors["input_ids"].shape[0]):
        n = int(tensors["attention_mask"][row].sum())
        with torch.no_grad():
            alone = model(*(tensors[k][row : row + 1, :n] for k in ("input_ids", "attention_mask", "token_type_ids")))
        _close(alone["last_hidden_state"][0], out["last_hidden_state"][row, :n], ATOL_REAL)
        for layer in range(len(alone["hidden_states"])):
            _close(alone["hidden_states"][layer][0], out["hidden_states"][layer][row, :n], ATOL_REAL)
        _close(alone["pooler_output"][0], out["pooler_output"][row], ATOL_REAL)
        # and the unpadded row also matches HF directly
        _close(alone["last_hidden_state"][0], tensors["last_hidden_state"][row, :n], ATOL_REAL)


def test_extra_padding_does_not_change_real_tokens(model, out, ref):
    # pad the whole batch by 9 more columns: real-token outputs must not move
    tensors, _ = ref
    extra = 9
    padded = {
        k: torch.cat([tensors[k], torch.zeros(tensors[k].shape[0], extra, dtype=torch.long)], dim=1)
        for k in ("input_ids", "attention_mask", "token_type_ids")
    }
    with torch.no_grad():
        longer = model(padded["input_ids"], padded["attention_mask"], padded["token_type_ids"])
    T = tensors["input_ids"].shape[1]
    real = tensors["attention_mask"].bool()
    _close(longer["last_hidden_state"][:, :T][real], out["last_hidden_state"][real], ATOL_REAL)
    _close(longer["pooler_output"], out["pooler_output"], ATOL_REAL)


def test_pipeline_from_text_matches_hf(model, ref):
    # our tokenizer + our model, starting from the raw sentences stored in the fixture
    tensors, meta = ref
    tok = BertTokenizer(default_model_dir() / "vocab.txt")
    batch = tok.encode_batch(meta["sentences"], max_length=128)
    with torch.no_grad():
        got = model(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"])
    T = batch["input_ids"].shape[1]
    real = batch["attention_mask"].bool()
    _close(got["last_hidden_state"][real], tensors["last_hidden_state"][:3, :T][real], ATOL_REAL)
    _close(got["pooler_output"], tensors["pooler_output"][:3], ATOL_REAL)


def test_token_type_ids_are_used(model, out, ref):
    # the pair row with all-zero segment ids must give a different result
    tensors, _ = ref
    row = 3
    assert tensors["token_type_ids"][row].any()
    with torch.no_grad():
        zeroed = model(
            tensors["input_ids"][row : row + 1],
            tensors["attention_mask"][row : row + 1],
            torch.zeros_like(tensors["token_type_ids"][row : row + 1]),
        )
    assert (zeroed["pooler_output"][0] - out["pooler_output"][row]).abs().max() > 1e-3


def test_eval_mode_is_deterministic(model, out, ref):
    tensors, _ = ref
    with torch.no_grad():
        again = model(tensors["input_ids"], tensors["attention_mask"], tensors["token_type_ids"])
    assert torch.equal(again["last_hidden_state"], out["last_hidden_state"])


def test_embedded_model_name_loads_same_weights(model):
    by_name = BertModel.from_pretrained("all-MiniLM-L6-v2")
    ours = model.state_dict()
    theirs = by_name.state_dict()
    assert ours.keys() == theirs.keys()
    for k in ours:
        assert torch.equal(ours[k], theirs[k]), k
