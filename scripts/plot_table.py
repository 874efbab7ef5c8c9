#!/usr/bin/env python3
"""A Markdown table and a grouped bar chart from result JSON files of the embedding evaluations.

    python scripts/plot_table.py --md study.md --png study.png RESULTS/embedded/*.json RESULTS/ucl/*.json
    python scripts/plot_table.py --md probe.md --csv probe.csv RESULTS/{pretrained,ce,lcl}/*.json

Each input is the ``--out`` JSON of one run of

- ``python -m scripts.evaluate_embeddings`` (STS): one table row per pooling mode (with its token
  reduction where the mode takes one: ``first_last (max)``), one column pair per series (Spearman,
  Pearson of the "all" setting, x100), one table per dataset; the chart plots ``--metric``;
- ``python -m scripts.probe``: one row per task and measure (k-means ARI and AMI on dev and train,
  probe train and dev accuracy), one column per series; the chart plots the dev measures and both
  accuracies.

The **series** of a file is the name of the folder holding it (``embedded``, ``ucl``, ``ce``, ``lcl``,
...), so put the runs of one model in one folder. Rows keep the order in which the files are given.
All inputs must be of one kind. ``--csv`` also writes the numbers as CSV, unscaled, one line per
table row: ``dataset,pooling,<series> spearman,<series> pearson,...`` (STS) or
``task,measure,<series>,...`` (probe), an empty cell where a series has no value. The PNG needs matplotlib (an optional dependency, not in
requirements.txt); without it the Markdown is still written, one line says so, and the exit status is 0.
"""
from __future__ import annotations

import argparse
import csv
import io
import json
import math
import os
import sys
from pathlib import Path

PROBE_MEASURES = (  # (label, section, split or None, key, in the chart)
    ("k-means dev ARI", "clustering", "dev", "ari", True),
    ("k-means dev AMI", "clustering", "dev", "ami", True),
    ("k-means train ARI", "clustering", "train", "ari", False),
    ("k-means train AMI", "clustering", "train", "ami", False),
    ("probe train acc.", "probe", None, "train_accuracy", True),
    ("probe dev acc.", "probe", None, "dev_accuracy", True),
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("files", nargs="+", type=Path, help="result JSON files (series = the folder holding each)")
    parser.add_argument("--md", type=Path, required=True, help="write the Markdown table here")
    parser.add_argument("--csv", type=Path, default=None, help="also write the numbers as CSV here")
    parser.add_argument("--png", type=Path, default=None, help="draw the bar chart here (needs matplotlib)")
    parser.add_argument("--title", default=None, help="title above the table and the chart")
    parser.add_argument("--metric", default="spearman", choices=["spearman", "pearson"],
                        help="STS correlation the chart plots (default: spearman)")
    args = parser.parse_args(argv)
    try:
        kind, tables = collect(args.files)
    except (OSError, ValueError, KeyError, TypeError) as err:
        print(f"plot_table.py: error: {err}", file=sys.stderr)
        return 1
    markdown = render_markdown(kind, tables, args.title)
    _write_text(args.md, markdown)
    print(markdown, end="")
    print(f"wrote {args.md}", file=sys.stderr)
    if args.csv is not None:
        _write_text(args.csv, render_csv(kind, tables))
        print(f"wrote {args.csv}", file=sys.stderr)
    if args.png is None:
        return 0
    try:
        pyplot = _pyplot()
    except ImportError:
        print(f"matplotlib is not installed: pip install matplotlib to draw {args.png}")
        return 0
    draw(pyplot, kind, tables, args.png, args.title, args.metric)
    print(f"wrote {args.png}", file=sys.stderr)
    return 0


# ---------------------------------------------------------------------------------------------
# reading: {table name: {"rows": [row labels], "series": [names], "values": {(row, series): {measure: value}}}}


def collect(paths: list[Path]) -> tuple[str, dict]:
    kinds, tables = set(), {}
    for path in paths:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
        series = Path(path).resolve().parent.name
        if "datasets" in data:
            kinds.add("sts")
            row = _pooling_label(data["pooling"], data.get("reduction"))
            for dataset, result in data["datasets"].items():
                _put(tables, dataset, row, series, {m: result["all"][m] for m in ("spearman", "pearson")}, path)
        elif "probe" in data and "clustering" in data:
            kinds.add("probe")
            for label, section, split, key, _ in PROBE_MEASURES:
                value = data[section][split][key] if split else data[section][key]
                _put(tables, data["task"], label, series, {"value": value}, path)
        else:
            raise ValueError(f"{path}: neither an evaluate_embeddings nor a probe result (no 'datasets' or 'probe' key)")
    if len(kinds) > 1:
        raise ValueError("the files mix STS (evaluate_embeddings) and probe results; give one kind at a time")
    return kinds.pop(), tables


def _pooling_label(pooling: str, reduction: str | None) -> str:
    """``first_last (max)`` for a layer-combining mode; ``mean``, ``max``, ``cls``, ``pooler`` bare."""
    return pooling if reduction in (None, pooling) else f"{pooling} ({reduction})"


def _put(tables: dict, name: str, row: str, series: str, values: dict, path: Path) -> None:
    table = tables.setdefault(name, {"rows": [], "series": [], "values": {}})
    if (row, series) in table["values"]:
        raise ValueError(f"{path}: a second result for {name} / {row} in series {series!r} "
                         "(put the runs of different models in different folders)")
    if row not in table["rows"]:
        table["rows"].append(row)
    if series not in table["series"]:
        table["series"].append(series)
    table["values"][(row, series)] = values


# ---------------------------------------------------------------------------------------------
# output


def render_markdown(kind: str, tables: dict, title: str | None) -> str:
    lines = [f"## {title}", ""] if title else []
    for name, table in tables.items():
        series = table["series"]
        if kind == "sts":
            lines += [f"**{name}**: Spearman / Pearson of cosine similarity with the gold scores "
                      "(all subsets concatenated, x100)", "",
                      "| pooling | " + " | ".join(f"{s} Spearman | {s} Pearson" for s in series) + " |",
                      "|---|" + "---:|" * (2 * len(series))]
            for row in table["rows"]:
                cells = [_fmt(table["values"].get((row, s), {}).get(m), 100) for s in series
                         for m in ("spearman", "pearson")]
                lines.append(f"| {row} | " + " | ".join(cells) + " |")
        else:
            lines += [f"**{name}**: k-means with k = classes (ARI, AMI) and logistic-regression probe "
                      "(accuracy) on frozen embeddings", "",
                      "| measure | " + " | ".join(series) + " |",
                      "|---|" + "---:|" * len(series)]
            for row in table["rows"]:
                cells = [_fmt(table["values"].get((row, s), {}).get("value"), 1) for s in series]
                lines.append(f"| {row} | " + " | ".join(cells) + " |")
        lines.append("")
    return "\n".join(lines)


def render_csv(kind: str, tables: dict) -> str:
    """The tables' numbers, unscaled (correlations and scores as computed), one line per table row."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    series = list(dict.fromkeys(s for table in tables.values() for s in table["series"]))
    if kind == "sts":
        metrics = ("spearman", "pearson")
        writer.writerow(["dataset", "pooling"] + [f"{s} {m}" for s in series for m in metrics])
    else:
        metrics = ("value",)
        writer.writerow(["task", "measure"] + series)
    for name, table in tables.items():
        for row in table["rows"]:
            writer.writerow([name, row] + [_csv_number(table["values"].get((row, s), {}).get(m))
                                           for s in series for m in metrics])
    return buffer.getvalue()


def draw(pyplot, kind: str, tables: dict, png: Path, title: str | None, metric: str) -> None:
    """One panel per table: grouped bars, a group per row, a bar per series."""
    fig, axes = pyplot.subplots(len(tables), 1, squeeze=False,
                                figsize=(max(6.0, 0.9 * max(len(t["rows"]) for t in tables.values()) + 2), 5.0 * len(tables)))
    for ax, (name, table) in zip(axes[:, 0], tables.items()):
        if kind == "sts":
            rows, key, scale = table["rows"], metric, 100.0
            ax.set_ylabel(f"{metric.capitalize()} x100")
        else:
            charted = {label for label, *_, shown in PROBE_MEASURES if shown}
            rows, key, scale = [r for r in table["rows"] if r in charted], "value", 1.0
            ax.set_ylabel("score")
        series = table["series"]
        width = 0.8 / len(series)
        for i, s in enumerate(series):
            heights = [_number(table["values"].get((r, s), {}).get(key)) * scale for r in rows]
            positions = [x + (i - (len(series) - 1) / 2) * width for x in range(len(rows))]
            bars = ax.bar(positions, heights, width, label=s)
            ax.bar_label(bars, fmt="%.1f" if kind == "sts" else "%.2f", fontsize=7, padding=1)
        ax.set_xticks(range(len(rows)), rows, rotation=30, ha="right")
        ax.set_title(name)
        ax.margins(y=0.12)
        ax.grid(axis="y", alpha=0.3)
        ax.set_axisbelow(True)
        if len(series) > 1:
            ax.legend(fontsize=8)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png, dpi=120)
    pyplot.close(fig)


def _pyplot():
    import matplotlib
    matplotlib.use("Agg")  # no display needed
    import matplotlib.pyplot as pyplot
    return pyplot


def _number(value) -> float:
    return math.nan if value is None else float(value)


def _csv_number(value) -> str:
    return "" if value is None or math.isnan(float(value)) else repr(float(value))


def _fmt(value, scale: float) -> str:
    if value is None or math.isnan(float(value)):
        return "-"
    return f"{scale * float(value):.2f}" if scale != 1 else f"{float(value):.4f}"


def _write_text(path: Path, text: str) -> None:
    """Write via a temporary file and a rename, so a reader never sees half a table."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


if __name__ == "__main__":
    sys.exit(main())
