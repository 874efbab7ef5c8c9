"""The Python API takes what users pass (issue 28, class 4): ``LoadedRun.encode`` and ``predict``
take a str, a list, a pandas Series or a numpy array, as sentence-transformers' ``encode`` does;
class ids are ints; probabilities and logits are one keyword away; a run still training says so. ``similarity``
and ``search`` (issue 87, item 6) are checked against cosine similarity and a sort written out here with numpy."""
import json
import shutil
import warnings

import numpy as np
import pandas as pd
import pytest
import torch

from test_predict_embed import train
from training import load_run
from training.learning.task_schema import BUILTIN_TASKS

SENTENCES = ["a fine film .", "dull and long .", "a mess ."]
PAIRS = [("A man plays.", "A man is playing."), ("A cat.", "A stock market.")]


@pytest.fixture(scope="module")
def run(tmp_path_factory, tiny_model_dir):
    return load_run(train(tmp_path_factory.mktemp("runs"), tiny_model_dir, "api"))


@pytest.mark.slow
def test_encode_takes_a_str_a_list_a_series_and_an_array(run):
    vectors = run.encode(SENTENCES)
    one = run.encode(SENTENCES[0])
    assert vectors.shape == (3, 16) and one.shape == (16,)       # a str is one sentence, not its characters
    np.testing.assert_allclose(one, run.encode([SENTENCES[0]])[0], rtol=0, atol=1e-6)
    for given in (pd.Series(SENTENCES), np.array(SENTENCES), tuple(SENTENCES), pd.array(SENTENCES, dtype="string"),
                  pd.Series(SENTENCES, index=[7, 3, 5])):
        np.testing.assert_allclose(run.encode(given), vectors, rtol=0, atol=1e-6)


def test_encode_normalizes_and_converts_to_a_tensor(run):
    unit = run.encode(SENTENCES, normalize_embeddings=True)
    np.testing.assert_allclose(np.linalg.norm(unit, axis=1), 1.0, rtol=1e-5)
    tensor = run.encode(SENTENCES, convert_to_tensor=True)
    assert isinstance(tensor, torch.Tensor) and torch.equal(tensor, torch.from_numpy(run.encode(SENTENCES)))
    assert isinstance(run.encode("one", convert_to_tensor=True), torch.Tensor)


@pytest.mark.parametrize("given, error", [
    ([SENTENCES[0], 3], "item 1 is a int, not a str"),
    (np.array([SENTENCES, SENTENCES]), "a 1-D array of strings"),
    (42, "got int"),
    (pd.DataFrame({"s": SENTENCES}), "a 1-D array of strings, got DataFrame"),
    (pd.Series([SENTENCES[0], None]), r"item 1 is a missing value \((nan|None)\), not a str"),
])
def test_encode_refuses_what_is_not_sentences_in_one_line(run, given, error):
    with pytest.raises((TypeError, ValueError), match=error) as caught:
        run.encode(given)
    assert "\n" not in str(caught.value)


def test_predict_labels_are_ints_and_one_input_gives_one_value(run):
    classes = run.predict("sst", SENTENCES)
    assert classes.dtype == np.int64 and classes.shape == (3,) and set(classes) <= set(range(5))
    single = run.predict("sst", SENTENCES[0])
    assert isinstance(single, int) and single == classes[0]
    np.testing.assert_array_equal(run.predict("sst", pd.Series(SENTENCES)), classes)
    duplicate = run.predict("qqp", PAIRS[0])
    assert isinstance(duplicate, int) and duplicate in (0, 1)
    scores = run.predict("sts", PAIRS)
    assert scores.dtype == np.float32 and ((0 <= scores) & (scores <= 5)).all()
    assert isinstance(run.predict("sts", PAIRS[1]), float)
    frame = pd.DataFrame(PAIRS, columns=["sentence1", "sentence2"])
    for given in (frame, np.array(PAIRS), pd.Series(PAIRS), tuple(PAIRS)):
        np.testing.assert_array_equal(run.predict("sts", given), scores)
    with pytest.raises(TypeError, match="got int"):
        run.predict("sst", 5)
    with pytest.raises(ValueError, match="item 0 is not a pair of two str"):
        run.predict("qqp", [SENTENCES[0]])


def test_probabilities_and_logits(run):
    logits = run.predict("sst", SENTENCES, output="logits")
    probabilities = run.predict("sst", SENTENCES, output="probabilities")
    assert logits.shape == probabilities.shape == (3, 5)
    np.testing.assert_allclose(probabilities.sum(axis=1), 1.0, rtol=1e-6)
    np.testing.assert_allclose(probabilities, torch.softmax(torch.from_numpy(logits), -1).numpy(), rtol=1e-6)
    np.testing.assert_array_equal(probabilities.argmax(axis=1), run.predict("sst", SENTENCES))
    qqp_logit = run.predict("qqp", PAIRS, output="logits")
    p_duplicate = run.predict("qqp", PAIRS, output="probabilities")
    np.testing.assert_allclose(p_duplicate, 1 / (1 + np.exp(-qqp_logit)), rtol=1e-6)
    assert ((p_duplicate > 0.5) == run.predict("qqp", PAIRS).astype(bool)).all()
    assert run.predict("sst", SENTENCES[0], output="probabilities").shape == (5,)
    assert run.predict("sst", [], output="probabilities").shape == (0, 5)
    assert run.predict("sst", []).dtype == np.int64
    with pytest.raises(ValueError, match="regression"):
        run.predict("sts", PAIRS, output="probabilities")
    with pytest.raises(ValueError, match="output must be one of label, probabilities, logits"):
        run.predict("sst", SENTENCES, output="scores")
    assert BUILTIN_TASKS["sst"].predict is not None    # the task table itself is left as it was


@pytest.mark.slow
def test_an_unfinished_run_says_so_and_from_which_epoch(tmp_path, tiny_model_dir):
    run_dir = train(tmp_path, tiny_model_dir, "unfinished", "--epochs", "2")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        load_run(run_dir)                   # a finished run loads quietly
    metrics = json.loads((run_dir / "metrics.json").read_text())
    best = max(metrics["epochs"], key=lambda e: e["dev_overall"])["epoch"]
    for status, path in (("running", run_dir), ("failed", run_dir / "checkpoint")):
        (run_dir / "metrics.json").write_text(json.dumps({**metrics, "status": status}))
        with pytest.warns(UserWarning, match=rf"unfinished \(status {status}\).*best weights so far, "
                                             rf"from epoch {best}$") as caught:
            load_run(path)
        assert "\n" not in str(caught[0].message) and str(run_dir) in str(caught[0].message)
    (run_dir / "metrics.json").write_text(json.dumps({**metrics, "status": "running"}))
    shutil.rmtree(run_dir / "checkpoint")   # still in its first epoch: no weights yet
    with pytest.raises(Exception, match=r"unfinished \(status running\) and has saved no weights yet"):
        load_run(run_dir)


def test_load_run_puts_the_model_on_the_device_asked(run, monkeypatch):
    """``load_run(..., device=...)``: the model's parameters live there, so encode and predict compute there;
    ``cuda`` without a GPU is one line, as ``--device cuda`` is."""
    again = load_run(run.source, device=torch.device("cpu"))
    assert {p.device.type for p in again.model.parameters()} == {"cpu"}
    np.testing.assert_array_equal(again.encode(SENTENCES), run.encode(SENTENCES))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert {p.device.type for p in load_run(run.source, device="auto").model.parameters()} == {"cpu"}
    for device in ("cuda", "cuda:1", torch.device("cuda:0")):
        with pytest.raises(ValueError, match="no CUDA device is available"):
            load_run(run.source, device=device)


QUERIES = ["A man plays a guitar.", "Prices fell sharply."]
CORPUS = ["A man is playing music.", "The stock market dropped.", "A cat sleeps on a mat.", "Two dogs run.",
          "It rains today."]


def cosine_by_hand(u, v):
    """The reference: the cosine of every row of ``u`` with every row of ``v``, in float64, as its definition
    writes it (a 1-D input is one row)."""
    u, v = np.atleast_2d(u).astype(np.float64), np.atleast_2d(v).astype(np.float64)
    return (u @ v.T) / np.outer(np.linalg.norm(u, axis=1), np.linalg.norm(v, axis=1))


def test_similarity_is_the_cosine_of_the_vectors_encode_gives(run):
    """``run.similarity`` as sentence-transformers' ``util.cos_sim``: a matrix for two lists, a row for a str and a
    list, a float for two str; vectors from ``encode`` (array or tensor) are taken as they are."""
    matrix = run.similarity(SENTENCES, CORPUS)
    assert isinstance(matrix, np.ndarray) and matrix.shape == (3, 5) and matrix.dtype == np.float32
    np.testing.assert_allclose(matrix, cosine_by_hand(run.encode(SENTENCES), run.encode(CORPUS)), rtol=0, atol=1e-5)
    np.testing.assert_allclose(np.diag(run.similarity(SENTENCES, SENTENCES)), 1.0, rtol=0, atol=1e-5)
    one = run.similarity(SENTENCES[0], CORPUS[1])
    assert isinstance(one, float)
    assert one == pytest.approx(cosine_by_hand(run.encode(SENTENCES[0]), run.encode(CORPUS[1]))[0, 0], abs=1e-5)
    row, column = run.similarity(SENTENCES[0], CORPUS), run.similarity(SENTENCES, CORPUS[0])
    assert row.shape == (5,) and column.shape == (3,)
    np.testing.assert_allclose(row, cosine_by_hand(run.encode(SENTENCES[0]), run.encode(CORPUS))[0], rtol=0, atol=1e-5)
    np.testing.assert_allclose(column, cosine_by_hand(run.encode(SENTENCES), run.encode(CORPUS[0]))[:, 0], rtol=0,
                               atol=1e-5)
    vectors = run.encode(CORPUS)
    for given in (vectors, torch.from_numpy(vectors), vectors.astype(np.float64)):
        np.testing.assert_allclose(run.similarity(SENTENCES, given), matrix, rtol=0, atol=1e-6)
    assert run.similarity(run.encode(SENTENCES[0]), CORPUS[1]) == pytest.approx(one, abs=1e-6)


def assert_best_hits(hits, scores, top_k):
    """``hits`` are the ``top_k`` best of the reference ``scores`` (one query's against the corpus), best first:
    checked by score, so that two entries of equal score may come in either order."""
    assert len(hits) == top_k and all(set(hit) == {"corpus_id", "score"} for hit in hits)
    ids, found = [hit["corpus_id"] for hit in hits], [hit["score"] for hit in hits]
    assert all(type(i) is int for i in ids) and len(set(ids)) == top_k and all(type(s) is float for s in found)
    assert found == sorted(found, reverse=True)
    np.testing.assert_allclose(found, np.sort(scores)[::-1][:top_k], rtol=0, atol=1e-5)   # the best scores
    np.testing.assert_allclose(found, scores[ids], rtol=0, atol=1e-5)                     # each its entry's


def test_search_finds_the_corpus_entries_of_highest_cosine(run):
    """``run.search`` as sentence-transformers' ``util.semantic_search``: per query the top_k corpus entries, each
    ``{"corpus_id", "score"}``, against cosine similarity and a sort by hand; the whole corpus when top_k is larger;
    one list for a str query; the corpus's vectors from ``encode`` give the same hits."""
    expected = cosine_by_hand(run.encode(QUERIES), run.encode(CORPUS))
    found = run.search(QUERIES, CORPUS, top_k=3)
    assert isinstance(found, list) and len(found) == 2
    for hits, scores in zip(found, expected):
        assert_best_hits(hits, scores, 3)
    assert_best_hits(run.search(QUERIES, CORPUS)[0], expected[0], 5)          # top_k 5 by default
    assert_best_hits(run.search(QUERIES, CORPUS, top_k=50)[1], expected[1], 5)   # no more than the corpus
    alone = cosine_by_hand(run.encode(QUERIES[0]), run.encode(CORPUS))[0]
    assert_best_hits(run.search(QUERIES[0], CORPUS, top_k=2), alone, 2)        # a str: one list of hits
    vectors = run.encode(CORPUS)
    for given in (vectors, torch.from_numpy(vectors)):   # the corpus encoded once, searched as it is
        for hits, scores in zip(run.search(QUERIES, given, top_k=3), expected):
            assert_best_hits(hits, scores, 3)


@pytest.mark.parametrize("call, error", [
    (lambda run: run.similarity([], CORPUS), "^a: empty, give at least one sentence"),
    (lambda run: run.similarity(SENTENCES, np.array([], dtype=str)), "^b: empty"),
    (lambda run: run.search([], CORPUS), "^queries: empty"),
    (lambda run: run.search(QUERIES, pd.Series([], dtype=object)), "^corpus: empty"),
    (lambda run: run.search(QUERIES, np.zeros((0, 16), dtype=np.float32)), "^corpus: empty"),
    (lambda run: run.search(QUERIES, CORPUS, top_k=0), "top_k must be a whole number of at least 1, got 0"),
    (lambda run: run.search(QUERIES, CORPUS, top_k=2.5), "top_k must be a whole number of at least 1, got 2.5"),
    (lambda run: run.search(QUERIES, CORPUS[0]), "^corpus: a sequence of sentences .* got one sentence"),
    (lambda run: run.similarity(SENTENCES, np.ones((2, 7), dtype=np.float32)), r"different widths \(16 and 7\)"),
    (lambda run: run.similarity(np.ones((2, 3, 16), dtype=np.float32), CORPUS), r"^a: vectors are 1-D .* \(2, 3, 16\)"),
])
def test_similarity_and_search_refuse_empty_inputs_and_a_bad_top_k_in_one_line(run, call, error):
    with pytest.raises(ValueError, match=error) as caught:
        call(run)
    assert "\n" not in str(caught.value)
