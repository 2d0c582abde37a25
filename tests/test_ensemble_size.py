"""benchmarks/ensemble_size.py: one fit of N networks scores every ensemble size, and its first k networks are
what a fit with ``seeds`` k gives."""

from __future__ import annotations

import json
from pathlib import Path

import pytest


def test_the_first_network_of_the_ensemble_scores_as_a_one_network_fit(tiny_world: Path, tmp_path: Path,
                                                                         capsys: pytest.CaptureFixture[str]):
    from benchmarks.ensemble_size import main
    from competition.collections import Collection, Split
    from competition.dataroot import find_data_root
    from competition.dataset import Dataset
    from competition.labels import load_labels
    from competition.protocol import DEFAULT_PROTOCOL
    from competition.submission_scoring import score_predictions
    from fastslow.fitting import fit_collection, predict_graphs
    from models.registry import ModelParams, make_model

    out = tmp_path / "sizes.json"
    c = Collection.parse("layout:xla:default")
    assert main(["--data", str(tiny_world), "--collection", c.value, "--seeds", "2", "--param", "epochs=2",
                 "--out", str(out)]) == 0
    lines = json.loads(out.read_text())["lines"]
    assert [line["networks"] for line in lines] == [1, 2]
    assert [line["epochs"] for line in lines] == [[2], [2, 2]]
    assert lines[1]["fit_seconds"] == pytest.approx(2 * lines[0]["fit_seconds"])
    printed = capsys.readouterr().out
    assert f"{c.value} gnn-attn, 2 networks: test {lines[1]['test']:.4f}" in printed

    root = find_data_root(tiny_world)
    data = Dataset.open(root, [c])[c]
    one = make_model("gnn-attn", **ModelParams(common={"seeds": 1, "epochs": 2, "runs_dir": None}).for_collection(c))
    fit_collection("gnn-attn", one, data, splits=(), progress=False, say=lambda line: None)
    labels = load_labels(root, [c], Split.TEST, DEFAULT_PROTOCOL)
    assert score_predictions(predict_graphs("gnn-attn", one, data, Split.TEST), labels).scores()[c] == lines[0]["test"]
