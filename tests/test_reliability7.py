"""Reliability round 7 (issue 86): items 2, 3 and 4, each test failing on the code before its fix.

Inputs (item 4):
- a key written twice in one object of a ``--config`` file, a ``--task_file`` or a search space (JSON or YAML) is
  refused naming the file and the key: both parsers kept the last value silently;
- a task file's relative paths stay inside ``--data_dir``: ``..`` is refused naming the task and the path (absolute
  paths stay allowed, as docs/own-tasks.md says), and a file that is not a table is never quoted in an error;
- a model's config.json sizes are checked against bounds before anything is allocated, the error saying what the
  weights would take (10**6 layers allocated for minutes; hidden_size 10**7 was an allocator traceback);
- a cap above a dev file's size says that file was scored whole; ``--epochs 0`` draws no empty dev panels.
Stops (item 3): a taken run folder names ``--resume`` where it finishes the run; a stop while a command imports
torch is one line and 130 / 143; a stop in a finished run's clean-up waits for it and the command exits 0.
Outputs (item 2): predict's files appear as one set, and the same command works after a stop.
"""
from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import torch
from test_bad_input import assert_one_line_error, box, edit_config  # noqa: F401 (box: the fixture)
from test_own_tasks import DECLARATION, bad, make_data, train, write_declaration

import run_multitask
from minbert import BertConfig
from minbert import config as bert_config
from training.configuration import task_declarations, task_file
from training.configuration.settings_file import read_settings_file
from training.data.readers import DataError, FileLayout, read_examples
from training.configuration.sections import OutputConfig
from training.harness.outputs import RunFiles, claim_run_dir
from training.learning.evaluate import TaskPredictions
from training.learning.task_schema import BUILTIN_TASKS
from training.harness.run_config import RunConfig
from training.tools import search

# ---- a key written twice ---------------------------------------------------------------------------------------

TWICE = {
    "json": ('{"epochs": 1, "lr": 0.00002, "epochs": 2}', "key 'epochs' is written twice in one object"),
    "json, nested": ('{"train": {"epochs": 1, "epochs": 2}}', "key 'epochs' is written twice in one object"),
    "yaml": ("epochs: 1\nlr: 0.00002\nepochs: 2\n", "key 'epochs' is written twice in one mapping (lines 1 and 3)"),
    "yaml, nested": ("train:\n  epochs: 1\n  epochs: 2\n",
                     "key 'epochs' is written twice in one mapping (lines 2 and 3)"),
}


@pytest.mark.parametrize("case", TWICE)
def test_a_key_written_twice_in_a_config_file_is_a_usage_error_naming_file_and_key(tmp_path, capsys, case):
    text, words = TWICE[case]
    if case.startswith("yaml"):
        pytest.importorskip("yaml")
    file = tmp_path / ("run.yaml" if case.startswith("yaml") else "run.json")
    file.write_text(text, encoding="utf-8")
    with pytest.raises(SystemExit) as exit_:
        run_multitask.parse_config(["--config", str(file)])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and f"--config {file}: {words}" in err, err


def test_a_key_once_in_each_of_two_objects_and_a_yaml_merge_are_no_repeat(tmp_path):
    file = tmp_path / "ok.json"
    file.write_text('{"train": {"epochs": 1}, "model": {"epochs": 2}}', encoding="utf-8")
    assert read_settings_file(file, "--config") == {"train": {"epochs": 1}, "model": {"epochs": 2}}
    pytest.importorskip("yaml")
    merged = tmp_path / "ok.yaml"
    merged.write_text("base: &b {epochs: 1, lr: 2}\nrun:\n  <<: *b\n  epochs: 3\n", encoding="utf-8")
    assert read_settings_file(merged, "--config")["run"] == {"epochs": 3, "lr": 2}   # a merge overridden, no repeat


def test_a_key_written_twice_in_a_task_file_or_a_search_space_is_refused_naming_it(tmp_path):
    declared = tmp_path / "t.json"
    declared.write_text('{"tasks": [{"name": "nli", "name": "other"}]}', encoding="utf-8")
    with pytest.raises(task_declarations.TaskFileError, match=r"--task_file .*t\.json: key 'name' is written twice"):
        task_file.read_task_file(declared)
    space = tmp_path / "space.json"
    space.write_text('{"lr": [1e-5, 2e-5], "lr": [3e-5]}', encoding="utf-8")
    with pytest.raises(ValueError, match=r"--space .*space\.json: key 'lr' is written twice"):
        search.read_space(str(space))


# ---- task files: inside --data_dir, and no other file quoted ----------------------------------------------------

@pytest.mark.parametrize("path", ["../../../etc/passwd", "sub/../../nli-train.tsv", "../x.tsv"])
def test_a_relative_path_that_climbs_out_of_data_dir_is_refused_naming_task_and_path(tmp_path, capsys, path):
    declared = write_declaration(tmp_path / "t.json", bad(files={"train": path, "dev": "nli-dev.tsv"}))
    argv = ["--task_file", str(declared), "--tasks", "nli", "--out_dir", str(tmp_path / "runs"), "--run_name", "r",
            "--data_dir", str(tmp_path)]
    assert run_multitask.main(argv) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert "task 'nli'" in err and "field 'files'" in err and repr(path) in err and "--data_dir" in err, err
    assert not (tmp_path / "runs").exists()


def test_absolute_paths_and_names_with_dots_stay_allowed(tmp_path):
    files = {"train": str(tmp_path / "nli-train.tsv"), "dev": "v1..2/nli-dev.tsv", "test": "./nli-test.tsv"}
    assert task_declarations.check_declaration(bad(files=files), "test")["files"] == files


def test_a_file_that_is_not_a_table_is_not_quoted(tmp_path):
    secret = tmp_path / "passwd"
    secret.write_text("root:x:0:0:the-secret-line:/root:/bin/bash\ndaemon:x:1:1::/:/bin/sh\n", encoding="utf-8")
    with pytest.raises(DataError) as err:
        read_examples(secret, FileLayout(["premise", "hypothesis"], "gold", id_column=None))
    assert "the-secret-line" not in str(err.value) and "line 1 is one field" in str(err.value), err.value
    assert "'premise', 'hypothesis', 'gold'" in str(err.value)


def test_an_absolute_path_to_a_file_that_is_not_a_table_ends_in_one_line_quoting_nothing(tmp_path, tiny_model_dir,
                                                                                          capsys):
    data = make_data(tmp_path / "data")
    secret = tmp_path / "passwd"
    secret.write_text("root:x:0:0:the-secret-line:/root:/bin/bash\n", encoding="utf-8")
    declared = write_declaration(tmp_path / "t.json", bad(files={**DECLARATION["files"], "train": str(secret)}))
    assert train(tmp_path, tiny_model_dir, data, "nli", declared, "r") == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and str(secret) in err and "the-secret-line" not in err, err
    assert not (tmp_path / "runs" / "r").exists()


# ---- config.json sizes: bounded before anything is allocated ---------------------------------------------------

TOO_BIG = {
    "a million layers": ({"num_hidden_layers": 10 ** 6}, "num_hidden_layers 1000000 is above 256"),
    "hidden 10**7": ({"hidden_size": 10 ** 7, "num_attention_heads": 1}, "hidden_size 10000000 is above 16,384"),
    "heads": ({"num_attention_heads": 4096}, "num_attention_heads 4096 is above 256"),
    "feed-forward": ({"intermediate_size": 10 ** 8}, "intermediate_size 100000000 is above 65,536"),
    "positions": ({"max_position_embeddings": 10 ** 9}, "max_position_embeddings 1000000000 is above 65,536"),
    "vocabulary": ({"vocab_size": 10 ** 9}, "vocab_size 1000000000 is above 1,000,000"),
    "token types": ({"type_vocab_size": 10 ** 6}, "type_vocab_size 1000000 is above 1,024"),
}


@pytest.mark.parametrize("name", TOO_BIG)
def test_a_config_size_above_its_bound_is_one_line_with_the_memory_before_any_allocation(box, capsys, name):
    values, words = TOO_BIG[name]
    edit_config(box.model, **values)
    start = time.monotonic()
    err = assert_one_line_error(box, capsys, [], [str(box.model / "config.json"), words, "GiB"])
    assert time.monotonic() - start < 30, err   # the million layers took minutes and 3.7 GB before
    assert "the largest this model builds (its weights alone would take about" in err


def test_the_weight_estimate_is_the_built_model_s_and_a_machine_too_small_is_named(tiny_model_dir, monkeypatch):
    from minbert.model import BertModel
    config = BertConfig.from_json(tiny_model_dir / "config.json")
    model = BertModel(config)
    assert config.weight_bytes() == 4 * sum(p.numel() for p in model.parameters())
    monkeypatch.setattr(bert_config, "machine_memory", lambda: config.weight_bytes() - 1)
    with pytest.raises(ValueError, match=r"^the weights alone would take about 0\.0 GiB, more than this machine's"):
        BertConfig.from_dict(json.loads((tiny_model_dir / "config.json").read_text()))


# ---- a taken run folder names the way on -----------------------------------------------------------------------

@pytest.mark.parametrize("status, way_on", [
    ("running", " that did not finish: --resume {folder} continues it, or choose another --run_name"),   # SIGKILLed
    ("interrupted", " that did not finish: --resume {folder} continues it, or choose another --run_name"),
    ("finished", "; choose another --run_name or remove it"),
    (None, "; choose another --run_name or remove it"),   # a folder of one's own
])
def test_the_same_command_on_a_taken_folder_names_resume_where_resume_finishes_the_run(tmp_path, status, way_on):
    folder = tmp_path / "run"
    (folder / "checkpoints").mkdir(parents=True)
    (folder / "metrics.json").write_text(json.dumps({"run_name": "run", "status": status}) if status else "mine")
    config = RunConfig.defaults(output=OutputConfig(out_dir=str(tmp_path), run_name="run"))
    with pytest.raises(FileExistsError) as err:
        claim_run_dir(config.output, config.model)
    assert str(err.value) == f"{folder} already holds a run" + way_on.format(folder=folder)


# ---- a cap above a dev file's size says what was scored ----------------------------------------------------------

def test_a_cap_above_a_dev_file_s_size_says_that_file_was_scored_whole(tiny_model_dir, tmp_path, capsys):
    from test_eval_caps import tiny_run
    from training.tools.report import read_run
    run_dir = tiny_run(tmp_path, tiny_model_dir, "capped", "--max_eval_examples", "11", "--no_test_predictions",
                       "--log_file", str(tmp_path / "run.log"))
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert metrics["dev_examples"] == {"sst": 10, "qqp": 11, "sts": 10}   # the fixture's dev files: 10, 12, 10 rows
    assert read_run(run_dir).status_cell() == "finished, capped: dev scored on 11 examples (sst: all 10, sts: all 10)"
    log = (tmp_path / "run.log").read_text(encoding="utf-8")
    assert "dev is scored on the first 11 examples of each task's dev file (sst: all 10, sts: all 10)" in log


@pytest.mark.slow
def test_a_run_of_the_stages_alone_draws_no_empty_dev_panels(tmp_path, monkeypatch):
    """``--epochs 0`` (a SimCSE stage alone) has no evaluation: its curves are the stage's loss and learning rate,
    not two blank dev panels beside them."""
    pytest.importorskip("matplotlib")
    from test_curves import drawn_figures
    from training.harness.curves import plot_curves
    drawn = drawn_figures(monkeypatch)
    metrics = {"run_name": "stages", "epochs": [], "stages": {"ucl": {"loss_curve": [[10, 2.0], [20, 1.5]],
                                                                      "lr_curve": [[10, 3e-5], [20, 1e-5]]}}}
    plot_curves(metrics, tmp_path / "curves.png")
    axes = drawn[0].axes
    assert [ax.get_title() for ax in axes] == ["stages before multi-task training", "learning rate (encoder)"]
    assert all(ax.lines for ax in axes)


# ---- stops at any moment ---------------------------------------------------------------------------------------

STARTS = {   # how a command starts: the script, python -m, and an installed command's entry point
    "run_multitask.py": ["run_multitask.py", "--out_dir", "{out}"],
    "python -m training.tools.predict": ["-m", "training.tools.predict", "{out}/run", "--out", "{out}/p"],
    "minbert-embed": ["-c", "import sys; from training.tools.starting import embed; sys.exit(embed())",
                      "{out}/run", "--input", "{out}/in.txt", "--out", "{out}/e.npy"],
}


@pytest.mark.slow
@pytest.mark.parametrize("start", STARTS)
@pytest.mark.parametrize("sig, code, said", [(signal.SIGINT, 130, "interrupted"),
                                             (signal.SIGTERM, 143, "terminated (SIGTERM)")])
def test_a_stop_while_a_command_imports_torch_is_one_line_and_writes_nothing(tmp_path, start, sig, code, said):
    """The stop is sent once the guard is in place (``-X importtime`` says when its module was imported) and torch
    is still importing: it used to be a 14-91-line traceback, an abort (134) or no stop at all."""
    from test_resume import ROOT, env
    out = tmp_path / "out"
    words = [word.format(out=out) for word in STARTS[start]]
    process = subprocess.Popen([sys.executable, "-X", "importtime", *words], cwd=ROOT,
                               env=env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines = []
    for line in process.stderr:   # import times, one line a module as each import ends
        lines.append(line)
        if line.rsplit("|", 1)[-1].strip() == "training.tools.starting":
            break
    time.sleep(0.2)
    assert process.poll() is None, "".join(lines)
    process.send_signal(sig)
    rest = process.stderr.read()
    assert process.wait(timeout=60) == code
    said_lines = [line for line in rest.splitlines() if not line.startswith("import time:")]
    assert said_lines == [said], rest[-3000:]
    assert not out.exists()


@pytest.mark.slow
def test_a_stop_while_a_finished_run_cleans_up_is_held_until_its_card_is_written_and_exits_0(
        tmp_path, tiny_model_dir, monkeypatch, capsys):
    """Ctrl-C just after a run finished printed "interrupted" and exit 130 while metrics.json said finished; a
    stop while the model card is written now waits for it, and the command says the run finished."""
    from test_eval_caps import tiny_run
    from training.harness import run_folder
    real = run_folder.write_model_card

    def stopped_while_writing(*args):
        signal.raise_signal(signal.SIGINT)   # held: delivered when the clean-up ends
        return real(*args)

    monkeypatch.setattr(run_folder, "write_model_card", stopped_while_writing)
    run_dir = tiny_run(tmp_path, tiny_model_dir, "done")   # asserts exit 0
    assert json.loads((run_dir / "metrics.json").read_text())["status"] == "finished"
    assert (run_dir / "checkpoint" / "README.md").is_file() and not (run_dir / "checkpoints").exists()
    assert "finished: the stop came after the run ended; its outputs are whole" in capsys.readouterr().out


# ---- outputs as a whole set ------------------------------------------------------------------------------------

def test_an_output_set_appears_whole_or_not_at_all(tmp_path):
    from minbert.atomic import output_set
    out = tmp_path / "p"
    with pytest.raises(KeyboardInterrupt):   # a stop before the set is complete: nothing, and no staging left
        with output_set(out) as staging:
            (staging / "a.csv").write_text("1")
            raise KeyboardInterrupt
    assert list(tmp_path.iterdir()) == []
    with output_set(out) as staging:   # a new folder: the staging folder renamed into place
        (staging / "a.csv").write_text("1")
        (staging / "metrics.json").write_text("{}")
        assert not out.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p"] and (out / "a.csv").read_text() == "1"
    (out / "mine.txt").write_text("kept")
    with pytest.raises(RuntimeError):   # an error while writing into an existing folder: it is as it was
        with output_set(out) as staging:
            (staging / "a.csv").write_text("2")
            raise RuntimeError("failed")
    assert (out / "a.csv").read_text() == "1"
    with output_set(out) as staging:   # an existing folder: each file replaced, the others kept
        (staging / "a.csv").write_text("2")
    assert {p.name: p.read_text() for p in out.iterdir()} == {"a.csv": "2", "metrics.json": "{}", "mine.txt": "kept"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p"]


def test_a_staging_folder_a_killed_command_left_is_removed_by_the_next(tmp_path):
    from minbert.atomic import output_set
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    left = tmp_path / f".p.{int(gone.stdout)}-abcd1234.tmp"
    left.mkdir()
    (left / "sst-dev-output.csv").write_text("half")
    with output_set(tmp_path / "p") as staging:
        (staging / "metrics.json").write_text("{}")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p"]


def test_a_run_s_prediction_files_appear_as_one_set(tmp_path):
    """A run stopped while it predicted the test sets (minutes on QQP) left its dev CSVs beside an unfinished
    metrics.json; now none of the set is there, nor its staging folder, and the next attempt writes it whole."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "metrics.json").write_text("{}")
    tasks = {name: BUILTIN_TASKS[name] for name in ("sst", "sts")}
    dev = {"sst": TaskPredictions(["a", "b"], np.array([1, 4]), np.array([1, 3])),
           "sts": TaskPredictions(["c"], np.array([2.5]), np.array([3.0]))}
    splits = {name: {"dev": [], "test": ["x"]} for name in tasks}

    def stopped_at_sts(task, examples, label):
        if task is tasks["sts"]:
            raise KeyboardInterrupt
        return TaskPredictions(["t"], np.array([2]), None)
    with pytest.raises(KeyboardInterrupt):
        RunFiles(run_dir, True).predictions(dev, tasks, splits, stopped_at_sts, lambda line: None)
    assert sorted(path.relative_to(tmp_path).as_posix() for path in tmp_path.rglob("*")) == ["run", "run/metrics.json"]
    written, skipped, _ = RunFiles(run_dir, True).predictions(
        dev, tasks, splits, lambda task, examples, label: TaskPredictions(["t"], np.array([2.0]), None),
        lambda line: None)
    assert sorted(written) == sorted(path.name for path in run_dir.glob("*.csv")) and len(written) == 4
    assert (run_dir / "sts-dev-output.csv").read_text() == "id,Predicted_Similiarity\nc,2.5000\n" and not skipped


@pytest.mark.slow
def test_predict_stopped_while_writing_leaves_nothing_and_the_same_command_then_works(tmp_path, tiny_model_dir,
                                                                                      monkeypatch, capsys):
    """A stop after the first prediction file used to leave it alone in --out, and the same command was then
    refused ("already exists; pass --overwrite")."""
    from test_eval_caps import tiny_run
    from test_resume import FIXTURE_DATA
    from training.tools import predict
    run_dir = tiny_run(tmp_path, tiny_model_dir, "r")
    command = [str(run_dir), "--data_dir", str(FIXTURE_DATA), "--out", str(tmp_path / "p")]
    real, written = predict.write_predictions, []

    def stopped_after_one(*args, **kwargs):
        if written:
            raise KeyboardInterrupt
        written.append(real(*args, **kwargs))

    monkeypatch.setattr(predict, "write_predictions", stopped_after_one)
    assert predict.main(command) == 130 and written
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r"]   # no --out, no staging folder
    monkeypatch.setattr(predict, "write_predictions", real)
    capsys.readouterr()
    assert predict.main(command) == 0
    assert sorted(p.name for p in (tmp_path / "p").iterdir()) == [
        "metrics.json", "para-dev-output.csv", "para-test-output.csv", "sst-dev-output.csv", "sst-test-output.csv",
        "sts-dev-output.csv", "sts-test-output.csv"]


# ---- a masked-LM checkpoint (no pooler) ------------------------------------------------------------------------

def test_a_masked_lm_checkpoint_without_a_pooler_loads_with_a_random_pooler_and_says_so(tmp_path):
    """transformers' BertModel fills a missing pooler with random weights; it was refused here."""
    from safetensors.torch import load_file, save_file
    from minbert import BertModel
    from minbert.weights import WeightsError
    torch.manual_seed(0)
    source = BertModel(BertConfig(vocab_size=50, hidden_size=8, num_hidden_layers=2, num_attention_heads=2,
                                  intermediate_size=16, max_position_embeddings=32))
    source.save_pretrained(tmp_path / "m")
    state = load_file(str(tmp_path / "m" / "model.safetensors"))
    masked_lm = {f"bert.{k}": v for k, v in state.items() if not k.startswith("pooler.")}
    masked_lm["cls.predictions.bias"] = state["embeddings.word_embeddings.weight"].new_zeros(50)
    save_file(masked_lm, str(tmp_path / "m" / "model.safetensors"))
    with pytest.warns(UserWarning, match=r"has no pooler \(a masked-LM checkpoint\).*only --pooling pooler reads it"):
        loaded = BertModel.from_pretrained(tmp_path / "m")
    for name, value in loaded.state_dict().items():
        if not name.startswith("pooler."):
            assert torch.equal(value, source.state_dict()[name]), name
    masked_lm.pop("bert.encoder.layer.0.output.dense.bias")   # a missing part of the encoder stays an error
    save_file(masked_lm, str(tmp_path / "m" / "model.safetensors"))
    with pytest.raises(WeightsError, match="missing keys"):
        BertModel.from_pretrained(tmp_path / "m")


# ---- flags after -- : one rule for the run, the grid and the search ---------------------------------------------

@pytest.mark.parametrize("argv, meant", [(["--max_eval", "5"], "--max_eval_examples"), (["--see=3"], "--seed")])
def test_an_abbreviated_flag_is_refused_naming_the_flag_it_stands_for(capsys, argv, meant):
    with pytest.raises(SystemExit) as exit_:
        run_multitask.parse_config(argv)
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and f"{argv[0].split('=')[0]}: write the flag in full ({meant})" in err, err


def test_the_grid_and_the_search_refuse_an_abbreviation_after_dashes_alike(tiny_model_dir):
    """``-- --see 3`` passed the grid's refusal of ``--seed`` (the grid seeds its runs) and ``-- --max_eval 5`` was
    accepted by the grid, refused by the search: both check the flags after -- with the run's own parser."""
    from training.tools.grid import first_refused
    said = first_refused([("ft", ["--model", str(tiny_model_dir), "--see", "3"])])
    assert said is not None and "--see: write the flag in full (--seed)" in said, said


def test_the_report_lists_runs_not_the_folders_predict_wrote(tmp_path):
    """The README's smoke predicts into predictions/smoke-reviews, which `minbert-report predictions/` listed as an
    FT row, "incomplete" (issue 87, item 3)."""
    from training.tools.report import read_runs
    (tmp_path / "reviews").mkdir()
    (tmp_path / "reviews" / "metrics.json").write_text(json.dumps({"run": "predictions/smoke", "scores": {}}))
    (tmp_path / "reviews" / "sst-reviews-output.csv").write_text("id,Predicted_Sentiment\n1,3\n")
    (tmp_path / "smoke").mkdir()
    (tmp_path / "smoke" / "metrics.json").write_text(json.dumps({"run_name": "smoke", "status": "running"}))
    assert [row.run for row in read_runs(tmp_path)] == ["smoke"]
