"""Issue 43, items 10 and 14: a flag's value the run cannot use is one line naming the flag, before the
run folder exists; the report's --out must be a file prefix, refused before any computing."""
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
