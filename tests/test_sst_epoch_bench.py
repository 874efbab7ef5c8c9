"""bench/sst_epoch.py end to end on the tiny data and model: all three batching variants train,
evaluate and report; fixed batches are max_length wide; bucketing pads least."""
import json
from pathlib import Path

import pytest
import torch

from bench import sst_epoch

FIXTURE_DATA = Path(__file__).parent / "fixtures" / "data"
MAX_LENGTH = 24  # the tiny model has 64 positions; the longest fixture SST sentence is 16 word pieces


@pytest.fixture(scope="module")
def report(tmp_path_factory, tiny_model_dir):
    out = tmp_path_factory.mktemp("sst-epoch") / "bench.json"
    # batch 10: the 2 batches are the whole epoch (20 sentences) and the whole dev set (10)
    returned = sst_epoch.main(["--data_dir", str(FIXTURE_DATA), "--model", str(tiny_model_dir),
                               "--variants", "fixed,dynamic,bucket", "--batch_size", "10",
                               "--max_length", str(MAX_LENGTH), "--max_batches", "2", "--threads", "1",
                               "--out", str(out)])
    written = json.loads(out.read_text(encoding="utf-8"))
    assert written == json.loads(json.dumps(returned))
    return written


def test_every_variant_reports_its_fields(report):
    assert report["benchmark"] == "sst_epoch"
    assert report["settings"]["max_length"] == MAX_LENGTH and report["settings"]["max_batches"] == 2
    assert list(report["variants"]) == ["fixed", "dynamic", "bucket"]
    for name, r in report["variants"].items():
        assert r["batches"] == 2 and r["train_examples"] == 20 and r["dev_examples"] == 10, name
        assert r["padded_tokens"] == sum([r["max_width"], r["min_width"]]) * 10, name  # two batches of 10
        assert r["padding_ratio"] == pytest.approx(r["padded_tokens"] / r["real_tokens"])
        assert r["train_seconds"] > 0 and r["examples_per_second"] > 0 and r["eval_seconds"] > 0
        assert 0 <= r["loader_seconds"] <= r["train_seconds"]
        assert 0.0 <= r["dev_accuracy"] <= 1.0 and r["train_loss"] > 0
        assert r["speedup_vs_fixed"] == pytest.approx(report["variants"]["fixed"]["train_seconds"] / r["train_seconds"])
        assert r["speedup_vs_dynamic"] == pytest.approx(
            report["variants"]["dynamic"]["train_seconds"] / r["train_seconds"])
    # the same sentences in every variant: only the padding differs
    assert len({r["real_tokens"] for r in report["variants"].values()}) == 1


def test_fixed_batches_are_max_length_wide(report):
    fixed = report["variants"]["fixed"]
    assert fixed["min_width"] == fixed["max_width"] == MAX_LENGTH
    assert report["variants"]["dynamic"]["max_width"] < MAX_LENGTH


def test_bucketing_pads_least(report):
    ratio = {name: r["padding_ratio"] for name, r in report["variants"].items()}
    assert 1.0 <= ratio["bucket"] <= ratio["dynamic"] <= ratio["fixed"]


def test_fixed_collator_pads_the_dynamic_batch():
    def collate(batch):
        ids = torch.tensor([[101, 7, 102], [101, 102, 0]])
        return {"ids": ["a", "b"], "labels": None,
                "inputs": [{"input_ids": ids, "attention_mask": (ids > 0).long(), "token_type_ids": ids * 0}]}

    out = sst_epoch.FixedWidthCollator(collate, width=5, pad_id=0)([None, None])
    encoding = out["inputs"][0]
    assert encoding["input_ids"].tolist() == [[101, 7, 102, 0, 0], [101, 102, 0, 0, 0]]
    assert encoding["attention_mask"].tolist() == [[1, 1, 1, 0, 0], [1, 1, 0, 0, 0]]
    assert encoding["token_type_ids"].shape == (2, 5) and out["ids"] == ["a", "b"]


def test_unknown_variant_is_refused():
    with pytest.raises(SystemExit):
        sst_epoch.main(["--variants", "fixed,sorted"])
