"""bench/towers.py end to end on the tiny model and fixture data (both sides timed on the same steps),
and bench/interleaved_runs.py's order of runs and table (its run processes faked): each side against the first."""
import json
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


def test_interleaved_runs_alternates_the_sides_and_reports_each_against_the_first(capsys, monkeypatch):
    """The order of the runs and the table, with each run's process replaced by one that writes the
    metrics.json a finished run writes (a real run of each side: tests/test_run_multitask.py's business)."""
    calls, rates = [], {"--pooling cls": [40.0, 44.0, 42.0], "--pooling mean": [21.0, 22.0, 20.0]}

    def fake_run(command, check, stdout):
        side = " ".join(command[command.index("--data_dir") + 2:command.index("--out_dir")])
        out, name = command[command.index("--out_dir") + 1], command[command.index("--run_name") + 1]
        calls.append((side, name))
        folder = Path(out) / name
        folder.mkdir(parents=True)
        rate = rates[side][sum(1 for s, _ in calls if s == side) - 1]
        (folder / "metrics.json").write_text(json.dumps({"train_examples_per_second": rate}))
    monkeypatch.setattr(interleaved_runs.subprocess, "run", fake_run)
    assert interleaved_runs.main(["--side", "--pooling cls", "--side", "--pooling mean", "--repeats", "3",
                                  "--", "--data_dir", "DATA"]) == 0
    assert [side for side, _ in calls] == ["--pooling cls", "--pooling mean"] * 3
    assert len({name for _, name in calls}) == 6
    out = capsys.readouterr().out
    assert re.findall(r"repeat (\d), (--pooling \w+): ([\d.]+) examples/s", out)[:2] == [
        ("1", "--pooling cls", "40.0"), ("1", "--pooling mean", "21.0")]
    rows = table_rows(out)
    assert rows["`--pooling cls`"][1:] == ["42.0", "1.000"] and rows["`--pooling mean`"][1:] == ["21.0", "0.500"]


def test_interleaved_runs_refuses_what_it_sets_and_a_single_side(capsys):
    for argv in (["--side", "a"], ["--side", "a", "--side", "b", "--", "--run_name", "x"]):
        with pytest.raises(SystemExit):
            interleaved_runs.main(argv)
    assert "--out_dir, --run_name and --resume are set by the benchmark" in capsys.readouterr().err
