"""training.tools.report on hand-written run folders (tests/fixtures/runs, and seed groups with dev predictions
built here), and scripts/ablate.sh's interface.

Nothing here trains: ablate.sh is exercised with --help, --list, --dry_run and a stand-in interpreter.
"""
import csv
import itertools
import json
import os
import shlex
import shutil
import stat
import statistics
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from scipy.stats import pearsonr

import run_multitask
from training.configuration.sections import TrainConfig
from training.extensions import EXTENSIONS, ideas
from training.extensions.base import saved_flag
from training.learning.task_schema import BUILTIN_TASKS
from training.tools.bootstrap import resample_counts, weighted_metric
from training.tools.grid import compatible, grid_rows, together
from training.tools.latex import escape
from training.tools.report import (RunRow, collect_runs, columns, compare_to_baselines, csv_columns, forest_panels,
                                   main, render_markdown, seed_group_key, sort_rows, write_csv)
from training.tools.table_settings import shown_settings

COLUMNS = columns()

ROOT = Path(__file__).resolve().parent.parent
RUNS = Path(__file__).parent / "fixtures" / "runs"
ABLATE = ROOT / "scripts" / "ablate.sh"

# Worked by hand from the fixtures' dev metrics: (SST + QQP + (STS + 1) / 2) / 3.
EXPECTED_AVERAGE = {
    "ablate-mean-smart": (0.47 + 0.76 + 0.91) / 3,      # 0.71333
    "ablate-ft": (0.45 + 0.75 + 0.90) / 3,              # 0.7
    "ablate-cls-preqqp-ucl": (0.44 + 0.78 + 0.85) / 3,  # 0.69
    "ablate-pt": (0.30 + 0.62 + 0.55) / 3,              # 0.49
}
UNFINISHED = ["ablate-corrupt", "ablate-csv-only", "ablate-failed", "ablate-running"]  # by name, last


def markdown_rows(text: str) -> list[list[str]]:
    """Cells of every table line (header and separator included), split on unescaped '|'."""
    rows = []
    for line in text.splitlines():
        if line.startswith("|"):
            cells = line.replace("\\|", "\0").strip().strip("|").split("|")
            rows.append([c.strip().replace("\0", "|") for c in cells])
    return rows


def cells_by_run(text: str) -> dict[str, dict[str, str]]:
    """Each line of the Markdown table in ``text``: its run cell -> its cells by the table's own header."""
    header, _, *lines = markdown_rows(text)
    return {line[0]: dict(zip(header, line)) for line in lines}


def tabular(text: str) -> list[list[str]]:
    """The cells of each line of a LaTeX table between \\toprule and \\bottomrule, the rules left out."""
    lines = text.splitlines()
    body = lines[lines.index(r"\toprule") + 1:lines.index(r"\bottomrule")]
    return [[cell.strip() for cell in line.removesuffix(r" \\").split(" & ")] for line in body if line != r"\midrule"]


def by_run(rows):
    return {row.run: row for row in rows}


@pytest.fixture(scope="module")
def rows():
    return collect_runs(RUNS)


# The settings the fixture's runs differ in (their configurations as this version reads them: a field a run did not
# save takes its default), each a column after "run"; those they share are said above the table.
FIXTURE_SETTINGS = ["pooling", "U-CL", "S-CL", "pre-QQP", "joint-loss", "SMART",   # the table's own, in their order
                    "epochs", "lr", "max_steps_per_epoch", "loss_weights"]          # the others, in config order
FIXTURE_ALL_ROWS = ("All rows: rr min, private_layers 0, para_head concat, sts_head cosine, pair_projection none, "
                    "sts_loss mse; every other extension off.")


def test_columns_are_the_settings_that_differ_seeds_tasks_comparison_wall_time_and_status(rows):
    assert COLUMNS == ["run", "seeds", "SST acc", "QQP acc", "STS Pearson", "average", "Δ vs FT", "95% CI",
                       "wall (min)", "status"]
    assert columns(["cfimdb"])[-7:] == ["seeds", "CFIMDB acc", "average", "Δ vs FT", "95% CI", "wall (min)", "status"]
    assert csv_columns() == [*COLUMNS[:2], "SST acc", "SST acc std", "QQP acc", "QQP acc std", "STS Pearson",
                             "STS Pearson std", "average", "average std", "Δ vs FT", "95% CI low", "95% CI high",
                             "95% CI excludes 0", "wall (min)", "status"]
    markdown = render_markdown(rows)
    table = markdown_rows(markdown)
    assert table[0] == ["run", *FIXTURE_SETTINGS, *COLUMNS[1:]]
    assert all(len(line) == len(table[0]) for line in table)
    assert markdown.startswith(FIXTURE_ALL_ROWS + "\n\n| run |")   # the settings every row shares: one line above
    for left_out in ("LCL", "PCGrad", "rr", "private_layers", "option", "seed", "device", "data_dir", "run_name"):
        assert left_out not in table[0]


def test_every_run_folder_is_listed_and_non_runs_are_ignored(rows):
    assert sorted(r.run for r in rows) == sorted([*EXPECTED_AVERAGE, *UNFINISHED])
    assert "not-a-run" not in by_run(rows) and "README.md" not in by_run(rows)


def test_sorted_by_average_then_unfinished_by_name(rows):
    assert [r.run for r in rows] == [*EXPECTED_AVERAGE, *UNFINISHED]
    by_name = collect_runs(RUNS, sort="name")
    assert [r.run for r in by_name] == [*sorted(EXPECTED_AVERAGE), *UNFINISHED]


def test_average_is_the_cs224n_overall_score(rows):
    for name, expected in EXPECTED_AVERAGE.items():
        assert by_run(rows)[name].average == pytest.approx(expected, abs=1e-12), name
    row = by_run(rows)["ablate-mean-smart"]
    assert row.dev == {"sst": 0.47, "qqp": 0.76, "sts": 0.82}


def test_flag_marks_pooling_settings_and_baselines(rows):
    table = cells_by_run(render_markdown(rows))
    flags = ["pre-QQP", "pooling", "joint-loss", "SMART", "U-CL", "S-CL", "epochs", "lr", "max_steps_per_epoch",
             "loss_weights"]
    expected = {   # – : an extension's setting (--loss_weights) in a row that has the extension off
        "ablate-pt (PT)": ["×", "MEAN", "×", "×", "×", "×", "1", "5e-05", "30", "–"],
        "ablate-ft (FT)": ["×", "MEAN", "×", "×", "×", "×", "1", "5e-05", "30", "–"],   # no smart/contrastive: off
        "ablate-mean-smart": ["×", "MEAN", "×", "✓", "×", "×", "1", "5e-05", "30", "–"],
        "ablate-cls-preqqp-ucl": ["✓", "CLS", "×", "×", "✓", "×", "1", "5e-05", "30", "–"],
        "ablate-running": ["×", "CLS", "✓", "×", "×", "✓", "3", "0.0001", "none", "none"],   # unsaved: the defaults
        "ablate-failed": ["×", "MEAN", "✓", "×", "×", "×", "3", "0.0001", "none", "1,2"],
        "ablate-corrupt": [""] * 10,            # no readable config: unknown, not "off"
        "ablate-csv-only": [""] * 10,
    }
    assert set(table) == set(expected)
    for run, marks in expected.items():
        assert [table[run][c] for c in flags] == marks, run


def test_markdown_numbers_have_three_decimals_and_wall_minutes_one(rows):
    header, _, line, *_ = markdown_rows(render_markdown(rows))
    line = dict(zip(header, line))
    assert line["run"] == "ablate-mean-smart"
    assert [line[c] for c in ("SST acc", "QQP acc", "STS Pearson", "average", "wall (min)")] == \
        ["0.470", "0.760", "0.820", "0.713", "5.2"]   # 315 s


def test_unfinished_runs_show_status_and_blank_metrics(rows):
    table = cells_by_run(render_markdown(rows))
    assert table["ablate-running"]["status"] == "incomplete (running)"
    assert table["ablate-csv-only"]["status"] == "incomplete (no metrics.json)"
    assert table["ablate-corrupt"]["status"] == "corrupt metrics.json"
    failed = table["ablate-failed"]["status"]
    assert failed.startswith("failed: ValueError: --loss_weights") and "w_sst|w_qqp|w_sts, got '1,2'" in failed
    for run in UNFINISHED:
        assert all(table[run][c] == "" for c in ("SST acc", "QQP acc", "STS Pearson", "average")), run
    assert table["ablate-running"]["wall (min)"] == "2.0"


def test_csv_has_the_same_rows_at_full_precision(rows, tmp_path):
    write_csv(rows, tmp_path / "t.csv")
    with open(tmp_path / "t.csv", encoding="utf-8", newline="") as f:
        lines = list(csv.reader(f))
    table = markdown_rows(render_markdown(rows))
    assert lines[0] == ["run", *FIXTURE_SETTINGS, *csv_columns()[1:]]   # the Markdown table's settings columns
    assert len(lines) == len(table) - 1   # no separator line
    numeric = {"SST acc", "QQP acc", "STS Pearson", "average", "wall (min)"}
    for csv_line, md_line in zip(lines[1:], table[2:]):
        csv_cells, md_cells = dict(zip(lines[0], csv_line)), dict(zip(table[0], md_line))
        for column, md_cell in md_cells.items():
            if column in numeric and md_cell:
                assert f"{float(csv_cells[column]):.{1 if column == 'wall (min)' else 3}f}" == md_cell
                assert csv_cells.get(f"{column} std", "") == ""   # one seed: no spread
            elif column != "95% CI":   # the interval's ends have CSV columns of their own
                assert csv_cells[column] == md_cell, column
    first = dict(zip(lines[0], lines[1]))
    assert float(first["average"]) == pytest.approx(EXPECTED_AVERAGE["ablate-mean-smart"], abs=1e-15)
    assert float(first["wall (min)"]) == 5.25


def test_main_writes_markdown_and_csv_and_prints_the_table(tmp_path, capsys):
    prefix = tmp_path / "out" / "table"
    assert main([str(RUNS), "--out", str(prefix), "--full"]) == 0
    printed = capsys.readouterr().out
    assert (tmp_path / "out" / "table.md").read_text(encoding="utf-8") == printed
    assert markdown_rows(printed)[0] == ["run", *FIXTURE_SETTINGS, *COLUMNS[1:]]
    with open(tmp_path / "out" / "table.csv", encoding="utf-8", newline="") as f:
        assert len(list(csv.reader(f))) == 1 + len(EXPECTED_AVERAGE) + len(UNFINISHED)


def test_main_out_in_the_runs_folder_and_reruns_ignore_the_table(tmp_path, capsys):
    runs = tmp_path / "runs"
    shutil.copytree(RUNS, runs)
    assert main([str(runs), "--out", str(runs / "ablation")]) == 0
    first = capsys.readouterr().out
    assert (runs / "ablation.md").is_file() and (runs / "ablation.csv").is_file()
    assert main([str(runs), "--sort", "average", "--out", str(runs / "ablation")]) == 0
    assert capsys.readouterr().out == first


def test_main_on_a_missing_folder_is_one_error_line(tmp_path, capsys):
    assert main([str(tmp_path / "nope")]) == 1
    assert "no such folder" in capsys.readouterr().err


def test_finished_run_with_a_null_metric_is_listed_last(tmp_path):
    run = tmp_path / "nan-run"
    run.mkdir()
    (run / "metrics.json").write_text(json.dumps({"status": "finished", "config": {},
                                                  "dev": {"sst": 0.5, "qqp": 0.7, "sts": None}}))
    (row,) = collect_runs(tmp_path)
    assert row.average is None and row.status == "finished, dev metrics missing"
    assert row.flags == {e.name: False for e in EXTENSIONS}   # the ideas with a column: the extensions


def test_saved_flag_looks_in_any_section():
    find_flag = saved_flag
    config = {"model": {"pooling": "cls"}, "train": {"smart": True}, "extra": {"deep": {"ucl": True}}}
    assert find_flag(config, "pooling") == "cls"
    assert find_flag(config, "smart") is True            # in a section other than "smart"
    assert find_flag(config, "ucl") is True              # nested deeper
    assert find_flag(config, "scl") is None
    assert find_flag(config, "option", "finetune") == "finetune"
    assert find_flag({"smart": {"smart": False}}, "smart") is False   # section and flag share a name


def test_the_terminal_view_is_compact_and_holds_the_same_numbers(capsys):
    assert main([str(RUNS)]) == 0
    compact = capsys.readouterr().out.splitlines()
    assert compact[0].split() == ["run", "seeds", "SST", "QQP", "STS", "average", "Δ", "vs", "FT", "95%", "CI", "status"]
    assert max(len(line) for line in compact) <= 120      # the footer wrapped too
    rows = collect_runs(RUNS)
    for line, row in zip(compact[1:], rows):
        assert line.split()[0] == row.run.split()[0] and (row.average is None or f"{row.average:.3f}" in line)


def test_the_terminal_view_fits_120_columns_however_wide_the_table():
    """Long run names, a vs-alone column per task and a long status: the vs-alone columns get a block of
    their own, run names are cut (to no fewer than MIN_RUN_WIDTH, marked …), then whatever still
    overflows; the footer is wrapped. A single-task row's "average" (its one metric) stays blank."""
    from training.tools.bootstrap import Difference
    from training.tools.report import MIN_RUN_WIDTH, RunRow, render_compact

    d = Difference(0.0123, -0.004, 0.0281)
    dev = {"sst": 0.4961, "qqp": 0.8361, "sts": 0.8812}
    rows = [RunRow(run=f"pcgrad-anneal-private2-with-a-very-long-name-{i}", status="finished", dev=dev, average=0.75,
                   vs_ft=d, vs_alone={task: d for task in dev}) for i in range(3)]
    rows += [RunRow(run="st-sts", status="finished", baseline="ST", dev={"sts": 0.885}, average=0.9425),
             RunRow(run="stopped", status="interrupted at epoch 2 of 3 by SIGTERM, resumable with --resume " * 2)]
    view = render_compact(rows, footer="Δ vs FT = average minus that of ft. " * 12)
    lines = view.splitlines()
    assert max(map(len, lines)) <= 120
    assert lines[1].startswith(rows[0].run[:MIN_RUN_WIDTH - 1] + "… ")
    header = next(line for line in lines if "vs alone" in line)
    assert header.split() == ["run", "SST", "vs", "alone", "QQP", "vs", "alone", "STS", "vs", "alone"]
    assert "+0.012 [-0.004, +0.028]" in lines[lines.index(header) + 1]
    st = next(line for line in lines if line.startswith("st-sts"))
    assert "0.885" in st and "0.943" not in st
    assert sum(line.startswith("Δ vs FT = average") for line in lines) == 1 and lines[-1].endswith("ft.")
    roomy = render_compact(rows[:1], width=400)        # room enough: nothing cut
    assert rows[0].run + " " in roomy and "…" not in roomy


def test_a_new_column_is_one_entry_of_table_columns(rows, tmp_path, monkeypatch):
    """A toy column added to ``table_columns`` reaches the Markdown table, the terminal view and the CSV (with
    CSV headers and cells of its own); taken away again, the table is as it was: no view lists columns itself."""
    from training.tools import report

    toy = report.Column("toy", lambda row: f"<{len(row.run)}>", lambda row: [row.run.upper(), str(len(row.run))],
                        ("toy", "toy length"), terminal="TOY")
    listed = report.table_columns
    before = render_markdown(rows)
    with monkeypatch.context() as patched:
        patched.setattr(report, "table_columns", lambda *args: [*listed(*args)[:-1], toy, listed(*args)[-1]])
        table = markdown_rows(render_markdown(rows))
        assert table[0][-2:] == ["toy", "status"] and table[1][-2] == "--:"
        assert [line[-2] for line in table[2:]] == [f"<{len(row.run)}>" for row in rows]
        terminal = report.render_compact(rows).splitlines()
        assert terminal[0].split()[-2:] == ["TOY", "status"]
        assert all(f"<{len(row.run)}>" in line for row, line in zip(rows, terminal[1:]))
        write_csv(rows, tmp_path / "toy.csv")
        with open(tmp_path / "toy.csv", encoding="utf-8", newline="") as f:
            lines = list(csv.reader(f))
        assert lines[0][-3:] == ["toy", "toy length", "status"]
        assert [line[-3:-1] for line in lines[1:]] == [[row.run.upper(), str(len(row.run))] for row in rows]
        assert columns()[-2] == "toy" and csv_columns()[-3:-1] == ["toy", "toy length"]
    assert render_markdown(rows) == before and "toy" not in columns() + csv_columns()


@pytest.mark.slow
def test_report_runs_as_a_module(tmp_path):
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    result = subprocess.run([sys.executable, "-m", "training.tools.report", str(RUNS), "--out", str(tmp_path / "t"),
                             "--full"],
                            cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert markdown_rows(result.stdout)[0] == ["run", *FIXTURE_SETTINGS, *COLUMNS[1:]]


# ---- seeds pooled into one row, and the paired bootstrap against FT ----------------------------------
# Built in a temporary folder: a 60-example dev set per task, and run folders with metrics.json and dev
# predictions. Every statistic is checked against numpy / statistics / scipy computed here.

N_DEV = 60
SEEDS = (11711, 11712, 11713)
TASK_NAMES = ("sst", "qqp", "sts")
SECTION_OF = {"pre_qqp": "train", "smart": "smart", "ucl": "contrastive"}   # where write_run's flags live


def write_dev_files(folder: Path) -> dict:
    """Each task's dev file in the CS224N layout (tab-separated, unnamed index column); task -> (ids, labels)."""
    rng = np.random.default_rng(0)
    labels = {"sst": rng.integers(0, 5, N_DEV).astype(float), "qqp": rng.integers(0, 2, N_DEV).astype(float),
              "sts": np.round(rng.uniform(0, 5, N_DEV), 1)}
    folder.mkdir()
    gold = {}
    for name, values in labels.items():
        task = BUILTIN_TASKS[name]
        ids = [f"{name}{i:03d}" for i in range(N_DEV)]
        lines = ["\t".join(["", "id", *task.text_columns, task.label_column])]
        for i, (example_id, value) in enumerate(zip(ids, values)):
            label = str(int(value)) if name == "sst" else f"{value:.1f}"
            lines.append("\t".join([str(i), example_id, *(f"sentence {i}" for _ in task.text_columns), label]))
        (folder / task.files["dev"]).write_text("\n".join(lines) + "\n", encoding="utf-8")
        gold[name] = (ids, values)
    return gold


def predictions(gold: dict, skill: float, seed: int) -> dict:
    """Right on about ``skill`` of the examples (STS: noise that shrinks as skill grows), as written to file."""
    rng = np.random.default_rng(seed)
    right = rng.random(N_DEV) < skill
    return {"sst": np.where(right, gold["sst"][1], rng.integers(0, 5, N_DEV)).astype(float),
            "qqp": np.where(right, gold["qqp"][1], 1 - gold["qqp"][1]),
            "sts": np.round(np.clip(gold["sts"][1] + rng.normal(0, 4 * (1 - skill), N_DEV), 0, 5), 4)}


def dev_scores(pred: dict, gold: dict) -> dict:
    """Accuracy by numpy, Pearson by scipy: independent of training.learning.tasks."""
    return {"sst": float(np.mean(pred["sst"] == gold["sst"][1])), "qqp": float(np.mean(pred["qqp"] == gold["qqp"][1])),
            "sts": float(pearsonr(pred["sts"], gold["sts"][1])[0])}


def cs224n(scores: dict) -> float:
    return (scores["sst"] + scores["qqp"] + (scores["sts"] + 1) / 2) / 3


def write_run(out: Path, name: str, seed: int, pred: dict, gold: dict, data_dir: Path, status="finished", **flags):
    """A run folder as run_multitask.py leaves it: metrics.json and the dev predictions (rows in reverse
    order: they are matched by id). Device and output settings differ between seeds, as they may."""
    folder = out / name
    folder.mkdir()
    for task_name, values in pred.items():
        task = BUILTIN_TASKS[task_name]
        ids = gold[task_name][0]
        rows = [f"{i},{v:.4f}" if task.label_type == "score" else f"{i},{int(v)}" for i, v in zip(ids, values)]
        (folder / f"{task.output_prefix}-dev-output.csv").write_text(
            "\n".join([f"id,{task.prediction_column}", *reversed(rows)]) + "\n", encoding="utf-8")
    config = {"model": {"pooling": "mean", "option": "finetune"}, "data": {"data_dir": None, "max_length": 128},
              "train": {"seed": seed, "device": ["cpu", "cuda"][seed % 2], "epochs": 1, "pre_qqp": False},
              "smart": {"smart": False}, "contrastive": {"ucl": False},
              "output": {"run_name": name, "out_dir": str(out), "quiet": seed % 2 == 0}}
    for flag, on in flags.items():
        config[SECTION_OF[flag]][flag] = on
    (folder / "metrics.json").write_text(json.dumps({
        "run_name": name, "status": status, "config": config, "data_dir": str(data_dir),
        "dev": dev_scores(pred, gold) if status == "finished" else None, "wall_seconds": 60.0 * (seed - 11700)}))


@pytest.fixture(scope="module")
def seeds(tmp_path_factory):
    """FT and a clearly better row (pre-QQP), 3 seeds each; a copy of FT's predictions under --smart; an
    equally good row with other predictions (--ucl); a fourth FT seed still running."""
    root = tmp_path_factory.mktemp("seeds")
    gold = write_dev_files(root / "data")
    out = root / "runs"
    out.mkdir()
    pred = {}
    for row, skill, offset, flags in (("ft", 0.5, 0, {}), ("mean-preqqp", 0.9, 100, {"pre_qqp": True}),
                                      ("mean-ucl", 0.5, 200, {"ucl": True})):
        for seed in SEEDS:
            pred[row, seed] = predictions(gold, skill, seed + offset)
            write_run(out, f"ablate-{row}-s{seed}", seed, pred[row, seed], gold, root / "data", **flags)
    for seed in SEEDS:
        write_run(out, f"ablate-mean-smart-s{seed}", seed, pred["ft", seed], gold, root / "data", smart=True)
    write_run(out, "ablate-ft-s11714", 11714, pred["ft", 11711], gold, root / "data", status="running")
    return SimpleNamespace(root=root, out=out, data=root / "data", gold=gold, pred=pred)


def row_average(seeds, row: str) -> float:
    """The row's overall dev score: the mean of its seeds' CS224N scores, computed here."""
    return statistics.mean(cs224n(dev_scores(seeds.pred[row, seed], seeds.gold)) for seed in SEEDS)


def test_runs_differing_only_in_seed_are_one_row_with_mean_and_sample_std(seeds):
    rows = by_run(collect_runs(seeds.out))
    assert set(rows) == {"ablate-ft", "ablate-mean-preqqp", "ablate-mean-ucl", "ablate-mean-smart", "ablate-ft-s11714"}
    ft = rows["ablate-ft"]
    assert ft.baseline == "FT" and [r.run for r in ft.seed_runs] == [f"ablate-ft-s{seed}" for seed in SEEDS]
    per_seed = [dev_scores(seeds.pred["ft", seed], seeds.gold) for seed in SEEDS]
    table = cells_by_run(render_markdown(collect_runs(seeds.out)))
    for task, column in zip(TASK_NAMES, ("SST acc", "QQP acc", "STS Pearson")):
        values = [scores[task] for scores in per_seed]
        mean, std = statistics.mean(values), statistics.stdev(values)   # stdev: the sample std (n - 1)
        assert ft.dev[task] == pytest.approx(mean, abs=1e-12) and ft.dev_std[task] == pytest.approx(std, abs=1e-12)
        assert std == pytest.approx(float(np.std(values, ddof=1)), abs=1e-12)
        assert table["ablate-ft (FT)"][column] == f"{mean:.3f} ± {std:.3f}"
    averages = [cs224n(scores) for scores in per_seed]
    assert ft.average == pytest.approx(statistics.mean(averages), abs=1e-12)
    assert ft.average_std == pytest.approx(statistics.stdev(averages), abs=1e-12)
    assert ft.wall_minutes == pytest.approx(12.0)   # 11, 12 and 13 minutes
    assert table["ablate-ft (FT)"]["seeds"] == "3"
    running = table["ablate-ft-s11714 (FT)"]   # unfinished: its own line, not counted
    assert running["status"] == "incomplete (running)" and running["seeds"] == running["SST acc"] == ""


def test_seed_group_key_ignores_only_the_seed_and_how_a_run_reports():
    config = {"model": {"pooling": "mean"}, "train": {"seed": 1, "device": "cpu", "lr": 5e-5},
              "output": {"run_name": "a", "out_dir": "x", "resume": None, "quiet": False, "log_file": None}}
    other_seed = {"model": {"pooling": "mean"}, "train": {"seed": 2, "device": "cuda", "lr": 5e-5},
                  "output": {"run_name": "b", "out_dir": "y", "resume": "y/b", "quiet": True, "log_file": "l"}}
    other_lr = {**config, "train": {**config["train"], "lr": 1e-4}}
    assert seed_group_key(config) == seed_group_key(other_seed) != seed_group_key(other_lr)
    assert seed_group_key({}) is None and seed_group_key(None) is None   # no config: never pooled


def test_seeds_saved_before_a_field_existed_pool_with_later_ones_and_files_stand_for_folders():
    older = {"model": {"pooling": "mean", "private_layers": 2}, "data": {"data_dir": "/tmp/data"},
             "train": {"seed": 1}}
    newer = {"model": {"pooling": "mean", "private_layers": 2, "pair_projection": "none", "sts_loss": "mse"},
             "data": {"data_dir": "/tmp/data", "own_tasks": [], "task_file": None}, "train": {"seed": 2}}
    assert seed_group_key(older) == seed_group_key(newer)   # the fields added since, at what older versions did
    projected = {**newer, "model": {**newer["model"], "pair_projection": "shared"}}
    assert seed_group_key(projected) != seed_group_key(older)
    # the recorded input files stand for the folders: a copy elsewhere is the same row, other files are not
    files = {"sts-dev.csv": {"path": "/tmp/data/sts-dev.csv", "sha256": "aa"},
             "model/vocab.txt": {"path": "/m/vocab.txt", "sha256": "bb"}}
    moved = {**newer, "data": {**newer["data"], "data_dir": "/elsewhere"}}
    other = {**files, "sts-dev.csv": {"path": "/elsewhere/sts-dev.csv", "sha256": "cc"}}
    assert seed_group_key(older, files) == seed_group_key(moved, files) != seed_group_key(moved, other)
    assert seed_group_key(older) != seed_group_key(moved)   # without hashes the folder is all there is


def test_a_run_of_the_removed_distill_is_a_row_saying_so_neither_pooled_nor_a_baseline(tmp_path):
    """Issue 73: --distill is gone; its saved runs (docs/runs/full) would otherwise read as FT. One with the
    section off is an FT run as before."""
    ft = json.loads((RUNS / "ablate-ft" / "metrics.json").read_text())
    for name, seed, distill in (("distill-s1", 1, True), ("distill-s2", 2, True), ("off", 3, False)):
        config = {**ft["config"], "train": {**ft["config"]["train"], "seed": seed},
                  "distill": {"distill": distill, "teachers": "auto"}}
        (tmp_path / name).mkdir()
        (tmp_path / name / "metrics.json").write_text(json.dumps({**ft, "run_name": name, "config": config}))
    rows = by_run(collect_runs(tmp_path))
    assert sorted(rows) == ["distill-s1", "distill-s2", "off"]
    for name in ("distill-s1", "distill-s2"):
        assert rows[name].status.startswith("refused: this run used --distill, which was removed after commit ")
        assert not rows[name].complete and rows[name].baseline == ""
    assert rows["off"].complete and rows["off"].baseline == "FT"


def test_bootstrap_excludes_zero_for_a_better_row_and_not_for_an_equal_one(seeds):
    rows = collect_runs(seeds.out)
    footer, notes = compare_to_baselines(rows, resamples=1000, seed=0)
    assert notes == []
    rows = by_run(rows)
    better = rows["ablate-mean-preqqp"].vs_ft
    assert better.observed == pytest.approx(row_average(seeds, "mean-preqqp") - row_average(seeds, "ft"), abs=1e-12)
    assert 0 < better.low < better.observed < better.high and better.excludes_zero
    copy = rows["ablate-mean-smart"].vs_ft   # FT's very predictions: zero on every resample
    assert copy.observed == copy.low == copy.high == 0 and not copy.excludes_zero
    equal = rows["ablate-mean-ucl"].vs_ft    # as good as FT, other predictions
    assert equal.observed == pytest.approx(row_average(seeds, "mean-ucl") - row_average(seeds, "ft"), abs=1e-12)
    assert equal.low < 0 < equal.high and not equal.excludes_zero
    assert rows["ablate-ft"].vs_ft is None and rows["ablate-ft-s11714"].vs_ft is None
    assert "ablate-ft" in footer and "1000 resamples" in footer and "seed 0" in footer
    table = cells_by_run(render_markdown(list(rows.values())))
    assert table["ablate-mean-preqqp"]["Δ vs FT"] == f"{better.observed:+.3f}"
    assert table["ablate-mean-preqqp"]["95% CI"] == f"[{better.low:+.3f}, {better.high:+.3f}] *"
    assert table["ablate-mean-ucl"]["95% CI"] == f"[{equal.low:+.3f}, {equal.high:+.3f}]"   # no mark
    assert table["ablate-ft (FT)"]["Δ vs FT"] == table["ablate-ft (FT)"]["95% CI"] == ""


def test_interval_is_that_of_a_bootstrap_written_out_by_hand(seeds):
    """The same draws, expanded into index lists and scored with numpy and scipy, one resample at a time: the
    dev examples of each task, then the seeds (the same seeds for both rows, drawn once for the pair)."""
    resamples = 40
    draws = {task: np.concatenate(list(resample_counts(0, task, N_DEV, resamples))).astype(int)
             for task in TASK_NAMES}
    ordered = sorted(SEEDS, key=str)   # the report orders a row's seeds by their names
    seed_draws = np.random.default_rng([0, len(SEEDS), len(SEEDS)]).integers(0, len(SEEDS), (len(SEEDS), resamples))

    def score(row, seed, b):
        picked = {task: np.repeat(np.arange(N_DEV), draws[task][b]) for task in TASK_NAMES}
        pred = {task: seeds.pred[row, seed][task][picked[task]] for task in TASK_NAMES}
        gold = {task: (None, seeds.gold[task][1][picked[task]]) for task in TASK_NAMES}
        return cs224n(dev_scores(pred, gold))

    differences = [statistics.mean(score("mean-ucl", ordered[i], b) - score("ft", ordered[i], b)
                                   for i in seed_draws[:, b]) for b in range(resamples)]
    rows = collect_runs(seeds.out)
    compare_to_baselines(rows, resamples=resamples, seed=0)
    interval = by_run(rows)["ablate-mean-ucl"].vs_ft
    assert (interval.low, interval.high) == pytest.approx(tuple(np.percentile(differences, [2.5, 97.5])), abs=1e-12)


def test_weighted_metric_is_the_task_metric_on_the_drawn_examples():
    rng = np.random.default_rng(5)
    gold = rng.uniform(0, 5, 30)
    runs = np.stack([gold + rng.normal(0, 1, 30), rng.uniform(0, 5, 30), np.full(30, 2.0)])  # the last: constant
    counts = next(resample_counts(3, "sts", 30, 8))
    pearson = weighted_metric("pearson", runs, gold, counts)
    labels = rng.integers(0, 2, 30).astype(float)
    guesses = np.stack([labels, 1 - labels, rng.integers(0, 2, 30)]).astype(float)
    accuracy = weighted_metric("accuracy", guesses, labels, counts)
    for b, row in enumerate(counts.astype(int)):
        picked = np.repeat(np.arange(30), row)
        for r in range(3):
            assert pearson[r, b] == pytest.approx(BUILTIN_TASKS["sts"].metric(runs[r][picked], gold[picked]), abs=1e-9)
            assert accuracy[r, b] == pytest.approx(np.mean(guesses[r][picked] == labels[picked]), abs=1e-12)
        assert pearson[0, b] == pytest.approx(pearsonr(runs[0][picked], gold[picked])[0], abs=1e-9)
    assert (pearson[2] == 0).all()   # a constant side has no r: 0, as training.learning.tasks.pearson


def read_csv_rows(path: Path) -> dict[str, dict[str, str]]:
    with open(path, encoding="utf-8", newline="") as f:
        return {line["run"]: line for line in csv.DictReader(f)}


def test_the_interval_is_reproducible_and_its_seed_matters(seeds, tmp_path, capsys):
    def ends(*flags):
        assert main([str(seeds.out), "--out", str(tmp_path / "t"), "--bootstrap", "300", *flags]) == 0
        row = read_csv_rows(tmp_path / "t.csv")["ablate-mean-ucl"]
        return row["95% CI low"], row["95% CI high"]

    first = ends("--bootstrap_seed", "7")
    assert ends("--bootstrap_seed", "7") == first != ends("--bootstrap_seed", "8")
    assert ends("--bootstrap", "0") == ("", "")   # off: blank
    assert "not computed (--bootstrap 0)" in capsys.readouterr().out


def test_csv_has_each_metric_std_and_the_interval_ends(seeds, tmp_path, capsys):
    assert main([str(seeds.out), "--out", str(tmp_path / "t")]) == 0
    capsys.readouterr()
    rows = by_run(collect_runs(seeds.out))
    compare_to_baselines(list(rows.values()))
    lines = read_csv_rows(tmp_path / "t.csv")
    line, row = lines["ablate-mean-preqqp"], rows["ablate-mean-preqqp"]
    assert line["seeds"] == "3"
    assert float(line["SST acc"]) == row.dev["sst"] and float(line["SST acc std"]) == row.dev_std["sst"]
    assert float(line["average std"]) == row.average_std
    assert (float(line["Δ vs FT"]), float(line["95% CI low"]), float(line["95% CI high"])) == \
        (row.vs_ft.observed, row.vs_ft.low, row.vs_ft.high)
    assert line["95% CI excludes 0"] == "✓" and lines["ablate-mean-ucl"]["95% CI excludes 0"] == "×"


def test_unreadable_predictions_or_gold_labels_leave_blank_cells_and_a_note(seeds, tmp_path, capsys):
    out = tmp_path / "runs"
    shutil.copytree(seeds.out, out)
    (out / "ablate-mean-preqqp-s11712" / "sts-dev-output.csv").unlink()
    lines = (out / "ablate-mean-ucl-s11711" / "sst-dev-output.csv").read_text().splitlines()
    (out / "ablate-mean-ucl-s11711" / "sst-dev-output.csv").write_text("\n".join(lines[:-1]) + "\n")  # one id short
    assert main([str(out), "--out", str(tmp_path / "t"), "--full"]) == 0
    captured = capsys.readouterr()
    table = cells_by_run(captured.out)
    for run in ("ablate-mean-preqqp", "ablate-mean-ucl"):
        assert table[run]["Δ vs FT"] == table[run]["95% CI"] == "" and table[run]["seeds"] == "3"
    assert table["ablate-mean-smart"]["95% CI"] != ""   # the others still have theirs
    notes = [line for line in captured.err.splitlines() if line.startswith("note:")]
    assert any(n.startswith("note: ablate-mean-preqqp: no Δ vs FT:") and
               n.endswith("ablate-mean-preqqp-s11712/sts-dev-output.csv: No such file or directory") for n in notes)
    assert any(n.startswith("note: ablate-mean-ucl: no Δ vs FT:") and "no prediction for 1 of the 60 dev examples"
               in n for n in notes)
    assert "Traceback" not in captured.err
    csv_line = read_csv_rows(tmp_path / "t.csv")["ablate-mean-preqqp"]
    assert [csv_line[c] for c in ("Δ vs FT", "95% CI low", "95% CI high", "95% CI excludes 0")] == ["", "", "", ""]

    (tmp_path / "empty").mkdir()   # --data_dir without the dev files: no interval anywhere, still a table
    assert main([str(out), "--out", str(tmp_path / "t"), "--data_dir", str(tmp_path / "empty"), "--full"]) == 0
    captured = capsys.readouterr()
    assert all(cells["95% CI"] == "" for cells in cells_by_run(captured.out).values())
    assert "gold labels:" in captured.err and "ids-sst-dev.csv" in captured.err and "Traceback" not in captured.err


def test_data_dir_flag_replaces_the_recorded_one(seeds, tmp_path, capsys):
    out = tmp_path / "runs"
    shutil.copytree(seeds.out, out)
    for path in out.glob("*/metrics.json"):   # recorded on another machine: that data folder is not here ...
        path.write_text(path.read_text().replace(json.dumps(str(seeds.data)), json.dumps("/elsewhere/data")))
    assert main([str(out), "--out", str(tmp_path / "a")]) == 0
    assert "gold labels: data file not found: /elsewhere/data/ids-sst-dev.csv" in capsys.readouterr().err
    assert main([str(out), "--out", str(tmp_path / "b"), "--data_dir", str(seeds.data)]) == 0   # ... --data_dir is
    assert "no Δ vs FT" not in capsys.readouterr().err
    assert read_csv_rows(tmp_path / "b.csv")["ablate-mean-preqqp"]["95% CI excludes 0"] == "✓"


def test_forest_plot_is_written_beside_the_table(seeds, tmp_path, capsys):
    pytest.importorskip("matplotlib")
    assert main([str(seeds.out), "--out", str(tmp_path / "t")]) == 0
    png = (tmp_path / "t-forest.png").read_bytes()
    assert png.startswith(b"\x89PNG\r\n\x1a\n") and len(png) > 5_000
    assert "t-forest.png" in capsys.readouterr().err


def test_without_matplotlib_the_report_says_so_once_and_writes_the_table(seeds, tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)   # makes `import matplotlib` raise ImportError
    (tmp_path / "t-forest.png").write_bytes(b"stale")
    assert main([str(seeds.out), "--out", str(tmp_path / "t")]) == 0
    err = capsys.readouterr().err
    assert err.count("matplotlib is not installed, so no t-forest.png (pip install matplotlib)") == 1
    assert (tmp_path / "t.md").is_file() and (tmp_path / "t.csv").is_file()
    assert not (tmp_path / "t-forest.png").exists()   # no picture of an older table left beside this one


# ---- scripts/ablate.sh ----------------------------------------------------------------------------

def ablate(*args, env=None, timeout=60):
    return subprocess.run(["bash", str(ABLATE), *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, **(env or {})})


def test_ablate_script_parses():
    assert subprocess.run(["bash", "-n", str(ABLATE)], capture_output=True).returncode == 0


def test_ablate_refuses_an_empty_out_dir_before_anything():
    result = ablate("--out_dir", "", "--only", "ft")
    assert result.returncode == 2 and "--out_dir needs a folder" in result.stderr


@pytest.mark.slow
def test_ablate_refuses_a_folder_where_another_grid_runs(tmp_path):
    """A second grid in one --out_dir (ablate.sh or minbert-grid: the same lock) is refused before it writes."""
    import fcntl
    out = tmp_path / "grid"
    (out / "logs").mkdir(parents=True)
    (out / "logs" / "ablate-ft.log").write_text("the live grid's log\n")
    with open(out / ".grid.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        result = ablate("--only", "ft", "--out_dir", str(out), env={"PYTHON": sys.executable})
    assert result.returncode == 2 and "another grid is running" in result.stderr
    assert (out / "logs" / "ablate-ft.log").read_text() == "the live grid's log\n"
    assert not (out / "ablate-ft").exists()


@pytest.mark.slow
def test_ablate_help_prints_usage_and_runs_nothing(tmp_path):
    result = ablate("--help", "--out_dir", str(tmp_path / "grid"))
    assert result.returncode == 0
    assert "Usage: bash scripts/ablate.sh" in result.stdout and "--only NAME" in result.stdout
    assert not (tmp_path / "grid").exists()


@pytest.mark.slow
def test_ablate_grid_rows_come_from_the_extension_table():
    result = ablate("--list")
    assert result.returncode == 0
    rows = [line.split() for line in result.stdout.splitlines()]
    assert rows == [[name, *flags] for name, flags in grid_rows()]
    names = [row[0] for row in rows]
    n, variants = len(EXTENSIONS), [v for idea in ideas() for v in idea.variants]
    pairs = sum(compatible(pair) for pair in itertools.combinations(EXTENSIONS, 2))   # conflicting pairs left out
    assert len(rows) == 6 + 2 * n + pairs + len(variants) + 1 + 3 and len(set(names)) == len(rows)
    assert names[:6] == ["pt", "ft", "st-sst", "st-qqp", "st-sts", "cls"] and rows[0][1:3] == ["--option", "pretrain"]
    assert rows[1] == ["ft", "--pooling", "mean", "--private_layers", "0"]   # one shared encoder, no extension
    assert rows[2:5] == [[f"st-{t}", "--pooling", "mean", "--tasks", t, "--private_layers", "0"]   # FT's recipe, alone
                         for t in ("sst", "qqp", "sts")]
    costly = "-".join(e.short for e in EXTENSIONS if e.costly)
    assert "mean-preqqp" in names and "mean-ucl-preqqp" in names and f"mean-all-but-{costly}" in names
    assert costly.startswith("smart")
    extensions = {f"--{e.name}" for e in EXTENSIONS}
    assert "--lcl" in extensions
    for row in rows[2:]:   # the table does not depend on the defaults
        assert "--pooling" in row and "--private_layers" in row, row[0]
    for ext in extensions:   # each extension alone on both poolings, on one shared encoder
        for pooling in ("cls", "mean"):
            assert any(set(r[1:]) - {"--pooling", pooling, "--private_layers", "0"} == {ext} and pooling in r
                       for r in rows), (ext, pooling)
    assert any({f"--{e.name}" for e in together(EXTENSIONS)} <= set(r) for r in rows)   # everything that goes together
    published = rows[names.index("published")]
    assert published[1:] == ["--pooling", "mean", "--pre_qqp", "--joint_loss", "--smart", "--scl", "--private_layers",
                             "0"]
    for name, flags in variants:   # each variant parses, and differs from its extension's own row
        config = run_multitask.parse_config(flags)
        assert (config.smart.smart_bregman or config.train.rr != "min" or config.model.private_layers
                or config.joint_loss.loss_weighting != "fixed"), name


@pytest.mark.slow
def test_ablate_stage_steps_and_a_whole_epoch_budget(tmp_path):
    result = ablate("--dry_run", "--only", "mean-all", "--max_steps_per_epoch", "none", "--stage_steps", "126",
                    "--", "--data_dir", "somewhere", env={"PYTHON": sys.executable})
    assert result.returncode == 0, result.stderr
    (command,) = [shlex.split(line) for line in result.stdout.splitlines()]
    config = run_multitask.parse_config(command[2:])
    assert config.train.max_steps_per_epoch is None and config.train.epochs == 1
    assert config.pre_qqp.pre_qqp_steps == 126
    assert config.ucl.ucl_steps == config.scl.scl_steps == config.lcl.lcl_steps == 126


@pytest.mark.slow
@pytest.mark.parametrize("extra, message", [
    (["--bogus", "1"], "ablate.sh: row pt: unrecognized arguments: --bogus 1"),
    (["--loss_weights", "1,2,3"], "ablate.sh: row pt: --loss_weights has no effect without --joint_loss"),
    (["--out_dir", "elsewhere"], "ablate.sh: --out_dir after --: the grid names and places its runs itself"),
])
def test_ablate_refuses_bad_extra_flags_once_before_any_run(tmp_path, extra, message):
    result = ablate("--out_dir", str(tmp_path / "grid"), "--", "--data_dir", "somewhere", *extra,
                    env={"PYTHON": sys.executable})
    assert result.returncode == 2 and result.stderr.startswith(message), result.stderr
    assert result.stderr.count("ablate.sh:") == 1 and not (tmp_path / "grid").exists()


@pytest.mark.slow
def test_ablate_refuses_a_model_that_cannot_take_the_runs_as_minbert_grid_does(tmp_path, tiny_model_dir):
    result = ablate("--out_dir", str(tmp_path / "grid"), "--", "--data_dir", "somewhere", "--model",
                    str(tiny_model_dir), "--max_length", "100", env={"PYTHON": sys.executable})
    assert result.returncode == 2 and result.stderr.startswith(
        "ablate.sh: row pt: --max_length 100 is more than the model's 64 positions"), result.stderr
    assert not (tmp_path / "grid").exists()


@pytest.mark.slow
def test_ablate_dry_run_commands_parse_with_run_multitask(tmp_path):
    result = ablate("--dry_run", "--only", "pt", "mean-all", "--epochs", "2", "--out_dir", str(tmp_path),
                    "--", "--data_dir", "somewhere", env={"PYTHON": sys.executable})
    assert result.returncode == 0, result.stderr
    commands = [shlex.split(line) for line in result.stdout.splitlines()]
    assert len(commands) == 2 and not any(tmp_path.iterdir())
    for command, name in zip(commands, ["ablate-pt", "ablate-mean-all"]):
        assert command[:2] == [sys.executable, str(ROOT / "run_multitask.py")]
        config = run_multitask.parse_config(command[2:])   # every flag the grid uses exists
        assert config.output.run_name == name and config.output.out_dir == str(tmp_path)
        assert config.train.epochs == 2 and config.train.max_steps_per_epoch == 30
        assert config.data.data_dir == "somewhere"
    pt, everything = (vars(run_multitask.build_parser().parse_args(c[2:])) for c in commands)
    assert pt["option"] == "pretrain" and not any(pt[e.name] for e in EXTENSIONS)
    assert all(everything[e.name] == (e in together(EXTENSIONS)) for e in EXTENSIONS)


@pytest.mark.slow
def test_ablate_rejects_an_unknown_row_or_option():
    assert ablate("--only", "no-such-row").returncode == 2
    assert ablate("--bogus").returncode == 2
    for seeds in ("0", "two"):
        assert ablate("--seeds", seeds, "--list").returncode == 2, seeds


@pytest.mark.slow
def test_ablate_seeds_runs_each_row_with_consecutive_seeds_from_the_default(tmp_path):
    first = TrainConfig().seed
    assert first == 11711
    result = ablate("--seeds", "2", "--dry_run", "--only", "mean-smart", "--out_dir", str(tmp_path),
                    "--", "--data_dir", "somewhere", env={"PYTHON": sys.executable})   # --seed there: refused
    assert result.returncode == 0, result.stderr
    commands = [shlex.split(line) for line in result.stdout.splitlines()]
    assert len(commands) == 2 and not any(tmp_path.iterdir())
    for command, seed in zip(commands, (first, first + 1)):
        assert command[-2:] == ["--seed", str(seed)]
        config = run_multitask.parse_config(command[2:])
        assert config.train.seed == seed and config.output.run_name == f"ablate-mean-smart-s{seed}"
        assert config.smart.smart and config.data.data_dir == "somewhere"
    listed = ablate("--seeds", "2", "--list", "--only", "mean-smart").stdout.splitlines()
    (row,) = [f"{name} {' '.join(flags)}" for name, flags in grid_rows() if name == "mean-smart"]
    assert listed == [f"{row} --seed {first}", f"{row} --seed {first + 1}"]


@pytest.mark.slow
def test_ablate_one_seed_is_the_grid_as_before():
    one_seed = ablate("--seeds", "1", "--dry_run", "--only", "ft").stdout
    assert one_seed == ablate("--dry_run", "--only", "ft").stdout
    (command,) = [shlex.split(line) for line in one_seed.splitlines()]
    assert "--seed" not in command and command[command.index("--run_name") + 1] == "ablate-ft"


FAKE_PYTHON = """#!/usr/bin/env bash
# Stand-in for python: `-m training.tools.*` and `-c` go to the real interpreter; a run_multitask.py call
# writes a finished metrics.json (with the --ucl and --seed flags in its config), except for SMART rows,
# which fail.
if [[ "$1" == "-m" || "$1" == "-c" ]]; then exec "{python}" "$@"; fi
shift
while (($# > 0)); do
  case "$1" in
    --run_name) name="$2"; shift 2;;
    --out_dir) out="$2"; shift 2;;
    --seed) seed="$2"; shift 2;;
    --smart) smart=1; shift;;
    --ucl) ucl=true; shift;;
    --resume) out="$(dirname "$2")"; name="$(basename "$2")"; echo "resumed $2"; shift 2;;
    *) shift;;
  esac
done
if [[ -n "${{smart:-}}" ]]; then echo "error: boom" >&2; exit 1; fi
mkdir -p "$out/$name"
cat > "$out/$name/metrics.json" <<EOF
{{"status": "finished", "config": {{"contrastive": {{"ucl": ${{ucl:-false}}}}, "train": {{"seed": ${{seed:-11711}}}}}},
 "dev": {{"sst": 0.5, "qqp": 0.7, "sts": 0.6}}, "wall_seconds": 60}}
EOF
"""


@pytest.mark.slow
def test_ablate_loop_reports_failures_goes_on_and_builds_the_table(tmp_path):
    fake = tmp_path / "fake-python"
    fake.write_text(FAKE_PYTHON.format(python=sys.executable))
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    out = tmp_path / "grid"
    (out / "ablate-cls").mkdir(parents=True)
    (out / "ablate-cls" / "sst-dev-output.csv").write_text("id,Predicted_Sentiment\n")
    result = ablate("--only", "ft", "cls", "mean-smart", "mean-ucl", "--out_dir", str(out),
                    env={"PYTHON": str(fake), "OMP_NUM_THREADS": "1"}, timeout=120)
    assert result.returncode == 1, result.stderr   # one row failed
    lines = result.stdout.splitlines()
    assert any(l.startswith("ft ") and " ok in " in l for l in lines)
    assert any(l.startswith("cls ") and "skipped" in l for l in lines)
    assert any(l.startswith("mean-smart ") and "FAILED (exit 1)" in l for l in lines)
    assert any(l.startswith("mean-ucl ") and " ok in " in l for l in lines)   # the loop went on
    assert "2 ok, 1 failed, 1 skipped" in result.stdout
    assert "error: boom" in (out / "logs" / "ablate-mean-smart.log").read_text()
    table = {line[0]: line for line in markdown_rows((out / "ablation.md").read_text(encoding="utf-8"))[2:]}
    assert set(table) == {"ablate-ft (FT)", "ablate-mean-ucl", "ablate-cls"}
    assert (out / "ablation.md").is_file() and (out / "ablation.csv").is_file()


@pytest.mark.slow
def test_ablate_resume_continues_a_stopped_run_and_skips_it_without_the_flag(tmp_path):
    fake = tmp_path / "fake-python"
    fake.write_text(FAKE_PYTHON.format(python=sys.executable))
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    out = tmp_path / "grid"
    stopped = {"ablate-ft": "running", "ablate-mean-ucl": "interrupted", "ablate-cls": "failed"}
    for run, status in stopped.items():
        (out / run / "checkpoints" / "step-00000200").mkdir(parents=True)
        (out / run / "metrics.json").write_text(json.dumps({"run_name": run, "status": status}))
    (out / "ablate-mean-scl").mkdir()   # stopped before its first checkpoint: nothing to continue
    (out / "ablate-mean-scl" / "metrics.json").write_text(json.dumps({"status": "running"}, indent=2))
    env = {"PYTHON": str(fake), "OMP_NUM_THREADS": "1"}
    rows = ("--only", "ft", "mean-ucl", "cls", "mean-scl", "--out_dir", str(out))
    plain = ablate(*rows, env=env, timeout=120)
    assert "0 ok, 0 failed, 4 skipped" in plain.stdout
    assert sum("unfinished: --resume continues it" in line for line in plain.stdout.splitlines()) == 2
    resumed = ablate("--resume", *rows, env=env, timeout=120)
    assert resumed.returncode == 0, resumed.stderr
    assert "2 ok, 0 failed, 2 skipped" in resumed.stdout
    assert any(l.startswith("ft ") and "resuming" in l and " ok in " in l for l in resumed.stdout.splitlines())
    assert f"resumed {out / 'ablate-mean-ucl'}" in (out / "logs" / "ablate-mean-ucl.log").read_text()
    assert json.loads((out / "ablate-ft" / "metrics.json").read_text())["status"] == "finished"
    assert json.loads((out / "ablate-cls" / "metrics.json").read_text())["status"] == "failed"


@pytest.mark.slow
def test_ablate_loop_with_seeds_skips_finished_runs_and_the_report_pools_them(tmp_path):
    fake = tmp_path / "fake-python"
    fake.write_text(FAKE_PYTHON.format(python=sys.executable))
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    out = tmp_path / "grid"
    env = {"PYTHON": str(fake), "OMP_NUM_THREADS": "1"}
    first = ablate("--seeds", "2", "--only", "ft", "mean-ucl", "--out_dir", str(out), env=env, timeout=120)
    assert first.returncode == 0, first.stderr
    assert sorted(p.name for p in out.iterdir() if p.name.startswith("ablate-")) == \
        ["ablate-ft-s11711", "ablate-ft-s11712", "ablate-mean-ucl-s11711", "ablate-mean-ucl-s11712"]
    assert "4 ok, 0 failed, 0 skipped" in first.stdout
    table = cells_by_run((out / "ablation.md").read_text(encoding="utf-8"))
    assert set(table) == {"ablate-ft (FT)", "ablate-mean-ucl"}
    assert table["ablate-ft (FT)"]["seeds"] == table["ablate-mean-ucl"]["seeds"] == "2"
    again = ablate("--seeds", "2", "--only", "ft", "mean-ucl", "--out_dir", str(out), env=env, timeout=120)
    assert "0 ok, 0 failed, 4 skipped" in again.stdout
    assert any(line.startswith("ft-s11712 ") and "skipped" in line for line in again.stdout.splitlines())


def test_baseline_names_the_row_every_average_is_compared_with(seeds, capsys):
    rows = collect_runs(seeds.out)
    footer, _ = compare_to_baselines(rows, resamples=200, seed=0, baseline="ablate-mean-ucl")
    rows = by_run(rows)
    better = rows["ablate-mean-preqqp"].vs_ft
    assert better.observed == pytest.approx(row_average(seeds, "mean-preqqp") - row_average(seeds, "mean-ucl"),
                                            abs=1e-12)
    assert rows["ablate-mean-ucl"].vs_ft is None           # the baseline itself has no Δ
    assert "Δ vs ablate-mean-ucl = average minus that of ablate-mean-ucl" in footer
    header = markdown_rows(render_markdown(list(rows.values()), baseline="ablate-mean-ucl"))[0]
    assert "Δ vs ablate-mean-ucl" in header and "Δ vs FT" not in header
    # each task against the named row too (issue 59: "no task lower beyond its interval")
    for task in ("sst", "qqp", "sts"):
        expected = statistics.mean(dev_scores(seeds.pred["mean-preqqp", seed], seeds.gold)[task]
                                   - dev_scores(seeds.pred["mean-ucl", seed], seeds.gold)[task] for seed in SEEDS)
        assert rows["ablate-mean-preqqp"].vs_baseline[task].observed == pytest.approx(expected, abs=1e-12)
        assert rows["ablate-mean-preqqp"].vs_baseline[task].low > 0           # skill 0.9 against 0.5: beyond
        assert f"{task.upper()} Δ vs ablate-mean-ucl" in header
    assert rows["ablate-mean-ucl"].vs_baseline == {} and rows["ablate-ft"].vs_baseline["sst"].low < 0 < \
        rows["ablate-ft"].vs_baseline["sst"].high                              # the same skill: an interval over 0
    assert "<TASK> Δ vs ablate-mean-ucl = that task's dev metric minus that of ablate-mean-ucl" in footer
    panels = dict(forest_panels(list(rows.values()), "ablate-mean-ucl"))
    assert set(dict(panels["Δ STS Pearson vs ablate-mean-ucl"])) == {
        "ablate-ft (3 seeds)", "ablate-mean-preqqp (3 seeds)", "ablate-mean-smart (3 seeds)"}
    assert compare_to_baselines(collect_runs(seeds.out), resamples=20, seed=0)[0].count("<TASK>") == 0   # FT: averages
    assert main([str(seeds.out), "--baseline", "no-such-row", "--bootstrap", "10"]) == 1
    assert "--baseline no-such-row: no finished row of that name" in capsys.readouterr().err


def test_the_interval_holds_the_spread_between_seeds_not_only_the_examples():
    """Issue 59: seeds 0.47 / 0.50 / 0.56 against 0.50 three times, each seed's score moving by 0.001 between
    resamples of the examples. Averaging the seeds first gave an interval of about +0.010 +- 0.001, excluding 0
    (a 2-seed SST spread of +-0.03 once came with [-0.001, +0.004]); drawing the seeds too holds 0."""
    import numpy as np
    from training.tools.bootstrap import Scores, paired_difference

    rng = np.random.default_rng(0)
    examples = (("sst", ("a", "b")),)

    def seeds(values):
        return [Scores(v, v + rng.normal(0.0, 0.001, 1000), examples, {"sst": (v, v + rng.normal(0.0, 0.001, 1000))})
                for v in values]
    row, base = seeds([0.47, 0.50, 0.56]), seeds([0.50, 0.50, 0.50])
    examples_only = np.mean([s.resampled for s in row], axis=0) - np.mean([s.resampled for s in base], axis=0)
    assert np.percentile(examples_only, 2.5) > 0                                   # the old interval: "beyond"
    d = paired_difference(row, base)   # each side's seeds drawn on its own
    assert abs(d.observed - 0.01) < 1e-12 and d.low < 0 < d.high and d.high - d.low > 0.03
    paired = paired_difference(row, base, same_seeds=True)   # seed s against seed s: -0.03, 0, +0.06
    assert paired.observed == d.observed and -0.035 < paired.low < 0 < paired.high < 0.065
    assert paired_difference(row, base, task="sst").low < 0                        # a task's interval too
    assert paired_difference(row, base) == d                                       # reproducible
    # no spread between seeds: the examples' interval (drawing equal seeds changes nothing)
    same = paired_difference(seeds([0.51] * 3), base, same_seeds=True)
    assert 0 < same.low and same.high - same.low < 0.01
    # one seed a side: nothing to draw, the examples alone
    one = paired_difference(row[2:], base[:1])
    assert one.low > 0.05


# ---- rows capped alike (--max_eval_examples N): compared with each other, never with uncapped rows ------------
# Built on the dev files of a fresh data folder: FT and pre-QQP uncapped, the same two capped at CAP (the first CAP
# examples of each dev file, as trainer.cap_dev keeps them), a pre-QQP row capped at TINY (no FT row capped alike)
# and a search trial of FT (--val_fraction), 3 seeds each but the trial.

CAP, TINY = 25, 10


def write_capped_run(out: Path, name: str, seed: int, pred: dict, gold: dict, data_dir: Path, cap: int, **flags):
    """A smoke run: scored, and its dev predictions written, on the first ``cap`` examples of each dev file; its
    saved config says ``--max_eval_examples cap``."""
    write_run(out, name, seed, {task: values[:cap] for task, values in pred.items()},
              {task: (ids[:cap], labels[:cap]) for task, (ids, labels) in gold.items()}, data_dir, **flags)
    edit_config(out / name, "data", "max_eval_examples", cap)


def edit_config(folder: Path, section: str, name: str, value) -> None:
    path = folder / "metrics.json"
    metrics = json.loads(path.read_text())
    metrics["config"].setdefault(section, {})[name] = value
    path.write_text(json.dumps(metrics))


def first(gold: dict, cap: int) -> dict:
    return {task: (ids[:cap], labels[:cap]) for task, (ids, labels) in gold.items()}


@pytest.fixture(scope="module")
def capped(tmp_path_factory):
    root = tmp_path_factory.mktemp("capped")
    gold = write_dev_files(root / "data")
    out = root / "runs"
    out.mkdir()
    pred = {}
    for row, skill, offset, flags in (("ft", 0.5, 0, {}), ("preqqp", 0.9, 100, {"pre_qqp": True})):
        for seed in SEEDS:
            pred[row, seed] = predictions(gold, skill, seed + offset)
            write_run(out, f"ablate-{row}-s{seed}", seed, pred[row, seed], gold, root / "data", **flags)
            write_capped_run(out, f"smoke-{row}-s{seed}", seed, pred[row, seed], gold, root / "data", CAP, **flags)
            if row == "preqqp":
                write_capped_run(out, f"tiny-{row}-s{seed}", seed, pred[row, seed], gold, root / "data", TINY, **flags)
    write_run(out, "trial-ft", SEEDS[0], pred["ft", SEEDS[0]], gold, root / "data")
    edit_config(out / "trial-ft", "data", "val_fraction", 0.2)
    return SimpleNamespace(root=root, out=out, data=root / "data", gold=gold, pred=pred)


def capped_rows(capped, without=()):
    """The fixture's rows afresh (the comparison sets fields on them), less the runs whose names start with one of
    ``without``."""
    folder = capped.root / f"subset-{'-'.join(without) or 'all'}"
    if not folder.exists():
        folder.mkdir()
        for run in capped.out.iterdir():
            if not run.name.startswith(tuple(without)):
                (folder / run.name).symlink_to(run)
    return by_run(collect_runs(folder))


def capped_average(capped, row: str, cap: int) -> float:
    """The row's overall dev score on the first ``cap`` examples of each dev file, computed here."""
    gold = first(capped.gold, cap)
    return statistics.mean(cs224n(dev_scores({task: values[:cap] for task, values in capped.pred[row, seed].items()},
                                             gold)) for seed in SEEDS)


def test_rows_capped_alike_are_compared_with_each_other_and_uncapped_with_uncapped(capped):
    rows = capped_rows(capped)
    footer, notes = compare_to_baselines(list(rows.values()), resamples=200, seed=0)
    assert [(row.run, row.dev_cap) for row in sort_rows(list(rows.values()))] == [
        ("ablate-preqqp", None), ("ablate-ft", None), ("trial-ft", None), ("tiny-preqqp", TINY), ("smoke-preqqp", CAP),
        ("smoke-ft", CAP)]   # uncapped first, then the trial, then rows capped alike together
    smoke, full = rows["smoke-preqqp"].vs_ft, rows["ablate-preqqp"].vs_ft
    assert smoke.observed == pytest.approx(capped_average(capped, "preqqp", CAP) - capped_average(capped, "ft", CAP),
                                           abs=1e-12)
    assert full.observed == pytest.approx(capped_average(capped, "preqqp", N_DEV) - capped_average(capped, "ft", N_DEV),
                                          abs=1e-12)
    assert smoke != full and smoke.excludes_zero   # skill 0.9 against 0.5, on 25 examples a task
    assert rows["smoke-ft"].vs_ft is None and rows["ablate-ft"].vs_ft is None   # the baselines
    assert rows["tiny-preqqp"].vs_ft is None and rows["trial-ft"].vs_ft is None
    # the uncapped comparison is what it is without any capped row in the folder
    alone = capped_rows(capped, without=("smoke", "tiny", "trial"))
    uncapped = compare_to_baselines(list(alone.values()), resamples=200, seed=0)[0]
    assert uncapped.startswith("Δ vs FT = average minus that of ablate-ft, both from the dev prediction files; 95% CI")
    assert f"; 95% CI{uncapped.split('; 95% CI', 1)[1]} No Δ vs FT: tiny-preqqp" in footer   # the rest as there
    assert alone["ablate-preqqp"].vs_ft == full
    assert footer.startswith("Δ vs FT = average minus that of the FT row scored on the same dev examples (uncapped: "
                             f"ablate-ft; capped at {CAP}: smoke-ft), both from the dev prediction files;")
    assert footer.endswith(f" No Δ vs FT: tiny-preqqp: no FT row capped alike (--max_eval_examples {TINY}).")
    assert "no finished FT row" not in footer
    assert notes == ["note: trial-ft: not compared (validation split: scored on 0.2 of train, not dev, --val_fraction: "
                     "a search trial)"]
    markdown = render_markdown(list(rows.values()), footer)
    assert "pooled and compared only with rows capped alike (the same N, so the same examples)" in markdown
    assert "not compared, no baseline" in markdown   # the trial's note: still never compared


def test_a_capped_interval_is_that_of_the_first_n_examples_as_dev_files(capped, tmp_path):
    """The bootstrap reads a capped run on the first N ids of each dev file: its interval is the one of uncapped
    runs of the same predictions on dev files that hold only those N examples (the draws depend only on the seed,
    the task and the examples)."""
    data = tmp_path / "short"
    data.mkdir()
    for name in TASK_NAMES:
        dev = BUILTIN_TASKS[name].files["dev"]
        (data / dev).write_text("\n".join((capped.data / dev).read_text().splitlines()[:CAP + 1]) + "\n")
    out = tmp_path / "runs"
    out.mkdir()
    short = first(capped.gold, CAP)
    for row, flags in (("ft", {}), ("preqqp", {"pre_qqp": True})):
        for seed in SEEDS:
            write_run(out, f"short-{row}-s{seed}", seed, {t: v[:CAP] for t, v in capped.pred[row, seed].items()},
                      short, data, **flags)
    rows = by_run(collect_runs(out))
    compare_to_baselines(list(rows.values()), resamples=200, seed=0)
    smoke = capped_rows(capped)
    compare_to_baselines(list(smoke.values()), resamples=200, seed=0)
    assert smoke["smoke-preqqp"].vs_ft == rows["short-preqqp"].vs_ft


def test_the_bootstrap_pairs_a_capped_run_on_the_first_n_dev_ids(capped):
    from training.tools.bootstrap import DevSource, score_runs

    folder = capped.out / f"smoke-ft-s{SEEDS[0]}"
    source = DevSource(folder, str(capped.data), TASK_NAMES, cap=CAP)
    scores, failed = score_runs([source, DevSource(folder, str(capped.data), TASK_NAMES)], 20, 0)
    assert scores[folder].examples == tuple((task, tuple(capped.gold[task][0][:CAP])) for task in TASK_NAMES)
    assert scores[folder].observed == pytest.approx(cs224n(dev_scores(
        {task: values[:CAP] for task, values in capped.pred["ft", SEEDS[0]].items()}, first(capped.gold, CAP))),
        abs=1e-12)
    uncapped = score_runs([DevSource(folder, str(capped.data), TASK_NAMES)], 20, 0)[1]   # read as a full-dev run
    assert f"no prediction for {N_DEV - CAP} of the {N_DEV} dev examples" in uncapped[folder]


def test_the_footer_says_why_a_row_has_no_interval(capped):
    def footer(without=(), baseline=None):
        return compare_to_baselines(list(capped_rows(capped, without).values()), resamples=50, seed=0,
                                    baseline=baseline)[0]

    # an FT row finished, but capped: the uncapped rows have none scored on their dev examples
    assert footer(without=("ablate-ft",)).endswith(
        f" No Δ vs FT: ablate-preqqp: no uncapped FT row; tiny-preqqp: no FT row capped alike (--max_eval_examples "
        f"{TINY}).")
    assert footer(without=("ablate-ft", "tiny")).startswith(
        f"Δ vs FT = average minus that of smoke-ft (capped alike, --max_eval_examples {CAP}), both from")
    # no FT row at all, or only a search trial of FT
    assert footer(without=("ablate-ft", "smoke-ft", "trial")) == \
        "Δ vs FT and 95% CI: no finished FT row to compare with."
    assert footer(without=("ablate-ft", "smoke-ft")) == (
        "Δ vs FT and 95% CI: no finished FT row scored on dev to compare with (the FT rows are search trials, "
        "--val_fraction).")
    # --baseline: each row against the row of that name scored on the same dev examples
    named = footer(baseline="smoke-ft")
    assert named.startswith(
        f"Δ vs smoke-ft = average minus that of smoke-ft (capped alike, --max_eval_examples {CAP}),")
    assert named.endswith(" No Δ vs smoke-ft: ablate-preqqp, ablate-ft: no uncapped smoke-ft row; tiny-preqqp: no "
                          f"smoke-ft row capped alike (--max_eval_examples {TINY}).")
    rows = capped_rows(capped)
    compare_to_baselines(list(rows.values()), resamples=50, seed=0, baseline="smoke-ft")
    assert rows["smoke-preqqp"].vs_ft.excludes_zero and set(rows["smoke-preqqp"].vs_baseline) == set(TASK_NAMES)
    assert rows["ablate-preqqp"].vs_ft is None and rows["ablate-preqqp"].vs_baseline == {}
    with pytest.raises(ValueError, match="--baseline trial-ft: no finished row of that name \\(a search trial is no "
                                         "baseline\\)"):
        compare_to_baselines(list(rows.values()), resamples=50, seed=0, baseline="trial-ft")


# ---- a table for a paper: a column for each setting the rows differ in, the ones they share said once, and the
# paper's caption, label and row names ---------------------------------------------------------------------------

STUDY_ALL_ROWS = ("All rows: pooling MEAN, rr min, para_head concat, sts_head cosine, pair_projection none, "
                  "sts_loss mse; no extension.")


def private_layers_study(tmp_path: Path) -> Path:
    """FT and the same recipe with --private_layers 2 (the quick grid's private2 row), two seeds each: runs that
    differ in that one setting (FT's configuration does not save it: a run of a version before the flag, 0)."""
    gold = write_dev_files(tmp_path / "data")
    out = tmp_path / "runs"
    out.mkdir()
    for seed in SEEDS[:2]:
        write_run(out, f"ft-s{seed}", seed, predictions(gold, 0.5, seed), gold, tmp_path / "data")
        write_run(out, f"private2-s{seed}", seed, predictions(gold, 0.5, seed + 100), gold, tmp_path / "data")
        edit_config(out / f"private2-s{seed}", "model", "private_layers", 2)
    return out


def test_a_row_differing_only_in_private_layers_gets_its_column_in_every_view(tmp_path, capsys):
    """Issue 87: --private_layers had no column, so a row differing from FT in it alone read as FT with every mark
    ×, while pooling MEAN, alike in every row, took a column. The one setting the rows differ in is now the one
    settings column, in the Markdown, CSV and LaTeX tables alike; those they share are said once, above the Markdown
    table and at the start of the LaTeX caption."""
    out = private_layers_study(tmp_path)
    assert main([str(out), "--bootstrap", "0", "--format", "latex", "--out", str(tmp_path / "t")]) == 0
    capsys.readouterr()
    markdown = (tmp_path / "t.md").read_text(encoding="utf-8")
    assert markdown.startswith(STUDY_ALL_ROWS + "\n\n| run | private_layers | seeds |")
    assert markdown_rows(markdown)[0] == ["run", "private_layers", *COLUMNS[1:]]
    assert {run: cells["private_layers"] for run, cells in cells_by_run(markdown).items()} == {
        "ft (FT)": "0", "private2": "2"}   # private2 is no FT row, and the table says why
    csv_rows = read_csv_rows(tmp_path / "t.csv")
    assert list(csv_rows["private2"]) == ["run", "private_layers", *csv_columns()[1:]]
    assert {run: line["private_layers"] for run, line in csv_rows.items()} == {"ft (FT)": "0", "private2": "2"}
    latex = (tmp_path / "t.tex").read_text(encoding="utf-8")
    header, *body = tabular(latex)
    assert header == ["run", r"private\_layers", "seeds", "SST acc", "QQP acc", "STS Pearson", "average"]
    assert {line[0]: line[1] for line in body} == {"ft (FT)": "0", "private2": "2"}
    assert rf"\caption{{{escape(STUDY_ALL_ROWS)} Dev scores, mean" in latex and r"\label{tab:t}" in latex
    assert "pooling" not in header and "pooling" not in markdown_rows(markdown)[0]


def test_only_settings_that_differ_get_a_column_and_the_tables_own_shared_ones_are_named():
    """The table's own settings first (pooling, the extensions' on/off, the core ideas'), then any other in
    configuration order; an extension's setting counts only where the extension is on ("–" elsewhere); a row without
    a readable configuration is blank and differs from nothing."""
    def row(name, smart=True, **settings):
        return RunRow(name, "finished", {e.name: smart and e.name == "smart" for e in EXTENSIONS}, "MEAN",
                      settings={"rr": "min", "private_layers": 0, "lr": 1e-4, "smart_weight": 0.5, **settings})

    rows = [row("a"), row("b", rr="exhaust", smart_weight=1.0), row("c", lr=2e-4), RunRow("x", "corrupt metrics.json")]
    shown = shown_settings(rows)
    assert [setting.header for setting in shown.columns] == ["rr", "lr", "smart_weight"]
    assert [[setting.cell(r) for r in rows] for setting in shown.columns] == [
        ["min", "exhaust", "min", None], ["0.0001", "0.0001", "0.0002", None], ["0.5", "1", "0.5", None]]
    assert shown.all_rows == "All rows: pooling MEAN, private_layers 0, SMART on; every other extension off."
    rows.append(row("d", smart=False, smart_weight=3.0))   # SMART off: its column, and its setting "–" there
    shown = shown_settings(rows)
    assert [setting.header for setting in shown.columns] == ["SMART", "rr", "lr", "smart_weight"]
    assert [setting.cell(rows[-1]) for setting in shown.columns] == ["×", "min", "0.0001", "–"]
    assert shown.all_rows == "All rows: pooling MEAN, private_layers 0; every other extension off."
    plain = [row("e", smart=False), row("f", smart=False, lr=2e-4)]
    assert shown_settings(plain).all_rows == "All rows: pooling MEAN, rr min, private_layers 0; no extension."


def test_caption_label_and_row_names_reach_the_markdown_csv_and_latex(tmp_path, capsys):
    out = private_layers_study(tmp_path)
    names = tmp_path / "names.txt"
    names.write_text("# the paper's names\nft = Fine-tuning\n\nprivate2=Private layers\n", encoding="utf-8")
    assert main([str(out), "--bootstrap", "0", "--format", "latex", "--out", str(tmp_path / "t"),
                 "--caption", "Dev scores of the study", "--label", "tab:private", "--row_names", str(names),
                 "--row_name", "private2=Private top layers (K = 2)", "--row_name", "nope=Nothing",
                 "--baseline", "ft"]) == 0   # --row_name wins over the file; --baseline by the folder's name
    captured = capsys.readouterr()
    assert "note: row names: no row 'nope' in the table (its rows: ft, private2)" in captured.err
    renamed = {"Fine-tuning (FT)", "Private top layers (K = 2)"}
    markdown = (tmp_path / "t.md").read_text(encoding="utf-8")
    assert markdown.startswith(f"Dev scores of the study. {STUDY_ALL_ROWS}\n\n| run |")
    assert set(cells_by_run(markdown)) == renamed and "Δ vs Fine-tuning" in markdown_rows(markdown)[0]
    assert set(read_csv_rows(tmp_path / "t.csv")) == renamed
    latex = (tmp_path / "t.tex").read_text(encoding="utf-8")
    assert captured.out == latex and r"\label{tab:private}" in latex.splitlines()
    assert rf"\caption{{Dev scores of the study. {escape(STUDY_ALL_ROWS)} Dev scores, mean" in latex
    assert {line[0] for line in tabular(latex)[1:]} == renamed


@pytest.mark.parametrize("text, error", [
    ("ft=Fine-tuning\nprivate2\n", "line 2: want KEY=NAME"),
    ("ft = A\n# a comment\nft = B\n", "line 3: 'ft' is named on line 1 already"),
    ("=Nameless\n", "line 1: want KEY=NAME"),
    ("ft=\n", "line 1: want KEY=NAME"),
])
def test_a_bad_row_names_file_is_one_error_line_naming_the_file_and_line(tmp_path, capsys, text, error):
    (tmp_path / "runs").mkdir()
    names = tmp_path / "names.txt"
    names.write_text(text, encoding="utf-8")
    assert main([str(tmp_path / "runs"), "--row_names", str(names), "--out", str(tmp_path / "t")]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"error: --row_names {names} {error}"), err
    assert not list(tmp_path.glob("t.*"))


def test_bad_row_names_and_labels_are_refused_in_one_line_and_nothing_is_written(tmp_path, capsys):
    out = private_layers_study(tmp_path)
    (tmp_path / "latin1.txt").write_bytes("ft=Réseau\n".encode("latin-1"))
    cases = [
        (["--row_names", str(tmp_path / "none.txt")], f"--row_names {tmp_path / 'none.txt'}: No such file"),
        (["--row_names", str(tmp_path / "latin1.txt")], f"--row_names {tmp_path / 'latin1.txt'}: not UTF-8 text"),
        (["--row_name", "ft"], "--row_name 'ft': want KEY=NAME"),
        (["--row_name", "ft=A", "--row_name", "ft=B"], "--row_name ft: given twice ('A' and 'B')"),
        (["--row_name", "ft=private2"], "row names: ft, private2 would all be named 'private2'; give each row a name"),
        (["--format", "latex", "--label", "tab:my table"], "--label 'tab:my table': a LaTeX label is letters, digits"),
        (["--label", "tab:x"], "--label tab:x: only the LaTeX table has a label; add --format latex"),
    ]
    for flags, error in cases:
        assert main([str(out), "--bootstrap", "0", *flags, "--out", str(tmp_path / "t")]) == 1, flags
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith(f"error: {error}"), (flags, err)
    assert not list(tmp_path.glob("t.*")) and not list(tmp_path.glob("t-*"))


def test_the_core_ideas_name_the_flags_the_table_shows_of_them():
    """``Idea.shows``: the report names no idea; what it shows of --rr, --private_layers and the pair heads comes
    from training/extensions/core.py, and each is a flag of the core sections."""
    from dataclasses import fields

    from training.configuration.sections import CORE_SECTIONS
    shown = [flag for idea in ideas() for flag in idea.shows]
    assert shown == ["rr", "private_layers", "para_head", "sts_head", "pair_projection", "sts_loss"]
    assert set(shown) <= {f.name for section in CORE_SECTIONS.values() for f in fields(section)}
