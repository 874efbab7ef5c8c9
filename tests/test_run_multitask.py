"""End to end: run_multitask.py on the tiny fixture data with a tiny random model in HF format."""
import csv
import json
import shutil
from pathlib import Path

import pytest
import torch

import run_multitask
from minbert import BertModel
from training.harness.checkpoint import load_checkpoint

FIXTURE_DATA = Path(__file__).parent / "fixtures" / "data"


def data_rows(name: str) -> int:
    """Valid rows of a fixture file (the one bad row of quora-train.csv aside)."""
    with open(FIXTURE_DATA / name, encoding="utf-8") as f:
        return sum(1 for _ in f) - 1


def read_csv(path: Path) -> list[dict]:
    with open(path, encoding="utf-8", newline="") as f:
        return list(csv.DictReader(f))


def run(tmp_path, model_dir, *extra, data_dir=FIXTURE_DATA, run_name="smoke"):
    argv = ["--data_dir", str(data_dir), "--model", str(model_dir), "--epochs", "2", "--batch_size", "4",
            "--out_dir", str(tmp_path), "--run_name", run_name, "--max_length", "32", *extra]
    return run_multitask.main(argv)


@pytest.mark.slow
def test_end_to_end_writes_every_output(tmp_path, tiny_model_dir):
    assert run(tmp_path, tiny_model_dir) == 0
    run_dir = tmp_path / "smoke"
    expected_rows = {
        "sst-dev-output.csv": ("Predicted_Sentiment", data_rows("ids-sst-dev.csv")),
        "sst-test-output.csv": ("Predicted_Sentiment", data_rows("ids-sst-test-student.csv")),
        "para-dev-output.csv": ("Predicted_Is_Paraphrase", data_rows("quora-dev.csv")),
        "para-test-output.csv": ("Predicted_Is_Paraphrase", data_rows("quora-test-student.csv")),
        "sts-dev-output.csv": ("Predicted_Similiarity", data_rows("sts-dev.csv")),
        "sts-test-output.csv": ("Predicted_Similiarity", data_rows("sts-test-student.csv")),
    }
    for name, (column, n_rows) in expected_rows.items():
        rows = read_csv(run_dir / name)
        assert len(rows) == n_rows, name
        assert list(rows[0]) == ["id", column]
        values = [float(r[column]) for r in rows]
        if name.startswith("sst"):
            assert set(values) <= {0, 1, 2, 3, 4}
        elif name.startswith("para"):
            assert set(values) <= {0, 1}
        else:
            assert all(0.0 <= v <= 5.0 for v in values)
    # Dev ids are the dev file's ids, in file order.
    with open(FIXTURE_DATA / "ids-sst-dev.csv", encoding="utf-8", newline="") as f:
        gold_ids = [row["id"] for row in csv.DictReader(f, delimiter="\t")]
    assert [r["id"] for r in read_csv(run_dir / "sst-dev-output.csv")] == gold_ids

    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert len(metrics["epochs"]) == 2
    assert set(metrics["dev"]) == {"sst", "qqp", "sts"}
    assert metrics["best_epoch"] in (1, 2)
    assert metrics["data"]["quora-train.csv"]["skipped"] == 1
    assert metrics["skipped_prediction_files"] == []
    # The best epoch's dev metrics are the ones reported (no re-computation drift).
    best = metrics["epochs"][metrics["best_epoch"] - 1]
    assert best["dev"] == metrics["dev"]
    # Dev accuracy in metrics.json is the accuracy of the written predictions.
    dev_pred = {r["id"]: int(r["Predicted_Sentiment"]) for r in read_csv(run_dir / "sst-dev-output.csv")}
    with open(FIXTURE_DATA / "ids-sst-dev.csv", encoding="utf-8", newline="") as f:
        gold = {row["id"]: int(row["sentiment"]) for row in csv.DictReader(f, delimiter="\t")}
    assert metrics["dev"]["sst"] == pytest.approx(sum(dev_pred[i] == gold[i] for i in gold) / len(gold))

    state, config = load_checkpoint(run_dir / "checkpoint")
    assert config["bert"]["hidden_size"] == 16
    assert any(k.startswith("heads.sst.") for k in state) and any(k.startswith("bert.") for k in state)


@pytest.mark.slow
def test_same_seed_same_predictions(tmp_path, tiny_model_dir):
    assert run(tmp_path, tiny_model_dir, run_name="a") == 0
    assert run(tmp_path, tiny_model_dir, run_name="b") == 0
    for name in ("sst-dev-output.csv", "sts-dev-output.csv", "para-dev-output.csv"):
        assert (tmp_path / "a" / name).read_text() == (tmp_path / "b" / name).read_text()


@pytest.mark.slow
def test_missing_paraphrase_test_file_is_skipped(tmp_path, tiny_model_dir, capsys):
    data_dir = tmp_path / "data"
    shutil.copytree(FIXTURE_DATA, data_dir)
    (data_dir / "quora-test-student.csv").unlink()
    assert run(tmp_path, tiny_model_dir, "--epochs", "1", data_dir=data_dir) == 0
    assert "skipping para-test-output.csv" in capsys.readouterr().out
    run_dir = tmp_path / "smoke"
    assert not (run_dir / "para-test-output.csv").exists()
    assert (run_dir / "sst-test-output.csv").exists() and (run_dir / "sts-test-output.csv").exists()
    assert json.loads((run_dir / "metrics.json").read_text())["skipped_prediction_files"] == ["para-test-output.csv"]


@pytest.mark.slow
def test_pretrain_option_freezes_the_encoder(tmp_path, tiny_model_dir):
    assert run(tmp_path, tiny_model_dir, "--option", "pretrain", "--epochs", "1") == 0
    state, _ = load_checkpoint(tmp_path / "smoke" / "checkpoint")
    original = BertModel.from_pretrained(tiny_model_dir).state_dict()
    for key, value in original.items():
        assert torch.equal(state[f"bert.{key}"], value), key


def test_missing_data_file_is_one_line_error(tmp_path, tiny_model_dir, capsys):
    data_dir = tmp_path / "data"
    shutil.copytree(FIXTURE_DATA, data_dir)
    (data_dir / "sts-dev.csv").unlink()
    assert run(tmp_path, tiny_model_dir, data_dir=data_dir) == 1
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "sts-dev.csv" in err and "--data_dir" in err
    assert not (tmp_path / "smoke").exists()  # no run folder for a run that could not start


def test_unknown_model_is_one_line_error(tmp_path, capsys):
    assert run(tmp_path, tmp_path / "no-such-model") == 1
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "no-such-model" in err and "never downloaded" in err


def test_existing_run_is_not_overwritten(tmp_path, tiny_model_dir, capsys):
    run_dir = tmp_path / "smoke"
    run_dir.mkdir()
    (run_dir / "metrics.json").write_text("precious")
    assert run(tmp_path, tiny_model_dir) == 1
    assert "already holds a run" in capsys.readouterr().err
    assert (run_dir / "metrics.json").read_text() == "precious"


@pytest.mark.parametrize("flags, message", [
    (["--lr", "-1"], "--lr"),
    (["--epochs", "0"], "--epochs"),
    (["--batch_size", "0"], "--batch_size"),
    (["--task_batch_sizes", "4,4"], "--task_batch_sizes must be 3 positive whole numbers, one per task of --tasks "
                                    "(sst,qqp,sts), got '4,4'"),
    (["--task_batch_sizes", "4,0,4"], "--task_batch_sizes must be 3"),
    (["--task_batch_sizes", "4,2.5,4"], "--task_batch_sizes must be 3"),
])
def test_nonsense_values_are_rejected(tmp_path, tiny_model_dir, capsys, flags, message):
    assert run(tmp_path, tiny_model_dir, *flags) == 1
    assert message in capsys.readouterr().err
    assert not (tmp_path / "smoke").exists()


def test_unknown_pooling_is_rejected_by_the_parser(capsys):
    with pytest.raises(SystemExit) as exit_info:
        run_multitask.parse_config(["--pooling", "not-a-mode"])
    assert exit_info.value.code == 2
    assert "invalid choice" in capsys.readouterr().err


@pytest.mark.slow
def test_task_batch_sizes_set_each_tasks_training_batch(tmp_path, tiny_model_dir):
    # round-robin min over the fixture's 20 SST, 20 QQP and 16 STS training rows: SST in batches of 5
    # (4), QQP of 3 (7), STS of 2 (8) gives 4 rounds of one batch per task, 5 + 3 + 2 examples each
    assert run(tmp_path, tiny_model_dir, "--epochs", "1", "--task_batch_sizes", "5,3,2", "--no_bucket",
               run_name="sizes") == 0
    epoch = json.loads((tmp_path / "sizes" / "metrics.json").read_text())["epochs"][0]
    assert (epoch["train_steps"], epoch["train_examples"]) == (4 * 3, 4 * (5 + 3 + 2))


@pytest.mark.slow
def test_grad_accum_and_clipping_flags_train_through_the_loop(tmp_path, tiny_model_dir):
    assert run(tmp_path, tiny_model_dir, "--epochs", "1", run_name="plain") == 0
    assert run(tmp_path, tiny_model_dir, "--epochs", "1", "--grad_accum", "2", "--max_grad_norm", "1.0",
               run_name="accum") == 0
    plain, accum = (json.loads((tmp_path / name / "metrics.json").read_text())["epochs"][0] for name in ("plain", "accum"))
    assert accum["train_steps"] == -(-plain["train_steps"] // 2) and accum["train_examples"] == plain["train_examples"]
    a, b = (BertModel.from_pretrained(tiny_model_dir).state_dict(),
            load_checkpoint(tmp_path / "accum" / "checkpoint")[0])
    assert any(not torch.equal(a[k], b[f"bert.{k}"]) for k in a)   # it trained
    assert run_multitask.main(["--grad_accum", "0"]) == 1 and run_multitask.main(["--max_grad_norm", "-1"]) == 1


def test_help_shows_every_default_and_names_the_other_tools():
    import argparse
    parser = run_multitask.build_parser()
    for action in parser._actions:
        if action.option_strings and action.help != argparse.SUPPRESS and not isinstance(
                action, (argparse._StoreTrueAction, argparse._StoreFalseAction, argparse._HelpAction)):
            assert "default" in action.help, action.option_strings
    assert all(f"training.tools.{tool}" in parser.epilog for tool in ("report", "predict", "embed"))
    assert all(f"scripts.{tool}" in parser.epilog for tool in ("evaluate_embeddings", "simcse_sweep", "probe",
                                                               "sentence_finetune"))


def test_help_opens_with_three_examples_before_the_flags():
    """Issue 87, item 7: ``--help`` was 394 lines with no example at its top; the examples come first, and each
    parses as a command of this parser (the smoke run, the default run, extensions)."""
    parser = run_multitask.build_parser()
    text = parser.format_help()
    head = text[:text.index("options:")]
    commands = [line.split("#")[0].strip() for line in head.replace("\\\n", "").splitlines()
                if line.strip().startswith("python run_multitask.py")]
    assert len(commands) == 3, head
    for command in commands:
        parser.parse_args(command.split()[2:])   # a usage error exits 2 and fails here


def test_docs_flags_names_every_flag_of_help():
    """docs/flags.md says it lists every flag of ``--help``: a flag added without a word there fails here."""
    text = (Path(__file__).parents[1] / "docs" / "flags.md").read_text(encoding="utf-8")
    flags = [option for action in run_multitask.build_parser()._actions for option in action.option_strings
             if option.startswith("--") and not option.startswith("--no_") and option != "--help"
             and action.help != "==SUPPRESS=="]   # hidden: a refused old spelling (--temp)
    assert len(flags) > 60
    assert [flag for flag in flags if f"`{flag}" not in text] == []


@pytest.mark.slow
def test_warmup_schedule_and_no_decay_groups_reach_the_run(tmp_path, tiny_model_dir, monkeypatch):
    """--warmup_ratio: the logged learning rate rises then falls (the multi-task stage's curve);
    --no_decay_bias_norm: the run's optimizer keeps biases and LayerNorm weights in groups without decay."""
    import training.learning.recipe
    built, real_adamw = [], training.learning.recipe.AdamW

    def recording_adamw(params, **kwargs):
        built.append(real_adamw(params, **kwargs))
        return built[-1]
    monkeypatch.setattr(training.learning.recipe, "AdamW", recording_adamw)
    assert run(tmp_path, tiny_model_dir, "--warmup_ratio", "0.5", "--no_decay_bias_norm", "--lr", "1e-3",
               "--batch_size", "2") == 0   # 2 epochs of 24 steps: a point every 10
    metrics = json.loads((tmp_path / "smoke" / "metrics.json").read_text())
    lrs = [lr for _, lr in metrics["lr_curve"]]
    peak = lrs.index(max(lrs))
    assert 0 < peak < len(lrs) - 1 and max(lrs) <= 1e-3
    assert lrs[:peak + 1] == sorted(lrs[:peak + 1]) and lrs[peak:] == sorted(lrs[peak:], reverse=True)
    (optimizer,) = built
    assert {group["weight_decay"] for group in optimizer.param_groups} == {0.0, 0.01}
    no_decay = [p for group in optimizer.param_groups if group["weight_decay"] == 0.0 for p in group["params"]]
    assert no_decay and all(p.dim() == 1 for p in no_decay)   # biases and LayerNorm weights are vectors


def test_warmup_ratio_out_of_range_is_refused(tmp_path, tiny_model_dir, capsys):
    assert run(tmp_path, tiny_model_dir, "--warmup_ratio", "1") == 1
    assert "--warmup_ratio must be in [0, 1)" in capsys.readouterr().err


@pytest.mark.slow
def test_a_labelled_test_file_is_scored_beside_dev(tmp_path, tiny_model_dir, capsys):
    """A user's own split: sts-test-student.csv with a similarity column is scored; the others are not."""
    data = tmp_path / "data"
    shutil.copytree(FIXTURE_DATA, data)
    shutil.copy(data / "sts-dev.csv", data / "sts-test-student.csv")
    assert run(tmp_path, tiny_model_dir, data_dir=data) == 0
    metrics = json.loads((tmp_path / "smoke" / "metrics.json").read_text())
    assert list(metrics["test"]) == ["sts"]
    assert metrics["test"]["sts"] == pytest.approx(metrics["dev"]["sts"], abs=1e-6)   # the same pairs, same model
    assert "test (labelled test files): STS pearson" in capsys.readouterr().out
