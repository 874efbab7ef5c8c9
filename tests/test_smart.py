"""training.learning.smart: the SMART divergence, adversarial regulariser and Bregman proximal term.

The divergences are checked against values worked out by hand with ``math``; the regulariser and
the proximal term on a tiny random ``MultitaskBert`` in float64 with dropout off, so the clean and
perturbed outputs differ only by the noise and second-order differences are not lost to rounding.
"""
import math

import pytest
import torch

from heads import MultitaskBert, PairHead, SentimentHead
from minbert import BertConfig, BertModel
from training.learning.smart import Ascent, BregmanProximal, EmbeddingNoise, divergence, smart_loss
from training.learning.task_schema import BUILTIN_TASKS


def _model() -> MultitaskBert:
    torch.manual_seed(0)
    config = BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=32, max_position_embeddings=32,
                        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    heads = {"sst": SentimentHead(16, 5, dropout=0.0),
             "qqp": PairHead(16, "concat", "logit", dropout=0.0),
             "sts": PairHead(16, "concat", "score", dropout=0.0)}
    return MultitaskBert(BertModel(config), heads).double().train()


def _sentence(batch: int, length: int, seed: int) -> dict:
    generator = torch.Generator().manual_seed(seed)
    input_ids = torch.randint(1, 50, (batch, length), generator=generator)
    attention_mask = torch.ones(batch, length, dtype=torch.long)
    attention_mask[0, -2:] = 0   # one padded row
    input_ids[attention_mask == 0] = 0
    return {"input_ids": input_ids, "attention_mask": attention_mask,
            "token_type_ids": torch.zeros_like(input_ids)}


SINGLE = [_sentence(3, 6, seed=1)]
PAIR = [_sentence(3, 5, seed=2), _sentence(3, 7, seed=3)]
INPUTS = {"sst": SINGLE, "qqp": PAIR, "sts": PAIR}


def _regulariser(model, task, seed=0, **ascent):
    inputs = INPUTS[task]
    clean = model(task, inputs)
    torch.manual_seed(seed)
    return smart_loss(model, task, inputs, clean, BUILTIN_TASKS[task].divergence, ascent=Ascent(**ascent))


# ----------------------------------------------------------------------------- divergence

def test_symmetric_kl_by_hand_two_classes():
    # p = softmax(0, 0) = (1/2, 1/2), q = softmax(ln 3, 0) = (3/4, 1/4):
    # KL(p‖q) + KL(q‖p) = (1/2 - 3/4) ln(2/3) + (1/2 - 1/4) ln 2 = ln(3) / 4; the second row is 0.
    a = torch.tensor([[0.0, 0.0], [1.0, -1.0]], dtype=torch.float64)
    b = torch.tensor([[math.log(3.0), 0.0], [1.0, -1.0]], dtype=torch.float64)
    expected = (math.log(3.0) / 4 + 0.0) / 2
    assert divergence(a, b, "multiclass").item() == pytest.approx(expected, rel=1e-12)


def test_symmetric_kl_is_symmetric_and_zero_on_equal_inputs():
    torch.manual_seed(0)
    a, b = torch.randn(4, 5), 3 * torch.randn(4, 5)
    for kind, (x, y) in {"multiclass": (a, b), "binary": (a[:, 0], b[:, 0])}.items():
        assert divergence(x, y, kind) == divergence(y, x, kind)
        assert divergence(x, y, kind) > 0
        assert divergence(x, x.clone(), kind) == 0


def test_binary_matches_bernoulli_symmetric_kl_by_hand():
    def kl(p, q):
        return p * math.log(p / q) + (1 - p) * math.log((1 - p) / (1 - q))

    sigmoid = lambda z: 1 / (1 + math.exp(-z))
    a, b = [2.0, -0.5, 0.3], [-1.0, 1.5, 0.3]
    expected = sum(kl(sigmoid(x), sigmoid(y)) + kl(sigmoid(y), sigmoid(x)) for x, y in zip(a, b)) / 3
    got = divergence(torch.tensor(a, dtype=torch.float64), torch.tensor(b, dtype=torch.float64), "binary")
    assert got.item() == pytest.approx(expected, rel=1e-12)


def test_regression_is_mean_squared_error_and_unknown_kind_is_rejected():
    got = divergence(torch.tensor([1.0, 2.0]), torch.tensor([0.0, 4.0]), "regression")
    assert got.item() == pytest.approx((1 + 4) / 2)
    with pytest.raises(ValueError, match="unknown output kind"):
        divergence(torch.zeros(2), torch.zeros(2), "ranking")


def test_binary_is_stable_for_large_logits():
    got = divergence(torch.tensor([80.0]), torch.tensor([-80.0]), "binary")
    # σ(80) ≈ 1 and σ(−80) ≈ 0: (p − q)(logit_p − logit_q) = 1 · 160
    assert torch.isfinite(got) and got.item() == pytest.approx(160.0)


# ----------------------------------------------------------------------------- smart_loss

@pytest.mark.parametrize("task", ["sst", "qqp", "sts"])
def test_regulariser_is_zero_without_noise(task):
    assert abs(_regulariser(_model(), task, eps=0.0, step=0.0).item()) < 1e-10


@pytest.mark.parametrize("steps", [0, 1])
@pytest.mark.parametrize("task", ["sst", "qqp", "sts"])
def test_regulariser_grows_with_the_noise(task, steps):
    model = _model()
    values = [_regulariser(model, task, eps=eps, steps=steps).item() for eps in (1e-3, 1e-2, 1e-1)]
    assert 0 < values[0] < values[1] < values[2], values


@pytest.mark.parametrize("eps, step", [(1e-5, 1e-3), (1e-2, 1e-2)])
@pytest.mark.parametrize("task", ["sst", "qqp", "sts"])
def test_ascent_step_increases_the_divergence(task, eps, step):
    model = _model()
    before = _regulariser(model, task, seed=5, eps=eps, step=step, steps=0).item()
    after = _regulariser(model, task, seed=5, eps=eps, step=step, steps=1).item()
    assert after > before


def test_ascent_direction_beats_the_opposite_step():
    """The normalised-gradient step raises the divergence more than the same step reversed."""
    model = _model()
    clean = model("qqp", PAIR).detach()
    torch.manual_seed(3)
    noise = EmbeddingNoise(eps=1e-2)
    grads = torch.autograd.grad(divergence(noise.run(model, "qqp", PAIR, track=True), clean, "binary"),
                                noise.tensors)
    start = [t.clone() for t in noise.tensors]

    def divergence_after(sign):
        noise.tensors = [t.clone() for t in start]
        noise.ascend([sign * g for g in grads], step=1e-2, eps_norm=1e-30)
        for moved, before, sentence in zip(noise.tensors, start, PAIR):
            # each real token moved 1e-2 in the ∞-norm; padding has zero gradient and stays put
            shift = (moved - before).abs().amax(-1)
            real = sentence["attention_mask"].bool()
            torch.testing.assert_close(shift[real], torch.full_like(shift[real], 1e-2), rtol=1e-3, atol=0)
            assert (shift[~real] == 0).all()
        return divergence(noise.run(model, "qqp", PAIR, track=False), clean, "binary").item()

    assert divergence_after(+1) > divergence_after(-1)


@pytest.mark.parametrize("task", ["sst", "qqp"])
def test_gradient_reaches_the_encoder_and_not_during_ascent(task):
    model = _model()
    loss = _regulariser(model, task, eps=1e-2, step=1e-2, steps=2)
    # the ascent steps used torch.autograd.grad: nothing has been written to .grad yet
    assert all(p.grad is None for p in model.parameters())
    loss.backward()
    bert = model.bert
    for param in (bert.embeddings.word_embeddings.weight, bert.encoder.layer[0].attention.query.weight,
                  bert.encoder.layer[1].output.weight, model.heads[task].classifier.weight):
        assert param.grad is not None and param.grad.abs().sum() > 0


@pytest.mark.parametrize("task", ["sst", "qqp", "sts"])
def test_gradient_reaches_the_model_through_the_clean_output_too(task):
    model = _model()
    clean = model(task, INPUTS[task]).detach().requires_grad_()
    torch.manual_seed(0)
    loss = smart_loss(model, task, INPUTS[task], clean, BUILTIN_TASKS[task].divergence, ascent=Ascent(eps=1e-2))
    (grad,) = torch.autograd.grad(loss, clean)
    assert grad.abs().sum() > 0


@pytest.mark.parametrize("task", ["sst", "qqp", "sts"])
def test_regulariser_value_is_weight_times_the_divergence_at_the_noise(task):
    model = _model()
    clean = model(task, INPUTS[task])
    torch.manual_seed(7)
    adversarial = EmbeddingNoise(eps=1e-2).run(model, task, INPUTS[task], track=False)
    expected = 0.25 * divergence(adversarial, clean, BUILTIN_TASKS[task].divergence).item()
    torch.manual_seed(7)   # smart_loss draws the same noise
    got = smart_loss(model, task, INPUTS[task], clean, BUILTIN_TASKS[task].divergence, 0.25, Ascent(eps=1e-2, steps=0))
    assert got.item() == pytest.approx(expected, rel=1e-9)


def test_pair_tasks_perturb_both_sentences_with_their_own_noise():
    model = _model()
    clean = model("qqp", PAIR)
    noise = EmbeddingNoise(eps=1e-2)
    perturbed = noise.run(model, "qqp", PAIR, track=False)
    assert noise.calls == 2 and len(noise.tensors) == 2
    assert [tuple(t.shape) for t in noise.tensors] == [(3, 5, 16), (3, 7, 16)]
    assert not torch.equal(perturbed, clean)
    # the counter resets per forward: a second pass reuses the same two tensors
    first = list(noise.tensors)
    torch.testing.assert_close(noise.run(model, "qqp", PAIR, track=False), perturbed, rtol=0, atol=0)
    assert noise.calls == 2 and all(a is b for a, b in zip(noise.tensors, first))
    # each sentence's noise alone changes the output
    for k in (0, 1):
        noise.tensors = [t if i == k else torch.zeros_like(t) for i, t in enumerate(first)]
        assert not torch.equal(noise.run(model, "qqp", PAIR, track=False), clean)


# ----------------------------------------------------------------------------- BregmanProximal

def test_bregman_penalty_is_zero_at_start_and_grows_when_the_model_moves():
    model = _model()
    bregman = BregmanProximal(model, mu=2.0, beta=0.9)
    assert all(not p.requires_grad for p in bregman.ema.parameters())
    for task in ("sst", "qqp", "sts"):
        assert bregman.penalty(model(task, INPUTS[task]), task, INPUTS[task], BUILTIN_TASKS[task].divergence).item() == 0
    with torch.no_grad():
        for param in model.parameters():
            param.add_(0.05 * torch.randn_like(param))
    for task in ("sst", "qqp", "sts"):
        output = model(task, INPUTS[task])
        penalty = bregman.penalty(output, task, INPUTS[task], BUILTIN_TASKS[task].divergence)
        assert penalty.item() > 0
        with torch.no_grad():
            target = bregman.ema(task, INPUTS[task])
        assert penalty.item() == pytest.approx(2.0 * divergence(output, target, BUILTIN_TASKS[task].divergence).item())
        (grad,) = torch.autograd.grad(penalty, model.bert.embeddings.word_embeddings.weight)
        assert grad.abs().sum() > 0


def test_bregman_update_moves_the_average_by_one_minus_beta():
    model = _model()
    bregman = BregmanProximal(model, beta=0.9)
    old = [p.detach().clone() for p in bregman.ema.parameters()]
    with torch.no_grad():
        for param in model.parameters():
            param.add_(torch.randn_like(param))
    bregman.update(model)
    for ema, before, param in zip(bregman.ema.parameters(), old, model.parameters()):
        torch.testing.assert_close(ema, 0.9 * before + 0.1 * param)
    with pytest.raises(ValueError, match="beta"):
        BregmanProximal(model, beta=1.0)
