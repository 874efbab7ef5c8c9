"""training/learning/loop.py: one step equals the written-out step, the clipping and schedule hooks match
torch's own, epochs log and record their figures, and loss curves keep their windows."""
import pytest
import torch

from training.learning.loop import TrainingLoop, clip_grad_norm, warmup_then_linear_decay
from training.learning.objective import Objective
from training.learning.watch import CURVE_EVERY, LossCurve
from training.learning.precision import Precision
from training.harness.run_log import RunLog

CPU = torch.device("cpu")


class Regression(Objective):
    """Least squares on fixed random batches."""

    name, epochs = "regression", 2

    def __init__(self, model, batches, lr=0.1):
        self.model, self.data = model, batches
        self.optimizer = torch.optim.SGD(model.parameters(), lr=lr)

    def batches(self, epoch: int):
        return iter(self.data)

    def steps(self):
        return len(self.data)

    def loss(self, batch):
        x, y = batch
        loss = (self.model(x).squeeze(-1) - y).pow(2).mean()
        return loss, {"mse": loss}

    def examples(self, batch):
        return len(batch[0])


def data(n=6, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(4, 3, generator=g), 10 * torch.randn(4, generator=g)) for _ in range(n)]


def model():
    torch.manual_seed(0)
    return torch.nn.Linear(3, 1)


def loop(**hooks):
    return TrainingLoop(Precision("off", CPU), RunLog(quiet=True), **hooks)


def written_out(m, batches, epochs, lr=0.1, clip=None, schedule=None, accum=1):
    optimizer = torch.optim.SGD(m.parameters(), lr=lr)
    scheduler = schedule(optimizer, epochs * -(-len(batches) // accum)) if schedule else None
    for _ in range(epochs):
        for i in range(0, len(batches), accum):
            optimizer.zero_grad(set_to_none=True)
            group = batches[i:i + accum]
            for x, y in group:
                loss = (m(x).squeeze(-1) - y).pow(2).mean()
                (loss / len(group) if len(group) > 1 else loss).backward()
            if clip is not None:
                torch.nn.utils.clip_grad_norm_(m.parameters(), clip)
            optimizer.step()
            if scheduler:
                scheduler.step()
    return m


@pytest.mark.parametrize("hooks", [{}, {"max_grad_norm": 0.5}, {"grad_accum": 4},
                                   {"schedule": lambda opt, total: torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1 / (s + 1))}])
def test_training_equals_the_written_out_loop(hooks):
    batches = data()
    trained = model()
    result = loop(**hooks).train(Regression(trained, batches))
    reference = written_out(model(), batches, 2, clip=hooks.get("max_grad_norm"), schedule=hooks.get("schedule"),
                            accum=hooks.get("grad_accum", 1))
    for a, b in zip(trained.parameters(), reference.parameters()):
        assert torch.equal(a, b)
    assert result["batches"] == (4 if "grad_accum" in hooks else 12)   # optimizer steps: 6 batches = 4 + 2


def test_clipping_changes_the_step_when_the_norm_is_larger():
    batches = data()
    plain, clipped = model(), model()
    loop().train(Regression(plain, batches))
    loop(max_grad_norm=1e-3).train(Regression(clipped, batches))
    assert not torch.equal(plain.weight, clipped.weight)


@pytest.mark.parametrize("max_norm", [0.5, 100.0])
def test_clipping_sparse_row_gradients_equals_torch_on_the_dense_ones(max_norm):
    # torch's clip_grad_norm_ refuses sparse gradients; ours gives its result on their dense form
    grads = {}
    for sparse in (False, True):
        torch.manual_seed(0)
        embedding, linear = torch.nn.Embedding(12, 4, sparse=sparse), torch.nn.Linear(4, 2)
        linear(embedding(torch.tensor([[1, 3, 3, 7], [2, 3, 9, 1]]))).pow(2).sum().backward()
        params = [embedding.weight, *linear.parameters()]
        norm = (clip_grad_norm if sparse else torch.nn.utils.clip_grad_norm_)(params, max_norm)
        grads[sparse] = (norm, [p.grad.to_dense() for p in params])
    torch.testing.assert_close(grads[True][0], grads[False][0])
    for a, b in zip(grads[True][1], grads[False][1]):
        torch.testing.assert_close(a, b)
    assert (grads[True][0] > max_norm) == (max_norm == 0.5)  # one case clips, the other does not


def test_epoch_records_and_log_lines(capsys):
    objective = Regression(model(), data(n=25))
    result = loop().train(objective)
    out = capsys.readouterr().out.splitlines()
    assert [line.split(":")[0] for line in out] == ["epoch 1", "epoch 2"] and "train loss mse" in out[0]
    assert len(result["loss_curve"]) == 5 and result["loss_curve"][0][0] == CURVE_EVERY  # 50 steps, a point every 10


def test_loss_curve_points_are_window_means_and_survive_a_round_trip():
    curve = LossCurve()
    for value in range(1, 16):
        curve.add(float(value), step=100 + 2 * value)   # x: the run's step of the window's last batch
    assert curve.points == [[120, 5.5]]
    assert curve.so_far() == [[120, 5.5], [130, 13.0]]   # the unfinished window too, as a view
    again = LossCurve(curve.data)   # the saved dict continues the curve
    for value in range(16, 21):
        again.add(float(value), step=100 + 2 * value)
    assert again.points == again.so_far() == [[120, 5.5], [140, 15.5]]


def test_a_stage_shorter_than_a_window_still_has_its_curves():
    """3 steps, fewer than CURVE_EVERY: the loss and learning-rate curves end at its last step, where
    they used to be empty (a blank loss panel in curves.png)."""
    result = loop().train(Regression(model(), data(n=3)))
    assert [step for step, _ in result["loss_curve"]] == [6] and [step for step, _ in result["lr_curve"]] == [6]


def test_warmup_then_linear_decay_is_the_bert_schedule():
    """10 steps, 20 % warmup: 0, 1/2, then 8/8 down to 1/8 (HF's get_linear_schedule_with_warmup,
    written out by hand)."""
    parameter = torch.nn.Parameter(torch.zeros(1))
    optimizer = torch.optim.SGD([parameter], lr=1.0)
    scheduler = warmup_then_linear_decay(0.2)(optimizer, 10)
    seen = []
    for _ in range(10):
        seen.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    assert seen == pytest.approx([0.0, 0.5, 1.0, 7 / 8, 6 / 8, 5 / 8, 4 / 8, 3 / 8, 2 / 8, 1 / 8])


def test_learning_rate_curve_follows_the_schedule():
    batches = data(n=25)   # 2 epochs of 25 steps: a point every CURVE_EVERY steps
    result = loop(schedule=warmup_then_linear_decay(0.1)).train(Regression(model(), batches))
    steps = [step for step, _ in result["lr_curve"]]
    assert steps == [10, 20, 30, 40, 50]
    total, warmup = 50, 5
    assert [lr for _, lr in result["lr_curve"]] == pytest.approx(   # step n (from 1) uses the factor of n - 1
        [0.1 * (total - (step - 1)) / (total - warmup) for step in steps])
    constant = loop().train(Regression(model(), batches))
    assert {lr for _, lr in constant["lr_curve"]} == {0.1}
