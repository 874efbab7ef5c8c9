"""No tool replaces a run's own files, or any existing output, unless asked (issue 28, "Data loss"):
predict, embed and scripts/quantize.py refuse existing outputs without --overwrite, predict never
writes into the run itself, quantize leaves nothing behind on a run without heads, and the report
writes only with --out and refuses a run folder given in place of its parent."""
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from minbert import BertConfig
from test_predict_embed import train
from test_quantize import quantize
from training.harness.checkpoint import load_checkpoint, save_checkpoint
from training.tools import embed, predict, report

ROOT = Path(__file__).resolve().parents[1]
FIXTURE_DATA = ROOT / "tests" / "fixtures" / "data"
FIXTURE_RUNS = ROOT / "tests" / "fixtures" / "runs"


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory, tiny_model_dir):
    """A tiny trained run (tests/test_predict_embed.py's): metrics.json, CSVs, checkpoint/."""
    return train(tmp_path_factory.mktemp("runs"), tiny_model_dir, "run")


@pytest.fixture(scope="module")
def headless(run_dir, tmp_path_factory):
    """The run's encoder saved without task heads: the checkpoint of an ``--epochs 0 --ucl`` run."""
    state, saved = load_checkpoint(run_dir / "checkpoint")
    folder = tmp_path_factory.mktemp("headless") / "run" / "checkpoint"
    save_checkpoint(folder, {k: v for k, v in state.items() if not k.startswith("heads.")},
                    BertConfig.from_dict(saved["bert"]), saved["run"])
    return folder


def snapshot(folder: Path) -> dict:
    """Every file under ``folder`` (relative path -> bytes)."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def one_error_line(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "\n" not in err, err
    return err


def other_data(tmp_path: Path) -> Path:
    """A data folder other than the run's: the STS dev file only."""
    data = tmp_path / "other-data"
    data.mkdir()
    shutil.copy(FIXTURE_DATA / "sts-dev.csv", data / "sts-dev.csv")
    return data


@pytest.mark.slow
def test_predict_out_the_run_itself_is_refused_and_the_run_untouched(run_dir, tmp_path, capsys):
    data = other_data(tmp_path)
    before = snapshot(run_dir)
    assert "metrics.json" in before and "sts-dev-output.csv" in before
    for out in (run_dir, run_dir / "checkpoint"):
        for given in (run_dir, run_dir / "checkpoint"):
            for extra in ([], ["--overwrite"]):   # never, even when asked to overwrite
                capsys.readouterr()
                assert predict.main([str(given), "--data_dir", str(data), "--out", str(out), *extra]) == 1
                err = one_error_line(capsys)
                assert "run's own folder" in err and "--out" in err
    assert snapshot(run_dir) == before


def test_predict_refuses_existing_outputs_without_overwrite_and_replaces_them_with_it(run_dir, tmp_path, capsys):
    out = tmp_path / "preds"
    out.mkdir()
    (out / "metrics.json").write_text("mine\n")
    (out / "sts-dev-output.csv").write_text("also mine\n")
    (out / "unrelated.txt").write_text("kept\n")
    before = snapshot(out)
    capsys.readouterr()
    assert predict.main([str(run_dir), "--data_dir", str(FIXTURE_DATA), "--out", str(out)]) == 1
    err = one_error_line(capsys)
    assert "already exists" in err and "--overwrite" in err and "another --out" in err
    assert str(out / "sts-dev-output.csv") in err or str(out / "metrics.json") in err
    assert snapshot(out) == before   # nothing written, nothing changed

    only_metrics = tmp_path / "only-metrics"   # metrics.json alone is one of the files it would write
    only_metrics.mkdir()
    (only_metrics / "metrics.json").write_text("mine\n")
    assert predict.main([str(run_dir), "--data_dir", str(FIXTURE_DATA), "--out", str(only_metrics)]) == 1
    assert str(only_metrics / "metrics.json") in one_error_line(capsys)
    assert snapshot(only_metrics) == {"metrics.json": b"mine\n"}

    # a metrics.json predict did not write is never replaced, --overwrite or not (issue 61)
    assert predict.main([str(run_dir), "--data_dir", str(FIXTURE_DATA), "--out", str(out), "--overwrite"]) == 1
    assert "was not written by predict" in one_error_line(capsys) and snapshot(out) == before
    # predict's own outputs are what --overwrite replaces
    (out / "metrics.json").unlink()
    assert predict.main([str(run_dir), "--data_dir", str(FIXTURE_DATA), "--out", str(out), "--overwrite"]) == 0
    assert predict.main([str(run_dir), "--data_dir", str(FIXTURE_DATA), "--out", str(out), "--overwrite"]) == 0
    assert json.loads((out / "metrics.json").read_text())["scores"]
    assert (out / "sts-dev-output.csv").read_bytes() == (run_dir / "sts-dev-output.csv").read_bytes()
    assert (out / "unrelated.txt").read_text() == "kept\n"


def test_predict_out_another_run_is_refused_even_with_overwrite(run_dir, tmp_path, capsys):
    """Issue 61: --out OTHER_RUN --overwrite replaced that run's metrics.json and CSVs (the report then listed
    it as incomplete); any folder holding a run is refused now, and left as it was."""
    other = tmp_path / "other-run"
    shutil.copytree(run_dir, other)
    before = snapshot(other)
    for extra in ([], ["--overwrite"]):
        capsys.readouterr()
        assert predict.main([str(run_dir), "--data_dir", str(FIXTURE_DATA), "--out", str(other), *extra]) == 1
        assert "holds a run" in one_error_line(capsys)
    shutil.rmtree(other / "checkpoint")   # a run without its weights: its metrics.json still says so
    assert predict.main([str(run_dir), "--data_dir", str(FIXTURE_DATA), "--out", str(other), "--overwrite"]) == 1
    assert "was not written by predict" in one_error_line(capsys)
    assert snapshot(other) == {k: v for k, v in before.items() if not k.startswith("checkpoint")}


def test_predict_and_embed_refuse_a_non_positive_batch_size(run_dir, tmp_path, capsys):
    for size in ("0", "-3"):
        capsys.readouterr()
        assert predict.main([str(run_dir), "--data_dir", str(FIXTURE_DATA), "--out", str(tmp_path / "p"),
                             "--batch_size", size]) == 1
        assert "--batch_size" in one_error_line(capsys)
        (tmp_path / "s.txt").write_text("a sentence .\n")
        assert embed.main([str(run_dir), "--input", str(tmp_path / "s.txt"), "--out", str(tmp_path / "v.npy"),
                           "--batch_size", size]) == 1
        assert "--batch_size" in one_error_line(capsys)
    assert not (tmp_path / "p").exists() and not (tmp_path / "v.npy").exists()


def test_embed_refuses_an_existing_npy_without_overwrite(run_dir, tmp_path, capsys):
    (tmp_path / "s.txt").write_text("A man is playing a guitar.\nTwo dogs run.\n")
    out = tmp_path / "v.npy"
    np.save(out, np.zeros(3, dtype=np.float32))
    before = out.read_bytes()
    capsys.readouterr()
    assert embed.main([str(run_dir), "--input", str(tmp_path / "s.txt"), "--out", str(out)]) == 1
    err = one_error_line(capsys)
    assert str(out) in err and "--overwrite" in err
    assert out.read_bytes() == before
    assert embed.main([str(run_dir), "--input", str(tmp_path / "s.txt"), "--out", str(out), "--overwrite"]) == 0
    assert np.load(out).shape == (2, 16)


def _quantize_argv(checkpoint: Path, out: Path, *extra) -> list[str]:
    return ["--checkpoint", str(checkpoint), "--data_dir", str(FIXTURE_DATA), "--out", str(out), "--max_dev", "4",
            "--batch_size", "4", "--threads", "1", "--bench_examples", "2", "--reps", "1", "--warmup", "0", *extra]


def test_quantize_a_run_without_heads_is_one_line_and_leaves_no_output(headless, tmp_path, capsys):
    out = tmp_path / "quant"
    capsys.readouterr()
    assert quantize.main(_quantize_argv(headless.parent, out)) == 1
    err = one_error_line(capsys)
    assert "head" in err
    assert not (out / "model-int8.pt").exists() and not (out / "quantize-report.json").exists()
    assert not out.exists()


@pytest.mark.filterwarnings("ignore:TypedStorage is deprecated")
def test_quantize_refuses_existing_outputs_without_overwrite(run_dir, tmp_path, capsys):
    out = tmp_path / "quant"
    out.mkdir()
    (out / "model-int8.pt").write_bytes(b"earlier weights")
    capsys.readouterr()
    assert quantize.main(_quantize_argv(run_dir, out)) == 1
    err = one_error_line(capsys)
    assert str(out / "model-int8.pt") in err and "--overwrite" in err
    assert snapshot(out) == {"model-int8.pt": b"earlier weights"}

    (out / "model-int8.pt").unlink()
    (out / "quantize-report.json").write_text("{}\n")
    assert quantize.main(_quantize_argv(run_dir, out)) == 1
    assert str(out / "quantize-report.json") in one_error_line(capsys)
    assert snapshot(out) == {"quantize-report.json": b"{}\n"}

    assert quantize.main(_quantize_argv(run_dir, out, "--overwrite")) == 0
    assert json.loads((out / "quantize-report.json").read_text())["size"]["int8_bytes"] == \
        (out / "model-int8.pt").stat().st_size


def test_report_on_a_run_folder_is_one_line_naming_the_parent(run_dir, tmp_path, capsys):
    runs = tmp_path / "runs"
    shutil.copytree(FIXTURE_RUNS, runs)
    for folder in (runs / "ablate-ft", run_dir):   # metrics.json, and a trained run with checkpoint/
        before = snapshot(folder)
        capsys.readouterr()
        assert report.main([str(folder)]) == 1
        err = one_error_line(capsys)
        assert "is a run folder" in err and "parent folder of run folders" in err
        assert snapshot(folder) == before
    checkpoint_only = tmp_path / "half" / "run"
    (checkpoint_only / "checkpoint").mkdir(parents=True)
    assert report.main([str(checkpoint_only)]) == 1
    assert "checkpoint" in one_error_line(capsys)
    assert not any(checkpoint_only.glob("ablation*"))


def test_report_without_out_prints_the_table_and_writes_nothing(tmp_path, capsys):
    runs = tmp_path / "runs"
    shutil.copytree(FIXTURE_RUNS, runs)
    before = snapshot(tmp_path)
    capsys.readouterr()
    assert report.main([str(runs)]) == 0
    captured = capsys.readouterr()
    assert captured.out.split()[:2] == ["run", "seeds"]   # the compact view
    assert "nothing written" in captured.err
    assert snapshot(tmp_path) == before
    assert not any(runs.glob("ablation*"))

    assert report.main([str(runs), "--out", str(tmp_path / "t" / "table"), "--full"]) == 0   # --out writes
    assert (tmp_path / "t" / "table.md").read_text(encoding="utf-8") == capsys.readouterr().out
    assert not any(runs.glob("ablation*"))
