"""The one ``--temp`` split in two: ``--head_temp`` (τ of the cosine paraphrase head, ``model.head_temp``)
and ``--cl_temp`` (τ of the contrastive losses, ``train.cl_temp``). ``--temp`` is a usage error naming
both; a configuration saved with the old ``temp`` reads it as both; each τ reaches its own consumer."""
from pathlib import Path

import pytest

import run_multitask
from minbert import BertModel
from training.harness.run_config import RunConfig
from training.extensions import lcl, ucl
from training.harness.runs import with_heads
from training.learning.task_schema import run_tasks

FIXTURE_DATA = Path(__file__).parent / "fixtures" / "data"


def test_temp_is_refused_naming_the_new_flags(capsys):
    with pytest.raises(SystemExit) as exit_info:
        run_multitask.parse_config(["--temp", "0.1"])
    assert exit_info.value.code == 2
    error = [line for line in capsys.readouterr().err.splitlines() if "error:" in line]
    assert len(error) == 1 and "--temp" in error[0] and "--head_temp" in error[0] and "--cl_temp" in error[0]


def _changed(argv: list[str]) -> dict:
    """(section, field) -> value of the fields ``argv`` sets away from the defaults."""
    given, defaults = run_multitask.parse_config(argv).to_dict(), run_multitask.parse_config([]).to_dict()
    return {(section, name): value for section, values in given.items() for name, value in values.items()
            if value != defaults[section][name]}


def test_each_flag_sets_its_own_field_only():
    assert _changed(["--head_temp", "0.1"]) == {("model", "head_temp"): 0.1}
    assert _changed(["--cl_temp", "0.2"]) == {("train", "cl_temp"): 0.2}
    defaults = RunConfig.defaults()
    assert defaults.model.head_temp == defaults.train.cl_temp == 0.05


def test_saved_temp_is_read_as_both():
    config = RunConfig.from_dict({"model": {"temp": 0.07}})
    assert config.model.head_temp == config.train.cl_temp == 0.07
    assert "temp" not in config.to_dict()["model"]
    # a configuration that has the new fields keeps them
    config = RunConfig.from_dict({"model": {"temp": 0.07, "head_temp": 0.1}, "train": {"cl_temp": 0.2}})
    assert (config.model.head_temp, config.train.cl_temp) == (0.1, 0.2)


def test_the_cosine_paraphrase_head_gets_head_temp(tiny_model_dir):
    config = run_multitask.parse_config(["--para_head", "cosine", "--head_temp", "0.3", "--cl_temp", "0.2",
                                         "--tasks", "qqp,sts"])
    model = with_heads(BertModel.from_pretrained(tiny_model_dir), config.model, run_tasks(config))
    assert model.heads["qqp"].kind == "cosine" and model.heads["qqp"].temperature == 0.3


def test_the_contrastive_losses_get_cl_temp(tiny_model_dir, tmp_path, monkeypatch):
    """A tiny run of the ucl and lcl stages: each loss is called with --cl_temp, not --head_temp."""
    seen = {"ucl": [], "lcl": []}

    def recording(name, loss):
        def wrapped(*args, **kwargs):
            seen[name].append(args[2])   # (embeddings..., temperature, ...)
            return loss(*args, **kwargs)
        return wrapped

    monkeypatch.setattr(ucl, "info_nce", recording("ucl", ucl.info_nce))
    monkeypatch.setattr(lcl, "label_contrastive_loss", recording("lcl", lcl.label_contrastive_loss))
    argv = ["--data_dir", str(FIXTURE_DATA), "--model", str(tiny_model_dir), "--max_length", "24", "--epochs", "0",
            "--ucl", "--ucl_steps", "1", "--ucl_batch_size", "4", "--lcl", "--lcl_steps", "1", "--lcl_batch_size", "4",
            "--cl_temp", "0.2", "--head_temp", "0.3", "--out_dir", str(tmp_path), "--run_name", "tau", "--quiet"]
    assert run_multitask.main(argv) == 0
    assert seen["ucl"] == [0.2] and seen["lcl"] == [0.2]
