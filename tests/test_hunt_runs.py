"""Defects found by following the training-run docs literally (README's flags and Reliability table,
docs/flags.md, docs/long-runs.md), pinned."""
import argparse

import run_multitask


def test_help_never_says_off_for_a_switch_whose_default_is_decided_at_run_time():
    """--sparse_embeddings defaults to None (on for one process without --compile): its help said both
    "default: on for one process ..." and "(default: off; ...)"."""
    help_text = {option: action.help for action in run_multitask.build_parser()._actions
                 for option in action.option_strings if action.help != argparse.SUPPRESS}
    sparse = help_text["--sparse_embeddings"]
    assert "default: on for one process" in sparse and "default: off" not in sparse
    assert sparse.endswith("(off: --no_sparse_embeddings)")
    assert help_text["--bucket"].endswith("(default: on; off: --no_bucket)")   # a bool default: stated as before
    assert help_text["--smart"].endswith("(default: off; off: --no_smart)")
