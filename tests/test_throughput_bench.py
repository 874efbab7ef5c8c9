"""bench/throughput.py on the tiny model: every requested side of ours trains and infers, and each
prints a speed line (transformers is not installed in the test environment: ours only)."""
import re

from bench import throughput


def test_every_side_reports_a_speed(tiny_model_dir, capsys):
    throughput.main(["--model", str(tiny_model_dir), "--batch_size", "2", "--seq_lens", "8", "--reps", "1",
                     "--warmup", "1", "--threads", "1", "--also_ours_unfused", "--also_ours_manual",
                     "--also_ours_bf16", "--also_ours_sparse", "--also_ours_uniform", "--also_ours_lean",
                     "--keep_freed_memory"])
    out = capsys.readouterr().out
    for side in ("ours", "ours-bf16", "ours-sparse", "ours-uniform", "ours-lean", "ours-unfused", "ours-manual"):
        for kind in ("train step", "inference"):
            assert re.search(rf"{kind} +{side} +[0-9.]+ seq/s", out), (side, kind, out)
