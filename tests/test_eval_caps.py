"""Smoke-run caps (issue 58): ``--max_eval_examples N`` scores the first N examples of each task's dev file
and writes those N rows, ``--no_test_predictions`` predicts no test file; both are saved with the run,
kept by ``--resume``, and the report marks a capped run and never pools or compares it with uncapped
ones. Also ``--device cuda:N``. One tiny run (the fixture model and data, about 4 s) serves the fast tests."""
import csv
import json
import shlex
from pathlib import Path

import pytest
import torch

import run_multitask
from test_model_card import assert_reproduces, command_line, section
from test_report import SEEDS, markdown_rows, predictions, write_dev_files, write_run
from training.tools import predict as predict_tool
from training.tools.report import (collect_runs, compare_to_baselines, read_run, render_compact, render_markdown,
                                   write_csv)
from training.harness.run_folder import resumed_config

FIXTURE_DATA = Path(__file__).parent / "fixtures" / "data"
CAP = 3
DEV_FILES = {"sst-dev-output.csv": "ids-sst-dev.csv", "para-dev-output.csv": "quora-dev.csv",
             "sts-dev-output.csv": "sts-dev.csv"}


def tiny_run(out: Path, model_dir: Path, name: str, *extra: str) -> Path:
    """One epoch of one round on the fixture data; ``extra`` flags on top."""
    assert run_multitask.main(["--data_dir", str(FIXTURE_DATA), "--model", str(model_dir), "--epochs", "1",
                               "--max_steps_per_epoch", "1", "--batch_size", "4", "--max_length", "24",
                               "--out_dir", str(out), "--run_name", name, "--quiet", *extra]) == 0
    return out / name


def csv_ids(path: Path, delimiter: str = ",") -> list[str]:
    with open(path, encoding="utf-8", newline="") as f:
        return [row["id"] for row in csv.DictReader(f, delimiter=delimiter)]


def file_ids(name: str) -> list[str]:
    """The ids of a fixture dev file, in file order (tab-separated, as the CS224N files are)."""
    return csv_ids(FIXTURE_DATA / name, "\t")


@pytest.fixture(scope="module")
def capped(tiny_model_dir, tmp_path_factory) -> Path:
    """A run with both caps, evaluating every 2 of its 3 steps (and after the last) with early stopping on."""
    return tiny_run(tmp_path_factory.mktemp("runs"), tiny_model_dir, "capped", "--max_eval_examples", str(CAP),
                    "--no_test_predictions", "--eval_every", "2", "--early_stopping", "1")


def test_a_capped_run_scores_and_writes_the_first_n_dev_examples(capped):
    metrics = json.loads((capped / "metrics.json").read_text())
    assert metrics["status"] == "finished"
    assert metrics["dev_examples"] == {"sst": CAP, "qqp": CAP, "sts": CAP}
    for output, data_file in DEV_FILES.items():
        assert csv_ids(capped / output) == file_ids(data_file)[:CAP], output
    gold = {row["id"]: int(row["sentiment"]) for row in csv.DictReader(
        open(FIXTURE_DATA / "ids-sst-dev.csv", encoding="utf-8", newline=""), delimiter="\t")}
    with open(capped / "sst-dev-output.csv", encoding="utf-8", newline="") as f:
        written = {row["id"]: int(row["Predicted_Sentiment"]) for row in csv.DictReader(f)}
    assert metrics["dev"]["sst"] == pytest.approx(sum(written[i] == gold[i] for i in written) / CAP)
    assert all(record["dev"] for record in metrics["evaluations"])   # --eval_every scored the same subset


def test_the_caps_are_saved_and_no_test_file_is_read_or_written(capped):
    metrics = json.loads((capped / "metrics.json").read_text())
    assert metrics["config"]["data"]["max_eval_examples"] == CAP
    assert metrics["config"]["output"]["test_predictions"] is False
    assert sorted(metrics["prediction_files"]) == sorted(DEV_FILES) and metrics["skipped_prediction_files"] == []
    assert not list(capped.glob("*-test-output.csv"))
    assert not any("test" in name for name in metrics["data"])   # not read, not fingerprinted
    card = (capped / "checkpoint" / "README.md").read_text(encoding="utf-8")
    assert f"--max_eval_examples {CAP}" in card   # the command that trains it again keeps the cap


def test_the_card_says_the_run_is_capped_and_its_command_reproduces_the_run(capped):
    """Issue 87, item 5: the card's dev scores say they are on the first CAP examples of each dev file (the
    fixture's dev files are all longer), and its command, parsed back, is the run's saved configuration:
    --no_test_predictions, the cap, --eval_every and --early_stopping included."""
    metrics = json.loads((capped / "metrics.json").read_text())
    card = (capped / "checkpoint" / "README.md").read_text(encoding="utf-8")
    scores = section(card, "Scores")
    assert (f"Capped (`--max_eval_examples {CAP}`): the dev scores are on the first {CAP} examples of each task's "
            f"dev file, not comparable with scores on whole dev files;") in scores
    assert f"| task | metric | dev (first {CAP}) |" in scores
    scored = [value for value in metrics["dev"].values() if isinstance(value, (int, float))]   # the model-index's
    assert card.split("---\n")[1].count(f'split: "dev[:{CAP}]"}}') == len(scored) and "split: dev}" not in card
    assert "--no_test_predictions" in shlex.split(command_line(card))
    assert_reproduces(card, metrics["config"])


def test_resume_keeps_the_saved_caps_and_refuses_other_ones(capped):
    saved = json.loads((capped / "metrics.json").read_text())["config"]
    config = resumed_config(run_multitask.parse_config(["--resume", str(capped)]), saved, capped / "metrics.json")
    assert (config.data.max_eval_examples, config.output.test_predictions) == (CAP, False)
    with pytest.raises(ValueError, match="--max_eval_examples 5"):
        resumed_config(run_multitask.parse_config(["--resume", str(capped), "--max_eval_examples", "5"]), saved,
                       capped / "metrics.json")


def test_predict_on_a_capped_run_predicts_whole_files(capped, tmp_path, capsys):
    assert predict_tool.main([str(capped), "--data_dir", str(FIXTURE_DATA), "--out", str(tmp_path / "p")]) == 0
    assert csv_ids(tmp_path / "p" / "sst-dev-output.csv") == file_ids("ids-sst-dev.csv")
    assert (tmp_path / "p" / "sst-test-output.csv").is_file()


def test_the_report_marks_the_capped_run(capped):
    row = read_run(capped)
    assert row.dev_cap == CAP and row.status == "finished"
    assert row.status_cell() == f"finished, capped: dev scored on {CAP} examples"


def test_an_uncapped_run_of_the_same_fixture_has_every_row(tiny_model_dir, tmp_path):
    run_dir = tiny_run(tmp_path, tiny_model_dir, "full")
    for output, data_file in DEV_FILES.items():
        assert csv_ids(run_dir / output) == file_ids(data_file), output
    assert len(list(run_dir.glob("*-test-output.csv"))) == 3
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert metrics["config"]["data"]["max_eval_examples"] is None and metrics["config"]["output"]["test_predictions"]
    assert metrics["dev_examples"] == {"sst": 10, "qqp": 12, "sts": 10}


def test_a_cap_below_one_is_refused(tmp_path, tiny_model_dir, capsys):
    assert run_multitask.main(["--data_dir", str(FIXTURE_DATA), "--model", str(tiny_model_dir),
                               "--out_dir", str(tmp_path), "--max_eval_examples", "0"]) == 1
    assert "--max_eval_examples must be at least 1" in capsys.readouterr().err and not any(tmp_path.iterdir())


def test_max_eval_examples_none_is_no_cap():
    assert run_multitask.parse_config(["--max_eval_examples", "none"]).data.max_eval_examples is None
    assert run_multitask.parse_config([]).output.test_predictions is True


# --- the report: a capped run is marked, never pooled with uncapped seeds, never compared ---

def cap_run(folder: Path, cap: int) -> None:
    """Make a written run folder a capped one: its config says so and its dev files hold the first ``cap`` rows
    (``write_run`` writes the ids in reverse: the first ``cap`` examples are its last lines)."""
    metrics = json.loads((folder / "metrics.json").read_text())
    metrics["config"]["data"]["max_eval_examples"] = cap
    (folder / "metrics.json").write_text(json.dumps(metrics))
    for path in folder.glob("*-dev-output.csv"):
        lines = path.read_text().splitlines()
        path.write_text("\n".join(lines[:1] + lines[-cap:]) + "\n")


@pytest.fixture(scope="module")
def table(tmp_path_factory):
    """FT (3 seeds) and pre-QQP (3 seeds), uncapped; a fourth FT seed and two pre-QQP seeds capped (a
    one-seed row is named without its seed, so the capped FT row has FT's name: the status tells them apart)."""
    root = tmp_path_factory.mktemp("capped-table")
    gold = write_dev_files(root / "data")
    out = root / "runs"
    out.mkdir()
    for row, skill, flags in (("ft", 0.5, {}), ("mean-preqqp", 0.9, {"pre_qqp": True})):
        for seed in SEEDS:
            write_run(out, f"ablate-{row}-s{seed}", seed, predictions(gold, skill, seed), gold, root / "data", **flags)
    write_run(out, "ablate-ft-s11714", 11714, predictions(gold, 0.5, 11714), gold, root / "data")
    cap_run(out / "ablate-ft-s11714", 50)
    for seed in (11715, 11716):
        write_run(out, f"ablate-smoke-preqqp-s{seed}", seed, predictions(gold, 0.9, seed), gold, root / "data",
                  pre_qqp=True)
        cap_run(out / f"ablate-smoke-preqqp-s{seed}", 50)
    rows = collect_runs(out)
    footer, notes = compare_to_baselines(rows, resamples=200)
    return rows, footer, notes


def test_a_capped_seed_is_not_pooled_with_uncapped_ones_and_capped_rows_come_last(table):
    rows, _, _ = table
    assert [(row.run, row.dev_cap, [run.seed for run in row.seed_runs]) for row in rows] == [
        ("ablate-mean-preqqp", None, list(SEEDS)), ("ablate-ft", None, list(SEEDS)),   # by average, uncapped first
        ("ablate-smoke-preqqp", 50, [11715, 11716]), ("ablate-ft", 50, [11714])]


def test_capped_rows_are_compared_only_with_rows_capped_alike(table):
    """Issue 75: rows capped at the same N (the same dev examples) are compared with each other, the capped FT row
    their baseline; capped and uncapped never are."""
    rows, footer, notes = table
    assert [row.vs_ft is not None for row in rows] == [True, False, True, False]   # each pre-QQP against its own FT
    assert "(uncapped: ablate-ft; capped at 50: ablate-ft)" in footer and notes == []


def test_both_views_mark_the_capped_rows_and_explain_the_mark(table):
    rows, footer, _ = table
    compact = render_compact(rows, footer).splitlines()   # its last column is cut to fit: the seeds carry the mark
    assert [("†" in line, line.split("  ")[0].strip()) for line in compact[1:5]] == [
        (False, "ablate-mean-preqqp"), (False, "ablate-ft (FT)"), (True, "ablate-smoke-preqqp"),
        (True, "ablate-ft (FT)")]
    assert " 2† " in compact[3] and " 1† " in compact[4]
    assert "capped (†) = a smoke run" in " ".join(compact) and "(--max_eval_examples N)" in " ".join(compact)
    markdown = render_markdown(rows, footer)
    assert markdown.count("| finished, capped: dev scored on 50 examples |") == 2
    assert "(--max_eval_examples N)" in markdown


def test_the_markdown_marks_a_capped_rows_seeds_as_its_note_says_and_the_csv_keeps_a_number(table, tmp_path):
    """Issue 87, item 5: the note under the Markdown table explains "capped (†)", so its capped rows carry the †
    (after the seed count, as in the terminal view); the CSV's seeds stay a number, its status says capped."""
    rows, footer, _ = table
    header, _, *lines = markdown_rows(render_markdown(rows, footer))
    assert [line[header.index("seeds")] for line in lines] == ["3", "3", "2†", "1†"]
    write_csv(rows, tmp_path / "t.csv")
    with open(tmp_path / "t.csv", encoding="utf-8", newline="") as f:
        written = list(csv.DictReader(f))
    assert [line["seeds"] for line in written] == ["3", "3", "2", "1"]
    capped_status = "finished, capped: dev scored on 50 examples"
    assert [line["status"] for line in written] == ["finished", "finished", capped_status, capped_status]


# --- --device ---

@pytest.mark.parametrize("given, parsed", [("cuda:1", "cuda:1"), ("cuda", "cuda"), ("cpu", "cpu"), ("auto", "auto"),
                                           ("cuda:01", "cuda:1")])
def test_device_takes_auto_cpu_cuda_and_cuda_n(given, parsed):
    assert run_multitask.parse_config(["--device", given]).train.device == parsed


@pytest.mark.parametrize("given", ["cuda:x", "gpu", "cpu:1", "cuda:", "cuda:-1"])
def test_any_other_device_is_one_usage_line(given, capsys):
    with pytest.raises(SystemExit) as exit_info:
        run_multitask.parse_config([f"--device={given}"])
    assert exit_info.value.code == 2
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert "error: argument --device:" in error and "cuda:N" in error


def test_a_config_file_takes_cuda_n_and_refuses_other_devices(tmp_path, capsys):
    file = tmp_path / "recipe.json"
    file.write_text(json.dumps({"train": {"device": "cuda:1"}}))
    assert run_multitask.parse_config(["--config", str(file)]).train.device == "cuda:1"
    file.write_text(json.dumps({"device": "gpu"}))
    with pytest.raises(SystemExit) as exit_info:
        run_multitask.parse_config(["--config", str(file)])
    assert exit_info.value.code == 2 and f"--config {file}: device: 'gpu'" in capsys.readouterr().err


def test_the_tools_device_flag_takes_cuda_n():
    assert predict_tool.build_parser().parse_args(["run", "--out", "x", "--device", "cuda:2"]).device == "cuda:2"


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_cuda_n_without_a_gpu_is_one_error_line_and_exit_1(tmp_path, tiny_model_dir, capsys):
    assert run_multitask.main(["--device", "cuda:0", "--data_dir", str(FIXTURE_DATA), "--model", str(tiny_model_dir),
                               "--out_dir", str(tmp_path)]) == 1
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "no CUDA device is available" in err and "Traceback" not in err
    assert not any(tmp_path.iterdir())
