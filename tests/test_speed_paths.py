"""The fast paths give the same numbers as the readable ones.

Attention: ``"sdpa"`` (torch's fused ``scaled_dot_product_attention``) against the written-out
``"manual"`` softmax(QKᵀ/√d + mask)·V, on outputs and on every parameter's gradient, with padding;
and the sdpa path against the HuggingFace reference fixture, exactly as tests/test_model.py checks
the manual path. (The optimizer's foreach path is tested in tests/test_optimizer.py.)
Sparse word-embedding gradients hold the same numbers as the dense gradient, on the batch's rows.
Uniform dropout masks have the distribution of Bernoulli ones.
"""
import pytest
import torch

from minbert import BertConfig, BertModel
from minbert.model import ATTENTION_IMPLS, Dropout, MultiHeadSelfAttention
from minbert.weights import default_model_dir

ATOL = 1e-5


def _tiny(dropout: float = 0.0) -> BertModel:
    torch.manual_seed(0)
    config = BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                        intermediate_size=64, max_position_embeddings=32,
                        hidden_dropout_prob=dropout, attention_probs_dropout_prob=dropout)
    model = BertModel(config)
    with torch.no_grad():  # larger weights than BERT's N(0, 0.02) init: peaked attention, real gradients
        for name, p in model.named_parameters():
            if name.endswith("weight") and p.dim() == 2:
                p.normal_(0.0, 0.3)
    return model


def _batch():
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(1, 100, (4, 12), generator=g)
    mask = torch.ones(4, 12, dtype=torch.long)
    mask[1, 7:] = 0
    mask[2, 3:] = 0  # [CLS] + 2 tokens, then padding
    mask[3, 10:] = 0
    ids[mask == 0] = 0
    types = torch.zeros_like(ids)
    types[0, 6:] = 1
    return ids, mask, types


def _run(model: BertModel, impl: str):
    """Outputs and the gradient of every parameter for a loss touching every output."""
    model.set_attention(impl)
    model.zero_grad()
    ids, mask, types = _batch()
    out = model(ids, mask, types)
    real = mask.bool()
    loss = (out["last_hidden_state"][real].pow(2).mean() + out["pooler_output"].sum()
            + sum(h[real].mean() for h in out["hidden_states"]))
    loss.backward()
    grads = {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}
    return {k: v for k, v in out.items() if k != "hidden_states"}, out["hidden_states"], grads, real


@pytest.mark.parametrize("impl", ["sdpa", "auto"])
@pytest.mark.parametrize("mode", ["eval", "train_no_dropout"])
def test_sdpa_matches_manual_outputs_and_gradients(mode, impl):
    model = _tiny(dropout=0.1 if mode == "eval" else 0.0)
    model.train(mode != "eval")
    out_m, hidden_m, grads_m, real = _run(model, "manual")
    out_s, hidden_s, grads_s, _ = _run(model, impl)
    torch.testing.assert_close(out_s["last_hidden_state"][real], out_m["last_hidden_state"][real], rtol=0, atol=ATOL)
    torch.testing.assert_close(out_s["pooler_output"], out_m["pooler_output"], rtol=0, atol=ATOL)
    for hs, hm in zip(hidden_s, hidden_m):
        torch.testing.assert_close(hs[real], hm[real], rtol=0, atol=ATOL)
    assert grads_s.keys() == grads_m.keys() and len(grads_m) == len(list(model.parameters()))
    for name in grads_m:
        torch.testing.assert_close(grads_s[name], grads_m[name], rtol=0, atol=ATOL, msg=name)
    # the gradients are not trivially zero (so the comparison means something)
    for name in ("query", "key", "value"):
        assert grads_m[f"encoder.layer.0.attention.{name}.weight"].abs().max() > 1e-2


def test_sparse_word_embedding_gradient_is_the_dense_one_on_the_batch_rows():
    model = _tiny()
    _, _, dense, _ = _run(model, "manual")
    _, _, sparse, _ = _run(model.set_sparse_word_embeddings(), "manual")
    name = "embeddings.word_embeddings.weight"
    assert sparse[name].is_sparse and not dense[name].is_sparse
    rows = sparse[name].coalesce().indices()[0]
    assert sorted(rows.tolist()) == sorted(set(_batch()[0].flatten().tolist()) - {0})  # [PAD] row: no gradient
    torch.testing.assert_close(sparse[name].to_dense(), dense[name], rtol=0, atol=1e-6)
    for other in dense.keys() - {name}:
        assert torch.equal(sparse[other], dense[other]), other


def test_uniform_dropout_masks_have_the_bernoulli_distribution():
    torch.manual_seed(0)
    drop = Dropout(0.1)
    drop.masks = "uniform"
    x = torch.rand(1000, 1000) + 1.0                     # no zeros of its own
    y = drop(x.requires_grad_())
    kept = y != 0
    assert abs(kept.float().mean().item() - 0.9) < 0.002  # 1e6 draws: std of the fraction 3e-4
    torch.testing.assert_close(y[kept], x[kept] / 0.9)    # survivors scaled by 1/(1-p)
    y.sum().backward()
    torch.testing.assert_close(x.grad, kept.float() / 0.9)
    assert not torch.equal(kept, drop(x) != 0)            # a fresh mask per call
    drop.eval()
    assert torch.equal(drop(x), x)


def test_set_dropout_switches_every_dropout_and_bernoulli_is_torchs():
    model = _tiny(dropout=0.3).set_dropout("uniform")
    drops = [m for m in model.modules() if isinstance(m, Dropout)]
    assert len(drops) == 1 + 2 * 2 and all(m.masks == "uniform" for m in drops)  # embeddings, 2 per layer
    with pytest.raises(ValueError, match="unknown dropout masks"):
        model.set_dropout("gaussian")
    model.set_dropout("bernoulli")
    x = torch.randn(4, 8, 32)
    torch.manual_seed(3)
    ours = drops[0](x)
    torch.manual_seed(3)
    assert torch.equal(ours, torch.nn.functional.dropout(x, 0.3, training=True))


def test_sdpa_uses_attention_dropout_in_training_only():
    model = _tiny(dropout=0.5).set_attention("sdpa")
    attention = model.encoder.layer[0].attention
    x = torch.randn(2, 6, 32)
    mask = torch.zeros(2, 1, 1, 6)
    attention.eval()
    assert torch.equal(attention(x, mask), attention(x, mask))
    attention.train()
    torch.manual_seed(0)
    a = attention(x, mask)
    torch.manual_seed(1)
    b = attention(x, mask)
    assert not torch.allclose(a, b)


@pytest.mark.parametrize("training, dropout, fused", [(False, 0.1, True), (True, 0.0, True), (True, 0.1, False)])
def test_auto_takes_sdpa_except_with_attention_dropout_on_cpu(monkeypatch, training, dropout, fused):
    calls = []
    real_sdpa = torch.nn.functional.scaled_dot_product_attention
    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention",
                        lambda *a, **k: calls.append(1) or real_sdpa(*a, **k))
    model = _tiny(dropout=dropout).set_attention("auto").train(training)
    ids, mask, types = _batch()
    model(ids, mask, types)
    assert bool(calls) == fused


def test_set_attention_switches_every_layer_and_rejects_unknown():
    model = _tiny()
    layers = [m for m in model.modules() if isinstance(m, MultiHeadSelfAttention)]
    assert len(layers) == 2 and all(m.impl == "auto" for m in layers)  # the fast path is the default
    assert model.set_attention("sdpa") is model
    assert all(m.impl == "sdpa" for m in layers)
    assert set(ATTENTION_IMPLS) == {"manual", "sdpa", "auto"}
    with pytest.raises(ValueError, match="flash"):
        model.set_attention("flash")
    with pytest.raises(ValueError, match="unknown attention"):
        MultiHeadSelfAttention(model.config, impl="nope")


@pytest.fixture(scope="module")
def embedded():
    return BertModel.from_pretrained(default_model_dir()).eval()


@pytest.mark.parametrize("impl", ATTENTION_IMPLS)
def test_embedded_model_matches_hf_reference(embedded, ref, impl):
    # the same checks and tolerances as tests/test_model.py (see its docstring), on each path
    tensors, _ = ref
    embedded.set_attention(impl)
    try:
        with torch.no_grad():
            out = embedded(tensors["input_ids"], tensors["attention_mask"], tensors["token_type_ids"])
    finally:
        embedded.set_attention("manual")
    real = tensors["attention_mask"].bool()
    for layer in range(len(out["hidden_states"])):
        torch.testing.assert_close(out["hidden_states"][layer][real], tensors["hidden_states"][layer][real],
                                   rtol=0, atol=1e-5)
    torch.testing.assert_close(out["last_hidden_state"][real], tensors["last_hidden_state"][real], rtol=0, atol=1e-5)
    torch.testing.assert_close(out["pooler_output"], tensors["pooler_output"], rtol=0, atol=1e-5)
    pad = ~real
    for layer in range(len(out["hidden_states"])):
        torch.testing.assert_close(out["hidden_states"][layer][pad], tensors["hidden_states"][layer][pad],
                                   rtol=0, atol=1e-4)
