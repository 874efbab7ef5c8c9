"""Runs per hour of ``minbert-grid`` with k runs at once on one machine (docs/grid.md's tables).

    python -m bench.grid_throughput --ks 1 2 4 8 --gpus 1 --cpus_per_run 2 --out_dir /tmp/tp \\
        -- --data_dir ../shared/data/multitask --epochs 1 --max_steps_per_epoch 100

For each k, one ``minbert-grid`` command (its own local Ray, as a user starts it) runs max(k, 2) runs of the
grid's ``ft`` row (seeds from 11711) with ``--gpus_per_run gpus/k`` (or, with ``--gpus 0``, on the CPU with
``--cpus_per_run``), into ``<out_dir>/k<k>``. Reported per k: the command's wall time, Ray's start, the runs'
own wall time (metrics.json), runs per hour of the command's wall time, and its ratio to k = 1 measured in
the same invocation. The table goes to stdout and ``<out_dir>/grid_throughput.md`` after each k, so a
run stopped at its time limit keeps what it measured.
"""
from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    extra = argv[argv.index("--") + 1:] if "--" in argv else []
    own = argv[:argv.index("--")] if "--" in argv else argv
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ks", type=int, nargs="+", default=[1, 2, 4, 8], help="runs at once to measure")
    parser.add_argument("--gpus", type=float, default=0, help="GPUs shared by the k runs (0: CPU runs)")
    parser.add_argument("--cpus_per_run", type=float, default=1.0)
    parser.add_argument("--row", default="ft", help="the grid row every run is (default: %(default)s)")
    parser.add_argument("--out_dir", required=True)
    args = parser.parse_args(own)
    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    lines = ["| k at once | runs | wall (s) | Ray start (s) | run wall, mean (s) | runs/hour | vs k = 1 |",
             "|--:|--:|--:|--:|--:|--:|--:|"]
    base = None
    for k in args.ks:
        runs = max(k, 2)
        resources = (["--gpus_per_run", f"{args.gpus / k:g}"] if args.gpus else []) + ["--cpus_per_run",
                                                                                       f"{args.cpus_per_run:g}"]
        command = [sys.executable, "-m", "training.tools.ray_grid", "--only", args.row, "--seeds", str(runs),
                   "--out_dir", str(out / f"k{k}"), "--no_report", *resources, "--", *extra]
        began = time.time()
        done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT)
        wall = time.time() - began
        (out / f"k{k}.log").write_text(done.stdout + done.stderr)
        ray_start = re.search(r"Ray ready in ([\d.]+) s", done.stdout)
        walls = [json.loads(m.read_text()).get("wall_seconds") for m in (out / f"k{k}").glob("*/metrics.json")]
        walls = [w for w in walls if isinstance(w, (int, float))]
        per_hour = 3600 * runs / wall
        base = base or (per_hour if k == args.ks[0] else None)
        lines.append(f"| {k} | {runs} | {wall:.0f} | {float(ray_start.group(1)) if ray_start else float('nan'):.1f} | "
                     f"{sum(walls) / len(walls) if walls else float('nan'):.0f} | {per_hour:.0f} | "
                     f"{per_hour / base if base else float('nan'):.2f} |" + ("" if done.returncode == 0 else
                                                                             f" exit {done.returncode}"))
        table = "\n".join(lines)
        print(table.splitlines()[-1] if k != args.ks[0] else table, flush=True)
        (out / "grid_throughput.md").write_text(table + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
