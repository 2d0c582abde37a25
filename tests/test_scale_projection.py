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
    from competition.dataroot import find_data_root, list_graphs

    root = find_data_root(tiny_world)
    out = part_cache(str(tiny_world), "layout:xla:random", str(tmp_path / "cache"))
    c = Collection.LAYOUT_XLA_RANDOM
    for split in (Split.TRAIN, Split.VALID):
        assert out[split.value]["graphs"] == len(list_graphs(root, c, split)) > 0
    assert out["disk_mib"] > 0 and out["peak_mib"] > 0
    # another collection cached into the same folder is not counted
    other = part_cache(str(tiny_world), "layout:nlp:random", str(tmp_path / "cache"))
    again = part_cache(str(tiny_world), "layout:xla:random", str(tmp_path / "cache"))
    assert other["disk_mib"] > 0 and again["disk_mib"] == pytest.approx(out["disk_mib"])


def _rows() -> list[dict]:
    def row(stage: str, c: str, projected: float) -> dict:
        return {"stage": stage, "collection": c, "graphs": 1, "seconds": 1.0, "per_graph": projected,
                "real_graphs": 1, "projected": projected, "peak_mib": 100.0}

    return [row("gbdt fit", "tile:xla", 600.0),
            row("gnn-attn fit", "layout:xla:random", 5000.0), row("gnn-attn predict test", "layout:xla:random", 400.0),
            row("gnn-attn fit", "tile:xla", 3000.0), row("gnn-attn fit", "layout:nlp:default", 2000.0),
            row("gnn-attn fit", "layout:xla:default", 800.0), row("cache train (GNN features)", "layout:xla:default",
                                                                   200.0)]


def test_the_gnn_fits_go_largest_first_to_the_slot_that_frees_first():
    from benchmarks.scale import schedule

    slots, gnn = schedule(_rows(), 2)
    assert gnn == {"layout:xla:random": 5400.0, "tile:xla": 3000.0, "layout:nlp:default": 2000.0,
                   "layout:xla:default": 1000.0}
    # 5400 | 3000, then nlp (2000) to the slot at 3000, then xla:default (1000) to the slot at 5000
    assert slots == [[("layout:xla:random", 5400.0)],
                     [("tile:xla", 3000.0), ("layout:nlp:default", 2000.0), ("layout:xla:default", 1000.0)]]


def test_the_total_with_two_fits_at_once_is_the_other_stages_plus_the_longer_slot():
    from benchmarks.scale import format_projection

    text = format_projection(_rows(), jobs=2)
    # one at a time: 600 + 5400 + 3000 + 2000 + 1000 = 12,000 s = 3.33 h; two at once: 600 + max(5400, 6000) s
    assert "total, one at a time     3.33 h" in text
    assert "total (2 fits at once)   1.83 h" in text
    assert "slot 1: layout:xla:random 1.50 h = 1.50 h" in text
    assert "slot 2: tile:xla 0.83 h + layout:nlp:default 0.56 h + layout:xla:default 0.28 h = 1.67 h" in text


def test_the_model_part_fits_a_gnn_for_the_epochs_asked_and_reports_the_default(tiny_world, tmp_path):
    """The scale benchmark's GNN part: one epoch measured, the default epochs read from the settings tree."""
    from benchmarks.scale import part_model
    from models.registry import make_model

    out = part_model(str(tiny_world), "tile:xla", "gnn-attn", str(tmp_path / "cache"), str(tmp_path), 1, 1)
    assert out["fit"]["epochs_run"] == 1
    assert out["fit"]["networks"] == make_model("gnn-attn").train_config("tile:xla").run.seeds == 2
    assert out["fit"]["default_epochs"] == make_model("gnn-attn").train_config("tile:xla").train.epochs == 12
    assert out["predict_valid"]["configs"] > 0 and out["score"]["graphs"] > 0
