"""The training bar counts what the README and ``--max_steps_per_epoch`` call rounds (issue 87, item 2): a round is one
batch of every task, so 2 rounds of the three tasks are 6 optimizer steps and a bar of 2 rounds, not of 6."""
import pytest

import run_multitask
import training.harness.watching as watching
from test_resume import FIXTURE_DATA


class RecordedBar:
    """tqdm's part that the harness's watch uses, recording what the bar was told."""
    bars: list = []

    def __init__(self, total=None, unit="it", desc="", **_):
        self.total, self.unit, self.desc, self.n = total, unit, desc, 0
        RecordedBar.bars.append(self)

    def update(self, n=1):
        self.n += n

    def set_postfix(self, *args, **kwargs):
        pass

    def close(self):
        pass


@pytest.mark.parametrize("flags, total, unit", [
    ([], 2, "round"),                                    # round robin: 6 batches, 2 rounds of 3 tasks
    (["--joint_loss"], 2, "round"),                      # a joint step is a round: 2 steps
    (["--rr", "proportional", "--max_steps_per_epoch", "none"], None, "batch"),   # no rounds: every batch counted
])
def test_the_bar_counts_rounds_of_the_tasks(tmp_path, tiny_model_dir, monkeypatch, flags, total, unit):
    RecordedBar.bars = []
    monkeypatch.setattr(watching, "tqdm", RecordedBar)
    argv = ["--data_dir", str(FIXTURE_DATA), "--model", str(tiny_model_dir), "--batch_size", "4", "--max_length", "24",
            "--epochs", "1", "--max_steps_per_epoch", "2", "--out_dir", str(tmp_path), "--run_name", "r",
            "--no_test_predictions", *flags]
    assert run_multitask.main(argv) == 0
    [bar] = [b for b in RecordedBar.bars if b.desc == "epoch 1/1"]
    assert bar.unit == unit
    if total is not None:
        assert bar.total == total and bar.n == total   # drawn to its end: every round counted once
    else:
        assert bar.total is not None and bar.n == bar.total
