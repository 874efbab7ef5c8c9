"""Issue 43, items 10, 11 and 14: a flag's value the run cannot use is one line naming the flag, before
the run folder exists; path flags are saved absolute; the report's --out must be a file prefix, refused before
any computing."""
from pathlib import Path

import pytest

import run_multitask
from training.tools import report

FIXTURE_DATA = Path(__file__).parent / "fixtures" / "data"


@pytest.mark.parametrize("flags, message", [
    (["--seed", "-1"], "--seed must be between 0 and 2**32 - 1, got -1"),
    (["--seed", str(2 ** 32)], "--seed must be between 0 and 2**32 - 1"),
    (["--private_layers", "9", "--tasks", "sst"], "--private_layers 9 is more than the 2 layers of"),
    (["--private_layers", "9"], "--private_layers 9 is more than the 2 layers of")])
def test_a_flag_value_the_run_cannot_use_is_one_line_naming_it(tmp_path, tiny_model_dir, capsys, flags, message):
    argv = ["--data_dir", str(FIXTURE_DATA), "--model", str(tiny_model_dir), "--out_dir", str(tmp_path),
            "--run_name", "refused", "--quiet", *flags]
    assert run_multitask.main(argv) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err and err.count("\n") == 1
    assert not (tmp_path / "refused").exists()


@pytest.mark.parametrize("out", [".", "..", "folder"])
def test_report_out_that_is_a_folder_is_refused_before_computing(tmp_path, capsys, monkeypatch, out):
    (tmp_path / "runs").mkdir()
    (tmp_path / "folder").mkdir()
    monkeypatch.chdir(tmp_path)
    assert report.main(["runs", "--out", out]) == 1
    err = capsys.readouterr().err
    assert f"error: --out {out} is a folder; give a file prefix" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["folder", "runs"]   # nothing written


@pytest.mark.slow
def test_path_flags_are_saved_absolute(tmp_path, tiny_model_dir, monkeypatch):
    """Item 11: --ucl_data given relative is saved absolute (metrics.json and the checkpoint's
    run_config.json), so --resume and load_run work from any working directory."""
    import json
    monkeypatch.chdir(tmp_path)
    base = ["--data_dir", str(FIXTURE_DATA), "--model", str(tiny_model_dir), "--out_dir", "runs", "--epochs", "1",
            "--max_steps_per_epoch", "1", "--batch_size", "4", "--max_length", "24", "--quiet", "--tasks", "sst"]
    Path("sentences.txt").write_text("A first sentence.\nA second one.\nAnd a third.\nThe fourth.\n")
    assert run_multitask.main([*base, "--run_name", "student", "--ucl", "--ucl_data", "sentences.txt",
                               "--ucl_steps", "1", "--ucl_batch_size", "2"]) == 0
    for saved in (json.loads(Path("runs/student/metrics.json").read_text())["config"],
                  json.loads(Path("runs/student/checkpoint/run_config.json").read_text())):
        assert saved["ucl"]["ucl_data"] == str(tmp_path / "sentences.txt")


@pytest.mark.parametrize("flags, message", [
    # the fixture's smallest training set, STS, has 4 batches of 4: --rr min gives 3 x 4 = 12 steps an epoch
    (["--eval_every", "1000", "--early_stopping", "1"],
     "--eval_every 1000: multi-task training has 12 optimizer steps, so it would evaluate after the last one only"),
    (["--eval_every", "12"], "--eval_every 12: multi-task training has 12 optimizer steps"),
    (["--early_stopping", "1"], "--early_stopping 1: multi-task training evaluates dev 1 time (once an epoch)"),
    (["--eval_every", "6", "--early_stopping", "2"], "--early_stopping 2: multi-task training evaluates dev 2 times (every --eval_every 6 steps)")])
def test_evaluation_flags_without_effect_are_refused(tmp_path, tiny_model_dir, capsys, flags, message):
    """Item 10: --eval_every and --early_stopping that could do nothing on this data are one line naming
    them, before the run folder exists (they were accepted and did nothing)."""
    argv = ["--data_dir", str(FIXTURE_DATA), "--model", str(tiny_model_dir), "--out_dir", str(tmp_path),
            "--batch_size", "4", "--max_length", "24", "--epochs", "1", "--run_name", "refused", "--quiet", *flags]
    assert run_multitask.main(argv) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err and err.count("\n") == 1
    assert not (tmp_path / "refused").exists()
