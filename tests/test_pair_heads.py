"""The pair-head designs (docs/heads.md): ``concat``, ``cosine`` and ``sum``, with and without per-sentence
projections, and the STS losses, each against a hand computation; every design trains, writes dev
predictions that ``load_run`` reproduces, and names its formula in the model card."""
import csv
import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import run_multitask
from heads import PairHead
from heads.pair_parts import PROJECTIONS, SCORERS, Scorer
from training.harness.runs import load_run
from heads.sts_losses import STS_LOSSES, StsLoss, cosent_loss, mse_loss, probability_loss
from training.learning.task_schema import BUILTIN_TASKS

FIXTURE_DATA = Path(__file__).parent / "fixtures" / "data"


def head(kind, output="logit", projection="none", **kwargs):
    torch.manual_seed(0)
    h = PairHead(4, kind, output, 0.05, 0.1, projection, **kwargs)
    return h.eval()   # no dropout: the formulas below are the eval-mode ones


U, V = torch.tensor([[1.0, 0.0, 2.0, -1.0], [0.5, 0.5, 0.0, 1.0]]), torch.tensor([[0.0, 1.0, 2.0, 1.0], [1.0, 0.0, 1.0, 1.0]])


def test_sum_head_by_hand():
    h = head("sum")
    with torch.no_grad():
        h.classifier.weight.copy_(torch.tensor([[1.0, -1.0, 0.5, 2.0]]))
        h.classifier.bias.fill_(-0.5)
    # u + v = (1, 1, 4, 0) and (1.5, 0.5, 1, 2): z = 1 - 1 + 2 + 0 - 0.5 = 1.5 and 1.5 - 0.5 + 0.5 + 4 - 0.5 = 5.0
    assert torch.allclose(h(U, V), torch.tensor([1.5, 5.0]))
    score = head("sum", "score")
    score.load_state_dict(h.state_dict())
    assert torch.allclose(score(U, V), 5 * torch.sigmoid(torch.tensor([1.5, 5.0])))
    assert set(h.state_dict()) == {"classifier.weight", "classifier.bias"}   # one linear layer, no threshold


def test_concat_head_by_hand():
    h = head("concat")
    with torch.no_grad():
        h.classifier.weight.zero_()
        h.classifier.weight[0, 8:] = 1.0   # the |u − v| block only
        h.classifier.bias.fill_(0.25)
    assert torch.allclose(h(U, V), (U - V).abs().sum(-1) + 0.25)


@pytest.mark.parametrize("projection", ["shared", "separate"])
def test_projections_by_hand(projection):
    h = head("cosine", projection=projection)
    assert ("project_v.weight" in h.state_dict()) == (projection == "separate")   # shared: one layer, saved once
    with torch.no_grad():
        h.project_u.weight.copy_(torch.diag(torch.tensor([1.0, 2.0, 0.0, 1.0])))
        h.project_u.bias.zero_()
        if projection == "separate":
            h.project_v.weight.copy_(torch.eye(4))
            h.project_v.bias.fill_(1.0)
        h.threshold.fill_(0.2)
    pu = U * torch.tensor([1.0, 2.0, 0.0, 1.0])
    pv = V * torch.tensor([1.0, 2.0, 0.0, 1.0]) if projection == "shared" else V + 1.0
    cos = (pu * pv).sum(-1) / (pu.norm(dim=-1) * pv.norm(dim=-1))
    assert torch.allclose(h.similarity(U, V), cos, atol=1e-6)
    assert torch.allclose(h(U, V), (cos - 0.2) / 0.05, atol=1e-4)
    shared_params = sum(p.numel() for p in h.parameters())
    assert shared_params == 1 + (20 if projection == "shared" else 40)   # threshold + one or two 4x4 layers


def test_concat_and_sum_read_the_projected_vectors():
    h = head("concat", projection="shared")
    plain = head("concat")
    plain.classifier.load_state_dict(h.classifier.state_dict())
    pu, pv = h.project_u(U), h.project_u(V)
    assert torch.allclose(h(U, V), plain(pu, pv), atol=1e-6)


def test_the_cosine_sts_head_read_as_a_probability():
    h = head("cosine", "score", sigmoid_score=True)
    with torch.no_grad():
        h.threshold.fill_(0.3)
    cos = F.cosine_similarity(U, V, dim=-1)
    assert torch.allclose(h(U, V), 5 * torch.sigmoid((cos - 0.3) / 0.05))
    assert h.thresholded and h.calibrate(torch.tensor([0.1, 0.2, 0.8, 0.9]), torch.tensor([0.0, 1.0, 4.0, 5.0])) \
        == pytest.approx(0.5)   # the labels' upper half (>= 2.5) is cut from the lower at the gap's middle
    assert not head("cosine", "score").thresholded   # 5·cos has no threshold to start


def test_cosent_by_hand_and_against_the_pairwise_loop():
    scores, labels = 5 * torch.tensor([0.9, 0.1, 0.5], dtype=torch.float64), torch.tensor([4.0, 1.0, 2.0])
    # y_0 > y_1: c_1 − c_0 = −0.8; y_0 > y_2: −0.4; y_2 > y_1: −0.4; each over τ = 0.05
    want = math.log(1 + math.exp(-16) + 2 * math.exp(-8))
    assert cosent_loss(scores, labels, 0.05).item() == pytest.approx(want, rel=1e-9)
    torch.manual_seed(1)
    scores, labels = torch.rand(7) * 5, torch.tensor([0.0, 1.0, 1.0, 3.5, 5.0, 2.0, 1.0])
    terms = [((scores[j] - scores[i]) / 5 / 0.2).item() for i in range(7) for j in range(7) if labels[i] > labels[j]]
    assert cosent_loss(scores, labels, 0.2).item() == pytest.approx(math.log(1 + sum(map(math.exp, terms))), rel=1e-5)


def test_cosent_with_equal_labels_is_zero_and_backpropagates():
    scores = torch.tensor([1.0, 2.0], requires_grad=True)
    loss = cosent_loss(scores, torch.tensor([3.0, 3.0]))
    loss.backward()
    assert loss.item() == 0 and torch.equal(scores.grad, torch.zeros(2))


def test_probability_loss_and_mse_by_hand():
    scores, labels = torch.tensor([1.0, 4.0]), torch.tensor([0.0, 5.0])
    want = -(math.log(1 - 0.2) + math.log(0.8)) / 2       # p = 0.2 vs 0, p = 0.8 vs 1
    assert probability_loss(scores, labels).item() == pytest.approx(want, rel=1e-6)
    assert mse_loss(scores, labels).item() == pytest.approx((1 + 1) / 2)


DESIGNS = {
    "para-cosine-shared": ["--para_head", "cosine", "--pair_projection", "shared"],
    "para-cosine-separate": ["--para_head", "cosine", "--pair_projection", "separate"],
    "sum": ["--para_head", "sum", "--sts_head", "sum"],
    "sts-cosent": ["--sts_loss", "cosent"],
    "sts-ce": ["--sts_loss", "ce", "--pair_projection", "separate"],
}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(DESIGNS))
def test_each_design_trains_and_reloads_to_its_own_predictions(name, tmp_path, tiny_model_dir):
    argv = ["--data_dir", str(FIXTURE_DATA), "--model", str(tiny_model_dir), "--epochs", "1",
            "--max_steps_per_epoch", "3", "--batch_size", "4", "--max_length", "24", "--out_dir", str(tmp_path),
            "--run_name", name, "--quiet", *DESIGNS[name]]
    assert run_multitask.main(argv) == 0
    run = load_run(tmp_path / name)
    for task, column in (("qqp", "Predicted_Is_Paraphrase"), ("sts", "Predicted_Similiarity")):
        row = BUILTIN_TASKS[task]
        with open(tmp_path / name / f"{row.output_prefix}-dev-output.csv", encoding="utf-8", newline="") as f:
            written = {r["id"]: float(r[column]) for r in csv.DictReader(f)}
        examples, _ = row.read(FIXTURE_DATA / row.files["dev"])
        predicted = run.predict_examples(task, examples)
        assert dict(zip(predicted.ids, predicted.predictions.tolist())) == pytest.approx(written, abs=1e-3)
    card = (tmp_path / name / "checkpoint" / "README.md").read_text()
    flags = DESIGNS[name]
    if "sum" in flags:
        assert "sum: logit = w·(dropout(u) + dropout(v))" in card and "sum: score = 5·sigmoid" in card
    if "separate" in flags:
        assert "one linear layer a side" in card and "before any projection" in card
    if "cosent" in flags:
        assert "trained with CoSENT (τ = 0.05)" in card
    if "ce" in flags:
        assert "cosine: score = 5·sigmoid((cos(u, v) − threshold) / 0.05)" in card


# ---- a new head kind and a new STS loss: one class and one registry line each (issue 60) ----------------------

class DotScorer(Scorer):
    """A toy head kind: z = w·(u ⊙ v) + c after dropout."""
    name = "dot"
    logit_help = "linear(u * v)"

    def build(self, head, in_dim, dropout):
        head.dropout = torch.nn.Dropout(dropout)
        head.classifier = torch.nn.Linear(in_dim, 1)

    def logit(self, head, u, v):
        return head.classifier(head.dropout(u * v)).squeeze(-1)

    def formula(self, output, temp, probability=False):
        z = "w·(u ⊙ v) + b"
        if output == "logit":
            return f"dot: logit = {z} (`classifier`)"
        return f"dot: score = 5·sigmoid({z}) (`classifier`), 0..5"


class HuberLoss(StsLoss):
    """A toy STS loss."""
    name = "huber"
    help = "Huber loss of the 0..5 score"

    def loss(self, temperature):
        return lambda scores, labels: F.huber_loss(scores, labels.float())

    def trained(self, temperature):
        return "trained with the Huber loss"


def squeezed(text: str) -> str:
    """``text`` without whitespace: --help wraps its lines wherever it likes."""
    return "".join(text.split())


def test_help_lists_each_registered_part_with_its_words():
    """--help's choices and words for the pair-head flags are the registries' (``flags.listing``), not a copy."""
    help_text = run_multitask.build_parser().format_help()
    for option, registry, says in (("--para_head", SCORERS, lambda scorer: scorer.logit_help),
                                   ("--sts_head", SCORERS, lambda scorer: scorer.score_help()),
                                   ("--pair_projection", PROJECTIONS, lambda projection: projection.help),
                                   ("--sts_loss", STS_LOSSES, lambda loss: loss.help)):
        assert f"{option} {{{','.join(registry)}}}" in help_text
        for name, part in registry.items():
            assert squeezed(f"{name}: {says(part)}") in squeezed(help_text), (option, name)
    assert squeezed("cosine: 5*cos(u, v)") in squeezed(help_text)   # the cosine STS head's own score


def test_a_new_head_kind_and_sts_loss_reach_help(monkeypatch):
    monkeypatch.setitem(SCORERS, "dot", DotScorer())          # the one line each registers
    monkeypatch.setitem(STS_LOSSES, "huber", HuberLoss())
    help_text = run_multitask.build_parser().format_help()
    assert f"--para_head {{{','.join(SCORERS)}}}" in help_text and ",dot}" in help_text
    assert f"--sts_loss {{{','.join(STS_LOSSES)}}}" in help_text and ",huber}" in help_text
    help_text = squeezed(help_text)
    assert squeezed("dot: linear(u * v)") in help_text and squeezed("dot: 5*sigmoid(linear(u * v))") in help_text
    assert squeezed("huber: Huber loss of the 0..5 score") in help_text


@pytest.mark.slow
def test_a_new_head_kind_and_sts_loss_reach_a_run_load_run_and_the_model_card(monkeypatch, tmp_path, tiny_model_dir):
    monkeypatch.setitem(SCORERS, "dot", DotScorer())          # the one line each registers
    monkeypatch.setitem(STS_LOSSES, "huber", HuberLoss())
    argv = ["--data_dir", str(FIXTURE_DATA), "--model", str(tiny_model_dir), "--epochs", "1", "--max_steps_per_epoch",
            "3", "--batch_size", "4", "--max_length", "24", "--out_dir", str(tmp_path), "--run_name", "toy", "--quiet",
            "--para_head", "dot", "--sts_head", "dot", "--sts_loss", "huber"]
    assert run_multitask.main(argv) == 0
    run = load_run(tmp_path / "toy")
    heads = run.model.heads
    assert heads["qqp"].scorer.name == heads["sts"].scorer.name == "dot"
    assert heads["sts"].loss(torch.tensor([0.0]), torch.tensor([3.0])).item() == 2.5   # Huber, δ = 1
    examples, _ = BUILTIN_TASKS["sts"].read(FIXTURE_DATA / BUILTIN_TASKS["sts"].files["dev"])
    with open(tmp_path / "toy" / "sts-dev-output.csv", encoding="utf-8", newline="") as f:
        written = {r["id"]: float(r["Predicted_Similiarity"]) for r in csv.DictReader(f)}
    predicted = run.predict_examples("sts", examples)
    assert dict(zip(predicted.ids, predicted.predictions.tolist())) == pytest.approx(written, abs=1e-3)
    card = (tmp_path / "toy" / "checkpoint" / "README.md").read_text()
    assert "- qqp: dot: logit = w·(u ⊙ v) + b (`classifier`); a paraphrase when logit > 0" in card
    assert "- sts: dot: score = 5·sigmoid(w·(u ⊙ v) + b) (`classifier`), 0..5; trained with the Huber loss" in card
    assert "| `heads.qqp.classifier.weight` | [1, 16] |" in card   # the exported checkpoint's head tensors
