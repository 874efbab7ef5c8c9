"""A run's end state is written once (issue 74): once metrics.json says "finished", a Ctrl-C, a SIGTERM or an error
in the clean-up after it (the curves, the model card, removing the training state) leaves it finished, without an
error, and its lock released; a grid then keeps it (tests/test_reliability6.py). A stop there ends the command with 0
(issue 86: the run finished; tests/test_reliability7.py holds the stop until the clean-up is done)."""
import json

import pytest

import run_multitask
import training.harness.run_folder as run_folder
from training.tools.command import Terminated

from test_resume import argv


@pytest.mark.parametrize("stop", [KeyboardInterrupt, Terminated, OSError])
def test_a_stop_during_the_clean_up_leaves_a_finished_run_finished(stop, tmp_path, tiny_model_dir, monkeypatch):
    def model_card(metrics, folder):
        raise stop("the stop comes while the model card is written")
    monkeypatch.setattr(run_folder, "write_model_card", model_card)
    flags = argv(tiny_model_dir, tmp_path, "run", "--epochs", "1", "--max_steps_per_epoch", "2")
    # an error says what failed (1); a stop after the run finished (issue 86) says it finished and exits 0
    assert run_multitask.main(flags) == (1 if stop is OSError else 0)
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert metrics["status"] == "finished" and "error" not in metrics and metrics["dev"]
    assert not (tmp_path / "run" / ".lock").exists()



def test_an_error_before_the_end_state_still_fails_the_run(tmp_path, tiny_model_dir, monkeypatch):
    """The guard is the end state alone: a stop before "finished" is written marks the run as before."""
    def predictions(*args, **kwargs):
        raise KeyboardInterrupt()
    monkeypatch.setattr(run_folder.RunFiles, "predictions", predictions)
    assert run_multitask.main(argv(tiny_model_dir, tmp_path, "run", "--epochs", "1", "--max_steps_per_epoch", "2")) == 130
    assert json.loads((tmp_path / "run" / "metrics.json").read_text())["status"] == "interrupted"
