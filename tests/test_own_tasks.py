"""Your own data (docs/own-tasks.md): a task declared in a file trains beside or instead of the built-in
ones with no code change, writes its prediction CSVs, reloads through ``load_run`` without the file,
shows in the report, and predicts any CSV/TSV with ``training.tools.predict --input``; a bad
declaration is one line naming the file and the field, before any run folder exists."""
import csv
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

import run_multitask
from training.data.readers import FileLayout, read_examples
from heads import ClassesScorer, PairHead
from training.configuration import task_file
from training.harness.runs import load_run
from heads import sts_losses
from training.configuration import task_declarations
from training.configuration.sections import ModelConfig, OutputConfig
from training.learning import task_schema
from training.learning.task_schema import known_tasks
from training.tools import predict as predict_tool
from training.tools import report

FIXTURE_DATA = Path(__file__).parent / "fixtures" / "data"
WORDS = ["a man is playing a guitar", "the cat sleeps on the sofa", "two dogs run in the park",
         "a woman is cutting an onion", "children play football outside", "the sun is shining today",
         "a boy reads a book", "people walk along the river"]
DECLARATION = {"name": "nli", "kind": "pair_classification", "num_classes": 3,
               "files": {"train": "nli-train.tsv", "dev": "nli-dev.tsv", "test": "nli-test.tsv"},
               "text_columns": ["premise", "hypothesis"], "label_column": "gold", "id_column": "pair_id",
               "description": "a toy entailment task: 0 entails, 1 neutral, 2 contradicts"}


def toy_rows(n: int, seed: int) -> list[tuple[str, str, str, int]]:
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(n):
        a, b = rng.choice(len(WORDS), 2)
        rows.append((f"p{seed}-{i}", WORDS[a], WORDS[b], int(rng.integers(3))))
    return rows


def write_tsv(path: Path, rows, label: bool = True) -> None:
    """pandas' layout of the CS224N files: a leading unnamed index column, tab-separated."""
    lines = ["\tpair_id\tpremise\thypothesis" + ("\tgold" if label else "")]
    lines += [f"{i}\t{pid}\t{p}\t{h}" + (f"\t{g}" if label else "") for i, (pid, p, h, g) in enumerate(rows)]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def make_data(folder: Path, with_builtin: bool = False) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    if with_builtin:
        for name in ("ids-sst-train.csv", "ids-sst-dev.csv", "ids-sst-test-student.csv"):
            shutil.copy(FIXTURE_DATA / name, folder / name)
    write_tsv(folder / "nli-train.tsv", toy_rows(16, 1))
    write_tsv(folder / "nli-dev.tsv", toy_rows(8, 2))
    write_tsv(folder / "nli-test.tsv", toy_rows(6, 3), label=False)
    return folder


def write_declaration(path: Path, *declarations) -> Path:
    path.write_text(json.dumps({"tasks": list(declarations or [DECLARATION])}), encoding="utf-8")
    return path


def train(tmp_path, model_dir, data_dir, tasks, task_file_path, run_name, *extra):
    argv = ["--data_dir", str(data_dir), "--model", str(model_dir), "--epochs", "1", "--batch_size", "4",
            "--out_dir", str(tmp_path / "runs"), "--run_name", run_name, "--max_length", "24", "--quiet",
            "--tasks", tasks, "--task_file", str(task_file_path), *extra]
    return run_multitask.main(argv)


def read_csv(path: Path) -> list[dict]:
    with open(path, encoding="utf-8", newline="") as f:
        return list(csv.DictReader(f))


@pytest.fixture(scope="module")
def runs(tmp_path_factory, tiny_model_dir):
    """The toy task trained alone and beside SST; then its declaration file is deleted and the task
    forgotten, so everything after reads the runs' own saved declaration."""
    root = tmp_path_factory.mktemp("own-tasks")
    data = make_data(root / "data", with_builtin=True)
    declared = write_declaration(root / "my_tasks.json")
    assert train(root, tiny_model_dir, data, "nli", declared, "alone") == 0
    assert train(root, tiny_model_dir, data, "sst,nli", declared, "both") == 0
    declared.unlink()
    return root


@pytest.mark.slow
def test_the_declared_task_trains_alone_and_beside_sst_and_writes_its_predictions(runs):
    for name, tasks in (("alone", ["nli"]), ("both", ["sst", "nli"])):
        folder = runs / "runs" / name
        metrics = json.loads((folder / "metrics.json").read_text(encoding="utf-8"))
        assert metrics["status"] == "finished" and list(metrics["dev"]) == tasks
        assert metrics["config"]["data"]["own_tasks"][0]["name"] == "nli"   # the run carries the declaration
        saved = json.loads((folder / "checkpoint" / "run_config.json").read_text(encoding="utf-8"))
        assert json.dumps(saved).count('"kind": "pair_classification"') == 1
        dev, test = read_csv(folder / "nli-dev-output.csv"), read_csv(folder / "nli-test-output.csv")
        assert list(dev[0]) == ["id", "Predicted_gold"]
        assert [row["id"] for row in dev] == [f"p2-{i}" for i in range(8)]   # the declared id column
        assert len(test) == 6 and {int(row["Predicted_gold"]) for row in dev + test} <= {0, 1, 2}
    assert (runs / "runs" / "both" / "sst-dev-output.csv").is_file()


@pytest.mark.slow
def test_load_run_without_the_file_reproduces_the_dev_predictions(runs):
    for name in ("alone", "both"):
        run = load_run(runs / "runs" / name)
        head = run.model.heads["nli"]
        assert isinstance(head, PairHead) and isinstance(head.scorer, ClassesScorer) and head.scorer.num_classes == 3
        examples, _ = known_tasks(run.config.data)["nli"].read(runs / "data" / "nli-dev.tsv")
        got = run.predict_examples("nli", examples).predictions.astype(int).tolist()
        written = [int(row["Predicted_gold"]) for row in read_csv(runs / "runs" / name / "nli-dev-output.csv")]
        assert got == written
        pair = run.predict("nli", (WORDS[0], WORDS[1]))
        assert pair in (0, 1, 2)
        assert run.predict("nli", [(WORDS[0], WORDS[1])], output="probabilities").shape == (1, 3)


@pytest.mark.slow
def test_predict_data_dir_mode_and_the_report_know_the_task(runs, capsys):
    out = runs / "predicted"
    assert predict_tool.main([str(runs / "runs" / "both"), "--data_dir", str(runs / "data"), "--out", str(out)]) == 0
    assert read_csv(out / "nli-dev-output.csv") == read_csv(runs / "runs" / "both" / "nli-dev-output.csv")
    assert "nli-dev.tsv" in json.loads((out / "metrics.json").read_text(encoding="utf-8"))["scores"]
    capsys.readouterr()
    assert report.main([str(runs / "runs"), "--bootstrap", "0"]) == 0
    header = capsys.readouterr().out.splitlines()[0]
    assert header.split()[2:5] == ["SST", "NLI", "average"]
    assert "| NLI acc |" in report.render_markdown(report.collect_runs(runs / "runs"))
    rows = {row.run: row for row in report.read_runs(runs / "runs")}
    dev = json.loads((runs / "runs" / "alone" / "metrics.json").read_text(encoding="utf-8"))["dev"]["nli"]
    assert rows["alone"].dev == {"nli": pytest.approx(dev)} and rows["alone"].baseline == "ST"
    assert set(rows["both"].dev) == {"sst", "nli"}


@pytest.mark.slow
def test_resume_reads_the_saved_declaration(runs):
    """``--resume`` builds its configuration from the saved one: the task is known again, no file needed."""
    from training.harness.run_config import RunConfig
    from training.harness.run_folder import resumed_config
    saved = json.loads((runs / "runs" / "alone" / "metrics.json").read_text(encoding="utf-8"))["config"]
    flags = RunConfig.defaults(output=OutputConfig(resume=str(runs / "runs" / "alone")))
    config = resumed_config(flags, saved, runs / "runs" / "alone" / "metrics.json")
    assert config.task_names() == ["nli"] and known_tasks(config.data)["nli"].num_classes == 3


@pytest.mark.slow
def test_predict_input_scores_a_comma_csv_with_its_own_column_names(runs, capsys):
    rows = toy_rows(5, 9)
    path = runs / "mine.csv"
    with open(path, "w", encoding="utf-8", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["key", "first, sentence", "second", "answer"])
        writer.writerows([(pid, p, h, g) for pid, p, h, g in rows])
    out = runs / "input-out"
    argv = [str(runs / "runs" / "alone"), "--input", str(path), "--columns", "first, sentence,second",
            "--label_column", "answer", "--id_column", "key", "--out", str(out)]
    assert predict_tool.main(argv) == 1   # "first, sentence" splits at its comma: two wrong columns, refused
    argv[4] = "second,second"
    assert predict_tool.main(argv) == 1
    assert "--columns" in capsys.readouterr().err
    path.write_text(path.read_text(encoding="utf-8").replace("first, sentence", "first"), encoding="utf-8")
    argv[4] = "first,second"
    assert predict_tool.main(argv) == 0
    written = read_csv(out / "nli-mine-output.csv")
    assert [row["id"] for row in written] == [pid for pid, *_ in rows]
    run = load_run(runs / "runs" / "alone")
    expected = run.predict("nli", [(p, h) for _, p, h, _ in rows])
    assert [int(row["Predicted_gold"]) for row in written] == expected.tolist()
    score = json.loads((out / "nli-mine-metrics.json").read_text(encoding="utf-8"))["scores"]["mine.csv"]
    assert score == pytest.approx(float(np.mean(expected == np.array([g for *_, g in rows]))))
    assert predict_tool.main(argv) == 1   # the files exist: refused without --overwrite
    assert "--overwrite" in capsys.readouterr().err


@pytest.mark.slow
def test_predict_input_without_ids_or_labels_and_for_a_builtin_task(runs, capsys):
    path = runs / "plain.tsv"
    path.write_text("a\tb\n" + "\n".join(f"{p}\t{h}" for _, p, h, _ in toy_rows(3, 4)) + "\n", encoding="utf-8")
    out = runs / "plain-out"
    assert predict_tool.main([str(runs / "runs" / "alone"), "--input", str(path), "--columns", "a,b",
                              "--out", str(out)]) == 0
    assert [row["id"] for row in read_csv(out / "nli-plain-output.csv")] == ["2", "3", "4"]   # line numbers
    assert json.loads((out / "nli-plain-metrics.json").read_text(encoding="utf-8"))["scores"] == {}
    # a run of two tasks wants --task; SST reads one column
    both = str(runs / "runs" / "both")
    assert predict_tool.main([both, "--input", str(path), "--columns", "a", "--out", str(runs / "x")]) == 1
    assert "--task" in capsys.readouterr().err
    assert predict_tool.main([both, "--input", str(path), "--columns", "a", "--task", "sst",
                              "--out", str(runs / "sst-out")]) == 0
    assert len(read_csv(runs / "sst-out" / "sst-plain-output.csv")) == 3


@pytest.mark.slow
def test_predict_input_with_blank_labels_predicts_with_no_score(runs, capsys):
    """Issue 61: a file whose label column is blank refused every row ("no usable rows"); the error now says
    --no_score, which predicts every row without reading the column."""
    path = runs / "blank.csv"
    path.write_text("a,b,answer\n" + "\n".join(f"{p},{h}," for _, p, h, _ in toy_rows(3, 4)) + "\n", encoding="utf-8")
    argv = [str(runs / "runs" / "alone"), "--input", str(path), "--columns", "a,b", "--label_column", "answer",
            "--out", str(runs / "blank-out")]
    capsys.readouterr()
    assert predict_tool.main(argv) == 1
    assert "--no_score" in capsys.readouterr().err
    assert predict_tool.main(argv + ["--no_score"]) == 1   # and --label_column: one of them
    assert "do not go together" in capsys.readouterr().err
    del argv[5:7]   # --label_column answer
    assert predict_tool.main(argv + ["--no_score"]) == 0
    assert len(read_csv(runs / "blank-out" / "nli-blank-output.csv")) == 3
    assert json.loads((runs / "blank-out" / "nli-blank-metrics.json").read_text(encoding="utf-8"))["scores"] == {}


def test_input_flags_without_input_and_data_dir_flags_with_it_are_refused(tmp_path, capsys):
    assert predict_tool.main([str(tmp_path), "--columns", "a", "--out", str(tmp_path / "o")]) == 1
    assert "--columns goes with --input" in capsys.readouterr().err
    assert predict_tool.main([str(tmp_path), "--input", "x.csv", "--data_dir", str(tmp_path),
                              "--out", str(tmp_path / "o")]) == 1
    assert "drop --data_dir" in capsys.readouterr().err


def bad(**changes):
    declaration = {**DECLARATION, **changes}
    return {k: v for k, v in declaration.items() if v is not None}


@pytest.mark.parametrize("declaration, field, words", [
    (bad(kind="ranking"), "kind", "unknown kind 'ranking'"),
    (bad(label_column=None), "label_column", "missing"),
    (bad(name="sst"), "name", "built-in"),
    (bad(name="para"), "name", "built-in"),
    (bad(num_classes=1), "num_classes", "from 2 to 10000"),
    (bad(num_classes=10 ** 12), "num_classes", "from 2 to 10000"),     # issue 61: was an allocator traceback
    (bad(name="n" * 250), "name", "at most 40"),                        # was "File name too long" after training
    (bad(name="overall"), "name", "reserved"),                          # TensorBoard's dev/overall is the run's
    (bad(text_columns=["premise"]), "text_columns", "reads 2"),
    (bad(metric="pearson"), "metric", "scored by accuracy"),
    (bad(files={"train": "a.tsv"}), "files", "train and dev"),
    (bad(kind="pair_regression"), "num_classes", "score_range"),
    (bad(kind="pair_regression", num_classes=None, score_range=[1, 1]), "score_range", "low < high"),
    (bad(labels=3), "labels", "unknown field"),
    (bad(name="My Task"), "name", "lower-case"),
    (bad(output_prefix="para"), "output_prefix", "built-in"),         # would write over QQP's prediction files
    (bad(output_prefix="Out/put"), "output_prefix", "lower-case"),
    (bad(prediction_column=""), "prediction_column", "column name"),
])
def test_a_bad_declaration_is_one_line_naming_file_and_field_and_leaves_no_run_folder(
        tmp_path, capsys, declaration, field, words):
    declared = write_declaration(tmp_path / "bad.json", declaration)
    argv = ["--task_file", str(declared), "--tasks", "nli", "--out_dir", str(tmp_path / "runs"), "--run_name", "r",
            "--data_dir", str(tmp_path)]
    assert run_multitask.main(argv) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert str(declared) in err and f"field '{field}'" in err and words in err, err
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize("text, words", [
    ("{not json", "not valid JSON"),
    ("[]", "expected a 'tasks' list"),
    (json.dumps({"tasks": [DECLARATION, DECLARATION]}), "declared twice"),
    (json.dumps({"tasks": [DECLARATION, {**DECLARATION, "name": "nli2", "output_prefix": "nli"}]}), "declared twice"),
])
def test_an_unreadable_task_file_is_one_line(tmp_path, capsys, text, words):
    (tmp_path / "t.json").write_text(text, encoding="utf-8")
    argv = ["--task_file", str(tmp_path / "t.json"), "--tasks", "nli", "--out_dir", str(tmp_path / "runs")]
    assert run_multitask.main(argv) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and words in err and "t.json" in err, err


def test_a_task_file_whose_tasks_tasks_does_not_name_is_refused(tmp_path, capsys):
    declared = write_declaration(tmp_path / "t.json")
    assert run_multitask.main(["--task_file", str(declared), "--out_dir", str(tmp_path / "runs")]) == 1
    assert "names none of them" in capsys.readouterr().err
    assert run_multitask.main(["--tasks", "sst,nli", "--out_dir", str(tmp_path / "runs")]) == 1
    assert "declare nli in a --task_file" in capsys.readouterr().err


def test_yaml_declarations_read_as_json_ones(tmp_path):
    yaml = pytest.importorskip("yaml")
    path = tmp_path / "t.yaml"
    path.write_text(yaml.safe_dump({"tasks": [DECLARATION]}), encoding="utf-8")
    assert task_file.read_task_file(path) == task_file.read_task_file(write_declaration(tmp_path / "t.json"))


def test_each_kind_gets_its_head_loss_and_prediction():
    single = task_schema.task_from_declaration(task_declarations.check_declaration(
        bad(kind="classification", text_columns="premise", num_classes=4), "test"))
    model = run_multitask.RunConfig.defaults().model
    assert not single.is_pair and single.head(8, model)(torch.zeros(2, 8)).shape == (2, 4)
    binary = task_schema.task_from_declaration(task_declarations.check_declaration(bad(num_classes=2), "test"))
    assert binary.divergence == "binary" and binary.head(8, model)(torch.zeros(2, 8), torch.ones(2, 8)).shape == (2,)
    multi = task_schema.task_from_declaration(task_declarations.check_declaration(DECLARATION, "test"))
    assert multi.divergence == "multiclass"
    assert multi.head(8, model)(torch.zeros(2, 8), torch.ones(2, 8)).shape == (2, 3)
    regression = task_schema.task_from_declaration(task_declarations.check_declaration(
        bad(kind="pair_regression", num_classes=None, score_range=[-1, 1]), "test"))
    assert regression.metric_name == "pearson" and regression.score_range == (-1.0, 1.0)
    # the head's 0..5 scale maps onto the declared range, both ways
    assert torch.allclose(regression.predict(torch.tensor([0.0, 2.5, 5.0, 7.0])), torch.tensor([-1.0, 0.0, 1.0, 1.0]))
    assert regression.loss(torch.tensor([2.5]), torch.tensor([0.0])).item() == 0.0


def test_read_examples_takes_commas_and_line_numbers_as_ids(tmp_path):
    path = tmp_path / "x.csv"
    path.write_text('s,label\n"a, b",1\nc,0\n', encoding="utf-8")
    examples, _ = read_examples(path, FileLayout(["s"], "label", id_column=None, delimiter=","))
    assert [(e.id, e.texts, e.label) for e in examples] == [("2", ("a, b",), 1), ("3", ("c",), 0)]


def test_a_bad_yaml_file_is_one_line(tmp_path, capsys):
    pytest.importorskip("yaml")
    (tmp_path / "t.yaml").write_text("tasks: [unclosed\n", encoding="utf-8")
    assert run_multitask.main(["--task_file", str(tmp_path / "t.yaml"), "--tasks", "nli"]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "not valid YAML" in err and "t.yaml" in err, err


def test_a_data_file_without_a_declared_column_is_one_line_and_leaves_nothing(tmp_path, tiny_model_dir, capsys):
    data = make_data(tmp_path / "data")
    declared = write_declaration(tmp_path / "t.json", bad(label_column="verdict"))
    assert train(tmp_path, tiny_model_dir, data, "nli", declared, "r") == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "nli-train.tsv: missing column 'verdict'" in err, err
    assert not (tmp_path / "runs" / "r").exists()


@pytest.mark.slow
def test_a_cut_run_of_a_declared_task_resumes_to_the_same_run(tmp_path, tiny_model_dir):
    """A run of SST and the declared task stopped after its second checkpoint, its task file deleted and
    the task forgotten (a fresh process), resumes to the uninterrupted run's weights, metrics and CSVs."""
    from test_resume import argv, list_checkpoints, one_thread
    data = make_data(tmp_path / "data", with_builtin=True)
    declared = write_declaration(tmp_path / "my_tasks.json")
    flags = [*argv(tiny_model_dir, tmp_path / "runs", "clean", "--epochs", "2", "--tasks", "sst,nli",
                   "--task_file", str(declared)), "--data_dir", str(data)]   # the last --data_dir wins
    with one_thread():
        assert run_multitask.main(flags) == 0
    clean = tmp_path / "runs" / "clean"
    assert len(list_checkpoints(clean)) > 2
    declared.unlink()
    resumed = tmp_path / "resumed"
    shutil.copytree(clean, resumed)
    for later in list_checkpoints(resumed)[2:]:   # stopped after its second checkpoint, before its outputs
        shutil.rmtree(later)
    outputs = ["nli-dev-output.csv", "nli-test-output.csv", "sst-dev-output.csv"]
    for name in outputs:
        (resumed / name).unlink()
    with one_thread():
        assert run_multitask.main(["--resume", str(resumed), "--quiet"]) == 0
    for name in outputs:
        assert (resumed / name).read_text() == (clean / name).read_text(), name
    done, uncut = (json.loads((folder / "metrics.json").read_text(encoding="utf-8")) for folder in (resumed, clean))
    assert done["dev"] == uncut["dev"] and [e["dev"] for e in done["epochs"]] == [e["dev"] for e in uncut["epochs"]]
    from safetensors.torch import load_file
    a, b = (load_file(str(folder / "checkpoint" / "model.safetensors")) for folder in (resumed, clean))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


# ---- one source of truth for a run's tasks (issue 61) --------------------------------------------------------

def saved_run_config(path: Path, *declarations) -> Path:
    """A run's saved configuration (as checkpoint/run_config.json holds it): its declarations and tasks."""
    saved = run_multitask.parse_config(["--tasks", "nli"]).to_dict()
    saved["data"]["own_tasks"] = [task_declarations.check_declaration(d, "test") for d in declarations or [DECLARATION]]
    path.write_text(json.dumps(saved), encoding="utf-8")
    return path


def test_config_declarations_and_a_task_file_agree_or_the_run_is_refused(tmp_path, capsys):
    """A saved configuration's 3-class nli and a --task_file declaring it with 4 classes trained the saved
    head, rc 0, metrics.json recording both: now one usage line names both and the field."""
    config = saved_run_config(tmp_path / "run_config.json")
    same = write_declaration(tmp_path / "same.json")
    parsed = run_multitask.parse_config(["--config", str(config), "--task_file", str(same)])
    assert parsed.data.own_tasks[0]["num_classes"] == 3 and parsed.data.task_file == str(same)
    edited = write_declaration(tmp_path / "edited.json", {**DECLARATION, "num_classes": 4})
    with pytest.raises(SystemExit) as stop:
        run_multitask.parse_config(["--config", str(config), "--task_file", str(edited)])
    assert stop.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert f"--task_file {edited} and --config {config} declare the tasks differently" in err
    assert "task 'nli', field 'num_classes': 4 against 3" in err
    other = write_declaration(tmp_path / "other.json", {**DECLARATION, "name": "topic"})
    with pytest.raises(SystemExit):
        run_multitask.parse_config(["--config", str(config), "--task_file", str(other)])
    assert "it declares topic, --config" in capsys.readouterr().err


@pytest.mark.slow
def test_resume_with_the_run_s_task_file_continues_and_an_edited_one_is_named(tmp_path, tiny_model_dir, capsys):
    """--resume RUN --task_file same.json answered '--tasks sst,qqp,sts names none of them' (the default tasks,
    not the run's), and an edited file was refused as '--own_tasks [{...'. A run stopped before its first
    checkpoint (metrics.json says interrupted) restarts with the same file; an edited one is one line naming
    the file and the run's saved declarations."""
    data, declared = make_data(tmp_path / "data"), write_declaration(tmp_path / "t.json")
    assert train(tmp_path, tiny_model_dir, data, "nli", declared, "r") == 0
    folder = tmp_path / "runs" / "r"
    metrics = json.loads((folder / "metrics.json").read_text())
    (folder / "metrics.json").write_text(json.dumps({**metrics, "status": "interrupted"}))
    edited = write_declaration(tmp_path / "edited.json", {**DECLARATION, "num_classes": 4})
    assert run_multitask.main(["--resume", str(folder), "--task_file", str(edited), "--quiet"]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"--task_file {edited} and the run's saved declarations" in err, err
    assert "field 'num_classes': 4 against 3" in err and "own_tasks" not in err
    assert run_multitask.main(["--resume", str(folder), "--task_file", str(declared), "--quiet"]) == 0, \
        capsys.readouterr().err
    assert json.loads((folder / "metrics.json").read_text())["status"] == "finished"


def test_a_run_s_tasks_are_its_own_not_a_shared_table(tmp_path):
    """Two configurations in one process that declare the same name differently each keep their own row: tasks
    are built from the configuration, never registered into a module-global table (issue 60, item 1)."""
    three = run_multitask.parse_config(["--task_file", str(write_declaration(tmp_path / "3.json")), "--tasks", "nli"])
    four = run_multitask.parse_config(["--task_file", str(write_declaration(tmp_path / "4.json", bad(num_classes=4))),
                                       "--tasks", "nli"])
    three, four = three.validate(), four.validate()
    assert known_tasks(three.data)["nli"].num_classes == 3 and known_tasks(four.data)["nli"].num_classes == 4
    assert "nli" not in known_tasks(run_multitask.parse_config([]).data)


def test_a_declared_regression_trains_with_sts_loss_on_its_mapped_scale():
    """A declared pair regression is STS's kind of head: --sts_loss reaches it (it was MSE whatever the flag),
    on the gold scores mapped onto the head's 0..5 scale; on 0..5 itself it is STS's row."""
    declared = task_schema.task_from_declaration(task_declarations.check_declaration(
        bad(kind="pair_regression", num_classes=None, score_range=[1, 3]), "test"))
    head = declared.head(8, ModelConfig(sts_loss="cosent"))
    scores, gold = torch.tensor([1.0, 4.0, 2.0]), torch.tensor([1.5, 2.5, 3.0])
    assert head.loss is not None
    assert head.loss(scores, gold).item() == pytest.approx(sts_losses.cosent_loss(scores, (gold - 1) * 2.5).item())
    assert declared.head(8, ModelConfig(sts_loss="mse")).loss is None   # the task's own: MSE on the mapped scale
    assert declared.loss(torch.tensor([2.5]), torch.tensor([2.0])).item() == 0.0
