"""Pooling strategies and task heads on top of ``minbert.BertModel``."""
from .pooling import POOLING_MODES, pool, pooled_size
from .tasks import PAIR_HEAD_KINDS, PROJECTIONS, MultitaskBert, PairClassifierHead, PairHead, SentimentHead

__all__ = ["POOLING_MODES", "pool", "pooled_size", "PAIR_HEAD_KINDS", "PROJECTIONS", "MultitaskBert",
           "PairClassifierHead", "PairHead", "SentimentHead"]
