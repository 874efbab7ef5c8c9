"""The size-aware budget (``--task_batch_sizes auto``, training/configuration/task_shares.py): the rule's batch
sizes on toy task sets against hand values, the rounds it keeps, its flags' errors, and runs: a tiny run trains
the batches the rule gives, and a resumed one ends exactly like an uninterrupted one."""
import json
import math
import random

import pytest

import run_multitask
from test_resume import FIXTURE_DATA, assert_resumes_exactly
from training.configuration.task_shares import tempered_batch_sizes
from training.harness.run_config import RunConfig
from training.harness.trainer import read_inputs
from training.learning.callbacks import Log

SIZES = {"sst": 8544, "qqp": 16213, "sts": 6040}   # the usable training rows of ../shared/data/multitask


def test_t1_gives_each_task_its_size_share_of_the_smallest_tasks_rounds():
    assert tempered_batch_sizes({"a": 100, "b": 400, "c": 200}, 10, 1.0) == {"a": 10, "b": 40, "c": 20}
    # the real files: QQP's batches of 86 and SST's of 45 of docs/ablation.md's qqp86 and cover rows, 189 rounds
    assert tempered_batch_sizes(SIZES, 32, 1.0) == {"sst": 45, "qqp": 86, "sts": 32}


def test_a_higher_temperature_flattens_the_shares_towards_the_batch_size():
    assert tempered_batch_sizes({"a": 100, "b": 400, "c": 200}, 10, 2.0) == {"a": 10, "b": 20, "c": 14}   # 10·√2
    assert tempered_batch_sizes(SIZES, 32, 2.0) == {"sst": 38, "qqp": 52, "sts": 32}   # 32·(N/6040)^½
    assert tempered_batch_sizes(SIZES, 32, 1e9) == {"sst": 32, "qqp": 32, "sts": 32}   # equal: the plain round robin
    assert tempered_batch_sizes({"one": 57}, 8, 1.0) == {"one": 8}


def test_a_batch_that_rounding_would_make_cost_a_round_is_cut():
    # the smallest, 22 at batch 7, has ⌈22/7⌉ = 4 rounds; 7·24/22 = 7.6 rounds to 8, but ⌈24/8⌉ = 3: cut to 7
    assert tempered_batch_sizes({"s": 22, "t": 24}, 7, 1.0) == {"s": 7, "t": 7}
    # 21 at batch 4: 6 rounds; 4·24/21 = 4.6 rounds to 5, ⌈24/5⌉ = 5: cut to 4; 4·28/21 = 5.3 -> 5, ⌈28/5⌉ = 6: kept
    assert tempered_batch_sizes({"s": 21, "t": 24, "u": 28}, 4, 1.0) == {"s": 4, "t": 4, "u": 5}


def test_the_rule_never_costs_a_round_on_any_task_set():
    draw = random.Random(0)
    for _ in range(2000):
        sizes = {f"t{i}": draw.randint(1, 5000) for i in range(draw.randint(1, 4))}
        batch, temperature = draw.randint(1, 64), draw.choice([0.5, 1.0, 1.5, 2.0, 3.0, 10.0])
        batches = tempered_batch_sizes(sizes, batch, temperature)
        smallest = min(sizes, key=sizes.get)
        rounds = math.ceil(sizes[smallest] / batch)
        assert batches[smallest] == batch
        assert all(math.ceil(n / batches[t]) >= rounds for t, n in sizes.items()), (sizes, batch, batches)
        assert all(batches[t] >= batch for t in sizes)


def test_auto_reads_as_the_batch_size_each_until_the_sizes_are_known():
    config = run_multitask.parse_config(["--task_batch_sizes", "auto", "--sampling_temperature", "2"]).validate()
    assert config.batch_sizes() == {"sst": 32, "qqp": 32, "sts": 32}   # the least a task's batch can be
    assert config.batch_sizes(SIZES) == {"sst": 38, "qqp": 52, "sts": 32}
    assert run_multitask.parse_config(["--task_batch_sizes", "32,86,32"]).batch_sizes(SIZES) == {
        "sst": 32, "qqp": 86, "sts": 32}   # written-out sizes ignore the data


def test_the_default_is_auto_and_none_is_the_plain_round_robin_of_before():
    """Issue 84's decision (docs/defaults.md): auto at T = 1 with --layer_lr_decay 0.9 is the default; ``none``
    gives every task --batch_size; a configuration saved before the change (neither key) reads as it trained."""
    default = run_multitask.parse_config([]).validate()
    assert default.data.task_batch_sizes == "auto" and default.train.layer_lr_decay == 0.9
    assert default.batch_sizes(SIZES) == {"sst": 45, "qqp": 86, "sts": 32}
    plain = run_multitask.parse_config(["--task_batch_sizes", "none"]).validate()
    assert plain.batch_sizes(SIZES) == {"sst": 32, "qqp": 32, "sts": 32}
    saved = default.to_dict()
    for section in saved.values():
        if isinstance(section, dict):
            section.pop("task_batch_sizes", None), section.pop("layer_lr_decay", None)
    before = RunConfig.from_dict(saved)
    assert before.data.task_batch_sizes is None and before.train.layer_lr_decay == 1.0


@pytest.mark.parametrize("flags, message", [
    (["--task_batch_sizes", "none", "--sampling_temperature", "2"],
     "--sampling_temperature has no effect without --task_batch_sizes auto"),
    (["--task_batch_sizes", "32,86,32", "--sampling_temperature", "2"], "--sampling_temperature has no effect"),
    (["--task_batch_sizes", "auto", "--sampling_temperature", "0"], "--sampling_temperature must be positive"),
    (["--task_batch_sizes", "auto", "--sampling_temperature", "-1"], "--sampling_temperature must be positive"),
    (["--task_batch_sizes", "Auto"], "--task_batch_sizes must be 3 positive whole numbers"),
])
def test_bad_settings_are_one_line_errors(flags, message):
    with pytest.raises(ValueError, match=message):
        run_multitask.parse_config(flags).validate()


def tiny(tmp_path, model_dir, name, *flags):
    return run_multitask.main(["--data_dir", str(FIXTURE_DATA), "--model", str(model_dir), "--out_dir",
                               str(tmp_path), "--epochs", "1", "--batch_size", "4", "--max_length", "24",
                               "--run_name", name, "--no_test_predictions", *flags])


@pytest.mark.slow
def test_a_tiny_run_trains_the_batches_the_rule_gives(tmp_path, tiny_model_dir, capsys):
    config = run_multitask.parse_config(["--data_dir", str(FIXTURE_DATA), "--model", str(tiny_model_dir),
                                         "--max_length", "24"]).validate()
    sizes = {name: len(split["train"]) for name, split in read_inputs(config, Log()).splits.items()}
    expected = tempered_batch_sizes(sizes, 4, 1.0)
    assert expected["sts"] == 4 and expected != dict.fromkeys(sizes, 4)   # the fixture's tasks differ in size
    assert tiny(tmp_path, tiny_model_dir, "auto", "--task_batch_sizes", "auto") == 0
    out = capsys.readouterr().out
    rounds = math.ceil(sizes["sts"] / 4)
    assert (f"task batch sizes (auto, T = 1): sst {expected['sst']}, qqp {expected['qqp']}, sts 4; {3 * rounds} "
            f"batches an epoch") in out
    metrics = json.loads((tmp_path / "auto" / "metrics.json").read_text())
    assert metrics["epochs"][0]["train_steps"] == 3 * rounds
    assert metrics["epochs"][0]["train_examples"] == sum(min(expected[t] * rounds, n) for t, n in sizes.items())


@pytest.mark.slow
def test_a_resumed_auto_run_ends_exactly_like_an_uninterrupted_one(tiny_model_dir, tmp_path):
    assert_resumes_exactly(tiny_model_dir, tmp_path, "auto", "--epochs", "2", "--task_batch_sizes", "auto",
                           "--sampling_temperature", "1.5")
