"""minbert-search and scripts/ablate.sh followed as docs/search.md, the module's docstring and ablate.sh's usage say.

- An ``int`` / ``log_int`` range of a whole-number flag (``epochs: {int: [1, 3]}``) is probed as ``--epochs 1``,
  which the run's parser takes (it was ``--epochs 1.0``: every such space refused before Ray).
- A list of numbers in YAML 1.1's text spelling (``lr: [1e-4, 3e-4]``) holds numbers, so a start point
  ``{lr: 1.0e-4}`` is in it and ``[1e-4, 1.0e-4]`` lists a value twice.
- The docstring's ``start_with`` says what ``fill`` does: the other flags at their first value.
- ``--time_budget nan`` is refused as any time that is not positive (it was a budget that never ended the part).
- ``ablate.sh --seeds N`` (N > 1) refuses ``--seed`` after ``--`` (each run's own seed silently replaced it).
- A first part with ``--confirm 1`` confirms in the same command: its second local Ray (the confirm grid's) failed
  to start ("Failed to start GCS"), as Ray keeps the auth token it read first and each local Ray set a new one.
"""
import json
import secrets
import subprocess
from pathlib import Path

import pytest

import run_multitask
from test_ray_grid import assert_none_left, env, tiny_flags
from test_reliability6 import search_command
from training.tools import search

ROOT = Path(__file__).resolve().parents[1]


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def test_an_int_range_is_probed_with_whole_numbers_the_run_takes(tmp_path):
    space = search.read_space(str(write(tmp_path / "space.json",
                                        '{"epochs": {"int": [1, 3]}, "batch_size": {"log_int": [2, 8]}}')))
    probes = {name: d.probes() for name, d in space.dimensions.items()}
    assert probes == {"epochs": [1, 3], "batch_size": [2, 8]}
    for name, values in probes.items():
        for value in values:
            flags = search.flags_of({name: value})
            assert flags == [f"--{name}", str(int(value))]
            assert getattr(run_multitask.build_parser().parse_args(flags), name) == value


@pytest.mark.slow   # the run's own check, in a Python of its own
def test_an_int_range_passes_the_runs_own_check_before_ray(tmp_path, tiny_model_dir):
    space = write(tmp_path / "space.json", '{"epochs": {"int": [1, 2]}, "private_layers": {"log_int": [1, 2]}}')
    args = search.parse_args(["--space", str(space), "--", "--model", str(tiny_model_dir),
                              "--data_dir", str(ROOT / "tests" / "fixtures" / "data"), "--max_length", "24"])
    search.check_space(args)   # it raised: "epochs 1.0: argument --epochs: invalid int value: '1.0'"


def test_yaml_text_numbers_in_a_list_are_numbers(tmp_path):
    pytest.importorskip("yaml")
    space = search.read_space(str(write(tmp_path / "space.yaml", "lr: [1e-4, 3e-4]\nwarmup_ratio: 1e-1\n"
                                                                 "start_with: [{lr: 1.0e-4}]\n")))
    assert space.dimensions["lr"].values == (1e-4, 3e-4) and space.dimensions["warmup_ratio"].values == (0.1,)
    assert space.start_with == [{"lr": 1e-4}]
    with pytest.raises(ValueError, match="lr: a value is listed twice"):
        search.read_space(str(write(tmp_path / "twice.yaml", "lr: [1e-4, 1.0e-4]\n")))
    words = search.read_space(str(write(tmp_path / "words.yaml", "tasks: [sst, 'sst,sts', none]\n")))
    assert words.dimensions["tasks"].values == ("sst", "sst,sts", "none")


def test_the_docstring_says_what_a_start_point_takes_for_the_other_flags(tmp_path):
    line = next(line for line in search.__doc__.splitlines() if "start_with:" in line)
    assert "their first value" in line
    text = '{"lr": [1e-4, 2e-4], "private_layers": [2, 0], "start_with": [{"lr": 2e-4}]}'
    space = search.read_space(str(write(tmp_path / "space.json", text)))
    assert search.fill(space) == [{"lr": 2e-4, "private_layers": 2}]   # 2: the list's first, not the flag's default


def test_a_time_budget_of_nan_is_refused(tmp_path, capsys):
    space = write(tmp_path / "space.json", '{"lr": [1e-4, 2e-4]}')
    with pytest.raises(SystemExit) as exit:
        search.parse_args(["--space", str(space), "--time_budget", "nan"])
    assert exit.value.code == 2 and "'nan': give a positive time" in capsys.readouterr().err
    assert search.duration("90m") == 5400 and search.duration("2h") == 7200 and search.duration("3600") == 3600


@pytest.mark.slow   # bash
def test_ablate_sh_refuses_a_seed_after_dashes_with_several_seeds():
    ablate = ["bash", str(ROOT / "scripts" / "ablate.sh"), "--list", "--only", "ft"]
    done = subprocess.run([*ablate, "--seeds", "2", "--", "--seed=3"], capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr == "ablate.sh: --seed=3 after --: the grid seeds its runs itself (11711, ...)\n"
    one = subprocess.run([*ablate, "--", "--seed", "3"], capture_output=True, text=True, cwd=ROOT)
    assert one.returncode == 0, one.stderr   # one seed a row: the run's own --seed, as before


@pytest.mark.slow
def test_a_first_part_with_confirm_confirms_in_the_same_command(tmp_path, tiny_model_dir):
    """A fresh search with ``--confirm 1``: its trial, then best.json and the default trained and compared, in one
    command (exit 2 before: "the local Ray: Ray did not start: Failed to start GCS", after the trials)."""
    mark = {"MINBERT_TEST_MARK": secrets.token_hex(8)}
    command = search_command(tmp_path, '{"private_layers": [0]}', 1, tiny_flags(
        tiny_model_dir, ROOT / "tests" / "fixtures" / "data", "--epochs", "1", "--max_steps_per_epoch", "3"))
    split = command.index("--")
    done = subprocess.run([*command[:split], "--confirm", "1", *command[split:]], capture_output=True, text=True,
                          cwd=tmp_path, env=env(**mark), timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count("Ray ready") == 2
    for row in ("default", "best"):
        metrics = json.loads((tmp_path / "search" / "confirm" / f"{row}-s11711" / "metrics.json").read_text())
        assert metrics["status"] == "finished"
    assert (tmp_path / "search" / "confirm" / "confirm.csv").is_file()
    assert_none_left(f"MINBERT_TEST_MARK={mark['MINBERT_TEST_MARK']}")
