"""The Kaggle notebook: well-formed, its metadata consistent, and it runs end to end on the tiny world."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from competition.collections import Collection, Split
from competition.dataroot import find_data_root
from competition.submission_checks import validate_submission
from competition.submission_reading import read_submission

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"
NOTEBOOK = NOTEBOOKS / "fastslow-submit.ipynb"
KERNEL = "fastslow-test-python"


def test_notebook_is_valid_nbformat_v4_with_explained_steps():
    nb = nbformat.read(NOTEBOOK, as_version=4)
    nbformat.validate(nb)
    assert nb.nbformat == 4
    kinds = [c.cell_type for c in nb.cells]
    assert kinds[0] == "markdown" and kinds.count("code") == 4
    # every code cell is introduced by a markdown cell
    assert all(kinds[i - 1] == "markdown" for i, k in enumerate(kinds) if k == "code")
    assert all(not c.get("outputs") for c in nb.cells if c.cell_type == "code")  # committed without outputs
    install = next(c.source for c in nb.cells if c.cell_type == "code")
    assert '"--no-index"' in install and '"--find-links"' in install and "FASTSLOW_WHEEL_DIR" in install


def test_kaggle_metadata_is_consistent():
    kernel = json.loads((NOTEBOOKS / "kernel-metadata.json").read_text())
    dataset = json.loads((NOTEBOOKS / "dataset-metadata.json").read_text())
    assert kernel["id"] == "YOUR_KAGGLE_USERNAME/fastslow-submit"
    assert (NOTEBOOKS / kernel["code_file"]).resolve() == NOTEBOOK
    assert (kernel["language"], kernel["kernel_type"], kernel["enable_internet"]) == ("python", "notebook", False)
    assert kernel["competition_sources"] == ["predict-ai-model-runtime"]
    assert kernel["dataset_sources"] == [dataset["id"]] == ["YOUR_KAGGLE_USERNAME/fastslow-wheel"]
    assert kernel["title"].lower().replace(" ", "-") == kernel["id"].split("/")[1]  # Kaggle's slug rule


@pytest.fixture
def kernel_spec(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A kernelspec running this interpreter, so the notebook sees the same installed packages."""
    spec = tmp_path / "jupyter" / "kernels" / KERNEL
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "fastslow test", "language": "python",
    }))
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "jupyter"))
    return KERNEL


def test_notebook_runs_on_the_tiny_world(tiny_world: Path, tmp_path: Path, kernel_spec: str,
                                         monkeypatch: pytest.MonkeyPatch):
    out = tmp_path / "working"
    monkeypatch.setenv("FASTSLOW_DATA", str(tiny_world))
    monkeypatch.setenv("FASTSLOW_SKIP_INSTALL", "1")
    monkeypatch.setenv("FASTSLOW_MODELS", "random,default-first")
    monkeypatch.setenv("FASTSLOW_OUT", str(out))
    nb = nbformat.read(NOTEBOOK, as_version=4)
    client = nbclient.NotebookClient(nb, kernel_name=kernel_spec, timeout=120, startup_timeout=60,
                                     resources={"metadata": {"path": str(tmp_path)}})
    client.execute()  # raises CellExecutionError, with the cell and its traceback, on any error

    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    text = "".join(o.get("text", "") for o in outputs if o.output_type == "stream")
    assert "skipping the install (FASTSLOW_SKIP_INSTALL=1)" in text
    assert f"data root: {tiny_world} (found by explicit path" in text
    assert "models: random, default-first" in text
    submission = out / "submission.csv"
    assert f"{submission}: valid, {2 * len(Collection)} rows" in text
    assert validate_submission(submission, find_data_root(tiny_world), Split.TEST) == []
    assert len(read_submission(submission)) == 2 * len(Collection)
    written = {p.name for p in out.iterdir()}
    assert {"leaderboard.csv", "submission.csv", "valid-default-first.csv", "valid-random.csv"} <= written
    head = nb.cells[-1].outputs[-1]
    assert head.output_type == "execute_result" and "TopConfigs" in head.data["text/plain"]
    # Step 3 goes through the notebook API (`fastslow.submit`) and shows its table of valid scores.
    fit = next(c for c in nb.cells if c.cell_type == "code" and "fastslow.submit(" in c.source)
    table = fit.outputs[-1]
    assert table.output_type == "execute_result" and "text/html" in table.data
    assert all(word in table.data["text/plain"] for word in ("combined", "random", "default-first", "tile:xla"))
