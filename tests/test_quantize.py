"""scripts/quantize.py: int8 dynamic quantization of a multi-task checkpoint replaces the Linear
layers, keeps the outputs close to fp32, shrinks the weights on disk, and reports all of it."""
import importlib.util
import json
import shutil
from pathlib import Path

import pytest
import torch
from torch import nn

from training.data.batching import make_loader
from training.data.readers import read_examples
from minbert import BertConfig, BertModel, default_model_dir
from training.harness.checkpoint import save_checkpoint
from training.configuration.sections import DataConfig, ModelConfig
from training.harness.run_config import RunConfig
from training.harness.runs import build_model, load_run
from training.learning.task_schema import BUILTIN_TASKS, run_tasks

ROOT = Path(__file__).resolve().parents[1]
FIXTURE_DATA = ROOT / "tests" / "fixtures" / "data"


def _quantize_module():
    spec = importlib.util.spec_from_file_location("quantize", ROOT / "scripts" / "quantize.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


quantize = _quantize_module()


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory) -> Path:
    """A 2-layer, 64-wide random BERT (the conftest's 16-wide one has too few Linear weights beside
    its 30k-row embedding for int8 to visibly shrink the file) with heads, saved as a run's checkpoint."""
    root = tmp_path_factory.mktemp("quantize")
    model_dir = root / "bert"
    torch.manual_seed(0)
    BertModel(BertConfig(vocab_size=30522, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                         intermediate_size=256, max_position_embeddings=64)).save_pretrained(model_dir)
    shutil.copy(default_model_dir() / "vocab.txt", model_dir / "vocab.txt")
    config = RunConfig.defaults(model=ModelConfig(model=str(model_dir)), data=DataConfig(max_length=32))
    model = build_model(config.model, run_tasks(config), model_dir)
    directory = root / "run" / "checkpoint"
    save_checkpoint(directory, model.state_dict(), model.bert.config, config.to_dict())
    return directory


def _batches(tokenizer, n=8):
    """The first ``n`` fixture dev examples of each task of the run, as (task, inputs) batches."""
    batches = []
    for name in ("sst", "qqp", "sts"):
        task = BUILTIN_TASKS[name]
        examples, _ = read_examples(FIXTURE_DATA / task.files["dev"], task.layout())
        batches += [(name, batch["inputs"]) for batch in make_loader(examples[:n], tokenizer, 32, n, shuffle=False)]
    return batches


def _close(int8_out: torch.Tensor, fp32_out: torch.Tensor) -> bool:
    """Relative error under 10%: loose, since weights and activations are rounded to 8 bits."""
    return bool((int8_out - fp32_out).norm() <= 0.1 * fp32_out.norm() + 1e-6)


@pytest.mark.parametrize("per_channel", [False, True])
def test_linear_layers_are_replaced_and_outputs_stay_close(checkpoint, per_channel):
    run = load_run(checkpoint)
    fp32, tokenizer = run.model, run.tokenizer
    n_linear = quantize.count_linear(fp32)
    int8 = quantize.quantize(fp32, per_channel)
    dynamic = [m for m in int8.modules() if isinstance(m, torch.ao.nn.quantized.dynamic.Linear)]
    # per layer Q, K, V, out, FF in, FF out; pooler; SST and QQP heads; the SST and QQP towers' copies of both layers
    assert n_linear == 2 * 6 + 1 + 2 + 2 * 2 * 6
    assert not any(type(m) is nn.Linear for m in int8.modules())
    assert len(dynamic) == n_linear
    expected = torch.per_channel_affine if per_channel else torch.per_tensor_affine
    assert all(m.weight().dtype == torch.qint8 and m.weight().qscheme() == expected for m in dynamic)
    assert quantize.count_linear(fp32) == n_linear  # the fp32 model is left as it was
    with torch.no_grad():
        for name, inputs in _batches(tokenizer):
            assert _close(int8(name, inputs), fp32(name, inputs)), name
            vector = fp32.embed(inputs[0])
            assert _close(int8.embed(inputs[0]), vector) and not torch.equal(int8.embed(inputs[0]), vector)


@pytest.mark.filterwarnings("ignore:TypedStorage is deprecated")  # torch.load of int8 packed weights
def test_report_size_and_saved_weights(checkpoint, tmp_path, capsys):
    out = tmp_path / "quant"
    argv = ["--checkpoint", str(checkpoint.parent), "--data_dir", str(FIXTURE_DATA), "--out", str(out),
            "--max_dev", "6", "--batch_size", "4", "--threads", "1", "--bench_examples", "4", "--reps", "2"]
    threads = torch.get_num_threads()
    assert quantize.main(argv) == 0
    assert torch.get_num_threads() == threads  # --threads does not leak into the caller
    table = capsys.readouterr().out
    for label in ("size on disk (MB)", "inference (seq/s)", "inference (seq/CPU-s)", "dev SST accuracy", "dev STS Pearson", "dev overall"):
        assert label in table

    report = json.loads((out / "quantize-report.json").read_text())
    size, speed, dev = report["size"], report["speed"], report["dev"]
    assert size["fp32_bytes"] == (checkpoint / "model.safetensors").stat().st_size
    assert size["int8_bytes"] == (out / "model-int8.pt").stat().st_size
    assert size["int8_bytes"] < size["fp32_bytes"]
    assert speed["fp32_seq_per_s"] > 0 and speed["int8_seq_per_s"] > 0 and speed["threads"] == 1
    assert len(speed["seconds"]["fp32"]) == len(speed["seconds"]["int8"]) == len(speed["cpu_seconds"]["int8"]) == 2
    assert speed["ratio"] == pytest.approx(speed["int8_seq_per_s"] / speed["fp32_seq_per_s"])
    assert speed["cpu_ratio"] == pytest.approx(speed["int8_seq_per_cpu_s"] / speed["fp32_seq_per_cpu_s"])
    # 4 SST sentences + 4 QQP pairs + 4 STS pairs
    assert speed["sequences"] == 4 + 2 * 4 + 2 * 4
    assert dev["examples"] == {"sst": 6, "qqp": 6, "sts": 6}
    for model in ("fp32", "int8"):
        assert set(dev[model]) == {"sst", "qqp", "sts", "overall"}
        assert 0 <= dev[model]["sst"] <= 1 and 0 <= dev[model]["qqp"] <= 1 and -1 <= dev[model]["sts"] <= 1
    assert set(dev["agreement"]) == {"sst_same_prediction", "qqp_same_prediction", "sts_max_abs_diff"}
    assert report["quantization"]["linear_layers"] == 2 * 6 + 1 + 2 + 2 * 2 * 6

    # The saved state_dict is the quantized model: loaded into a fresh one, it gives the same outputs.
    run = load_run(checkpoint)
    int8 = quantize.quantize(run.model)
    fresh = quantize.quantize(load_run(checkpoint).model)
    fresh.load_state_dict(torch.load(out / "model-int8.pt", weights_only=True))
    with torch.no_grad():
        for name, inputs in _batches(run.tokenizer, n=4):
            assert torch.equal(fresh(name, inputs), int8(name, inputs))


def test_bad_checkpoints_are_one_line_errors(checkpoint, tmp_path, capsys):
    def error_of(path: Path) -> str:
        assert quantize.main(["--checkpoint", str(path), "--data_dir", str(FIXTURE_DATA),
                              "--out", str(tmp_path / "out")]) == 1
        err = capsys.readouterr().err.strip()
        assert err.startswith("error: ") and "\n" not in err
        return err

    assert "checkpoint folder not found" in error_of(tmp_path / "nowhere")
    (tmp_path / "empty").mkdir()
    assert "config.json not found" in error_of(tmp_path / "empty")

    corrupt = tmp_path / "corrupt"
    shutil.copytree(checkpoint, corrupt)
    data = (corrupt / "model.safetensors").read_bytes()
    (corrupt / "model.safetensors").write_bytes(data[: len(data) // 2])
    assert "cannot read checkpoint" in error_of(corrupt)

    no_run = tmp_path / "no_run"
    shutil.copytree(checkpoint, no_run)
    (no_run / "run_config.json").unlink()
    assert "not a run's checkpoint" in error_of(no_run)

    wrong = tmp_path / "wrong_heads"
    shutil.copytree(checkpoint, wrong)
    config = json.loads((wrong / "run_config.json").read_text())
    config["model"]["pooling"] = "last4_concat"  # 4x wider head inputs than the saved heads
    (wrong / "run_config.json").write_text(json.dumps(config))
    assert "do not fit" in error_of(wrong)
    assert not (tmp_path / "out").exists()  # nothing written when the checkpoint is unusable
