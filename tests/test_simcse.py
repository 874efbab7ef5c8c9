"""Unsupervised SimCSE alone (--ucl --epochs 0), its own --ucl_max_length, its STS dev curve
(--ucl_eval_every) with resumption, and the sweep driver (scripts.simcse_sweep), on the tiny
fixture data with a tiny random BERT."""
import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

import run_multitask
from training.harness.checkpoint import load_checkpoint
from training.harness.run_config import RunConfig
from training.harness.resume import list_checkpoints
from training.harness.runs import build_model, load_run, model_directory
from training.configuration.sections import ModelConfig
from training.learning.task_schema import run_tasks
from training.learning.contrastive import ContrastiveObjective
from scripts import evaluate_embeddings, simcse_sweep

FIXTURES = Path(__file__).parent / "fixtures"
FIXTURE_DATA = FIXTURES / "data"
SENTENCES = FIXTURES / "contrastive" / "sentences.txt"
STS_DEV = FIXTURE_DATA / "sts-dev.csv"
# a learning rate high enough that a few steps move the tiny model's STS ranking
UCL_ALONE = ["--ucl", "--epochs", "0", "--ucl_batch_size", "4", "--ucl_lr", "1e-2", "--max_length", "24", "--quiet"]


def train(out_dir: Path, model_dir: Path, name: str, *flags, data_dir: Path = FIXTURE_DATA) -> Path:
    argv = ["--data_dir", str(data_dir), "--model", str(model_dir), "--out_dir", str(out_dir), "--run_name", name,
            *UCL_ALONE, *flags]
    assert run_multitask.main(argv) == 0
    return out_dir / name


def metrics(run_dir: Path) -> dict:
    return json.loads((run_dir / "metrics.json").read_text())


def encoder(run_dir: Path) -> dict[str, torch.Tensor]:
    return {k: v for k, v in load_checkpoint(run_dir / "checkpoint")[0].items() if k.startswith("bert.")}


def assert_same_weights(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    assert all(torch.equal(a[k], b[k]) for k in a)


# --- --ucl_max_length ------------------------------------------------------------------------------


@pytest.mark.slow
def test_ucl_max_length_truncates_the_stage_sentences(tmp_path, tiny_model_dir, monkeypatch):
    widths = []
    batches = ContrastiveObjective.batches

    def recording(self, epoch):
        for batch in batches(self, epoch):
            widths.append(batch["inputs"][0]["input_ids"].shape[1])
            yield batch

    monkeypatch.setattr(ContrastiveObjective, "batches", recording)
    train(tmp_path, tiny_model_dir, "full", "--ucl_steps", "4")
    assert max(widths) > 6   # the fixture's sentences are longer than 6 word pieces at --max_length 24
    widths.clear()
    train(tmp_path, tiny_model_dir, "cut", "--ucl_steps", "4", "--ucl_max_length", "6")
    assert len(widths) == 4 and max(widths) == 6
    assert metrics(tmp_path / "cut")["config"]["ucl"]["ucl_max_length"] == 6


@pytest.mark.slow
def test_ucl_max_length_default_changes_nothing(tmp_path, tiny_model_dir):
    """Unset, it is --max_length: the same encoder as a run giving --ucl_max_length equal to it."""
    assert_same_weights(encoder(train(tmp_path, tiny_model_dir, "unset", "--ucl_steps", "3")),
                        encoder(train(tmp_path, tiny_model_dir, "same", "--ucl_steps", "3", "--ucl_max_length", "24")))


# --- the stage alone -----------------------------------------------------------------------------------


@pytest.mark.slow
def test_ucl_alone_writes_a_loadable_encoder_and_no_predictions(tmp_path, tiny_model_dir):
    """With --ucl_data no task file is read: the data folder may be empty."""
    empty = tmp_path / "no-data"
    empty.mkdir()
    run_dir = train(tmp_path, tiny_model_dir, "alone", "--ucl_data", str(SENTENCES), data_dir=empty)
    m = metrics(run_dir)
    assert m["status"] == "finished" and m["data_dir"] is None and m["data"] == {}
    assert m["stages"]["ucl"]["batches"] == 1   # 5 sentences in batches of 4; a batch of one is left out
    assert "epochs" not in m and "dev" not in m
    assert not list(run_dir.glob("*-output.csv")) and not (run_dir / "checkpoints").exists()
    loaded = load_run(run_dir)
    assert len(loaded.model.heads) == 0 and loaded.encode(["a sentence"]).shape == (1, 16)
    trained = encoder(run_dir)
    start = build_model(ModelConfig(model=str(tiny_model_dir)), run_tasks(RunConfig.defaults()), tiny_model_dir)
    assert any(not torch.equal(v, trained[k]) for k, v in start.state_dict().items() if k.startswith("bert."))
    # --model RUN starts a new run from this encoder
    chained = build_model(ModelConfig(model=str(run_dir)), run_tasks(RunConfig.defaults()), model_directory(str(run_dir)))
    assert_same_weights({k: v for k, v in chained.state_dict().items() if k.startswith("bert.")}, trained)
    assert evaluate_embeddings.main(["--checkpoint", str(run_dir), "--data", str(STS_DEV)]) == 0


def test_ucl_alone_reads_only_the_training_sets(tmp_path, tiny_model_dir):
    """Its default corpus is the training sets' sentences: dev and test files are not needed."""
    data = tmp_path / "data"
    data.mkdir()
    for name in ("ids-sst-train.csv", "quora-train.csv", "sts-train.csv"):
        shutil.copy(FIXTURE_DATA / name, data / name)
    m = metrics(train(tmp_path, tiny_model_dir, "train-only", "--ucl_steps", "2", data_dir=data))
    assert m["status"] == "finished" and sorted(m["data"]) == ["ids-sst-train.csv", "quora-train.csv", "sts-train.csv"]


@pytest.mark.parametrize("flags, message", [
    (["--epochs", "0"], "--epochs 0 runs the stages alone"),
    (["--epochs", "0", "--ucl", "--pre_qqp"], "--pre_qqp trains the paraphrase head"),
    (["--epochs", "-1"], "--epochs must not be negative"),
    (["--ucl", "--ucl_max_length", "2"], "--ucl_max_length must be at least 3"),
    (["--ucl", "--ucl_max_length", "65", "--max_length", "24"], "--ucl_max_length 65 is more than the model's 64"),
    (["--ucl", "--ucl_eval_every", "-1"], "--ucl_eval_every must not be negative"),
    (["--ucl", "--ucl_eval_every", "2", "--ucl_eval_data", "nowhere.csv", "--max_length", "24"],
     "--ucl_eval_data nowhere.csv: no such file"),
])
def test_bad_flags_are_one_line_errors(tmp_path, tiny_model_dir, capsys, flags, message):
    argv = ["--data_dir", str(FIXTURE_DATA), "--model", str(tiny_model_dir), "--out_dir", str(tmp_path), *flags]
    assert run_multitask.main(argv) == 1
    err = capsys.readouterr().err.strip()
    assert message in err and "\n" not in err
    assert not any(tmp_path.iterdir())  # a run that cannot start leaves nothing behind


# --- the STS dev curve -------------------------------------------------------------------------------


@pytest.mark.slow
def test_curve_has_its_steps_and_the_run_keeps_the_best_step(tmp_path, tiny_model_dir):
    run_dir = train(tmp_path, tiny_model_dir, "curve", "--ucl_steps", "5", "--ucl_eval_every", "2")
    sts_dev = metrics(run_dir)["stages"]["ucl"]["sts_dev"]
    curve = sts_dev["curve"]
    assert [step for step, _ in curve] == [0, 2, 4, 5]   # before training, every 2 steps, the last step
    best = max(curve, key=lambda point: point[1])        # the first of equal bests
    assert sts_dev["best"] == {"step": best[0], "spearman": best[1]}
    assert len({spearman for _, spearman in curve}) > 1  # it trained
    # the checkpoint is the best step's encoder: scored again by the evaluator, the same number
    out = tmp_path / "scored.json"
    assert evaluate_embeddings.main(["--checkpoint", str(run_dir), "--data", str(STS_DEV), "--max_length", "24",
                                     "--out", str(out)]) == 0
    assert json.loads(out.read_text())["datasets"]["sts-dev"]["all"]["spearman"] == pytest.approx(best[1], abs=1e-12)


@pytest.mark.slow
def test_curve_every_0_is_off_and_scoring_leaves_training_unchanged(tmp_path, tiny_model_dir):
    plain = encoder(train(tmp_path, tiny_model_dir, "plain", "--ucl_steps", "5"))
    off = train(tmp_path, tiny_model_dir, "off", "--ucl_steps", "5", "--ucl_eval_every", "0")
    assert_same_weights(encoder(off), plain)
    assert "sts_dev" not in metrics(off)["stages"]["ucl"]
    # scored every step: the last step's weights (the resumable checkpoint) are those of the run without
    scored = train(tmp_path, tiny_model_dir, "scored", "--ucl_steps", "5", "--ucl_eval_every", "1",
                   "--save_every", "1", "--keep_checkpoints", "10", "--keep_training_state")
    last = load_file(str(list_checkpoints(scored)[-1] / "model.safetensors"))
    assert_same_weights({k: v for k, v in last.items() if k.startswith("bert.")}, plain)


@pytest.mark.slow
def test_resumed_stage_continues_its_curve_and_best_step(tmp_path, tiny_model_dir):
    """A crash after step 3 (its newer checkpoints and the final checkpoint/ gone): --resume ends
    like the uninterrupted run."""
    flags = ["--ucl_steps", "6", "--ucl_eval_every", "2", "--save_every", "1", "--keep_checkpoints", "10",
             "--keep_training_state"]
    whole = train(tmp_path, tiny_model_dir, "whole", *flags)
    crashed = tmp_path / "crashed"
    shutil.copytree(whole, crashed)
    for path in list_checkpoints(crashed)[3:]:
        shutil.rmtree(path)
    shutil.rmtree(crashed / "checkpoint")
    assert json.loads((list_checkpoints(crashed)[-1] / "state.json").read_text())["step"] == 3
    assert run_multitask.main(["--resume", str(crashed), "--quiet"]) == 0
    assert metrics(crashed)["resumed"][0]["step"] == 3
    assert metrics(crashed)["stages"]["ucl"]["sts_dev"] == metrics(whole)["stages"]["ucl"]["sts_dev"]
    assert_same_weights(encoder(crashed), encoder(whole))


# --- the sweep -----------------------------------------------------------------------------------------


def sweep(out_dir: Path, model_dir: Path, *flags) -> int:
    return simcse_sweep.main(["--ucl_lr", "1e-2", "--cl_temp", "0.05", "0.1", "--pooling", "cls", "--ucl_steps", "3",
                              "--ucl_batch_size", "4", "--ucl_eval_every", "2", "--out_dir", str(out_dir), *flags,
                              "--", "--data_dir", str(FIXTURE_DATA), "--model", str(model_dir), "--max_length", "24",
                              "--quiet"])


@pytest.mark.slow
def test_sweep_runs_each_setting_and_writes_its_table(tmp_path, tiny_model_dir, capsys):
    assert sweep(tmp_path, tiny_model_dir) == 0
    out = capsys.readouterr()
    names = ["lr0.01-t0.05-cls", "lr0.01-t0.1-cls"]
    assert all((tmp_path / name / "checkpoint" / "model.safetensors").is_file() for name in names)
    table = json.loads((tmp_path / "simcse_sweep.json").read_text())
    assert sorted(s["setting"] for s in table["settings"]) == names
    for row in table["settings"]:
        run = metrics(tmp_path / row["setting"])
        assert run["config"]["ucl"]["ucl_max_length"] == 32 and run["config"]["train"]["cl_temp"] == row["temp"]
        assert [step for step, _ in row["curve"]] == [0, 2, 3]
        assert row["best"] == max(s for _, s in row["curve"]) and row["status"] == "finished"
        assert row["command"].startswith("python run_multitask.py --ucl --epochs 0 --ucl_lr 0.01")
    assert [s["best"] for s in table["settings"]] == sorted((s["best"] for s in table["settings"]), reverse=True)
    markdown = (tmp_path / "simcse_sweep.md").read_text()
    assert all(f"| {name} |" in markdown for name in names)
    assert (tmp_path / "simcse_sweep.csv").read_text().count("\n") == 3
    assert "simcse_sweep.png" in out.err or "matplotlib is not installed" in out.err
    # run again: the finished settings are not trained again, also one saved with the one "temp" of
    # the versions before --head_temp and --cl_temp (read as both)
    stamp = (tmp_path / names[0] / "checkpoint" / "model.safetensors").stat().st_mtime_ns
    old = metrics(tmp_path / names[0])
    del old["config"]["model"]["head_temp"], old["config"]["train"]["cl_temp"]
    old["config"]["model"]["temp"] = 0.05
    (tmp_path / names[0] / "metrics.json").write_text(json.dumps(old))
    assert sweep(tmp_path, tiny_model_dir) == 0
    assert capsys.readouterr().out.count("finished before, not run again") == 2
    assert (tmp_path / names[0] / "checkpoint" / "model.safetensors").stat().st_mtime_ns == stamp


def test_sweep_dry_run_and_errors(tmp_path, tiny_model_dir, capsys):
    assert sweep(tmp_path, tiny_model_dir, "--dry_run") == 0
    commands = capsys.readouterr().out.strip().splitlines()
    assert len(commands) == 2 and all("--ucl_max_length 32 --ucl_eval_every 2" in c for c in commands)
    assert not any(tmp_path.iterdir())
    assert sweep(tmp_path, tiny_model_dir, "--ucl_eval_every", "0") == 1
    assert simcse_sweep.main(["--out_dir", str(tmp_path), "--", "--cl_temp", "1"]) == 1
    assert simcse_sweep.main(["--out_dir", str(tmp_path), "--", "--temp", "1"]) == 1
    errors = capsys.readouterr().err.strip().splitlines()
    assert errors[0].startswith("error: --ucl_eval_every must be at least 1")
    assert errors[1].startswith("error: --cl_temp after '--' would override the sweep's own")
    assert errors[2].startswith("error: --temp was split") and "--cl_temp" in errors[2]
    with pytest.raises(SystemExit) as exit_info:   # the sweep's own axis is --cl_temp now
        simcse_sweep.main(["--temp", "0.1", "--out_dir", str(tmp_path), "--dry_run"])
    assert exit_info.value.code == 2 and "--cl_temp" in capsys.readouterr().err
    assert not any(tmp_path.iterdir())
