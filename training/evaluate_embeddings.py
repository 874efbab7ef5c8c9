"""Sentence-embedding evaluation on STS: Spearman and Pearson of cosine similarity against gold scores.

    python -m training.evaluate_embeddings --data ../shared/data/multitask/sts-dev.csv --pooling mean
    python -m training.evaluate_embeddings --checkpoint predictions/<run>/checkpoint --pooling first_last \\
        --data SentEval/data/downstream/STS SentEval/data/downstream/SICK --out sts.json

The encoder alone embeds each sentence of a pair (no task head; ``heads.pooling`` gives the vector),
and the cosine of the two vectors is the predicted similarity. Unsupervised, as in SentEval's STS
tasks and SimCSE's evaluation (Gao et al. 2021, §B "Different evaluation settings").

Inputs (``--data``, files or folders; each names one *dataset*, split into *subsets*):

- a CS224N STS file (tab-separated, columns ``sentence1``, ``sentence2``, ``similarity``): one subset;
- a SentEval STS12–16 folder (``STS.input.<name>.txt``: tab-separated sentence pairs, and
  ``STS.gs.<name>.txt``: one gold score per line, a blank line = an unscored pair, skipped): each
  ``<name>`` is a subset. One ``STS.input.<name>.txt`` (or ``STS.gs``) file: that one subset;
- SICK-R (``SICK_*.txt``, tab-separated, columns ``sentence_A``, ``sentence_B``, ``relatedness_score``):
  a file is one subset, a folder's ``SICK*.txt`` files are its subsets;
- a folder holding none of these but subfolders that do (SentEval's ``data/downstream/STS``): each
  subfolder is a dataset.

Per dataset it reports, side by side, the **all** correlation (every subset's predictions and golds
concatenated, one correlation: SimCSE's "all" setting, the number its papers report for STS12–16)
and the **mean** of the per-subset correlations (SentEval's default), plus the size-weighted mean
and every subset's own value. For STS-B and SICK-R, SimCSE reports the ``test`` subset alone.
Correlations are undefined (``null`` in the JSON, ``-`` in the table) for fewer than two pairs or a
constant prediction.
"""
from __future__ import annotations

import argparse
import json
import math
import re
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np
import torch
import torch.nn.functional as F
from safetensors import SafetensorError
from scipy.stats import pearsonr, spearmanr

from data.readers import BadRow, DataError, ReadReport, column_indices, read_examples, read_utf8
from heads.pooling import POOLING_MODES, TOKEN_REDUCTIONS, applied_reduction, pool, pooled_size
from minbert import BertConfig, BertModel, BertTokenizer, WeightsError
from minbert.errors import first_line
from minbert.weights import resolve_model_dir

from .checkpoint import load_checkpoint
from .evaluate import pick_device
from .outputs import write_json

STS_INPUT = re.compile(r"^STS\.input\.(.+)\.txt$")
STS_GOLD = re.compile(r"^STS\.gs\.(.+)\.txt$")
SICK_FILE = re.compile(r"^SICK.*\.txt$")
CS224N_COLUMNS = ("sentence1", "sentence2", "similarity")
SICK_COLUMNS = ("sentence_A", "sentence_B", "relatedness_score")
LAYOUTS_HELP = ("expected a CS224N STS file (columns sentence1, sentence2, similarity), SentEval STS12-16 "
                "files (STS.input.<name>.txt + STS.gs.<name>.txt) or SICK-R files (SICK_*.txt with columns "
                "sentence_A, sentence_B, relatedness_score)")


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    started = time.time()
    try:
        datasets = find_datasets(args.data)
        model, tokenizer, source, reduction = open_encoder(args)
        if args.reduction != "mean" and reduction != args.reduction:
            print(f"note: --reduction {args.reduction} does not apply to pooling {args.pooling}", file=sys.stderr)
        results = {}
        for dataset in datasets:
            for subset in dataset.subsets:
                if subset.report.bad_rows or subset.unscored:
                    print(f"note: {subset.describe()}", file=sys.stderr)
            scored = score_dataset(model, tokenizer, dataset, args.pooling, args.reduction,
                                   args.batch_size, args.max_length)
            results[dataset.name] = {"path": str(dataset.path), "layout": dataset.layout,
                                     **correlations(scored)}
            print(f"{dataset.name}: done", file=sys.stderr)
    except (DataError, WeightsError, ValueError, FileNotFoundError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    print(render_table(results))
    if args.out is not None:
        report = {"encoder": source, "pooling": args.pooling, "reduction": reduction,
                  "max_length": args.max_length, "batch_size": args.batch_size,
                  "wall_seconds": round(time.time() - started, 1), "datasets": results}
        write_json(Path(args.out), report)
        print(f"wrote {args.out}", file=sys.stderr)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m training.evaluate_embeddings",
                                     description=__doc__.split("\n\n")[0])
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--checkpoint", type=Path, default=None,
                        help="a run's checkpoint/ folder (or the run folder holding it): its encoder, no heads")
    source.add_argument("--model", default=None,
                        help="local HF-format BERT directory or the embedded model's name "
                             "(default: the embedded model)")
    parser.add_argument("--data", nargs="+", type=Path, required=True,
                        help="STS files or folders (CS224N sts-*.csv, SentEval STS12-16 folders, SICK-R files)")
    parser.add_argument("--pooling", default="mean", choices=list(POOLING_MODES), help="pooling mode (default: mean)")
    parser.add_argument("--reduction", default="mean", choices=list(TOKEN_REDUCTIONS),
                        help="token reduction of the layer-combining modes (default: mean)")
    parser.add_argument("--batch_size", type=int, default=64, help="sentences per forward pass (default: 64)")
    parser.add_argument("--max_length", type=int, default=128, help="word pieces per sentence (default: 128)")
    parser.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"], help="default: cuda if available")
    parser.add_argument("--out", type=Path, default=None, help="write the results as JSON to this file")
    return parser


# ---------------------------------------------------------------------------------------------
# encoding and correlations


@torch.no_grad()
def encode(model: BertModel, tokenizer: BertTokenizer, sentences: Sequence[str], pooling: str = "mean",
           reduction: str = "mean", batch_size: int = 64, max_length: int = 128) -> torch.Tensor:
    """Pooled vectors (N, D), float32 on the CPU, in the order of ``sentences``.

    The model runs in eval mode (no dropout) and is put back in its previous mode. Sentences are
    batched longest first, so each batch pads little.
    """
    if reduction not in TOKEN_REDUCTIONS:
        raise ValueError(f"unknown reduction {reduction!r}; choose one of {list(TOKEN_REDUCTIONS)}")
    applied_reduction(pooling, reduction)  # an unknown mode fails here, even for an empty list
    if batch_size < 1:
        raise ValueError(f"batch_size must be at least 1, got {batch_size}")
    if not sentences:
        return torch.zeros(0, pooled_size(model.config.hidden_size, pooling))
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    try:
        order = sorted(range(len(sentences)), key=lambda i: -len(sentences[i]))
        chunks = []
        for start in range(0, len(order), batch_size):
            batch = [sentences[i] for i in order[start:start + batch_size]]
            encoding = {k: v.to(device) for k, v in tokenizer.encode_batch(batch, max_length=max_length).items()}
            outputs = model(encoding["input_ids"], encoding["attention_mask"], encoding["token_type_ids"])
            chunks.append(pool(outputs, encoding["attention_mask"], pooling, reduction).float().cpu())
    finally:
        model.train(was_training)
    vectors = torch.cat(chunks)
    result = torch.empty_like(vectors)
    result[torch.tensor(order)] = vectors
    return result


def correlations(subsets: dict[str, tuple]) -> dict:
    """Spearman and Pearson for each subset, for all subsets concatenated, and averaged over subsets.

    ``subsets`` maps a name to ``(predictions, golds)``. Returns
    ``{"all": {"spearman", "pearson", "n"}, "mean": {...}, "wmean": {...}, "subsets": {name: {...}}}``:
    ``all`` is one correlation over the concatenation (SimCSE's "all"), ``mean`` the plain average of
    the subsets' correlations (SentEval's default), ``wmean`` their average weighted by subset size.
    An undefined correlation is NaN.
    """
    if not subsets:
        raise ValueError("correlations() needs at least one subset")
    per_subset = {}
    for name, (pred, gold) in subsets.items():
        pred, gold = np.asarray(pred, dtype=np.float64), np.asarray(gold, dtype=np.float64)
        if pred.shape != gold.shape or pred.ndim != 1:
            raise ValueError(f"subset {name!r}: predictions {pred.shape} and golds {gold.shape} differ")
        per_subset[name] = {**_correlate(pred, gold), "n": int(len(pred))}
    preds = np.concatenate([np.asarray(p, dtype=np.float64) for p, _ in subsets.values()])
    golds = np.concatenate([np.asarray(g, dtype=np.float64) for _, g in subsets.values()])
    sizes = np.array([s["n"] for s in per_subset.values()], dtype=np.float64)
    mean, wmean = {}, {}
    for metric in ("spearman", "pearson"):
        values = np.array([s[metric] for s in per_subset.values()])
        mean[metric] = float(values.mean())
        wmean[metric] = float((values * sizes).sum() / sizes.sum()) if sizes.sum() > 0 else math.nan
    return {"all": {**_correlate(preds, golds), "n": int(len(preds))},
            "mean": mean, "wmean": wmean, "subsets": per_subset}


def score_dataset(model: BertModel, tokenizer: BertTokenizer, dataset: Dataset, pooling: str, reduction: str,
                  batch_size: int, max_length: int) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """``{subset: (cosine similarities, golds)}``; each distinct sentence is encoded once."""
    sentences = sorted({s for subset in dataset.subsets for s in (*subset.first, *subset.second)})
    index = {s: i for i, s in enumerate(sentences)}
    vectors = encode(model, tokenizer, sentences, pooling, reduction, batch_size, max_length)
    scored = {}
    for subset in dataset.subsets:
        u = vectors[[index[s] for s in subset.first]]
        v = vectors[[index[s] for s in subset.second]]
        scored[subset.name] = (F.cosine_similarity(u, v, dim=-1).numpy(), subset.gold)
    return scored


def _correlate(pred: np.ndarray, gold: np.ndarray) -> dict[str, float]:
    if len(pred) < 2 or np.ptp(pred) == 0 or np.ptp(gold) == 0:
        return {"spearman": math.nan, "pearson": math.nan}
    return {"spearman": float(spearmanr(pred, gold)[0]), "pearson": float(pearsonr(pred, gold)[0])}


# ---------------------------------------------------------------------------------------------
# the encoder


def open_encoder(args) -> tuple[BertModel, BertTokenizer, str, str | None]:
    """The encoder named by ``--checkpoint``/``--model``, moved to ``--device``, and the token
    reduction that ``--pooling``/``--reduction`` amount to; says on stderr what is used."""
    model, tokenizer, source = load_encoder(args.checkpoint, args.model)
    device = pick_device(args.device)
    model.to(device)
    reduction = applied_reduction(args.pooling, args.reduction)
    print(f"encoder: {source}   pooling: {args.pooling} (reduction: {reduction or 'none'})   device: {device}",
          file=sys.stderr)
    return model, tokenizer, source, reduction


def load_encoder(checkpoint: Path | None, model: str | None) -> tuple[BertModel, BertTokenizer, str]:
    """``(BertModel, tokenizer, description)`` from a run's checkpoint or an HF-format model directory.

    A checkpoint (``model.safetensors`` with ``bert.*`` and ``heads.*`` keys, ``config.json`` with
    ``{"bert": BertConfig, "run": run config}``) gives the encoder; its vocabulary is the checkpoint
    folder's ``vocab.txt`` if there is one, else that of the model the run started from.
    """
    if checkpoint is None:
        directory = resolve_model_dir(model)
        bert = BertModel.from_pretrained(directory)
        return bert, _tokenizer(directory / "vocab.txt", bert), str(directory)
    directory = checkpoint
    if not (directory / "config.json").is_file() and (directory / "checkpoint" / "config.json").is_file():
        directory = directory / "checkpoint"  # a run folder was given
    for name in ("config.json", "model.safetensors"):
        if not (directory / name).is_file():
            raise WeightsError(f"checkpoint file {directory / name} not found "
                               "(--checkpoint wants a run's checkpoint/ folder)")
    try:
        state, config = load_checkpoint(directory)
    except (SafetensorError, OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise WeightsError(f"cannot read checkpoint {directory}: {first_line(err)} "
                           "(truncated or corrupt file?)") from None
    try:
        bert_config = BertConfig.from_dict(config["bert"])
    except (KeyError, TypeError, ValueError) as err:
        raise WeightsError(f"{directory / 'config.json'}: no usable \"bert\" config "
                           f"({type(err).__name__}: {err})") from None
    encoder_state = {k[len("bert."):]: v for k, v in state.items() if k.startswith("bert.")}
    if not encoder_state:
        raise WeightsError(f"{directory / 'model.safetensors'}: no bert.* weights in this checkpoint")
    bert = BertModel(bert_config)
    try:
        bert.load_state_dict(encoder_state)
    except RuntimeError as err:
        raise WeightsError(f"{directory}: the bert.* weights do not fit config.json's BERT: "
                           f"{' '.join(str(err).split())[:400]}") from None
    vocab = directory / "vocab.txt"
    if not vocab.is_file():
        run_model = (config.get("run") or {}).get("model") or {}
        vocab = resolve_model_dir(run_model.get("model") if isinstance(run_model, dict) else None) / "vocab.txt"
    return bert, _tokenizer(vocab, bert), str(directory)


def _tokenizer(vocab: Path, bert: BertModel) -> BertTokenizer:
    if not vocab.is_file():
        raise WeightsError(f"vocabulary {vocab} not found")
    tokenizer = BertTokenizer(vocab)
    if tokenizer.vocab_size > bert.config.vocab_size:
        raise WeightsError(f"{vocab} has {tokenizer.vocab_size} tokens but the model's embedding has "
                           f"{bert.config.vocab_size} rows")
    return tokenizer


# ---------------------------------------------------------------------------------------------
# datasets


@dataclass
class PairSubset:
    """Scored sentence pairs of one file; ``report`` lists skipped malformed rows."""

    name: str
    first: list[str]
    second: list[str]
    gold: np.ndarray
    report: ReadReport
    unscored: int = 0  # SentEval pairs with a blank gold line

    def describe(self) -> str:
        return self.report.summary() + (f", {self.unscored} unscored pairs skipped" if self.unscored else "")


@dataclass
class Dataset:
    name: str
    path: Path
    layout: str  # "cs224n", "senteval-sts" or "sick"
    subsets: list[PairSubset] = field(default_factory=list)


def find_datasets(paths: Sequence[Path]) -> list[Dataset]:
    """One ``Dataset`` per file or folder (a folder of dataset folders expands to each of them)."""
    datasets: list[Dataset] = []
    for path in map(Path, paths):
        if path.is_dir() and _folder_layout(path) is None:
            found = [load_dataset(sub) for sub in sorted(path.iterdir(), key=lambda p: p.name.lower())
                     if sub.is_dir() and _folder_layout(sub) is not None]
            if not found:
                hint = " (to score CS224N CSVs, pass the sts-*.csv files themselves)" if any(path.glob("*.csv")) else ""
                raise DataError(f"{path}: no STS files in this folder or its subfolders{hint}; {LAYOUTS_HELP}")
            datasets.extend(found)
        else:
            datasets.append(load_dataset(path))
    names = [d.name for d in datasets]
    for dataset in datasets:  # two inputs with one name (sts-dev.csv from two folders): use the paths
        if names.count(dataset.name) > 1:
            dataset.name = str(dataset.path)
    return datasets


def load_dataset(path: Path) -> Dataset:
    """Read one file (one subset) or one SentEval/SICK folder (its files are the subsets)."""
    path = Path(path)
    if not path.exists():
        raise DataError(f"STS data not found: {path}")
    if path.is_dir():
        layout = _folder_layout(path)
        if layout == "senteval-sts":
            inputs = sorted((p for p in path.iterdir() if STS_INPUT.match(p.name)), key=lambda p: p.name.lower())
            return Dataset(path.name, path, layout, [read_senteval_sts(p) for p in inputs])
        if layout == "sick":
            files = sorted((p for p in path.iterdir() if SICK_FILE.match(p.name)), key=lambda p: p.name.lower())
            return Dataset(path.name, path, layout, [read_sick(p) for p in files])
        raise DataError(f"{path}: no STS files in this folder; {LAYOUTS_HELP}")
    gold = STS_GOLD.match(path.name)
    if gold:
        path = path.with_name(f"STS.input.{gold.group(1)}.txt")
    if STS_INPUT.match(path.name):
        subset = read_senteval_sts(path)
        return Dataset(f"{path.parent.name}/{subset.name}", path, "senteval-sts", [subset])
    header = _header(path)
    if all(c in header for c in CS224N_COLUMNS):
        return Dataset(path.stem, path, "cs224n", [read_cs224n_sts(path)])
    if all(c in header for c in SICK_COLUMNS):
        return Dataset(path.stem, path, "sick", [read_sick(path)])
    if all(c in header for c in CS224N_COLUMNS[:2]):
        raise DataError(f"{path}: no '{CS224N_COLUMNS[2]}' column: an unlabelled (test) file "
                        "has no gold scores to correlate with")
    raise DataError(f"{path}: unknown layout (header {header}); {LAYOUTS_HELP}")


def read_cs224n_sts(path: Path) -> PairSubset:
    """A CS224N ``sts-*.csv`` (rows with a bad field are skipped and reported)."""
    examples, report = read_examples(path, CS224N_COLUMNS[:2], CS224N_COLUMNS[2], label_type="score")
    if not examples:
        raise DataError(f"{path}: no usable rows ({report.summary()})")
    return PairSubset(path.stem, [e.texts[0] for e in examples], [e.texts[1] for e in examples],
                      np.array([e.label for e in examples], dtype=np.float64), report)


def read_senteval_sts(input_path: Path) -> PairSubset:
    """``STS.input.<name>.txt`` (tab-separated pair per line; extra columns ignored) and its
    ``STS.gs.<name>.txt`` (one score per line; a blank line marks an unscored pair, skipped as
    SentEval does). Scored lines that are malformed are skipped and reported."""
    input_path = Path(input_path)
    match = STS_INPUT.match(input_path.name)
    if not match:
        raise DataError(f"{input_path}: not a SentEval STS input file (STS.input.<name>.txt)")
    gold_path = input_path.with_name(f"STS.gs.{match.group(1)}.txt")
    if not input_path.is_file():
        raise DataError(f"STS input file not found: {input_path}")
    if not gold_path.is_file():
        raise DataError(f"{input_path}: gold-score file {gold_path.name} not found beside it")
    pairs = read_utf8(input_path).splitlines()
    scores = read_utf8(gold_path).splitlines()
    if len(pairs) != len(scores):
        raise DataError(f"{input_path} has {len(pairs)} lines but {gold_path.name} has {len(scores)}")
    first, second, gold = [], [], []
    report = ReadReport(path=input_path, n_rows=len(pairs))
    unscored = 0
    for line, (pair, score) in enumerate(zip(pairs, scores), start=1):
        if not score.strip():
            unscored += 1
            continue
        fields = pair.split("\t")
        value = _float(score)
        if len(fields) < 2:
            report.bad_rows.append(BadRow(line, "row", f"{len(fields)} tab-separated field(s), want 2"))
        elif value is None:
            report.bad_rows.append(BadRow(line, "score", f"gold score {score.strip()!r} is not a number"))
        else:
            first.append(fields[0].strip())
            second.append(fields[1].strip())
            gold.append(value)
    if not gold:
        raise DataError(f"{input_path}: no scored pairs ({report.summary()}, {unscored} unscored)")
    return PairSubset(match.group(1), first, second, np.array(gold, dtype=np.float64), report, unscored)


def read_sick(path: Path) -> PairSubset:
    """A SICK file: tab-separated with a header naming ``sentence_A``, ``sentence_B``,
    ``relatedness_score`` (the other columns are ignored); malformed rows are skipped and reported."""
    path = Path(path)
    lines = read_utf8(path).splitlines()
    if not lines or not lines[0].strip():
        raise DataError(f"{path}: file is empty (expected a tab-separated header row)")
    header = lines[0].split("\t")
    index = column_indices(path, header, SICK_COLUMNS)
    first, second, gold = [], [], []
    report = ReadReport(path=path, n_rows=0)
    for line, row in enumerate(lines[1:], start=2):
        if not row.strip():
            continue
        report.n_rows += 1
        fields = row.split("\t")
        if len(fields) <= max(index.values()):
            report.bad_rows.append(BadRow(line, "row", f"{len(fields)} fields, header has {len(header)}"))
            continue
        a, b = fields[index["sentence_A"]].strip(), fields[index["sentence_B"]].strip()
        value = _float(fields[index["relatedness_score"]])
        if not a or not b:
            report.bad_rows.append(BadRow(line, "sentence_A" if not a else "sentence_B", "empty sentence"))
        elif value is None:
            report.bad_rows.append(BadRow(line, "relatedness_score", "not a number"))
        else:
            first.append(a)
            second.append(b)
            gold.append(value)
    if not gold:
        raise DataError(f"{path}: no usable rows ({report.summary()})")
    return PairSubset(path.stem, first, second, np.array(gold, dtype=np.float64), report)


def _folder_layout(path: Path) -> str | None:
    names = [p.name for p in path.iterdir() if p.is_file()]
    if any(STS_INPUT.match(n) for n in names):
        return "senteval-sts"
    if any(SICK_FILE.match(n) for n in names):
        return "sick"
    return None


def _header(path: Path) -> list[str]:
    text = read_utf8(path)
    first_line = text.split("\n", 1)[0].rstrip("\r")
    return [h.strip() for h in first_line.split("\t")]


def _float(text: str) -> float | None:
    try:
        value = float(text.strip())
    except ValueError:
        return None
    return value if math.isfinite(value) else None


# ---------------------------------------------------------------------------------------------
# output


def render_table(results: dict[str, dict]) -> str:
    """Per dataset: pairs, Spearman and Pearson (×100) over all subsets and averaged over subsets;
    then, if any dataset has several subsets, one row per subset."""
    lines = ["correlation of cosine similarity with gold scores (x100); all = subsets concatenated, "
             "mean = average over subsets",
             f"{'dataset':<28} {'subsets':>7} {'pairs':>7} {'Spearman all':>13} {'Spearman mean':>14} "
             f"{'Pearson all':>12} {'Pearson mean':>13}"]
    for name, r in results.items():
        lines.append(f"{name:<28} {len(r['subsets']):>7} {r['all']['n']:>7} "
                     f"{_pct(r['all']['spearman']):>13} {_pct(r['mean']['spearman']):>14} "
                     f"{_pct(r['all']['pearson']):>12} {_pct(r['mean']['pearson']):>13}")
    if any(len(r["subsets"]) > 1 for r in results.values()):
        lines += ["", f"{'dataset':<28} {'subset':<24} {'pairs':>7} {'Spearman':>9} {'Pearson':>9}"]
        for name, r in results.items():
            for subset, s in r["subsets"].items():
                lines.append(f"{name:<28} {subset:<24} {s['n']:>7} {_pct(s['spearman']):>9} {_pct(s['pearson']):>9}")
    return "\n".join(lines)


def _pct(value: float) -> str:
    return "-" if value is None or math.isnan(value) else f"{100 * value:.2f}"


if __name__ == "__main__":
    sys.exit(main())
