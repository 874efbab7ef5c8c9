"""Layer-wise learning-rate decay (``--layer_lr_decay``, training/learning/recipe.py ``encoder_sets``): each
parameter's learning rate in the run's AdamW by layer, towers included; 1 leaves the optimizer as it was; bad
values are refused; a resumed run ends exactly like an uninterrupted one."""

import pytest
import torch

import run_multitask
from heads import MultitaskBert, PairHead, SentimentHead
from minbert import BertConfig, BertModel
from test_resume import assert_resumes_exactly
from training.learning.recipe import run_adamw

H, LAYERS = 8, 3


def model(private_layers: int) -> MultitaskBert:
    torch.manual_seed(0)
    config = BertConfig(vocab_size=50, hidden_size=H, num_hidden_layers=LAYERS, num_attention_heads=2,
                        intermediate_size=16, max_position_embeddings=32)
    heads = {"sst": SentimentHead(H), "qqp": PairHead(H, output="logit"),
             "sts": PairHead(H, kind="cosine", output="score")}
    return MultitaskBert(BertModel(config), heads, pooling="mean", private_layers=private_layers, home="sts")


def learning_rates(flags: list[str], private_layers: int) -> dict[str, float]:
    """Each named parameter of the model -> the learning rate of the AdamW group that holds it."""
    config = run_multitask.parse_config(["--lr", "1e-4", "--head_lr", "1e-3", *flags]).validate()
    net = model(private_layers)
    optimizer = run_adamw(config, net)
    rate = {id(p): group["lr"] for group in optimizer.param_groups for p in group["params"]}
    assert len(rate) == sum(1 for _ in net.parameters())   # every parameter in exactly one group
    return {name: rate[id(p)] for name, p in net.named_parameters()}


def test_each_layer_learns_at_gamma_times_the_rate_of_the_one_above():
    lr = learning_rates(["--layer_lr_decay", "0.5"], private_layers=0)
    for name, rate in lr.items():
        if name.startswith("bert.encoder.layer."):
            layer = int(name.split(".")[3])
            assert rate == pytest.approx(1e-4 * 0.5 ** (LAYERS - 1 - layer)), name   # top layer 2 at 1e-4
        elif name.startswith("bert.embeddings."):
            assert rate == pytest.approx(1e-4 * 0.5 ** LAYERS), name   # below the bottom layer
        elif name.startswith("bert.pooler."):
            assert rate == pytest.approx(1e-4), name
        else:
            assert name.startswith("heads.") and rate == pytest.approx(1e-3), name   # the heads keep --head_lr
    assert {round(r / 1e-4, 6) for n, r in lr.items() if n.startswith("bert.")} == {1.0, 0.5, 0.25, 0.125}


def test_a_towers_layer_learns_at_the_rate_of_the_layer_it_copies():
    lr = learning_rates(["--layer_lr_decay", "0.5"], private_layers=2)
    towers = {name: rate for name, rate in lr.items() if name.startswith("towers.")}
    assert {name.split(".")[1] for name in towers} == {"sst", "qqp"}   # STS keeps the encoder's own top layers
    for name, rate in towers.items():   # towers.<task>.<j>: copies of layers 1 and 2 of 3
        assert rate == pytest.approx(1e-4 * 0.5 ** (1 - int(name.split(".")[2]))), name
        copied = f"bert.encoder.layer.{LAYERS - 2 + int(name.split('.')[2])}." + name.split(".", 3)[3]
        assert rate == lr[copied]


def test_one_keeps_the_encoder_in_the_two_groups_of_before():
    config = run_multitask.parse_config(["--layer_lr_decay", "1"]).validate()
    assert run_multitask.parse_config([]).train.layer_lr_decay == 0.9   # the default since issue 84
    net = model(2)
    groups = run_adamw(config, net).param_groups
    # the encoder and towers at --lr, with and without weight decay; then the heads' two groups
    assert [(g["lr"], g["weight_decay"]) for g in groups] == [(1e-4, 0.01), (1e-4, 0.0), (1e-3, 0.01), (1e-3, 0.0)]
    assert {id(p) for g in groups[:2] for p in g["params"]} == {id(p) for _, p in net.encoder_parameters()}


@pytest.mark.parametrize("value", ["0", "-0.5", "1.5"])
def test_a_decay_outside_zero_to_one_is_refused(value):
    with pytest.raises(ValueError, match=r"--layer_lr_decay must be in \(0, 1\]"):
        run_multitask.parse_config(["--layer_lr_decay", value]).validate()


@pytest.mark.slow
def test_a_resumed_run_with_decay_ends_exactly_like_an_uninterrupted_one(tiny_model_dir, tmp_path):
    assert_resumes_exactly(tiny_model_dir, tmp_path, "decay", "--epochs", "2", "--layer_lr_decay", "0.8",
                           "--private_layers", "1")
