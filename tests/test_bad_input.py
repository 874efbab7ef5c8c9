"""The bad-input suite of issue 6, end to end through ``run_multitask.main``.

Every bad data file, model directory or flag value must end the run with ONE line naming the file
(and line / field where there is one), a non-zero exit code, and nothing written before it damaged.
Bad rows are the exception by design: they are skipped and reported (file, line, field) unless
``--strict`` is given, which makes the first one such an error.

Each test starts from a sandbox: a copy of tests/fixtures/data with its one deliberate bad row
removed (so ``--strict`` stops at the row the test breaks), a copy of the tiny random model of
``conftest.tiny_model_dir``, and an ``--out_dir`` that already holds an earlier run and a note.
The readers' and the loader's own errors are unit-tested in test_readers.py and test_weights.py;
``--lr -1``, ``--epochs 0`` and ``--batch_size 0`` in test_run_multitask.py.
"""
from __future__ import annotations

import csv
import json
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest
from safetensors.torch import load_file, save_file

import run_multitask

FIXTURE_DATA = Path(__file__).parent / "fixtures" / "data"
RUN_NAME = "bad"
FIELD_LIMIT = csv.field_size_limit()  # the csv module's longest field: 131072 characters by default


@dataclass
class Sandbox:
    root: Path
    data: Path
    model: Path
    out: Path

    @property
    def run_dir(self) -> Path:
        return self.out / RUN_NAME

    def main(self, *extra: str) -> int:
        """One short run on the sandbox; ``extra`` flags come last, so they override these."""
        return run_multitask.main([
            "--data_dir", str(self.data), "--model", str(self.model), "--out_dir", str(self.out),
            "--run_name", RUN_NAME, "--epochs", "1", "--max_steps_per_epoch", "1", "--batch_size", "4",
            "--max_length", "16", *extra])


@pytest.fixture
def box(tmp_path, tiny_model_dir) -> Sandbox:
    data = tmp_path / "data"
    shutil.copytree(FIXTURE_DATA, data)
    drop_line(data / "quora-train.csv", 7)  # the fixture's empty label: --strict must reach our row
    model = tmp_path / "model"
    shutil.copytree(tiny_model_dir, model)
    out = tmp_path / "out"
    (out / "earlier-run").mkdir(parents=True)
    (out / "earlier-run" / "metrics.json").write_text('{"status": "finished"}\n')
    (out / "earlier-run" / "sst-dev-output.csv").write_text("id,Predicted_Sentiment\na,3\n")
    (out / "notes.txt").write_text("kept by hand\n")
    return Sandbox(tmp_path, data, model, out)


# --- file editing -----------------------------------------------------------------------------

DROP = object()  # edit_row value: cut the row just before this column ("too few fields")


def drop_line(path: Path, line: int) -> None:
    lines = path.read_text(encoding="utf-8").split("\n")
    del lines[line - 1]
    path.write_text("\n".join(lines), encoding="utf-8")


def edit_row(path: Path, line: int, column: str, value) -> None:
    """Set one tab-separated field of physical line ``line`` (the header is line 1)."""
    lines = path.read_text(encoding="utf-8").split("\n")
    i = lines[0].split("\t").index(column)
    fields = lines[line - 1].split("\t")
    fields = fields[:i] if value is DROP else fields[:i] + [value] + fields[i + 1:]
    lines[line - 1] = "\t".join(fields)
    path.write_text("\n".join(lines), encoding="utf-8")


def edit_config(model: Path, **values) -> None:
    config = json.loads((model / "config.json").read_text())
    (model / "config.json").write_text(json.dumps({**config, **values}))


def snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


# --- bad rows: skipped and reported, or with --strict a one-line error ------------------------

# name: (file, line, column edited, new value, field reported, reason reported)
BAD_ROWS = {
    "missing field": ("ids-sst-train.csv", 4, "sentiment", DROP, "sentiment", "too few fields (got 3, header has 4)"),
    "empty sentence": ("sts-train.csv", 3, "sentence2", "  ", "sentence2", "empty sentence"),
    "label out of range": ("ids-sst-dev.csv", 2, "sentiment", "9", "sentiment", "class label 9 out of range 0..4"),
    "paraphrase label out of range": ("quora-dev.csv", 3, "is_duplicate", "2.0", "is_duplicate",
                                      "class label 2.0 out of range 0..1"),
    "label not a number": ("sts-dev.csv", 5, "similarity", "high", "similarity", "label 'high' is not a number"),
    "over-long line": ("quora-train.csv", 4, "sentence1", "x" * (FIELD_LIMIT + 1), "row",
                       f"a field longer than {FIELD_LIMIT} characters (runaway quote or not a text file?)"),
    # the opened quote runs on to the next '"' (line 7's quoted sentence), swallowing lines 4-6
    "runaway quote": ("quora-train.csv", 3, "sentence1", '"How do I learn Python quickly?', "row",
                      """malformed quoting: '\\t' expected after '"' (lines 3-7 read as one record)"""),
}


@pytest.mark.slow
@pytest.mark.parametrize("name", BAD_ROWS)
def test_bad_row_is_skipped_and_reported_with_file_line_and_field(box, capsys, name):
    file, line, column, value, field, reason = BAD_ROWS[name]
    edit_row(box.data / file, line, column, value)
    assert box.main() == 0
    warnings = [w for w in capsys.readouterr().out.splitlines() if w.startswith("warning:")]
    assert len(warnings) == 1 and warnings[0].startswith(f"warning: {file}: ")
    assert warnings[0].endswith(f" rows, 1 skipped (line {line}: {field}: {reason})")
    assert json.loads((box.run_dir / "metrics.json").read_text())["data"][file]["skipped"] == 1


@pytest.mark.slow
def test_long_sentence_under_the_field_limit_is_kept_and_truncated(box, capsys):
    """Only a field past the csv limit is refused; a long sentence is cut to --max_length pieces."""
    edit_row(box.data / "ids-sst-dev.csv", 3, "sentence", " long" * (FIELD_LIMIT // 6))
    assert box.main() == 0
    assert "warning:" not in capsys.readouterr().out
    assert len((box.run_dir / "sst-dev-output.csv").read_text().splitlines()) == 1 + 10


# --- failing runs: one line, exit 1, nothing damaged ------------------------------------------
# Each case breaks the sandbox and returns (extra flags, fragments the error line must contain).


def strict_case(name):
    def case(box):
        file, line, column, value, field, reason = BAD_ROWS[name]
        edit_row(box.data / file, line, column, value)
        return ["--strict"], [f"{box.data / file}, line {line}, field {field}: {reason}"]
    return case


def missing_data_file(box):
    (box.data / "ids-sst-train.csv").unlink()
    return [], ["ids-sst-train.csv", str(box.data), "--data_dir"]


def missing_data_dir(box):
    return ["--data_dir", str(box.root / "nope")], [str(box.root / "nope"), "--data_dir"]


def wrong_columns(box):
    path = box.data / "sts-train.csv"
    path.write_text(path.read_text().replace("\tsimilarity\n", "\tscore\n", 1))
    return [], [str(path), "missing column 'similarity'", "'score'"]


def comma_separated(box):
    path = box.data / "ids-sst-dev.csv"
    path.write_text(path.read_text().replace("\t", ","))
    return [], [str(path), "missing column 'id'"]


def non_utf8(box):
    path = box.data / "quora-dev.csv"
    lines = path.read_bytes().split(b"\n")
    lines[2] = lines[2].replace(b"memory", b"m\xe9moire", 1)  # Latin-1, line 3
    path.write_bytes(b"\n".join(lines))
    return [], [str(path), "line 3", "not valid UTF-8 (byte 0xe9)"]


def unclosed_quote(box):
    edit_row(box.data / "sts-dev.csv", 11, "sentence1", '"The last sentence.')
    return [], [str(box.data / "sts-dev.csv"), "line 11", "quoted field is never closed"]


def empty_file(box):
    (box.data / "sts-dev.csv").write_text("")
    return [], [str(box.data / "sts-dev.csv"), "file is empty"]


def header_only(box):
    path = box.data / "ids-sst-dev.csv"
    path.write_text(path.read_text().split("\n")[0] + "\n")
    return [], [str(path), "no data rows"]


def no_usable_row(box):
    path = box.data / "sts-dev.csv"
    path.write_text(path.read_text().split("\n")[0] + "\n0\tx\tA man.\tA dog.\thigh\n")
    return [], [str(path), "no usable rows", "line 2: similarity: label 'high' is not a number"]


def missing_ucl_data(box):
    return ["--ucl", "--ucl_data", str(box.root / "corpus.txt")], ["--ucl_data", str(box.root / "corpus.txt"),
                                                                   "no such file"]


def no_config(box):
    (box.model / "config.json").unlink()
    return [], [str(box.model / "config.json"), "not found"]


def config_not_json(box):
    (box.model / "config.json").write_text('{"hidden_size": 16,')
    return [], [str(box.model / "config.json"), "not valid JSON"]


def no_weights(box):
    (box.model / "model.safetensors").unlink()
    return [], [str(box.model), "model.safetensors", "pytorch_model.bin"]


def truncated_weights(box):
    path = box.model / "model.safetensors"
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    return [], [str(path), "truncated or corrupt"]


def config_wider_than_weights(box):
    edit_config(box.model, hidden_size=32)
    return [], [str(box.model / "model.safetensors"), "hidden_size 32 in config.json, 16 in the weights"]


def config_deeper_than_weights(box):
    edit_config(box.model, num_hidden_layers=3)
    return [], [str(box.model / "model.safetensors"), "num_hidden_layers 3 in config.json, 2 in the weights",
                "missing keys"]


def vocab_larger_than_embedding(box):
    """vocab.txt keeps its 30522 tokens; config and embedding shrink to 100 rows, consistently."""
    state = load_file(str(box.model / "model.safetensors"))
    state["embeddings.word_embeddings.weight"] = state["embeddings.word_embeddings.weight"][:100].contiguous()
    save_file(state, str(box.model / "model.safetensors"))
    edit_config(box.model, vocab_size=100)
    return [], [str(box.model / "vocab.txt"), "30522 tokens", "100 rows"]


def vocab_much_smaller_than_embedding(box):
    """A truncated vocab.txt: 847 tokens for the model's 30522 rows would make most word pieces [UNK]."""
    lines = (box.model / "vocab.txt").read_text(encoding="utf-8").splitlines(keepends=True)
    (box.model / "vocab.txt").write_text("".join(lines[:847]), encoding="utf-8")
    return [], [str(box.model / "vocab.txt"), "847 tokens", "30522 rows", "[UNK]"]


def no_vocab(box):
    (box.model / "vocab.txt").unlink()
    return [], [str(box.model / "vocab.txt"), "not found"]


def flag_case(flags, fragments):
    return lambda box: (flags, fragments)


FAILING = {
    "missing data file": missing_data_file,
    "missing data directory": missing_data_dir,
    "wrong columns": wrong_columns,
    "comma-separated file": comma_separated,
    **{f"{name}, --strict": strict_case(name) for name in BAD_ROWS},
    "non-UTF-8 byte": non_utf8,
    "unclosed quote": unclosed_quote,
    "empty file": empty_file,
    "header only": header_only,
    "no usable row": no_usable_row,
    "missing --ucl_data file": missing_ucl_data,
    "no config.json": no_config,
    "config.json not JSON": config_not_json,
    "no weights file": no_weights,
    "truncated model.safetensors": truncated_weights,
    "config wider than weights": config_wider_than_weights,
    "config deeper than weights": config_deeper_than_weights,
    "vocab larger than embedding": vocab_larger_than_embedding,
    "vocab much smaller than embedding": vocab_much_smaller_than_embedding,
    "no vocab.txt": no_vocab,
    "--lr nan": flag_case(["--lr", "nan"], ["--lr must be a finite number, got nan"]),
    "--head_lr inf": flag_case(["--head_lr", "inf"], ["--head_lr must be a finite number, got inf"]),
    "--smart_mu -inf": flag_case(["--smart", "--smart_mu=-inf"], ["--smart_mu must be a finite number"]),
    "--head_lr 0": flag_case(["--head_lr", "0"], ["--head_lr must be positive"]),
    "--max_length 2": flag_case(["--max_length", "2"], ["--max_length must be at least 3"]),
    "--hidden_dropout_prob 1": flag_case(["--hidden_dropout_prob", "1"], ["--hidden_dropout_prob must be in [0, 1)"]),
    "--loss_weights two numbers": flag_case(["--joint_loss", "--loss_weights", "1,2"], ["--loss_weights", "'1,2'"]),
    "--loss_weights not numbers": flag_case(["--loss_weights", "a,b,c"], ["--loss_weights", "'a,b,c'"]),
    "--loss_weights negative": flag_case(["--joint_loss", "--loss_weights", "1,-1,1"], ["--loss_weights", "'1,-1,1'"]),
    # a flag of an extension that is off would do nothing (its budget flags excepted: the grid sets them for all)
    "--loss_weights without --joint_loss": flag_case(["--loss_weights", "1,2,3"], [
        "--loss_weights has no effect without --joint_loss: add --joint_loss, or drop it"]),
    "SMART flags without --smart": flag_case(["--smart_bregman", "--smart_mu", "2"], [
        "--smart_bregman, --smart_mu have no effect without --smart"]),
}

# Failures found only after trainer.run has made the run folder: it resolves the data directory and
# the model directory first, but reads the files and loads the weights inside the run, so these
# leave <out_dir>/<run_name>/metrics.json (status "failed") behind. Remove a name when fixed.


def assert_one_line_error(box, capsys, flags, fragments, run_folder: bool = False) -> str:
    """The run fails with one ``error:`` line holding every fragment; data, model, the earlier run
    and the note are left as they were, nothing is written outside the run folder, and no run folder
    is made unless ``run_folder`` (a failure found once the run has started)."""
    before = snapshot(box.root)
    assert box.main(*flags) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "\n" not in err, err
    for fragment in fragments:
        assert fragment in err, (fragment, err)
    after = snapshot(box.root)
    assert {k: after.get(k) for k in before} == before
    new = set(after) - set(before)
    assert all(Path(k).parts[:2] == ("out", RUN_NAME) for k in new), new
    assert box.run_dir.exists() == run_folder
    return err


@pytest.mark.parametrize("name", FAILING)
def test_one_line_error_and_nothing_damaged(box, capsys, name):
    flags, fragments = FAILING[name](box)
    assert_one_line_error(box, capsys, flags, fragments)  # inputs are all checked before the run folder is made


def test_existing_run_folder_is_refused_before_bad_data_is_read(box, capsys):
    box.run_dir.mkdir()
    (box.run_dir / "metrics.json").write_text("precious")
    wrong_columns(box)
    assert box.main() == 1
    assert capsys.readouterr().err.strip() == (
        f"error: {box.run_dir} already holds a run; choose another --run_name or remove it")
    assert [p.name for p in box.run_dir.iterdir()] == ["metrics.json"]
    assert (box.run_dir / "metrics.json").read_text() == "precious"


# --- flags argparse refuses: exit 2, usage, the flag named ------------------------------------

@pytest.mark.parametrize("flags, named", [
    (["--pooling", "not-a-mode"], "argument --pooling: invalid choice: 'not-a-mode'"),   # names no registry takes
    (["--lr", "fast"], "argument --lr: invalid float value: 'fast'"),
    (["--batch_size", "1.5"], "argument --batch_size: invalid int value: '1.5'"),
    (["--para_head", "not-a-head"], "argument --para_head: invalid choice: 'not-a-head'"),
])
def test_parser_rejects_with_usage_and_exit_2(box, capsys, flags, named):
    with pytest.raises(SystemExit) as exit_info:
        box.main(*flags)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: ") and named in err.strip().splitlines()[-1]
    assert not box.run_dir.exists()
