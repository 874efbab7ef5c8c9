"""Core settings that the ablation grid varies and the results table tells apart from FT, as ``Idea``
objects beside the extensions: their flags live in ``training/configuration/sections.py`` (they are no extension), but
their grid rows, their label and the settings the results table shows of them (``shows``: a column where the rows
differ, the caption where they do not) come from here, so the grid and the report name no idea.
"""
from __future__ import annotations

from heads.pair_parts import DEFAULTS as PAIR_DEFAULTS

from heads.sts_losses import DEFAULT_STS_LOSS
from .base import Idea, saved_flag


class RoundRobin(Idea):
    """``--rr``: the epoch's length and mix of task batches (``training/learning/schedule.py``)."""
    name, shows = "rr", ("rr",)
    variants = (("mean-rr-exhaust", ["--rr", "exhaust"]), ("mean-rr-proportional", ["--rr", "proportional"]))

    def on(self, saved: dict) -> bool:
        return saved_flag(saved, "rr", "min") != "min"


class PrivateLayers(Idea):
    """``--private_layers K``: each task's own copy of the top K layers (docs/flags.md, "Private layers").
    Every grid row not about it trains one shared encoder, as the extensions' papers do."""
    name, shows = "private_layers", ("private_layers",)
    variants = (("mean-private2", ["--private_layers", "2"]),)
    pinned = ("--private_layers", "0")

    def on(self, saved: dict) -> bool:
        return bool(saved_flag(saved, "private_layers", 0))


class PairHeads(Idea):
    """``--para_head``, ``--sts_head``, ``--pair_projection``, ``--sts_loss``: the pair heads' designs
    (docs/heads.md); the default is ``concat`` for QQP and ``cosine`` with MSE for STS, no projection."""
    name, shows = "pair_heads", (*PAIR_DEFAULTS, "sts_loss")   # para_head, sts_head, pair_projection
    variants = (("mean-para-cosine", ["--para_head", "cosine"]),
                ("mean-para-cosine-shared", ["--para_head", "cosine", "--pair_projection", "shared"]),
                ("mean-para-cosine-separate", ["--para_head", "cosine", "--pair_projection", "separate"]),
                ("mean-sum", ["--para_head", "sum", "--sts_head", "sum"]),
                ("mean-sts-concat", ["--sts_head", "concat"]),
                ("mean-sts-cosent", ["--sts_loss", "cosent"]),
                ("mean-sts-ce", ["--sts_loss", "ce"]))

    def on(self, saved: dict) -> bool:
        defaults = {**PAIR_DEFAULTS, "sts_loss": DEFAULT_STS_LOSS}
        return any(saved_flag(saved, name, default) != default for name, default in defaults.items())


CORE_IDEAS = (RoundRobin(), PrivateLayers(), PairHeads())
