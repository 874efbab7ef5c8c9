"""scripts.sentence_finetune: ce and lcl each move the encoder, the written checkpoint is read by
scripts.probe / load_run, it trains bit-identically to its own loop written out, and bad flags are one-line errors (tiny random BERT, tiny CSVs);
scripts/lcl_study.sh lists its steps, and scripts/plot_table.py --csv writes the study's CSV."""
import csv
import importlib.util
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from minbert import BertModel
from scripts import probe
from scripts.sentence_finetune import main
from training import load_run
from training.harness.checkpoint import load_checkpoint

SST_ROWS = [  # (sentence, sentiment 0..4)
    ("a dull , lifeless mess .", 0), ("tedious and far too long .", 0), ("it never finds its footing .", 1),
    ("a few good scenes , mostly flat .", 1), ("neither good nor bad .", 2), ("it is a film about a town .", 2),
    ("charming enough , if slight .", 3), ("a warm and funny ride .", 3), ("a triumph , moving and wise .", 4),
    ("one of the best films of the year .", 4), ("boring from start to end .", 0), ("simply wonderful .", 4),
]
CFIMDB_ROWS = [("a wonderful film , i loved it .", 1), ("terrible acting , a boring plot .", 0),
               ("the best movie this year .", 1), ("awful and lazy , no sense at all .", 0),
               ("great cast and a clever script .", 1), ("a waste of two hours .", 0)]


def _write(path: Path, rows):
    """The CS224N layout: tab-separated, an unnamed index column, id, sentence, sentiment."""
    lines = ["\tid\tsentence\tsentiment"] + [f"{i}\tid{i:04d}\t {text}\t{label}" for i, (text, label) in enumerate(rows)]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


@pytest.fixture
def data_dir(tmp_path):
    directory = tmp_path / "data"
    directory.mkdir()
    for split in ("train", "dev"):
        _write(directory / f"ids-sst-{split}.csv", SST_ROWS)
        _write(directory / f"ids-cfimdb-{split}.csv", CFIMDB_ROWS)
    return directory


def _run(tiny_model_dir, data_dir, out, *flags):
    return main(["--model", str(tiny_model_dir), "--data_dir", str(data_dir), "--out", str(out),
                 "--batch_size", "6", "--max_length", "24", "--lr", "1e-3", *flags])


@pytest.mark.parametrize("loss, task", [("ce", "sst"), ("lcl", "sst"), ("lcl", "cfimdb")])
def test_finetune_moves_the_encoder_and_writes_a_loadable_checkpoint(tiny_model_dir, data_dir, tmp_path, loss, task):
    out = tmp_path / "run"
    assert _run(tiny_model_dir, data_dir, out, "--task", task, "--loss", loss, "--epochs", "2") == 0
    before = BertModel.from_pretrained(tiny_model_dir).state_dict()
    loaded = load_run(out / "checkpoint")
    bert, tokenizer = loaded.model.bert, loaded.tokenizer
    after = bert.state_dict()
    assert before.keys() == after.keys()
    unchanged = [k for k in before if torch.equal(before[k], after[k])]
    assert len(unchanged) < len(before) // 4, unchanged  # lcl with mean pooling leaves the NSP pooler alone
    assert tokenizer.vocab_size == bert.config.vocab_size and loaded.source == out / "checkpoint"

    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["status"] == "finished" and metrics["tool"]["loss"] == loss
    rows = len(SST_ROWS if task == "sst" else CFIMDB_ROWS)
    assert metrics["steps"] == 2 * math.ceil(rows / 6) and metrics["examples"] == 2 * rows
    assert metrics["loss_curve"][-1][0] == metrics["steps"] and metrics["seconds"] >= 0 and metrics["cpu_seconds"] >= 0
    run_config = json.loads((out / "checkpoint" / "run_config.json").read_text())
    bert_config = json.loads((out / "checkpoint" / "config.json").read_text())
    assert run_config["tool"]["name"] == "sentence_finetune" and bert_config["hidden_size"] == 16
    assert list(loaded.model.heads) == ([task] if loss == "ce" else []) and loaded.config.model.pooling == "mean"

    keys = load_checkpoint(out / "checkpoint")[0].keys()
    assert any(k.startswith("heads.") for k in keys) == (loss == "ce")

    # the probe reads the run folder (or its checkpoint/) as it reads a multi-task run's
    report = tmp_path / "probe.json"
    assert probe.main(["--checkpoint", str(out), "--task", task, "--data_dir", str(data_dir), "--out", str(report)]) == 0
    assert json.loads(report.read_text())["encoder"] == str(out / "checkpoint")


def test_same_seed_same_weights(tiny_model_dir, data_dir, tmp_path):
    for name in ("a", "b"):
        assert _run(tiny_model_dir, data_dir, tmp_path / name, "--task", "sst", "--loss", "ce", "--max_steps", "1") == 0
    a, b = (load_run(tmp_path / name).model.state_dict() for name in ("a", "b"))
    assert all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize("flags, message", [
    (["--task", "mnli"], "error: unknown --task 'mnli'; choose one of sst, cfimdb"),
    (["--task", "sst", "--loss", "mse"], "error: unknown --loss 'mse'; choose one of ce, lcl"),
    (["--task", "sst", "--max_steps", "0"], "error: --max_steps must be at least 1, got 0"),
    (["--task", "sst", "--epochs", "0"], "error: --epochs must be at least 1, got 0"),
    (["--task", "sst", "--cl_temp", "0"], "error: --cl_temp must be positive"),
    (["--task", "sst", "--lr", "-1"], "error: --lr must be positive"),
])
def test_bad_flags_are_one_line_errors(tiny_model_dir, data_dir, tmp_path, capsys, flags, message):
    assert _run(tiny_model_dir, data_dir, tmp_path / "run", *flags) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(message), err
    assert not (tmp_path / "run").exists()


def test_missing_file_and_used_folder_are_one_line_errors(tiny_model_dir, data_dir, tmp_path, capsys):
    (data_dir / "ids-cfimdb-train.csv").unlink()
    assert _run(tiny_model_dir, data_dir, tmp_path / "run", "--task", "cfimdb") == 1
    assert capsys.readouterr().err.strip().startswith("error: data file ids-cfimdb-train.csv not found")
    (tmp_path / "used").mkdir()
    (tmp_path / "used" / "x").write_text("")
    assert _run(tiny_model_dir, data_dir, tmp_path / "used", "--task", "sst") == 1
    assert "already holds files" in capsys.readouterr().err


def test_the_loop_trains_as_a_written_out_loop(tiny_model_dir, data_dir, tmp_path):
    """The tool's objective through training/learning/loop.py takes the same steps as the plain loop:
    zero_grad, backward, AdamW step on each bucketed batch."""
    from training.data.batching import make_loader
    from heads import MultitaskBert
    from minbert import AdamW, BertTokenizer, decay_groups
    from training.learning.losses import label_contrastive_loss
    from scripts.probe import read_split
    from training.learning.task_schema import BUILTIN_TASKS

    assert _run(tiny_model_dir, data_dir, tmp_path / "run", "--task", "sst", "--loss", "lcl", "--epochs", "2") == 0
    model = MultitaskBert(BertModel.from_pretrained(tiny_model_dir), {}, "mean").train()
    torch.manual_seed(11711)  # after building the model, as the tool seeds the dropout masks
    examples, _ = read_split(data_dir / "ids-sst-train.csv", BUILTIN_TASKS["sst"])
    loader = make_loader(examples, BertTokenizer(tiny_model_dir / "vocab.txt"), 24, 6, shuffle=True, seed=11711,
                         bucket=True)
    # BERT's groups: no weight decay on biases and LayerNorm weights
    optimizer = AdamW(decay_groups(model.bert.named_parameters(), 0.01), lr=1e-3, weight_decay=0.01)
    for _ in range(2):
        for batch in loader:
            loss = label_contrastive_loss(model.embed(batch["inputs"][0]), batch["labels"], 0.05)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
    trained = load_run(tmp_path / "run").model.state_dict()
    assert all(torch.equal(value, trained[key]) for key, value in model.state_dict().items())


def test_usage_errors_are_one_line(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["--task", "sst"])  # --out missing
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "the following arguments are required: --out" in err[0]
    with pytest.raises(SystemExit) as exit_info:
        main(["--task", "sst", "--out", "x", "--pooling", "not-a-mode"])
    err = capsys.readouterr().err.strip().splitlines()
    assert exit_info.value.code == 2 and len(err) == 1 and "invalid choice: 'not-a-mode'" in err[0]
    with pytest.raises(SystemExit) as exit_info:   # the one --temp was split into --head_temp and --cl_temp
        main(["--task", "sst", "--out", "x", "--temp", "0.1"])
    err = capsys.readouterr().err.strip().splitlines()
    assert exit_info.value.code == 2 and len(err) == 1 and "--temp was split" in err[0] and "--cl_temp" in err[0]


def test_cl_temp_is_the_label_contrastive_temperature():
    from scripts.sentence_finetune import SentenceObjective, build_parser, run_config
    config = run_config(build_parser().parse_args(["--task", "sst", "--out", "x", "--cl_temp", "0.2"]))
    assert config.train.cl_temp == 0.2 and config.model.head_temp == 0.05
    objective = SentenceObjective(torch.nn.Linear(1, 1), [], None, config, "lcl", None, None)
    assert objective.temperature == 0.2


# --- scripts/lcl_study.sh and its table -----------------------------------------------------------

ROOT = Path(__file__).resolve().parents[1]


def test_lcl_study_dry_run_lists_the_runs_and_probes(data_dir, tmp_path):
    env = {**os.environ, "PYTHON": sys.executable}
    result = subprocess.run(["bash", str(ROOT / "scripts" / "lcl_study.sh"), "--dry_run", "--data_dir", str(data_dir),
                             "--out", str(tmp_path), "--", "--cl_temp", "0.1"],
                            capture_output=True, text=True, env=env, cwd=ROOT)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    train = [line for line in lines if "scripts.sentence_finetune" in line]
    probes = [line for line in lines if "scripts.probe" in line]
    assert len(train) == 4 and all("--cl_temp 0.1" in line for line in train)
    assert any("--task cfimdb --loss lcl" in line and "--epochs 2 --max_steps 50" in line for line in train)
    assert len(probes) == 6 and sum("--checkpoint" in line for line in probes) == 4
    assert any(f"{tmp_path}/pretrained/sst.json" in line for line in probes)
    assert "--csv" in lines[-1] and "plot_table.py" in lines[-1]


def test_lcl_study_rejects_bad_options(tmp_path):
    script = str(ROOT / "scripts" / "lcl_study.sh")
    missing = subprocess.run(["bash", script, "--data_dir", str(tmp_path / "nope")], capture_output=True, text=True)
    assert missing.returncode == 2 and "data folder not found" in missing.stderr
    bad = subprocess.run(["bash", script, "--data_dir", str(tmp_path), "--max_train", "x"], capture_output=True, text=True)
    assert bad.returncode == 2 and "--max_train wants a positive whole number" in bad.stderr


def test_plot_table_csv_has_one_column_per_series(tmp_path):
    spec = importlib.util.spec_from_file_location("plot_table", ROOT / "scripts" / "plot_table.py")
    plot_table = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(plot_table)
    files = []
    for series, ari in (("pretrained", 0.01), ("lcl", 0.5)):
        path = tmp_path / series / "sst.json"
        path.parent.mkdir()
        path.write_text(json.dumps({"task": "sst", "probe": {"train_accuracy": 0.9, "dev_accuracy": 0.8},
                                    "clustering": {"dev": {"ari": ari, "ami": 0.2}, "train": {"ari": 0.3, "ami": None}}}))
        files.append(str(path))
    out = tmp_path / "t.csv"
    assert plot_table.main([*files, "--md", str(tmp_path / "t.md"), "--csv", str(out)]) == 0
    rows = list(csv.reader(out.read_text().splitlines()))
    assert rows[0] == ["task", "measure", "pretrained", "lcl"]
    assert rows[1] == ["sst", "k-means dev ARI", "0.01", "0.5"]
    assert ["sst", "k-means train AMI", "", ""] in rows and len(rows) == 7
