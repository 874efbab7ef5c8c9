"""Tests for minbert.optimizer.AdamW against torch.optim.AdamW and hand computations.

On ε placement: our AdamW uses the efficient form of Kingma & Ba (2015, §2),

    θ ← θ - lr · sqrt(1-β2^t)/(1-β1^t) · m / (sqrt(v) + ε),

while torch.optim.AdamW computes

    θ ← θ - lr/(1-β1^t) · m / (sqrt(v)/sqrt(1-β2^t) + ε).

Both are the same update with ε rescaled: ours behaves like torch with ε' = ε / sqrt(1-β2^t)
(≈ 31.6·ε at t=1, → ε as t grows). The difference matters wherever |g| is not >> ε; a small
MLP has gradient entries of order 1e-4 and below, so even ε = 1e-12 moves a float64 trajectory
by ~1e-9 (measured). Hence:
  * with ε = 0 (float64) the two are the same formula and must agree to round-off
    (test_matches_torch_adamw_with_zero_eps);
  * with the default ε = 1e-6 on a well-scaled linear regression they agree up to a small,
    explained drift (test_close_to_torch_adamw_with_default_eps);
  * the ε placement itself is checked by a hand-computed first step (test_eps_placement_first_step).
"""
import io
import math
from pathlib import Path

import pytest
import torch

from minbert.optimizer import AdamW


def _make_problem(dtype, kind="mlp"):
    """A small regression problem (MLP or linear model) with fixed random data."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(64, 8, generator=g, dtype=dtype)
    w = torch.randn(8, 1, generator=g, dtype=dtype)
    y = x @ w + 0.1 * torch.randn(64, 1, generator=g, dtype=dtype)
    torch.manual_seed(0)
    if kind == "mlp":
        model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
    else:
        model = torch.nn.Linear(8, 1)
    return model.to(dtype), x, y


def _param_groups(model, lr, weight_decay):
    """Two groups, as in BERT fine-tuning: weights with decay, biases without, different lrs."""
    weights = [p for n, p in model.named_parameters() if n.endswith("weight")]
    biases = [p for n, p in model.named_parameters() if n.endswith("bias")]
    return [
        {"params": weights, "lr": lr, "weight_decay": weight_decay},
        {"params": biases, "lr": lr * 3, "weight_decay": 0.0},
    ]


def _train(opt_cls, dtype, kind="mlp", steps=200, eps=1e-6, lr=1e-2, weight_decay=0.01, **kw):
    model, x, y = _make_problem(dtype, kind)
    opt = opt_cls(_param_groups(model, lr, weight_decay), lr=lr, betas=(0.9, 0.999), eps=eps, **kw)
    for _ in range(steps):
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
    return [p.detach().clone() for p in model.parameters()], loss.item()


FOREACH = pytest.mark.parametrize("foreach", [False, True, None], ids=["loop", "foreach", "auto"])


@FOREACH
def test_matches_torch_adamw_with_zero_eps(foreach):
    # ε = 0: both compute lr·sqrt(bc2)/bc1 · m/sqrt(v), only in a different order, so they agree
    # to float64 round-off (measured max difference ~1e-15 after 200 steps). No gradient entry is
    # exactly zero on this problem, so there is no 0/0.
    ours, loss_ours = _train(AdamW, torch.float64, eps=0.0, foreach=foreach)
    ref, loss_ref = _train(torch.optim.AdamW, torch.float64, eps=0.0)
    for a, b in zip(ours, ref):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-13)
    # the problem actually trains (so the comparison is not between two frozen models)
    model, x, y = _make_problem(torch.float64)
    loss_init = torch.nn.functional.mse_loss(model(x), y).item()
    assert loss_ours < 0.01 * loss_init
    assert loss_ours == pytest.approx(loss_ref, rel=1e-10)


@FOREACH
def test_close_to_torch_adamw_with_default_eps(foreach):
    # ε = 1e-6 on both, float32, linear regression (gradients of order 0.1..10). Our effective
    # ε is ε/sqrt(1-β2^t) (see module docstring): ~3.2e-5 at t=1, ~2.3e-6 at t=200. Against
    # sqrt(v̂) ≈ |g| ≳ 0.1 that changes an update of size ≤ lr by a relative ≲ 3e-4, i.e.
    # ≲ 3e-6 per step at lr=1e-2, mostly in the first steps; the measured maximum parameter
    # difference is ~1.3e-5 (at step 10), ~1.3e-6 after 200 steps. atol=1e-4 leaves a margin
    # while still catching any real algorithmic difference (those show up at ≥ 1e-3).
    # (On the MLP, whose gradients include entries ~1e-5, the same ε shift reaches ~1e-3.)
    ours, _ = _train(AdamW, torch.float32, kind="linear", eps=1e-6, foreach=foreach)
    ref, _ = _train(torch.optim.AdamW, torch.float32, kind="linear", eps=1e-6)
    for a, b in zip(ours, ref):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-4)


def test_eps_placement_first_step():
    # One step on a single scalar with a gradient small enough that ε matters.
    lr, b1, b2, eps, wd = 0.1, 0.9, 0.999, 1e-3, 0.01
    p0, g = 2.0, 1e-3
    p = torch.nn.Parameter(torch.tensor([p0], dtype=torch.float64))
    opt = AdamW([p], lr=lr, betas=(b1, b2), eps=eps, weight_decay=wd)
    p.grad = torch.tensor([g], dtype=torch.float64)
    opt.step()

    m = (1 - b1) * g
    v = (1 - b2) * g * g
    decayed = p0 - lr * wd * p0  # decoupled decay, applied before the Adam update
    step_size = lr * math.sqrt(1 - b2) / (1 - b1)  # Kingma & Ba §2 efficient form
    expected = decayed - step_size * m / (math.sqrt(v) + eps)
    assert p.item() == pytest.approx(expected, rel=1e-12)

    # torch's placement (ε after the bias correction of sqrt(v)) gives a different number here
    torch_form = decayed - lr / (1 - b1) * m / (math.sqrt(v) / math.sqrt(1 - b2) + eps)
    assert abs(expected - torch_form) > 1e-3


def test_no_bias_correction_first_step():
    lr, b1, b2, eps = 0.01, 0.9, 0.999, 1e-6
    g = torch.tensor([0.5, -2.0, 1e-3, 0.0], dtype=torch.float64)
    p0 = torch.tensor([1.0, -1.0, 0.3, 0.7], dtype=torch.float64)
    p = torch.nn.Parameter(p0.clone())
    opt = AdamW([p], lr=lr, betas=(b1, b2), eps=eps, weight_decay=0.0, correct_bias=False)
    p.grad = g.clone()
    opt.step()
    expected = p0 - lr * (1 - b1) * g / (torch.sqrt((1 - b2) * g * g) + eps)
    torch.testing.assert_close(p.detach(), expected, rtol=1e-12, atol=1e-15)
    # for |g| >> ε the uncorrected first step is lr·(1-β1)/sqrt(1-β2) ≈ 3.16·lr (corrected: ≈ lr)
    moved = (p0 - p.detach())[:2].abs()
    torch.testing.assert_close(moved, torch.full_like(moved, lr * (1 - b1) / math.sqrt(1 - b2)), rtol=1e-3, atol=0)


def test_weight_decay_is_decoupled():
    # With a zero gradient, m and v stay 0 and only the decoupled decay moves the weights:
    # p ← p·(1 - lr·λ) each step (an L2 penalty in the loss would instead be rescaled by Adam).
    lr, wd = 0.1, 0.5
    p = torch.nn.Parameter(torch.tensor([1.0, -3.0], dtype=torch.float64))
    opt = AdamW([p], lr=lr, weight_decay=wd)
    for _ in range(3):
        p.grad = torch.zeros_like(p)
        opt.step()
    torch.testing.assert_close(p.detach(), torch.tensor([1.0, -3.0], dtype=torch.float64) * (1 - lr * wd) ** 3)


def test_skips_params_without_grad_and_returns_closure_loss():
    a = torch.nn.Parameter(torch.ones(3))
    b = torch.nn.Parameter(torch.ones(3))
    opt = AdamW([a, b], lr=0.1, weight_decay=0.1)

    def closure():
        opt.zero_grad()
        loss = (a * 2).sum()
        loss.backward()
        return loss

    loss = opt.step(closure)
    assert loss.item() == pytest.approx(6.0)
    assert not torch.equal(a.detach(), torch.ones(3))
    assert torch.equal(b.detach(), torch.ones(3))  # no grad -> untouched, not even decayed
    assert b not in opt.state


def test_state_dict_roundtrip_continues_identically():
    model, x, y = _make_problem(torch.float64)
    opt = AdamW(_param_groups(model, 1e-2, 0.01), lr=1e-2)

    def run(m, o, n):
        for _ in range(n):
            o.zero_grad()
            torch.nn.functional.mse_loss(m(x), y).backward()
            o.step()

    run(model, opt, 5)
    model2, _, _ = _make_problem(torch.float64)
    model2.load_state_dict(model.state_dict())
    opt2 = AdamW(_param_groups(model2, 1e-2, 0.01), lr=1e-2)
    # through bytes, as a checkpoint would (an in-memory state_dict shares the moment tensors)
    buffer = io.BytesIO()
    torch.save(opt.state_dict(), buffer)
    buffer.seek(0)
    opt2.load_state_dict(torch.load(buffer))
    run(model, opt, 5)
    run(model2, opt2, 5)
    for a, b in zip(model.parameters(), model2.parameters()):
        assert torch.equal(a, b)


def _lazy_run(opt_cls, batches, **kw):
    """Embedding rows after a step per batch of ids, with a sparse gradient (lazy update)."""
    torch.manual_seed(0)
    emb = torch.nn.Embedding(12, 5, sparse=True)
    target = torch.randn(12, 5)
    opt = opt_cls(emb.parameters(), **kw)
    for ids in batches:
        ids = torch.tensor(ids)
        ((emb(ids) - target[ids]) ** 2).sum().backward()   # ids may repeat: their gradients add up
        opt.step()
        opt.zero_grad(set_to_none=True)
    return emb.weight.detach(), opt


BATCHES = [[1, 2, 2, 7], [3, 1], [9, 9, 4, 1, 0], [2, 11]]


@pytest.mark.parametrize("foreach,fused", [(False, False), (True, False), (None, True)],
                         ids=["loop", "foreach", "fused"])
def test_sparse_gradient_lazy_update_matches_torch_sparse_adam(foreach, fused):
    # torch.optim.SparseAdam is lazy Adam (rows with a gradient only, global step count for the
    # bias correction); with a negligible ε (it refuses 0) and no weight decay, ε placement does not matter.
    ours, _ = _lazy_run(AdamW, BATCHES, lr=0.05, eps=1e-12, foreach=foreach, fused=fused)
    ref, _ = _lazy_run(torch.optim.SparseAdam, BATCHES, lr=0.05, eps=1e-12)
    torch.testing.assert_close(ours, ref, rtol=1e-6, atol=1e-7)


def test_sparse_gradient_leaves_other_rows_untouched():
    start, _ = _lazy_run(AdamW, [], lr=0.05)
    after, opt = _lazy_run(AdamW, BATCHES, lr=0.05, weight_decay=0.1)
    touched = sorted({i for ids in BATCHES for i in ids})
    untouched = [i for i in range(12) if i not in touched]
    assert torch.equal(after[untouched], start[untouched])          # not moved, not even decayed
    assert not torch.isclose(after[touched], start[touched]).all(dim=1).any()
    state = opt.state[opt.param_groups[0]["params"][0]]
    assert state["step"] == len(BATCHES)
    assert not state["exp_avg"][untouched].any() and state["exp_avg_sq"][touched].all()


def test_sparse_gradient_on_every_row_equals_the_dense_update():
    # when a batch touches every row, lazy and dense AdamW are the same update, weight decay included
    torch.manual_seed(0)
    weight = torch.randn(6, 3)
    grads = [torch.randn(6, 3) for _ in range(3)]
    results = []
    for sparse in (False, True):
        p = torch.nn.Parameter(weight.clone())
        opt = AdamW([p], lr=0.01, weight_decay=0.1, fused=False)  # the rows' update is the loop's arithmetic
        for g in grads:
            p.grad = g.to_sparse(sparse_dim=1) if sparse else g.clone()
            opt.step()
        results.append(p.detach())
    assert torch.equal(*results)


def test_defaults():
    opt = AdamW([torch.nn.Parameter(torch.zeros(1))])
    group = opt.param_groups[0]
    assert group["lr"] == 1e-3
    assert group["betas"] == (0.9, 0.999)
    assert group["eps"] == 1e-6
    assert group["weight_decay"] == 0.0
    assert group["correct_bias"] is True


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"lr": -1e-3}, "learning rate"),
        ({"betas": (-0.1, 0.999)}, "beta"),
        ({"betas": (0.9, 1.0)}, "beta"),
        ({"betas": (1.5, 0.999)}, "beta"),
        ({"eps": -1e-8}, "epsilon"),
        ({"weight_decay": -0.01}, "weight_decay"),
        ({"lr": float("nan")}, "learning rate"),
    ],
)
def test_invalid_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        AdamW([torch.nn.Parameter(torch.zeros(1))], **kwargs)


# --- the multi-tensor (foreach) path ----------------------------------------------------------


@pytest.mark.parametrize("correct_bias", [True, False])
def test_foreach_and_loop_paths_are_bit_identical(correct_bias):
    # same element-wise kernels in the same order, so not just close: equal
    loop, loss_loop = _train(AdamW, torch.float32, foreach=False, correct_bias=correct_bias)
    fused, loss_fused = _train(AdamW, torch.float32, foreach=True, correct_bias=correct_bias)
    for a, b in zip(loop, fused):
        assert torch.equal(a, b)
    assert loss_loop == loss_fused


def test_foreach_handles_mixed_dtypes_and_missing_grads():
    # one group holding float32 and float64 tensors and one without a gradient: foreach=True
    # updates list by list, foreach=None (without the fused kernel) falls back to the loop; both
    # equal the loop path
    def run(foreach):
        torch.manual_seed(0)
        a = torch.nn.Parameter(torch.randn(5))
        b = torch.nn.Parameter(torch.randn(3, dtype=torch.float64))
        c = torch.nn.Parameter(torch.randn(2))
        c0 = c.detach().clone()
        opt = AdamW([a, b, c], lr=0.1, weight_decay=0.1, foreach=foreach, fused=False)
        for _ in range(3):
            opt.zero_grad()
            (a.pow(2).sum() + b.pow(3).sum()).backward()
            opt.step()
        return a.detach(), b.detach(), c.detach(), c0

    ref = run(False)
    for foreach in (True, None):
        for x, y in zip(run(foreach), ref):
            assert torch.equal(x, y)
    assert torch.equal(ref[2], ref[3])  # no gradient: untouched, not even decayed


def test_foreach_state_dict_loads_into_loop_optimizer():
    # the state layout is the same for both paths, so checkpoints move between them
    model, x, y = _make_problem(torch.float64)
    opt = AdamW(_param_groups(model, 1e-2, 0.01), lr=1e-2, foreach=True)
    model2, _, _ = _make_problem(torch.float64)
    opt2 = AdamW(_param_groups(model2, 1e-2, 0.01), lr=1e-2, foreach=False)
    for m, o in ((model, opt), (model2, opt2)):
        for _ in range(4):
            o.zero_grad()
            torch.nn.functional.mse_loss(m(x), y).backward()
            o.step()
    for key in ("step", "exp_avg", "exp_avg_sq"):
        for s1, s2 in zip(opt.state_dict()["state"].values(), opt2.state_dict()["state"].values()):
            assert s1[key] == s2[key] if key == "step" else torch.equal(s1[key], s2[key])


def test_blocked_cpu_loop_equals_whole_tensor_update(monkeypatch):
    # the CPU loop path updates big tensors block by block; element-wise math is the same, so
    # the result must equal one whole-tensor update exactly, including a ragged last block
    import minbert.optimizer as optimizer_module

    def run(block):
        monkeypatch.setattr(optimizer_module, "CPU_BLOCK", block)
        torch.manual_seed(0)
        big = torch.nn.Parameter(torch.randn(37, 29))          # 1073 elements
        small = torch.nn.Parameter(torch.randn(5))
        opt = AdamW([big, small], lr=0.05, weight_decay=0.1, foreach=False)
        for step in range(4):
            opt.zero_grad()
            (big.sin().sum() * (step + 1) + small.pow(2).sum()).backward()
            opt.step()
        return big.detach().clone(), opt.state[big]["exp_avg_sq"].clone()

    whole = run(1 << 30)
    for block in (64, 100, 1073):
        for a, b in zip(run(block), whole):
            assert torch.equal(a, b)


@pytest.mark.parametrize("options, path", [({}, "fused"), ({"fused": False}, "loop"), ({"foreach": False}, "loop"),
                                           ({"foreach": True}, "foreach"), ({"fused": True}, "fused")])
def test_default_is_the_fused_kernel_on_cpu_and_any_foreach_choice_turns_it_off(options, path):
    p = torch.nn.Parameter(torch.ones(3))
    opt = AdamW([p], lr=0.1, **options)
    called = []
    opt._step_loop = lambda group, params: called.append("loop")
    opt._step_foreach = lambda group, params: called.append("foreach")
    opt._step_fused = lambda group, params: called.append("fused")
    p.grad = torch.ones(3)
    opt.step()
    assert called == [path]


def test_fused_kernel_path_matches_loop_and_torch():
    # float64, ε = 0: the same update as the loop and as torch.optim.AdamW up to round-off
    fused, loss_fused = _train(AdamW, torch.float64, eps=0.0, fused=True)
    loop, _ = _train(AdamW, torch.float64, eps=0.0, foreach=False)
    ref, loss_ref = _train(torch.optim.AdamW, torch.float64, eps=0.0)
    for a, b, c in zip(fused, loop, ref):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-13)
        torch.testing.assert_close(a, c, rtol=1e-12, atol=1e-13)
    assert loss_fused == pytest.approx(loss_ref, rel=1e-10)


def test_fused_kernel_path_keeps_our_eps_placement():
    # ε large enough to matter: the fused path must follow our placement (ε before the bias
    # correction), i.e. equal the loop, not torch's placement
    fused, _ = _train(AdamW, torch.float64, eps=1e-3, fused=True, steps=20)
    loop, _ = _train(AdamW, torch.float64, eps=1e-3, foreach=False, steps=20)
    ref, _ = _train(torch.optim.AdamW, torch.float64, eps=1e-3, steps=20)
    for a, b in zip(fused, loop):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)
    assert max((a - c).abs().max().item() for a, c in zip(fused, ref)) > 1e-6


def test_decay_groups_leave_biases_and_layer_norms_undecayed():
    from minbert import BertConfig, BertModel, decay_groups
    model = BertModel(BertConfig(vocab_size=50, hidden_size=8, num_hidden_layers=1, num_attention_heads=2,
                                 intermediate_size=16, max_position_embeddings=16))
    decay, no_decay = decay_groups(model.named_parameters(), 0.01, lr=0.5)
    names = {id(p): name for name, p in model.named_parameters()}
    assert decay["weight_decay"] == 0.01 and no_decay["weight_decay"] == 0.0 and decay["lr"] == no_decay["lr"] == 0.5
    norms = {id(p) for module in model.modules() if isinstance(module, torch.nn.LayerNorm)
             for p in module.parameters()}          # every LayerNorm, by type: the embeddings' and each layer's two
    expected = {name for name, p in model.named_parameters() if name.endswith(".bias") or id(p) in norms}
    assert {names[id(p)] for p in no_decay["params"]} == expected
    assert "encoder.layer.0.attention_norm.weight" in expected and "encoder.layer.0.output_norm.weight" in expected
    assert "embeddings.word_embeddings.weight" in {names[id(p)] for p in decay["params"]}


@pytest.mark.slow
def test_the_optimizer_does_not_import_torch_dynamo():
    """torch.optim.Optimizer's add_param_group, zero_grad, state_dict and load_state_dict are wrapped in
    torch._disable_dynamo, whose first call imports torch._dynamo (about 2 s of a run's start on 2 cores);
    ours calls the bodies beneath, in a fresh process, and a step and a state round trip still work."""
    import subprocess
    import sys

    code = ("import sys, torch; from minbert import AdamW; layer = torch.nn.Linear(2, 2); "
            "opt = AdamW(layer.parameters(), lr=0.1); layer(torch.ones(1, 2)).sum().backward(); opt.step(); "
            "opt.zero_grad(); opt.load_state_dict(opt.state_dict()); "
            "print(len(opt.state), layer.weight.grad, 'torch._dynamo' in sys.modules)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                            cwd=Path(__file__).resolve().parents[1])
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["2", "None", "False"]
