"""``python -m training.tools.report --format latex``: the table as booktabs LaTeX (training/tools/latex.py), written
from the rows the Markdown table shows. Checks the text: escaping, no raw Unicode, the columns, the star exactly
where the interval excludes 0, the caption; and that ``--out`` writes PREFIX.tex beside an unchanged PREFIX.md."""
import re
import shutil

import pytest

from test_report import SEEDS, markdown_rows, seeds, tabular   # noqa: F401 (seeds: the fixture of pooled runs)
from training.tools.bootstrap import Difference
from training.tools.latex import STAR, escape, render_latex
from training.tools.report import RunRow, latex_headers, main

HEADER = ["run", "pre-QQP", "seeds", "SST acc", "QQP acc", "STS Pearson", "average", r"$\Delta$ vs FT [95\% CI]"]


def test_escape_writes_latex_specials_and_no_raw_unicode():
    assert escape("a_b%c&d#e$f{g}h~i^j\\k") == (r"a\_b\%c\&d\#e\$f\{g\}h\textasciitilde{}i\textasciicircum{}j"
                                                r"\textbackslash{}k")
    assert escape("Δ vs FT ± 0.1 ✓ × † …") == \
        r"$\Delta$ vs FT $\pm$ 0.1 \checkmark{} $\times$ $^\dagger$ \ldots{}"
    assert escape("café→") == "cafe?"   # any other non-ASCII character: its ASCII letter, else ?
    assert escape("95% CI").isascii()


def rows_by_hand() -> list[RunRow]:
    """A better row (interval above 0), an equal one (interval over 0) named with _ and %, the FT row (no Δ), and
    an unfinished run: one seed, three seeds, three seeds."""
    dev = {"sst": 0.5, "qqp": 0.8, "sts": 0.9}
    one = [RunRow("x", "finished")]
    three = one * 3
    return [RunRow("better", "finished", {"pre_qqp": True}, "MEAN", dev=dev, dev_std={"sst": 0.01}, average=0.75,
                   average_std=0.002, seed_runs=three, vs_ft=Difference(0.0123, 0.004, 0.0201)),
            RunRow("lr_10%", "finished", {"pre_qqp": False}, "MEAN", dev=dev, average=0.74, seed_runs=one,
                   vs_ft=Difference(-0.0004, -0.006, 0.005)),
            RunRow("ft", "finished", {"pre_qqp": False}, "MEAN", "FT", dev=dev, average=0.74, average_std=0.001,
                   seed_runs=three),
            RunRow("killed", "incomplete (running)", {"pre_qqp": True}, "MEAN")]


def test_the_table_is_booktabs_with_escaped_cells_and_the_star_where_the_interval_excludes_0():
    rows = rows_by_hand()
    text = render_latex(rows, latex_headers(rows), footer="Δ vs FT = average minus that of ft; 95% CI = ...",
                        resamples=200)
    assert text.isascii()
    lines = text.splitlines()
    assert [line for line in lines if line in (r"\toprule", r"\midrule", r"\bottomrule")] == [
        r"\toprule", r"\midrule", r"\bottomrule"]
    assert lines.index(r"\begin{table}[t]") < lines.index(r"\bottomrule") < lines.index(r"\end{table}")
    header, *body = tabular(text)
    assert header == HEADER   # none for wall time or status, nor for a setting alike in every row: the caption names
    assert r"\caption{All rows: pooling MEAN; every other extension off. Dev scores, mean" in text   # ... those
    assert [line[0] for line in body] == ["better", r"lr\_10\%", "ft (FT)"]   # finished rows only
    better, equal, ft = (dict(zip(header, line)) for line in body)
    assert better["SST acc"] == r"$0.500 \pm 0.010$" and better["QQP acc"] == "$0.800$"   # no std: the mean alone
    assert better["average"] == r"$0.750 \pm 0.002$" and better["seeds"] == "3" and equal["seeds"] == "1"
    assert better["pre-QQP"] == r"\checkmark{}" and equal["pre-QQP"] == r"$\times$"
    delta = HEADER[-1]
    assert better[delta] == "$+0.012$ [$+0.004$, $+0.020$]" + STAR
    assert equal[delta] == "$-0.000$ [$-0.006$, $+0.005$]" and STAR not in equal[delta]
    assert ft[delta] == ""
    assert sum(cell.count(STAR) for line in body for cell in line) == 1   # the interval that excludes 0 alone
    for line in lines:   # every % outside a comment is escaped (the resize line's own % ends its line)
        if not line.startswith("%"):
            assert re.search(r"(?<!\\)%", line.removesuffix("{%")) is None, line
    assert "% Left out, without finished dev scores: killed." in lines
    assert r"% $\Delta$ vs FT = average minus that of ft; 95\% CI = ..." in lines   # the footer, kept


def test_the_caption_says_the_seeds_the_resamples_and_the_marks():
    rows = rows_by_hand()
    rows[1].dev_cap = 50
    (caption,) = [line for line in render_latex(rows, latex_headers(rows), resamples=200, seed=3).splitlines() if
                  line.startswith(r"\caption{")]
    assert "over the seeds each row pools (3 seeds each, except 1 for lr\\_10\\%)" in caption
    assert "In brackets: the 95\\% interval of a two-level paired bootstrap (200 resamples of each task's dev " \
           "examples, the seeds drawn too; seed 3)" in caption
    assert STAR + ": it excludes 0." in caption and r"\checkmark{} on, $\times$ off." in caption
    assert r"$\Delta$ vs FT: a row's average minus that of its FT row (of the same pooling) scored on the same dev " \
           "examples." in caption
    assert "FT: fine-tuning with no extension." in caption
    assert (r"$^\dagger$ capped: dev scored on the first N examples of each task's dev file "
            r"(\texttt{--max\_eval\_examples N}, N = 50), compared only with rows capped alike.") in caption
    assert r"lr\_10\%$^\dagger$ &" in render_latex(rows, latex_headers(rows))
    off_rows = [RunRow("a", "finished", dev={"sst": 0.5}, average=0.5)]
    off = render_latex(off_rows, latex_headers(off_rows), resamples=0)
    assert r"No $\Delta$ vs FT: not computed (\texttt{--bootstrap 0})." in off and "(1 seed)" in off


def test_format_latex_prints_the_table_and_out_writes_prefix_tex_beside_the_same_markdown(seeds, tmp_path, capsys):
    runs = tmp_path / "runs"
    shutil.copytree(seeds.out, runs)
    for seed in SEEDS:   # a name a paper's table must escape
        (runs / f"ablate-mean-ucl-s{seed}").rename(runs / f"ucl_10%-s{seed}")
    assert main([str(runs), "--bootstrap", "200", "--out", str(tmp_path / "md" / "t")]) == 0
    capsys.readouterr()
    assert not (tmp_path / "md" / "t.tex").exists()   # markdown, the default: as before
    assert main([str(runs), "--bootstrap", "200", "--format", "latex", "--out", str(tmp_path / "tex" / "t")]) == 0
    captured = capsys.readouterr()
    text = (tmp_path / "tex" / "t.tex").read_text(encoding="utf-8")
    assert captured.out == text and "t.tex" in captured.err and r"\label{tab:t}" in text
    markdown = (tmp_path / "tex" / "t.md").read_text(encoding="utf-8")
    assert markdown == (tmp_path / "md" / "t.md").read_text(encoding="utf-8")
    # the same numbers as the Markdown table, cell for cell
    md = {line[0]: dict(zip(markdown_rows(markdown)[0], line)) for line in markdown_rows(markdown)[2:]}
    header, *body = tabular(text)
    assert header == ["run", "U-CL", "pre-QQP", "SMART", *HEADER[2:]]   # the settings the finished rows differ in
    tex = {line[0]: dict(zip(header, line)) for line in body}
    assert set(tex) == {"ablate-mean-preqqp", "ablate-ft (FT)", "ablate-mean-smart", r"ucl\_10\%"}   # not running
    for run, cells in tex.items():
        row = md[run.replace("\\", "")]
        for column in ("SST acc", "QQP acc", "STS Pearson", "average"):
            assert cells[column] == "$" + row[column].replace(" ± ", r" \pm ") + "$"
        for column in ("U-CL", "pre-QQP", "SMART"):
            assert cells[column] == escape(row[column])
        interval = row["95% CI"].removesuffix(" *")
        expected = "" if not row["Δ vs FT"] else (f"${row['Δ vs FT']}$ "
                                                  + re.sub(r"([+-]\d\.\d{3})", r"$\1$", interval)
                                                  + (STAR if row["95% CI"].endswith("*") else ""))
        assert cells[HEADER[-1]] == expected, run
    assert STAR in tex["ablate-mean-preqqp"][HEADER[-1]] and STAR not in tex[r"ucl\_10\%"][HEADER[-1]]
    assert "(200 resamples of each task's dev examples" in text and "(3 seeds each)" in text


@pytest.mark.parametrize("flags", [["--format", "tex"]])
def test_an_unknown_format_is_refused(flags, capsys):
    with pytest.raises(SystemExit):
        main(["runs", *flags])
    assert "invalid choice: 'tex'" in capsys.readouterr().err
