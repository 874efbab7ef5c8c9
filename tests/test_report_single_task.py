"""The report's single-task baselines: a run of one task is an ST row (never FT, no Δ vs FT), and every
multi-task row gets, per task with an ST row, its difference to it with a paired bootstrap interval of
that task's metric, checked against numpy on the same draws written out one resample at a time."""
import csv
import json
import shutil
import statistics
from pathlib import Path

import numpy as np
import pytest

from test_report import N_DEV, SEEDS, dev_scores, markdown_rows, predictions, write_dev_files
from training.learning.task_schema import BUILTIN_TASKS
from training.tools.bootstrap import resample_counts
from training.tools.report import collect_runs, columns, compare_to_baselines, forest_panels, main, render_markdown


def write_run(out: Path, name: str, seed: int, pred: dict, gold: dict, data_dir: Path, smart: bool = False,
              lr: float = 1e-4, private_layers: int = 0):
    """A finished run folder of the tasks in ``pred``: metrics.json and its dev prediction files."""
    folder = out / name
    folder.mkdir()
    for task_name, values in pred.items():
        task = BUILTIN_TASKS[task_name]
        rows = [f"{i},{v:.4f}" if task.label_type == "score" else f"{i},{int(v)}"
                for i, v in zip(gold[task_name][0], values)]
        (folder / f"{task.output_prefix}-dev-output.csv").write_text(
            "\n".join([f"id,{task.prediction_column}", *rows]) + "\n", encoding="utf-8")
    config = {"model": {"pooling": "mean", "option": "finetune", "private_layers": private_layers},
              "smart": {"smart": smart},
              "train": {"seed": seed, "tasks": ",".join(pred), "epochs": 1, "lr": lr}, "output": {"run_name": name}}
    dev = {task: score for task, score in dev_scores({**pred_all(gold), **pred}, gold).items() if task in pred}
    (folder / "metrics.json").write_text(json.dumps({"run_name": name, "status": "finished", "config": config,
                                                     "data_dir": str(data_dir), "dev": dev, "wall_seconds": 60.0}))


def pred_all(gold: dict) -> dict:
    """Gold-equal predictions of every task: fill-ins so that dev_scores can score a subset."""
    return {task: values.astype(float) for task, (_, values) in gold.items()}


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    """FT (skill 0.5), SMART (skill 0.8), a row whose SST predictions are the SST-alone run's, and ST rows for
    SST (skill 0.6) and STS (skill 0.5), 3 seeds each; no ST row for QQP."""
    root = tmp_path_factory.mktemp("single-task")
    gold = write_dev_files(root / "data")
    out = root / "runs"
    out.mkdir()
    pred = {}
    for seed in SEEDS:
        pred["st-sst", seed] = {"sst": predictions(gold, 0.6, seed + 300)["sst"]}
        pred["st-sts", seed] = {"sts": predictions(gold, 0.5, seed + 400)["sts"]}
        pred["ft", seed] = predictions(gold, 0.5, seed)
        pred["smart", seed] = predictions(gold, 0.8, seed + 100)
        pred["copy", seed] = {**predictions(gold, 0.5, seed + 200), "sst": pred["st-sst", seed]["sst"]}
        for row in ("st-sst", "st-sts", "ft", "copy"):
            write_run(out, f"{row}-s{seed}", seed, pred[row, seed], gold, root / "data",
                      smart=row == "copy", lr=2e-4 if row == "copy" else 1e-4)
        write_run(out, f"smart-s{seed}", seed, pred["smart", seed], gold, root / "data", smart=True)
        write_run(out, f"private-s{seed}", seed, pred["ft", seed], gold, root / "data", private_layers=2)
    rows = collect_runs(out)
    footer, notes = compare_to_baselines(rows, resamples=200, seed=0)
    return {"rows": {row.run: row for row in rows}, "footer": footer, "notes": notes, "gold": gold, "pred": pred,
            "out": out, "table": render_markdown(rows, footer)}


def sst_accuracy(pred: np.ndarray, gold: np.ndarray) -> float:
    return float(np.mean(pred == gold))


def test_a_run_of_one_task_is_an_st_row_with_no_delta_vs_ft(study):
    rows = study["rows"]
    order = list(rows)                                            # collect_runs' order: ST rows last
    assert order[-2:] == ["st-sts", "st-sst"] and order.index("ft") < order.index("st-sts")
    assert rows["st-sst"].baseline == rows["st-sts"].baseline == "ST" and rows["ft"].baseline == "FT"
    assert rows["st-sst"].vs_ft is None and rows["st-sst"].vs_alone == {} and study["notes"] == []
    assert rows["smart"].vs_ft is not None and "minus that of ft," in study["footer"]   # FT, not an ST row
    assert rows["private"].baseline == "" and rows["private"].vs_ft.observed == 0   # private layers: not FT
    assert "st-sst (ST)" in study["table"] and "ft (FT)" in study["table"]


def test_each_multitask_row_gets_its_per_task_difference_to_the_single_task_row(study):
    rows, pred, gold = study["rows"], study["pred"], study["gold"]["sst"][1]
    for name in ("ft", "smart"):
        by_hand = statistics.mean(sst_accuracy(pred[name, s]["sst"], gold) for s in SEEDS) \
            - statistics.mean(sst_accuracy(pred["st-sst", s]["sst"], gold) for s in SEEDS)
        d = rows[name].vs_alone["sst"]
        assert d.observed == pytest.approx(by_hand, abs=1e-12) and d.low <= d.observed <= d.high
        assert set(rows[name].vs_alone) == {"sst", "sts"}       # no ST row for QQP: no comparison
    assert rows["smart"].vs_alone["sst"].excludes_zero and rows["smart"].vs_alone["sst"].low > 0
    copy = rows["copy"].vs_alone["sst"]                          # the ST run's very SST predictions
    assert copy.observed == copy.low == copy.high == 0 and not copy.excludes_zero


def test_the_task_interval_is_a_bootstrap_written_out_by_hand(study):
    pred, gold = study["pred"], study["gold"]["sst"][1]
    resamples = 200
    draws = np.concatenate(list(resample_counts(0, "sst", N_DEV, resamples))).astype(int)
    # the second level: the seeds (the same for both rows: drawn once for the pair, in the seeds' name order)
    ordered = sorted(SEEDS, key=str)
    seed_draws = np.random.default_rng([0, len(SEEDS), len(SEEDS)]).integers(0, len(SEEDS), (len(SEEDS), resamples))
    differences = []
    for b in range(resamples):
        picked = np.repeat(np.arange(N_DEV), draws[b])
        accuracy = {(row, s): sst_accuracy(pred[row, s]["sst"][picked], gold[picked]) for row in ("ft", "st-sst")
                    for s in SEEDS}
        differences.append(statistics.mean(accuracy["ft", ordered[i]] - accuracy["st-sst", ordered[i]]
                                           for i in seed_draws[:, b]))
    d = study["rows"]["ft"].vs_alone["sst"]
    assert (d.low, d.high) == pytest.approx(tuple(np.percentile(differences, [2.5, 97.5])), abs=1e-12)


def test_the_table_shows_a_vs_alone_column_per_compared_task(study):
    lines = markdown_rows(study["table"])
    header = lines[0]
    # the settings the rows differ in after "run" (--smart, --private_layers, --lr; --tasks: the metric columns)
    assert header == ["run", "SMART", "private_layers", "lr", *columns(["sst", "qqp", "sts"], ["sst", "sts"])[1:]]
    assert "SST vs alone" in header and "STS vs alone" in header and "QQP vs alone" not in header
    cells = {line[0]: dict(zip(header, line)) for line in lines[2:]}
    assert [cells["copy"][column] for column in ("SMART", "private_layers", "lr")] == ["✓", "0", "0.0002"]
    assert [cells["private"][column] for column in ("SMART", "private_layers", "lr")] == ["×", "2", "0.0001"]
    d = study["rows"]["smart"].vs_alone["sst"]
    assert cells["smart"]["SST vs alone"] == f"{d.observed:+.3f} [{d.low:+.3f}, {d.high:+.3f}] *"
    assert cells["st-sst (ST)"]["SST vs alone"] == ""
    assert "SST vs alone = " not in study["footer"] and "that task's dev metric minus that of its single-task" \
        in study["footer"] and "sst: st-sst" in study["footer"]


def test_the_csv_and_terminal_view_carry_the_per_task_columns(study, tmp_path, capsys):
    assert main([str(study["out"]), "--bootstrap", "200", "--out", str(tmp_path / "t")]) == 0
    printed = capsys.readouterr().out
    assert "SST vs alone" not in printed.splitlines()[0]     # a block of its own, below the main one
    assert next(line for line in printed.splitlines() if "vs alone" in line).split()[:4] == ["run", "SST", "vs", "alone"]
    assert max(map(len, printed.splitlines())) <= 120
    with open(tmp_path / "t.csv", encoding="utf-8", newline="") as f:
        table = list(csv.DictReader(f))
    smart = next(row for row in table if row["run"] == "smart")
    d = study["rows"]["smart"].vs_alone["sst"]
    assert float(smart["SST vs alone"]) == d.observed and float(smart["SST vs alone low"]) == d.low
    assert smart["SST vs alone excludes 0"] == "✓"


def test_the_forest_plot_has_a_panel_per_compared_task_beside_the_average(study):
    rows = list(study["rows"].values())
    panels = dict(forest_panels(rows))
    assert list(panels) == ["Δ overall dev score vs FT", "Δ SST acc vs alone", "Δ STS Pearson vs alone"]
    # each line names its row and how many seeds its interval pools
    assert [name for name, _ in panels["Δ overall dev score vs FT"]] == [
        f"{r.run} ({len(r.seed_runs)} seeds)" for r in rows if r.vs_ft]
    ft = f"ft ({len(study['rows']['ft'].seed_runs)} seeds)"
    assert ft not in dict(panels["Δ overall dev score vs FT"])                  # FT is the baseline there ...
    assert dict(panels["Δ SST acc vs alone"])[ft] is study["rows"]["ft"].vs_alone["sst"]   # ... not here
    assert not [name for name in dict(panels["Δ SST acc vs alone"]) if name.startswith("st-sst")]
    assert forest_panels([study["rows"]["st-sst"]]) == []                       # nothing to draw


def test_without_st_rows_the_columns_are_as_before(study, tmp_path):
    out = tmp_path / "runs"
    out.mkdir()
    for seed in SEEDS:
        write_run(out, f"ft-s{seed}", seed, study["pred"]["ft", seed], study["gold"], study["out"].parent / "data")
    rows = collect_runs(out)
    compare_to_baselines(rows, resamples=50, seed=0)
    assert markdown_rows(render_markdown(rows))[0] == columns()


def test_a_one_task_run_without_saved_tasks_is_st_and_a_one_task_pt_run_is_compared_with_nothing(study, tmp_path):
    out = tmp_path / "runs"
    out.mkdir()
    data, gold, pred = study["out"].parent / "data", study["gold"], study["pred"]
    write_run(out, "ft", SEEDS[0], pred["ft", SEEDS[0]], gold, data)
    write_run(out, "old-sst", SEEDS[0], pred["st-sst", SEEDS[0]], gold, data)
    write_run(out, "pt-sst", SEEDS[0], pred["st-sst", SEEDS[0]], gold, data)
    old = json.loads((out / "old-sst" / "metrics.json").read_text())
    del old["config"]["train"]["tasks"]          # saved before --tasks: one task in dev tells
    (out / "old-sst" / "metrics.json").write_text(json.dumps(old))
    pt = json.loads((out / "pt-sst" / "metrics.json").read_text())
    pt["config"]["model"]["option"] = "pretrain"
    (out / "pt-sst" / "metrics.json").write_text(json.dumps(pt))
    rows = {row.run: row for row in collect_runs(out)}
    footer, notes = compare_to_baselines(list(rows.values()), resamples=50, seed=0)
    assert rows["old-sst"].baseline == "ST" and rows["pt-sst"].baseline == "PT" and notes == []
    assert rows["pt-sst"].vs_ft is None and rows["pt-sst"].vs_alone == {} and set(rows["ft"].vs_alone) == {"sst"}


def test_other_dev_ids_leave_the_cell_blank_with_a_note(study, tmp_path, capsys):
    out, data = tmp_path / "runs", tmp_path / "other-data"
    out.mkdir()
    shutil.copytree(study["out"].parent / "data", data)
    sst_dev = data / BUILTIN_TASKS["sst"].files["dev"]
    sst_dev.write_text(sst_dev.read_text(encoding="utf-8").replace("\tsst", "\tx-sst"), encoding="utf-8")
    gold = {**study["gold"], "sst": (["x-" + i for i in study["gold"]["sst"][0]], study["gold"]["sst"][1])}
    write_run(out, "ft", SEEDS[0], study["pred"]["ft", SEEDS[0]], study["gold"], study["out"].parent / "data")
    write_run(out, "st-sst", SEEDS[0], study["pred"]["st-sst", SEEDS[0]], gold, data)
    assert main([str(out), "--bootstrap", "50"]) == 0
    captured = capsys.readouterr()
    assert "note: ft: no SST vs alone: not the same sst dev examples as its baseline" in captured.err
    assert "SST vs alone" not in captured.out and "Traceback" not in captured.err


def test_capped_rows_are_compared_with_the_st_row_capped_alike_and_the_footer_says_where_none_is(study, tmp_path):
    """Smoke runs (``--max_eval_examples 20``) of FT and SMART beside the uncapped study: without an ST row capped
    alike they have no "vs alone" and the footer says so; with a capped SST-alone run, SMART's SST is compared with
    it on the first 20 SST dev examples (and FT's too), the uncapped rows still with the uncapped ST rows."""
    cap, out, data, gold, pred = 20, tmp_path / "runs", study["out"].parent / "data", study["gold"], study["pred"]
    shutil.copytree(study["out"], out)
    first = {task: (ids[:cap], labels[:cap]) for task, (ids, labels) in gold.items()}

    def smoke(name, seed, predicted, **flags):
        write_run(out, f"{name}-s{seed}", seed, {task: values[:cap] for task, values in predicted.items()}, first,
                  data, **flags)
        metrics = json.loads((out / f"{name}-s{seed}" / "metrics.json").read_text())
        metrics["config"]["data"] = {"max_eval_examples": cap}
        (out / f"{name}-s{seed}" / "metrics.json").write_text(json.dumps(metrics))
    for seed in SEEDS:
        smoke("smoke-ft", seed, pred["ft", seed])
        smoke("smoke-smart", seed, pred["smart", seed], smart=True)
    rows = {row.run: row for row in collect_runs(out)}
    footer, notes = compare_to_baselines(list(rows.values()), resamples=50, seed=0)
    assert notes == [] and rows["smoke-smart"].vs_ft is not None and rows["smoke-smart"].vs_alone == {}
    assert rows["smart"].vs_alone.keys() == {"sst", "sts"}   # the uncapped rows as before
    assert footer.endswith(f" No SST vs alone: smoke-smart, smoke-ft: no sst ST row capped alike (--max_eval_examples "
                           f"{cap}). No STS vs alone: smoke-smart, smoke-ft: no sts ST row capped alike "
                           f"(--max_eval_examples {cap}).")
    for seed in SEEDS:
        smoke("smoke-st-sst", seed, pred["st-sst", seed])
    rows = {row.run: row for row in collect_runs(out)}
    footer, notes = compare_to_baselines(list(rows.values()), resamples=50, seed=0)
    assert notes == [] and rows["smoke-smart"].vs_alone.keys() == {"sst"} and rows["smoke-st-sst"].baseline == "ST"
    expected = statistics.mean(sst_accuracy(pred["smart", seed]["sst"][:cap], first["sst"][1])
                               - sst_accuracy(pred["st-sst", seed]["sst"][:cap], first["sst"][1]) for seed in SEEDS)
    assert rows["smoke-smart"].vs_alone["sst"].observed == pytest.approx(expected, abs=1e-12)
    assert f"sst: st-sst; sts: st-sts; sst capped at {cap}: smoke-st-sst)" in footer
    assert footer.endswith(f" No STS vs alone: smoke-smart, smoke-ft: no sts ST row capped alike (--max_eval_examples "
                           f"{cap}).")
