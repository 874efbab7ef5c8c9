"""A run's model: built from a ``RunConfig`` for training, or loaded back from a finished run.

``build_model`` is the one place that turns a configuration into a ``MultitaskBert`` (the encoder
plus one head per task of ``--tasks``, each made by its ``Task`` row), so a loaded run has exactly
the modules the training run had. ``load_run`` is the one loader of a saved run that every tool
uses, and ``encode`` the one loop that turns sentences into pooled vectors.
"""
from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np
import torch
from safetensors import SafetensorError
from tqdm.auto import tqdm

from data.batching import make_loader
from data.readers import Example
from heads import MultitaskBert, pooled_size
from heads.pooling import TOKEN_REDUCTIONS, applied_reduction, layers_read, pool
from minbert import BertConfig, BertModel, BertTokenizer, WeightsError
from minbert.errors import first_line
from minbert.weights import resolve_model_dir

from .checkpoint import RUN_CONFIG, load_checkpoint, saved_run_config
from .config import ModelConfig, RunConfig
from .device import to_device
from .evaluate import TaskPredictions, predict
from .tasks import TASKS

PROGRESS_FROM = 2000  # sentences from which ``encode`` shows a progress bar unless told


def build_model(config: RunConfig, model_dir: Path) -> MultitaskBert:
    """Pretrained encoder + fresh heads; with ``--option pretrain`` the encoder is frozen.
    ``model_dir`` is an HF-format BERT directory or a saved run's ``checkpoint/`` (``model_directory``)."""
    overrides = {"hidden_dropout_prob": config.model.hidden_dropout_prob}
    if config.model.attention_probs_dropout_prob is not None:
        overrides["attention_probs_dropout_prob"] = config.model.attention_probs_dropout_prob
    if is_checkpoint(model_dir):  # runs chain: a saved run's encoder, with this run's dropout
        state, saved = load_checkpoint(model_dir)
        bert = BertModel(dataclasses.replace(saved_bert_config(model_dir, saved), **overrides))
        bert.load_state_dict({k.removeprefix("bert."): v for k, v in state.items() if k.startswith("bert.")})
    else:
        bert = BertModel.from_pretrained(model_dir, **overrides)
    check_pooling_depth(config.model.pooling, bert.config, model_dir / "config.json")
    model = with_heads(bert, config, config.task_names())
    if config.model.option == "pretrain":
        for p in model.bert.parameters():
            p.requires_grad_(False)
    return model


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
    """A saved run (or a pretrained encoder): its configuration, model (eval mode, CPU unless
    moved) and tokenizer. ``source`` is the folder it came from."""

    source: Path
    config: RunConfig
    model: MultitaskBert
    tokenizer: BertTokenizer

    def encode(self, sentences: Sequence[str], batch_size: int = 64, progress: bool | str | None = None, *,
               pooling: str | None = None, reduction: str = "mean", max_length: int | None = None) -> np.ndarray:
        """``encode`` with this run's encoder, pooling and ``--max_length`` unless others are given."""
        return encode(self.model.bert, self.tokenizer, sentences, pooling or self.model.pooling, reduction,
                      batch_size, max_length or self.config.data.max_length, progress)

    def predict(self, task: str, inputs: Sequence, batch_size: int | None = None) -> np.ndarray:
        """The task head's predictions (a class, or a 0..5 score) for sentences or ``(sentence1, sentence2)`` pairs."""
        self.check_head(task)
        width = len(TASKS[task].text_columns)
        examples = [Example(str(i), (item,) if isinstance(item, str) else tuple(item), None, 0)
                    for i, item in enumerate(inputs)]
        bad = next((e for e in examples if len(e.texts) != width), None)
        if bad is not None:
            raise ValueError(f"{task} wants {'sentences' if width == 1 else 'pairs of sentences'}; input "
                             f"{bad.id} is {bad.texts!r}")
        return self.predict_examples(task, examples, batch_size).predictions

    def predict_examples(self, task: str, examples: Sequence[Example], batch_size: int | None = None,
                         progress: bool = False) -> TaskPredictions:
        """``TaskPredictions`` of the task's head (ids, predictions and, where the examples have
        them, gold labels) in the order of ``examples``. Batches as the run evaluated dev (its
        ``--batch_size`` and ``--bucket`` unless ``batch_size`` is given), so a run's own dev files
        come out as it wrote them."""
        self.check_head(task)
        loader = make_loader(examples, self.tokenizer, model_max_length(self.config.data.max_length, self.model.bert),
                             batch_size or self.config.data.batch_size, shuffle=False, bucket=self.config.speed.bucket)
        return predict(self.model, TASKS[task], loader, next(self.model.parameters()).device, f"predict {task}",
                       progress)

    def check_head(self, task: str) -> None:
        """A one-line error unless the run trained a head for ``task``."""
        if task not in self.model.heads:
            raise ValueError(f"this run has no {task!r} head; it trained {', '.join(self.model.heads) or 'none'}")


def load_run(path: str | Path) -> LoadedRun:
    """The model a run saved in ``path/checkpoint/`` (or in ``path``, a checkpoint folder; either layout
    of ``training/checkpoint.py``): the encoder built from the saved BertConfig (the original model's
    weights are not read), the heads from the run's ``Task`` rows (none for an encoder alone), every
    weight loaded strictly. Anything unusable is a one-line ``WeightsError`` naming the file."""
    directory = checkpoint_dir(Path(path))
    config_file, weights = directory / "config.json", directory / "model.safetensors"
    try:
        state, saved = load_checkpoint(directory)
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise WeightsError(f"cannot read checkpoint file {config_file}: {first_line(err)}") from None
    except (SafetensorError, OSError) as err:
        raise WeightsError(f"cannot read checkpoint file {weights}: {first_line(err)} "
                           "(truncated or corrupt file?)") from None
    if not isinstance(saved, dict) or not isinstance(saved.get("bert"), dict) or not isinstance(saved.get("run"), dict):
        raise WeightsError(f"{directory}: no {RUN_CONFIG}, so not a run's checkpoint (training/checkpoint.py); "
                           "an HF-format BERT directory is a --model, not a run")
    try:
        config = RunConfig.from_dict(saved["run"])
        tasks = config.task_names() if any(k.startswith("heads.") for k in state) else []
        bert = BertModel(saved_bert_config(directory, saved))
    except (AttributeError, KeyError, TypeError, ValueError) as err:
        raise WeightsError(f"{config_file}: unusable configuration: {first_line(err)}") from None
    model = with_heads(bert, config, tasks)
    try:
        model.load_state_dict(state)
    except RuntimeError as err:
        raise WeightsError(f"{weights}: the weights do not fit the model of {config_file.name}: "
                           f"{' '.join(str(err).split())[:300]}") from None
    model.bert.set_attention(config.speed.attention)
    return LoadedRun(directory, config, model.eval(), tokenizer_for(directory, bert))


def pretrained_run(model: str | Path | None = None, pooling: str = "mean") -> LoadedRun:
    """A pretrained encoder (``--model``: an HF-format directory or a saved run, None = the embedded
    model) as a run without heads, so tools treat it and a trained run alike."""
    directory = model_directory(model)
    bert = load_run(directory).model.bert if is_checkpoint(directory) else BertModel.from_pretrained(directory)
    config = RunConfig.defaults(model=ModelConfig(model=str(directory), pooling=pooling))
    return LoadedRun(directory, config, with_heads(bert, config, []).eval(), tokenizer_for(directory, bert))


def model_directory(model: str | Path | None) -> Path:
    """``--model`` as a folder: a saved run (its folder or ``checkpoint/``), else an HF-format BERT
    directory (None: the embedded model)."""
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
    """The vocabulary of a model folder: its own ``vocab.txt``, else (a checkpoint written without
    one) that of the model its run started from."""
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
    for name in ("config.json", "model.safetensors"):
        if not (path / name).is_file():
            raise WeightsError(f"checkpoint file {path / name} not found (expected a run folder or its "
                               "checkpoint/ folder, as written by training/checkpoint.py)")
    return path


def with_heads(bert: BertModel, config: RunConfig, tasks: Sequence[str]) -> MultitaskBert:
    """``bert`` with a fresh head for each of ``tasks``, made by its ``Task`` row, on the run's pooling."""
    if config.model.pooling == "pooler" and bert.config.model_type == "distilbert":
        raise ValueError("--pooling pooler: a DistilBERT model has no pooler (no next-sentence head); "
                           "choose another --pooling, e.g. mean or cls")
    width = pooled_size(bert.config.hidden_size, config.model.pooling)
    return MultitaskBert(bert, {name: TASKS[name].head(width, config.model) for name in tasks},
                         config.model.pooling)


def model_max_length(max_length: int, bert: BertModel) -> int:
    """``max_length``, but no more than the model's positions: a tool given a longer one (or a run
    trained with it on another model) truncates sentences instead of failing on the first long one."""
    return min(max_length, bert.config.max_position_embeddings)


@torch.no_grad()
def encode(bert: BertModel, tokenizer: BertTokenizer, sentences: Sequence[str], pooling: str = "mean",
           reduction: str = "mean", batch_size: int = 64, max_length: int = 128,
           progress: bool | str | None = None) -> np.ndarray:
    """Pooled vectors, float32 ``(len(sentences), width)``, in the order of ``sentences``, from the
    encoder in eval mode (its mode restored after) on its own device, in length-bucketed batches (little
    padding). ``progress``: a tqdm bar, with this description if a string; None: one from
    ``PROGRESS_FROM`` sentences."""
    if reduction not in TOKEN_REDUCTIONS:
        raise ValueError(f"unknown reduction {reduction!r}; choose one of {list(TOKEN_REDUCTIONS)}")
    applied_reduction(pooling, reduction)  # an unknown mode fails here, even for an empty list
    if batch_size < 1:
        raise ValueError(f"batch_size must be at least 1, got {batch_size}")
    vectors = np.zeros((len(sentences), pooled_size(bert.config.hidden_size, pooling)), dtype=np.float32)
    if not sentences:
        return vectors
    examples = [Example(str(i), (text,), None, 0) for i, text in enumerate(sentences)]
    loader = make_loader(examples, tokenizer, model_max_length(max_length, bert), batch_size, shuffle=False,
                         bucket=True)
    show = len(sentences) >= PROGRESS_FROM if progress is None else bool(progress)
    device = next(bert.parameters()).device
    was_training = bert.training
    bert.eval()
    try:
        for batch in tqdm(loader, desc=progress if isinstance(progress, str) else "encode", leave=False,
                          dynamic_ncols=True, disable=not show):
            encoding = to_device(batch["inputs"][0], device)
            outputs = bert(encoding["input_ids"], encoding["attention_mask"], encoding["token_type_ids"])
            pooled = pool(outputs, encoding["attention_mask"], pooling, reduction)
            vectors[[int(i) for i in batch["ids"]]] = pooled.float().cpu().numpy()
    finally:
        bert.train(was_training)
    return vectors


def tokenizer_for(directory: Path, bert: BertModel | None = None) -> BertTokenizer:
    """The WordPiece tokenizer of a model folder: its vocabulary (``vocab_file``), lower-casing as the
    ``tokenizer_config.json`` beside it says (``do_lower_case``; uncased when there is none). With
    ``bert``, a vocabulary larger than its embedding is a one-line error."""
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
    return tokenizer
