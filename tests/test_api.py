"""The notebook API (``import fastslow``): the functions of the commands of the same names, tables as DataFrames."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import fastslow
from competition.collections import Collection, Split
from competition.dataroot import find_data_root, list_graphs
from competition.labels import load_labels
from competition.submission_format import SubmissionError
from competition.submission_scoring import score_submission

LAYOUT = Collection.LAYOUT_NLP_RANDOM


def test_the_package_gives_the_notebook_functions():
    assert {"submit", "train", "predict", "score", "leaderboard"} <= set(fastslow.__all__)
    assert fastslow.submit.__module__ == "fastslow.api"


def test_submit_returns_the_valid_table_and_leaves_what_the_command_leaves(tiny_world: Path, tmp_path: Path):
    out = tmp_path / "out"
    frame = fastslow.submit(tiny_world, models=["random", "default-first"], out_dir=out, runs_dir=tmp_path / "runs",
                            jobs=1, progress=False)
    assert list(frame.index) == [c.value for c in Collection] + ["combined"]
    assert list(frame.columns) == ["random", "default-first", "ensemble", "submission (test)"]
    assert frame.attrs["best"] in ("random", "default-first", "ensemble")
    assert frame.attrs["submission"] == str(out / "submission.csv") and (out / "submission.csv").is_file()
    # The combined row is the mean of the collections, as the competition scores it.
    for column in frame.columns:
        assert frame.loc["combined", column] == pytest.approx(frame[column].iloc[:-1].mean())
    # Each model's column is its valid file scored again (on the same protocol's configs).
    again = fastslow.score(out / "valid-random.csv", tiny_world, split="valid")
    assert again["valid-random.csv"].to_list() == pytest.approx(frame["random"].to_list())
    # The leaderboard holds a row per scoring: the models and their ensemble on valid, the submission on test.
    board = fastslow.leaderboard(out / "leaderboard.csv")
    assert sorted(zip(board["producer"], board["split"], strict=True)) == sorted(
        [("random", "valid"), ("default-first", "valid"), ("ensemble", "valid"), (frame.attrs["best"], "test")])
    assert board["combined"].dtype == np.float64 and str(board["time"].dtype).startswith("datetime64")
    test = board[board["split"] == "test"].iloc[0]
    assert test["combined"] == pytest.approx(frame.loc["combined", "submission (test)"])


def test_score_per_graph_has_a_row_per_graph_whose_mean_is_the_collection_score(tiny_world: Path,
                                                                                tmp_path: Path):
    out = tmp_path / "out"
    fastslow.submit(tiny_world, models=["default-first"], out_dir=out, runs_dir=tmp_path / "runs", jobs=1,
                    progress=False)
    submission = out / "submission.csv"
    graphs = fastslow.score(submission, tiny_world, per_graph=True)
    root = find_data_root(tiny_world)
    assert sorted(graphs["id"]) == sorted(f"{c.value}:{p.stem}" for c in Collection
                                          for p in list_graphs(root, c, Split.TEST))
    labels = load_labels(root, list(Collection), Split.TEST)
    expected = score_submission(submission, root, Split.TEST, labels=labels).scores()
    means = graphs.groupby("collection")["score"].mean()
    assert {c: means[c.value] for c in Collection} == pytest.approx(expected)
    table = fastslow.score(submission, tiny_world)
    assert table.loc["combined", "submission.csv"] == pytest.approx(float(np.mean(list(expected.values()))))


def test_score_refuses_an_invalid_submission_naming_its_problems(tiny_world: Path, tmp_path: Path):
    bad = tmp_path / "bad.csv"
    bad.write_text("ID,TopConfigs\ntile:xla:nothing,0;1;2;3;4\n")
    with pytest.raises(SubmissionError, match="bad.csv"):
        fastslow.score(bad, tiny_world)


def test_train_then_predict_ranks_every_config_of_the_test_split(tiny_world: Path, tmp_path: Path):
    runs = tmp_path / "runs"
    trained = fastslow.train("default-first", tiny_world, collections=["tile:xla", LAYOUT.value], runs_dir=runs,
                             progress=False)
    assert list(trained["collection"]) == ["tile:xla", LAYOUT.value]
    assert all(Path(p).is_file() for p in trained["saved"]) and not trained["valid"].isna().any()
    assert (trained["graphs"] > 0).all() and (trained["seconds"] >= 0).all()

    root = find_data_root(tiny_world)
    files = [p for c in (Collection.TILE_XLA, LAYOUT) for p in list_graphs(root, c, Split.TEST)]
    ranks = fastslow.predict(files=files, models=["default-first"], runs_dir=runs, submissions=tmp_path,
                             progress=False)
    assert list(ranks.columns) == ["id", "config", "score", "rank"] and len(ranks)
    for _, graph in ranks.groupby("id"):
        n = len(graph)
        assert sorted(graph["config"]) == list(range(n)) and sorted(graph["rank"]) == list(range(n))
        # rank 0 is the config with the lowest score (predicted fastest), and ranks follow the scores.
        ordered = graph.sort_values("rank")
        assert ordered["score"].is_monotonic_increasing
    # default-first puts each layout graph's default config (all -1 features: its row 0 in these files) first
    # or tied first.
    layout = ranks[ranks["id"].str.startswith(LAYOUT.value)]
    firsts = layout[layout["rank"] == 0]
    assert len(firsts) == len(list_graphs(root, LAYOUT, Split.TEST))


def test_the_tables_of_an_empty_leaderboard_and_a_missing_one(tmp_path: Path):
    assert fastslow.leaderboard(tmp_path / "none.csv").empty


def test_collection_scores_by_hand():
    from competition.metrics import CollectionResult, GraphResult, SubmissionScores

    def graph(c: Collection, stem: str, value: float) -> GraphResult:
        return GraphResult(id=f"{c.value}:{stem}", collection=c, stem=stem, score=value, num_configs=3,
                           opa=math.nan, top1_err=0.0, top5_err=0.0, top10_err=0.0)

    tile, layout = Collection.TILE_XLA, Collection.LAYOUT_XLA_RANDOM
    report = SubmissionScores({tile: CollectionResult(tile, [graph(tile, "a", 0.5), graph(tile, "b", 1.0)]),
                               layout: CollectionResult(layout, [graph(layout, "c", -0.5)])})
    frame = fastslow.collection_scores({"m": report})
    assert frame["m"].to_dict() == {"tile:xla": 0.75, "layout:xla:random": -0.5, "combined": 0.125}
    per_graph = fastslow.graph_scores(report)
    assert list(per_graph["id"]) == ["tile:xla:a", "tile:xla:b", "layout:xla:random:c"]
    assert isinstance(per_graph, pd.DataFrame) and list(per_graph["score"]) == [0.5, 1.0, -0.5]
