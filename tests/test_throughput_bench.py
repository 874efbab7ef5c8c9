"""bench/throughput.py on the tiny model: every requested side of ours trains and infers, and each
prints a speed line; HF's side is there exactly when ``transformers`` imports (an optional package:
.ci/run runs the tests with and without it)."""
import re

import pytest

from bench import throughput


def transformers_imports() -> bool:
    """What make_sides tries before it adds HF's side (an import: a broken install counts as absent)."""
    try:
        import transformers  # noqa: F401
    except ImportError:
        return False
    return True


@pytest.mark.slow
def test_every_side_reports_a_speed(tiny_model_dir, capsys):
    throughput.main(["--model", str(tiny_model_dir), "--batch_size", "2", "--seq_lens", "8", "--reps", "1",
                     "--warmup", "1", "--threads", "1", "--also_ours_unfused", "--also_ours_manual",
                     "--also_ours_bf16", "--also_ours_sparse", "--also_ours_bernoulli",
                     "--keep_freed_memory"])
    out = capsys.readouterr().out
    hf = transformers_imports()
    ours = ["ours", "ours-bf16", "ours-sparse", "ours-bernoulli", "ours-unfused", "ours-manual"]
    sides = ours + (["hf"] if hf else [])
    for kind in ("train step", "inference"):   # one speed line per side, no more, in make_sides' order
        assert re.findall(rf"^  {kind} +(\S+) +[0-9.]+ seq/s", out, re.MULTILINE) == sides, (kind, out)
        # each side's speed over HF's, when there is HF's
        assert bool(re.search(rf"^  {kind} +speed-up: ours/hf = [0-9.]+x", out, re.MULTILINE)) is hf, (kind, out)


def test_ours_is_the_library_default_and_manual_the_reference(tiny_model_dir):
    from minbert.model import Dropout, MultiHeadSelfAttention
    sides = {side.name: side for side in throughput.make_sides(tiny_model_dir, ["ours-manual"])}
    assert list(sides) == ["ours", "ours-manual"] + (["hf"] if transformers_imports() else [])

    def paths(side):
        modules = list(side.model.modules())
        return ({m.impl for m in modules if isinstance(m, MultiHeadSelfAttention)},
                {m.masks for m in modules if isinstance(m, Dropout)}, side.optimizer.fused, side.optimizer.foreach)
    assert paths(sides["ours"]) == ({"auto"}, {"uniform"}, None, None)       # nothing set: the defaults
    assert paths(sides["ours-manual"]) == ({"manual"}, {"bernoulli"}, False, False)
