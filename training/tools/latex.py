"""The report's table as LaTeX (``python -m training.tools.report FOLDER --format latex``): a booktabs ``table`` a
paper can ``\\input``, written from the rows the Markdown table shows (``report.RunRow``; nothing is computed here).

    \\usepackage{booktabs,amssymb,graphicx}   % amssymb: \\checkmark; graphicx: a wide table shrunk to the text
    ...
    \\input{ablation}   % python -m training.tools.report predictions/ablate --format latex --out ablation

The finished rows only, in the report's order (the others and the Markdown footer are comments above it); a table
wider than the text is scaled down to its width (never up); the caption says what the rows pool and the marks mean.
A setting has a column only where the finished rows differ in it; the caption begins with ``--caption``'s text and
the table's own settings they all share ("All rows: pooling MEAN, ..."; ``table_settings.py``). ``--label`` sets the
``\\label`` (default: ``tab:`` and the ``--out`` prefix's name).
"""
from __future__ import annotations

import re
import textwrap
import unicodedata
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .table_settings import NOT_APPLICABLE, OFF, ON, Setting, caption_opening

if TYPE_CHECKING:
    from .bootstrap import Difference

RunRow = Any   # a report.RunRow: report imports this module, so this one does not import it back (no cycle)


@dataclass(frozen=True)
class Headers:
    """The report's names for the table's columns (``report.latex_headers``), so both tables say the same."""
    metrics: dict[str, str]                    # task -> its metric column ("SST acc"), in table order
    delta: str                                 # "Δ vs FT", or "Δ vs ROW" with --baseline ROW
    interval: str                              # "95% CI"
    by_task: list[tuple[str, str, str]]        # (task, column name, kind: "alone" or "baseline") of per-task Δs
    settings: tuple[Setting, ...] = ()         # the settings the rows differ in (table_settings.shown_settings)
    all_rows: str = ""                         # "All rows: pooling MEAN, ...": the table's settings they share

SPECIAL = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_", "{": r"\{",
           "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}"}
UNICODE = {"Δ": r"$\Delta$", "±": r"$\pm$", "✓": r"\checkmark{}", "×": r"$\times$", "†": r"$^\dagger$",
           "‡": r"$^\ddagger$", "…": r"\ldots{}", "–": "--", "—": "---", "−": "-", "≥": r"$\geq$",
           "≤": r"$\leq$"}
STAR = r"$^{*}$"   # after an interval that excludes 0
CAPPED_MARK, TRIAL_MARK = r"$^\dagger$", r"$^\ddagger$"
REQUIRES = r"\usepackage{booktabs,amssymb,graphicx}"
# graphicx's \resizebox, scaling a table wider than the text down to its width (never up)
SHRINK = r"\resizebox{\ifdim\width>\linewidth\linewidth\else\width\fi}{!}{%"
BASELINES = {"PT": "frozen BERT, heads only", "FT": "fine-tuning with no extension", "ST": "one task trained alone"}


def escape(text: str) -> str:
    """``text`` as LaTeX text: its special characters escaped, its Unicode marks as LaTeX (Δ: ``$\\Delta$``), any
    other non-ASCII character its ASCII letter (é: e) or ``?``."""
    return "".join(SPECIAL.get(char) or UNICODE.get(char) or _ascii(char) for char in str(text))


def _ascii(char: str) -> str:
    plain = unicodedata.normalize("NFKD", char).encode("ascii", "ignore").decode("ascii")
    return char if char.isascii() else escape(plain) or "?"


def mean_std(mean: float | None, std: float | None) -> str:
    """``$0.482 \\pm 0.006$``; ``$0.482$`` without a std (one seed); blank when unknown: the Markdown cell's."""
    return "" if mean is None else f"${mean:.3f}" + ("" if std is None else f" \\pm {std:.3f}") + "$"


def difference(d: Difference | None) -> str:
    """``$+0.004$ [$-0.002$, $+0.010$]``, and ``$^{*}$`` when the interval excludes 0; blank when there is none."""
    if d is None:
        return ""
    observed, low, high = (f"${value:+.3f}$" for value in (d.observed, d.low, d.high))   # a real minus sign
    return f"{observed} [{low}, {high}]" + (STAR if d.excludes_zero else "")


def latex_columns(rows: list[RunRow], headers: Headers) -> list[tuple[str, str, Callable[[RunRow], str]]]:
    """The table's columns for ``rows`` (the finished ones), each (header, alignment, cell): a setting's column only
    where the rows differ in it (``headers.settings``; the caption names those they share)."""
    return [
        ("run", "l", run_cell),
        *((escape(setting.header), "c", lambda row, cell=setting.cell: escape(cell(row) or ""))
          for setting in headers.settings),
        ("seeds", "r", lambda row: str(len(row.seed_runs) or 1)),
        *((escape(name), "r", lambda row, t=task: mean_std(row.dev.get(t), row.dev_std.get(t)))
          for task, name in headers.metrics.items()),
        ("average", "r", lambda row: "" if row.baseline == "ST" else mean_std(row.average, row.average_std)),
        *([(escape(f"{headers.delta} [{headers.interval}]"), "r", lambda row: difference(row.vs_ft))]
          if any(row.vs_ft for row in rows) else []),
        *((escape(name), "r", lambda row, t=task, k=kind: difference(row.differences(k).get(t)))
          for task, name, kind in headers.by_task)]


def run_cell(row: RunRow) -> str:
    """The row's name, its baseline mark (PT, FT, ST) as in the Markdown table, † when capped, ‡ for a trial."""
    mark = "" if not row.capped else TRIAL_MARK if row.val_fraction else CAPPED_MARK
    return escape(f"{row.run} ({row.baseline})" if row.baseline else row.run) + mark


def render_latex(rows: list[RunRow], headers: Headers, footer: str = "", baseline: str | None = None,
                 resamples: int = 1000, seed: int = 0, label: str = "tab:ablation", title: str = "") -> str:
    """The finished ``rows`` (after ``report.compare_to_baselines``) as a booktabs table with its caption (``title``,
    ``--caption``, first) and ``label``; the Markdown table's ``footer`` and the rows left out as comments above it."""
    shown = [row for row in rows if row.complete]
    table = latex_columns(shown, headers)
    notes = [escape(footer)] if footer else []
    if left_out := [row.run for row in rows if not row.complete]:
        notes.append(escape(f"Left out, without finished dev scores: {', '.join(left_out)}."))
    notes = [f"% {line}" for note in notes for line in textwrap.wrap(note, 110, break_on_hyphens=False)]
    lines = [f"% minbert-report --format latex: needs {REQUIRES}", *notes,
             r"\begin{table}[t]", r"\centering", r"\small",
             rf"\caption{{{caption(shown, headers, baseline, resamples, seed, title)}}}", rf"\label{{{label}}}",
             SHRINK, r"\begin{tabular}{" + "".join(align for _, align, _ in table) + "}", r"\toprule",
             " & ".join(header for header, _, _ in table) + r" \\", r"\midrule",
             *(" & ".join(cell(row) for _, _, cell in table) + r" \\" for row in shown),
             r"\bottomrule", r"\end{tabular}}", r"\end{table}"]
    return "\n".join(lines) + "\n"


def caption(rows: list[RunRow], headers: Headers, baseline: str | None, resamples: int, seed: int,
            title: str = "") -> str:
    """What the table shows: ``title`` (``--caption``) and the settings every row has alike first, then the seeds
    each row pools, the metrics, the Δ and its bootstrap, the marks."""
    opening = [escape(text)] if (text := caption_opening(title, headers.all_rows)) else []
    if not rows:
        return " ".join([*opening, "No finished rows."])
    seeds = Counter(len(row.seed_runs) or 1 for row in rows)
    usual = seeds.most_common(1)[0][0]
    others = "; ".join(f"{n} for {', '.join(escape(row.run) for row in rows if (len(row.seed_runs) or 1) == n)}"
                       for n in sorted(seeds, reverse=True) if n != usual)
    parts = [*opening, f"Dev scores, mean $\\pm$ sample standard deviation over the seeds each row pools "
             f"({count(usual, 'seed')}{' each' if len(rows) > 1 else ''}{f', except {others}' if others else ''}); "
             f"average: the mean of the tasks' dev scores, a Pearson $r$ counted as $(r + 1) / 2$."]
    delta = escape(headers.delta)
    if any(row.vs_ft for row in rows):
        against = escape(baseline) if baseline else "its FT row (of the same pooling)"
        parts.append(f"{delta}: a row's average minus that of {against} scored on the same dev examples.")
    elif resamples == 0:
        parts.append(f"No {delta}: not computed (\\texttt{{--bootstrap 0}}).")
    else:
        parts.append(f"No {delta}: no row has a baseline scored on its dev examples (the comments above say why).")
    if any(row.vs_ft or row.vs_alone or row.vs_baseline for row in rows):
        parts.append(f"In brackets: the 95\\% interval of a two-level paired bootstrap "
                     f"({count(resamples, 'resample')} of each task's dev examples, the seeds drawn too; "
                     f"seed {seed}); {STAR}: it excludes 0.")
    if any(row.vs_alone for row in rows):
        parts.append("TASK vs alone: that task's metric minus that of its single-task (ST) row, with the same "
                     "interval of that task's metric alone.")
    if any(row.vs_baseline for row in rows):
        parts.append(f"TASK {delta}: that task's metric minus that of {escape(baseline)}, with the same interval.")
    if kinds := [kind for kind in BASELINES if any(row.baseline == kind for row in rows)]:
        parts.append("; ".join(f"{kind}: {BASELINES[kind]}" for kind in kinds) + ".")
    cells = {setting.cell(row) for setting in headers.settings for row in rows}
    if cells & {ON, OFF}:   # an on/off column is shown
        parts.append(r"\checkmark{} on, $\times$ off.")
    if NOT_APPLICABLE in cells:
        parts.append(f"{escape(NOT_APPLICABLE)}: an extension's setting in a row that has the extension off.")
    if caps := sorted({row.dev_cap for row in rows if row.dev_cap is not None and not row.val_fraction}):
        parts.append(f"{CAPPED_MARK} capped: dev scored on the first N examples of each task's dev file "
                     f"(\\texttt{{{escape('--max_eval_examples')} N}}, N = {' or '.join(map(str, caps))}), compared "
                     f"only with rows capped alike.")
    if any(row.val_fraction for row in rows):
        parts.append(f"{TRIAL_MARK} a search trial, scored on a split of the training files "
                     f"(\\texttt{{{escape('--val_fraction')}}}), not on dev: not compared.")
    return " ".join(parts)


def count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def label_of(name: str) -> str:
    """A ``\\label`` key from an output prefix's name: ``tab:`` and its letters, digits, ``-`` and ``:``."""
    return "tab:" + (re.sub(r"[^A-Za-z0-9:-]+", "-", name).strip("-") or "ablation")


def checked_label(text: str) -> str:
    """``--label``'s key as given, refused in one line unless it is letters, digits and ``: . _ -`` (what a
    ``\\ref`` finds again in any LaTeX setup)."""
    if not re.fullmatch(r"[A-Za-z0-9:._-]+", text):
        raise ValueError(f"--label {text!r}: a LaTeX label is letters, digits and : . _ - only, e.g. tab:ablation")
    return text
