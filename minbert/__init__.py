"""minBERT: a BERT encoder, WordPiece tokenizer, AdamW and HF-format weight loading, written out."""
from .config import BertConfig
from .model import BertModel
from .optimizer import AdamW
from .tokenizer import BertTokenizer
from .weights import WeightsError, default_model_dir

__all__ = ["BertConfig", "BertModel", "AdamW", "BertTokenizer", "WeightsError", "default_model_dir"]
