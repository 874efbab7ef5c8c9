"""minBERT: a BERT encoder, WordPiece tokenizer, AdamW and HF-format weight loading, written out."""
from .config import BertConfig
from .model import BertModel
from .optimizer import AdamW, decay_groups
from .tokenizer import BertTokenizer
from .weights import WeightsError, default_model_dir

__all__ = ["BertConfig", "BertModel", "AdamW", "decay_groups", "BertTokenizer", "WeightsError", "default_model_dir"]
