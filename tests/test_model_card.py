"""training.harness.model_card: the README.md of a run's checkpoint/, made from metrics.json, on runs made by
the real entry point (tiny random BERT, fixture data): its command line trains the same
configuration, its dev table and heads list are the run's, a run of stages alone has no heads."""
import copy
import json
import re
import shlex
from pathlib import Path

import pytest
from safetensors import safe_open

import run_multitask
from training.harness.run_config import RunConfig
from training.harness.model_card import command, model_card, write_model_card

FIXTURE_DATA = Path(__file__).parent / "fixtures" / "data"
# flags of every kind: a choice, a switch on and one off (default on), a number, "none", an extension
TRAINED = ["--epochs", "1", "--para_head", "cosine", "--sts_head", "concat", "--no_bucket", "--max_grad_norm", "none",
           "--lr", "0.0002", "--no_sparse_embeddings", "--smart", "--smart_weight", "0.25", "--save_every", "0"]
STAGES = ["--epochs", "0", "--ucl", "--ucl_steps", "2", "--ucl_batch_size", "4"]


def _run(model_dir: Path, out: Path, name: str, extra: list[str]) -> Path:
    argv = ["--data_dir", str(FIXTURE_DATA), "--model", str(model_dir), "--batch_size", "4", "--max_length", "32",
            "--out_dir", str(out), "--run_name", name, "--quiet", *extra]
    assert run_multitask.main(argv) == 0
    run_dir = out / name
    write_model_card(json.loads((run_dir / "metrics.json").read_text()), run_dir / "checkpoint")
    return run_dir


@pytest.fixture(scope="module")
def runs(tiny_model_dir, tmp_path_factory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("card-runs")
    return {"trained": _run(tiny_model_dir, out, "trained", TRAINED),
            "stages": _run(tiny_model_dir, out, "stages", STAGES)}


def metrics_of(run_dir: Path) -> dict:
    return json.loads((run_dir / "metrics.json").read_text())


def card_of(run_dir: Path) -> str:
    return (run_dir / "checkpoint" / "README.md").read_text(encoding="utf-8")


def command_line(card: str) -> str:
    lines = [line for line in card.splitlines() if line.startswith("python run_multitask.py")]
    assert len(lines) == 1, card
    return lines[0]


def section(card: str, title: str) -> str:
    return card.split(f"## {title}\n", 1)[1].split("\n## ", 1)[0]


def table(text: str) -> list[list[str]]:
    """The rows of the Markdown table in ``text`` (header and rule left out), as stripped cells."""
    rows = [[cell.strip() for cell in line.strip("|").split("|")] for line in text.splitlines() if line.startswith("|")]
    return rows[2:]


def assert_reproduces(card: str, saved: dict) -> None:
    """The card's command parses to the saved configuration: every field exactly, apart from the
    output section, where only --run_name is on the command line."""
    words = shlex.split(command_line(card))
    assert words[:2] == ["python", "run_multitask.py"]
    parsed = run_multitask.parse_config(words[2:]).to_dict()
    assert parsed["output"]["run_name"] == saved["output"]["run_name"]
    parsed.pop("output"), saved.pop("output")
    paths = [("data", "data_dir"), ("model", "model")]
    for part, name in paths:   # absolute paths, given as saved
        assert parsed[part].pop(name) == saved[part].pop(name)
    assert parsed == saved


@pytest.mark.slow
@pytest.mark.parametrize("name", ["trained", "stages"])
def test_command_line_reproduces_the_configuration(runs, name):
    card = card_of(runs[name])
    assert_reproduces(card, metrics_of(runs[name])["config"])
    for left_out in ("--out_dir", "--quiet", "--save_every"):   # the output section, but --run_name
        assert left_out not in command_line(card)
    assert "--run_name " + name in command_line(card)


def test_command_of_the_defaults_and_of_odd_values():
    assert command(RunConfig.defaults().to_dict()) == "python run_multitask.py"
    config = RunConfig.defaults().to_dict()
    config["data"]["data_dir"] = "/data with spaces/it's here"
    config["model"].update(head_temp=-0.5, attention_probs_dropout_prob=0.0, pooling="cls")
    config["train"].update(warmup_ratio=None, max_steps_per_epoch=7, decay_bias_norm=True, tasks="sst,sts",
                           cl_temp=0.2)
    config["speed"].update(bucket=False, sparse_embeddings=True)
    config["output"].update(out_dir="elsewhere", run_name="named", quiet=True)
    card = model_card({"run_name": "named", "config": config}, Path("/nowhere/checkpoint"))
    assert "--head_temp=-0.5" in command_line(card) and "--cl_temp 0.2" in command_line(card)
    assert "--no_bucket" in command_line(card)
    assert_reproduces(card, copy.deepcopy(config))


def test_dev_table_is_the_run_dev_scores(runs):
    metrics = metrics_of(runs["trained"])
    scores = section(card_of(runs["trained"]), "Scores")
    rows = {row[0]: row for row in table(scores)}
    assert list(rows) == [*metrics["dev"], "overall"]
    for task, value in metrics["dev"].items():
        assert rows[task][2] == f"{value:.4f}"
    assert rows["overall"][2] == f"{metrics['dev_overall']:.4f}"
    assert f"Best epoch: {metrics['best_epoch']} of 1" in scores
    assert "| task | metric | dev |\n" in scores   # no labelled test files: no test column


def test_test_column_when_the_run_had_labelled_test_files(runs):
    metrics = metrics_of(runs["trained"])
    metrics["test"] = {"sst": 0.25, "qqp": 0.5, "sts": -0.125}
    metrics["test_overall"] = 0.3
    rows = {row[0]: row for row in table(section(model_card(metrics, runs["trained"] / "checkpoint"), "Scores"))}
    assert [rows[t][3] for t in ("sst", "qqp", "sts", "overall")] == ["0.2500", "0.5000", "-0.1250", "0.3000"]


def test_heads_listed_are_the_file_tensors(runs):
    card = card_of(runs["trained"])
    with safe_open(str(runs["trained"] / "checkpoint" / "heads.safetensors"), "pt") as f:
        saved = {key: list(f.get_slice(key).get_shape()) for key in f.keys()}
    listed = {row[0].strip("`"): json.loads(row[1]) for row in table(section(card, "Heads"))}
    heads = {key: shape for key, shape in saved.items() if key.startswith("heads.")}
    assert listed == heads and "heads.sts.classifier.weight" in listed
    towers = set(saved) - set(heads)   # the default --private_layers 2: the SST and QQP towers
    assert towers and all(key.startswith(("towers.sst.", "towers.qqp.")) for key in towers)
    assert "the others' top layers are `towers.<task>.*` in `heads.safetensors`" in card   # named, not listed
    heads = section(card, "Heads")
    assert "qqp: cosine: logit = (cos(u, v) − threshold) / 0.05" in heads
    assert "sts: concat: score = 5·sigmoid(w·[u; v; |u−v|] + b)" in heads
    assert "sst: `classifier` on u: logits = W·u + b (5 classes)" in heads


def test_card_of_a_run_saved_with_the_one_temp_before_the_split(runs):
    """A configuration saved with the older ``model.temp`` (one τ for the cosine head and the
    contrastive losses): the head formula shows it, the command gives it as both new flags."""
    metrics = metrics_of(runs["trained"])
    del metrics["config"]["model"]["head_temp"], metrics["config"]["train"]["cl_temp"]
    metrics["config"]["model"]["temp"] = 0.1
    card = model_card(metrics, runs["trained"] / "checkpoint")
    assert "qqp: cosine: logit = (cos(u, v) − threshold) / 0.1" in section(card, "Heads")
    assert "--head_temp 0.1" in command_line(card) and "--cl_temp 0.1" in command_line(card)
    assert "--temp " not in command_line(card)


def test_stages_only_run_has_no_heads(runs):
    card = card_of(runs["stages"])
    assert "no heads" in section(card, "Heads") and not table(section(card, "Heads"))
    assert "no heads and no dev scores" in section(card, "Scores")
    assert "run.predict" not in card and "run.encode" in card


def test_extensions_switched_on_are_named(runs):
    def extensions(card: str) -> str:
        return next(line for line in card.splitlines() if line.startswith("- Extensions:"))
    assert "`--smart`" in extensions(card_of(runs["trained"])) and "ucl" not in extensions(card_of(runs["trained"]))
    assert "`--ucl`" in extensions(card_of(runs["stages"])) and "smart" not in extensions(card_of(runs["stages"]))


def test_what_the_model_is_and_how_to_load_it(runs, tiny_model_dir):
    metrics, checkpoint = metrics_of(runs["trained"]), runs["trained"] / "checkpoint"
    card = card_of(runs["trained"])
    assert card == model_card(metrics, checkpoint)   # written as made, nothing else left in the folder
    assert not [p for p in checkpoint.iterdir() if p.name.startswith(".README.md")]
    about = section(card, "Model")
    assert f"`{tiny_model_dir}`" in about and "- Pooling: mean" in about and "ids-sst-train.csv 20" in about
    load = section(card, "Load")
    path = json.dumps(str(checkpoint))
    assert f"load_run({path})" in load and f'run.predict("sst"' in load
    assert f"AutoModel.from_pretrained({path})" in load and f"AutoTokenizer.from_pretrained({path})" in load
    assert f"SentenceTransformer({path})` loads the encoder with the run's mean pooling" in load
    metrics["config"]["model"].update(pooling="first_last", model=None)
    other = model_card(metrics, checkpoint)
    assert "falls back to mean pooling" in section(other, "Load") and "all-MiniLM-L6-v2" in section(other, "Model")
    body = card.split("\n---\n", 1)[1]   # after the YAML front matter
    assert 40 <= len(body.splitlines()) <= 75


@pytest.mark.slow
def test_front_matter_and_tokenizer_length_for_the_hub(tmp_path, tiny_model_dir):
    """Issue 44, item 6: the card opens with the YAML header the hub reads (library, base model, pipeline,
    data sets, dev scores as a model-index), and tokenizer_config.json has model_max_length, without which
    transformers' tokenizer does not truncate a long input."""
    assert run_multitask.main(["--data_dir", str(FIXTURE_DATA), "--model", str(tiny_model_dir), "--out_dir",
                               str(tmp_path), "--run_name", "hub", "--epochs", "1", "--max_steps_per_epoch", "1",
                               "--batch_size", "4", "--max_length", "24", "--quiet"]) == 0
    checkpoint = tmp_path / "hub" / "checkpoint"
    card = (checkpoint / "README.md").read_text()
    header = card.split("---\n")[1]
    assert card.startswith("---\n") and "library_name: sentence-transformers\n" in header
    assert f'base_model: "{tiny_model_dir.name}"' in header and "pipeline_tag: sentence-similarity" in header
    dev = json.loads((tmp_path / "hub" / "metrics.json").read_text())["dev"]
    assert f"{{type: accuracy, value: {round(dev['sst'], 4)}}}" in header
    assert f"{{type: pearson, value: {round(dev['sts'], 4)}}}" in header
    tokenizer = json.loads((checkpoint / "tokenizer_config.json").read_text())
    assert tokenizer["model_max_length"] == json.loads((checkpoint / "config.json").read_text())["max_position_embeddings"]
    try:
        import yaml
    except ImportError:
        return
    meta = yaml.safe_load(header)
    assert meta["model-index"][0]["results"][0]["metrics"][0]["value"] == round(dev["sst"], 4)
    assert meta["datasets"] == ["stanfordnlp/sst", "quora", "mteb/stsbenchmark-sts"]
