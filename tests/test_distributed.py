"""Data-parallel training: two CPU processes under torchrun (gloo) follow a single-process run."""
import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from training.data.batching import make_loader
from training.data.readers import Example
from minbert import BertTokenizer
from run_multitask import parse_config
from training.tools.command import usage_errors_once
from training.harness.distributed import Distributed, check_batch_size
from training.harness.resume import list_checkpoints

ROOT = Path(__file__).resolve().parents[1]
FIXTURE_DATA = Path(__file__).parent / "fixtures" / "data"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_shards_of_a_batch_are_the_single_process_batch(tiny_model_dir):
    tokenizer = BertTokenizer(tiny_model_dir / "vocab.txt")
    examples = [Example(id=str(i), texts=(f"sentence {'word ' * (i % 7)}",), label=i % 5, line=i + 2)
                for i in range(23)]
    for bucket in (False, True):
        single = [batch["ids"] for batch in make_loader(examples, tokenizer, 16, 4, True, seed=3, bucket=bucket)]
        shards = [[batch["ids"] for batch in make_loader(examples, tokenizer, 16, 4, True, seed=3, bucket=bucket,
                                                         shard=(rank, 2))] for rank in (0, 1)]
        assert len(shards[0]) == len(shards[1]) == len(single)
        for whole, first, second in zip(single, *shards):
            assert sorted(first + second) == sorted(whole) and not set(first) & set(second)
        one = [batch["ids"] for batch in make_loader(examples, tokenizer, 16, 4, True, seed=3, bucket=bucket,
                                                     shard=(0, 1))]
        assert one == single


def test_global_batch_must_split_evenly():
    check_batch_size(32, Distributed(0, 2))
    with pytest.raises(ValueError, match="--batch_size 5 is the global batch"):
        check_batch_size(5, Distributed(0, 2))


def test_only_the_batch_sizes_in_use_must_split_evenly():
    """--batch_size is not a training batch when --task_batch_sizes is given (it is then the
    evaluation batch), so an odd --batch_size must not stop a 2-process run."""
    place = Distributed(0, 2)
    config = parse_config(["--batch_size", "5", "--task_batch_sizes", "4,8,2"])
    for flag, size in config.training_batch_sizes():
        check_batch_size(size, place, flag)
    assert ("--task_batch_sizes (qqp)", 8) in config.training_batch_sizes()
    odd = parse_config(["--task_batch_sizes", "4,7,2"]).training_batch_sizes()
    with pytest.raises(ValueError, match=r"--task_batch_sizes \(qqp\) 7 is the global batch"):
        for flag, size in odd:
            check_batch_size(size, place, flag)
    assert ("--batch_size", 5) in parse_config(["--batch_size", "5"]).training_batch_sizes()


@pytest.mark.slow
@pytest.mark.parametrize("extra", [[], ["--joint_loss", "--loss_weighting", "learned", "--smart", "--pre_qqp",
                                        "--pre_qqp_steps", "2"],
                                   ["--private_layers", "1", "--task_finetune", "--task_finetune_steps", "2"]],
                         ids=["round_robin", "joint_smart_pre_qqp", "task_finetune"])
def test_two_processes_match_one(tiny_model_dir, tmp_path, extra):
    """Same global batch and seed, dropout off (each process draws its own masks): after every
    optimizer step the parameters of a 2-process run equal the single-process run's up to float
    rounding, and only process 0 wrote files."""
    flags = ["--data_dir", str(FIXTURE_DATA), "--model", str(tiny_model_dir), "--batch_size", "4",
             "--max_length", "24", "--epochs", "2", "--max_steps_per_epoch", "3", "--hidden_dropout_prob", "0",
             "--attention_probs_dropout_prob", "0", "--save_every", "1", "--keep_checkpoints", "100", "--quiet",
             "--keep_training_state", "--no_sparse_embeddings",  # sparse rows: one process only
             "--task_batch_sizes", "none",   # global batches of 4, split evenly (issue 86: uneven shares)
             "--out_dir", str(tmp_path), *extra]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TQDM_DISABLE": "1"}
    single = subprocess.run([sys.executable, str(ROOT / "run_multitask.py"), *flags, "--run_name", "single"],
                            env=env, capture_output=True, text=True, timeout=300)
    assert single.returncode == 0, single.stderr
    # torchrun, and the project's launcher on torchrun's flags (training/tools/launch.py): the same processes
    launcher = "training.tools.launch" if extra else "torch.distributed.run"
    double = subprocess.run([sys.executable, "-m", launcher, "--nproc_per_node=2",
                             f"--master_port={free_port()}", str(ROOT / "run_multitask.py"), *flags,
                             "--run_name", "double"], env=env, capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert double.returncode == 0, double.stderr[-3000:]
    assert double.stdout.count("dev: SST acc") == 1  # process 1 is silent

    steps_single = list_checkpoints(tmp_path / "single")
    steps_double = list_checkpoints(tmp_path / "double")
    assert [p.name for p in steps_single] == [p.name for p in steps_double] and len(steps_single) >= 6
    for a_dir, b_dir in zip(steps_single, steps_double):
        a, b = load_file(str(a_dir / "model.safetensors")), load_file(str(b_dir / "model.safetensors"))
        for name in a:
            torch.testing.assert_close(b[name], a[name], rtol=1e-5, atol=1e-6, msg=f"{b_dir.name}: {name}")
    metrics = json.loads((tmp_path / "double" / "metrics.json").read_text())
    assert metrics["status"] == "finished" and metrics["processes"] == 2
    reference = json.loads((tmp_path / "single" / "metrics.json").read_text())
    for task, value in reference["dev"].items():
        assert metrics["dev"][task] == pytest.approx(value, abs=1e-3)


# ---- how a multi-process run ends: training/tools/launch.py, training/tools/command.py ------------------------------------

def failure(tmp_path, rank: int, exitcode: int, line: str | None = None, code: int = 1):
    from torch.distributed.elastic.multiprocessing.errors import ProcessFailure
    error_file = tmp_path / f"{rank}" / "error.json"
    if line is not None:
        error_file.parent.mkdir(parents=True)
        error_file.write_text(json.dumps({"message": line, "timestamp": 100 + rank, "exit_code": code}))
    return ProcessFailure(local_rank=rank, pid=1000 + rank, exitcode=exitcode, error_file=str(error_file))


def test_the_launcher_says_one_line_and_exits_with_the_code_of_the_process_that_said_why(tmp_path, capsys):
    from training.tools.launch import report_failure
    line = "error: --batch_size 4 is the global batch: it must be divisible by the 3 processes"
    # process 0 printed its line and was then ended by torchrun's SIGTERM: its own code, nothing more printed
    everyone = {r: failure(tmp_path / "a", r, -15 if r == 0 else 1, line) for r in range(3)}
    assert report_failure(everyone) == 1 and capsys.readouterr().err == ""
    # process 1 alone said why (process 0 was ended by the signal): its line, named
    alone = {0: failure(tmp_path / "b", 0, -15), 1: failure(tmp_path / "b", 1, 1, "error: disk full", 1)}
    assert report_failure(alone) == 1
    assert capsys.readouterr().err == "error (process 1): disk full\n"
    # nobody said why: the first to fail, by its signal
    killed = {1: failure(tmp_path / "c", 1, -9)}
    assert report_failure(killed) == 128 + 9 and "error (process 1): Signal 9 (SIGKILL)" in capsys.readouterr().err
    # process 0 killed before it said anything: its signal is named too
    assert report_failure({0: failure(tmp_path / "d", 0, -9)}) == 128 + 9
    assert "error (process 0): Signal 9 (SIGKILL)" in capsys.readouterr().err


@pytest.mark.slow
def test_the_launcher_ends_a_bad_run_in_one_line_and_sigterm_with_143(tiny_model_dir, tmp_path):
    """Issue 61: torchrun printed an indivisible batch's error once per process, then its ChildFailedError
    report and traceback; SIGTERM to torchrun exited 1 with a traceback."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TQDM_DISABLE": "1"}
    flags = ["--data_dir", str(FIXTURE_DATA), "--model", str(tiny_model_dir), "--max_length", "24", "--quiet",
             "--out_dir", str(tmp_path)]

    def launch(n: int, *more: str):
        return [sys.executable, "-m", "training.tools.launch", f"--nproc_per_node={n}", f"--master_port={free_port()}",
                str(ROOT / "run_multitask.py"), *flags, *more]
    bad = subprocess.run(launch(3, "--batch_size", "4"), env=env, capture_output=True, text=True, timeout=300,
                         cwd=ROOT)
    assert bad.returncode == 1 and bad.stderr.strip().splitlines() == [
        "error: --batch_size 4 is the global batch: it must be divisible by the 3 processes"], bad.stderr
    live = subprocess.Popen(launch(2, "--batch_size", "4", "--epochs", "50", "--run_name", "r"), env=env, cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 120
    while time.time() < deadline and not list_checkpoints(tmp_path / "r"):
        time.sleep(0.2)
    live.send_signal(signal.SIGTERM)
    out, err = live.communicate(timeout=120)
    assert live.returncode == 143, err
    assert err.strip().splitlines()[-1] == "terminated (SIGTERM)" and "Traceback" not in err, err
    assert json.loads((tmp_path / "r" / "metrics.json").read_text())["status"] == "interrupted"
    assert not (tmp_path / "r" / ".lock").exists()


@pytest.mark.parametrize("rank, writable, said", [("0", True, "usage"), ("1", True, ""), ("1", False, "error")])
def test_a_usage_error_is_said_once_and_never_lost(tmp_path, monkeypatch, capsys, rank, writable, said):
    """Process 0 prints argparse's usage message; another records its last line in its error file, or, when
    that file cannot be written, prints the line itself (it used to print nothing: the line was lost)."""
    error_file = tmp_path / ("error.json" if writable else "missing-folder/error.json")
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", rank)
    monkeypatch.setenv("TORCHELASTIC_ERROR_FILE", str(error_file))
    with pytest.raises(SystemExit):
        with usage_errors_once():
            argparse.ArgumentParser(prog="p").parse_args(["--bad"])
    err = capsys.readouterr().err
    assert (said == "usage") == err.startswith("usage: p") and (said == "") == (err == "")
    assert ("error: unrecognized arguments: --bad" in err) == bool(said)
    if writable:
        assert json.loads(error_file.read_text())["exit_code"] == 2
