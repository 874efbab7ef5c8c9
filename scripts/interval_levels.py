"""Which "beyond its interval" verdicts change when the report's interval also draws the seeds?

    python -m scripts.interval_levels docs/runs/full docs/runs/full:private2 docs/runs/avx2:default \
        docs/runs/h100:default --data_dir ../shared/data/multitask

Each FOLDER[:BASELINE] is read as ``training.tools.report FOLDER --baseline BASELINE`` reads it. Every
interval is computed twice on the same draws of the dev examples: with the seeds' scores averaged
first (the report before issue 59: the examples alone) and with the seeds drawn too (the two-level
bootstrap of ``training.tools.bootstrap``). Prints every interval as a Markdown table, the rows whose
verdict (the interval excludes 0, or not) changes marked; docs/ablation.md, "Intervals that know about
seeds", holds its output.
"""
from __future__ import annotations

import argparse
import sys
from unittest import mock

import numpy as np

from training.tools import bootstrap
from training.tools.report import collect_runs, compare_to_baselines, metric_column


def intervals(folder: str, baseline: str | None, data_dir: str | None, one_level: bool) -> dict:
    """(row, column) -> (seeds of the row, Difference) for one folder."""
    rows = collect_runs(folder)
    if one_level:   # the seeds' scores averaged in each resample: no draw of seeds
        with mock.patch.object(bootstrap, "seeds_drawn", lambda resampled, rng: np.mean(resampled, axis=0)):
            compare_to_baselines(rows, data_dir=data_dir, baseline=baseline)
    else:
        compare_to_baselines(rows, data_dir=data_dir, baseline=baseline)
    found = {}
    for row in rows:
        if row.vs_ft is not None:
            found[row.run, f"Δ vs {baseline or 'FT'}"] = (len(row.seed_runs), row.vs_ft)
        for task, difference in row.vs_alone.items():
            found[row.run, f"{metric_column(task)} vs alone"] = (len(row.seed_runs), difference)
    return found


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folders", nargs="+", metavar="FOLDER[:BASELINE]")
    parser.add_argument("--data_dir", default=None)
    args = parser.parse_args(argv)
    print("| folder | row | seeds | column | Δ | examples only | seeds and examples | verdict |")
    print("|---|---|--:|---|--:|---|---|---|")
    changed = 0
    for spec in args.folders:
        folder, _, baseline = spec.partition(":")
        old = intervals(folder, baseline or None, args.data_dir, one_level=True)
        new = intervals(folder, baseline or None, args.data_dir, one_level=False)
        for key, (seeds, d) in new.items():
            before = old[key][1]
            verdict = ("**changes**: " if before.excludes_zero != d.excludes_zero else "") + (
                "beyond" if d.excludes_zero else "within")
            changed += before.excludes_zero != d.excludes_zero
            print(f"| {spec} | {key[0]} | {seeds} | {key[1]} | {d.observed:+.3f} | [{before.low:+.3f}, "
                  f"{before.high:+.3f}]{' *' if before.excludes_zero else ''} | [{d.low:+.3f}, {d.high:+.3f}]"
                  f"{' *' if d.excludes_zero else ''} | {verdict} |")
    print(f"\n{changed} verdict(s) change.", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
