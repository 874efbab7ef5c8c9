"""The registries are the one list: the head kinds, projections, STS losses, pooling modes and extensions that
``--help`` and the docs name are the registries'. ``--help`` reads them (``tests/test_pair_heads.py`` checks its
words); the docs keep lists written for people, and each is read back here and compared with its registry, so a
registry line a doc lacks, or a name a doc lists that no registry holds, fails naming the doc, the list and the
difference: what to add where."""
from __future__ import annotations

import re
from dataclasses import fields
from pathlib import Path

import pytest

import run_multitask
from heads.pair_parts import PROJECTIONS, SCORERS
from heads.pooling import POOLING_MODES
from heads.sts_losses import STS_LOSSES
from training.configuration.sections import CORE_SECTIONS
from training.extensions import EXTENSIONS

ROOT = Path(__file__).parents[1]
# the flags whose choices are a registry: the registry and its name in the messages
REGISTRY_FLAGS = {"--para_head": (SCORERS, "heads.pair_parts.SCORERS"),
                  "--sts_head": (SCORERS, "heads.pair_parts.SCORERS"),
                  "--pair_projection": (PROJECTIONS, "heads.pair_parts.PROJECTIONS"),
                  "--sts_loss": (STS_LOSSES, "heads.sts_losses.STS_LOSSES"),
                  "--pooling": (POOLING_MODES, "heads.pooling.POOLING_MODES")}
# a flag and its choices as --help writes them, in a doc's code span: `--rr {min,exhaust,proportional}`
CHOICES = re.compile(r"`(--\w+) \{([^}`]*)\}`")
DOCS = [*sorted((ROOT / "docs").glob("*.md")), ROOT / "README.md"]


def same_names(doc: str, what: str, written: list[str], registered: list[str], registry: str,
               ordered: bool = False) -> None:
    """Fail, naming the doc, its list and the difference, unless the names ``written`` in the doc are the
    ``registered`` ones (and in their order, for a list the doc says keeps it)."""
    missing = [name for name in registered if name not in written]
    extra = [name for name in written if name not in registered]
    problems = [*([f"lacks {', '.join(missing)} (registered in {registry})"] if missing else []),
                *([f"lists {', '.join(extra)}, which {registry} does not hold"] if extra else [])]
    if not problems and ordered and written != registered:
        problems = [f"lists {', '.join(written)}, not in the order of {registry}: {', '.join(registered)}"]
    assert not problems, f"{doc}, {what}: {'; '.join(problems)}"


def first_cells(doc: str, header: str) -> list[str]:
    """The first cell of each row of the table in ``doc`` whose header row starts with ``header``."""
    lines = (ROOT / doc).read_text(encoding="utf-8").splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith(header)), None)
    assert start is not None, f"{doc} has no table headed {header!r}, the list this test checks"
    cells = []
    for line in lines[start + 2:]:   # below the header row and its |---| rule
        if not line.startswith("|"):
            break
        cells.append(re.split(r"(?<!\\)\|", line)[1])   # "\|" is a bar inside a cell
    return cells


def code_spans(cell: str) -> list[str]:
    return re.findall(r"`([^`]+)`", cell)


def parser_choices() -> dict[str, list[str]]:
    """Each flag of ``run_multitask`` that has choices, with them as ``--help`` lists them (built now, so a
    registry changed by a test is read as it is)."""
    return {option: [str(choice) for choice in action.choices] for action in run_multitask.build_parser()._actions
            if action.choices is not None for option in action.option_strings}


def check_choices(doc: Path) -> None:
    """Every `--flag {a,b,c}` the doc writes, for a flag with choices, lists them (a registry's, for the
    flags of ``REGISTRY_FLAGS``)."""
    choices, name = parser_choices(), doc.relative_to(ROOT).as_posix()
    for option, written in CHOICES.findall(doc.read_text(encoding="utf-8")):
        if option in choices:
            where = REGISTRY_FLAGS[option][1] if option in REGISTRY_FLAGS else f"{option}'s choices in --help"
            same_names(name, f"`{option} {{{written}}}`", written.split(","), choices[option], where)


def check_heads_table() -> None:
    kinds = [code_spans(cell)[0] for cell in first_cells("docs/heads.md", "| kind |")]
    same_names("docs/heads.md", "the table of kinds", kinds, list(SCORERS), "heads.pair_parts.SCORERS")


def check_pooling_table() -> None:
    modes = [mode for cell in first_cells("docs/flags.md", "| mode |") for mode in code_spans(cell)]
    same_names("docs/flags.md", "the table of pooling modes", modes, list(POOLING_MODES), "heads.pooling.POOLING_MODES")


def check_extension_tables() -> None:
    # docs/flags.md: one row per extension module, "unsupervised SimCSE (`ucl.py`)", in the registry's order
    rows = first_cells("docs/flags.md", "| extension (module) |")
    modules = [code_spans(cell)[0].removesuffix(".py") for cell in rows]
    registered = [type(extension).__module__.rpartition(".")[2] for extension in EXTENSIONS]
    same_names("docs/flags.md", "the table of extensions", modules, registered, "training.extensions.EXTENSIONS",
               ordered=True)
    # docs/ablation.md: one row per switch, "`--pcgrad`", and the baselines' core flag (`--option pretrain`)
    core = {f.name for section in CORE_SECTIONS.values() for f in fields(section)}
    header = "| flag | what it does | its own flags"
    switches = [code_spans(cell)[0].split()[0].removeprefix("--") for cell in first_cells("docs/ablation.md", header)]
    same_names("docs/ablation.md", "the table of the extensions", [s for s in switches if s not in core],
               [extension.name for extension in EXTENSIONS], "training.extensions.EXTENSIONS")


def test_the_registry_flags_choose_from_their_registries():
    choices = parser_choices()
    for option, (registry, _) in REGISTRY_FLAGS.items():
        assert sorted(choices[option]) == sorted(registry), option   # --pooling's sorted, the others as registered


@pytest.mark.parametrize("doc", DOCS, ids=lambda path: path.name)
def test_each_list_of_choices_a_doc_writes_is_the_flags(doc):
    check_choices(doc)


def test_the_pair_head_docs_write_each_registry_flags_choices():
    """The lists checked above are there to check: a doc that dropped one would pass unseen."""
    for doc, options in (("docs/flags.md", ("--para_head", "--sts_head", "--pair_projection", "--sts_loss")),
                         ("docs/heads.md", ("--pair_projection", "--sts_loss"))):
        written = dict(CHOICES.findall((ROOT / doc).read_text(encoding="utf-8")))
        assert [option for option in options if option not in written] == [], doc


def test_the_heads_doc_lists_every_head_kind():
    check_heads_table()


def test_the_flags_doc_lists_every_pooling_mode():
    check_pooling_table()


def test_the_flags_and_ablation_docs_list_every_extension():
    check_extension_tables()


def test_a_registered_kind_the_docs_lack_fails_naming_the_doc_the_list_and_the_kind(monkeypatch):
    monkeypatch.setitem(SCORERS, "dot", SCORERS["concat"])   # a new kind, registered without a word in the docs
    with pytest.raises(AssertionError, match=re.escape("docs/heads.md, the table of kinds: lacks dot (registered in "
                                                       "heads.pair_parts.SCORERS)")):
        check_heads_table()
    with pytest.raises(AssertionError, match=re.escape("docs/flags.md, `--para_head {concat,cosine,sum}`: lacks dot")):
        check_choices(ROOT / "docs" / "flags.md")


def test_a_name_no_registry_holds_fails_too(monkeypatch):
    monkeypatch.delitem(STS_LOSSES, "ce")   # a loss removed from the registry, still in the docs
    with pytest.raises(AssertionError, match=re.escape("`--sts_loss {mse,cosent,ce}`: lists ce, which "
                                                       "heads.sts_losses.STS_LOSSES does not hold")):
        check_choices(ROOT / "docs" / "flags.md")
