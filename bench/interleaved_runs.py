"""Training speed of whole runs under two (or more) flag sets, interleaved: A B A B ..., each run a
fresh ``run_multitask.py`` process with the same common flags, so that a machine's drift over the
minutes touches every side alike. Reports each side's training examples/s (``metrics.json``'s
``train_examples_per_second``: training steps only, no evaluation, start-up or prediction writing)
run by run, the median, and each side's median against the first side's.

    python -m bench.interleaved_runs --side "--private_layers 0" --side "--private_layers 2" --repeats 3 \\
        -- --data_dir ../shared/data/multitask --epochs 1 --max_steps_per_epoch 40

Why a benchmark of its own: ``bench.throughput`` times one encoder step on random inputs; what a flag
such as ``--private_layers`` or ``--smart`` costs lives in the run around it (its model, optimizer
groups, extra passes, loss), so the only fair measure is the run itself, both sides on the same
cores in turns. The runs go to a temporary folder (``--out_dir`` is set here) and are removed.
"""
from __future__ import annotations

import argparse
import json
import shlex
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from bench import glued_sides

ROOT = Path(__file__).resolve().parents[1]


def main(argv: list[str] | None = None) -> int:
    args, common = parse(argv)
    results: dict[str, list[float]] = {side: [] for side in args.side}
    with tempfile.TemporaryDirectory(prefix="interleaved-") as out:
        for repeat in range(args.repeats):
            for i, side in enumerate(args.side):
                name = f"side{i}-r{repeat}"
                command = [sys.executable, str(ROOT / "run_multitask.py"), *common, *shlex.split(side),
                           "--out_dir", out, "--run_name", name, "--quiet"]
                subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
                metrics = json.loads((Path(out) / name / "metrics.json").read_text(encoding="utf-8"))
                rate = metrics["train_examples_per_second"]
                if not rate:   # None: its training time rounds to 0 s
                    raise SystemExit(f"{side or '(common flags only)'}: the run is too short to time "
                                     "(its training rounds to 0 s): give it more steps")
                results[side].append(rate)
                print(f"repeat {repeat + 1}, {side or '(common flags only)'}: {rate} examples/s", flush=True)
    first = statistics.median(results[args.side[0]])
    print(f"\ncommon flags: {' '.join(common)}")
    print("| side | examples/s, run by run | median | vs first side |\n|---|---|--:|--:|")
    for side, rates in results.items():
        median = statistics.median(rates)
        print(f"| `{side}` | {', '.join(f'{r:.1f}' for r in rates)} | {median:.1f} | {median / first:.3f} |")
    return 0


def parse(argv: list[str] | None) -> tuple[argparse.Namespace, list[str]]:
    argv = list(sys.argv[1:] if argv is None else argv)
    split = argv.index("--") if "--" in argv else len(argv)
    parser = argparse.ArgumentParser(prog="python -m bench.interleaved_runs", description=__doc__.split("\n\n")[0])
    parser.add_argument("--side", action="append", required=True,
                        help="the flags of one side, quoted (give --side twice or more; \"\" = common flags only)")
    parser.add_argument("--repeats", type=int, default=3, help="runs of each side (default: 3)")
    args = parser.parse_args(glued_sides(argv[:split]))
    if len(args.side) < 2 or args.repeats < 1:
        parser.error("give at least two --side and --repeats of at least 1")
    common = argv[split + 1:]
    if any(flag in common for flag in ("--out_dir", "--run_name", "--resume")):
        parser.error("--out_dir, --run_name and --resume are set by the benchmark; leave them out")
    return args, common


if __name__ == "__main__":
    sys.exit(main())
