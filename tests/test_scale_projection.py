"""benchmarks/scale.py's projection of a GNN fit: training steps by the train graphs, validation by the valid graphs."""

from __future__ import annotations

import pytest

from benchmarks.scale import _fit_row


def test_a_gnn_fit_projects_its_training_and_its_validation_apart():
    # 100 s measured for 1 of 2 default epochs on 12 train and 6 valid graphs, 40 s of it scoring the valid split.
    fit = {"seconds": 100.0, "graphs": 12, "valid_seconds": 40.0, "valid_graphs": 6}
    row = _fit_row("gnn-attn fit", "layout:nlp:random", fit, (120, 30, 20), 500.0, scale=2.0)
    # training 2 * 60 s / 12 graphs * 120 = 1,200 s; validation 2 * 40 s / 6 graphs * 30 = 400 s
    assert row["projected"] == pytest.approx(1600.0)
    assert row["per_graph"] == pytest.approx(1600.0 / 120)
    assert row["valid_share"] == pytest.approx(0.4)
    assert row["seconds"] == 100.0 and row["graphs"] == 12  # the measured columns stay as measured


def test_a_fit_without_validation_time_projects_by_the_train_graphs():
    row = _fit_row("gbdt fit", "tile:xla", {"seconds": 30.0, "graphs": 10}, (100, 10, 10), 200.0, scale=1.0)
    assert row["projected"] == pytest.approx(300.0) and "valid_share" not in row


def test_the_cache_part_builds_the_collections_default_pipeline_on_a_world(tiny_world, tmp_path):
    """The scale benchmark's cache stage (run as a part process by `make bench-scale`) caches every train and valid
    graph of a collection through the GNN's own feature pipeline, with the collection's defaults."""
    from benchmarks.scale import part_cache
    from competition.collections import Collection, Split
    from competition.reader import find_data_root, list_graphs

    root = find_data_root(tiny_world)
    out = part_cache(str(tiny_world), "layout:xla:random", str(tmp_path / "cache"))
    c = Collection.LAYOUT_XLA_RANDOM
    for split in (Split.TRAIN, Split.VALID):
        assert out[split.value]["graphs"] == len(list_graphs(root, c, split)) > 0
    assert out["disk_mib"] > 0 and out["peak_mib"] > 0
