"""Dynamic sampling by the gap (training/extensions/gap_sampling.py): the shares against hand values (the floor,
every gap 0, a task above its reference, no score), the flags' one-line errors, the held-out split (chosen as
--val_fraction chooses it, from what --val_fraction leaves), a run whose second epoch draws its batches from the
shares of the first epoch's recorded held-out scores and never trains on the held-out examples, and a resumed run
that ends exactly like an uninterrupted one."""
import json
import random
import subprocess
from collections import Counter
from pathlib import Path

import pytest

import run_multitask
from test_resume import argv, assert_same_run, command, env, final_state, resume_after_cut
from training.data.holdout import hold_out
from training.data.readers import Example
from training.extensions.gap_sampling import EXTENSION, shares
from training.harness.trainer import hold_out_for_extensions, hold_out_validation
from training.harness.resume import list_checkpoints
from training.learning.callbacks import Log
from training.learning.schedule import RoundRobinScheduler
from training.learning.task_schema import run_tasks

FIXTURE_DATA = Path(__file__).parent / "fixtures" / "data"
REFERENCE = ["--gap_reference", "sst=0.5,qqp=0.8,sts=0.9"]
GAP = ["--gap_sampling", *REFERENCE, "--gap_holdout", "0.25"]


def test_shares_follow_the_gaps_above_the_floor():
    references = {"sst": 0.5, "qqp": 0.8, "sts": 0.9}
    scores = {"sst": 0.4, "qqp": 0.6, "sts": 0.9}   # gaps 0.2, 0.25, 0: Σ 0.45
    assert shares(scores, references, 0.1) == pytest.approx(
        {"sst": 0.1 + 0.7 * 0.2 / 0.45, "qqp": 0.1 + 0.7 * 0.25 / 0.45, "sts": 0.1})   # 0.411, 0.489, 0.1
    assert shares(scores, references, 0.0) == pytest.approx({"sst": 4 / 9, "qqp": 5 / 9, "sts": 0.0})
    assert list(shares(scores, references, 0.1)) == ["sst", "qqp", "sts"]   # the references' order
    # a task above its reference gets the floor, not a negative gap
    assert shares({"sst": 0.25, "qqp": 0.95, "sts": 0.45}, {"sst": 0.5, "qqp": 0.8, "sts": 0.9}, 0.05) == (
        pytest.approx({"sst": 0.05 + 0.85 * 0.5, "qqp": 0.05, "sts": 0.05 + 0.85 * 0.5}))   # gaps .5, 0, .5


def test_shares_are_uniform_when_every_gap_is_zero_and_no_score_is_the_whole_gap():
    references = {"sst": 0.5, "qqp": 0.8, "sts": 0.9}
    assert shares({"sst": 0.5, "qqp": 0.9, "sts": 1.0}, references, 0.05) == pytest.approx(
        {"sst": 1 / 3, "qqp": 1 / 3, "sts": 1 / 3})
    assert shares({"sst": 0.5, "qqp": 0.8, "sts": None}, references, 0.0) == pytest.approx(
        {"sst": 0.0, "qqp": 0.0, "sts": 1.0})
    assert shares({"sst": 0.25, "qqp": 0.4, "sts": 0.45}, references, 1 / 3) == pytest.approx(
        {"sst": 1 / 3, "qqp": 1 / 3, "sts": 1 / 3})   # a floor of 1/T: uniform whatever the gaps


def test_the_first_epoch_keeps_rr_and_later_ones_draw_the_shares_of_the_last_record():
    config = run_multitask.parse_config([*GAP, "--gap_floor", "0"]).validate()
    c, core, sizes = config.gap_sampling, config.core(), {"sst": 8544, "qqp": 16213, "sts": 6040}
    assert EXTENSION.batch_order(c, core, 1, sizes, 100, []) is None
    history = [{"epoch": 1, "gap_sampling": {"held_out": {"sst": 0.4, "qqp": 0.8, "sts": 0.45}}}]   # gaps .2, 0, .5
    order = EXTENSION.batch_order(c, core, 2, sizes, 30000, history)
    assert len(order) == 30000 and order == EXTENSION.batch_order(c, core, 2, sizes, 30000, history)
    counts = Counter(order)
    assert counts["qqp"] == 0 and abs(counts["sst"] / 30000 - 2 / 7) < 0.01 and abs(counts["sts"] / 30000 - 5 / 7) < 0.01
    assert order != EXTENSION.batch_order(c, core, 3, sizes, 30000, history)   # the epoch seeds the draws


@pytest.mark.parametrize("flags, message", [
    (["--gap_sampling"], "--gap_sampling needs --gap_reference: each task's single-task score"),
    (["--gap_sampling", "--gap_reference", "sst=0.5,qqp"], "--gap_reference must be TASK=SCORE pairs"),
    (["--gap_sampling", "--gap_reference", "sst=0.5,qqp=high,sts=0.9"], "--gap_reference must be TASK=SCORE pairs"),
    (["--gap_sampling", "--gap_reference", "sst=0.5,qqp=0.8"], "--gap_reference has no score for sts of --tasks"),
    (["--gap_sampling", "--gap_reference", "sst=0.5,qqp=0.8,sts=0.9", "--tasks", "sst,sts"],
     "--gap_reference names qqp, which --tasks (sst,sts) does not"),
    (["--gap_sampling", "--gap_reference", "sst=0.5,qqp=0.8,sts=0.9,cfimdb=0.9"],
     "--gap_reference names cfimdb, which --tasks (sst,qqp,sts) does not"),
    (["--gap_sampling", "--gap_reference", "sst=0.5,qqp=0.8,sts=0.9,sst=0.6"], "--gap_reference names sst twice"),
    (["--gap_sampling", "--gap_reference", "sst=0.5,qqp=0.8,sts=-0.1"],
     "--gap_reference: sts's score must be a positive number, got -0.1"),
    ([*GAP, "--gap_holdout", "0"], "--gap_holdout must be in (0, 1), got 0.0"),
    ([*GAP, "--gap_holdout", "1"], "--gap_holdout must be in (0, 1), got 1.0"),
    ([*GAP, "--gap_floor", "0.34"], "--gap_floor must be in [0, 1/3]"),
    ([*GAP, "--gap_floor", "-0.1"], "--gap_floor must be in [0, 1/3]"),
    ([*GAP, "--anneal_sampling"], "--gap_sampling and --anneal_sampling both decide the order of the task batches"),
    (["--gap_sampling", "--gap_reference", "sts=0.9", "--tasks", "sts"],
     "--gap_sampling draws each batch's task among --tasks: give two or more"),
    (["--gap_holdout", "0.1"], "--gap_holdout has no effect without --gap_sampling"),
])
def test_bad_flags_are_one_line_naming_the_flag(flags, message):
    with pytest.raises(ValueError) as refused:
        run_multitask.parse_config(flags).validate()
    assert message in str(refused.value) and "\n" not in str(refused.value)


def test_off_it_holds_nothing_out_and_the_grids_reference_is_idle():
    assert run_multitask.parse_config([]).validate().held_out() == []
    # the grid gives every row its --gap_reference (its budget); off, it is no error, whatever --tasks
    run_multitask.parse_config([*(w for kv in EXTENSION.budget.items() for w in kv), "--tasks", "sst"]).validate()
    assert run_multitask.parse_config(GAP).validate().held_out() == [("gap_sampling", 0.25)]


def test_the_held_out_split_is_chosen_as_val_fraction_chooses_it_from_what_it_leaves():
    train = [Example(id=f"e{i}", texts=(f"sentence {i}",), label=i % 2, line=i + 2) for i in range(40)]
    config = run_multitask.parse_config(["--tasks", "sst"])
    tasks = run_tasks(config)
    report = {tasks["sst"].files["train"]: {}}
    splits = {"sst": {"train": list(train)}}
    hold_out_for_extensions(splits, tasks, [("gap_sampling", 0.25)], report, Log())
    assert splits["sst"]["gap_sampling"] == hold_out(train, 0.25)[1]   # --val_fraction 0.25's examples exactly
    assert splits["sst"]["train"] == hold_out(train, 0.25)[0] and len(splits["sst"]["gap_sampling"]) == 10
    assert report[tasks["sst"].files["train"]] == {"held_out_gap_sampling": 10}
    # with --val_fraction, carved from what it leaves: three disjoint parts
    splits = {"sst": {"train": list(train)}}
    hold_out_validation(splits, tasks, 0.2, report, Log())
    hold_out_for_extensions(splits, tasks, [("gap_sampling", 0.25)], report, Log())
    parts = [{e.id for e in splits["sst"][name]} for name in ("train", "dev", "gap_sampling")]
    assert [len(p) for p in parts] == [24, 8, 8] and set.union(*parts) == {e.id for e in train}


def tiny(tmp_path, model_dir, name, *flags):
    return run_multitask.main(["--data_dir", str(FIXTURE_DATA), "--model", str(model_dir), "--out_dir", str(tmp_path),
                               "--epochs", "2", "--batch_size", "4", "--max_length", "24", "--quiet",
                               "--run_name", name, *flags])


def test_epoch_two_draws_from_epoch_ones_held_out_scores_and_never_trains_on_them(tmp_path, tiny_model_dir,
                                                                                   monkeypatch):
    walked, walk = [], RoundRobinScheduler.walk

    def recording_walk(self, order):
        walked.append([])
        for name, batch in walk(self, order):
            walked[-1].append((name, batch["ids"]))
            yield name, batch
    monkeypatch.setattr(RoundRobinScheduler, "walk", recording_walk)
    assert tiny(tmp_path, tiny_model_dir, "gap", *GAP, "--gap_floor", "0.02") == 0
    metrics = json.loads((tmp_path / "gap" / "metrics.json").read_text())
    first, second = (e["gap_sampling"] for e in metrics["epochs"])
    assert "shares" not in first and set(first["held_out"]) == set(second["held_out"]) == {"sst", "qqp", "sts"}
    expected = shares(first["held_out"], {"sst": 0.5, "qqp": 0.8, "sts": 0.9}, 0.02)
    assert second["shares"] == pytest.approx(expected)
    assert len(walked) == 2 and [e["train_steps"] for e in metrics["epochs"]] == [9, 9]   # as many as --rr min gives
    assert [name for name, _ in walked[0]] == ["sst", "qqp", "sts"] * 3   # epoch 1: --rr's order
    drawn = random.Random(f"gap_sampling {metrics['config']['train']['seed']} 2").choices(
        list(expected), weights=list(expected.values()), k=9)
    assert [name for name, _ in walked[1]] == drawn != [name for name, _ in walked[0]]
    # the held-out examples: those --val_fraction 0.25 would take, and no batch of either epoch holds one
    tasks = run_tasks(run_multitask.parse_config([]))
    for name, task in tasks.items():
        examples, _ = task.read(FIXTURE_DATA / task.files["train"])
        held = {e.id for e in hold_out(examples, 0.25)[1]}
        assert metrics["data"][task.files["train"]]["held_out_gap_sampling"] == len(held) > 0
        trained = {i for epoch in walked for task_name, ids in epoch if task_name == name for i in ids}
        assert trained and not trained & held, name


@pytest.mark.slow
@pytest.mark.parametrize("cut, epoch", [(10, 2), (20, 3)])
def test_a_resumed_run_ends_exactly_like_an_uninterrupted_one(tiny_model_dir, tmp_path, cut, epoch):
    """Cut inside the second or the third epoch, whose order came from the held-out scores saved with the
    progress: the resumed run draws the same batches and ends with the same weights, metrics and records."""
    flags = ["--epochs", "3", *GAP, "--max_steps_per_epoch", "3"]
    subprocess.run(command(*argv(tiny_model_dir, tmp_path / "clean", "gap", *flags)), env=env(), check=True,
                   capture_output=True, timeout=300)
    clean, resumed = tmp_path / "clean" / "gap", tmp_path / "cut" / "gap"
    assert resume_after_cut(clean, resumed, cut) == "multitask"
    state = json.loads((list_checkpoints(clean)[cut] / "state.json").read_text())
    assert state["progress"]["current"]["epoch"] == epoch and len(state["progress"]["epochs"]) == epoch - 1
    assert_same_run(final_state(resumed), final_state(clean))
    records = [[e["gap_sampling"] for e in json.loads((run / "metrics.json").read_text())["epochs"]]
               for run in (resumed, clean)]
    assert records[0] == records[1] and all("shares" in r for r in records[1][1:])
