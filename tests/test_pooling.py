"""heads.pooling on a tiny hand-made batch, against values worked out by hand.

The batch: B=2 sequences, T=3 tokens, H=2, five hidden-state tensors (embeddings output + 4 layers).
Layer l holds ``base + 10*l`` where, per token,

    row 0 (3 real tokens): (1, 6), (5, 2), (3, 4)
    row 1 (2 real tokens): (7, 10), (9, 8), PAD

PAD positions hold a huge value (1e6) in every layer: no mode except ``pooler`` may see it.
By hand, over the real tokens of ``base``:
    mean:  row 0 (3, 4)      row 1 (8, 9)
    max:   row 0 (5, 6)      row 1 (9, 10)
    [CLS]: row 0 (1, 6)      row 1 (7, 10)
and each layer l adds 10*l to every number.
"""
import pytest
import torch

from heads.pooling import POOLING_MODES, pool, pooled_size

PAD = 1.0e6
MASK = torch.tensor([[1, 1, 1], [1, 1, 0]])
POOLER = torch.tensor([[0.25, -0.5], [0.75, 1.0]])


def _outputs(pad_value: float = PAD) -> dict:
    base = torch.tensor([[[1.0, 6.0], [5.0, 2.0], [3.0, 4.0]],
                         [[7.0, 10.0], [9.0, 8.0], [0.0, 0.0]]])
    hidden_states = []
    for layer in range(5):
        h = base + 10.0 * layer
        h[1, 2] = pad_value
        hidden_states.append(h)
    return {"hidden_states": tuple(hidden_states), "pooler_output": POOLER.clone(),
            "last_hidden_state": hidden_states[-1]}


EXPECTED = {
    "cls": [[41, 46], [47, 50]],                      # [CLS] of layer 4 (+40)
    "pooler": [[0.25, -0.5], [0.75, 1.0]],            # passed through
    "mean": [[43, 44], [48, 49]],                     # mean of layer 4 over real tokens
    "max": [[45, 46], [49, 50]],                      # max of layer 4 over real tokens
    # (embeddings output + layer 4) / 2 = base + 20 (the module documents hidden_states[0], the
    # embeddings output, as "first"); mean over real tokens
    "first_last": [[23, 24], [28, 29]],
    "second_last": [[33, 34], [38, 39]],              # layer 3 (+30)
    "last4_mean": [[28, 29], [33, 34]],               # layers 1..4 average to base + 25
    # embeddings output and layers 1..4 average to base + 20 (the same as first_last on this
    # batch; test_layer_modes_on_uneven_layers tells them apart)
    "all_mean": [[23, 24], [28, 29]],
    "last2_mean": [[38, 39], [43, 44]],               # layers 3, 4 average to base + 35
    "last4_concat": [[13, 14, 23, 24, 33, 34, 43, 44],
                     [18, 19, 28, 29, 38, 39, 48, 49]],  # means of layers 1, 2, 3, 4 side by side
}


def test_every_mode_has_a_hand_computed_expectation():
    assert set(EXPECTED) == set(POOLING_MODES)


@pytest.mark.parametrize("mode", sorted(EXPECTED))
def test_mode_matches_hand_computation(mode):
    got = pool(_outputs(), MASK, mode)
    expected = torch.tensor(EXPECTED[mode], dtype=torch.float32)
    assert got.shape == expected.shape
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-5)


@pytest.mark.parametrize("mode", sorted(m for m in EXPECTED if m != "pooler"))
@pytest.mark.parametrize("pad_value", [-PAD, 0.0, 123.0])
def test_padding_values_do_not_matter(mode, pad_value):
    """Whatever sits at padded positions (huge positive or negative), the pooled vector is the same."""
    torch.testing.assert_close(pool(_outputs(pad_value), MASK, mode), pool(_outputs(PAD), MASK, mode),
                               rtol=0, atol=1e-5)


def test_max_ignores_padding_even_when_every_real_value_is_negative():
    h = torch.tensor([[[-3.0, -7.0], [-5.0, -1.0], [100.0, 100.0]]])
    outputs = {"hidden_states": (h, h), "pooler_output": torch.zeros(1, 2)}
    got = pool(outputs, torch.tensor([[1, 1, 0]]), "max")
    torch.testing.assert_close(got, torch.tensor([[-3.0, -1.0]]))


def test_mean_accepts_bool_and_float_masks():
    outputs = _outputs()
    for mask in (MASK.bool(), MASK.float()):
        torch.testing.assert_close(pool(outputs, mask, "mean"), torch.tensor([[43.0, 44.0], [48.0, 49.0]]))


def test_pooled_size():
    for mode in POOLING_MODES:
        expected = 4 * 384 if mode == "last4_concat" else 384
        assert pooled_size(384, mode) == expected
    # agrees with what pool() actually returns
    for mode in POOLING_MODES:
        assert pool(_outputs(), MASK, mode).shape[-1] == pooled_size(2, mode)


def test_unknown_mode_names_the_choices():
    with pytest.raises(ValueError) as err:
        pool(_outputs(), MASK, "median")
    message = str(err.value)
    assert "median" in message
    for mode in POOLING_MODES:
        assert mode in message


# --- reduction="max" ------------------------------------------------------------------------
# On the batch above, max over real tokens of ``base + c`` is max(base) + c: row 0 (5, 6) + c,
# row 1 (9, 10) + c. cls, pooler, mean and max ignore the reduction.
EXPECTED_MAX_REDUCTION = {
    "cls": EXPECTED["cls"],
    "pooler": EXPECTED["pooler"],
    "mean": EXPECTED["mean"],
    "max": EXPECTED["max"],
    "first_last": [[25, 26], [29, 30]],        # + 20
    "second_last": [[35, 36], [39, 40]],       # + 30
    "all_mean": [[25, 26], [29, 30]],          # + 20
    "last2_mean": [[40, 41], [44, 45]],        # + 35
    "last4_mean": [[30, 31], [34, 35]],        # + 25
    "last4_concat": [[15, 16, 25, 26, 35, 36, 45, 46],
                     [19, 20, 29, 30, 39, 40, 49, 50]],  # max of layers 1, 2, 3, 4 side by side
}


def test_every_mode_has_a_max_reduction_expectation():
    assert set(EXPECTED_MAX_REDUCTION) == set(POOLING_MODES)


@pytest.mark.parametrize("mode", sorted(EXPECTED_MAX_REDUCTION))
def test_max_reduction_matches_hand_computation(mode):
    got = pool(_outputs(), MASK, mode, reduction="max")
    expected = torch.tensor(EXPECTED_MAX_REDUCTION[mode], dtype=torch.float32)
    assert got.shape == expected.shape
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-5)


@pytest.mark.parametrize("mode", sorted(m for m in EXPECTED_MAX_REDUCTION if m != "pooler"))
@pytest.mark.parametrize("pad_value", [-PAD, 0.0, 123.0])
def test_max_reduction_never_sees_padding(mode, pad_value):
    torch.testing.assert_close(pool(_outputs(pad_value), MASK, mode, "max"), pool(_outputs(PAD), MASK, mode, "max"),
                               rtol=0, atol=1e-5)


# --- layer modes on layers that are not evenly spaced ----------------------------------------
# One sequence, H=1, three hidden states (embeddings output, layer 1, layer 2), last token PAD:
#     embeddings: 0, 6, PAD      layer 1: 3, 5, PAD      layer 2: 9, 0, PAD
# Token by token (layers first, then tokens):
#     all_mean:    (0+3+9)/3 = 4,  (6+5+0)/3 = 11/3   -> mean 23/6, max 4
#     first_last:  (0+9)/2 = 4.5,  (6+0)/2 = 3        -> mean 3.75, max 4.5
#     last2_mean:  (3+9)/2 = 6,    (5+0)/2 = 2.5      -> mean 4.25, max 6
#     second_last: 3, 5                               -> mean 4,    max 5
#     last4_mean (only 3 hidden states: all of them) = all_mean
# Reducing before combining would give all_mean max (6+5+9)/3 = 20/3, not 4.
UNEVEN = {"all_mean": (23 / 6, 4.0), "first_last": (3.75, 4.5), "last2_mean": (4.25, 6.0),
          "second_last": (4.0, 5.0), "last4_mean": (23 / 6, 4.0)}


def _uneven_outputs() -> dict:
    hs = tuple(torch.tensor([[[a], [b], [PAD]]]) for a, b in [(0.0, 6.0), (3.0, 5.0), (9.0, 0.0)])
    return {"hidden_states": hs, "pooler_output": torch.zeros(1, 1)}


@pytest.mark.parametrize("mode", sorted(UNEVEN))
@pytest.mark.parametrize("reduction", ["mean", "max"])
def test_layer_modes_on_uneven_layers(mode, reduction):
    expected = UNEVEN[mode][0 if reduction == "mean" else 1]
    got = pool(_uneven_outputs(), torch.tensor([[1, 1, 0]]), mode, reduction)
    torch.testing.assert_close(got, torch.tensor([[expected]]), rtol=0, atol=1e-6)


def test_applied_reduction_and_takes_reduction():
    from heads.pooling import applied_reduction, takes_reduction
    assert applied_reduction("cls", "max") is None and applied_reduction("pooler") is None
    assert applied_reduction("mean", "max") == "mean" and applied_reduction("max", "mean") == "max"
    for mode in ("first_last", "second_last", "all_mean", "last2_mean", "last4_mean", "last4_concat"):
        assert takes_reduction(mode)
        assert applied_reduction(mode, "max") == "max" and applied_reduction(mode) == "mean"
    assert not any(takes_reduction(m) for m in ("cls", "pooler", "mean", "max"))


def test_unknown_reduction_names_the_choices():
    with pytest.raises(ValueError, match=r"'median'.*'mean', 'max'"):
        pool(_outputs(), MASK, "first_last", reduction="median")
