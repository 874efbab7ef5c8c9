"""training.learning.schedule.RoundRobinScheduler over tiny stand-in loaders (batches of one integer), and one
``--rr proportional`` run."""
import json
import math
from collections import Counter
from pathlib import Path

import pytest
import torch
from torch.utils.data import DataLoader

import run_multitask
from training.harness.run_config import RunConfig
from training.learning.schedule import RoundRobinScheduler


def _loader(n, shuffle=False, seed=0):
    generator = torch.Generator().manual_seed(seed) if shuffle else None
    return DataLoader(list(range(n)), batch_size=1, shuffle=shuffle, generator=generator)


def _loaders(**sizes):
    return {name: _loader(n) for name, n in sizes.items()}


def _items(scheduler):
    return [(name, int(batch)) for name, batch in scheduler]


def test_min_gives_min_rounds_in_task_order_without_repeats():
    items = _items(RoundRobinScheduler(_loaders(a=3, b=5, c=2), strategy="min"))
    assert items == [("a", 0), ("b", 0), ("c", 0),
                     ("a", 1), ("b", 1), ("c", 1)]


def test_exhaust_gives_max_rounds_and_restarts_smaller_loaders():
    scheduler = RoundRobinScheduler(_loaders(a=3, b=5, c=2), strategy="exhaust")
    items = _items(scheduler)
    assert [name for name, _ in items] == ["a", "b", "c"] * 5
    by_task = {t: [i for name, i in items if name == t] for t in "abc"}
    assert by_task == {"a": [0, 1, 2, 0, 1],
                       "b": [0, 1, 2, 3, 4],
                       "c": [0, 1, 0, 1, 0]}
    assert Counter(name for name, _ in items) == {"a": 5, "b": 5, "c": 5}


def test_exhaust_restart_reshuffles_and_covers_every_item():
    loaders = {"small": _loader(4, shuffle=True, seed=1), "big": _loader(12)}
    items = [i for name, i in _items(RoundRobinScheduler(loaders, strategy="exhaust")) if name == "small"]
    assert len(items) == 12
    passes = [items[0:4], items[4:8], items[8:12]]
    for p in passes:                      # every pass over the small loader is a permutation
        assert sorted(p) == [0, 1, 2, 3]
    assert len({tuple(p) for p in passes}) > 1   # and not the same order every time


def test_max_steps_caps_rounds():
    assert _items(RoundRobinScheduler(_loaders(a=3, b=5), strategy="exhaust", max_steps=2)) == [
        ("a", 0), ("b", 0), ("a", 1), ("b", 1)]
    # a cap above the natural number of rounds changes nothing
    assert len(_items(RoundRobinScheduler(_loaders(a=3, b=5), strategy="min", max_steps=100))) == 6


@pytest.mark.parametrize("strategy,max_steps,expected", [
    ("min", None, 6), ("exhaust", None, 15), ("min", 1, 3), ("exhaust", 4, 12), ("proportional", None, 10),
    ("proportional", 2, 6)])
def test_len_equals_number_of_items_yielded(strategy, max_steps, expected):
    scheduler = RoundRobinScheduler(_loaders(a=3, b=5, c=2), strategy=strategy, max_steps=max_steps)
    assert len(scheduler) == expected
    assert len(list(scheduler)) == expected


def test_each_epoch_starts_over():
    scheduler = RoundRobinScheduler(_loaders(a=3, b=5), strategy="min")
    assert _items(scheduler) == _items(scheduler)


def test_empty_loader_is_an_error_naming_the_task():
    with pytest.raises(ValueError, match="sts"):
        RoundRobinScheduler({"sst": _loader(3), "sts": _loader(0)})


def test_no_loaders_is_an_error():
    with pytest.raises(ValueError):
        RoundRobinScheduler({})


def test_unknown_strategy():
    with pytest.raises(ValueError, match="roundest"):
        RoundRobinScheduler(_loaders(a=2), strategy="roundest")


def test_proportional_takes_every_batch_once_spread_evenly():
    # batch k of a task of n sits at (k + 1/2)/n of the epoch: a 0.5/3, 1.5/3, 2.5/3; b 0.5/5 ... 4.5/5;
    # c 0.25, 0.75; a tie (a 1.5/3 and b 2.5/5) keeps the loaders' order
    items = _items(RoundRobinScheduler(_loaders(a=3, b=5, c=2), strategy="proportional"))
    assert items == [("b", 0), ("a", 0), ("c", 0), ("b", 1), ("a", 1), ("b", 2),
                     ("b", 3), ("c", 1), ("a", 2), ("b", 4)]
    # a cap keeps the first batches of that order, as many as max_steps rounds would take
    capped = _items(RoundRobinScheduler(_loaders(a=3, b=5, c=2), strategy="proportional", max_steps=1))
    assert capped == items[:3]


def test_proportional_has_no_rounds_for_the_joint_loss():
    with pytest.raises(ValueError, match="proportional"):
        next(RoundRobinScheduler(_loaders(a=1, b=2), strategy="proportional").rounds())


@pytest.mark.slow
def test_a_proportional_run_trains_on_every_batch_of_every_task_once(tmp_path, tiny_model_dir):
    data = Path(__file__).parent / "fixtures" / "data"
    argv = ["--data_dir", str(data), "--model", str(tiny_model_dir), "--out_dir", str(tmp_path), "--run_name", "p",
            "--epochs", "1", "--batch_size", "4", "--task_batch_sizes", "none", "--max_length", "24", "--rr",
            "proportional", "--quiet"]
    assert run_multitask.main(argv) == 0
    metrics = json.loads((tmp_path / "p" / "metrics.json").read_text())
    read = [metrics["data"][f] for f in ("ids-sst-train.csv", "quora-train.csv", "sts-train.csv")]
    rows = [counts["rows"] - counts["skipped"] for counts in read]   # the fixture QQP has one bad line
    assert metrics["epochs"][0]["train_steps"] == sum(math.ceil(n / 4) for n in rows)
    assert metrics["epochs"][0]["train_examples"] == sum(rows)


def test_the_joint_loss_refuses_proportional_epochs():
    with pytest.raises(ValueError, match="--rr proportional"):
        RunConfig.from_dict({"train": {"rr": "proportional"}, "joint_loss": {"joint_loss": True}}).validate()
    RunConfig.from_dict({"train": {"rr": "proportional"}}).validate()   # round-robin steps: fine
