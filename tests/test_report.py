"""training.tools.report on hand-written run folders (tests/fixtures/runs), and scripts/ablate.sh's interface.

Nothing here trains: ablate.sh is exercised with --help, --list, --dry_run and a stand-in interpreter.
"""
import csv
import json
import os
import shlex
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

import run_multitask
from training.stages import EXTENSIONS
from training.tools.grid import grid_rows
from training.tools.report import collect_runs, columns, find_flag, main, render_markdown, write_csv

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


def by_run(rows):
    return {row.run: row for row in rows}


@pytest.fixture(scope="module")
def rows():
    return collect_runs(RUNS)


def test_columns_are_the_extensions_and_the_tasks_plus_wall_time_and_status(rows):
    assert COLUMNS == ["run", "pooling", "U-CL", "S-CL", "LCL", "pre-QQP", "joint-loss", "SMART",
                       "SST acc", "QQP acc", "STS Pearson", "average", "wall (min)", "status"]
    assert columns(["cfimdb"])[-5:] == ["SMART", "CFIMDB acc", "average", "wall (min)", "status"]
    table = markdown_rows(render_markdown(rows))
    assert table[0] == COLUMNS
    assert all(len(line) == len(COLUMNS) for line in table)


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


def test_flag_marks_pooling_and_baselines(rows):
    table = {line[0]: dict(zip(COLUMNS, line)) for line in markdown_rows(render_markdown(rows))[2:]}
    flags = ["pre-QQP", "pooling", "joint-loss", "SMART", "U-CL", "S-CL", "LCL"]
    expected = {
        "ablate-pt (PT)": ["×", "MEAN", "×", "×", "×", "×", "×"],
        "ablate-ft (FT)": ["×", "MEAN", "×", "×", "×", "×", "×"],   # config without smart/contrastive: off
        "ablate-mean-smart": ["×", "MEAN", "×", "✓", "×", "×", "×"],
        "ablate-cls-preqqp-ucl": ["✓", "CLS", "×", "×", "✓", "×", "×"],
        "ablate-running": ["×", "CLS", "✓", "×", "×", "✓", "×"],
        "ablate-failed": ["×", "MEAN", "✓", "×", "×", "×", "×"],
        "ablate-corrupt": ["", "", "", "", "", "", ""],            # no readable config: unknown, not "off"
        "ablate-csv-only": ["", "", "", "", "", "", ""],
    }
    assert set(table) == set(expected)
    for run, marks in expected.items():
        assert [table[run][c] for c in flags] == marks, run


def test_markdown_numbers_have_three_decimals_and_wall_minutes_one(rows):
    line = dict(zip(COLUMNS, markdown_rows(render_markdown(rows))[2]))
    assert line["run"] == "ablate-mean-smart"
    assert [line[c] for c in ("SST acc", "QQP acc", "STS Pearson", "average", "wall (min)")] == \
        ["0.470", "0.760", "0.820", "0.713", "5.2"]   # 315 s


def test_unfinished_runs_show_status_and_blank_metrics(rows):
    table = {line[0]: dict(zip(COLUMNS, line)) for line in markdown_rows(render_markdown(rows))[2:]}
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
    assert lines[0] == COLUMNS
    assert len(lines) == len(table) - 1   # no separator line
    numeric = {"SST acc", "QQP acc", "STS Pearson", "average", "wall (min)"}
    for csv_line, md_line in zip(lines[1:], table[2:]):
        for column, csv_cell, md_cell in zip(COLUMNS, csv_line, md_line):
            if column in numeric and csv_cell:
                assert f"{float(csv_cell):.{1 if column == 'wall (min)' else 3}f}" == md_cell
            else:
                assert csv_cell == md_cell, column
    first = dict(zip(COLUMNS, lines[1]))
    assert float(first["average"]) == pytest.approx(EXPECTED_AVERAGE["ablate-mean-smart"], abs=1e-15)
    assert float(first["wall (min)"]) == 5.25


def test_main_writes_markdown_and_csv_and_prints_the_table(tmp_path, capsys):
    prefix = tmp_path / "out" / "table"
    assert main([str(RUNS), "--out", str(prefix)]) == 0
    printed = capsys.readouterr().out
    assert (tmp_path / "out" / "table.md").read_text(encoding="utf-8") == printed
    assert markdown_rows(printed)[0] == COLUMNS
    with open(tmp_path / "out" / "table.csv", encoding="utf-8", newline="") as f:
        assert len(list(csv.reader(f))) == 1 + len(EXPECTED_AVERAGE) + len(UNFINISHED)


def test_main_default_prefix_is_folder_ablation_and_reruns_ignore_the_table(tmp_path, capsys):
    runs = tmp_path / "runs"
    shutil.copytree(RUNS, runs)
    assert main([str(runs)]) == 0
    first = capsys.readouterr().out
    assert (runs / "ablation.md").is_file() and (runs / "ablation.csv").is_file()
    assert main([str(runs), "--sort", "average"]) == 0
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
    assert row.flags == {e.flag: False for e in EXTENSIONS}


def test_find_flag_looks_in_any_section():
    config = {"model": {"pooling": "cls"}, "train": {"smart": True}, "extra": {"deep": {"ucl": True}}}
    assert find_flag(config, "pooling") == "cls"
    assert find_flag(config, "smart") is True            # in a section other than "smart"
    assert find_flag(config, "ucl") is True              # nested deeper
    assert find_flag(config, "scl") is None
    assert find_flag(config, "option", "finetune") == "finetune"
    assert find_flag({"smart": {"smart": False}}, "smart") is False   # section and flag share a name


def test_report_runs_as_a_module(tmp_path):
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    result = subprocess.run([sys.executable, "-m", "training.tools.report", str(RUNS), "--out", str(tmp_path / "t")],
                            cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert markdown_rows(result.stdout)[0] == COLUMNS


# ---- scripts/ablate.sh ----------------------------------------------------------------------------

def ablate(*args, env=None, timeout=60):
    return subprocess.run(["bash", str(ABLATE), *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, **(env or {})})


def test_ablate_script_parses():
    assert subprocess.run(["bash", "-n", str(ABLATE)], capture_output=True).returncode == 0


def test_ablate_help_prints_usage_and_runs_nothing(tmp_path):
    result = ablate("--help", "--out_dir", str(tmp_path / "grid"))
    assert result.returncode == 0
    assert "Usage: bash scripts/ablate.sh" in result.stdout and "--only NAME" in result.stdout
    assert not (tmp_path / "grid").exists()


def test_ablate_grid_rows_come_from_the_extension_table():
    result = ablate("--list")
    assert result.returncode == 0
    rows = [line.split() for line in result.stdout.splitlines()]
    assert rows == [[name, *flags] for name, flags in grid_rows()]
    names = [row[0] for row in rows]
    n = len(EXTENSIONS)
    assert len(rows) == 3 + 2 * n + n * (n - 1) // 2 + 3 and len(set(names)) == len(rows)
    assert names[:3] == ["pt", "ft", "cls"] and "--option" in rows[0] and "pretrain" in rows[0]
    assert "mean-preqqp" in names and "mean-ucl-preqqp" in names and "mean-all-but-smart" in names
    extensions = {f"--{e.flag}" for e in EXTENSIONS}
    assert "--lcl" in extensions
    for row in rows[2:]:
        assert "--pooling" in row, row[0]
    for ext in extensions:   # each extension alone on both poolings
        for pooling in ("cls", "mean"):
            assert any(set(r[1:]) - {"--pooling", pooling} == {ext} and pooling in r for r in rows), (ext, pooling)
    assert any(extensions <= set(r) for r in rows)   # everything on


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
    assert pt["option"] == "pretrain" and not any(pt[e.flag] for e in EXTENSIONS)
    assert all(everything[e.flag] for e in EXTENSIONS)


def test_ablate_rejects_an_unknown_row_or_option():
    assert ablate("--only", "no-such-row").returncode == 2
    assert ablate("--bogus").returncode == 2


FAKE_PYTHON = """#!/usr/bin/env bash
# Stand-in for python: `-m training.tools.*` goes to the real interpreter; a run_multitask.py call writes
# a finished metrics.json (with the --ucl flag in its config), except for SMART rows, which fail.
if [[ "$1" == "-m" ]]; then exec "{python}" "$@"; fi
shift
while (($# > 0)); do
  case "$1" in
    --run_name) name="$2"; shift 2;;
    --out_dir) out="$2"; shift 2;;
    --smart) smart=1; shift;;
    --ucl) ucl=true; shift;;
    *) shift;;
  esac
done
if [[ -n "${{smart:-}}" ]]; then echo "error: boom" >&2; exit 1; fi
mkdir -p "$out/$name"
cat > "$out/$name/metrics.json" <<EOF
{{"status": "finished", "config": {{"contrastive": {{"ucl": ${{ucl:-false}}}}}},
 "dev": {{"sst": 0.5, "qqp": 0.7, "sts": 0.6}}, "wall_seconds": 60}}
EOF
"""


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
    table = {line[0]: line for line in markdown_rows(result.stdout)[2:]}
    assert set(table) == {"ablate-ft (FT)", "ablate-mean-ucl", "ablate-cls"}
    assert (out / "ablation.md").is_file() and (out / "ablation.csv").is_file()
