"""The submission format: writing, reading, validation against the tiny world, offline scoring."""

from __future__ import annotations

import csv
import re
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import kendalltau

from competition.collections import Collection, Split, submission_id
from competition.dataroot import find_data_root, list_graphs, load_secret_runtime
from competition.labels import HiddenLabelsError, load_labels
from competition.reader import load_graph
from competition.submission_checks import validate_submission
from competition.submission_format import (
    SubmissionError,
    SubmissionProblem,
    orders_text,
    submission_text,
    write_submission,
)
from competition.submission_reading import read_submission
from competition.submission_scoring import score_submission


def _secret_runtimes(root, split: Split = Split.TEST) -> dict[str, np.ndarray]:
    return load_labels(root, list(Collection), split).targets()


def _rows(path: Path) -> list[list[str]]:
    with open(path, newline="") as f:
        return list(csv.reader(f))


def _rewrite(path: Path, rows: list[list[str]]) -> Path:
    path.write_text("\n".join(",".join(r) for r in rows) + "\n")
    return path


@pytest.fixture()
def perfect(tiny_world: Path, tmp_path: Path) -> Path:
    return write_submission(tmp_path / "perfect.csv", _secret_runtimes(find_data_root(tiny_world)))


# -- writing and reading ---------------------------------------------------------------------------------------


def test_top_configs_of_tile_and_layout_rows():
    scores = [0.5, 0.1, 0.5, 0.0, 0.9, 0.2, 0.5]
    text = submission_text({"tile:xla:a": scores, "tile:xla:b": [2.0, 1.0], "layout:nlp:random:c": scores})
    assert text == "ID,TopConfigs\nlayout:nlp:random:c,3;1;5;0;2;6;4\ntile:xla:a,3;1;5;0;2\ntile:xla:b,1;0\n"


def test_write_sorts_rows_and_rejects_bad_ids(tmp_path: Path):
    path = write_submission(tmp_path / "s.csv", [("tile:xla:b", [1, 0]), ("layout:xla:default:a", [0, 1])])
    assert path.read_text() == "ID,TopConfigs\nlayout:xla:default:a,0;1\ntile:xla:b,1;0\n"
    with pytest.raises(ValueError, match="twice"):
        write_submission(tmp_path / "t.csv", [("tile:xla:b", [1]), ("tile:xla:b", [2])])
    with pytest.raises(ValueError, match="not one of"):
        write_submission(tmp_path / "t.csv", {"tile:tpu:b": [1]})
    assert not (tmp_path / "t.csv").exists()
    (tmp_path / "o.csv").write_text(orders_text({"layout:nlp:random:x": [2, 0, 1]}))
    assert read_submission(tmp_path / "o.csv")["layout:nlp:random:x"].tolist() == [2, 0, 1]


ids = st.sampled_from(list(Collection)).flatmap(
    lambda c: st.from_regex(r"[0-9a-f_]{1,12}", fullmatch=True).map(lambda stem: submission_id(c, stem)))
score_arrays = st.lists(st.sampled_from([0.0, 0.5, 1.0, -2.0, 3.25, 1e9]), min_size=1, max_size=30)


@settings(max_examples=60, deadline=None)
@given(st.dictionaries(ids, score_arrays, min_size=1, max_size=6))
def test_write_read_round_trip(tmp_path_factory, predictions):
    path = write_submission(tmp_path_factory.mktemp("rt") / "s.csv", predictions)
    back = read_submission(path)
    assert list(back) == sorted(predictions)
    for sid, scores in predictions.items():
        order = np.argsort(np.asarray(scores), kind="stable")
        got = back[sid]
        assert got.dtype == np.int64
        if sid.startswith("tile:"):
            assert len(got) == min(5, len(scores))
            assert got.tolist() == order[:5].tolist()
        else:
            assert got.tolist() == order.tolist()


@pytest.mark.parametrize(("text", "pattern"), [
    ("", r"header: empty file"),
    ("ID,Top\n", r"header: expected the header ID,TopConfigs; found ID,Top \(missing column\(s\) \['TopConfigs'\]; "
                 r"extra column\(s\) \['Top'\]\)"),
    ("ID,TopConfigs,X\n", r"header: .*extra column\(s\) \['X'\]"),
    ("ID,TopConfigs\ntile:xla:a,\n", r"row 1 \[tile:xla:a\]: empty TopConfigs"),
    ("ID,TopConfigs\ntile:xla:a,1;x;2.5\n", r"row 1 \[tile:xla:a\]: non-integer token\(s\) 'x', '2.5'"),
    ("ID,TopConfigs\ntile:xla:a,1;;2\n", r"row 1 \[tile:xla:a\]: non-integer token\(s\) ''"),
    ("ID,TopConfigs\ntile:xla:a,1;\u00b2;+3\n", r"row 1 \[tile:xla:a\]: non-integer token\(s\) '\u00b2', '\+3'"),
    ("ID,TopConfigs\ntile:xla:a,0\ntile:xla:b,3;-1\n", r"row 2 \[tile:xla:b\]: negative index\(es\) -1"),
    ("ID,TopConfigs\ntile:xla:a,0\ntile:xla:a,1\n", r"row 2 \[tile:xla:a\]: duplicated ID \(first on row 1\)"),
    ("ID,TopConfigs\ntile:tpu:a,0\n", r"row 1 \[tile:tpu:a\]: ID 'tile:tpu:a' is not one of"),
    ("ID,TopConfigs\nlayout:xla:a,0\n", r"row 1 \[layout:xla:a\]: ID"),
    ("ID,TopConfigs\ntile:xla:a,0,1\n", r"row 1 \[tile:xla:a\]: expected 2 fields; found 3"),
])
def test_read_reports_malformed_files(tmp_path: Path, text: str, pattern: str):
    path = tmp_path / "s.csv"
    path.write_text(text)
    with pytest.raises(SubmissionError, match=pattern) as info:
        read_submission(path)
    assert isinstance(info.value, ValueError) and info.value.problems
    assert str(path) in str(info.value)


def test_error_message_truncates_many_problems(tmp_path: Path):
    path = tmp_path / "s.csv"
    path.write_text("ID,TopConfigs\n" + "".join(f"tile:xla:g{i},x\n" for i in range(50)))
    with pytest.raises(SubmissionError) as info:
        read_submission(path)
    assert info.value.count == 50 and len(info.value.problems) == 21  # 20 of the kind, then its summary
    assert info.value.problems[-1].more == 30
    message = str(info.value)
    assert "50 problem(s)" in message and "... and 30 more" in message and "row 20 [tile:xla:g19]" in message
    assert "row 21 " not in message


# -- validation against the data -------------------------------------------------------------------------------


def test_perfect_submission_is_valid(tiny_world: Path, perfect: Path):
    root = find_data_root(tiny_world)
    assert validate_submission(perfect, root) == []
    assert validate_submission(perfect, root, Split.TEST, sample_submission=root.sample_submission) == []


def _messages(problems: list[SubmissionProblem]) -> list[str]:
    return [str(p) for p in problems]


def test_every_validation_error_names_row_and_id(tiny_world: Path, perfect: Path, tmp_path: Path):
    root = find_data_root(tiny_world)
    rows = _rows(perfect)
    header, missing_id, body = rows[0], rows[1][0], rows[2:]  # the first ID goes missing
    layout_row = next(i for i, r in enumerate(body) if r[0].startswith("layout:"))
    # the tile graph with the most configs, so that two indices are too few
    tile_row = max((i for i, r in enumerate(body) if r[0].startswith("tile:")),
                   key=lambda i: len(load_secret_runtime(root, Collection.TILE_XLA, body[i][0].split(":")[-1])
                                     .config_runtime))
    lid, tid = body[layout_row][0], body[tile_row][0]
    c_tile = len(load_secret_runtime(root, Collection.TILE_XLA, tid.split(":")[-1]).config_runtime)
    assert c_tile > 5, "the tiny world has a tile test graph with more than 5 configs"
    layout = [int(x) for x in body[layout_row][1].split(";")]
    c_layout = len(layout)
    bad = [list(r) for r in body]
    bad[layout_row][1] = ";".join("0" if x == 1 else str(x) for x in layout)  # 0 twice, 1 missing
    bad[tile_row][1] = "0;1"
    bad.append(["tile:xla:nosuchgraph", "0;1;2;3;4"])
    bad.append([lid, "0"])
    path = _rewrite(tmp_path / "bad.csv", [header] + bad)
    msgs = _messages(validate_submission(path, root))
    n_layout, n_tile = layout_row + 1, tile_row + 1
    assert msgs == [
        *sorted([f"row {n_layout} [{lid}]: duplicated index(es): 0",
                 f"row {n_layout} [{lid}]: not a permutation of range({c_layout}): {c_layout} indices given, "
                 "missing 1 (1)",
                 f"row {n_tile} [{tid}]: too few indices: 2 given, 5 expected (min(5, C) with C = {c_tile})"],
                key=lambda m: int(m.split()[1])),
        f"row {len(bad) - 1} [tile:xla:nosuchgraph]: unknown ID: no such graph in the test split",
        f"row {len(bad)} [{lid}]: duplicated ID (first on row {n_layout})",
        f"missing row [{missing_id}]: expected ID missing from the submission",
    ]


def test_out_of_range_and_tile_duplicates(tiny_world: Path, perfect: Path, tmp_path: Path):
    root = find_data_root(tiny_world)
    rows = _rows(perfect)
    for r in rows[1:]:
        if r[0].startswith("tile:"):
            r[1] = "0;0;99999;1;2"
        else:
            r[1] = r[1] + ";100000"
    msgs = _messages(validate_submission(_rewrite(tmp_path / "s.csv", rows), root))
    assert sum("index(es) out of range" in m and "99999" in m for m in msgs) == 2
    assert sum("duplicated index(es): 0" in m for m in msgs) == 2
    assert sum("index(es) out of range" in m and "100000" in m for m in msgs) == 8
    assert all(re.match(r"row \d+ \[(tile|layout):[a-z:]+:[0-9a-f]+\]: ", m) for m in msgs), msgs


def test_bad_header_stops_validation(tiny_world: Path, tmp_path: Path):
    path = tmp_path / "s.csv"
    path.write_text("Id,TopConfigs\ntile:xla:a,0\n")
    assert [p.row for p in validate_submission(path, find_data_root(tiny_world))] == [0]


def test_valid_split_expects_the_graph_files(tiny_world: Path, tmp_path: Path):
    root = find_data_root(tiny_world)
    orders = {submission_id(c, p.stem): [0] for c in Collection for p in list_graphs(root, c, Split.VALID)}
    path = tmp_path / "v.csv"
    path.write_text(orders_text(orders))
    problems = validate_submission(path, root, Split.VALID)
    # every valid graph has 2 configs or more: each row is one problem, whatever its collection
    assert sorted(p.id for p in problems) == sorted(orders)
    assert all(("not a permutation" in p.message) == p.id.startswith("layout:") for p in problems)
    only_tile = validate_submission(path, root, Split.VALID, collections=[Collection.TILE_XLA])
    counts = [load_graph(p).num_configs for p in list_graphs(root, Collection.TILE_XLA, Split.VALID)]
    assert [p.message for p in only_tile] == [
        f"too few indices: 1 given, {min(5, c)} expected (min(5, C) with C = {c})" for c in counts]


# -- scoring ---------------------------------------------------------------------------------------------------


def test_score_perfect_and_reversed_on_the_test_split(tiny_world: Path, perfect: Path, tmp_path: Path):
    root = find_data_root(tiny_world)
    report = score_submission(perfect, root, Split.TEST)
    assert report.complete
    assert report.scores()[Collection.TILE_XLA] == 1.0
    truth = _secret_runtimes(root)
    for c in Collection:
        for g in report.collections[c].graphs:
            if c.is_layout:
                order = np.argsort(truth[g.id], kind="stable")
                ranks = np.empty(order.size)
                ranks[order] = np.arange(order.size)
                assert g.score == pytest.approx(kendalltau(ranks, truth[g.id]).statistic)
                assert g.score == pytest.approx(1.0, abs=0.02)
            assert g.top1_err == 0.0
    reversed_ = write_submission(tmp_path / "rev.csv", {k: -v for k, v in truth.items()})
    rev = score_submission(reversed_, root, Split.TEST)
    for c in Collection:
        if c.is_layout:
            for g in rev.collections[c].graphs:
                assert g.score == pytest.approx(-1.0, abs=0.02) and g.opa == pytest.approx(0.0, abs=0.01)
    assert rev.scores()[Collection.TILE_XLA] < 1.0


def test_score_valid_split_from_files_and_partial(tiny_world: Path, tmp_path: Path):
    root = find_data_root(tiny_world)
    from competition.reader import load_graph

    preds = {submission_id(Collection.TILE_XLA, p.stem): load_graph(p).normalized_runtime()
             for p in list_graphs(root, Collection.TILE_XLA, Split.VALID)}
    report = score_submission(write_submission(tmp_path / "v.csv", preds), root, Split.VALID)
    assert list(report.collections) == [Collection.TILE_XLA]
    assert not report.complete and report.combined == 1.0


def test_invalid_submission_is_not_scored(tiny_world: Path, tmp_path: Path):
    path = tmp_path / "s.csv"
    path.write_text("ID,TopConfigs\ntile:xla:nosuch,0\n")
    with pytest.raises(SubmissionError, match="unknown ID"):
        score_submission(path, find_data_root(tiny_world), Split.TEST)


def test_hidden_test_labels_raise_a_clear_error(tiny_world: Path, perfect: Path, tmp_path: Path):
    import shutil

    copy = tmp_path / "world"
    shutil.copytree(tiny_world, copy, ignore=shutil.ignore_patterns("secret"))
    with pytest.raises(HiddenLabelsError, match="score the valid split instead"):
        score_submission(perfect, find_data_root(copy), Split.TEST)
