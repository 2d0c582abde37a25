"""The per-graph report: every graph of a split scored, with its configurable nodes by kind, and the means."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from benchmarks.per_graph import format_rows, graph_rows
from competition.collections import Collection, Split
from competition.dataroot import find_data_root, list_graphs
from competition.labels import load_labels
from competition.metrics import graph_score
from competition.opcodes import CONVOLUTION, DOT, RESHAPE
from competition.protocol import DEFAULT_PROTOCOL
from competition.reader import load_graph

XR = Collection.LAYOUT_XLA_RANDOM


class Measured:
    """Predicts each config's measured runtime (sign -1: the reverse order)."""

    def __init__(self, sign: float = 1.0) -> None:
        self.sign = sign

    def predict(self, graph) -> np.ndarray:
        return self.sign * graph.config_runtime.astype(np.float64)


def test_rows_score_every_graph_and_count_its_configurable_nodes(tiny_world: Path):
    root = find_data_root(tiny_world)
    rows = graph_rows(Measured(), root, XR, Split.TRAIN)
    paths = list_graphs(root, XR, Split.TRAIN)
    labels = load_labels(root, [XR], Split.TRAIN, DEFAULT_PROTOCOL)
    assert [r.stem for r in rows] == [p.stem for p in paths] and all(r.split == Split.TRAIN for r in rows)
    for row, path in zip(rows, paths, strict=True):
        g = load_graph(path, XR)
        kinds = g.node_opcode[g.node_config_ids]
        assert (row.nodes, row.configurable, row.configs) == (len(g.node_opcode), len(kinds), g.num_configs)
        assert (row.convolutions, row.dots, row.reshapes) == (
            int((kinds == CONVOLUTION).sum()), int((kinds == DOT).sum()), int((kinds == RESHAPE).sum()))
        assert row.score > 0.999  # ranked by its own runtimes (two configs measured at the same ns tie)
        assert row.oracle is not None and -1 <= row.oracle <= 1
        lab = labels[f"{XR.value}:{path.stem}"]  # the measured order, scored against the noiseless runtimes
        assert row.noiseless == graph_score(XR, lab.noiseless, scores=g.config_runtime.astype(np.float64))
        # Measurement noise orders the configs that tie (about half a random search's lie within 0.2% of the best,
        # most of them exactly as fast: the real graph's additive fit reaches 0.85).
        assert 0.5 < row.noiseless < 1.0
    reverse = graph_rows(Measured(-1.0), root, XR, Split.TRAIN)
    assert [r.score for r in reverse] == [-r.score for r in rows]
    assert [r.noiseless for r in reverse] == [-r.noiseless for r in rows]
    text = format_rows(rows + reverse).splitlines()
    assert len(text) == 1 + 2 * len(rows) + 1  # header, a line per row, one summary for the split
    oracle = np.mean([r.oracle for r in rows + reverse])
    clean = np.mean([r.noiseless for r in rows + reverse])  # 0 up to rounding: each graph and its reverse
    assert text[-1] == (f"train: {2 * len(rows)} graphs, mean score 0.0000, oracle {oracle:.4f}, "
                        f"without noise {clean:.4f}") and abs(clean) < 1e-12


def test_param_reaches_the_model_and_a_bad_one_is_refused(tiny_world: Path, monkeypatch, capsys):
    import pytest

    import benchmarks.per_graph as per_graph
    from models.registry import MODELS

    made: list[dict] = []

    def fit(self, data, **kwargs):  # records the model's hyper-parameters, fits nothing
        made.append(self.get_params())
        return self

    monkeypatch.setattr(MODELS["gnn-attn"], "fit", fit)
    monkeypatch.setattr(per_graph, "graph_rows", lambda *a, **k: [])
    monkeypatch.setattr(per_graph, "world_dir", lambda *a: tiny_world)
    monkeypatch.setattr("competition.synthetic.world.generate_world", lambda *a, **k: None)
    assert per_graph.main(["--param", "dim_tokens=False", "--param", "steps_per_graph=16", "--param", "loss=margin"]) == 0
    assert len(made) == 1 and made[0]["run.runs_dir"] is None
    assert (made[0]["network.dim_tokens"], made[0]["train.steps_per_graph"], made[0]["train.loss"]) == (False, 16,
                                                                                                         "margin")
    for bad, message in (("nope=1", "no setting 'nope'"), ("dim_tokens", "expected KEY=VALUE"),
                         ("steps_per_graph=abc", "steps_per_graph")):
        with pytest.raises(SystemExit):
            per_graph.main(["--param", bad])
        assert message in capsys.readouterr().err
