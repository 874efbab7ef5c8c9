"""bench/steps.py end to end on the tiny model and fixture data (every side timed on the same steps),
bench/step_profile.py on the tiny model, and bench/interleaved_runs.py's order of runs and table (its
run processes faked): each side against the first.

``transformers`` is optional: step_profile adds HF's side exactly when it imports, so its test expects
the sides it asks for plus ``hf`` there (.ci/run runs the fast tier with and without it)."""
import json
import re
from pathlib import Path

import pytest

from bench import glued_sides, interleaved_runs, step_profile, steps
from training.extensions.smart import SmartRegularizer

FIXTURE_DATA = Path(__file__).parent / "fixtures" / "data"


def table_rows(text: str) -> dict[str, list[str]]:
    rows = [line.strip("|").split("|") for line in text.splitlines() if line.startswith("| ") and "--:" not in line]
    return {cells[0].strip(): [c.strip() for c in cells[1:]] for cells in rows[1:]}


def test_steps_times_every_side_on_the_same_steps(tiny_model_dir, capsys, monkeypatch):
    counts, smart_terms = {}, []
    step = steps.Side.step

    def counting(self, task, batch, timed=True):
        step(self, task, batch, timed)
        counts[id(self)] = (self.config.model.private_layers, self.config.smart.smart, len(self.seconds))
    monkeypatch.setattr(steps.Side, "step", counting)
    add = SmartRegularizer.add
    monkeypatch.setattr(SmartRegularizer, "add", lambda self, *a: smart_terms.append(a[1]) or add(self, *a))
    sides = ["--private_layers 0", "--private_layers 1", "--private_layers 0 --smart"]
    assert steps.main(["--data_dir", str(FIXTURE_DATA), "--model", str(tiny_model_dir), "--rounds", "4",
                       "--warmup", "1", "--batch_size", "8", "--max_length", "24", "--threads", "1",
                       *[arg for side in sides for arg in ("--side", side)]]) == 0
    # 4 rounds of 3 tasks each, the warm-up untimed; SMART's term added on the SMART side's 15 steps only
    assert sorted(counts.values()) == [(0, False, 12), (0, True, 12), (1, False, 12)]
    assert sorted(smart_terms) == sorted(["sst", "qqp", "sts"] * 5)
    rows = table_rows(capsys.readouterr().out)
    assert list(rows) == sides and rows[sides[0]][-1] == "1.000"
    assert all(float(rows[side][-1]) > 0 for side in sides)


def test_steps_refuses_the_same_side_twice(tiny_model_dir, capsys):
    with pytest.raises(SystemExit):
        steps.main(["--model", str(tiny_model_dir), "--side", "--smart", "--side", "--smart"])
    assert "two --side options give the same flags" in capsys.readouterr().err


def test_a_side_of_one_flag_is_its_value_not_an_option():
    assert glued_sides(["--side", "--smart", "--rounds", "2", "--side", "--pooling cls", "--side"]) == \
        ["--side=--smart", "--rounds", "2", "--side=--pooling cls", "--side"]


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


def test_step_profile_sums_ops_by_kind_and_the_rest_as_other():
    kinds = step_profile.by_kind({"aten::mm": 5.0, "aten::addmm": 2.0, "aten::copy_": 1.5, "aten::tanh": 0.25,
                                  "aten::_fused_adamw_": 3.0})
    assert kinds["matmuls"] == 7.0 and kinds["copies"] == 1.5 and kinds["optimizer (fused AdamW)"] == 3.0
    assert kinds["other"] == 0.25 and kinds["GELU"] == 0.0 and kinds["total"] == 11.75


def transformers_imports() -> bool:
    """What bench.throughput.make_sides tries before it adds HF's side (an import, not find_spec: a
    broken install counts as absent there too)."""
    try:
        import transformers  # noqa: F401
    except ImportError:
        return False
    return True


def test_step_profile_prints_one_column_per_side_whose_kinds_add_up(tiny_model_dir, capsys, monkeypatch):
    measured, profile_side = [], step_profile.profile_side   # the ms before the table rounds them

    def recording_profile_side(*args):
        measured.append(profile_side(*args))
        return measured[-1]

    monkeypatch.setattr(step_profile, "profile_side", recording_profile_side)
    step_profile.main(["--model", str(tiny_model_dir), "--batch_size", "2", "--seq_len", "8", "--steps", "1",
                       "--warmup", "1", "--also_ours_sparse"])
    out = capsys.readouterr().out
    # the two sides asked for, then HF's exactly when transformers imports (and the line saying which)
    hf = transformers_imports()
    sides = ["ours", "ours-sparse"] + (["hf"] if hf else [])
    assert "| kind (ms per step) | " + " | ".join(sides) + " |" in out.splitlines()
    assert ("hf: transformers " in out) is hf and ("transformers is not installed" in out) is not hf
    body = {kind: [float(cell) for cell in cells] for kind, cells in table_rows(out).items()}
    # the tiny model's matmuls take well under the 0.5 ms a printed cell shows as 1: checked unrounded
    assert list(body) == [*step_profile.KINDS, "other", "total"] and len(measured) == len(sides)
    assert all(len(values) == len(sides) for values in body.values())
    assert all(side["matmuls"] > 0 for side in measured)
    for column in range(len(sides)):   # the printed kinds add up to the total, to the rounding of each cell
        parts = sum(values[column] for kind, values in body.items() if kind != "total")
        assert abs(parts - body["total"][column]) <= 0.5 * len(body)
