"""Data-parallel training: two CPU processes under torchrun (gloo) follow a single-process run."""
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from training.data.batching import make_loader
from training.data.readers import Example
from minbert import BertTokenizer
from run_multitask import parse_config
from training.distributed import Distributed, check_batch_size
from training.resume import list_checkpoints

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
                                        "--pre_qqp_steps", "2"]], ids=["round_robin", "joint_smart_pre_qqp"])
def test_two_processes_match_one(tiny_model_dir, tmp_path, extra):
    """Same global batch and seed, dropout off (each process draws its own masks): after every
    optimizer step the parameters of a 2-process run equal the single-process run's up to float
    rounding, and only process 0 wrote files."""
    flags = ["--data_dir", str(FIXTURE_DATA), "--model", str(tiny_model_dir), "--batch_size", "4",
             "--max_length", "24", "--epochs", "2", "--max_steps_per_epoch", "3", "--hidden_dropout_prob", "0",
             "--attention_probs_dropout_prob", "0", "--save_every", "1", "--keep_checkpoints", "100", "--quiet",
             "--keep_training_state", "--no_sparse_embeddings",  # sparse rows: one process only
             "--out_dir", str(tmp_path), *extra]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TQDM_DISABLE": "1"}
    single = subprocess.run([sys.executable, str(ROOT / "run_multitask.py"), *flags, "--run_name", "single"],
                            env=env, capture_output=True, text=True, timeout=300)
    assert single.returncode == 0, single.stderr
    double = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2",
                             f"--master_port={free_port()}", str(ROOT / "run_multitask.py"), *flags,
                             "--run_name", "double"], env=env, capture_output=True, text=True, timeout=300)
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
