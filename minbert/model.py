"""A BERT encoder written out (Devlin et al. 2019; Vaswani et al. 2017 for the Transformer layer).

Read top to bottom: ``BertModel`` (embeddings -> stack of ``BertLayer`` -> pooler), then the blocks.
Parameter names follow HuggingFace's closely; ``minbert.weights`` maps the few that differ. The faster
paths (``set_attention``, ``set_dropout``) are checked against the written-out ones in
``tests/test_speed_paths.py`` (docs/performance.md).
"""
from __future__ import annotations

import math
from functools import partial
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from .config import BertConfig


class BertModel(nn.Module):
    """Embeddings, ``num_hidden_layers`` Transformer encoder layers and the [CLS] pooler.

    ``forward`` returns a dict:
      - ``last_hidden_state``: (B, T, H) output of the last layer,
      - ``pooler_output``: (B, H) tanh(W h_[CLS] + b) (BERT §3, the NSP pooler),
      - ``hidden_states``: tuple of ``num_hidden_layers + 1`` tensors (B, T, H), the embeddings
        output first — pooling strategies such as first-last average need them.
    """

    def __init__(self, config: BertConfig):
        super().__init__()
        self.config = config
        self.embeddings = BertEmbeddings(config)
        self.encoder = BertEncoder(config)
        self.pooler = BertPooler(config)
        self.apply(self._init_weights)

    def set_attention(self, impl: str) -> "BertModel":
        """Use attention implementation ``impl`` ("manual", "sdpa" or "auto") in every layer; returns self."""
        return set_attention(self, impl)

    def set_dropout(self, masks: str) -> "BertModel":
        """Draw every dropout mask the ``masks`` way ("bernoulli" or "uniform", see ``Dropout``); returns self."""
        return set_dropout(self, masks)

    def set_sparse_word_embeddings(self, sparse: bool = True) -> "BertModel":
        """Make the word-embedding gradient a sparse tensor holding only the rows of the batch's word
        pieces (``nn.Embedding(sparse=True)``) instead of a dense vocab_size × H matrix that is almost
        all zeros; ``minbert.AdamW`` then updates those rows only (lazy Adam). Returns self."""
        self.embeddings.word_embeddings.sparse = sparse
        return self

    def _init_weights(self, module: nn.Module) -> None:
        """BERT's initialisation: N(0, 0.02) weights, zero biases, unit LayerNorm."""
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)
        if isinstance(module, nn.LayerNorm):
            nn.init.ones_(module.weight)
            nn.init.zeros_(module.bias)

    @classmethod
    def from_pretrained(cls, path_or_name: str | Path, **config_overrides) -> "BertModel":
        """A local HF-format BERT directory (or the embedded model); ``config_overrides`` replace
        config fields, e.g. ``hidden_dropout_prob=0.3``. The model comes in training mode (dropout on), as any
        ``nn.Module``, unlike HF's ``from_pretrained``: call ``.eval()`` before encoding."""
        from .weights import load_pretrained
        return load_pretrained(cls, path_or_name, **config_overrides)

    def save_pretrained(self, directory: str | Path) -> None:
        """Write ``config.json`` and ``model.safetensors`` with HuggingFace parameter names."""
        from .weights import save_pretrained
        save_pretrained(self, directory)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                token_type_ids: torch.Tensor | None = None, embeddings_hook=None, top_layers=None,
                layer_hook=None) -> dict:
        """``embeddings_hook``, if given, maps the embeddings output to a new tensor before the
        encoder (used by adversarial training to add a perturbation there). ``top_layers``, if given,
        replace as many of the encoder's top layers (a task's private tower, ``heads.MultitaskBert``).
        ``layer_hook``, if given, maps each layer's output to what the next layer reads:
        ``layer_hook(index, hidden)``, index 0 for the bottom layer (a model part, e.g. an adapter)."""
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        if self.config.model_type == "distilbert":  # no token types: a pair's are ignored, as by HF's DistilBertModel
            token_type_ids = None
        hidden = self.embeddings(input_ids, token_type_ids)
        if embeddings_hook is not None:
            hidden = embeddings_hook(hidden)
        hidden_states = self.encoder(hidden, attention_mask, top_layers, layer_hook)
        last = hidden_states[-1]
        return {"last_hidden_state": last, "pooler_output": self.pooler(last), "hidden_states": hidden_states}


class BertEmbeddings(nn.Module):
    """Sum of word-piece, absolute position and segment (token type) embeddings, then LayerNorm
    and dropout (BERT §3.2, Figure 2)."""

    def __init__(self, config: BertConfig):
        super().__init__()
        self.word_embeddings = nn.Embedding(config.vocab_size, config.hidden_size, padding_idx=config.pad_token_id)
        self.position_embeddings = nn.Embedding(config.max_position_embeddings, config.hidden_size)
        self.token_type_embeddings = nn.Embedding(config.type_vocab_size, config.hidden_size)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = Dropout(config.hidden_dropout_prob)

    def forward(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor | None = None) -> torch.Tensor:
        seq_len = input_ids.shape[1]
        if seq_len > self.position_embeddings.num_embeddings:
            raise ValueError(f"sequence of {seq_len} tokens is longer than the model's "
                             f"{self.position_embeddings.num_embeddings} positions")
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)
        positions = torch.arange(seq_len, device=input_ids.device)
        x = (self.word_embeddings(input_ids)
             + self.position_embeddings(positions)[None]
             + self.token_type_embeddings(token_type_ids))
        return self.dropout(self.LayerNorm(x))


class BertEncoder(nn.Module):
    """A stack of identical layers; returns the input and every layer's output (after ``layer_hook``, if given)."""

    def __init__(self, config: BertConfig):
        super().__init__()
        self.layer = nn.ModuleList(BertLayer(config) for _ in range(config.num_hidden_layers))

    def forward(self, hidden: torch.Tensor, attention_mask: torch.Tensor,
                top_layers: nn.ModuleList | None = None, layer_hook=None) -> tuple[torch.Tensor, ...]:
        # Additive mask (B, 1, 1, T): 0 at real keys, a huge negative at padding (zero softmax weight).
        additive_mask = (1.0 - attention_mask[:, None, None, :].to(hidden.dtype)) * torch.finfo(hidden.dtype).min
        layers = self.layer if not top_layers else [*self.layer[:len(self.layer) - len(top_layers)], *top_layers]
        hidden_states = [hidden]
        for index, layer in enumerate(layers):
            hidden = layer(hidden, additive_mask)
            if layer_hook is not None:
                hidden = layer_hook(index, hidden)
            hidden_states.append(hidden)
        return tuple(hidden_states)


class BertLayer(nn.Module):
    """One Transformer encoder layer (Vaswani et al. 2017 §3.1, post-LayerNorm as in BERT):

        h = LayerNorm(x + Dropout(W_o · MultiHeadSelfAttention(x)))
        y = LayerNorm(h + Dropout(W_2 · GELU(W_1 h)))
    """

    def __init__(self, config: BertConfig):
        super().__init__()
        self.attention = MultiHeadSelfAttention(config)
        self.attention_output = nn.Linear(config.hidden_size, config.hidden_size)
        self.attention_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.intermediate = nn.Linear(config.hidden_size, config.intermediate_size)
        self.output = nn.Linear(config.intermediate_size, config.hidden_size)
        self.output_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = Dropout(config.hidden_dropout_prob)
        self.activation = ACTIVATIONS[config.hidden_act]

    def forward(self, x: torch.Tensor, additive_mask: torch.Tensor) -> torch.Tensor:
        attended = self.attention_output(self.attention(x, additive_mask))
        h = self.attention_norm(x + self.dropout(attended))
        feed_forward = self.output(self.activation(self.intermediate(h)))
        return self.output_norm(h + self.dropout(feed_forward))


class MultiHeadSelfAttention(nn.Module):
    """Scaled dot-product attention over ``num_attention_heads`` heads (Vaswani et al. §3.2):

        Attention(Q, K, V) = softmax(Q Kᵀ / √d_k + mask) V,   d_k = hidden_size / heads,

    for every head in parallel, the heads' outputs concatenated back to ``hidden_size``. ``impl``:
    "manual" (written out below, the reference), "sdpa" (PyTorch's fused ``scaled_dot_product_attention``,
    same mask and dropout) or "auto": sdpa except on the CPU with attention dropout active, where the fused
    kernel falls back to an unfused path ~5% slower than ours (B=32, L=48, MiniLM, 2 threads).
    """

    def __init__(self, config: BertConfig, impl: str = "auto"):
        super().__init__()
        if impl not in ATTENTION_IMPLS:
            raise ValueError(f"unknown attention implementation {impl!r} (one of {', '.join(ATTENTION_IMPLS)})")
        self.impl = impl
        self.num_heads = config.num_attention_heads
        self.head_dim = config.hidden_size // config.num_attention_heads
        self.query = nn.Linear(config.hidden_size, config.hidden_size)
        self.key = nn.Linear(config.hidden_size, config.hidden_size)
        self.value = nn.Linear(config.hidden_size, config.hidden_size)
        self.dropout = Dropout(config.attention_probs_dropout_prob)

    def forward(self, x: torch.Tensor, additive_mask: torch.Tensor) -> torch.Tensor:
        q, k, v = (self._split_heads(proj(x)) for proj in (self.query, self.key, self.value))
        dropout_p = self.dropout.p if self.training else 0.0
        if self.impl == "sdpa" or (self.impl == "auto" and (dropout_p == 0.0 or x.device.type != "cpu")):
            return self._merge_heads(F.scaled_dot_product_attention(q, k, v, attn_mask=additive_mask,
                                                                    dropout_p=dropout_p))
        scores = q @ k.transpose(-1, -2) / math.sqrt(self.head_dim)   # (B, heads, T, T)
        weights = self.dropout(torch.softmax(scores + additive_mask, dim=-1))
        return self._merge_heads(weights @ v)

    def _split_heads(self, x: torch.Tensor) -> torch.Tensor:
        """(B, T, H) -> (B, heads, T, head_dim)"""
        batch, seq_len, _ = x.shape
        return x.view(batch, seq_len, self.num_heads, self.head_dim).transpose(1, 2)

    def _merge_heads(self, x: torch.Tensor) -> torch.Tensor:
        """(B, heads, T, head_dim) -> (B, T, H)"""
        batch, _, seq_len, _ = x.shape
        return x.transpose(1, 2).reshape(batch, seq_len, self.num_heads * self.head_dim)


class Dropout(nn.Dropout):
    """Dropout (Srivastava et al. 2014): in training, zero each element with probability p and scale the
    survivors by 1/(1-p). ``masks``: "bernoulli" is ``F.dropout`` (the reference); "uniform" (default) keeps
    where u ≥ p, u ~ U[0, 1) from one ``torch.rand``: the same distribution from another random stream, cheaper
    on the CPU (forward + backward on a (32, 12, 48, 48) attention tensor: 4.3 instead of 8.1 ms, 2 threads).
    """

    masks = "uniform"

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.masks == "bernoulli" or not self.training or self.p == 0.0:
            return super().forward(x)
        keep = torch.rand(x.shape, device=x.device).ge_(self.p).mul_(1.0 / (1.0 - self.p))
        return x * keep.to(x.dtype)


class BertPooler(nn.Module):
    """tanh(W h_[CLS] + b): the sentence vector BERT was pre-trained to use for NSP."""

    def __init__(self, config: BertConfig):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)

    def forward(self, last_hidden_state: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.dense(last_hidden_state[:, 0]))


def set_attention(model: nn.Module, impl: str) -> nn.Module:
    """``impl`` in every attention layer of ``model`` (a ``BertModel``, or a model holding one and more
    layers, such as a multi-task model with private towers); returns ``model``."""
    return _set_in_every(model, MultiHeadSelfAttention, "impl", impl, ATTENTION_IMPLS, "attention implementation")


def set_dropout(model: nn.Module, masks: str) -> nn.Module:
    """Every dropout mask of ``model`` drawn the ``masks`` way; returns ``model``."""
    return _set_in_every(model, Dropout, "masks", masks, DROPOUT_MASKS, "dropout masks")


def _set_in_every(model: nn.Module, kind: type, attribute: str, value: str, choices: tuple, what: str) -> nn.Module:
    """Set ``attribute`` to ``value`` (one of ``choices``) on every submodule of type ``kind``."""
    if value not in choices:
        raise ValueError(f"unknown {what} {value!r} (one of {', '.join(choices)})")
    for module in model.modules():
        if isinstance(module, kind):
            setattr(module, attribute, value)
    return model


ATTENTION_IMPLS = ("manual", "sdpa", "auto")
DROPOUT_MASKS = ("bernoulli", "uniform")
# "gelu" is the exact erf form used by BERT's released checkpoints (Hendrycks & Gimpel 2016).
ACTIVATIONS = {"gelu": F.gelu, "gelu_new": partial(F.gelu, approximate="tanh"), "relu": F.relu}
