"""Pooling strategies and task heads on top of ``minbert.BertModel``."""
from .pooling import POOLING_MODES, pool, pooled_size
from .pair_parts import ClassesScorer
from .tasks import PAIR_HEAD_KINDS, PROJECTIONS, MultitaskBert, PairHead, SentimentHead

__all__ = ["POOLING_MODES", "pool", "pooled_size", "PAIR_HEAD_KINDS", "PROJECTIONS", "ClassesScorer", "MultitaskBert",
           "PairHead", "SentimentHead"]
