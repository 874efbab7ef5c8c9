"""--private_layers K (heads.MultitaskBert's towers): each task but STS gets its own copy of the
encoder's top K layers, STS keeps the encoder's own (the exported model). Checked: a tower starts as
the layers it copies, a task's step moves its tower and the shared bottom only, K = 0 is the model
of before, the run's checkpoint reloads to the predictions it wrote, resumption is exact, and bad
values are one-line errors. The default is K = 2 (docs/ablation.md, "The full budget"); with one task
it changes nothing, and a configuration saved before the flag reads as K = 0."""
import json
import subprocess

import pytest
import torch
from safetensors.torch import load_file

import run_multitask
from heads import MultitaskBert, PairHead, SentimentHead
from minbert import BertConfig, BertModel
from test_resume import FIXTURE_DATA, argv, assert_same_run, command, env, final_state, resume_after_cut
from training.harness.run_config import RunConfig
from training.harness.resume import list_checkpoints
from training.harness.runs import load_run
from training.learning.task_schema import BUILTIN_TASKS

H = 8


def model(private_layers: int) -> MultitaskBert:
    torch.manual_seed(0)
    config = BertConfig(vocab_size=50, hidden_size=H, num_hidden_layers=3, num_attention_heads=2,
                        intermediate_size=16, max_position_embeddings=32)
    heads = {"sst": SentimentHead(H), "qqp": PairHead(H, output="logit"), "sts": PairHead(H, kind="cosine",
                                                                                        output="score")}
    return MultitaskBert(BertModel(config), heads, pooling="mean", private_layers=private_layers, home="sts")


def inputs(pair: bool):
    torch.manual_seed(1)
    one = {"input_ids": torch.randint(1, 50, (4, 7)), "attention_mask": torch.ones(4, 7, dtype=torch.long)}
    return [one, {**one, "input_ids": one["input_ids"].flip(1)}] if pair else [one]


def test_towers_copy_the_top_layers_and_start_as_the_shared_model():
    shared, private = model(0).eval(), model(2).eval()
    assert set(private.towers) == {"sst", "qqp"} and len(private.towers["sst"]) == 2
    assert not any(name.startswith("towers") for name in shared.state_dict())
    assert [k for k in private.state_dict() if not k.startswith("towers.")] == list(shared.state_dict())
    for task, pair in (("sst", False), ("qqp", True), ("sts", True)):
        torch.testing.assert_close(private(task, inputs(pair)), shared(task, inputs(pair)), rtol=0, atol=0)
    with torch.no_grad():
        private.towers["sst"][1].output.bias.add_(1.0)   # sst's own top layer, and only it, changes
    assert not torch.equal(private("sst", inputs(False)), shared("sst", inputs(False)))
    for task in ("qqp", "sts"):
        torch.testing.assert_close(private(task, inputs(True)), shared(task, inputs(True)), rtol=0, atol=0)


def test_a_task_step_reaches_its_tower_and_the_shared_bottom_only():
    net = model(2).train()
    net("sst", inputs(False)).sum().backward()
    touched = {name for name, p in net.named_parameters() if p.grad is not None and p.grad.abs().sum() > 0}
    assert any(name.startswith("towers.sst.") for name in touched)
    assert any(name.startswith("bert.encoder.layer.0.") for name in touched)       # the shared bottom
    assert not any(name.startswith(("towers.qqp.", "bert.encoder.layer.1.", "bert.encoder.layer.2.",
                                    "heads.qqp.", "heads.sts.")) for name in touched)
    assert {name for name, _ in net.encoder_parameters()} == \
        {name for name, _ in net.named_parameters() if not name.startswith("heads.")}


def test_out_of_range_is_refused():
    with pytest.raises(ValueError, match=r"private_layers must be in \[0, 3\]"):
        model(4)


def train(out, model_dir, name, *flags):
    assert run_multitask.main(["--data_dir", str(FIXTURE_DATA), "--model", str(model_dir), "--batch_size", "4",
                               "--max_length", "24", "--out_dir", str(out), "--run_name", name, "--quiet",
                               *flags]) == 0
    return out / name


@pytest.mark.slow
def test_a_run_saves_the_sts_tower_as_its_encoder_and_reloads_to_its_predictions(tmp_path, tiny_model_dir):
    run_dir = train(tmp_path, tiny_model_dir, "pl", "--epochs", "1", "--private_layers", "1")
    checkpoint = run_dir / "checkpoint"
    heads = load_file(str(checkpoint / "heads.safetensors"))
    assert {k.split(".")[1] for k in heads if k.startswith("towers.")} == {"sst", "qqp"}
    loaded = load_run(run_dir)
    encoder = load_file(str(checkpoint / "model.safetensors"))
    top = "encoder.layer.1.attention.self.query.weight"          # HF name of the last layer's query
    assert torch.equal(encoder[top], loaded.model.bert.encoder.layer[1].attention.query.weight)
    assert not torch.equal(encoder[top], heads["towers.sst.0.attention.query.weight"])   # trained apart
    dev = json.loads((run_dir / "metrics.json").read_text())["dev"]
    for task in ("sst", "qqp", "sts"):           # each head through its own tower gives the run's dev score
        examples, _ = BUILTIN_TASKS[task].read(FIXTURE_DATA / BUILTIN_TASKS[task].files["dev"])
        predicted = loaded.predict_examples(task, examples)
        assert BUILTIN_TASKS[task].metric(predicted.predictions, predicted.labels) == pytest.approx(dev[task], abs=1e-6)
    card = (checkpoint / "README.md").read_text(encoding="utf-8")
    assert "each task has its own top encoder layer. `model.safetensors` is the sts tower" in card


@pytest.mark.parametrize("flags, message", [
    (["--private_layers", "-1"], "--private_layers must not be negative"),
    (["--compile"], "--compile compiles the shared encoder only, not the private towers: add --private_layers 0"),
])
def test_bad_settings_are_one_line_errors(tmp_path, tiny_model_dir, capsys, flags, message):
    argv_ = ["--data_dir", str(FIXTURE_DATA), "--model", str(tiny_model_dir), "--out_dir", str(tmp_path),
             "--private_layers", "1", *flags]
    assert run_multitask.main(argv_) != 0
    err = capsys.readouterr().err.strip()
    assert message in err and "Traceback" not in err and len(err.splitlines()) == 1
    assert not any(tmp_path.iterdir())


def test_the_default_is_two_and_a_saved_configuration_without_the_field_had_none():
    assert RunConfig.defaults().model.private_layers == 2
    saved = RunConfig.defaults().to_dict()
    del saved["model"]["private_layers"]        # a run saved before the flag existed
    assert RunConfig.from_dict(saved).model.private_layers == 0


@pytest.mark.slow
def test_with_one_task_private_layers_change_nothing(tmp_path, tiny_model_dir):
    runs = [train(tmp_path, tiny_model_dir, f"sst-{k}", "--tasks", "sst", "--epochs", "1", "--max_steps_per_epoch",
                  "2", "--private_layers", k) for k in ("0", "2")]
    weights = [load_file(str(run / "checkpoint" / name)) for run in runs
               for name in ("model.safetensors", "heads.safetensors")]
    for a, b in ((weights[0], weights[2]), (weights[1], weights[3])):
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert "Private layers" not in (runs[1] / "checkpoint" / "README.md").read_text(encoding="utf-8")


def test_more_private_layers_than_the_model_has_names_its_config(tmp_path, tiny_model_dir, capsys):
    assert run_multitask.main(["--data_dir", str(FIXTURE_DATA), "--model", str(tiny_model_dir), "--out_dir",
                               str(tmp_path), "--private_layers", "3"]) != 0
    err = capsys.readouterr().err
    assert "--private_layers 3 is more than the 2 layers of" in err and str(tiny_model_dir / "config.json") in err


@pytest.mark.slow
def test_a_stopped_run_resumes_exactly(tmp_path, tiny_model_dir):
    flags = ("--epochs", "2", "--private_layers", "1")
    clean = tmp_path / "clean"
    subprocess.run(command(*argv(tiny_model_dir, tmp_path, "clean", *flags)), env=env(), check=True,
                   capture_output=True, timeout=300)
    stopped = tmp_path / "stopped"
    resume_after_cut(clean, stopped, 2)
    assert_same_run(final_state(stopped), final_state(clean))
    assert any(k.startswith("towers.") for k in load_file(str(list_checkpoints(clean)[-1] / "model.safetensors")))
    heads = [load_file(str(run / "checkpoint" / "heads.safetensors")) for run in (stopped, clean)]
    assert heads[0].keys() == heads[1].keys() and all(torch.equal(heads[0][k], heads[1][k]) for k in heads[0])
