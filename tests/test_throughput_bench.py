"""bench/throughput.py on the tiny model: every requested side of ours trains and infers, and each
prints a speed line (transformers is not installed in the test environment: ours only)."""
import re

import pytest

from bench import throughput


@pytest.mark.slow
def test_every_side_reports_a_speed(tiny_model_dir, capsys):
    throughput.main(["--model", str(tiny_model_dir), "--batch_size", "2", "--seq_lens", "8", "--reps", "1",
                     "--warmup", "1", "--threads", "1", "--also_ours_unfused", "--also_ours_manual",
                     "--also_ours_bf16", "--also_ours_sparse", "--also_ours_bernoulli",
                     "--keep_freed_memory"])
    out = capsys.readouterr().out
    for side in ("ours", "ours-bf16", "ours-sparse", "ours-bernoulli", "ours-unfused", "ours-manual"):
        for kind in ("train step", "inference"):
            assert re.search(rf"{kind} +{side} +[0-9.]+ seq/s", out), (side, kind, out)


def test_ours_is_the_library_default_and_manual_the_reference(tiny_model_dir):
    from minbert.model import Dropout, MultiHeadSelfAttention
    sides = {side.name: side for side in throughput.make_sides(tiny_model_dir, ["ours-manual"])}

    def paths(side):
        modules = list(side.model.modules())
        return ({m.impl for m in modules if isinstance(m, MultiHeadSelfAttention)},
                {m.masks for m in modules if isinstance(m, Dropout)}, side.optimizer.fused, side.optimizer.foreach)
    assert paths(sides["ours"]) == ({"auto"}, {"uniform"}, None, None)       # nothing set: the defaults
    assert paths(sides["ours-manual"]) == ({"manual"}, {"bernoulli"}, False, False)
