"""minbert used on its own, as its docstrings and docs/data.md describe it: the tokenizer's word pieces, the
vocabulary's ids, and a DistilBERT given a sentence pair's encoding."""
from pathlib import Path

import torch

from minbert import BertModel, BertTokenizer, default_model_dir

DISTILBERT = Path(__file__).parent / "fixtures" / "distilbert"   # tests/fixtures/make_distilbert_reference.py


def test_tokenize_is_not_cut_by_an_earlier_encode_batch():
    tok = BertTokenizer(default_model_dir() / "vocab.txt")
    text = "one two three four five six seven eight nine ten"
    pieces = tok.tokenize(text)
    tok.encode_batch(["a short one"], max_length=5)
    assert tok.tokenize(text) == pieces and len(pieces) == 10
    assert tok.encode_batch([text], max_length=5)["input_ids"].shape == (1, 5)   # encode_batch still truncates


def test_a_token_listed_twice_takes_its_last_line_as_in_the_bert_release(tmp_path):
    # BERT's tokenization.load_vocab, HF's BertTokenizer and tokenizers' WordPiece.read_file: the later line wins
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "hello", "world", "hello"]) + "\n")
    ids = BertTokenizer(vocab).encode_batch(["hello world"])["input_ids"]
    assert ids.tolist() == [[2, 6, 5, 3]]


def test_distilbert_takes_a_sentence_pairs_encoding_and_ignores_its_token_types():
    # DistilBERT has no token types (docs/data.md: one all-zero row): a pair's types 1 are ignored, as
    # HuggingFace's DistilBertModel (which takes no token_type_ids) encodes the same ids
    model = BertModel.from_pretrained(DISTILBERT).eval()
    ids = torch.tensor([[2, 40, 3, 57, 3, 0]])
    mask = torch.tensor([[1, 1, 1, 1, 1, 0]])
    types = torch.tensor([[0, 0, 0, 1, 1, 0]])
    with torch.no_grad():
        paired = model(ids, mask, types)["last_hidden_state"]
        plain = model(ids, mask)["last_hidden_state"]
    assert torch.equal(paired, plain)


def test_a_vocab_lines_trailing_blanks_are_not_part_of_its_token(tmp_path):
    # as HF's tokenizers and transformers' BertTokenizer read vocab.txt (and the BERT release, which strips)
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\nhello\nworld \t\nfoo\n")
    ids = BertTokenizer(vocab).encode_batch(["hello world foo"])["input_ids"]
    assert ids.tolist() == [[2, 4, 5, 6, 3]]


def test_from_pretrained_comes_in_training_mode_as_its_docstring_says(tiny_model_dir):
    bert = BertModel.from_pretrained(tiny_model_dir)
    assert bert.training and "training mode" in BertModel.from_pretrained.__doc__
    assert not bert.eval().training
