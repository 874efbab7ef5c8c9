"""bench/towers.py and bench/interleaved_runs.py end to end on the tiny model and fixture data: each
side is timed on the same number of steps (runs), and the table gives each side against the first."""
import re
from pathlib import Path

import pytest

from bench import interleaved_runs, towers

FIXTURE_DATA = Path(__file__).parent / "fixtures" / "data"


def table_rows(text: str) -> dict[str, list[str]]:
    rows = [line.strip("|").split("|") for line in text.splitlines() if line.startswith("| ") and "--:" not in line]
    return {cells[0].strip(): [c.strip() for c in cells[1:]] for cells in rows[1:]}


def test_towers_times_both_sides_on_the_same_steps(tiny_model_dir, capsys, monkeypatch):
    counts = {}
    step = towers.Side.step

    def counting(self, task, batch, timed=True):
        step(self, task, batch, timed)
        counts[id(self)] = (self.config.model.private_layers, len(self.seconds))
    monkeypatch.setattr(towers.Side, "step", counting)
    assert towers.main(["--data_dir", str(FIXTURE_DATA), "--model", str(tiny_model_dir), "--private_layers", "1",
                        "--rounds", "4", "--warmup", "1", "--batch_size", "8", "--max_length", "24",
                        "--threads", "1"]) == 0
    assert sorted(counts.values()) == [(0, 12), (1, 12)]   # 4 rounds of 3 tasks each, the warm-up untimed
    rows = table_rows(capsys.readouterr().out)
    assert list(rows) == ["0", "1"] and rows["0"][-1] == "1.000"
    assert float(rows["1"][-1]) > 0


@pytest.mark.slow
def test_interleaved_runs_reports_every_side_run_by_run(tiny_model_dir, capsys):
    common = ["--data_dir", str(FIXTURE_DATA), "--model", str(tiny_model_dir), "--epochs", "12", "--batch_size", "4", "--max_length", "24", "--tasks", "sst"]
    assert interleaved_runs.main(["--side", "--pooling cls", "--side", "--pooling mean", "--repeats", "1",
                                  "--", *common]) == 0
    out = capsys.readouterr().out
    assert re.findall(r"repeat 1, (--pooling \w+): [\d.]+ examples/s", out) == ["--pooling cls", "--pooling mean"]
    rows = table_rows(out)
    assert list(rows) == ["`--pooling cls`", "`--pooling mean`"] and rows["`--pooling cls`"][-1] == "1.000"


def test_interleaved_runs_refuses_what_it_sets_and_a_single_side(capsys):
    for argv in (["--side", "a"], ["--side", "a", "--side", "b", "--", "--run_name", "x"]):
        with pytest.raises(SystemExit):
            interleaved_runs.main(argv)
    assert "--out_dir, --run_name and --resume are set by the benchmark" in capsys.readouterr().err
