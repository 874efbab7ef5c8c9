"""heads.tasks: SentimentHead, PairHead (concat / cosine) and MultitaskBert routing.

Weights are set by hand and the expected outputs written as numbers worked out by hand.
"""
import math

import pytest
import torch

from heads.tasks import MultitaskBert, PairHead, SentimentHead
from minbert import BertConfig, BertModel


def _set_linear(linear: torch.nn.Linear, weight, bias) -> None:
    with torch.no_grad():
        linear.weight.copy_(torch.tensor(weight, dtype=torch.float32))
        linear.bias.copy_(torch.tensor(bias, dtype=torch.float32))


# ----------------------------------------------------------------------------- SentimentHead

def test_sentiment_head_is_the_linear_layer_in_eval_mode():
    head = SentimentHead(in_dim=2, num_classes=3, dropout=0.5).eval()
    _set_linear(head.classifier, [[1, 0], [0, 1], [1, 1]], [0, 1, -1])
    u = torch.tensor([[2.0, 3.0], [-1.0, 0.5]])
    # row 0: (2, 3+1, 2+3-1) ; row 1: (-1, 0.5+1, -1+0.5-1)
    expected = torch.tensor([[2.0, 4.0, 4.0], [-1.0, 1.5, -1.5]])
    torch.testing.assert_close(head(u), expected)


def test_sentiment_head_default_shape():
    head = SentimentHead(in_dim=8)
    assert head(torch.randn(4, 8)).shape == (4, 5)


# ----------------------------------------------------------------------------- PairHead concat

def _concat_head(output="logit"):
    head = PairHead(in_dim=2, kind="concat", output=output, dropout=0.5).eval()
    # weights over [u1, u2, v1, v2, |u1-v1|, |u2-v2|]
    _set_linear(head.classifier, [[1, -1, 0.5, 0, 2, -3]], [0.5])
    return head


U = torch.tensor([[1.0, 2.0]])
V = torch.tensor([[3.0, 1.0]])


def test_concat_logit_is_linear_over_u_v_absdiff():
    # features [1, 2, 3, 1, 2, 1]: 1 - 2 + 1.5 + 0 + 4 - 3 + 0.5 = 2
    torch.testing.assert_close(_concat_head()(U, V), torch.tensor([2.0]))
    # swapped, features [3, 1, 1, 2, 2, 1]: 3 - 1 + 0.5 + 0 + 4 - 3 + 0.5 = 4  ([u; v] order matters)
    torch.testing.assert_close(_concat_head()(V, U), torch.tensor([4.0]))


def test_concat_score_is_five_sigmoid():
    # 5 / (1 + e^-2) and 5 / (1 + e^-4)
    torch.testing.assert_close(_concat_head("score")(U, V), torch.tensor([4.403985389889]))
    torch.testing.assert_close(_concat_head("score")(V, U), torch.tensor([4.910068810]))


def test_concat_score_stays_within_0_and_5():
    torch.manual_seed(0)   # the head's random start: not whatever the tests before left (it failed after some)
    head = PairHead(in_dim=4, kind="concat", output="score").eval()
    with torch.no_grad():
        head.classifier.weight.mul_(1000.0)
    g = torch.Generator().manual_seed(0)
    scores = head(100 * torch.randn(64, 4, generator=g), 100 * torch.randn(64, 4, generator=g))
    assert scores.shape == (64,)
    assert scores.min() >= 0.0 and scores.max() <= 5.0
    assert scores.min() < 0.5 and scores.max() > 4.5   # the weights really drove it to both ends


# ----------------------------------------------------------------------------- PairHead cosine

def test_cosine_logit_is_cos_minus_threshold_over_temperature():
    head = PairHead(in_dim=2, kind="cosine", output="logit", temperature=0.05)
    with torch.no_grad():
        head.threshold.fill_(0.2)
    u = torch.tensor([[1.0, 0.0], [1.0, 0.0], [3.0, 4.0]])
    v = torch.tensor([[1.0, 1.0], [-2.0, 0.0], [6.0, 8.0]])
    # cos: 1/sqrt(2), -1, 1
    expected = torch.tensor([(1 / math.sqrt(2) - 0.2) / 0.05, (-1 - 0.2) / 0.05, (1 - 0.2) / 0.05])
    torch.testing.assert_close(head(u, v), expected)
    torch.testing.assert_close(head(v, u), expected)


def test_cosine_threshold_starts_at_zero():
    head = PairHead(in_dim=2, kind="cosine", output="logit", temperature=0.5)
    torch.testing.assert_close(head(torch.tensor([[1.0, 0.0]]), torch.tensor([[1.0, 1.0]])),
                               torch.tensor([math.sqrt(2)]))   # (1/sqrt 2) / 0.5


def test_cosine_score_is_five_cos():
    head = PairHead(in_dim=2, kind="cosine", output="score")
    u = torch.tensor([[1.0, 0.0], [1.0, 0.0], [0.0, 2.0]])
    v = torch.tensor([[1.0, 1.0], [-1.0, 0.0], [0.0, 5.0]])
    scores = head(u, v)
    torch.testing.assert_close(scores, torch.tensor([5 / math.sqrt(2), -5.0, 5.0]))


@pytest.mark.parametrize("kwargs", [
    {"kind": "not-a-head"},   # a name no head kind will take (a plausible one might be registered)
    {"output": "probability"},
    {"kind": "cosine", "temperature": 0.0},
    {"kind": "cosine", "temperature": -0.1},
])
def test_invalid_pair_head_arguments(kwargs):
    with pytest.raises(ValueError):
        PairHead(in_dim=4, **kwargs)


# ----------------------------------------------------------------------------- MultitaskBert

H = 8


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    config = BertConfig(vocab_size=50, hidden_size=H, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=16, max_position_embeddings=32)
    heads = {
        "sst": SentimentHead(H, num_classes=5),
        "qqp": PairHead(H, kind="concat", output="logit"),
        "sts": PairHead(H, kind="cosine", output="score"),
    }
    return MultitaskBert(BertModel(config), heads, pooling="cls").eval()


def _encoding(ids, lengths):
    ids = torch.tensor(ids)
    mask = (torch.arange(ids.shape[1])[None] < torch.tensor(lengths)[:, None]).long()
    return {"input_ids": ids * mask, "attention_mask": mask, "token_type_ids": torch.zeros_like(ids)}


A = _encoding([[2, 5, 7, 3, 0], [2, 9, 3, 0, 0], [2, 11, 12, 13, 3]], [4, 3, 5])
B = _encoding([[2, 20, 3, 0], [2, 21, 22, 3], [2, 30, 31, 3]], [3, 4, 4])


def test_routes_single_sentence_to_sentiment_head(model):
    with torch.no_grad():
        out = model("sst", [A])
        cls = model.bert(A["input_ids"], A["attention_mask"], A["token_type_ids"])["last_hidden_state"][:, 0]
        expected = model.heads["sst"].classifier(cls)
    assert out.shape == (3, 5)
    torch.testing.assert_close(out, expected)


def test_pair_heads_give_one_value_per_pair(model):
    with torch.no_grad():
        assert model("qqp", [A, B]).shape == (3,)
        assert model("sts", [A, B]).shape == (3,)


def test_cosine_is_symmetric_concat_is_not(model):
    with torch.no_grad():
        torch.testing.assert_close(model("sts", [A, B]), model("sts", [B, A]))
        qqp_ab, qqp_ba = model("qqp", [A, B]), model("qqp", [B, A])
    assert not torch.allclose(qqp_ab, qqp_ba)


def test_pair_output_matches_head_on_separately_pooled_vectors(model):
    with torch.no_grad():
        u = model.bert(A["input_ids"], A["attention_mask"])["last_hidden_state"][:, 0]
        v = model.bert(B["input_ids"], B["attention_mask"])["last_hidden_state"][:, 0]
        cos = torch.tensor([float(u[i] @ v[i] / (u[i].norm() * v[i].norm())) for i in range(3)])
        torch.testing.assert_close(model("sts", [A, B]), 5 * cos, rtol=1e-5, atol=1e-5)


def test_mean_pooling_is_used_when_asked(model):
    mean_model = MultitaskBert(model.bert, dict(model.heads), pooling="mean").eval()
    with torch.no_grad():
        vec = mean_model.embed(A)
        last = model.bert(A["input_ids"], A["attention_mask"])["last_hidden_state"]
    # by hand: row i averages its first length_i tokens
    for i, length in enumerate([4, 3, 5]):
        torch.testing.assert_close(vec[i], last[i, :length].sum(0) / length)


def test_unknown_head_and_pooling(model):
    with pytest.raises(KeyError):
        model("cfimdb", [A])
    with pytest.raises(ValueError, match="pooling"):
        MultitaskBert(model.bert, {}, pooling="median")
