"""--config FILE (issue 44, item 3): a run's saved configuration, its metrics.json or a file of one's own
(sections or flat, JSON or YAML) sets the flags; flags on the command line override it; what names a
run (run_name, resume, log_file) is never taken from a file; bad files are argparse's usage error."""
import dataclasses
import json
import shutil
from pathlib import Path

import pytest

import run_multitask
from minbert.weights import WeightsError
from training.configuration.sections import REFERENCE_SPEED
from training.harness.run_config import RunConfig
from training.harness.runs import load_run

FIXTURE_DATA = Path(__file__).parent / "fixtures" / "data"


@pytest.fixture(scope="module")
def saved_run(tiny_model_dir, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("runs")
    assert run_multitask.main(["--data_dir", str(FIXTURE_DATA), "--model", str(tiny_model_dir), "--out_dir", str(out),
                               "--run_name", "first", "--epochs", "2", "--max_steps_per_epoch", "2", "--batch_size",
                               "4", "--max_length", "24", "--pooling", "cls", "--no_bucket", "--seed", "7",
                               "--quiet"]) == 0
    return out / "first"


@pytest.mark.slow
def test_a_saved_run_config_with_epochs_overridden_runs_for_one_epoch(saved_run):
    saved = RunConfig.from_dict(json.loads((saved_run / "checkpoint" / "run_config.json").read_text()))
    config = run_multitask.parse_config(["--config", str(saved_run / "checkpoint" / "run_config.json"),
                                         "--epochs", "1"])
    assert config.train.epochs == 1 and config.output.run_name is None   # the flag wins; a new run's name
    config = config.with_sections(train=dataclasses.replace(config.train, epochs=saved.train.epochs),
                                  output=dataclasses.replace(config.output, run_name=saved.output.run_name))
    assert config == saved                                                # everything else as saved
    assert run_multitask.main(["--config", str(saved_run / "checkpoint" / "run_config.json"), "--epochs", "1",
                               "--run_name", "again"]) == 0
    metrics = json.loads((saved_run.parent / "again" / "metrics.json").read_text())
    assert metrics["status"] == "finished" and len(metrics["epochs"]) == 1
    assert metrics["config"]["model"]["pooling"] == "cls" and metrics["config"]["train"]["seed"] == 7


def test_metrics_json_is_a_config_file_too(saved_run):
    from_metrics = run_multitask.parse_config(["--config", str(saved_run / "metrics.json")])
    from_checkpoint = run_multitask.parse_config(["--config", str(saved_run / "checkpoint" / "run_config.json")])
    assert from_metrics == from_checkpoint


def test_a_flat_file_of_ones_own_and_flags_over_it(tmp_path):
    file = tmp_path / "recipe.json"
    file.write_text(json.dumps({"epochs": 2, "pooling": "cls", "bucket": False, "smart": True, "temp": 0.1}))
    config = run_multitask.parse_config(["--config", str(file), "--bucket", "--pooling", "max"])
    assert (config.train.epochs, config.model.pooling, config.speed.bucket, config.smart.smart) == (2, "max", True, True)
    assert config.model.head_temp == config.train.cl_temp == 0.1          # an older name, read as both
    assert config.model.private_layers == RunConfig.defaults().model.private_layers   # absent: today's default


def test_reference_paths_over_a_file(tmp_path):
    file = tmp_path / "recipe.json"
    file.write_text(json.dumps({"speed": {"attention": "sdpa", "bucket": True}}))
    config = run_multitask.parse_config(["--config", str(file), "--reference", "--bucket"])
    assert config.speed.attention == REFERENCE_SPEED["attention"] and config.speed.bucket is True


def test_yaml(tmp_path):
    pytest.importorskip("yaml")
    file = tmp_path / "recipe.yaml"
    file.write_text("model:\n  pooling: cls\ntrain:\n  epochs: 4\n")
    config = run_multitask.parse_config(["--config", str(file)])
    assert (config.model.pooling, config.train.epochs) == ("cls", 4)


@pytest.mark.parametrize("text, message", [
    ('{"epochs": 1, "epoch": 2}', "unknown settings epoch"),
    ('{"pooling": "best"}', "pooling 'best': choose one of"),
    ('{"epochs": 1', "Expecting"),
    ('[1, 2]', "expected settings by name"),
    # issue 61: each was a TypeError traceback, or taken as given
    ('{"epochs": "two"}', "epochs: 'two': invalid literal"),
    ('{"lr": "fast"}', "lr: 'fast'"),
    ('{"batch_size": null}', "batch_size: null: give a value"),
    ('{"epochs": 1.5}', "epochs: 1.5"),
    ('{"quiet": "no"}', "quiet: 'no': give true or false"),
    ('{"smart": 1}', "smart: 1: give true or false"),
    ('{"lp_steps": 50}', "lp_steps was removed after commit 4be10e6"),
    ('{"distill": {"distill": true, "teachers": "auto"}}', "this run used --distill, which was removed after commit"),
])
def test_a_bad_file_is_a_usage_error_naming_it(tmp_path, capsys, text, message):
    file = tmp_path / "bad.json"
    file.write_text(text)
    with pytest.raises(SystemExit) as exit_:
        run_multitask.parse_config(["--config", str(file)])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and f"--config {file}: " in err and message in err


def test_values_in_any_spelling_a_flag_takes_are_typed(tmp_path, capsys):
    file = tmp_path / "good.json"
    file.write_text(json.dumps({"lr": "1e-4", "epochs": 2.0, "max_grad_norm": "none", "warmup_ratio": "none",
                                "tasks": ["sst", "sts"], "task_batch_sizes": [16, 8], "joint_loss": True,
                                "loss_weights": [1, 2], "lp_steps": 0, "task_lr_scales": None,
                                "run_name": "elsewhere"}))
    config = run_multitask.parse_config(["--config", str(file)])
    t = config.train
    assert (t.lr, t.epochs, t.max_grad_norm, t.warmup_ratio, t.tasks) == (1e-4, 2, None, None, "sst,sts")
    assert type(t.epochs) is int and config.data.task_batch_sizes == "16,8"
    assert config.joint_loss.loss_weights == "1,2"   # a saved run's REMOVED settings at their off values: read
    # a recipe's own name for its run is honoured (issue 61: was dropped with a note); a run's saved name is not
    assert config.output.run_name == "elsewhere" and "not taken" not in capsys.readouterr().err
    run_dir = tmp_path / "elsewhere" / "checkpoint"
    run_dir.mkdir(parents=True)
    (run_dir / "run_config.json").write_text(file.read_text())
    config = run_multitask.parse_config(["--config", str(run_dir / "run_config.json")])
    assert config.output.run_name is None and "run_name not taken from the file" in capsys.readouterr().err


def test_yaml_numbers_and_syntax_errors(tmp_path, capsys):
    pytest.importorskip("yaml")
    file = tmp_path / "recipe.yaml"
    file.write_text("lr: 1e-4\nhead_lr: 3.0e-3\n")   # YAML 1.1 reads 1e-4 (no dot) as text
    config = run_multitask.parse_config(["--config", str(file)])
    assert (config.train.lr, config.train.head_lr) == (1e-4, 3e-3)
    file.write_text("lr: [1e-4\n")
    with pytest.raises(SystemExit):
        run_multitask.parse_config(["--config", str(file)])
    err = capsys.readouterr().err.strip().splitlines()
    assert "not valid YAML" in err[-1] and "Traceback" not in "\n".join(err)   # argparse's usage, one error line


def test_a_missing_file_is_a_usage_error(tmp_path, capsys):
    with pytest.raises(SystemExit):
        run_multitask.parse_config(["--config", str(tmp_path / "nowhere.json")])
    assert f"--config {tmp_path / 'nowhere.json'}: " in capsys.readouterr().err


def test_metrics_json_records_what_decides_a_cpu_runs_bits(saved_run):
    """The thread count and the CPU's vector instructions decide a CPU run's rounding (docs/defaults.md,
    'Reproducing the default row'), so a finished run records both."""
    import torch
    metrics = json.loads((saved_run / "metrics.json").read_text())
    assert metrics["torch_threads"] == torch.get_num_threads()
    assert metrics["cpu_capability"] == torch.backends.cpu.get_cpu_capability() != ""


def test_print_config_writes_a_file_that_runs_the_same_configuration(tmp_path, capsys):
    """--print_config (issue 61): the full configuration of flags over a file, as a file --config takes, with
    the declared tasks written in; read back it is the same configuration, where-a-run-goes aside."""
    from test_own_tasks import DECLARATION, write_declaration
    recipe = tmp_path / "recipe.json"
    recipe.write_text(json.dumps({"epochs": 2, "pooling": "cls", "smart": True}))
    declared = write_declaration(tmp_path / "tasks.json")
    argv = ["--config", str(recipe), "--pooling", "mean", "--lr", "3e-5", "--task_batch_sizes", "32,24",
            "--max_grad_norm", "none", "--task_file", str(declared), "--tasks", "sst,nli", "--run_name", "r"]
    assert run_multitask.main([*argv, "--print_config"]) == 0
    printed = capsys.readouterr().out
    (tmp_path / "printed.json").write_text(printed)
    declared.unlink()   # the printed file carries the declarations: it runs without the task file
    again = run_multitask.parse_config(["--config", str(tmp_path / "printed.json")])
    again = again.validate()
    assert again.data.own_tasks == [{**DECLARATION, "score_range": None, "metric": "accuracy",
                                        "output_prefix": "nli", "prediction_column": "Predicted_gold"}]
    expected = run_multitask.parse_config(argv)
    expected = expected.with_sections(data=dataclasses.replace(expected.data, own_tasks=again.data.own_tasks),
                                      output=dataclasses.replace(expected.output, run_name=None))
    assert again == expected
    assert (again.train.epochs, again.model.pooling, again.train.lr, again.train.max_grad_norm) == (2, "mean", 3e-5, None)
    assert "run_name" not in printed and json.loads(printed)["smart"]["smart"] is True


def test_print_config_checks_as_a_run_does_and_refuses_resume(tmp_path, capsys):
    assert run_multitask.main(["--print_config", "--lr", "-1"]) == 1
    assert capsys.readouterr().err.strip() == "error: --lr must be positive"
    with pytest.raises(SystemExit):
        run_multitask.main(["--print_config", "--resume", str(tmp_path)])
    assert "checkpoint/run_config.json" in capsys.readouterr().err


def test_a_file_is_read_through_the_flags_fields_not_argparse_internals():
    """Issue 60: --config read argparse's private ``_actions``; now each value goes through its field's type."""
    root = Path(__file__).resolve().parents[1]
    for path in (root / "run_multitask.py", root / "training" / "configuration" / "config_file.py"):
        assert "_actions" not in path.read_text(), path
    from training.configuration.config_file import ConfigFileError, typed
    fields = run_multitask.all_flag_fields()
    assert typed(fields["lr"], "1e-4", "x") == 1e-4 and typed(fields["max_grad_norm"], None, "x") is None
    assert typed(fields["task_batch_sizes"], [32, 86, 32], "x") == "32,86,32"
    with pytest.raises(ConfigFileError, match="x: 'no': give true or false"):
        typed(fields["quiet"], "no", "x")


DISTILL_REFUSED = ("this run used --distill, which was removed after commit df5eb5b (issue 73; docs/ablation.md keeps "
                   "its numbers): `git checkout df5eb5b` runs it, or train again without it")


def test_a_saved_run_that_used_the_removed_distill_is_refused_in_one_line(saved_run, tmp_path, capsys):
    """Issue 73: --distill is gone (its code: commit df5eb5b). A saved configuration with its section on is
    refused in one line saying so, whether read back, loaded, resumed or given to --config; with the section
    off (every run of an earlier version that did not use it) it reads as before."""
    saved = json.loads((saved_run / "checkpoint" / "run_config.json").read_text())
    off, on = ({**saved, "distill": {"distill": used, "teachers": "auto"}} for used in (False, True))
    assert RunConfig.from_dict(off) == RunConfig.from_dict(saved)
    with pytest.raises(ValueError) as refused:
        RunConfig.from_dict(on)
    assert str(refused.value) == DISTILL_REFUSED
    # copies under the run's own folder name (a run's saved run_name is not a recipe's)
    off_run, on_run = tmp_path / "off" / saved_run.name, tmp_path / "on" / saved_run.name
    for config, run in ((off, off_run), (on, on_run)):
        shutil.copytree(saved_run, run)
        (run / "checkpoint" / "run_config.json").write_text(json.dumps(config))
        metrics = json.loads((run / "metrics.json").read_text())
        (run / "metrics.json").write_text(json.dumps({**metrics, "config": config}))
    assert run_multitask.parse_config(["--config", str(off_run / "metrics.json")]) == \
        run_multitask.parse_config(["--config", str(saved_run / "metrics.json")])
    assert load_run(off_run).config == load_run(saved_run).config
    with pytest.raises(WeightsError) as refused:
        load_run(on_run)
    assert str(refused.value).endswith(f": {DISTILL_REFUSED}") and "\n" not in str(refused.value)
    capsys.readouterr()
    with pytest.raises(SystemExit):
        run_multitask.parse_config(["--config", str(on_run / "metrics.json")])
    assert f"--config {on_run / 'metrics.json'}: {DISTILL_REFUSED}" in capsys.readouterr().err
    # as if stopped before its first checkpoint: --resume starts it again with the configuration it saved
    (on_run / "metrics.json").write_text(json.dumps({**metrics, "config": on, "status": "interrupted"}))
    assert run_multitask.main(["--resume", str(on_run), "--quiet"]) == 1
    err = capsys.readouterr().err
    assert err == f"error: {on_run / 'metrics.json'}: {DISTILL_REFUSED}\n"
