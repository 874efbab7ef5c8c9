"""Per-task adapters (training/extensions/adapters.py), the first extension that adds a part to the model
(``Extension.model_parts``, heads/model_parts.py): the parts hang under ``model.parts`` and train in an optimizer group
of their own; they start as the identity and a task's batch passes through its own (a tower's layers too); a
parameter of the model that no optimizer group holds is refused when the run is built, unless frozen. A whole run
with adapters resumes bit for bit, ``load_run`` (and so ``minbert-predict``) gives back the dev files it wrote, the
model card names the part, and the registry's grid has its rows."""
import copy
import json
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

import run_multitask
import training.extensions
from heads.model_parts import ModelPart
from test_ray_grid import listed
from test_resume import assert_resumes_exactly
from test_task_finetune import QuietLog
from training.configuration.flags import flag
from training.extensions.adapters import EXTENSION as ADAPTERS, TaskAdapters
from training.extensions.base import Extension
from training.harness.checkpoint import HEADS
from training.harness.trainer import read_inputs
from training.learning.precision import Precision
from training.learning.recipe import build_run
from training.learning.rng import seed_everything
from training.tools import predict

FIXTURE_DATA = Path(__file__).parent / "fixtures" / "data"
TASKS = ("sst", "qqp", "sts")
CPU = torch.device("cpu")


def config_of(model_dir, *flags):
    return run_multitask.parse_config(["--data_dir", str(FIXTURE_DATA), "--model", str(model_dir), "--batch_size", "4",
                                       "--max_length", "24", *flags]).validate()


def inputs_of(model_dir, *flags):
    config = config_of(model_dir, *flags)
    seed_everything(config.train.seed)
    return config, read_inputs(config, QuietLog())


def built_run(model_dir, *flags):
    config, inputs = inputs_of(model_dir, *flags)
    return build_run(config, inputs, CPU, Precision("off", CPU), config.plugins())


def adapter_names(layers: int = 2) -> set[str]:
    """Each task's adapter tensors, written out: one down and one up projection after each of the tiny model's
    two layers."""
    return {f"parts.adapters.adapters.{task}.{layer}.{linear}.{kind}" for task in TASKS for layer in range(layers)
            for linear in ("down", "up") for kind in ("weight", "bias")}


def test_the_adapters_are_a_model_part_trained_in_a_group_of_their_own(tiny_model_dir):
    run = built_run(tiny_model_dir, "--adapters", "--adapter_size", "4", "--adapter_lr", "0.003")
    named = dict(run.model.named_parameters())
    assert {name for name in named if name.startswith("parts.")} == adapter_names()
    assert set(run.model.state_dict()) - set(named) == set()   # parts hold no buffer
    adapters = {id(named[name]) for name in adapter_names()}
    groups = run.optimizer.param_groups
    own = [g for g in groups if any(id(p) in adapters for p in g["params"])]
    assert own and all(id(p) in adapters for g in own for p in g["params"])   # no other parameter in their groups
    assert {id(p) for g in own for p in g["params"]} == adapters
    assert all(g["lr"] == 0.003 for g in own) and groups[-len(own):] == own   # at --adapter_lr, after the others
    assert named["parts.adapters.adapters.sst.0.down.weight"].shape == (4, 16)


def test_without_a_part_the_model_has_no_part(tiny_model_dir):
    """No extension with a part: no ``parts.*`` weight, no group beyond the encoder's, the heads' (and decay's)."""
    run = built_run(tiny_model_dir)
    assert len(run.model.parts) == 0 and not any(k.startswith("parts.") for k in run.model.state_dict())
    with_adapters = built_run(tiny_model_dir, "--adapters", "--adapter_size", "4")
    assert len(with_adapters.optimizer.param_groups) == len(run.optimizer.param_groups) + 2   # decayed, not decayed


def test_adapter_tuning_trains_the_adapters_and_heads_over_a_frozen_encoder(tiny_model_dir):
    run = built_run(tiny_model_dir, "--adapters", "--adapter_size", "4", "--option", "pretrain")
    trained = {id(p) for g in run.optimizer.param_groups for p in g["params"]}
    named = dict(run.model.named_parameters())
    assert {n for n, p in named.items() if id(p) in trained} == {n for n in named
                                                                  if n.startswith(("heads.", "parts."))}


@pytest.mark.parametrize("private_layers", ["0", "1"])
def test_adapters_start_as_the_identity_and_a_task_passes_through_its_own(tiny_model_dir, private_layers):
    """At the start every head's output is that of the model without adapters, bit for bit. Then one task's adapter
    after the top layer (a tower's layer with --private_layers 1) moved: that task's output changes, no other's."""
    _, inputs = inputs_of(tiny_model_dir, "--private_layers", private_layers)
    plain = inputs.model.eval()
    adapted = copy.deepcopy(plain)
    adapted.parts.add(ADAPTERS.model_parts(ADAPTERS.settings(adapter_size=4), None, adapted))
    batch = {name: [encoding(words)] * (2 if name != "sst" else 1)
             for name, words in (("sst", "a fine film ."), ("qqp", "is it ?"), ("sts", "a man plays ."))}
    with torch.no_grad():
        before = {task: plain(task, batch[task]) for task in TASKS}
        assert all(torch.equal(adapted(task, batch[task]), before[task]) for task in TASKS)
        adapted.parts["adapters"].adapters["qqp"][1].up.bias.fill_(0.5)
        after = {task: adapted(task, batch[task]) for task in TASKS}
    assert not torch.equal(after["qqp"], before["qqp"])
    assert torch.equal(after["sst"], before["sst"]) and torch.equal(after["sts"], before["sts"])


def encoding(words: str) -> dict:
    ids = torch.tensor([[101, *(1000 + len(w) for w in words.split()), 102]])
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids), "token_type_ids": torch.zeros_like(ids)}


def test_a_parameter_no_optimizer_group_holds_is_refused_unless_frozen(tiny_model_dir):
    config, inputs = inputs_of(tiny_model_dir)
    inputs.model.stray = torch.nn.Linear(2, 2)   # attached to the model, in no ParamSet
    with pytest.raises(ValueError, match=r"^model parameter stray\.weight is trained by no optimizer group: add it "
                                         r"to a ParamSet or freeze it \(requires_grad False\)$"):
        build_run(config, inputs, CPU, Precision("off", CPU), config.plugins())
    inputs.model.stray.requires_grad_(False)
    build_run(config, inputs, CPU, Precision("off", CPU), config.plugins())


@dataclass(frozen=True)
class ScaleConfig:
    scale_pooled: bool = flag(False, "a toy part: a learned scale on every pooled vector")


class ScalePooled(Extension):
    """A toy extension with a part at the other site: one module, nothing else of the library."""
    name, settings, column, short = "scale_pooled", ScaleConfig, "scale", "scale"

    def model_parts(self, c, core, model):
        return {"scale": Scale()}


class Scale(ModelPart):
    site = "pooled"

    def __init__(self):
        super().__init__()
        self.factor = torch.nn.Parameter(torch.ones(()))

    def on_pooled(self, task, vector):
        return vector * self.factor


def test_a_toy_extension_adds_a_part_on_the_pooled_vector(tiny_model_dir, monkeypatch):
    monkeypatch.setattr(training.extensions, "EXTENSIONS", (*training.extensions.EXTENSIONS, ScalePooled()))
    run = built_run(tiny_model_dir, "--scale_pooled")
    factor = run.model.parts["scale"].factor
    (own,) = [g for g in run.optimizer.param_groups if any(p is factor for p in g["params"])]
    assert own["params"] == [factor] and own["lr"] == run.config.train.head_lr
    batch = [encoding("a fine film .")]
    run.model.eval()
    with torch.no_grad():
        before = run.model("sst", batch)
        factor.fill_(0.0)   # every pooled vector zero: the head sees its bias alone
        assert torch.equal(run.model("sst", batch), run.model.heads["sst"](torch.zeros(1, 16)))
    assert not torch.equal(before, run.model.heads["sst"](torch.zeros(1, 16)))


def test_a_part_must_say_where_it_acts(tiny_model_dir):
    _, inputs = inputs_of(tiny_model_dir)
    with pytest.raises(ValueError, match="model part 'linear' must be a heads.model_parts.ModelPart"):
        inputs.model.parts.add({"linear": torch.nn.Linear(2, 2)})
    inputs.model.parts.add({"a": TaskAdapters(["sst"], 2, 16, 4)})
    with pytest.raises(ValueError, match="two model parts are named 'a'"):
        inputs.model.parts.add({"a": TaskAdapters(["sst"], 2, 16, 4)})


@pytest.mark.parametrize("flags, message", [
    (["--adapters", "--adapter_size", "0"], "--adapter_size must be at least 1"),
    (["--adapters", "--adapter_lr", "0"], "--adapter_lr must be positive"),
    (["--adapter_size", "8"], "--adapter_size has no effect without --adapters"),
    (["--adapters", "--epochs", "0", "--ucl"], "--adapters trains in multi-task epochs"),
])
def test_settings_it_cannot_take_are_one_line(flags, message):
    with pytest.raises(ValueError, match=message):
        run_multitask.parse_config(flags).validate()


def test_the_registry_grid_has_the_adapters_rows():
    out = listed("--list", "--only", "mean-adapters", "mean-adapters-pretrain")
    assert out.returncode == 0, out.stderr
    rows = {line.split()[0]: line.split()[1:] for line in out.stdout.splitlines()}
    assert set(rows) == {"ablate-mean-adapters", "ablate-mean-adapters-pretrain"}
    assert "--adapters" in rows["ablate-mean-adapters"]
    assert {"--adapters", "pretrain"} <= set(rows["ablate-mean-adapters-pretrain"])


@pytest.mark.slow
def test_an_adapters_run_resumes_exactly_and_load_run_gives_back_its_dev_files(tiny_model_dir, tmp_path):
    assert_resumes_exactly(tiny_model_dir, tmp_path, "adapters", "--epochs", "2", "--adapters", "--adapter_size", "4",
                           "--private_layers", "1")
    run_dir = tmp_path / "clean" / "adapters"
    out = tmp_path / "predicted"
    assert predict.main([str(run_dir), "--data_dir", str(FIXTURE_DATA), "--out", str(out)]) == 0   # via load_run
    for name in ("sst-dev-output.csv", "para-dev-output.csv", "sts-dev-output.csv"):
        assert (out / name).read_bytes() == (run_dir / name).read_bytes(), name
    saved = load_file(str(run_dir / "checkpoint" / HEADS))
    assert {k for k in saved if k.startswith("parts.")} == adapter_names()
    assert all(saved[f"parts.adapters.adapters.{task}.1.up.weight"].abs().sum() > 0 for task in TASKS)   # trained
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert metrics["model_parts"]["adapters"]["parameters"] == 3 * 2 * (16 * 4 + 4 + 4 * 16 + 16)
    card = (run_dir / "checkpoint" / "README.md").read_text()
    assert "- Model part `adapters`: per-task bottleneck adapters (Houlsby et al. 2019) of width 4" in card
