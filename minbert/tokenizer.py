"""WordPiece tokenizer for BERT, built from a model's ``vocab.txt``.

The ``tokenizers`` library's WordPiece (the BERT release's algorithm: whitespace/punctuation split,
lower-casing and accent stripping for uncased vocabularies, greedy longest-match-first sub-words),
with BERT's post-processing added: ``[CLS] a [SEP]`` or ``[CLS] a [SEP] b [SEP]`` with token types.
"""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

import torch
from tokenizers import Tokenizer
from tokenizers.models import WordPiece
from tokenizers.normalizers import BertNormalizer
from tokenizers.pre_tokenizers import BertPreTokenizer
from tokenizers.processors import TemplateProcessing


class BertTokenizer:
    """Encode sentences (or sentence pairs) into padded id tensors."""

    def __init__(self, vocab_file: str | Path, lowercase: bool = True):
        self.vocab_file = vocab_file = Path(vocab_file)
        self.lowercase = lowercase
        if not vocab_file.is_file():
            raise FileNotFoundError(f"vocabulary file not found: {vocab_file}")
        vocab = _read_vocab(vocab_file)
        for token in ("[PAD]", "[UNK]", "[CLS]", "[SEP]"):
            if token not in vocab:
                raise ValueError(f"{vocab_file}: special token {token} missing from the vocabulary")
        tok = Tokenizer(WordPiece(vocab, unk_token="[UNK]", max_input_chars_per_word=100))
        tok.normalizer = BertNormalizer(clean_text=True, handle_chinese_chars=True, strip_accents=None,
                                        lowercase=lowercase)
        tok.pre_tokenizer = BertPreTokenizer()
        self.vocab, self.pad_token_id = vocab, vocab["[PAD]"]
        self.cls_token_id, self.sep_token_id = vocab["[CLS]"], vocab["[SEP]"]
        tok.post_processor = TemplateProcessing(
            single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
            special_tokens=[("[CLS]", self.cls_token_id), ("[SEP]", self.sep_token_id)])
        self._tok = tok

    @property
    def vocab_size(self) -> int:
        return len(self.vocab)

    def tokenize(self, text: str) -> list[str]:
        """Word pieces of one sentence, without special tokens."""
        self._tok.no_truncation()   # not cut at the max_length of an earlier encode_batch
        return self._tok.encode(text, add_special_tokens=False).tokens

    def encode_batch(self, texts: Sequence[str], pairs: Sequence[str] | None = None,
                     max_length: int = 128) -> dict[str, torch.Tensor]:
        """``input_ids``, ``attention_mask`` and ``token_type_ids`` as (B, T) long tensors, padded to the
        batch's longest sequence (dynamic padding), truncated to ``max_length`` tokens with the special ones."""
        if max_length < 3:
            raise ValueError(f"max_length must be at least 3, got {max_length}")
        self._tok.enable_truncation(max_length=max_length, strategy="longest_first")
        self._tok.enable_padding(pad_id=self.pad_token_id, pad_token="[PAD]")
        if pairs is not None and len(pairs) != len(texts):
            raise ValueError("texts and pairs must have the same length")
        encodings = self._tok.encode_batch(list(texts) if pairs is None else list(zip(texts, pairs)))
        return {
            "input_ids": torch.tensor([e.ids for e in encodings], dtype=torch.long),
            "attention_mask": torch.tensor([e.attention_mask for e in encodings], dtype=torch.long),
            "token_type_ids": torch.tensor([e.type_ids for e in encodings], dtype=torch.long),
        }


def _read_vocab(vocab_file: Path) -> dict[str, int]:
    """One token per line; the line number is the id (as in the BERT release: a token listed twice takes its
    last line, as HF's tokenizers read it too). The file is decoded
    whole so that a non-UTF-8 byte is reported with its line."""
    raw = vocab_file.read_bytes()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        line = raw.count(b"\n", 0, err.start) + 1
        raise ValueError(f"{vocab_file}, line {line}: not valid UTF-8 (byte 0x{raw[err.start]:02x})") from None
    vocab: dict[str, int] = {}
    # the line breaks of text-mode reading (universal newlines): \n, \r\n and \r
    for index, token in enumerate(text.replace("\r\n", "\n").replace("\r", "\n").split("\n")):
        token = token.rstrip()   # trailing blanks are no part of a token (HF's tokenizers drop them too)
        if token:
            vocab[token] = index
    if not vocab:
        raise ValueError(f"{vocab_file}: empty vocabulary")
    return vocab
