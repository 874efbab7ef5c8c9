"""scripts/final_task_phase.py: a finished run trained further on one task, every task scored."""
import importlib.util
import re
from pathlib import Path

import run_multitask
from test_extensions import BUDGET, FIXTURE_DATA

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "final_task_phase.py"


def test_trains_the_named_task_and_scores_every_task(tmp_path, tiny_model_dir, capsys):
    argv = ["--data_dir", str(FIXTURE_DATA), "--model", str(tiny_model_dir), "--out_dir", str(tmp_path),
            "--run_name", "run", *BUDGET]
    assert run_multitask.main(argv) == 0
    capsys.readouterr()
    spec = importlib.util.spec_from_file_location("final_task_phase", SCRIPT)
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    assert script.main([str(tmp_path / "run"), "--data_dir", str(FIXTURE_DATA), "--tasks", "sts", "--steps", "3",
                        "--eval_every", "2"]) == 0
    lines = capsys.readouterr().out.splitlines()
    labels = [line.split(":")[0] for line in lines]
    assert labels[:2] == ["before", "round 2"] and labels[2].startswith("after 3 rounds") and len(lines) == 3
    scores = [re.findall(r"(SST acc|QQP acc|STS pearson) ([0-9.]+)", line) for line in lines]
    assert all(len(s) == 3 for s in scores)
    before, after = dict(scores[0]), dict(scores[-1])
    assert before["STS pearson"] != after["STS pearson"]   # the STS head and encoder trained
