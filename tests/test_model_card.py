"""training.harness.model_card: the README.md of a run's checkpoint/, made from metrics.json, on runs made by
the real entry point (tiny random BERT, fixture data): its command line trains the same
configuration, its dev table and heads list are the run's, a run of stages alone has no heads, a capped run
(--max_eval_examples N) says what its dev scores are on."""
import copy
import json
import re
import shlex
from pathlib import Path

import pytest
from safetensors import safe_open

import run_multitask
from training.configuration.sections import NOT_REPRODUCED
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
    """The card's command parses to the saved configuration: every field exactly (the output section's
    --run_name, --no_test_predictions, --save_every... too), apart from where the run's folder was and how it
    was watched (``NOT_REPRODUCED``: --out_dir, --quiet, --log_file...)."""
    words = shlex.split(command_line(card))
    assert words[:2] == ["python", "run_multitask.py"]
    parsed = run_multitask.parse_config(words[2:]).to_dict()
    for config in (parsed, saved):
        for name in NOT_REPRODUCED:
            config["output"].pop(name)
    paths = [("data", "data_dir"), ("model", "model")]
    for part, name in paths:   # absolute paths, given as saved
        assert parsed[part].pop(name) == saved[part].pop(name)
    assert parsed == saved


@pytest.mark.slow
@pytest.mark.parametrize("name", ["trained", "stages"])
def test_command_line_reproduces_the_configuration(runs, name):
    card = card_of(runs[name])
    assert_reproduces(card, metrics_of(runs[name])["config"])
    for left_out in ("--out_dir", "--quiet"):   # where the run's folder was, how it was watched
        assert left_out not in command_line(card)
    assert "--run_name " + name in command_line(card)
    assert ("--save_every 0" in command_line(card)) == (name == "trained")   # an output setting it was given


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


def other_value(value):
    """A value that is not ``value``, of its kind where it has one (the command does not check it)."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, (int, float)):
        return value + 1
    return "other"   # text, or None


def test_every_setting_off_its_default_is_in_the_command_but_where_the_run_was():
    """Issue 87, item 5: the command gives every setting the run changed, the output section's and the
    extensions' included, one at a time; a setting a later version adds is in it without a line in the card.
    Where the run's folder was and how it was watched (``NOT_REPRODUCED``) is left out."""
    defaults = RunConfig.defaults().to_dict()
    given = {}
    for section, values in defaults.items():
        for name, value in values.items():
            if isinstance(value, list):   # DataConfig.own_tasks: no flag (--task_file names the file)
                continue
            config = copy.deepcopy(defaults)
            config[section][name] = other_value(value)
            given[name] = words = shlex.split(command(config))[2:]
            if name in NOT_REPRODUCED:
                assert words == [], (name, words)
            else:
                assert words and words[0] in (f"--{name}", f"--no_{name}"), (name, words)
                assert len(words) == (1 if isinstance(value, bool) else 2), (name, words)
    assert given["test_predictions"] == ["--no_test_predictions"] and given["keep_training_state"] == [
        "--keep_training_state"] and given["run_name"] == ["--run_name", "other"]
    assert given["smart"] == ["--smart"] and given["out_dir"] == given["quiet"] == []


CAPPED_SCORES = {"sst": 0.3125, "qqp": 0.625, "sts": 0.5}


def capped_config(cap: int | None = 100) -> dict:
    """A smoke run's configuration (README's): one epoch of 30 rounds, dev capped, no test predictions; and
    settings of where it went and how it was watched that the command leaves out."""
    config = RunConfig.defaults().to_dict()
    config["data"].update(data_dir="/data/multitask", max_eval_examples=cap)
    config["train"].update(epochs=1, max_steps_per_epoch=30)
    config["output"].update(run_name="smoke", test_predictions=False, save_every=0, keep_training_state=True,
                            out_dir="elsewhere", quiet=True, log_file="smoke.log")
    return config


def capped_metrics(cap: int | None = 100) -> dict:
    """metrics.json of that run: its dev scores, and ``dev_examples`` with an STS dev file shorter than the cap."""
    return {"run_name": "smoke", "status": "finished", "config": capped_config(cap), "dev": dict(CAPPED_SCORES),
            "dev_overall": 0.5, "dev_examples": {"sst": 100, "qqp": 100, "sts": 60}, "best_epoch": 1,
            "epochs": [{"epoch": 1}]}


def test_a_capped_runs_command_gives_its_caps_and_reproduces_it():
    """Issue 87, item 5: the command of the README's smoke run kept --max_eval_examples but dropped
    --no_test_predictions (the output section gave only --run_name)."""
    card = model_card(capped_metrics(), Path("/nowhere/checkpoint"))
    words = shlex.split(command_line(card))
    assert "--no_test_predictions" in words and words[words.index("--max_eval_examples") + 1] == "100"
    assert "--keep_training_state" in words and words[words.index("--save_every") + 1] == "0"
    assert not {"--out_dir", "--quiet", "--log_file"} & set(words)
    assert_reproduces(card, capped_config())


def test_a_capped_card_says_what_its_dev_scores_are_on():
    """Issue 87, item 5: the Scores section says the dev scores are on the first N examples of each dev file
    (and which task's file was shorter, scored whole), its column says so, and so does the hub's model-index
    (the split as the datasets library slices it). An uncapped run's card says none of it."""
    card = model_card(capped_metrics(), Path("/nowhere/checkpoint"))
    scores = section(card, "Scores")
    assert scores.strip().startswith("Capped (`--max_eval_examples 100`): the dev scores are on the first 100 "
                                     "examples of each task's dev file (sts: all 60), not comparable with scores "
                                     "on whole dev files; ")
    assert "| task | metric | dev (first 100) |\n" in scores
    assert {row[0]: row[2] for row in table(scores)} == {
        **{task: f"{value:.4f}" for task, value in CAPPED_SCORES.items()}, "overall": "0.5000"}
    header = card.split("---\n")[1]
    assert header.count('split: "dev[:100]"}') == 3 and "split: dev}" not in header

    whole = model_card(capped_metrics(cap=None), Path("/nowhere/checkpoint"))
    assert "Capped" not in whole and "| task | metric | dev |\n" in section(whole, "Scores")
    assert whole.split("---\n")[1].count("split: dev}") == 3 and "max_eval_examples" not in whole


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
