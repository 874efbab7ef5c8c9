"""notebooks/quickstart.ipynb (issue 87, item 6) runs top to bottom in a Jupyter kernel, on the tiny model and the
fixture data through its QUICKSTART_* variables, and is committed with its outputs stripped. .ci/run installs
nbclient, nbformat and ipykernel (setup.cfg's ``notebook`` extra), so there the slow test must run, not skip."""
import csv
import json
import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOK = ROOT / "notebooks" / "quickstart.ipynb"
FIXTURE_DATA = Path(__file__).parent / "fixtures" / "data"
SST_NAMES = ["negative", "somewhat negative", "neutral", "somewhat positive", "positive"]


def test_the_committed_notebook_has_its_outputs_stripped():
    """No outputs and no execution counts in git: a diff shows code, not a run's numbers and images."""
    notebook = json.loads(NOTEBOOK.read_text(encoding="utf-8"))
    assert notebook["nbformat"] == 4 and notebook["metadata"]["kernelspec"]["name"] == "python3"
    code = [cell for cell in notebook["cells"] if cell["cell_type"] == "code"]
    assert len(code) >= 8
    for cell in code:
        assert cell["outputs"] == [] and cell["execution_count"] is None, cell["id"]
    ids = [cell["id"] for cell in notebook["cells"]]
    assert len(set(ids)) == len(ids)


def needed(module: str):
    """``module``, which CI installs: there (``.ci/run`` sets MINBERT_CI) a missing one fails the test; elsewhere it
    skips it."""
    if os.environ.get("MINBERT_CI"):
        return __import__(module)
    return pytest.importorskip(module)


def shown(cell) -> str:
    """What a cell printed and displayed, as text: its streams, and each display's Markdown or plain text."""
    parts = []
    for output in cell.outputs:
        if output.output_type == "stream":
            parts.append(output.text)
        elif output.output_type in ("display_data", "execute_result"):
            parts.append(output.data.get("text/markdown") or output.data.get("text/plain", ""))
    return "".join(parts)


@pytest.mark.slow
def test_the_quickstart_notebook_runs_top_to_bottom(tmp_path, tiny_model_dir, monkeypatch):
    nbformat, nbclient = needed("nbformat"), needed("nbclient")
    needed("ipykernel")
    monkeypatch.setenv("QUICKSTART_MODEL", str(tiny_model_dir))   # the kernel inherits this process's environment
    monkeypatch.setenv("QUICKSTART_DATA", str(FIXTURE_DATA))
    monkeypatch.setenv("QUICKSTART_FLAGS", "--max_length 32 --batch_size 4")   # the tiny model has 64 positions
    monkeypatch.setenv("QUICKSTART_OUT", str(tmp_path))
    notebook = nbformat.read(str(NOTEBOOK), as_version=4)
    nbclient.NotebookClient(notebook, timeout=300, startup_timeout=120, kernel_name="python3",
                            resources={"metadata": {"path": str(NOTEBOOK.parent)}}).execute()   # raises on an error
    cells = {cell.id: cell for cell in notebook.cells}

    checked = shown(cells["install-check"])
    assert f"data: {FIXTURE_DATA.resolve()}" in checked and "torch " in checked
    runs = list(tmp_path.glob("quickstart-*/smoke"))
    assert len(runs) == 1
    run, out_dir = runs[0], runs[0].parent
    metrics = json.loads((run / "metrics.json").read_text(encoding="utf-8"))
    assert metrics["status"] == "finished" and metrics["config"]["data"]["max_eval_examples"] == 100
    assert any("image/png" in output.get("data", {}) for output in cells["curves"].outputs)

    predicted = [line for line in shown(cells["predict"]).splitlines() if " <- " in line]
    assert len(predicted) == 3 and all(line.split(" <- ")[0].strip() in SST_NAMES for line in predicted)
    with open(out_dir / "reviews" / "sst-reviews-output.csv", encoding="utf-8", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [row["sentence"] for row in rows] == ["A gripping, beautiful film.", "Dull, long and, frankly, boring.",
                                                 "It was fine, I suppose."]
    assert all(row["label_name"] in SST_NAMES for row in rows) and "label_name" in shown(cells["predict-file"])

    assert "vectors: (3, 16) float32" in shown(cells["embeddings"])
    hits = [line for line in shown(cells["search"]).splitlines() if line.startswith("  ")]
    assert len(hits) == 4   # two queries, top_k 2
    table = shown(cells["report"])
    assert any(line.startswith("| smoke") for line in table.splitlines()), table
