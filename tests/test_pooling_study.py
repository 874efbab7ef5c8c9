"""scripts/pooling_study.sh parses and lists its runs; scripts/plot_table.py turns result JSON files
into a Markdown table (and a PNG when matplotlib is importable, one line when it is not)."""
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "pooling_study.sh"
STS_DEV = ROOT / "tests" / "fixtures" / "data" / "sts-dev.csv"


def _plot_table():
    spec = importlib.util.spec_from_file_location("plot_table", ROOT / "scripts" / "plot_table.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _sts_json(path: Path, pooling, reduction, spearman, pearson):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"encoder": "x", "pooling": pooling, "reduction": reduction, "datasets": {
        "sts-dev": {"path": "sts-dev.csv", "layout": "cs224n",
                    "all": {"spearman": spearman, "pearson": pearson, "n": 10}}}}))
    return path


def _probe_json(path: Path, dev_ari):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"task": "cfimdb", "pooling": "mean", "probe": {
        "train_accuracy": 0.9, "dev_accuracy": 0.8, "n_train": 8, "n_dev": 4, "converged": True},
        "clustering": {"dev": {"ari": dev_ari, "ami": 0.2, "k": 2, "n": 4},
                       "train": {"ari": 0.3, "ami": 0.25, "k": 2, "n": 8}}}))
    return path


def test_pooling_study_script_parses():
    assert subprocess.run(["bash", "-n", str(SCRIPT)], capture_output=True).returncode == 0


@pytest.mark.slow
def test_pooling_study_dry_run_lists_every_mode_and_reduction(tmp_path):
    env = {**os.environ, "PYTHON": sys.executable}
    result = subprocess.run(["bash", str(SCRIPT), "--dry_run", "--data", str(STS_DEV), "--out", str(tmp_path),
                             "--ucl_checkpoint", str(tmp_path)], capture_output=True, text=True, env=env, cwd=ROOT)
    assert result.returncode == 0, result.stderr
    lines = [line for line in result.stdout.splitlines() if "scripts.evaluate_embeddings" in line]
    # 4 modes without a reduction + 6 layer-combining modes x {mean, max}, for base and ucl
    assert len(lines) == 2 * (4 + 2 * 6)
    assert sum("--checkpoint" in line for line in lines) == 16
    assert any("--pooling first_last --reduction max" in line and "base/first_last-max.json" in line for line in lines)
    assert "plot_table.py" in result.stdout.splitlines()[-1]


def test_pooling_study_rejects_missing_data(tmp_path):
    result = subprocess.run(["bash", str(SCRIPT), "--data", str(tmp_path / "nope.csv")],
                            capture_output=True, text=True)
    assert result.returncode == 2 and "STS data not found" in result.stderr


def test_plot_table_writes_markdown_and_png(tmp_path):
    plot_table = _plot_table()
    a = _sts_json(tmp_path / "base" / "mean.json", "mean", "mean", 0.8081, 0.8382)
    b = _sts_json(tmp_path / "ucl" / "first_last-max.json", "first_last", "max", 0.7, None)
    md, png = tmp_path / "out" / "study.md", tmp_path / "out" / "study.png"
    assert plot_table.main([str(a), str(b), "--md", str(md), "--png", str(png), "--title", "T"]) == 0
    lines = md.read_text().splitlines()
    assert lines[0] == "## T"
    assert "| pooling | base Spearman | base Pearson | ucl Spearman | ucl Pearson |" in lines
    assert "| mean | 80.81 | 83.82 | - | - |" in lines
    assert "| first_last (max) | - | - | 70.00 | - |" in lines
    if importlib.util.find_spec("matplotlib") is not None:
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_plot_table_without_matplotlib_still_writes_markdown(tmp_path, monkeypatch, capsys):
    plot_table = _plot_table()
    monkeypatch.setitem(sys.modules, "matplotlib", None)       # import matplotlib -> ImportError
    a = _probe_json(tmp_path / "ce" / "cfimdb.json", 0.1)
    b = _probe_json(tmp_path / "lcl" / "cfimdb.json", 0.5)
    md, png = tmp_path / "probe.md", tmp_path / "probe.png"
    assert plot_table.main([str(a), str(b), "--md", str(md), "--png", str(png)]) == 0
    assert f"matplotlib is not installed: pip install matplotlib to draw {png}" in capsys.readouterr().out
    assert not png.exists()
    lines = md.read_text().splitlines()
    assert "| measure | ce | lcl |" in lines
    assert "| k-means dev ARI | 0.1000 | 0.5000 |" in lines
    assert "| probe dev acc. | 0.8000 | 0.8000 |" in lines


def test_plot_table_refuses_mixed_kinds_and_duplicates(tmp_path, capsys):
    plot_table = _plot_table()
    sts = _sts_json(tmp_path / "base" / "mean.json", "mean", "mean", 0.8, 0.8)
    probe = _probe_json(tmp_path / "base" / "p.json", 0.1)
    again = _sts_json(tmp_path / "base" / "mean2.json", "mean", "mean", 0.7, 0.7)
    assert plot_table.main([str(sts), str(probe), "--md", str(tmp_path / "t.md")]) == 1
    assert "mix" in capsys.readouterr().err
    assert plot_table.main([str(sts), str(again), "--md", str(tmp_path / "t.md")]) == 1
    assert "second result" in capsys.readouterr().err


@pytest.mark.skipif(importlib.util.find_spec("matplotlib") is None, reason="matplotlib not installed")
def test_plot_table_draws_probe_chart(tmp_path):
    plot_table = _plot_table()
    a = _probe_json(tmp_path / "ce" / "cfimdb.json", 0.1)
    png = tmp_path / "probe.png"
    assert plot_table.main([str(a), "--md", str(tmp_path / "p.md"), "--png", str(png)]) == 0
    assert png.stat().st_size > 1000
