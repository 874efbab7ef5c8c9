"""training.learning.losses against numbers worked out by hand.

InfoNCE uses 2-D vectors whose cosines are exact: with a1 = (1, 0), a2 = (0, 1), p1 = (1, 0),
p2 = (0.6, 0.8), h1 = (0, 1), h2 = (-1, 0) the cosines are

    cos(a_i, p_j) = [[1, 0.6], [0, 0.8]]      cos(a_i, h_j) = [[0, -1], [1, 0]]

and the inputs are given at other lengths, since only directions may matter. Each expected loss is
written out from SimCSE's Eq. 1 / Eq. 5 (a ratio of exponentials), not from a cross-entropy call.
"""
import math

import pytest
import torch

from training.learning.losses import (AdaptiveWeighting, FixedWeighting, LearnedWeighting, LossWeighting,
                             info_nce, make_loss_weighting)
from training.learning.task_schema import BUILTIN_TASKS

A = torch.tensor([[2.0, 0.0], [0.0, 0.5]])      # directions (1, 0), (0, 1)
P = torch.tensor([[3.0, 0.0], [3.0, 4.0]])      # directions (1, 0), (0.6, 0.8)
H = torch.tensor([[0.0, 7.0], [-0.1, 0.0]])     # directions (0, 1), (-1, 0)
COS_P = [[1.0, 0.6], [0.0, 0.8]]
COS_H = [[0.0, -1.0], [1.0, 0.0]]
TASKS3 = ["sst", "qqp", "sts"]


def _eq5(tau, alpha=None):
    """-1/B Σ_i log e^{cos(a_i,p_i)/τ} / (Σ_j e^{cos(a_i,p_j)/τ} + Σ_j α^{[i=j]} e^{cos(a_i,h_j)/τ})."""
    total = 0.0
    for i in range(2):
        denominator = sum(math.exp(COS_P[i][j] / tau) for j in range(2))
        if alpha is not None:
            denominator += sum((alpha if i == j else 1.0) * math.exp(COS_H[i][j] / tau) for j in range(2))
        total += -math.log(math.exp(COS_P[i][i] / tau) / denominator)
    return total / 2


def test_info_nce_without_hard_negatives_matches_hand_log_softmax():
    # τ = 0.5: logits [[2, 1.2], [0, 1.6]], targets on the diagonal.
    expected = ((-2.0 + math.log(math.exp(2.0) + math.exp(1.2)))
                + (-1.6 + math.log(math.exp(0.0) + math.exp(1.6)))) / 2
    assert info_nce(A, P, temperature=0.5).item() == pytest.approx(expected, rel=1e-6)
    assert expected == pytest.approx(_eq5(0.5), rel=1e-12)


def test_info_nce_unsupervised_orthonormal_batch():
    # anchors = positives = the standard basis of R^3: logits 1/τ on the diagonal, 0 elsewhere,
    # so every row's loss is -log e^{1/τ} / (e^{1/τ} + 2) = log(1 + 2 e^{-1/τ}).
    x = torch.eye(3, dtype=torch.float64)   # float32 would round 1 + 4e-9 to 1
    for tau in (1.0, 0.05):
        assert info_nce(x, x.clone(), temperature=tau).item() == pytest.approx(
            math.log(1 + 2 * math.exp(-1 / tau)), rel=1e-5, abs=1e-12)


def test_info_nce_temperature_scales_the_cosines():
    # τ = 1: logits [[1, 0.6], [0, 0.8]]; τ = 0.05: [[20, 12], [0, 16]].
    at_1 = ((-1.0 + math.log(math.exp(1.0) + math.exp(0.6)))
            + (-0.8 + math.log(1.0 + math.exp(0.8)))) / 2
    at_005 = ((-20.0 + math.log(math.exp(20.0) + math.exp(12.0)))
              + (-16.0 + math.log(1.0 + math.exp(16.0)))) / 2
    assert info_nce(A, P, temperature=1.0).item() == pytest.approx(at_1, rel=1e-6)
    assert info_nce(A, P).item() == pytest.approx(at_005, rel=1e-5)   # default τ = 0.05


def test_info_nce_with_hard_negatives():
    # τ = 0.5, logits [[2, 1.2 | 0, -2], [0, 1.6 | 2, 0]]: both hard negatives count for both anchors.
    expected = ((-2.0 + math.log(math.exp(2.0) + math.exp(1.2) + math.exp(0.0) + math.exp(-2.0)))
                + (-1.6 + math.log(math.exp(0.0) + math.exp(1.6) + math.exp(2.0) + math.exp(0.0)))) / 2
    assert info_nce(A, P, 0.5, hard_negatives=H).item() == pytest.approx(expected, rel=1e-6)
    assert info_nce(A, P, 0.5, hard_negatives=H, hard_negative_weight=1.0).item() == pytest.approx(expected, rel=1e-6)
    assert expected == pytest.approx(_eq5(0.5, alpha=1.0), rel=1e-12)


def test_info_nce_hard_negative_weight_scales_only_the_own_hard_negative():
    # α = 2 doubles e^{cos(a_1,h_1)/τ} = e^0 in row 1 and e^{cos(a_2,h_2)/τ} = e^0 in row 2 only
    # (i.e. log 2 added to logits (0, 2) and (1, 3)); the cross terms e^{-2}, e^{2} stay as they are.
    expected = ((-2.0 + math.log(math.exp(2.0) + math.exp(1.2) + 2 * math.exp(0.0) + math.exp(-2.0)))
                + (-1.6 + math.log(math.exp(0.0) + math.exp(1.6) + math.exp(2.0) + 2 * math.exp(0.0)))) / 2
    assert info_nce(A, P, 0.5, hard_negatives=H, hard_negative_weight=2.0).item() == pytest.approx(expected, rel=1e-6)
    assert expected == pytest.approx(_eq5(0.5, alpha=2.0), rel=1e-12)
    # Different from α = 1, and from doubling every hard negative.
    assert expected != pytest.approx(_eq5(0.5, alpha=1.0))


def test_info_nce_matches_an_explicit_loop_on_random_vectors():
    # B = 3, D = 4, α = 3, τ = 0.1 against Eq. 5 written as loops over scalar cosines.
    g = torch.Generator().manual_seed(0)
    a, p, h = (torch.randn(3, 4, generator=g, dtype=torch.float64) for _ in range(3))
    tau, alpha = 0.1, 3.0

    def cos(u, v):
        return float(u @ v) / math.sqrt(float(u @ u) * float(v @ v))

    expected = 0.0
    for i in range(3):
        denominator = sum(math.exp(cos(a[i], p[j]) / tau) for j in range(3))
        denominator += sum((alpha if i == j else 1.0) * math.exp(cos(a[i], h[j]) / tau) for j in range(3))
        expected -= math.log(math.exp(cos(a[i], p[i]) / tau) / denominator) / 3
    got = info_nce(a, p, tau, hard_negatives=h, hard_negative_weight=alpha)
    assert got.item() == pytest.approx(expected, rel=1e-10)


@pytest.mark.parametrize("alpha", [0.0, -1.0])
def test_info_nce_rejects_non_positive_hard_negative_weight(alpha):
    with pytest.raises(ValueError, match="hard_negative_weight"):
        info_nce(A, P, hard_negatives=H, hard_negative_weight=alpha)


def test_info_nce_rejects_bad_temperature_and_shapes():
    with pytest.raises(ValueError, match="temperature"):
        info_nce(A, P, temperature=0.0)
    with pytest.raises(ValueError, match="positives"):
        info_nce(A, P[:1])
    with pytest.raises(ValueError, match="hard_negatives"):
        info_nce(A, P, hard_negatives=torch.zeros(2, 3))


def test_info_nce_gradients_flow_to_every_input():
    a, p, h = (t.clone().requires_grad_(True) for t in (A, P, H))
    info_nce(a, p, 0.5, hard_negatives=h, hard_negative_weight=2.0).backward()
    for t in (a, p, h):
        assert t.grad is not None and torch.isfinite(t.grad).all() and t.grad.abs().sum() > 0


# ---------------------------------------------------------------- loss weighting

LOSSES = {"sst": 2.0, "qqp": 0.5, "sts": 3.0}


def _losses(requires_grad=False):
    return {k: torch.tensor(v, requires_grad=requires_grad) for k, v in LOSSES.items()}


def test_fixed_weighting_value_and_gradients():
    weighting = make_loss_weighting("fixed", TASKS3, {"sst": 1.0, "qqp": 2.0, "sts": 0.5})
    assert isinstance(weighting, FixedWeighting)
    losses = _losses(requires_grad=True)
    total = weighting(losses)
    assert total.item() == pytest.approx(1.0 * 2.0 + 2.0 * 0.5 + 0.5 * 3.0)   # 4.5
    total.backward()
    assert [losses[k].grad.item() for k in TASKS3] == pytest.approx([1.0, 2.0, 0.5])
    weighting.update({"sst": 0.1, "qqp": 0.9, "sts": 0.0})                   # a no-op
    assert weighting.current_weights() == pytest.approx({"sst": 1.0, "qqp": 2.0, "sts": 0.5})
    assert list(weighting.parameters()) == []


def test_weighting_accepts_a_subset_of_tasks_but_not_strangers():
    weighting = make_loss_weighting("fixed", TASKS3, {"sst": 1.0, "qqp": 2.0, "sts": 0.5})
    assert weighting({"qqp": torch.tensor(0.5)}).item() == pytest.approx(1.0)
    with pytest.raises(ValueError):
        weighting({"cfimdb": torch.tensor(1.0)})
    with pytest.raises(ValueError):
        weighting({})


def test_adaptive_weighting_before_and_after_update():
    weighting = make_loss_weighting("adaptive", TASKS3, {"sst": 1.0, "qqp": 1.0, "sts": 1.0}, BUILTIN_TASKS)
    assert isinstance(weighting, AdaptiveWeighting)
    assert weighting.current_weights() == pytest.approx({"sst": 1.0, "qqp": 1.0, "sts": 1.0})
    # Scores: sst 0.5, qqp 0.8, sts (0.6 + 1) / 2 = 0.8 -> shortfalls 0.5, 0.2, 0.2 (sum 0.9);
    # w = 3 * shortfall / 0.9 = 5/3, 2/3, 2/3.
    weighting.update({"sst": 0.5, "qqp": 0.8, "sts": 0.6})
    assert weighting.current_weights() == pytest.approx({"sst": 5 / 3, "qqp": 2 / 3, "sts": 2 / 3})
    assert weighting(_losses()).item() == pytest.approx(5 / 3 * 2.0 + 2 / 3 * 0.5 + 2 / 3 * 3.0)


def test_adaptive_weighting_keeps_base_weights_as_multipliers_and_their_total():
    weighting = make_loss_weighting("adaptive", TASKS3, {"sst": 2.0, "qqp": 1.0, "sts": 1.0}, BUILTIN_TASKS)
    assert weighting.current_weights() == pytest.approx({"sst": 2.0, "qqp": 1.0, "sts": 1.0})
    # b * shortfall = 1.0, 0.2, 0.2 (sum 1.4); Σ b = 4 -> w = 4/1.4 * (1.0, 0.2, 0.2) = 20/7, 4/7, 4/7.
    weighting.update({"sst": 0.5, "qqp": 0.8, "sts": 0.6, "overall": 0.7})   # extra keys are ignored
    assert weighting.current_weights() == pytest.approx({"sst": 20 / 7, "qqp": 4 / 7, "sts": 4 / 7})


def test_adaptive_weighting_degenerate_scores():
    weighting = make_loss_weighting("adaptive", TASKS3, {"sst": 1.0, "qqp": 2.0, "sts": 3.0}, BUILTIN_TASKS)
    weighting.update({"sst": 1.0, "qqp": 1.0, "sts": 1.0})        # no shortfall anywhere: base weights
    assert weighting.current_weights() == pytest.approx({"sst": 1.0, "qqp": 2.0, "sts": 3.0})
    weighting.update({"sst": 0.25, "qqp": 0.25, "sts": -0.5})     # equal scores (r=-0.5 -> 0.25): base
    assert weighting.current_weights() == pytest.approx({"sst": 1.0, "qqp": 2.0, "sts": 3.0})
    with pytest.raises(ValueError, match="not finite"):
        weighting.update({"sst": float("nan"), "qqp": 0.5, "sts": 0.5})
    with pytest.raises(ValueError, match="missing"):
        weighting.update({"sst": 0.5, "qqp": 0.5})


def test_adaptive_weighting_state_is_saved():
    weighting = make_loss_weighting("adaptive", TASKS3, {"sst": 1.0, "qqp": 1.0, "sts": 1.0}, BUILTIN_TASKS)
    weighting.update({"sst": 0.5, "qqp": 0.8, "sts": 0.6})
    restored = make_loss_weighting("adaptive", TASKS3, {"sst": 1.0, "qqp": 1.0, "sts": 1.0}, BUILTIN_TASKS)
    restored.load_state_dict(weighting.state_dict())
    assert restored.current_weights() == pytest.approx({"sst": 5 / 3, "qqp": 2 / 3, "sts": 2 / 3})


def test_learned_weighting_at_init_and_its_gradients():
    weighting = make_loss_weighting("learned", TASKS3, {"sst": 1.0, "qqp": 1.0, "sts": 1.0})
    assert isinstance(weighting, LearnedWeighting)
    params = list(weighting.parameters())
    assert len(params) == 1 and params[0].shape == (3,) and (params[0] == 0).all()
    total = weighting(_losses())
    assert total.item() == pytest.approx(2.0 + 0.5 + 3.0)              # exp(0) L + 0 summed
    total.backward()
    # d/ds_t [exp(-s_t) L_t + s_t] at s_t = 0 is 1 - L_t: -1, 0.5, -2.
    assert params[0].grad.tolist() == pytest.approx([-1.0, 0.5, -2.0])


def test_learned_weighting_value_away_from_init_with_base_weights():
    weighting = make_loss_weighting("learned", TASKS3, {"sst": 2.0, "qqp": 1.0, "sts": 1.0})
    with torch.no_grad():
        weighting.log_variances.copy_(torch.tensor([math.log(2.0), 0.0, math.log(0.5)]))
    # sst: 1/2 * 2 * 2.0 + log 2;  qqp: 1 * 0.5 + 0;  sts: 2 * 3.0 + log 0.5.
    expected = (2.0 + math.log(2.0)) + 0.5 + (6.0 + math.log(0.5))
    assert weighting(_losses()).item() == pytest.approx(expected, rel=1e-6)
    assert weighting.current_weights() == pytest.approx({"sst": 1.0, "qqp": 1.0, "sts": 2.0})


def test_learned_weighting_leaves_out_zero_weight_tasks():
    weighting = make_loss_weighting("learned", TASKS3, {"sst": 1.0, "qqp": 0.0, "sts": 1.0})
    total = weighting(_losses())
    assert total.item() == pytest.approx(2.0 + 3.0)
    total.backward()
    assert weighting.log_variances.grad.tolist() == pytest.approx([-1.0, 0.0, -2.0])
    assert weighting({"qqp": torch.tensor(0.5)}).item() == 0.0


@pytest.mark.parametrize("kind, names, weights, message", [
    ("uniform", TASKS3, {"sst": 1.0, "qqp": 1.0, "sts": 1.0}, "unknown loss weighting"),
    ("fixed", TASKS3, {"sst": 1.0, "qqp": 1.0}, "missing"),
    ("fixed", TASKS3, {"sst": 1.0, "qqp": 1.0, "sts": 1.0, "cfimdb": 1.0}, "unknown"),
    ("learned", TASKS3, {"sst": 1.0, "qqp": -0.5, "sts": 1.0}, "non-negative"),
    ("adaptive", TASKS3, {"sst": 1.0, "qqp": float("nan"), "sts": 1.0}, "non-negative"),
    ("fixed", ["sst", "sst"], {"sst": 1.0}, "distinct"),
    ("fixed", [], {}, "non-empty"),
])
def test_factory_errors(kind, names, weights, message):
    with pytest.raises(ValueError, match=message):
        make_loss_weighting(kind, names, weights, BUILTIN_TASKS)


def test_factory_kinds_share_the_interface():
    for kind in ("fixed", "adaptive", "learned"):
        weighting = make_loss_weighting(kind, TASKS3, {"sst": 1.0, "qqp": 1.0, "sts": 1.0}, BUILTIN_TASKS)
        assert isinstance(weighting, LossWeighting)
        assert set(weighting.current_weights()) == set(TASKS3)


# --- label-contrastive loss ----------------------------------------------------------------------
# KL(T_i || softmax_j≠i(cos(e_i, e_j)/τ)), T_i uniform over row i's same-class neighbours, averaged
# over the rows that have one. The expected values below are written out from the definition.

from training.learning.losses import label_contrastive_loss  # noqa: E402


def test_label_contrastive_three_examples_one_class_appears_once():
    # Directions (1, 0), (0, 1), (0.6, 0.8), given at other lengths; labels 0, 1, 1; τ = 0.5.
    # Row 0 (class 0, alone in the batch): no target mass -> skipped.
    # Row 1: others j=0 (cos 0), j=2 (cos 0.8) -> logits 0, 1.6; target all on j=2:
    #        KL = -log(e^1.6 / (1 + e^1.6)) = log(1 + e^-1.6)
    # Row 2: others j=0 (cos 0.6), j=1 (cos 0.8) -> logits 1.2, 1.6; target all on j=1:
    #        KL = -log(e^1.6 / (e^1.2 + e^1.6)) = log(1 + e^-0.4)
    e = torch.tensor([[2.0, 0.0], [0.0, 3.0], [3.0, 4.0]])
    expected = (math.log(1 + math.exp(-1.6)) + math.log(1 + math.exp(-0.4))) / 2
    loss = label_contrastive_loss(e, torch.tensor([0, 1, 1]), temperature=0.5)
    assert loss.item() == pytest.approx(expected, rel=1e-6)


def test_label_contrastive_four_examples_two_positives_per_row():
    # Directions (1, 0), (0, 1), (0.6, 0.8), (-1, 0); labels 0, 0, 0, 1; τ = 1. Cosines:
    #   c01 = 0, c02 = 0.6, c03 = -1, c12 = 0.8, c13 = 0, c23 = -0.6
    # Rows 0..2 each have two same-class neighbours (target 1/2, 1/2), so
    #   KL_i = Σ_pos 1/2 (log 1/2 - log p_ij) = -log 2 - (s_pos1 + s_pos2)/2 + log Σ_{j≠i} e^{s_ij}
    # Row 3 (class 1, alone): skipped; the loss is the mean of rows 0..2.
    e = torch.tensor([[1.0, 0.0], [0.0, 2.0], [0.6, 0.8], [-5.0, 0.0]])
    row0 = -math.log(2) - (0.0 + 0.6) / 2 + math.log(math.exp(0.0) + math.exp(0.6) + math.exp(-1.0))
    row1 = -math.log(2) - (0.0 + 0.8) / 2 + math.log(math.exp(0.0) + math.exp(0.8) + math.exp(0.0))
    row2 = -math.log(2) - (0.6 + 0.8) / 2 + math.log(math.exp(0.6) + math.exp(0.8) + math.exp(-0.6))
    loss = label_contrastive_loss(e, torch.tensor([0, 0, 0, 1]), temperature=1.0)
    assert loss.item() == pytest.approx((row0 + row1 + row2) / 3, rel=1e-6)


def test_label_contrastive_matches_kl_div_reference():
    # An independent route: torch's kl_div on the rows that have positives, diagonal dropped by indexing.
    torch.manual_seed(0)
    e = torch.randn(8, 5, dtype=torch.float64)
    labels = torch.tensor([0, 1, 2, 0, 1, 1, 3, 0])
    tau = 0.2
    z = torch.nn.functional.normalize(e, dim=-1)
    terms = []
    for i in range(8):
        others = [j for j in range(8) if j != i]
        target = (labels[others] == labels[i]).double()
        if target.sum() == 0:
            continue
        log_p = torch.log_softmax(z[i] @ z[others].T / tau, dim=0)
        terms.append(torch.nn.functional.kl_div(log_p, target / target.sum(), reduction="sum"))
    expected = torch.stack(terms).mean()
    assert label_contrastive_loss(e, labels, temperature=tau).item() == pytest.approx(expected.item(), rel=1e-10)


def test_label_contrastive_is_near_zero_for_separated_classes_and_ignores_length():
    # Class 0 along (1, 0), class 1 along (0, 1), τ = 0.05: each row's positive has logit 20, the two
    # negatives 0, so KL = log(1 + 2 e^-20) ≈ 4e-9.
    e = torch.tensor([[1.0, 0.0], [7.0, 0.0], [0.0, 0.3], [0.0, 2.0]], dtype=torch.float64)
    loss = label_contrastive_loss(e, torch.tensor([0, 0, 1, 1]), temperature=0.05)
    assert loss.item() == pytest.approx(math.log(1 + 2 * math.exp(-20.0)), rel=1e-6)


def test_label_contrastive_all_rows_skipped_is_zero_with_a_graph():
    for e, labels in ((torch.randn(3, 4, requires_grad=True), torch.tensor([0, 1, 2])),
                      (torch.randn(1, 4, requires_grad=True), torch.tensor([3]))):
        loss = label_contrastive_loss(e, labels)
        assert loss.item() == 0.0
        loss.backward()
        assert e.grad is not None and torch.equal(e.grad, torch.zeros_like(e))


def test_label_contrastive_gradients_flow_and_are_finite():
    torch.manual_seed(1)
    e = torch.randn(6, 4, dtype=torch.float64, requires_grad=True)
    labels = torch.tensor([0, 0, 1, 1, 1, 2])        # class 2 appears once: a negative only
    loss = label_contrastive_loss(e, labels, temperature=0.1)
    loss.backward()
    assert torch.isfinite(e.grad).all()
    assert (e.grad.abs().sum(dim=1) > 0).all()        # every row moves, the lone one too (as a negative)
    assert torch.autograd.gradcheck(lambda x: label_contrastive_loss(x, labels, temperature=0.1), (e.detach().clone().requires_grad_(),))


def test_label_contrastive_pulls_same_class_together():
    # One gradient step on the loss raises the cosine of a same-class pair.
    e = torch.tensor([[1.0, 0.2], [0.2, 1.0], [-1.0, 0.1], [0.1, -1.0]], requires_grad=True)
    labels = torch.tensor([0, 0, 1, 1])
    before = torch.nn.functional.cosine_similarity(e[0], e[1], dim=0).item()
    label_contrastive_loss(e, labels, temperature=0.5).backward()
    moved = (e - 0.1 * e.grad).detach()
    assert torch.nn.functional.cosine_similarity(moved[0], moved[1], dim=0).item() > before


@pytest.mark.parametrize("embeddings, labels, temperature, message", [
    (torch.randn(3, 2), torch.tensor([0, 1, 1]), 0.0, "temperature"),
    (torch.randn(3), torch.tensor([0, 1, 1]), 0.05, r"\(B, D\)"),
    (torch.randn(3, 2), torch.tensor([0, 1]), 0.05, r"\(B,\)"),
    (torch.randn(3, 2), torch.tensor([0.0, 1.0, 1.0]), 0.05, "integer"),
])
def test_label_contrastive_errors(embeddings, labels, temperature, message):
    with pytest.raises(ValueError, match=message):
        label_contrastive_loss(embeddings, labels, temperature=temperature)
