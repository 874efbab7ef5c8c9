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
