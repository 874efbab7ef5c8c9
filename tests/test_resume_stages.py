"""Exact resumption with every stage on: a run cut after any checkpoint of any stage and resumed ends
like the uninterrupted run (a file of its own, so that its uninterrupted run and tests/test_resume.py's
can be made by two test workers at once)."""
from pathlib import Path

import pytest

from test_resume import assert_same_run, clean_run, final_state, resume_after_cut

EVERY_STAGE = ["--epochs", "2", "--ucl", "--ucl_steps", "4", "--ucl_batch_size", "4", "--scl", "--scl_steps", "3",
               "--scl_batch_size", "4", "--pre_qqp", "--pre_qqp_steps", "4", "--joint_loss", "--loss_weighting",
               "learned", "--smart", "--smart_bregman"]


@pytest.fixture(scope="module")
def clean_every_stage(tiny_model_dir, tmp_path_factory) -> Path:
    return clean_run(tiny_model_dir, tmp_path_factory.mktemp("clean"), "every_stage", *EVERY_STAGE)


@pytest.mark.slow
@pytest.mark.parametrize("which", [1, 5, 9, 15, 18, -1])
def test_resume_from_any_checkpoint_of_any_stage(tiny_model_dir, tmp_path, clean_every_stage, which):
    """With every stage on (SimCSE, pre-QQP, joint learned loss, SMART + Bregman), resuming from a
    checkpoint inside each stage (steps 1–4 are ucl, 5–7 scl, 8–11 pre-QQP, 12–19 the first
    multi-task epoch, 20–27 the second; checkpoint i is step i + 1) ends exactly like the
    uninterrupted run — also from the end of the first epoch (18) and of the last (-1)."""
    run_dir = tmp_path / "every_stage"
    stage = resume_after_cut(clean_every_stage, run_dir, which)
    assert stage == {1: "ucl", 5: "scl", 9: "pre_qqp", 15: "multitask", 18: "multitask", -1: "multitask"}[which]
    assert_same_run(final_state(run_dir), final_state(clean_every_stage))
