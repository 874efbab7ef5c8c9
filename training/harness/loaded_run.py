"""A run as a model: ``LoadedRun``, what ``load_run`` (training/harness/runs.py) gives back, with ``encode`` and
``predict`` taking their inputs as sentence-transformers' ``encode`` does (a str, a list, a pandas Series or
a numpy array), and ``similarity`` and ``search`` beside them (cosine similarity of encode's vectors). It sits
below the registry of extensions, so a stage may hold one.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np
import torch

from training.data.batching import make_loader
from training.data.readers import Example
from heads import MultitaskBert
from minbert import BertTokenizer

from ..configuration.sections import RunSettings
from ..learning.encoding import encode, model_max_length
from ..learning.task_schema import known_tasks
from ..learning.evaluate import TaskPredictions, predict
from ..learning.tasks import Task


@dataclass
class LoadedRun:
    """A saved run (or a pretrained encoder) from the folder ``source``: its configuration, model
    (eval mode, CPU unless moved) and tokenizer."""

    source: Path
    config: RunSettings
    model: MultitaskBert
    tokenizer: BertTokenizer

    def encode(self, sentences, batch_size: int = 64, progress: bool | str | None = None, *,
               pooling: str | None = None, reduction: str = "mean", max_length: int | None = None,
               normalize_embeddings: bool = False, convert_to_tensor: bool = False):
        """Sentence vectors with this run's encoder, pooling and ``--max_length`` unless others are given,
        as sentence-transformers' ``encode`` takes them: a str gives one vector (width,); a list, pandas
        Series or 1-D numpy array of str gives (n, width), float32 numpy unless ``convert_to_tensor``."""
        texts, single = sentence_list(sentences)
        bert = self.model.parts.encoder(self.model.bert, self.model.home)   # with the home task's parts, if any
        vectors = encode(bert, self.tokenizer, texts, pooling or self.model.pooling, reduction,
                         batch_size, max_length or self.config.data.max_length, progress)
        if normalize_embeddings:
            vectors = unit_rows(vectors)
        result = torch.from_numpy(vectors) if convert_to_tensor else vectors
        return result[0] if single else result

    def similarity(self, a, b, batch_size: int = 64):
        """Cosine similarity of the sentence vectors of ``a`` and ``b``, as sentence-transformers' ``util.cos_sim``
        gives it: a float32 ``(len(a), len(b))`` matrix for two sequences, ``(len(b),)`` for a str and a sequence,
        ``(len(a),)`` for a sequence and a str, a float for two str. Each of ``a``, ``b``: what ``encode`` takes,
        or vectors it gave (a float array or tensor; 1-D for one vector, 2-D for one a row)."""
        first, one_first = self.unit_vectors(a, "a", batch_size)
        second, one_second = self.unit_vectors(b, "b", batch_size)
        check_widths(("a", first), ("b", second))
        scores = first @ second.T
        if one_first and one_second:
            return float(scores[0, 0])
        return scores[0] if one_first else scores[:, 0] if one_second else scores

    def search(self, queries, corpus, top_k: int = 5, batch_size: int = 64):
        """Semantic search, as sentence-transformers' ``util.semantic_search`` returns it: for each query the
        ``top_k`` entries of ``corpus`` nearest by cosine similarity, a list of ``{"corpus_id": index, "score":
        float}``, highest score first (equal scores in corpus order), all of the corpus if it is shorter; a list of
        such lists for a sequence of queries, one list for a str. ``corpus``: sentences, or the ``(n, width)``
        vectors ``encode`` gave for them (encode a large corpus once, search it often)."""
        if isinstance(top_k, bool) or not isinstance(top_k, (int, np.integer)) or top_k < 1:
            raise ValueError(f"top_k must be a whole number of at least 1, got {top_k!r}")
        query_vectors, one_query = self.unit_vectors(queries, "queries", batch_size)
        corpus_vectors, one_entry = self.unit_vectors(corpus, "corpus", batch_size)
        if one_entry:
            raise ValueError("corpus: a sequence of sentences or an (n, width) array of their vectors, got one "
                             "sentence or vector")
        check_widths(("queries", query_vectors), ("corpus", corpus_vectors))
        hits = [[{"corpus_id": int(index), "score": float(scores[index])}
                 for index in np.argsort(-scores, kind="stable")[:top_k]]
                for scores in query_vectors @ corpus_vectors.T]
        return hits[0] if one_query else hits

    def unit_vectors(self, given, name: str, batch_size: int) -> tuple[np.ndarray, bool]:
        """``given`` (sentences ``encode`` takes, or vectors it gave) as float32 rows of unit length, and whether
        it was one sentence or one vector; ``name`` (the argument) says which input an error is about."""
        if is_vectors(given):
            vectors = given.detach().float().cpu().numpy() if isinstance(given, torch.Tensor) else given
            if vectors.ndim not in (1, 2):
                raise ValueError(f"{name}: vectors are 1-D (one) or 2-D (one a row), got shape {tuple(vectors.shape)}")
            one, vectors = vectors.ndim == 1, np.atleast_2d(vectors).astype(np.float32)
        else:
            texts, one = sentence_list(given)
            vectors = self.encode(texts, batch_size)   # (0, width) for no sentences
        if len(vectors) == 0:
            raise ValueError(f"{name}: empty, give at least one sentence (or its vector)")
        return unit_rows(vectors), one

    def predict(self, task: str, inputs, batch_size: int | None = None, *, output: str = "label"):
        """The task head on sentences or ``(sentence1, sentence2)`` pairs; one input gives one value, a
        sequence an array. ``output``: ``label`` (class id or 0..5 score), ``probabilities`` (softmax
        for SST, P(paraphrase) for QQP) or ``logits`` (docs/outputs.md, 'Using a run after training')."""
        self.check_head(task)
        row = known_tasks(self.config.data)[task]
        if output not in OUTPUTS:
            raise ValueError(f"output must be one of {', '.join(OUTPUTS)}, got {output!r}")
        if output == "probabilities" and row.divergence == "regression":
            low, high = row.score_range
            raise ValueError(f"{task} is a regression: its label is the {low:g}..{high:g} score; it has no "
                             "probabilities")
        items, single = pair_list(inputs) if row.is_pair else sentence_list(inputs)
        examples = [Example(str(i), item if row.is_pair else (item,), None, 0) for i, item in enumerate(items)]
        head = row if output == "label" else dataclasses.replace(row, predict=OUTPUTS[output][row.divergence])
        values = self.predict_examples(task, examples, batch_size, task_row=head).predictions
        if not examples:   # one row per input, none, float32 as the values of inputs are
            multiclass = output != "label" and row.divergence == "multiclass"
            values = np.zeros((0, row.num_classes) if multiclass else (0,), dtype=np.float32)
        if output == "label" and row.label_type == "class":
            values = values.astype(np.int64)
        if not single:
            return values
        return values[0].item() if values.ndim == 1 else values[0]

    def predict_examples(self, task: str, examples: Sequence[Example], batch_size: int | None = None,
                         progress: bool = False, task_row: Task | None = None) -> TaskPredictions:
        """``TaskPredictions`` of the task's head in the order of ``examples``, batched as the run evaluated
        dev (so a run's own dev files come out as it wrote them). ``task_row``: the row with another ``predict``."""
        self.check_head(task)
        batch_size = self.config.data.batch_size if batch_size is None else batch_size
        loader = make_loader(examples, self.tokenizer, model_max_length(self.config.data.max_length, self.model.bert),
                             batch_size, shuffle=False, bucket=self.config.speed.bucket)
        row = task_row or known_tasks(self.config.data)[task]
        return predict(self.model, row, loader, next(self.model.parameters()).device, f"predict {task}", progress)

    def check_head(self, task: str) -> None:
        """A one-line error unless the run trained a head for ``task``."""
        if task not in self.model.heads:
            raise ValueError(f"this run has no {task!r} head; it trained {', '.join(self.model.heads) or 'none'}")


# LoadedRun.predict's outputs: head output -> values, by the kind of head (``Task.divergence``); None: the task's own
OUTPUTS = {"label": None,
           "probabilities": {"multiclass": lambda logits: logits.softmax(dim=-1), "binary": torch.sigmoid},
           "logits": {kind: lambda output: output for kind in ("multiclass", "binary", "regression")}}


def unit_rows(vectors: np.ndarray) -> np.ndarray:
    """Each row divided by its length (a zero row stays zero): ``normalize_embeddings``, and cosine similarity
    as a dot product."""
    return vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)


def is_vectors(value) -> bool:
    """Vectors already encoded (a float numpy array or tensor), which ``similarity`` and ``search`` take as they are."""
    if isinstance(value, torch.Tensor):
        return value.is_floating_point()
    return isinstance(value, np.ndarray) and value.dtype.kind == "f"


def check_widths(first: tuple[str, np.ndarray], second: tuple[str, np.ndarray]) -> None:
    """One line unless two sets of vectors are alike wide, as vectors of one encoder and pooling are."""
    (first_name, first_vectors), (second_name, second_vectors) = first, second
    if first_vectors.shape[1] != second_vectors.shape[1]:
        raise ValueError(f"{first_name} and {second_name} are vectors of different widths ({first_vectors.shape[1]} "
                         f"and {second_vectors.shape[1]}): give sentences, or vectors of this run's encode")


def sentence_list(sentences) -> tuple[list[str], bool]:
    """``sentences`` (what sentence-transformers takes) as a list of str, and whether one str was given."""
    if isinstance(sentences, str):
        return [sentences], True
    if is_array(sentences):
        if sentences.ndim != 1:
            raise ValueError(f"sentences: a 1-D array of strings, got {type(sentences).__name__} of shape "
                             f"{tuple(sentences.shape)}")
        sentences = sentences.tolist()
    if not isinstance(sentences, (list, tuple)):
        raise TypeError(f"sentences: a str, a list of str, a pandas Series or a numpy array, got "
                        f"{type(sentences).__name__}")
    bad = next((i for i, text in enumerate(sentences) if not isinstance(text, str)), None)
    if bad is not None:
        raise TypeError(f"sentences: item {bad} is {describe(sentences[bad])}, not a str")
    return list(sentences), False


def describe(value) -> str:
    """What a non-str input is, for an error: "a missing value (NaN)" for the blanks of a pandas column."""
    missing = (value is None or (isinstance(value, float) and value != value)
               or type(value).__name__ in ("NAType", "NaTType"))
    return f"a missing value ({value})" if missing else f"a {type(value).__name__}"


def is_array(value) -> bool:
    """A numpy array or a pandas object (Series, Index, array, DataFrame), which has a shape."""
    return isinstance(value, np.ndarray) or (type(value).__module__.split(".")[0] == "pandas"
                                             and hasattr(value, "ndim"))


def pair_list(pairs) -> tuple[list[tuple[str, str]], bool]:
    """``pairs`` as a list of (str, str), and whether one pair was given."""
    if isinstance(pairs, (list, tuple)) and len(pairs) == 2 and all(isinstance(p, str) for p in pairs):
        return [tuple(pairs)], True
    if is_array(pairs):   # an (n, 2) array or DataFrame, a Series of pairs
        pairs = (pairs.to_numpy() if hasattr(pairs, "to_numpy") else np.asarray(pairs)).tolist()
    if isinstance(pairs, str) or not isinstance(pairs, (list, tuple)):
        raise TypeError(f"pairs: a (sentence1, sentence2) pair or a sequence of them, got {type(pairs).__name__}")
    bad = next((i for i, pair in enumerate(pairs) if not (isinstance(pair, (list, tuple)) and len(pair) == 2
                                                         and all(isinstance(p, str) for p in pair))), None)
    if bad is not None:
        raise ValueError(f"a pair task wants pairs of sentences: item {bad} is not a pair of two str: "
                         f"{str(pairs[bad])[:80]!r}")
    return [tuple(pair) for pair in pairs], False
