"""The official valid protocol: fixed config indices per valid layout graph (``--valid-indices``), scored as the
official ``layout_evaluate.py`` scores them (runtimes and predictions gathered at the listed indices, repeats
included, Kendall tau-b between them)."""

from __future__ import annotations

import json
import logging
import tomllib
from pathlib import Path

import numpy as np
import pytest
import torch
from scipy.stats import kendalltau

from competition import protocol as protocol_module
from competition.collections import Collection, Split, submission_id
from competition.dataroot import find_data_root
from competition.dataset import Dataset
from competition.labels import load_labels
from competition.metrics import graph_score, order_to_ranks
from competition.protocol import (
    DEFAULT_PROTOCOL,
    INDEX_FILES,
    OFFICIAL_DIR,
    EvalIndices,
    EvalIndicesError,
    ValidProtocol,
)
from competition.submission_checks import validate_submission
from competition.submission_format import write_submission
from competition.submission_reading import read_submission
from competition.submission_scoring import score_submission
from fastslow.board import format_leaderboard, read_rows
from fastslow.cli import main
from features.cache import pipeline_hash
from tests.test_reader import layout_arrays, write

XR = Collection.LAYOUT_XLA_RANDOM
UNET = "unet_3d.4x4.bf16"  # 481 configs: its 1,000 official indices repeat
INCEPTION = "inception_v3_batch_128_train"  # 1,000 distinct official indices, the largest 4,671
UNET_CONFIGS, INCEPTION_CONFIGS = 481, 4_700
ROOT = Path(__file__).resolve().parent.parent


def hand_tau(listed: np.ndarray, ranks: np.ndarray, runtimes: np.ndarray) -> float:
    """Kendall tau-b over every pair of listed positions, counted one pair at a time: (concordant - discordant) /
    sqrt(pairs not tied in ranks) / sqrt(pairs not tied in runtimes), in scipy's order of operations."""
    x, y = ranks[listed], runtimes[listed]
    i, j = np.triu_indices(listed.size, 1)
    sx, sy = np.sign(x[i] - x[j]), np.sign(y[i] - y[j])
    con, dis = int(((sx * sy) > 0).sum()), int(((sx * sy) < 0).sum())
    xtie, ytie, tot = int((sx == 0).sum()), int((sy == 0).sum()), i.size
    return float(min(1.0, max(-1.0, (con - dis) / np.sqrt(tot - xtie) / np.sqrt(tot - ytie))))


def runtimes_with_ties(c: int, seed: int) -> np.ndarray:
    """Runtimes of ``c`` configs drawn from few values, so that distinct configs tie too."""
    return np.random.default_rng(seed).integers(1, 60, c).astype(np.int64) * 1000


def layout_graph(c: int, runtime: np.ndarray) -> dict[str, np.ndarray]:
    arrays = layout_arrays(c=5)
    cfg = np.zeros((c, 2, 18), dtype=np.float32)
    cfg[:, 0, 0] = np.arange(c) % 6
    arrays.update(node_config_feat=cfg, config_runtime=runtime)
    return arrays


@pytest.fixture(scope="module")
def real_like(tmp_path_factory: pytest.TempPathFactory):
    """xla:random valid graphs named and sized as two real ones the official lists name, one graph not listed."""
    tmp = tmp_path_factory.mktemp("real-like")
    write(tmp, XR, layout_graph(UNET_CONFIGS, runtimes_with_ties(UNET_CONFIGS, 1)), stem=UNET, split="valid")
    write(tmp, XR, layout_graph(INCEPTION_CONFIGS, runtimes_with_ties(INCEPTION_CONFIGS, 2)), stem=INCEPTION,
          split="valid")
    write(tmp, XR, layout_graph(1_500, runtimes_with_ties(1_500, 3)), stem="not_listed", split="valid")
    write(tmp, XR, layout_arrays(), stem="small", split="train")
    return find_data_root(tmp)


def official_list(stem: str) -> np.ndarray:
    return np.array(json.loads((OFFICIAL_DIR / "xla_random.json").read_text())[stem], dtype=np.int64)


OFFICIAL = ValidProtocol(indices=EvalIndices.official())


# -- the shipped lists -------------------------------------------------------------------------------------------


def test_the_official_lists_ship_as_package_data():
    idx = EvalIndices.load("official")
    assert idx == EvalIndices.official() and idx.is_official and idx.name == "official"
    assert {c: len(v) for c, v in idx.lists.items()} == {
        Collection.LAYOUT_XLA_DEFAULT: 7, XR: 7, Collection.LAYOUT_NLP_DEFAULT: 20, Collection.LAYOUT_NLP_RANDOM: 20}
    assert {a.size for graphs in idx.lists.values() for a in graphs.values()} == {1000}
    unet = idx.listed(XR, UNET)
    assert (np.unique(unet).size, int(unet.min()), int(unet.max())) == (481, 0, 480)
    assert sum(np.unique(a).size < a.size for graphs in idx.lists.values() for a in graphs.values()) == 1
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    shipped = {p.name for p in OFFICIAL_DIR.iterdir()}
    assert shipped == {*INDEX_FILES.values(), "README.md"}
    assert {p.name for pattern in declared["competition.data.eval_indices"] for p in OFFICIAL_DIR.glob(pattern)} == shipped
    assert "Apache License, Version 2.0" in (OFFICIAL_DIR / "README.md").read_text()


def test_the_same_content_read_from_a_folder_is_the_official_protocol(tmp_path: Path):
    for name in INDEX_FILES.values():
        (tmp_path / name).write_bytes((OFFICIAL_DIR / name).read_bytes())
    assert EvalIndices.load(tmp_path).name == "official" and EvalIndices.load(tmp_path).source == str(tmp_path)
    (tmp_path / "nlp_random.json").unlink()  # three of four collections: another protocol
    other = EvalIndices.load(tmp_path)
    assert other != EvalIndices.official() and other.name == f"indices-{other.digest[:12]}"


# -- configs, picks, tag -----------------------------------------------------------------------------------------


def test_configs_are_the_distinct_listed_indices_and_picks_count_the_repeats():
    unet = official_list(UNET)
    rows = OFFICIAL.configs(XR, UNET, UNET_CONFIGS)
    assert np.array_equal(rows, np.arange(481))
    picks = OFFICIAL.picks(XR, UNET, UNET_CONFIGS)
    assert picks.size == 1000 and np.array_equal(rows[picks], unet)
    inception = official_list(INCEPTION)
    assert np.array_equal(OFFICIAL.configs(XR, INCEPTION, INCEPTION_CONFIGS), np.sort(inception))
    assert OFFICIAL.picks(XR, INCEPTION, INCEPTION_CONFIGS) is None  # no repeat: each listed config counts once
    # Not for tile, test or train graphs; an unlisted graph is scored on the seeded protocol.
    assert OFFICIAL.configs(XR, INCEPTION, INCEPTION_CONFIGS, Split.TEST) is None
    assert OFFICIAL.configs(Collection.TILE_XLA, INCEPTION, INCEPTION_CONFIGS) is None
    assert np.array_equal(OFFICIAL.configs(XR, "not_listed", 5000), DEFAULT_PROTOCOL.configs(XR, "not_listed", 5000))
    assert OFFICIAL.picks(XR, "not_listed", 5000) is None


def test_an_unlisted_graph_gets_one_note(monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture):
    monkeypatch.setattr(protocol_module, "_noted", set())
    with caplog.at_level(logging.WARNING, logger="competition.protocol"):
        OFFICIAL.configs(XR, "a", 5000)
        OFFICIAL.configs(XR, "b", 5000)
    assert caplog.messages == [
        "valid protocol: layout:xla:random:a is not listed in the official evaluation's index files (eval_indices); "
        "it and every other valid layout graph not listed there are scored on at most 1,000 fixed configs per "
        "valid layout graph (seed 0)"]


def test_tag_and_description_name_the_protocol(tmp_path: Path):
    assert DEFAULT_PROTOCOL.tag == "1000@0" and ValidProtocol(None).tag == "all"  # unchanged without index files
    assert DEFAULT_PROTOCOL.describe() == "at most 1,000 fixed configs per valid layout graph (seed 0)"
    assert OFFICIAL.tag == "official"
    assert ValidProtocol(500, 3, EvalIndices.official()).tag == "official+500@3"
    assert ValidProtocol(None, 0, EvalIndices.official()).tag == "official+all"
    assert OFFICIAL.describe() == (
        "the config indices in the official evaluation's index files (eval_indices) for the valid layout graphs "
        "listed there, counted as the official evaluation counts them (repeats included); other graphs: at most "
        "1,000 fixed configs per valid layout graph (seed 0)")
    (tmp_path / "xla_random.json").write_text('{"g": [0, 1, 1]}')
    mine = ValidProtocol(indices=EvalIndices.load(tmp_path))
    assert mine.tag == f"indices-{mine.indices.digest[:12]}" and f"index files of {tmp_path} " in mine.describe()
    assert ValidProtocol.parse("all", indices=EvalIndices.official()) == ValidProtocol(None, 0, EvalIndices.official())
    # Caches keyed on the protocol never mix the two.
    assert pipeline_hash("p", None, OFFICIAL) != pipeline_hash("p", None, DEFAULT_PROTOCOL)


# -- the score: the official evaluation's tau, by hand ------------------------------------------------------------


@pytest.mark.parametrize(("stem", "configs"), [(UNET, UNET_CONFIGS), (INCEPTION, INCEPTION_CONFIGS)])
def test_a_graph_is_scored_on_its_listed_indices_as_the_official_evaluation_does(real_like, tmp_path: Path,
                                                                                stem: str, configs: int):
    sid = submission_id(XR, stem)
    runtimes = runtimes_with_ties(configs, 1 if stem == UNET else 2).astype(np.float64)
    rng = np.random.default_rng(5)
    scores = runtimes + rng.normal(0, 15_000, configs)  # a noisy but informative model, no tied scores
    others = {submission_id(XR, s): np.arange(c, dtype=np.float64)
              for s, c in [(UNET, UNET_CONFIGS), (INCEPTION, INCEPTION_CONFIGS), ("not_listed", 1_500)] if s != stem}
    path = write_submission(tmp_path / "valid.csv", {sid: scores, **others})  # every config, ranked
    order = read_submission(path)[sid]
    listed = official_list(stem)
    expected = hand_tau(listed, order_to_ranks(order), runtimes)
    # what layout_evaluate.py computes: both sides gathered at the listed indices, scipy's tau-b
    assert expected == kendalltau(order_to_ranks(order)[listed], runtimes[listed]).statistic
    report = score_submission(path, real_like, Split.VALID, protocol=OFFICIAL)
    graph = {g.stem: g for g in report.collections[XR].graphs}[stem]
    assert graph.score == expected and graph.num_configs == np.unique(listed).size
    # The row listing the distinct listed configs only (what fastslow writes under this protocol) scores the same.
    rows = OFFICIAL.configs(XR, stem, configs)
    sub = write_submission(tmp_path / "sub.csv", {sid: scores[rows], **others}, {sid: rows})
    again = score_submission(sub, real_like, Split.VALID, protocol=OFFICIAL)
    assert {g.stem: g.score for g in again.collections[XR].graphs}[stem] == expected
    distinct = hand_tau(np.unique(listed), order_to_ranks(order), runtimes)
    if stem == UNET:  # each config once is not the official figure
        assert distinct != expected
    else:
        assert distinct == expected


def test_labels_and_datasets_carry_the_protocol(real_like):
    labels = load_labels(real_like, [XR], Split.VALID, OFFICIAL)
    unet = labels[submission_id(XR, UNET)]
    assert np.array_equal(unet.rows, np.arange(481)) and np.array_equal(unet.rows[unet.picks], official_list(UNET))
    assert labels[submission_id(XR, INCEPTION)].picks is None
    assert labels[submission_id(XR, "not_listed")].rows.size == 1000 and labels.protocol == OFFICIAL
    data = Dataset.open(real_like, [XR], protocol=OFFICIAL)[XR]  # what early stopping is given
    assert data.protocol is OFFICIAL and data.eval.stems == [INCEPTION, "not_listed", UNET]


# -- refusals ----------------------------------------------------------------------------------------------------


def test_an_index_out_of_range_is_refused_naming_file_graph_and_index(real_like, tmp_path: Path):
    (tmp_path / "xla_random.json").write_text(json.dumps({UNET: [0, 5, 481, 2]}))
    bad = ValidProtocol(indices=EvalIndices.load(tmp_path))
    message = (f"{tmp_path / 'xla_random.json'}: graph '{UNET}' lists config index 481 (position 2), out of range "
               f"for the 481 configs of layout:xla:random:{UNET}; these index files do not belong to this data: pass "
               "other --valid-indices, or leave the option out")
    sub = write_submission(tmp_path / "sub.csv", {submission_id(XR, UNET): np.arange(UNET_CONFIGS)})
    for call in (lambda: load_labels(real_like, [XR], Split.VALID, bad),
                 lambda: Dataset.open(real_like, [XR], protocol=bad),
                 lambda: validate_submission(sub, real_like, Split.VALID, protocol=bad)):
        with pytest.raises(EvalIndicesError) as info:
            call()
        assert str(info.value) == message


BAD_FILES = [
    ("{", "expected JSON mapping graph names to lists of config indices; found invalid JSON (line 1, column 2: "
          "Expecting property name enclosed in double quotes)"),
    ("[1, 2]", "expected a JSON object mapping graph names to lists of config indices; found a JSON list"),
    ('{"g": 3}', "graph 'g': expected a list of config indices (non-negative integers); found a JSON int"),
    ('{"g": [0, 1.5]}', "graph 'g': expected a list of config indices (non-negative integers); found 1.5 among them"),
    ('{"g": [0, true]}', "graph 'g': expected a list of config indices (non-negative integers); found True among "
                         "them"),
    ('{"g": [0, 4, -3]}', "graph 'g': expected non-negative config indices; found -3 at position 2"),
    ('{"g": [7, 7]}', "graph 'g': expected at least 2 distinct config indices to rank; found 1"),
    ('{"g": [0, 1], "g": [1, 2]}', "expected each graph listed once; found 'g' twice"),
    (b"\xff\xfe", "expected JSON text; found byte 0 undecodable (invalid start byte)"),
]


@pytest.mark.parametrize(("content", "problem"), BAD_FILES)
def test_a_bad_index_file_is_refused_in_one_line(tmp_path: Path, content: str | bytes, problem: str):
    path = tmp_path / "xla_default.json"
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    with pytest.raises(EvalIndicesError) as info:
        EvalIndices.load(tmp_path)
    assert str(info.value) == f"{path}: {problem}"


def test_a_missing_or_empty_folder_is_refused(tmp_path: Path):
    with pytest.raises(EvalIndicesError) as info:
        EvalIndices.load(tmp_path / "absent")
    assert str(info.value) == (
        f"--valid-indices {tmp_path / 'absent'}: expected a folder of index files (xla_default.json, "
        "xla_random.json, nlp_default.json, nlp_random.json) or 'official'; found no such folder")
    (tmp_path / "other.json").write_text("{}")
    with pytest.raises(EvalIndicesError) as info:
        EvalIndices.load(tmp_path)
    assert str(info.value) == (f"--valid-indices {tmp_path}: expected at least one of xla_default.json, "
                               "xla_random.json, nlp_default.json, nlp_random.json in the folder; found none")


# -- the command line on the tiny world ---------------------------------------------------------------------------


TINY_LISTS = {  # the tiny world's valid graphs (seed 7): 49 and 73 configs in xla:default, 63 and 77 in nlp:random
    "xla_default.json": {"tf2_bert_pretrain_dynamic_batch_size_1": [*range(49), 0, 1, 2, 48, 48],
                         "unet3d_batch_4_test_0": [5, 3, 70, 3, 9, 1, 72, 0]},
    "nlp_random.json": {"small_bert_bert_en_uncased_L-2_H-128_A-2_batch_size_16_test_1": [4, 2, 62, 2, 2, 30]},
}


@pytest.fixture
def tiny_indices(tmp_path: Path) -> Path:
    folder = tmp_path / "indices"
    folder.mkdir()
    for name, lists in TINY_LISTS.items():
        (folder / name).write_text(json.dumps(lists))
    return folder


def test_score_and_validate_on_the_tiny_world_with_hand_made_indices(tiny_world: Path, tiny_indices: Path,
                                                                      tmp_path: Path, capsys, monkeypatch, caplog):
    monkeypatch.setattr(protocol_module, "_noted", set())
    caplog.set_level(logging.WARNING, logger="competition.protocol")
    root = find_data_root(tiny_world)
    every = load_labels(root, list(Collection), Split.VALID, ValidProtocol(None))
    rng = np.random.default_rng(11)
    path = write_submission(tmp_path / "valid.csv", {sid: rng.normal(size=lab.num_configs)
                                                     for sid, lab in every.items()})
    orders = read_submission(path)
    board = tmp_path / "lb.csv"
    args = ["--data", str(tiny_world), "--split", "valid", "--valid-indices", str(tiny_indices)]
    assert main(["validate", str(path), *args]) == 0
    assert main(["score", str(path), *args, "--leaderboard", str(board)]) == 0
    out, err = capsys.readouterr()
    assert len(caplog.messages) == 1 and caplog.messages[0].startswith(  # one note per process
        "valid protocol: layout:nlp:default:small_bert_bert_en_uncased_L-2_H-128_A-2_batch_size_16_test_1 is not "
        f"listed in the index files of {tiny_indices}; it and every other valid layout graph not listed there")
    protocol = ValidProtocol(indices=EvalIndices.load(tiny_indices))
    row = read_rows(board)[0]
    assert row["protocol"] == protocol.tag == f"indices-{protocol.indices.digest[:12]}"
    assert f"valid[{protocol.tag}]" in format_leaderboard(read_rows(board))
    assert f"scored on the config indices in the index files of {tiny_indices} for the valid layout graphs" in out
    for collection in (Collection.LAYOUT_XLA_DEFAULT, Collection.LAYOUT_NLP_RANDOM):
        taus = []
        for sid, lab in every.items():
            if lab.collection != collection:
                continue
            listed = TINY_LISTS[INDEX_FILES[collection]].get(lab.stem)
            if listed is None:  # not listed: the seeded protocol, every config of a graph this small
                listed = range(lab.num_configs)
            taus.append(hand_tau(np.array(listed), order_to_ranks(orders[sid]), lab.target()))
        assert row[collection.value] == f"{np.mean(taus):.6f}"
        assert score_submission(path, root, Split.VALID, protocol=protocol).scores()[collection] == np.mean(taus)


@pytest.mark.parametrize("command", ["score", "validate"])
def test_bad_index_files_end_the_command_in_one_line(tiny_world: Path, tmp_path: Path, capsys, command: str):
    folder = tmp_path / "indices"
    folder.mkdir()
    (folder / "nlp_default.json").write_text('{"g": [0, -1]}')
    sub = tmp_path / "s.csv"
    sub.write_text("ID,TopConfigs\n")
    code = main([command, str(sub), "--data", str(tiny_world), "--split", "valid", "--valid-indices", str(folder),
                 "--leaderboard", str(tmp_path / "lb.csv")][: None if command == "score" else -2])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err
    assert err == (f"error: {folder / 'nlp_default.json'}: graph 'g': expected non-negative config indices; found -1 "
                   "at position 1\n")


def test_an_index_out_of_range_ends_the_command_in_one_line(tiny_world: Path, tmp_path: Path, capsys):
    folder = tmp_path / "indices"
    folder.mkdir()
    (folder / "xla_default.json").write_text('{"tf2_bert_pretrain_dynamic_batch_size_1": [0, 49]}')
    code = main(["submit", "--data", str(tiny_world), "--models", "random", "--out-dir", str(tmp_path / "out"),
                 "--no-progress", "--valid-indices", str(folder)])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err
    stem = "tf2_bert_pretrain_dynamic_batch_size_1"
    assert err == (f"error: {folder / 'xla_default.json'}: graph '{stem}' lists config index 49 "
                   f"(position 1), out of range for the 49 configs of layout:xla:default:{stem}; these "
                   "index files do not belong to this data: pass other --valid-indices, or leave the option out\n")


def test_submit_fits_stops_early_and_ensembles_on_the_official_protocol(tiny_world: Path, tiny_indices: Path,
                                                                       tmp_path: Path, capsys):
    out = tmp_path / "out"
    assert main(["submit", "--data", str(tiny_world), "--models", "random", "default-first", "gbdt", "--out-dir",
                 str(out), "--no-progress", "--valid-indices", str(tiny_indices)]) == 0
    tag = ValidProtocol(indices=EvalIndices.load(tiny_indices)).tag
    rows = read_rows(out / "leaderboard.csv")
    assert [(r["producer"], r["split"], r["protocol"]) for r in rows] == [
        ("random", "valid", tag), ("default-first", "valid", tag), ("gbdt", "valid", tag), ("ensemble", "valid", tag),
        ("ensemble", "test", "")]
    assert json.loads((out / "submission.json").read_text())["protocol"] == tag
    assert f"valid protocol: the config indices in the index files of {tiny_indices}" in capsys.readouterr().out


# -- early stopping and the ensemble count repeats as the official evaluation does --------------------------------


def test_gnn_early_stopping_takes_its_metric_over_the_listed_indices(tiny_world: Path, tiny_indices: Path,
                                                                      tmp_path: Path, monkeypatch):
    """The GNN's valid items carry the protocol's picks, and its validation pass scores each graph over them."""
    from competition.dataset import open_collection
    from models.gnn import model as gnn_model
    from models.gnn.model import GNNModel
    from models.gnn.steps import evaluate, predict_scores

    protocol = ValidProtocol(indices=EvalIndices.load(tiny_indices))
    data = open_collection(find_data_root(tiny_world), Collection.LAYOUT_XLA_DEFAULT, protocol=protocol)
    seen: list = []
    real_train = gnn_model.train

    def spy(cfg, train_items, valid_items, **kwargs):
        seen.extend(valid_items)
        return real_train(cfg, train_items, valid_items, **kwargs)

    monkeypatch.setattr(gnn_model, "train", spy)
    model = GNNModel(hidden=8, layers=1, epochs=1, steps_per_graph=1, configs_per_graph=8, device="cpu",
                     runs_dir=None, cache_dir=str(tmp_path / "cache")).fit(data, progress=False)
    lists = TINY_LISTS["xla_default.json"]
    by_key = {it.key: it for it in seen}
    for stem, listed in lists.items():
        distinct = np.unique(listed)
        assert by_key[stem].num_configs == distinct.size
        np.testing.assert_array_equal(by_key[stem].picks, np.searchsorted(distinct, listed))
    net = model.network()
    cfg = model.train_config(Collection.LAYOUT_XLA_DEFAULT)
    item = by_key["unet3d_batch_4_test_0"]
    scores = predict_scores(net, item.segments, item.config_feat, batch=cfg.predict.predict_batch)
    official = graph_score("layout", item.y.numpy(), scores=scores, picks=item.picks)
    assert evaluate(net, [item], cfg, torch.device("cpu")) == official
    once = graph_score("layout", item.y.numpy(), scores=scores)
    assert official != once  # the repeats move this graph's tau: the picks are what is scored


def test_the_ensemble_fits_on_the_listed_indices(tmp_path: Path):
    """Member scores (and so the choice) are taken over the picks, repeats included, when given."""
    from models.ensemble import Ensemble

    y = np.array([1.0, 2.0, 3.0, 4.0, 5.0])
    sid = submission_id(Collection.LAYOUT_XLA_DEFAULT, "g")
    preds = {"a": {sid: np.array([1.0, 2.0, 3.0, 5.0, 4.0])}, "b": {sid: np.array([2.0, 1.0, 3.0, 4.0, 5.0])}}
    picks = np.array([0, 1, 1, 1, 2, 3, 4])
    plain = Ensemble(method="mean").fit(preds, {sid: y})
    counted = Ensemble(method="mean").fit(preds, {sid: y}, picks={sid: picks})
    for m in ("a", "b"):
        assert plain.member_scores_["layout:xla:default"][m] == graph_score("layout", y, scores=preds[m][sid])
        assert counted.member_scores_["layout:xla:default"][m] == graph_score("layout", y, scores=preds[m][sid],
                                                                              picks=picks)
    assert counted.member_scores_ != plain.member_scores_
