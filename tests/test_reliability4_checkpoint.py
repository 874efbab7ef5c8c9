"""Reliability round 4, items 8 and 13: a damaged checkpoint is one line naming the file that is damaged
(a truncated heads file, a corrupt run_config.json, a missing heads file), through ``load_run`` and
through ``--model RUN``; a config.json whose shapes disagree with the weights is one line, not a
RuntimeError from deep inside torch."""
import json
import shutil
from pathlib import Path

import pytest

import run_multitask
from minbert import WeightsError
from training.harness.runs import load_run

FIXTURE_DATA = Path(__file__).parent / "fixtures" / "data"


@pytest.fixture(scope="module")
def checkpoint(tiny_model_dir, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("runs")
    assert run_multitask.main(["--data_dir", str(FIXTURE_DATA), "--model", str(tiny_model_dir), "--epochs", "1",
                               "--max_steps_per_epoch", "2", "--batch_size", "4", "--max_length", "24",
                               "--out_dir", str(out), "--run_name", "tiny", "--quiet"]) == 0
    return out / "tiny" / "checkpoint"


def damaged(checkpoint: Path, tmp_path: Path, damage) -> Path:
    copy = tmp_path / "checkpoint"
    shutil.copytree(checkpoint, copy)
    damage(copy)
    return copy


def truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def one_line(path: Path) -> str:
    with pytest.raises(WeightsError) as err:
        load_run(path)
    assert "\n" not in str(err.value)
    return str(err.value)


@pytest.mark.slow
def test_a_truncated_heads_file_is_named(checkpoint, tmp_path):
    copy = damaged(checkpoint, tmp_path, lambda c: truncate(c / "heads.safetensors"))
    assert one_line(copy).startswith(f"cannot read checkpoint file {copy / 'heads.safetensors'}")


def test_a_corrupt_run_config_is_named(checkpoint, tmp_path):
    copy = damaged(checkpoint, tmp_path, lambda c: (c / "run_config.json").write_text("{not json"))
    assert one_line(copy).startswith(f"cannot read checkpoint file {copy / 'run_config.json'}")


def test_an_unusable_run_config_is_named(checkpoint, tmp_path):
    def damage(c):
        (c / "run_config.json").write_text(json.dumps({"train": {"tasks": "nosuchtask"}}))
    copy = damaged(checkpoint, tmp_path, damage)
    assert one_line(copy).startswith(f"{copy / 'run_config.json'}: unusable run configuration")


def test_a_missing_heads_file_is_named_not_read_as_a_run_without_heads(checkpoint, tmp_path):
    copy = damaged(checkpoint, tmp_path, lambda c: (c / "heads.safetensors").unlink())
    assert one_line(copy).startswith(f"{copy / 'heads.safetensors'}: missing")


def test_model_run_with_a_truncated_encoder_is_one_line(checkpoint, tmp_path, capsys):
    copy = damaged(checkpoint, tmp_path, lambda c: truncate(c / "model.safetensors"))
    argv = ["--data_dir", str(FIXTURE_DATA), "--model", str(copy), "--epochs", "1", "--max_steps_per_epoch", "1",
            "--batch_size", "4", "--out_dir", str(tmp_path / "out"), "--run_name", "next", "--quiet"]
    assert run_multitask.main(argv) == 1
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and f"cannot read checkpoint file {copy / 'model.safetensors'}" in err


def test_model_run_whose_config_disagrees_with_its_weights_is_one_line(checkpoint, tmp_path, capsys):
    def damage(c):
        config = json.loads((c / "config.json").read_text())
        config["intermediate_size"] = config["intermediate_size"] * 2
        (c / "config.json").write_text(json.dumps(config))
    copy = damaged(checkpoint, tmp_path, damage)
    argv = ["--data_dir", str(FIXTURE_DATA), "--model", str(copy), "--epochs", "1", "--max_steps_per_epoch", "1",
            "--batch_size", "4", "--out_dir", str(tmp_path / "out"), "--run_name", "next", "--quiet"]
    assert run_multitask.main(argv) == 1
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "the weights do not fit the model of" in err and str(copy / "config.json") in err
    assert not (tmp_path / "out" / "next").exists() or json.loads(
        (tmp_path / "out" / "next" / "metrics.json").read_text())["status"] == "failed"
