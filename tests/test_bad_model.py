"""The bad-input suite, round 2: impossible model configurations and data that reads but cannot be used.

Through ``run_multitask.main`` on the sandbox of test_bad_input.py: a malformed ``config.json`` field,
a ``vocab.txt`` that is not UTF-8 or a ``--pooling`` mode deeper than the model must each end the run
with ONE line naming the file and the field (or line), exit code 1, and no run folder. A duplicated
id is a bad row (skipped and reported, an error with ``--strict``). A SimCSE or label-contrastive
corpus too small for one batch is an error naming its flag, its file and the counts.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from test_bad_input import assert_one_line_error, box, edit_config, edit_row  # noqa: F401 (box: the fixture)

from minbert import BertConfig, default_model_dir

DISTILBERT = Path(__file__).parent / "fixtures" / "distilbert"


# --- config.json: every field's type and range --------------------------------------------------

BAD_FIELDS = {
    "zero width": ({"hidden_size": 0}, "hidden_size must be a positive integer, got 0"),
    "layers as a word": ({"num_hidden_layers": "six"}, "num_hidden_layers must be a positive integer, got 'six'"),
    "fractional heads": ({"num_attention_heads": 2.5}, "num_attention_heads must be a positive integer, got 2.5"),
    "true for an int": ({"vocab_size": True}, "vocab_size must be a positive integer, got True"),
    "negative size": ({"intermediate_size": -32}, "intermediate_size must be a positive integer, got -32"),
    "a list": ({"max_position_embeddings": [64]}, "max_position_embeddings must be a positive integer, got [64]"),
    "no token types": ({"type_vocab_size": 0}, "type_vocab_size must be a positive integer, got 0"),
    "dropout of 1": ({"hidden_dropout_prob": 1}, "hidden_dropout_prob must be a number in [0, 1), got 1"),
    "negative dropout": ({"attention_probs_dropout_prob": -0.1},
                         "attention_probs_dropout_prob must be a number in [0, 1), got -0.1"),
    "dropout as text": ({"attention_probs_dropout_prob": "0.1"},
                        "attention_probs_dropout_prob must be a number in [0, 1), got '0.1'"),
    "zero epsilon": ({"layer_norm_eps": 0}, "layer_norm_eps must be a positive finite number, got 0"),
    "unknown activation": ({"hidden_act": "swish"}, "hidden_act must be one of gelu, gelu_new, relu, got 'swish'"),
    "pad id past the vocabulary": ({"pad_token_id": 30522}, "pad_token_id must be below vocab_size 30522, got 30522"),
    "heads do not divide the width": ({"num_attention_heads": 3},
                                      "hidden_size 16 is not a multiple of num_attention_heads 3"),
}


@pytest.mark.parametrize("name", BAD_FIELDS)
def test_bad_config_field_is_one_line_naming_file_and_field(box, capsys, name):
    values, message = BAD_FIELDS[name]
    edit_config(box.model, **values)
    err = assert_one_line_error(box, capsys, [], [message])
    assert err == f"error: {box.model / 'config.json'}: {message}"


@pytest.mark.parametrize("text, fragment", [
    ("{ broken", "unreadable ("), ('{"do_lower_case": "no"}', "do_lower_case must be true or false, got 'no'"),
    ("[true]", "do_lower_case must be true or false, got [True]")])
def test_a_damaged_tokenizer_config_is_one_line_naming_it(box, capsys, text, fragment):
    """It was read as absent (lower-cased: a cased model's vocabulary would lose its capitals without a word)."""
    (box.model / "tokenizer_config.json").write_text(text)
    assert_one_line_error(box, capsys, [], [f"{box.model / 'tokenizer_config.json'}: {fragment}"])


def test_distilbert_config_errors_name_distilbert_keys(tmp_path):
    config = json.loads((DISTILBERT / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**config, "n_layers": 0}))
    with pytest.raises(ValueError) as err:
        BertConfig.from_json(tmp_path / "config.json")
    assert str(err.value) == f"{tmp_path / 'config.json'}: n_layers must be a positive integer, got 0"


def test_valid_configs_still_load():
    """The embedded model, the DistilBERT fixture (extra keys, nulls), defaults and small test sizes."""
    assert BertConfig.from_json(default_model_dir() / "config.json").num_hidden_layers == 6
    assert BertConfig.from_json(DISTILBERT / "config.json").hidden_size == 16
    assert BertConfig().hidden_size == 768
    small = BertConfig(vocab_size=50, hidden_size=8, num_hidden_layers=1, num_attention_heads=2,
                       intermediate_size=16, hidden_dropout_prob=0, attention_probs_dropout_prob=0.0,
                       layer_norm_eps=1e-5, pad_token_id=None)
    assert small.pad_token_id is None


def test_python_built_config_is_checked_too():
    with pytest.raises(ValueError, match=r"^hidden_size must be a positive integer, got 0$"):
        BertConfig(hidden_size=0)


# --- vocab.txt ---------------------------------------------------------------------------------

def test_vocab_not_utf8_names_file_and_line(box, capsys):
    path = box.model / "vocab.txt"
    lines = path.read_bytes().split(b"\n")
    lines[4] = b"caf\xe9"  # Latin-1, line 5
    path.write_bytes(b"\n".join(lines))
    assert_one_line_error(box, capsys, [], [f"{path}, line 5: not valid UTF-8 (byte 0xe9)"])


# --- --pooling deeper than the model ------------------------------------------------------------

@pytest.mark.parametrize("mode", ["last4_mean", "last4_concat"])
def test_pooling_deeper_than_the_model_is_refused(box, capsys, mode):
    assert_one_line_error(box, capsys, ["--pooling", mode], [
        f"--pooling {mode} reads the last 4 layers", f"{box.model / 'config.json'}", "num_hidden_layers 2"])


def test_pooling_layers_read():
    from heads.pooling import POOLING_MODES, layers_read
    deep = {"second_last": 2, "last2_mean": 2, "last4_mean": 4, "last4_concat": 4}
    assert {mode: layers_read(mode) for mode in POOLING_MODES} == {mode: deep.get(mode, 1) for mode in POOLING_MODES}


# --- duplicate ids -------------------------------------------------------------------------------

def duplicate_id(box) -> tuple[Path, str]:
    """Give line 9 of ids-sst-dev.csv the id of line 3."""
    path = box.data / "ids-sst-dev.csv"
    first = path.read_text(encoding="utf-8").split("\n")[2].split("\t")[1]
    edit_row(path, 9, "id", first)
    return path, first


@pytest.mark.slow
def test_duplicate_id_is_skipped_and_reported(box, capsys):
    path, first = duplicate_id(box)
    assert box.main() == 0
    warnings = [w for w in capsys.readouterr().out.splitlines() if w.startswith("warning:")]
    assert warnings == [f"warning: {path.name}: 10 rows, 1 skipped "
                        f"(line 9: id: duplicate id '{first}' (first on line 3))"]
    assert json.loads((box.run_dir / "metrics.json").read_text())["data"][path.name]["skipped"] == 1
    assert len((box.run_dir / "sst-dev-output.csv").read_text().splitlines()) == 1 + 9


def test_duplicate_id_with_strict_is_an_error(box, capsys):
    path, first = duplicate_id(box)
    assert_one_line_error(box, capsys, ["--strict"], [
        f"{path}, line 9, field id: duplicate id '{first}' (first on line 3)"])


# --- contrastive corpora too small for one batch ------------------------------------------------
# Found by the stage itself, once the run has started: the run folder is left, marked "failed".

def test_ucl_corpus_of_one_sentence(box, capsys):
    corpus = box.root / "corpus.txt"
    corpus.write_text("\nOnly one sentence here.\n\n")
    assert_one_line_error(box, capsys, ["--ucl", "--ucl_data", str(corpus)], [
        f"--ucl_data {corpus}: only 1 sentence; a ucl batch (--ucl_batch_size 64) needs at least 2"],
        run_folder=True)
    assert json.loads((box.run_dir / "metrics.json").read_text())["status"] == "failed"


def test_scl_corpus_of_one_triple(box, capsys):
    corpus = box.root / "triples.csv"
    corpus.write_text("sent0,sent1,hard_neg\nA man plays.,Someone plays.,Nobody plays.\n")
    assert_one_line_error(box, capsys, ["--scl", "--scl_data", str(corpus), "--scl_batch_size", "4"], [
        f"--scl_data {corpus}: only 1 triple; a scl batch (--scl_batch_size 4) needs at least 2"],
        run_folder=True)


def test_strict_stops_at_a_bad_row_of_the_scl_and_ucl_eval_files_too(box, capsys):
    """--strict reached the task files only: a bad --scl_data row was skipped with a warning, a bad
    --ucl_eval_data row without a word (10 pairs scored of 11 rows); now both are refused, and reported without it."""
    triples = box.root / "triples.csv"
    triples.write_text("sent0,sent1,hard_neg\na,,c\nd,e,f\ng,h,i\n")
    sts = box.root / "sts-bad.csv"
    lines = (box.data / "sts-dev.csv").read_text(encoding="utf-8").split("\n")
    fields = lines[2].split("\t")
    fields[2] = ""   # sentence1
    lines[2] = "\t".join(fields)
    sts.write_text("\n".join(lines), encoding="utf-8")
    stages = {"scl": ["--scl", "--scl_data", str(triples), "--scl_batch_size", "2", "--scl_steps", "1"],
              "ucl": ["--ucl", "--ucl_eval_every", "1", "--ucl_eval_data", str(sts), "--ucl_batch_size", "2",
                      "--ucl_steps", "1"]}
    for stage, flags in stages.items():
        assert box.main("--tasks", "sst", *flags, "--run_name", f"{stage}-warned") == 0
        said = capsys.readouterr()
        assert f"warning: {(triples if stage == 'scl' else sts).name}: " in said.out + said.err
    assert_one_line_error(box, capsys, ["--tasks", "sst", "--strict", *stages["scl"]],
                          [f"{triples}, line 2, field sent1: "], run_folder=True)
    shutil.rmtree(box.run_dir)
    assert_one_line_error(box, capsys, ["--tasks", "sst", "--strict", *stages["ucl"]],
                          [f"{sts}, line 3, field sentence1: empty sentence"], run_folder=True)


def test_the_log_file_ends_with_how_the_run_ended(box, capsys):
    """--log_file "appends every line": the console's last line (an error, SIGTERM) never reached it."""
    corpus = box.root / "triples.csv"
    corpus.write_text("sent0,sent1,hard_neg\nA man plays.,Someone plays.,Nobody plays.\n")
    log = box.root / "run.log"
    assert box.main("--scl", "--scl_data", str(corpus), "--scl_batch_size", "4", "--log_file", str(log)) == 1
    said = capsys.readouterr().err.strip()
    assert said.startswith(f"error: --scl_data {corpus}: only 1 triple") and "\n" not in said
    assert log.read_text().splitlines()[-1].endswith(" failed: DataError: " + said.removeprefix("error: "))


def test_lcl_on_a_one_sentence_training_set(box, capsys):
    path = box.data / "ids-sst-train.csv"
    path.write_text("\n".join(path.read_text(encoding="utf-8").split("\n")[:2]) + "\n", encoding="utf-8")
    assert_one_line_error(box, capsys, ["--lcl"], [
        f"the sst training set ({path.name}): only 1 sentence; a lcl batch (--lcl_batch_size 32) needs at least 2"],
        run_folder=True)
