"""Defects found by following docs/grid.md and the report's --help literally (hand-written run folders, no training)."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

from test_report import SEEDS, predictions, write_dev_files, write_run
from training.tools.grid import first_refused
from training.tools.bootstrap import Difference
from training.tools.report import RunRow, collect_runs, compare_to_baselines, main, render_compact


def reorder_tasks(folder: Path, order: tuple[str, ...]) -> None:
    """The run as ``--tasks`` in ``order`` leaves it: its dev metrics in that order, and the flag saved."""
    path = folder / "metrics.json"
    data = json.loads(path.read_text(encoding="utf-8"))
    data["dev"] = {task: data["dev"][task] for task in order}
    data["config"]["train"]["tasks"] = ",".join(order)
    path.write_text(json.dumps(data), encoding="utf-8")


@pytest.mark.parametrize("order", [("sts", "qqp", "sst"), ("qqp", "sst", "sts")])
def test_a_row_of_the_same_tasks_in_another_order_is_compared_with_ft(tmp_path, order):
    """`--tasks sts,qqp,sst` trains the same three tasks on the same dev examples as the default: its row gets the
    same Δ vs FT and interval as the same predictions saved in the default order (it got none: "not the same tasks
    and dev examples as the baseline")."""
    gold = write_dev_files(tmp_path / "data")
    out = tmp_path / "runs"
    out.mkdir()
    for seed in SEEDS:
        write_run(out, f"ft-s{seed}", seed, predictions(gold, 0.5, seed), gold, tmp_path / "data")
        write_run(out, f"ucl-s{seed}", seed, predictions(gold, 0.8, seed + 100), gold, tmp_path / "data", ucl=True)
        write_run(out, f"preqqp-s{seed}", seed, predictions(gold, 0.8, seed + 100), gold, tmp_path / "data",
                  pre_qqp=True)
        reorder_tasks(out / f"ucl-s{seed}", order)
    rows = {row.run: row for row in collect_runs(out)}
    footer, notes = compare_to_baselines(list(rows.values()), resamples=200)
    assert notes == []
    reordered, default = rows["ucl"].vs_ft, rows["preqqp"].vs_ft
    assert reordered is not None
    assert (reordered.observed, reordered.low, reordered.high) == pytest.approx(
        (default.observed, default.low, default.high), abs=1e-12)


def test_the_latex_comments_say_why_no_row_has_a_delta(tmp_path, capsys):
    """With no Δ anywhere the caption says "(the comments above say why)": the comments hold each row's reason
    (here: no gold labels in --data_dir), not only the footer, which does not say it."""
    gold = write_dev_files(tmp_path / "data")
    out = tmp_path / "runs"
    out.mkdir()
    for seed in SEEDS[:2]:
        write_run(out, f"ft-s{seed}", seed, predictions(gold, 0.5, seed), gold, tmp_path / "data")
        write_run(out, f"ucl-s{seed}", seed, predictions(gold, 0.8, seed), gold, tmp_path / "data", ucl=True)
    (tmp_path / "empty").mkdir()
    assert main([str(out), "--data_dir", str(tmp_path / "empty"), "--format", "latex", "--bootstrap", "50"]) == 0
    latex = capsys.readouterr().out
    assert "the comments above say why" in latex
    comments = " ".join(line[2:] for line in latex.splitlines() if line.startswith("% "))
    assert "ucl: no $\\Delta$ vs FT: gold labels: data file not found" in comments


@pytest.mark.slow
def test_grid_listing_whose_reader_went_away_ends_without_a_traceback():
    """`python -m training.tools.grid | head -1` (its docstring's command) where the reader has gone before the
    listing is written: the command ends as every command of the project does then (``run_command``: no error,
    exit code 141), not with a BrokenPipeError's traceback."""
    root = Path(__file__).resolve().parent.parent
    listing = subprocess.Popen([sys.executable, "-m", "training.tools.grid"], cwd=root, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    listing.stdout.close()   # the reader goes away (head, after its lines) before the child has written
    stderr = listing.stderr.read()
    assert listing.wait(timeout=120) == 141
    assert "Traceback" not in stderr and "BrokenPipeError" not in stderr


def ft_and_ucl_at_three_seeds(tmp_path: Path) -> tuple[dict, Path]:
    """The gold dev files and a folder of two configurations (FT, --ucl) at the three seeds."""
    gold = write_dev_files(tmp_path / "data")
    out = tmp_path / "runs"
    out.mkdir()
    for seed in SEEDS:
        write_run(out, f"ft-s{seed}", seed, predictions(gold, 0.5, seed), gold, tmp_path / "data")
        write_run(out, f"ucl-s{seed}", seed, predictions(gold, 0.7, seed + 100), gold, tmp_path / "data", ucl=True)
    return gold, out


def test_a_folder_given_twice_counts_its_runs_once(tmp_path, capsys):
    """`report DIR DIR/` (or DIR and its absolute path) reads each run folder once: 3 seeds, not 6 with a
    smaller std; the table is the one of `report DIR`."""
    gold, out = ft_and_ucl_at_three_seeds(tmp_path)
    assert main([str(out), "--full", "--bootstrap", "50"]) == 0
    once = capsys.readouterr()
    assert main([str(out), str(out) + "/", str(out.resolve()), "--full", "--bootstrap", "50"]) == 0
    thrice = capsys.readouterr()
    assert thrice.out == once.out
    assert "| 3 |" in once.out and "(2 rows from 6 runs;" in thrice.err


def test_a_rerun_of_a_seed_is_pooled_once(tmp_path, capsys):
    """`minbert-grid --grid quick --seeds 1` (folder quick-ft, seed 11711) then `--seeds 3` (quick-ft-s11711, ...)
    in one --out_dir: the report pools 3 seeds, not 4 runs of 3 seeds (a repeated seed is no second sample: its std
    and interval would shrink); a note names the rerun and the run it repeats."""
    gold, out = ft_and_ucl_at_three_seeds(tmp_path)
    assert main([str(out), "--full", "--bootstrap", "50"]) == 0
    three = capsys.readouterr().out
    write_run(out, "ft", SEEDS[0], predictions(gold, 0.5, SEEDS[0]), gold, tmp_path / "data")   # the same run again
    assert main([str(out), "--full", "--bootstrap", "50"]) == 0
    again = capsys.readouterr()
    assert again.out == three
    assert f"note: ft-s{SEEDS[0]} is ft again (the same configuration and seed {SEEDS[0]}): pooled once" in again.err


def test_an_unknown_baseline_is_refused_with_the_bootstrap_off_too(tmp_path, capsys):
    """`--baseline` with a typo and `--bootstrap 0`: one error line naming the rows, as with the bootstrap on (the
    table came out with a column "Δ vs <typo>")."""
    gold = write_dev_files(tmp_path / "data")
    out = tmp_path / "runs"
    out.mkdir()
    write_run(out, f"ft-s{SEEDS[0]}", SEEDS[0], predictions(gold, 0.5, SEEDS[0]), gold, tmp_path / "data")
    for bootstrap in ("0", "50"):
        assert main([str(out), "--baseline", "fft", "--bootstrap", bootstrap]) == 1
        assert "--baseline fft: no finished row of that name; the rows are ft" in capsys.readouterr().err


def test_the_terminal_view_wraps_columns_that_do_not_fit_and_cuts_no_number():
    """`report docs/runs/avx2 --baseline default` (its README's command): the main block needed 126 columns and
    the aside one 125, so the line ends were cut, an interval's upper end and its * with them. The columns that do
    not fit go to a block of their own, the run column repeated; an interval stays beside its Δ."""
    d, far = Difference(-0.0031, -0.0089, 0.0036), Difference(-0.0593, -0.0716, -0.0476)
    dev, std = {"sst": 0.4971, "qqp": 0.7774, "sts": 0.8093}, {"sst": 0.006, "qqp": 0.005, "sts": 0.002}
    rows = [RunRow(run=name, status="finished", dev=dev, dev_std=std, average=0.7261, average_std=0.001,
                   seed_runs=[None] * 3, vs_ft=far, vs_alone={"sts": far}, vs_baseline={t: d for t in dev})
            for name in ("para-cosine-separate", "mean-anneal-private2")]
    view = render_compact(rows, baseline="default")
    assert max(map(len, view.splitlines())) <= 120 and "…" not in view
    assert view.count("-0.059 [-0.072, -0.048] *") == 2 and view.count("[-0.072, -0.048] *") == 4
    blocks = view.strip().split("\n\n")
    assert [block.split("  ")[0] for block in blocks] == ["run"] * 4
    assert any("Δ vs default" in block and "95% CI" in block for block in blocks)


@pytest.mark.slow
@pytest.mark.parametrize("flag", ["--help", "-h"])
def test_help_after_the_double_dash_is_one_line_naming_the_run(flag):
    """`minbert-grid -- --help`: the run's parser prints its help and exits 0, with nothing on stderr; the flag check
    said "IndexError: list index out of range" (no run, no flag named) instead of one line naming both."""
    refused = first_refused([("run ablate-ft", [flag])])
    assert refused.startswith("run ablate-ft: ") and flag in refused
    assert "IndexError" not in refused
