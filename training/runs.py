"""A run's model: built from a ``RunConfig`` for training (``build_model``), or loaded back from a
finished run (``load_run``, which every tool uses). Both make the heads with ``with_heads``, so a
loaded run has exactly the modules the training run had; ``encode`` turns sentences into pooled vectors.
"""
from __future__ import annotations

import dataclasses
import json
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np
import torch

from training.data.batching import make_loader
from training.data.readers import Example
from heads import MultitaskBert, pooled_size
from heads.pooling import layers_read
from minbert import BertConfig, BertModel, BertTokenizer, WeightsError
from minbert.errors import first_line
from minbert.model import set_attention
from minbert.weights import resolve_model_dir

from .checkpoint import EXPORTED_TOWER, RUN_CONFIG, load_checkpoint, saved_run_config
from .config import ModelConfig
from .run_config import RunConfig
from .device import pick_device
from .encoding import encode, model_max_length
from .evaluate import TaskPredictions, predict
from .outputs import scored_evaluations
from .tasks import Task
from .trial_control import STOPPED_EARLY

# Embedding rows a model may have beyond its vocabulary (some round vocab_size up to a multiple of 64 or 128)
VOCAB_PADDING = 128


def build_model(config: RunConfig, model_dir: Path) -> MultitaskBert:
    """Pretrained encoder + fresh heads; with ``--option pretrain`` the encoder is frozen.
    ``model_dir`` is an HF-format BERT directory or a saved run's ``checkpoint/`` (``model_directory``)."""
    overrides = {"hidden_dropout_prob": config.model.hidden_dropout_prob}
    if config.model.attention_probs_dropout_prob is not None:
        overrides["attention_probs_dropout_prob"] = config.model.attention_probs_dropout_prob
    if is_checkpoint(model_dir):  # runs chain: a saved run's encoder, with this run's dropout
        state, saved = load_checkpoint(model_dir)
        bert = BertModel(dataclasses.replace(saved_bert_config(model_dir, saved), **overrides))
        load_fitting(bert, {k.removeprefix("bert."): v for k, v in state.items() if k.startswith("bert.")},
                     model_dir / "model.safetensors", model_dir / "config.json")
    else:
        bert = BertModel.from_pretrained(model_dir, **overrides)
    check_pooling_depth(config.model.pooling, bert.config, model_dir / "config.json")
    # refused with one task too, which builds no tower: the model card would print the value in its command
    if config.model.private_layers > bert.config.num_hidden_layers:
        raise ValueError(f"--private_layers {config.model.private_layers} is more than the "
                         f"{bert.config.num_hidden_layers} layers of {model_dir / 'config.json'}")
    model = with_heads(bert, config, config.task_names())
    if config.model.option == "pretrain":
        for _, p in model.encoder_parameters():
            p.requires_grad_(False)
    return model


def load_fitting(model: torch.nn.Module, state: dict, weights: Path, config_file: Path) -> None:
    """``model.load_state_dict(state)``; weights of another shape or names are one line naming both files."""
    try:
        model.load_state_dict(state)
    except RuntimeError as err:
        raise WeightsError(f"{weights}: the weights do not fit the model of {config_file}: "
                           f"{' '.join(str(err).split())[:300]}") from None


def saved_bert_config(directory: Path, saved: dict) -> BertConfig:
    """The encoder's ``BertConfig`` of a saved run (``load_checkpoint``), an error naming its file."""
    try:
        return BertConfig.from_hf(saved["bert"])
    except (TypeError, ValueError) as err:
        raise ValueError(f"{directory / 'config.json'}: {err}") from None


def check_pooling_depth(pooling: str, bert_config: BertConfig, config_file: Path) -> None:
    """A ``--pooling`` mode that reads more layers than the model has would quietly pool fewer
    (``heads.pooling.layers_read``): refuse it, naming the model's ``config.json``."""
    needed, depth = layers_read(pooling), bert_config.num_hidden_layers
    if depth < needed:
        raise ValueError(f"--pooling {pooling} reads the last {needed} layers, but {config_file} has "
                         f"{bert_config.json_key('num_hidden_layers')} {depth}; choose a shallower --pooling")


@dataclass
class LoadedRun:
    """A saved run (or a pretrained encoder) from the folder ``source``: its configuration, model
    (eval mode, CPU unless moved) and tokenizer."""

    source: Path
    config: RunConfig
    model: MultitaskBert
    tokenizer: BertTokenizer

    def encode(self, sentences, batch_size: int = 64, progress: bool | str | None = None, *,
               pooling: str | None = None, reduction: str = "mean", max_length: int | None = None,
               normalize_embeddings: bool = False, convert_to_tensor: bool = False):
        """Sentence vectors with this run's encoder, pooling and ``--max_length`` unless others are given,
        as sentence-transformers' ``encode`` takes them: a str gives one vector (width,); a list, pandas
        Series or 1-D numpy array of str gives (n, width), float32 numpy unless ``convert_to_tensor``."""
        texts, single = sentence_list(sentences)
        vectors = encode(self.model.bert, self.tokenizer, texts, pooling or self.model.pooling, reduction,
                         batch_size, max_length or self.config.data.max_length, progress)
        if normalize_embeddings:
            vectors /= np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
        result = torch.from_numpy(vectors) if convert_to_tensor else vectors
        return result[0] if single else result

    def predict(self, task: str, inputs, batch_size: int | None = None, *, output: str = "label"):
        """The task head on sentences or ``(sentence1, sentence2)`` pairs; one input gives one value, a
        sequence an array. ``output``: ``label`` (class id or 0..5 score), ``probabilities`` (softmax
        for SST, P(paraphrase) for QQP) or ``logits`` (docs/outputs.md, 'Using a run after training')."""
        self.check_head(task)
        row = self.config.known_tasks()[task]
        if output not in OUTPUTS:
            raise ValueError(f"output must be one of {', '.join(OUTPUTS)}, got {output!r}")
        if output == "probabilities" and row.divergence == "regression":
            raise ValueError(f"{task} is a regression: its label is the 0..5 score; it has no probabilities")
        items, single = pair_list(inputs) if row.is_pair else sentence_list(inputs)
        examples = [Example(str(i), item if row.is_pair else (item,), None, 0) for i, item in enumerate(items)]
        head = row if output == "label" else dataclasses.replace(row, predict=OUTPUTS[output][row.divergence])
        values = self.predict_examples(task, examples, batch_size, task_row=head).predictions
        if not examples and output != "label" and row.divergence == "multiclass":
            values = np.zeros((0, row.num_classes), dtype=np.float32)   # one row per input, none
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
        loader = make_loader(examples, self.tokenizer, model_max_length(self.config.data.max_length, self.model.bert),
                             batch_size or self.config.data.batch_size, shuffle=False, bucket=self.config.speed.bucket)
        row = task_row or self.config.known_tasks()[task]
        return predict(self.model, row, loader, next(self.model.parameters()).device,
                       f"predict {task}", progress)

    def check_head(self, task: str) -> None:
        """A one-line error unless the run trained a head for ``task``."""
        if task not in self.model.heads:
            raise ValueError(f"this run has no {task!r} head; it trained {', '.join(self.model.heads) or 'none'}")


# LoadedRun.predict's outputs: head output -> values, by the kind of head (``Task.divergence``); None: the task's own
OUTPUTS = {"label": None,
           "probabilities": {"multiclass": lambda logits: logits.softmax(dim=-1), "binary": torch.sigmoid},
           "logits": {kind: lambda output: output for kind in ("multiclass", "binary", "regression")}}


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


def load_run(path: str | Path, device: str | torch.device = "cpu") -> LoadedRun:
    """The model a run saved in ``path/checkpoint/`` (or ``path``, a checkpoint folder): the encoder
    built from the saved BertConfig (the original weights are not read), every weight loaded strictly.
    Anything unusable is a one-line ``WeightsError`` naming the file. An unfinished run (metrics.json)
    is loaded with a warning, or refused if it has saved no weights yet. ``device``: where the model
    lives, and so where ``encode`` and ``predict`` compute (``"cpu"``, ``"cuda"``, ``"cuda:1"``, a
    ``torch.device``, or ``"auto"``: CUDA when available)."""
    device = pick_device(str(device))
    directory = checkpoint_dir(Path(path))
    warn_if_unfinished(directory)
    config_file, weights = directory / "config.json", directory / "model.safetensors"
    state, saved = load_checkpoint(directory)   # each unreadable file: a WeightsError naming it
    if not isinstance(saved, dict) or not isinstance(saved.get("bert"), dict) or not isinstance(saved.get("run"), dict):
        raise WeightsError(f"{directory}: no {RUN_CONFIG}, so not a run's checkpoint (training/checkpoint.py); "
                           "an HF-format BERT directory is a --model, not a run")
    run_file = directory / RUN_CONFIG if (directory / RUN_CONFIG).is_file() else config_file   # the older layout: one file
    try:
        config = RunConfig.from_dict(saved["run"])
        tasks = config.task_names() if any(k.startswith("heads.") for k in state) else []
    except (AttributeError, KeyError, TypeError, ValueError) as err:
        raise WeightsError(f"{run_file}: unusable run configuration: {first_line(err)}") from None
    try:
        bert = BertModel(saved_bert_config(directory, saved))
    except (AttributeError, KeyError, TypeError, ValueError) as err:
        raise WeightsError(f"{config_file}: unusable configuration: {first_line(err)}") from None
    model = with_heads(bert, config, tasks)
    load_fitting(model, state, weights, config_file)
    set_attention(model, config.speed.attention)
    return LoadedRun(directory, config, model.to(device).eval(), tokenizer_for(directory, bert))


def pretrained_run(model: str | Path | None = None, pooling: str = "mean") -> LoadedRun:
    """A pretrained encoder (``--model``: an HF-format directory or a saved run, None = the embedded
    model) as a run without heads, so tools treat it and a trained run alike."""
    directory = model_directory(model)
    bert = load_run(directory).model.bert if is_checkpoint(directory) else BertModel.from_pretrained(directory)
    config = RunConfig.defaults(model=ModelConfig(model=str(directory), pooling=pooling))
    return LoadedRun(directory, config, with_heads(bert, config, []).eval(), tokenizer_for(directory, bert))


def model_directory(model: str | Path | None) -> Path:
    """``--model`` as a folder: a saved run's ``checkpoint/``, else an HF-format BERT directory
    (None: the embedded model)."""
    if model is not None:
        path = Path(model)
        for candidate in (path, path / "checkpoint"):
            if is_checkpoint(candidate):
                return candidate
    return resolve_model_dir(model)


def is_checkpoint(path: Path) -> bool:
    """A folder written by ``training/checkpoint.py`` (either layout)."""
    return saved_run_config(path) is not None


def vocab_file(directory: Path) -> Path:
    """A model folder's ``vocab.txt``, else (a checkpoint without one) that of the model its run started from."""
    vocab, run_config = directory / "vocab.txt", saved_run_config(directory)
    if vocab.is_file() or run_config is None:
        return vocab
    try:
        return vocab_file(model_directory(RunConfig.from_dict(run_config).model.model))
    except WeightsError as err:
        raise WeightsError(f"{directory}: no vocab.txt, and the run's model has none: {err}") from None


def checkpoint_dir(path: Path) -> Path:
    """``path`` if it is a checkpoint folder, its ``checkpoint/`` if it is a run folder; both files must exist."""
    if not path.is_dir():
        raise WeightsError(f"run or checkpoint folder not found: {path}" if not path.exists() else
                           f"{path} is a file: expected a run folder or its checkpoint/ folder")
    if not (path / "config.json").is_file() and (path / "checkpoint").is_dir():
        path = path / "checkpoint"
    status = run_status(path)
    if status not in (None, "finished") and not (path / "checkpoint").exists() and path.name != "checkpoint":
        raise WeightsError(f"{path}: the run is unfinished (status {status}) and has saved no weights yet "
                           f"(checkpoint/ is written at its first evaluation on dev)")
    for name in ("config.json", "model.safetensors"):
        if not (path / name).is_file():
            raise WeightsError(f"checkpoint file {path / name} not found (expected a run folder or its "
                               "checkpoint/ folder, as written by training/checkpoint.py)")
    return path


def run_status(path: Path) -> str | None:
    """The status in the metrics.json of the run that ``path`` (a run folder or its checkpoint/) belongs to."""
    folder = path.parent if path.name == "checkpoint" else path
    try:
        status = json.loads((folder / "metrics.json").read_text(encoding="utf-8")).get("status")
    except (OSError, ValueError, AttributeError):
        return None
    return status if isinstance(status, str) else None


def warn_if_unfinished(directory: Path) -> None:
    """A checkpoint/ of a run still training (or stopped) holds its best weights so far: say so, and from when."""
    status = run_status(directory)
    if status in (None, "finished", STOPPED_EARLY) or directory.name != "checkpoint":   # its weights are final
        return
    when = ""
    try:  # the first evaluation with the best overall dev score, as the trainer keeps it (training/stages.py)
        metrics = json.loads((directory.parent / "metrics.json").read_text(encoding="utf-8"))
        best = max(scored_evaluations(metrics), key=lambda e: e["dev_overall"], default=None)
        if best is not None:
            when = f", from epoch {best.get('epoch')}" + (f" step {best['step']}" if "step" in best else "")
    except (OSError, ValueError, AttributeError):
        pass
    warnings.warn(f"{directory.parent}: the run is unfinished (status {status}); {directory} holds its best weights "
                  f"so far{when}", stacklevel=3)


def with_heads(bert: BertModel, config: RunConfig, tasks: Sequence[str]) -> MultitaskBert:
    """``bert`` with a fresh head for each of ``tasks``, made by its ``Task`` row, on the run's pooling."""
    if config.model.pooling == "pooler" and bert.config.model_type == "distilbert":
        raise ValueError("--pooling pooler: a DistilBERT model has no pooler (no next-sentence head); "
                           "choose another --pooling, e.g. mean or cls")
    width = pooled_size(bert.config.hidden_size, config.model.pooling)
    known = config.known_tasks()
    return MultitaskBert(bert, {name: known[name].head(width, config.model) for name in tasks},
                         config.model.pooling, config.model.private_layers if len(tasks) > 1 else 0,
                         home=EXPORTED_TOWER if EXPORTED_TOWER in tasks else None)


def tokenizer_for(directory: Path, bert: BertModel | None = None) -> BertTokenizer:
    """The tokenizer of a model folder (``vocab_file``; ``do_lower_case`` of its tokenizer_config.json,
    default uncased). With ``bert``, a vocabulary larger than its embedding, or ``VOCAB_PADDING`` or
    more tokens smaller, is a one-line error."""
    vocab = vocab_file(directory)
    if not vocab.is_file():
        raise WeightsError(f"vocabulary file not found: {vocab}")
    try:
        settings = json.loads((vocab.parent / "tokenizer_config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        settings = {}
    tokenizer = BertTokenizer(vocab, lowercase=bool(settings.get("do_lower_case", True)))
    if bert is not None and tokenizer.vocab_size > bert.config.vocab_size:
        raise WeightsError(f"{vocab} has {tokenizer.vocab_size} tokens but the model's embedding has "
                           f"{bert.config.vocab_size} rows")
    if bert is not None and bert.config.vocab_size - tokenizer.vocab_size >= VOCAB_PADDING:
        raise WeightsError(f"{vocab} has {tokenizer.vocab_size} tokens but the model's embedding has "
                           f"{bert.config.vocab_size} rows: not the vocabulary the model was trained with (a "
                           f"truncated file?), so most word pieces would become [UNK]; give its own vocab.txt")
    return tokenizer
