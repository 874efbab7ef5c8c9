"""A run's model: built for training (``build_model``), or loaded back from a
finished run (``load_run``, which every tool uses) as a ``LoadedRun`` (training/harness/loaded_run.py). Both make
the heads with ``with_heads``, so a loaded run has exactly the modules the training run had.
"""
from __future__ import annotations

import dataclasses
import json
import warnings
from pathlib import Path

import torch

from heads import MultitaskBert, pooled_size
from heads.pooling import layers_read
from minbert import BertConfig, BertModel, BertTokenizer, WeightsError
from minbert.errors import first_line
from minbert.model import set_attention
from minbert.weights import resolve_model_dir

from .checkpoint import EXPORTED_TOWER, RUN_CONFIG, load_checkpoint, saved_run_config
from ..configuration.sections import ModelConfig
from ..learning.task_schema import run_tasks
from ..learning.tasks import Task
from .run_config import RunConfig
from .distributed import pick_device
from .loaded_run import LoadedRun
from .outputs import scored_evaluations
from .status import FINAL, RunStatus

# Embedding rows a model may have beyond its vocabulary (some round vocab_size up to a multiple of 64 or 128)
VOCAB_PADDING = 128


def build_model(model: ModelConfig, tasks: dict[str, Task], model_dir: Path) -> MultitaskBert:
    """Pretrained encoder + a fresh head for each of ``tasks`` (name -> its row); with ``--option pretrain`` the encoder
    is frozen. ``model_dir`` is an HF-format BERT directory or a saved run's ``checkpoint/`` (``model_directory``)."""
    overrides = {"hidden_dropout_prob": model.hidden_dropout_prob}
    if model.attention_probs_dropout_prob is not None:
        overrides["attention_probs_dropout_prob"] = model.attention_probs_dropout_prob
    if is_checkpoint(model_dir):  # runs chain: a saved run's encoder, with this run's dropout
        state, saved = load_checkpoint(model_dir)
        bert = BertModel(dataclasses.replace(saved_bert_config(model_dir, saved), **overrides))
        load_fitting(bert, {k.removeprefix("bert."): v for k, v in state.items() if k.startswith("bert.")},
                     model_dir / "model.safetensors", model_dir / "config.json")
    else:
        bert = BertModel.from_pretrained(model_dir, **overrides)
    check_depth(model, bert.config, model_dir / "config.json")
    built = with_heads(bert, model, tasks)
    if model.option == "pretrain":
        for _, p in built.encoder_parameters():
            p.requires_grad_(False)
    return built


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


def check_fits_model(config: RunConfig, bert: BertConfig | None = None, model_dir: Path | None = None) -> None:
    """What the model cannot take, refused in one line naming its config.json before anything trains: a
    ``--pooling`` that reads more layers than it has, more ``--private_layers`` than its layers (with one task
    too, which builds no tower: the model card would print the value), a length (``--max_length``, an
    extension's) beyond its positions, which would fail only at the first long sentence. Without ``bert``, the
    config.json of ``--model`` alone is read, no weights: the grid and the search check every run so before Ray."""
    model_dir = model_dir or model_directory(config.model.model)
    config_file = model_dir / "config.json"
    bert = bert or BertConfig.from_json(config_file)
    check_depth(config.model, bert, config_file)
    check_lengths(config.max_lengths(), bert, config_file)


def check_lengths(lengths: list[tuple[str, int | None]], bert: BertConfig, config_file: Path) -> None:
    """The lengths a run gives its sentences (``RunConfig.max_lengths``: (flag, word pieces)), against the model's
    positions."""
    for flag, length in lengths:
        if length is not None and length > bert.max_position_embeddings:
            raise ValueError(f"{flag} {length} is more than the model's {bert.max_position_embeddings} positions "
                             f"(max_position_embeddings in {config_file}); give at most {bert.max_position_embeddings}")


def check_depth(model: ModelConfig, bert: BertConfig, config_file: Path) -> None:
    """The layers a run reads (``--pooling``) or copies (``--private_layers``), against the model's: a pooling
    that reads more layers than the model has would quietly pool fewer (``heads.pooling.layers_read``)."""
    needed, depth = layers_read(model.pooling), bert.num_hidden_layers
    if depth < needed:
        raise ValueError(f"--pooling {model.pooling} reads the last {needed} layers, but {config_file} has "
                         f"{bert.json_key('num_hidden_layers')} {depth}; choose a shallower --pooling")
    if model.private_layers > depth:
        raise ValueError(f"--private_layers {model.private_layers} is more than the {depth} layers of {config_file}")


def load_run(path: str | Path, device: str | torch.device = "cpu") -> LoadedRun:
    """The model a run saved in ``path/checkpoint/`` (or ``path``, a checkpoint folder): the encoder built from the
    saved BertConfig (the original weights are not read), every weight loaded strictly. Anything unusable is a one-line
    ``WeightsError`` naming the file. An unfinished run (metrics.json) is loaded with a warning, or refused if it has
    saved no weights yet. ``device``: where the model lives, and so where ``encode`` and ``predict`` compute (``"cpu"``,
    ``"cuda"``, ``"cuda:1"``, a ``torch.device``, or ``"auto"``: CUDA when available)."""
    device = pick_device(str(device))
    directory = checkpoint_dir(Path(path))
    warn_if_unfinished(directory)
    config_file, weights = directory / "config.json", directory / "model.safetensors"
    state, saved = load_checkpoint(directory)   # each unreadable file: a WeightsError naming it
    if not isinstance(saved, dict) or not isinstance(saved.get("bert"), dict) or not isinstance(saved.get("run"), dict):
        raise WeightsError(f"{directory}: no {RUN_CONFIG}, so not a run's checkpoint (training/harness/checkpoint.py); "
                           "an HF-format BERT directory is a --model, not a run")
    run_file = directory / RUN_CONFIG if (directory / RUN_CONFIG).is_file() else config_file   # the older layout: one file
    try:
        config = RunConfig.from_dict(saved["run"])
        tasks = run_tasks(config) if any(k.startswith("heads.") for k in state) else {}
    except (AttributeError, KeyError, TypeError, ValueError) as err:
        raise WeightsError(f"{run_file}: unusable run configuration: {first_line(err)}") from None
    try:
        bert = BertModel(saved_bert_config(directory, saved))
    except (AttributeError, KeyError, TypeError, ValueError) as err:
        raise WeightsError(f"{config_file}: unusable configuration: {first_line(err)}") from None
    model = with_heads(bert, config.model, tasks)
    if tasks:   # a run of the stages alone saved its encoder only
        try:
            config.add_model_parts(model)   # the extensions' parts, as the run built them, before its weights load
        except (AttributeError, KeyError, TypeError, ValueError) as err:
            raise WeightsError(f"{run_file}: unusable run configuration: {first_line(err)}") from None
    load_fitting(model, state, weights, config_file)
    set_attention(model, config.speed.attention)
    return LoadedRun(directory, config, model.to(device).eval(), tokenizer_for(directory, bert))


def pretrained_run(model: str | Path | None = None, pooling: str = "mean") -> LoadedRun:
    """A pretrained encoder (``--model``: an HF-format directory or a saved run, None = the embedded
    model) as a run without heads, so tools treat it and a trained run alike."""
    directory = model_directory(model)
    bert = load_run(directory).model.bert if is_checkpoint(directory) else BertModel.from_pretrained(directory)
    config = RunConfig.defaults(model=ModelConfig(model=str(directory), pooling=pooling))
    return LoadedRun(directory, config, with_heads(bert, config.model, {}).eval(), tokenizer_for(directory, bert))


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
    """A folder written by ``training/harness/checkpoint.py`` (either layout)."""
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
    status = run_status(path)[0]
    if status not in (None, RunStatus.FINISHED) and not (path / "checkpoint").exists() and path.name != "checkpoint":
        raise WeightsError(f"{path}: the run is unfinished (status {status}) and has saved no weights yet "
                           f"(checkpoint/ is written at its first evaluation on dev)")
    for name in ("config.json", "model.safetensors"):
        if not (path / name).is_file():
            raise WeightsError(f"checkpoint file {path / name} not found (expected a run folder or its "
                               "checkpoint/ folder, as written by training/harness/checkpoint.py)")
    return path


def run_status(path: Path) -> tuple[str | None, dict]:
    """The status and metrics.json of the run that ``path`` (a run folder or its checkpoint/) belongs to."""
    folder = path.parent if path.name == "checkpoint" else path
    try:
        metrics = json.loads((folder / "metrics.json").read_text(encoding="utf-8"))
        status = metrics.get("status")
    except (OSError, ValueError, AttributeError):
        return None, {}
    return (status if isinstance(status, str) else None), metrics


def warn_if_unfinished(directory: Path) -> None:
    """A checkpoint/ of a run still training (or stopped) holds its best weights so far: say so, and from when."""
    status, metrics = run_status(directory)
    if status is None or status in FINAL or directory.name != "checkpoint":   # its weights are final
        return
    # the first evaluation with the best overall dev score, as the trainer keeps it (training/learning/stages.py)
    best = max(scored_evaluations(metrics), key=lambda e: e["dev_overall"], default=None)
    step = f" step {best['step']}" if best is not None and "step" in best else ""
    when = "" if best is None else f", from epoch {best.get('epoch')}{step}"
    warnings.warn(f"{directory.parent}: the run is unfinished (status {status}); {directory} holds its best weights "
                  f"so far{when}", stacklevel=3)


def with_heads(bert: BertModel, model: ModelConfig, tasks: dict[str, Task]) -> MultitaskBert:
    """``bert`` with a fresh head for each of ``tasks`` (name -> its ``Task`` row, which makes it), on ``--pooling``."""
    if model.pooling == "pooler" and bert.config.model_type == "distilbert":
        raise ValueError("--pooling pooler: a DistilBERT model has no pooler (no next-sentence head); "
                           "choose another --pooling, e.g. mean or cls")
    width = pooled_size(bert.config.hidden_size, model.pooling)
    return MultitaskBert(bert, {name: task.head(width, model) for name, task in tasks.items()},
                         model.pooling, model.private_layers if len(tasks) > 1 else 0,
                         home=EXPORTED_TOWER if EXPORTED_TOWER in tasks else None)


def tokenizer_for(directory: Path, bert: BertModel | None = None) -> BertTokenizer:
    """The tokenizer of a model folder (``vocab_file``; ``do_lower_case`` of its tokenizer_config.json,
    default uncased). With ``bert``, a vocabulary larger than its embedding, or ``VOCAB_PADDING`` or
    more tokens smaller, is a one-line error."""
    vocab = vocab_file(directory)
    if not vocab.is_file():
        raise WeightsError(f"vocabulary file not found: {vocab}")
    path = vocab.parent / "tokenizer_config.json"
    try:   # a damaged one is named: read as absent, a cased vocabulary would be lower-cased without a word
        settings = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    except (OSError, ValueError) as err:
        raise WeightsError(f"{path}: unreadable ({first_line(err)})") from None
    lowercase = settings.get("do_lower_case", True) if isinstance(settings, dict) else settings
    if not isinstance(lowercase, bool):
        raise WeightsError(f"{path}: do_lower_case must be true or false, got {lowercase!r}")
    tokenizer = BertTokenizer(vocab, lowercase=lowercase)
    if bert is not None and tokenizer.vocab_size > bert.config.vocab_size:
        raise WeightsError(f"{vocab} has {tokenizer.vocab_size} tokens but the model's embedding has "
                           f"{bert.config.vocab_size} rows")
    if bert is not None and bert.config.vocab_size - tokenizer.vocab_size >= VOCAB_PADDING:
        raise WeightsError(f"{vocab} has {tokenizer.vocab_size} tokens but the model's embedding has "
                           f"{bert.config.vocab_size} rows: not the vocabulary the model was trained with (a "
                           f"truncated file?), so most word pieces would become [UNK]; give its own vocab.txt")
    return tokenizer
