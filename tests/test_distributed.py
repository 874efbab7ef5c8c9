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

from training.data.batching import examples_in, examples_in_whole_batch, make_loader, weighted_by_share
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


def test_an_uneven_last_batch_is_shared_so_that_the_weighted_mean_is_the_batch_s(tiny_model_dir):
    """17 examples in batches of 8 over 2 processes: the last batch (1 example) leaves process 1 an empty slice, which
    crashed the run ("cannot collate an empty batch"); now it is a stand-in of share 0. Each slice's share makes the
    processes' averaged loss the whole batch's mean (DDP averages gradients over the processes)."""
    tokenizer = BertTokenizer(tiny_model_dir / "vocab.txt")
    examples = [Example(id=str(i), texts=(f"sentence {i}",), label=i % 5, line=i + 2) for i in range(17)]
    loss = {str(i): float(i * i % 7) for i in range(17)}   # any per-example loss
    single = [batch["ids"] for batch in make_loader(examples, tokenizer, 16, 8, True, seed=3)]
    shards = [list(make_loader(examples, tokenizer, 16, 8, True, seed=3, shard=(rank, 2))) for rank in (0, 1)]
    assert [len(ids) for ids in single] == [8, 8, 1]
    for whole, *parts in zip(single, *shards):
        trained = [i for part in parts if part["share"] for i in part["ids"]]
        assert sorted(trained) == sorted(whole)
        averaged = sum(part["share"] * sum(loss[i] for i in part["ids"]) / len(part["ids"]) for part in parts) / 2
        assert averaged == pytest.approx(sum(loss[i] for i in whole) / len(whole), rel=1e-12)
    last = [parts[-1] for parts in shards]
    assert [part["share"] for part in last] == [2.0, 0.0] and last[1]["ids"] == last[0]["ids"]   # the stand-in
    assert [examples_in(part) for part in last] == [1, 0]
    # what every process decides on alike: the global batch's size (a contrastive stage leaves out a batch of one)
    assert [[examples_in_whole_batch(part) for part in parts] for parts in shards] == [[8, 8, 1]] * 2
    assert [weighted_by_share(torch.tensor(3.0), part).item() for part in last] == [6.0, 0.0]


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


@pytest.mark.slow
def test_two_processes_on_17_rows_in_batches_of_8_match_one_and_log_the_whole_batch(tiny_model_dir, tmp_path):
    """Issue 86: the last batch of 1 crashed the 2-process run at the end of its first epoch; and an uneven last
    batch gave each process's mean equal weight, 2e-5 off one process. Now the weights match one process's within
    1e-6 after every step, and metrics.json's losses and examples are the whole batch's, not process 0's slice."""
    data = tmp_path / "data"
    data.mkdir()
    lines = (FIXTURE_DATA / "ids-sst-train.csv").read_text(encoding="utf-8").splitlines()
    (data / "ids-sst-train.csv").write_text("\n".join(lines[:18]) + "\n", encoding="utf-8")   # header + 17 rows
    (data / "ids-sst-dev.csv").write_text((FIXTURE_DATA / "ids-sst-dev.csv").read_text(encoding="utf-8"))
    flags = ["--data_dir", str(data), "--model", str(tiny_model_dir), "--tasks", "sst", "--batch_size", "8",
             "--max_length", "24", "--epochs", "2", "--hidden_dropout_prob", "0", "--attention_probs_dropout_prob",
             "0", "--save_every", "1", "--keep_checkpoints", "100", "--quiet", "--keep_training_state",
             "--no_sparse_embeddings", "--no_test_predictions", "--out_dir", str(tmp_path)]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TQDM_DISABLE": "1"}
    single = subprocess.run([sys.executable, str(ROOT / "run_multitask.py"), *flags, "--run_name", "single"],
                            env=env, capture_output=True, text=True, timeout=300)
    assert single.returncode == 0, single.stderr
    double = subprocess.run([sys.executable, "-m", "training.tools.launch", "--nproc_per_node=2",
                             f"--master_port={free_port()}", str(ROOT / "run_multitask.py"), *flags,
                             "--run_name", "double"], env=env, capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert double.returncode == 0, double.stderr[-3000:]
    steps = list(zip(list_checkpoints(tmp_path / "single"), list_checkpoints(tmp_path / "double")))
    assert len(steps) == 6 and all(a.name == b.name for a, b in steps)   # 3 steps an epoch: 8, 8 and 1 examples
    for a_dir, b_dir in steps:
        a, b = load_file(str(a_dir / "model.safetensors")), load_file(str(b_dir / "model.safetensors"))
        for name in a:
            torch.testing.assert_close(b[name], a[name], rtol=0, atol=1e-6, msg=f"{b_dir.name}: {name}")
    one, two = (json.loads((tmp_path / run / "metrics.json").read_text()) for run in ("single", "double"))
    assert [e["train_examples"] for e in two["epochs"]] == [e["train_examples"] for e in one["epochs"]] == [17, 17]
    assert two["train_examples"] == one["train_examples"] == 34
    for a, b in zip(one["epochs"], two["epochs"]):
        assert b["train_loss"]["sst"] == pytest.approx(a["train_loss"]["sst"], abs=1e-5)


@pytest.mark.slow
def test_a_contrastive_stage_s_last_global_batch_of_3_is_trained_by_both_processes(tiny_model_dir, tmp_path):
    """7 sentences in --ucl batches of 4 on 2 processes: the last global batch of 3 leaves slices of 2 and 1. The
    stage left out a batch of one by its slice, so process 1 skipped a step that process 0 took, and the run waited
    on DDP's all-reduce for ever; now both decide by the global batch (3: kept), and the run ends."""
    sentences = tmp_path / "sentences.txt"
    sentences.write_text("".join(f"a sentence about the number {i}\n" for i in range(7)), encoding="utf-8")
    flags = ["--data_dir", str(FIXTURE_DATA), "--model", str(tiny_model_dir), "--tasks", "sst", "--batch_size", "4",
             "--max_length", "24", "--epochs", "1", "--max_steps_per_epoch", "1", "--ucl", "--ucl_data",
             str(sentences), "--ucl_batch_size", "4", "--quiet", "--no_sparse_embeddings", "--no_test_predictions",
             "--out_dir", str(tmp_path), "--run_name", "r"]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TQDM_DISABLE": "1"}
    live = subprocess.Popen([sys.executable, "-m", "training.tools.launch", "--nproc_per_node=2",
                             f"--master_port={free_port()}", str(ROOT / "run_multitask.py"), *flags], env=env,
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = live.communicate(timeout=240)
    except subprocess.TimeoutExpired:
        os.killpg(live.pid, signal.SIGKILL)
        live.communicate()
        pytest.fail("the 2-process run did not end: its processes took different steps")
    assert live.returncode == 0, err[-3000:]
    metrics = json.loads((tmp_path / "r" / "metrics.json").read_text())
    assert metrics["stages"]["ucl"]["batches"] == 2 and metrics["status"] == "finished"   # 4, then the 3 left


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


def process_of_rank(ancestor: int, rank: int) -> int | None:
    """The pid of the run's process ``rank`` among the descendants of ``ancestor`` (its environment says RANK)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            pid, ppid = int(stat.parent.name), int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(pid)
    todo = list(children.get(ancestor, []))
    while todo:
        pid = todo.pop()
        try:
            environment = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if f"RANK={rank}".encode() in environment and b"MINBERT_LAUNCHED=1" in environment:
            return pid
        todo += children.get(pid, [])
    return None


@pytest.mark.slow
def test_a_killed_worker_is_the_only_line_and_metrics_json_names_it(tiny_model_dir, tmp_path):
    """Issue 86: process 1 SIGKILLed mid-run gave process 0's 33-line gloo traceback before the launcher's line,
    and metrics.json's error was gloo's "Connection reset by peer", not the worker's death."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TQDM_DISABLE": "1"}
    live = subprocess.Popen([sys.executable, "-m", "training.tools.launch", "--nproc_per_node=2",
                             f"--master_port={free_port()}", str(ROOT / "run_multitask.py"), "--data_dir",
                             str(FIXTURE_DATA), "--model", str(tiny_model_dir), "--max_length", "24", "--quiet",
                             "--batch_size", "4", "--epochs", "50", "--out_dir", str(tmp_path), "--run_name", "r"],
                            env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 120
    while time.time() < deadline and not list_checkpoints(tmp_path / "r"):
        time.sleep(0.2)
    worker = process_of_rank(live.pid, 1)
    assert worker is not None
    os.kill(worker, signal.SIGKILL)
    out, err = live.communicate(timeout=120)
    lines = err.strip().splitlines()
    assert live.returncode == 128 + 9 and len(lines) == 1, err[-3000:]
    assert lines[0].startswith("error (process 1): Signal 9 (SIGKILL) received by PID"), err
    metrics = json.loads((tmp_path / "r" / "metrics.json").read_text())
    assert metrics["error"].startswith("process 1: Signal 9 (SIGKILL)") and metrics["status"] != "finished"
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
