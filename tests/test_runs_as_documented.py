"""Defects found by following the training-run docs literally (README's flags and Reliability table,
docs/flags.md, docs/long-runs.md), pinned."""
import argparse
import json
from pathlib import Path

import pytest

import run_multitask
from training.configuration.task_declarations import TaskFileError
from training.configuration.task_file import read_task_file

FIXTURE_DATA = Path(__file__).parent / "fixtures" / "data"


def test_help_never_says_off_for_a_switch_whose_default_is_decided_at_run_time():
    """--sparse_embeddings defaults to None (on for one process without --compile): its help said both
    "default: on for one process ..." and "(default: off; ...)"."""
    help_text = {option: action.help for action in run_multitask.build_parser()._actions
                 for option in action.option_strings if action.help != argparse.SUPPRESS}
    sparse = help_text["--sparse_embeddings"]
    assert "default: on for one process" in sparse and "default: off" not in sparse
    assert sparse.endswith("--no_sparse_embeddings: dense)")
    assert help_text["--bucket"].endswith("(default: on; off: --no_bucket)")   # a bool default: stated as before
    assert help_text["--smart"].endswith("(default: off; off: --no_smart)")


@pytest.mark.parametrize("field, value", [("score_range", [1, "5"]), ("score_range", [None, 5]),
                                          ("text_columns", ["a", ["b"]]), ("text_columns", [{"a": 1}, "b"])])
def test_a_task_file_field_of_the_wrong_type_is_one_line_not_a_traceback(tmp_path, capsys, field, value):
    """docs/own-tasks.md: a bad declaration is one error line naming the file, the task and the field; a score
    range with text or null in it, or a text column that is a list, was a TypeError traceback."""
    declaration = {"name": "rel", "kind": "pair_regression", "score_range": [1, 5],
                   "files": {"train": "t.csv", "dev": "d.csv"}, "text_columns": ["a", "b"], "label_column": "score",
                   field: value}
    task_file = tmp_path / "tasks.json"
    task_file.write_text(json.dumps({"tasks": [declaration]}), encoding="utf-8")
    with pytest.raises(TaskFileError, match=f"task 'rel': field '{field}'"):
        read_task_file(task_file)
    argv = ["--data_dir", str(FIXTURE_DATA), "--out_dir", str(tmp_path / "runs"), "--run_name", "r",
            "--task_file", str(task_file), "--tasks", "rel"]
    assert run_multitask.main(argv) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"error: --task_file {task_file}: task 'rel': field '{field}'") and "Traceback" not in err
    assert not (tmp_path / "runs").exists()
