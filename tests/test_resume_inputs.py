"""--resume notices what changed since the run started (issue 28, class 2): an edited data file or
model file is refused in one line naming it, flags given beside --resume that differ from the saved
run are refused, a run started with a relative --data_dir resumes from another directory, and
--data_dir relocates data whose content is the same."""
import json
import shutil
from pathlib import Path

import pytest

import run_multitask
from test_resume import FIXTURE_DATA, argv, assert_same_run, final_state
from training.harness.resume import list_checkpoints
from training.harness.run_folder import resumed_config


def stop_midway(run_dir: Path) -> None:
    """Make a finished run look stopped in its first epoch: later checkpoints and outputs removed."""
    checkpoints = list_checkpoints(run_dir)
    for later in checkpoints[1:]:
        shutil.rmtree(later)
    for output in run_dir.glob("*-output.csv"):
        output.unlink()
    metrics = json.loads((run_dir / "metrics.json").read_text())
    metrics["status"] = "interrupted"
    (run_dir / "metrics.json").write_text(json.dumps(metrics))


@pytest.fixture
def copies(tmp_path, tiny_model_dir):
    """A copy of the fixture data and of the model (to edit), and a finished run on them."""
    data, model = tmp_path / "data", tmp_path / "model"
    shutil.copytree(FIXTURE_DATA, data)
    shutil.copytree(tiny_model_dir, model)
    flags = [*argv(model, tmp_path / "runs", "clean", "--epochs", "2"), "--data_dir", str(data)]
    assert run_multitask.main(flags) == 0
    stopped = tmp_path / "runs" / "stopped"
    shutil.copytree(tmp_path / "runs" / "clean", stopped)
    stop_midway(stopped)
    return data, model, tmp_path / "runs" / "clean", stopped


def refused(argv_, capsys, run_dir: Path) -> str:
    before = {path.name: path.read_bytes() for path in run_dir.iterdir() if path.is_file()}
    assert run_multitask.main(argv_) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "\n" not in err
    assert {path.name: path.read_bytes() for path in run_dir.iterdir() if path.is_file()} == before
    return err


@pytest.mark.slow
def test_the_run_records_size_and_hash_of_what_it_read(copies):
    data, model, clean, _ = copies
    inputs = json.loads((clean / "metrics.json").read_text())["inputs"]
    assert {"ids-sst-train.csv", "ids-sst-dev.csv", "model/config.json", "model/vocab.txt", "model/model.safetensors"} \
        <= set(inputs)
    assert inputs["ids-sst-train.csv"]["path"] == str((data / "ids-sst-train.csv").resolve())
    assert inputs["ids-sst-train.csv"]["size"] == (data / "ids-sst-train.csv").stat().st_size
    assert len(inputs["model/vocab.txt"]["sha256"]) == 64
    config = json.loads((clean / "metrics.json").read_text())["config"]
    assert config["data"]["data_dir"] == str(data.resolve()) and config["model"]["model"] == str(model.resolve())


@pytest.mark.slow
def test_an_edited_training_file_is_refused_naming_it(copies, capsys):
    data, _, _, stopped = copies
    train = data / "ids-sst-train.csv"
    lines = train.read_text().splitlines(keepends=True)
    train.write_text("".join(lines[:-1]))   # one row fewer
    err = refused(["--resume", str(stopped), "--quiet"], capsys, stopped)
    assert str(train) in err and "changed since the run started" in err and "bytes" in err


@pytest.mark.slow
def test_same_size_other_content_is_refused_too(copies, capsys):
    data, model, _, stopped = copies
    vocab = model / "vocab.txt"
    text = vocab.read_text()
    vocab.write_text(text.replace("the", "teh", 1))
    err = refused(["--resume", str(stopped), "--quiet"], capsys, stopped)
    assert str(vocab) in err and "same size, other content" in err


@pytest.mark.slow
def test_flags_that_differ_from_the_saved_run_are_refused(copies, capsys):
    _, _, _, stopped = copies
    err = refused(["--resume", str(stopped), "--epochs", "10", "--lr", "0.5", "--quiet"], capsys, stopped)
    assert "--epochs 10 (saved: 2)" in err and "--lr 0.5 (saved: 0.0001)" in err and "start a new run" in err


@pytest.mark.slow
def test_flags_given_at_their_defaults_that_differ_from_the_saved_run_are_refused_too(copies, capsys):
    """`--epochs 3 --batch_size 32` are the defaults, the run saved 2 and 2: they were ignored without a word (the
    run resumed with its own), as every flag equal to its default was, however the run was saved."""
    _, _, _, stopped = copies
    err = refused(["--resume", str(stopped), "--epochs", "3", "--batch_size", "32", "--no_smart", "--quiet"], capsys,
                  stopped)
    assert "--epochs 3 (saved: 2)" in err and "--batch_size 32 (saved: 2)" in err and "smart" not in err


def test_resume_compares_the_flags_given_not_only_those_off_their_defaults():
    """``resumed_config`` with ``given`` (what ``run_multitask.main`` passes): a flag given at its default that the
    saved run has otherwise is refused; without ``given`` (the Python API) only flags off their defaults are seen."""
    saved = run_multitask.parse_config(["--batch_size", "4", "--smart"]).to_dict()
    config, _, given = run_multitask.parse_command(["--resume", "x", "--batch_size", "32", "--no_smart"])
    assert given >= {"batch_size", "smart"}
    with pytest.raises(ValueError, match=r"--batch_size 32 \(saved: 4\), --smart False \(saved: True\)"):
        resumed_config(config, saved, Path("state.json"), given)
    assert resumed_config(config, saved, Path("state.json")).data.batch_size == 4


@pytest.mark.slow
def test_moved_data_resumes_with_data_dir_and_ends_as_the_uninterrupted_run(copies, tmp_path, monkeypatch):
    data, _, clean, stopped = copies
    moved = tmp_path / "elsewhere" / "data"
    moved.parent.mkdir()
    data.rename(moved)
    monkeypatch.chdir(tmp_path / "elsewhere")
    assert run_multitask.main(["--resume", str(stopped), "--data_dir", "data", "--quiet"]) == 0
    assert_same_run(final_state(stopped), final_state(clean))


@pytest.mark.slow
def test_a_relative_data_dir_resumes_from_another_directory(tmp_path, tiny_model_dir, monkeypatch):
    shutil.copytree(FIXTURE_DATA, tmp_path / "data")
    monkeypatch.chdir(tmp_path)
    flags = [*argv(tiny_model_dir, tmp_path / "runs", "relative", "--epochs", "1"), "--data_dir", "data"]
    assert run_multitask.main(flags) == 0
    stop_midway(tmp_path / "runs" / "relative")
    (tmp_path / "other").mkdir()
    monkeypatch.chdir(tmp_path / "other")
    assert run_multitask.main(["--resume", str(tmp_path / "runs" / "relative"), "--quiet"]) == 0
