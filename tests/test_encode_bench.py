"""bench/encode.py without sentence-transformers installed: one error line; its corpus is distinct
SST and STS training sentences."""
import sys
from pathlib import Path

import pytest

from bench import encode

FIXTURE_DATA = Path(__file__).parent / "fixtures" / "data"


def test_without_sentence_transformers_it_says_what_to_install(capsys, monkeypatch):
    """Its absence made, so that the error is checked where sentence-transformers is installed too."""
    monkeypatch.setitem(sys.modules, "sentence_transformers", None)   # import sentence_transformers -> ImportError
    assert encode.main(["some-run"]) == 1
    assert capsys.readouterr().err.strip().startswith("error: this benchmark needs sentence-transformers")


def test_corpus_is_distinct_training_sentences_cut_to_n():
    sentences = encode.corpus(str(FIXTURE_DATA), 1000)
    assert len(sentences) == len(set(sentences)) > 20
    assert encode.corpus(str(FIXTURE_DATA), 5) == sentences[:5]


def test_int8_side_quantizes_every_linear_and_sts_dev_reads_pairs(tiny_model_dir):
    import torch

    from minbert import BertModel
    model = BertModel.from_pretrained(tiny_model_dir)
    quantized = encode._quantize(model, per_channel=True)
    linear = sum(isinstance(m, torch.nn.Linear) for m in model.modules())
    assert linear > 0 and sum(type(m) is torch.nn.Linear for m in quantized.modules()) == 0
    first, second, gold = encode.sts_dev(str(FIXTURE_DATA))
    assert len(first) == len(second) == len(gold) > 2
