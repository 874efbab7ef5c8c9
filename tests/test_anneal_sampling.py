"""Annealed sampling (training/extensions/anneal_sampling.py): α and p_i against hand values, the
order's length and reproducibility, its frequencies against p_i, and runs: the epoch keeps --rr's
number of batches, with PCGrad too, and a resumed run ends exactly like an uninterrupted one."""
import dataclasses
import json
import subprocess
from collections import Counter
from pathlib import Path

import pytest

import run_multitask
from test_resume import argv, assert_same_run, command, env, final_state, resume_after_cut
from training.extensions.anneal_sampling import EXTENSION, alpha, probabilities

FIXTURE_DATA = Path(__file__).parent / "fixtures" / "data"


def test_alpha_falls_from_one_to_a_fifth_over_the_epochs():
    assert [alpha(e, 3) for e in (1, 2, 3)] == pytest.approx([1.0, 0.6, 0.2])   # 1 - 0.8 (e - 1) / 2
    assert [alpha(e, 5) for e in (1, 3, 5)] == pytest.approx([1.0, 0.6, 0.2])
    assert alpha(1, 1) == 1.0   # one epoch: in proportion to the sizes


def test_probabilities_are_the_sizes_to_the_power_alpha_normalised():
    assert probabilities({"a": 100, "b": 25}, 0.5) == pytest.approx({"a": 10 / 15, "b": 5 / 15})
    assert probabilities({"a": 8544, "b": 16213, "c": 6040}, 1.0) == pytest.approx(
        {"a": 8544 / 30797, "b": 16213 / 30797, "c": 6040 / 30797})
    assert probabilities({"a": 100, "b": 25}, 0.0) == pytest.approx({"a": 0.5, "b": 0.5})


def test_the_order_keeps_the_steps_follows_the_seed_and_draws_p():
    config = run_multitask.parse_config(["--anneal_sampling", "--epochs", "3"])
    sizes = {"sst": 8544, "qqp": 16213, "sts": 6040}
    order = EXTENSION.batch_order(config.anneal_sampling, config.core(), 2, sizes, 30000)
    assert len(order) == 30000 and order == EXTENSION.batch_order(config.anneal_sampling, config.core(), 2, sizes, 30000)
    assert order != EXTENSION.batch_order(config.anneal_sampling, config.core(), 3, sizes, 30000)
    counts, p = Counter(order), probabilities(sizes, 0.6)
    assert all(abs(counts[task] / len(order) - p[task]) < 0.01 for task in sizes)
    config = config.with_sections(train=dataclasses.replace(config.train, seed=config.train.seed + 1))
    assert order != EXTENSION.batch_order(config.anneal_sampling, config.core(), 2, sizes, 30000)


def tiny(tmp_path, tiny_model_dir, name, *flags):
    return run_multitask.main(["--data_dir", str(FIXTURE_DATA), "--model", str(tiny_model_dir), "--out_dir",
                               str(tmp_path), "--epochs", "2", "--batch_size", "4", "--max_length", "24",
                               "--run_name", name, *flags])


@pytest.mark.slow
def test_an_annealed_epoch_has_the_batches_rr_gives_and_says_so(tmp_path, tiny_model_dir, capsys):
    assert tiny(tmp_path, tiny_model_dir, "ft", "--quiet") == 0
    assert tiny(tmp_path, tiny_model_dir, "anneal", "--anneal_sampling") == 0
    assert "multi-task batches in the order of --anneal_sampling: 12 an epoch, as many as --rr min gives" in (
        capsys.readouterr().out)
    ft, anneal = (json.loads((tmp_path / name / "metrics.json").read_text()) for name in ("ft", "anneal"))
    assert [e["train_steps"] for e in anneal["epochs"]] == [e["train_steps"] for e in ft["epochs"]] == [12, 12]
    assert anneal["config"]["anneal_sampling"] == {"anneal_sampling": True}


@pytest.mark.slow
def test_annealed_sampling_with_pcgrad_steps_on_groups_of_three_batches(tmp_path, tiny_model_dir):
    assert tiny(tmp_path, tiny_model_dir, "both", "--anneal_sampling", "--pcgrad", "--quiet") == 0
    metrics = json.loads((tmp_path / "both" / "metrics.json").read_text())
    assert [e["train_steps"] for e in metrics["epochs"]] == [4, 4]   # 12 batches a epoch, three a step


def test_a_single_task_run_refuses_it_before_the_run_folder(tmp_path, tiny_model_dir, capsys):
    assert tiny(tmp_path, tiny_model_dir, "one", "--anneal_sampling", "--tasks", "sts") == 1
    assert "--anneal_sampling draws each batch's task among --tasks: give two or more" in capsys.readouterr().err
    assert not (tmp_path / "one").exists()


@pytest.mark.slow
def test_a_resumed_annealed_run_ends_exactly_like_an_uninterrupted_one(tiny_model_dir, tmp_path):
    flags = ["--epochs", "3", "--anneal_sampling", "--max_steps_per_epoch", "3"]
    subprocess.run(command(*argv(tiny_model_dir, tmp_path / "clean", "anneal", *flags)), env=env(), check=True,
                   capture_output=True, timeout=300)
    clean = tmp_path / "clean" / "anneal"
    assert resume_after_cut(clean, tmp_path / "cut" / "anneal", 10) == "multitask"   # inside the second epoch
    assert_same_run(final_state(tmp_path / "cut" / "anneal"), final_state(clean))
