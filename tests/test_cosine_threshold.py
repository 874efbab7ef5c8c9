"""The cosine paraphrase head's threshold b in (cos(u, v) − b)/τ starts from the data
(``heads.PairHead.calibrate``, ``training.learning.calibration.calibrate_heads``): the best cut against hand-computed cases, the
start against cosines computed independently with ``training.learning.encoding.encode``, heads without a threshold
left alone, and a resumed stage never started again."""
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import run_multitask
from training.data.batching import make_loader
from heads.tasks import PairHead, best_threshold
from minbert import BertModel
from training.learning import stages
from training.learning.calibration import CALIBRATION_PAIRS, calibrate_heads
from training.learning.encoding import encode
from training.harness.runs import tokenizer_for, with_heads
from training.learning.task_schema import BUILTIN_TASKS, run_tasks

FIXTURE_DATA = Path(__file__).parent / "fixtures" / "data"


@pytest.mark.parametrize("scores, labels, cut", [
    ([0.1, 0.5, 0.6, 0.9], [0, 0, 1, 1], 0.55),       # separable: the midpoint of the gap
    ([0.9, 0.6, 0.5, 0.1], [1, 1, 0, 0], 0.55),       # order of the input does not matter
    ([0.2, 0.4, 0.7, 0.8], [0, 1, 0, 1], 0.3),        # 3 of 4 at 0.3 and at 0.75: the lower cut
    ([0.7, 0.8], [1, 1], 0.699),                      # all paraphrases: below every score
    ([0.7, 0.8], [0, 0], 0.801),                      # none: above every score
])
def test_the_best_cut_by_hand(scores, labels, cut):
    assert best_threshold(np.array(scores), np.array(labels)) == pytest.approx(cut)


def test_only_a_thresholded_head_is_started():
    similarities, labels = torch.tensor([0.1, 0.5, 0.6, 0.9]), torch.tensor([0, 0, 1, 1])
    cosine = PairHead(8, "cosine", "logit")
    assert cosine.thresholded and cosine.calibrate(similarities, labels) == pytest.approx(0.55)
    assert cosine.threshold.item() == pytest.approx(0.55)
    u, v = torch.randn(3, 8), torch.randn(3, 8)
    assert torch.allclose(cosine(u, v), (F.cosine_similarity(u, v, dim=-1) - 0.55) / 0.05, atol=1e-5)
    for head in (PairHead(8, "concat", "logit"), PairHead(8, "cosine", "score")):
        before = {k: t.clone() for k, t in head.state_dict().items()}
        assert not head.thresholded and head.calibrate(similarities, labels) is None
        assert all(torch.equal(before[k], t) for k, t in head.state_dict().items())


def fixture_run(tiny_model_dir, para_head: str):
    config = run_multitask.parse_config(["--model", str(tiny_model_dir), "--para_head", para_head,
                                         "--max_length", "24", "--batch_size", "4"])
    torch.manual_seed(0)
    bert = BertModel.from_pretrained(tiny_model_dir)
    tokenizer = tokenizer_for(tiny_model_dir, bert)
    model = with_heads(bert, config.model, run_tasks(config))
    examples, _ = BUILTIN_TASKS["qqp"].read(FIXTURE_DATA / "quora-train.csv")
    messages = []
    run = SimpleNamespace(model=model, config=config, device=torch.device("cpu"), log=messages.append,
                          splits={"qqp": {"train": examples}},
                          loader=lambda ex, size, shuffle: make_loader(ex, tokenizer, 24, size, shuffle, bucket=True))
    return run, tokenizer, examples, messages


def test_the_start_is_the_best_cut_of_the_pairs_cosines(tiny_model_dir):
    run, tokenizer, examples, messages = fixture_run(tiny_model_dir, "cosine")
    calibrate_heads(run, ["qqp"])
    first = examples[:CALIBRATION_PAIRS]
    u, v = (torch.from_numpy(encode(run.model.bert, tokenizer, [e.texts[i] for e in first], "mean", max_length=24))
            for i in (0, 1))
    want = best_threshold(F.cosine_similarity(u, v, dim=-1).double().numpy(), np.array([e.label for e in first]))
    assert run.model.heads["qqp"].threshold.item() == pytest.approx(want, abs=1e-5)
    assert len(messages) == 1 and f"b = {want:.3f}" in messages[0] and f"first {len(first)} training pairs" in messages[0]


def test_a_concat_run_is_left_alone(tiny_model_dir):
    run, _, _, messages = fixture_run(tiny_model_dir, "concat")
    before = {k: t.clone() for k, t in run.model.state_dict().items()}
    calibrate_heads(run, ["sst", "qqp", "sts"])
    assert messages == [] and all(torch.equal(before[k], t) for k, t in run.model.state_dict().items())


@pytest.mark.parametrize("progress, started", [
    ({"current": None, "epochs": []}, True),                                        # a stage that starts
    ({"current": {"epoch": 1, "steps": 3}, "epochs": []}, False),                   # resumed mid-epoch
    ({"current": {"epoch": 2, "steps": 0}, "epochs": [{"epoch": 1}]}, False),       # resumed after an epoch
])
def test_a_resumed_stage_keeps_its_trained_threshold(monkeypatch, progress, started):
    calls = []
    monkeypatch.setattr(stages, "calibrate_heads", lambda run, tasks: calls.append(list(tasks)))
    objective = stages.TaskObjective.__new__(stages.TaskObjective)
    objective.run, objective.scheduler = object(), SimpleNamespace(loaders={"qqp": None})
    objective.start(progress)
    assert calls == ([["qqp"]] if started else [])
