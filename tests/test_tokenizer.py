"""Our WordPiece tokenizer against HuggingFace's, via the stored reference fixture.

``tests/fixtures/reference_minilm.safetensors`` holds the ids HF's BERT tokenizers (the
pure-python and the ``tokenizers``-backed one, which agree) produce for a small batch: three
single sentences (upper case, punctuation, accents, a made-up word split into ``##`` pieces,
an out-of-vocabulary emoji -> [UNK]) and one sentence pair, padded to the longest row; plus
two truncated encodings. See ``tests/fixtures/make_reference.py``.
"""

import pytest
import torch

from minbert.tokenizer import BertTokenizer
from minbert.weights import default_model_dir

KEYS = ("input_ids", "attention_mask", "token_type_ids")


@pytest.fixture(scope="module")
def tok():
    return BertTokenizer(default_model_dir() / "vocab.txt")


def _assert_rows_equal(got, ref_tensors, rows, prefix=""):
    """``got`` (n, t) must equal the reference rows cut to t columns; the cut-off columns must be padding."""
    t = got["input_ids"].shape[1]
    for k in KEYS:
        expected = ref_tensors[prefix + k][rows]
        assert got[k].dtype == torch.long
        assert got[k].tolist() == expected[:, :t].tolist(), k
        assert not expected[:, t:].any(), f"{k}: reference has non-padding beyond column {t}"


def test_single_sentences_match_hf(tok, ref):
    tensors, meta = ref
    got = tok.encode_batch(meta["sentences"], max_length=128)
    _assert_rows_equal(got, tensors, slice(0, 3))
    # the case the fixture was built to cover actually occurs
    assert tok.vocab["[UNK]"] in got["input_ids"][2].tolist()
    assert got["attention_mask"][0].sum() < got["attention_mask"][1].sum()  # padding in the batch


def test_sentence_pair_matches_hf(tok, ref):
    tensors, meta = ref
    first, second = meta["pair"]
    got = tok.encode_batch([first], pairs=[second], max_length=128)
    _assert_rows_equal(got, tensors, slice(3, 4))
    assert 1 in got["token_type_ids"][0].tolist()


def test_each_sentence_alone_matches_hf(tok, ref):
    # no padding when encoded alone: the ids are exactly the reference's real tokens
    tensors, meta = ref
    for row, text in enumerate(meta["sentences"]):
        got = tok.encode_batch([text], max_length=128)
        n = int(tensors["attention_mask"][row].sum())
        assert got["input_ids"][0].tolist() == tensors["input_ids"][row, :n].tolist()
        assert got["attention_mask"][0].tolist() == [1] * n


def test_truncated_single_matches_hf(tok, ref):
    tensors, meta = ref
    spec = meta["trunc_single"]
    assert spec["text"] == "sentences[1]"
    got = tok.encode_batch([meta["sentences"][1]], max_length=spec["max_length"])
    for k in KEYS:
        assert got[k].tolist() == tensors["trunc_single_" + k].tolist(), k
    assert got["input_ids"].shape[1] == spec["max_length"]
    assert got["input_ids"][0, 0].item() == tok.cls_token_id
    assert got["input_ids"][0, -1].item() == tok.sep_token_id


def test_truncated_pair_matches_hf(tok, ref):
    tensors, meta = ref
    spec = meta["trunc_pair"]
    first, second = meta["pair"]
    got = tok.encode_batch([first], pairs=[second], max_length=spec["max_length"])
    for k in KEYS:
        assert got[k].tolist() == tensors["trunc_pair_" + k].tolist(), k
    ids = got["input_ids"][0].tolist()
    assert len(ids) == spec["max_length"]
    assert ids[-1] == tok.sep_token_id and ids.count(tok.sep_token_id) == 2


@pytest.mark.parametrize("max_length", [3, 4, 7, 12])
def test_truncation_keeps_sep_last_in_a_batch(tok, max_length):
    texts = ["short.", "a considerably longer sentence that will certainly need to be truncated here", "mid length one"]
    got = tok.encode_batch(texts, max_length=max_length)
    assert got["input_ids"].shape[1] <= max_length
    for ids, mask in zip(got["input_ids"], got["attention_mask"]):
        n = int(mask.sum())
        assert mask[:n].all() and not mask[n:].any()  # right padding
        assert ids[0].item() == tok.cls_token_id
        assert ids[n - 1].item() == tok.sep_token_id
        assert (ids[n:] == tok.pad_token_id).all()


@pytest.mark.parametrize("max_length", [5, 8, 12])
def test_pair_truncation_keeps_sep_last_in_a_batch(tok, max_length):
    texts = ["short.", "a considerably longer first segment that will need to be truncated", "mid length one"]
    pairs = ["the second segment is also rather long, long, long", "x", "a second segment of some length"]
    got = tok.encode_batch(texts, pairs=pairs, max_length=max_length)
    assert got["input_ids"].shape[1] <= max_length
    for ids, mask, types in zip(got["input_ids"], got["attention_mask"], got["token_type_ids"]):
        n = int(mask.sum())
        real = ids[:n].tolist()
        assert real[0] == tok.cls_token_id and real[-1] == tok.sep_token_id
        assert real.count(tok.sep_token_id) == 2
        assert types[n - 1].item() == 1  # the final [SEP] belongs to segment B
        assert not types[n:].any()


def test_max_length_too_small_rejected(tok):
    with pytest.raises(ValueError):
        tok.encode_batch(["hello"], max_length=2)
