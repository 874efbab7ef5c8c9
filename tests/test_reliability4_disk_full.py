"""Reliability round 4, item 7: a full disk is one line naming the file, however the writer says it
(safetensors' Rust error, torch's zip writer, numpy, errno ENOSPC): ``atomic_path`` and the step
checkpoints map each to ``OSError(ENOSPC, ..., path)``; a run stops "failed" with that one line."""
import errno
import json
import os
from pathlib import Path

import pytest
from safetensors import SafetensorError

import run_multitask
import training.harness.checkpoint
import training.harness.resume
from minbert.atomic import atomic_path

FIXTURE_DATA = Path(__file__).parent / "fixtures" / "data"
NO_SPACE = os.strerror(errno.ENOSPC)   # "No space left on device", as the OS says it
SAYINGS = [
    SafetensorError('Error while serializing: IoError(Os { code: 28, kind: StorageFull, message: "No space left on '
                    'device" })'),
    RuntimeError("[enforce fail at inline_container.cc:778] . PytorchStreamWriter failed writing file data/3: file "
                 "write failed; unexpected pos 4096 vs 4040"),
    OSError("Not enough free space to write 30720000 bytes"),
    OSError(errno.ENOSPC, "No space left on device"),
]


@pytest.mark.parametrize("saying", SAYINGS, ids=["safetensors", "torch", "numpy", "errno"])
def test_every_way_of_saying_disk_full_is_one_error_naming_the_file(tmp_path, saying):
    target = tmp_path / "out.bin"
    with pytest.raises(OSError) as err:
        with atomic_path(target) as tmp:
            tmp.write_bytes(b"partial")
            raise saying
    assert err.value.errno == errno.ENOSPC and err.value.filename == str(target)
    assert f"{target}: {NO_SPACE}" in f"{err.value.filename}: {err.value.strerror}"
    assert list(tmp_path.iterdir()) == []   # neither the target nor a temporary file


def test_other_errors_pass_through(tmp_path):
    with pytest.raises(ValueError, match="boom"):
        with atomic_path(tmp_path / "out.bin"):
            raise ValueError("boom")


def run(tmp_path, tiny_model_dir, *flags):
    return run_multitask.main(["--data_dir", str(FIXTURE_DATA), "--model", str(tiny_model_dir), "--out_dir",
                               str(tmp_path), "--run_name", "run", "--epochs", "1", "--max_steps_per_epoch", "2",
                               "--batch_size", "4", "--max_length", "24", "--quiet", *flags])


def test_a_full_disk_under_checkpoint_is_one_line(tmp_path, tiny_model_dir, capsys, monkeypatch):
    def full(*args, **kwargs):
        raise SAYINGS[0]
    monkeypatch.setattr(training.harness.checkpoint, "save_file", full)
    assert run(tmp_path, tiny_model_dir) == 1
    err = capsys.readouterr().err
    assert err == f"error: {tmp_path / 'run' / 'checkpoint' / 'model.safetensors'}: {NO_SPACE}\n"
    assert json.loads((tmp_path / "run" / "metrics.json").read_text())["status"] == "failed"


def test_a_full_disk_under_a_step_checkpoint_is_one_line(tmp_path, tiny_model_dir, capsys, monkeypatch):
    def full(*args, **kwargs):
        raise SAYINGS[1]
    monkeypatch.setattr(training.harness.resume.torch, "save", full)
    assert run(tmp_path, tiny_model_dir, "--save_every", "1") == 1
    err = capsys.readouterr().err
    assert err == f"error: {tmp_path / 'run' / 'checkpoints' / 'step-00000001'}: {NO_SPACE}\n"
    assert not list((tmp_path / "run" / "checkpoints").glob(".tmp-*"))
