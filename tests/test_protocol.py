"""The valid protocol (a fixed subset of each valid layout graph's configs) and submission rows of real size."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from competition.collections import Collection, Split, submission_id
from competition.dataroot import find_data_root, list_graphs
from competition.labels import load_labels
from competition.metrics import kendall_tau
from competition.protocol import DEFAULT_PROTOCOL, ValidProtocol
from competition.reader import load_graph
from competition.stats import oracle_scores
from competition.submission_checks import validate_submission
from competition.submission_format import SubmissionError, write_submission
from competition.submission_reading import read_submission
from competition.submission_scoring import score_submission
from tests.test_reader import layout_arrays, write

BIG = 100_040  # configs of the largest real nlp files
NLP = Collection.LAYOUT_NLP_DEFAULT


@pytest.fixture(scope="module")
def big_root(tmp_path_factory: pytest.TempPathFactory):
    """A data root whose one valid layout graph has 100,040 configs, runtimes 100,040 down to 1 ns."""
    tmp = tmp_path_factory.mktemp("big")
    arrays = layout_arrays(c=5)
    cfg = np.zeros((BIG, 2, 18), dtype=np.float32)
    cfg[:, 0, 0] = np.arange(BIG) % 6
    arrays.update(node_config_feat=cfg, config_runtime=np.arange(BIG, 0, -1, dtype=np.int64))
    write(tmp, NLP, arrays, stem="big", split="valid")
    write(tmp, NLP, layout_arrays(), stem="small", split="train")
    return find_data_root(tmp)


# -- the protocol -----------------------------------------------------------------------------------------------


def test_subset_is_fixed_seeded_sorted_and_only_for_big_valid_layout_graphs():
    p = ValidProtocol(1000, seed=0)
    a = p.configs(NLP, "g", 50_000)
    assert a.dtype == np.int64 and a.size == 1000 and np.all(np.diff(a) > 0) and a[-1] < 50_000
    assert np.array_equal(a, ValidProtocol(1000, seed=0).configs(NLP, "g", 50_000))  # a new object, same subset
    assert not np.array_equal(a, p.configs(NLP, "h", 50_000))  # another graph
    assert not np.array_equal(a, ValidProtocol(1000, seed=1).configs(NLP, "g", 50_000))  # another seed
    assert p.configs(NLP, "g", 1000) is None  # small enough: every config
    assert p.configs(Collection.TILE_XLA, "g", 50_000) is None  # tile: always whole
    assert p.configs(NLP, "g", 50_000, Split.TEST) is None  # test: always whole
    assert ValidProtocol(None).configs(NLP, "g", 50_000) is None


def test_parse_and_describe():
    assert ValidProtocol.parse("all").is_all and ValidProtocol.parse("ALL").tag == "all"
    assert ValidProtocol.parse("250") == ValidProtocol(250)
    assert ValidProtocol.parse(None) == DEFAULT_PROTOCOL and DEFAULT_PROTOCOL.tag == "1000@0"
    assert "1,000 fixed configs" in DEFAULT_PROTOCOL.describe()
    for bad in ("some", "1", "-4"):
        with pytest.raises(ValueError, match="valid configs"):
            ValidProtocol.parse(bad)


def test_select_configs_reads_the_subset_in_one_pass(big_root):
    g = load_graph(list_graphs(big_root, NLP, Split.VALID)[0], NLP)
    rows = DEFAULT_PROTOCOL.configs(NLP, g.stem, g.num_configs)
    sub = g.select_configs(rows)
    assert sub.num_configs == 1000 and np.array_equal(sub.config_rows, rows)
    assert np.array_equal(sub.config_runtime, BIG - rows)
    blocks = list(sub.iter_config_blocks(300))
    assert [start for start, _ in blocks] == [0, 300, 600, 900]
    feats = np.concatenate([b for _, b in blocks])
    assert np.array_equal(feats[:, 0, 0], rows % 6)
    assert np.array_equal(sub.config_features([2, 0])[:, 0, 0], rows[[2, 0]] % 6)
    twice = sub.select_configs([1, 3])  # a subset of a subset keeps the file's indices
    assert np.array_equal(twice.config_rows, rows[[1, 3]])
    with pytest.raises(IndexError, match="ascending"):
        g.select_configs([5, 2])


def test_every_consumer_draws_the_same_subset(big_root):
    gid = submission_id(NLP, "big")
    labels = load_labels(big_root, [NLP], Split.VALID)
    rows = labels.rows()[gid]
    assert np.array_equal(rows, DEFAULT_PROTOCOL.configs(NLP, "big", BIG))
    assert np.array_equal(labels.targets()[gid], (BIG - rows).astype(np.float64))
    assert labels[gid].num_configs == BIG
    everything = load_labels(big_root, [NLP], Split.VALID, ValidProtocol(None))
    assert everything.rows()[gid] is None and everything.targets()[gid].size == BIG
    assert oracle_scores(labels) is None  # real-like data: no hidden noiseless runtimes


# -- rows of 100,040 configs --------------------------------------------------------------------------------------


def test_a_100040_config_row_is_written_read_validated_and_scored(big_root, tmp_path: Path):
    gid = submission_id(NLP, "big")
    scores = np.arange(BIG, dtype=np.float64)  # config 0 predicted fastest: exactly reversed, tau -1
    path = write_submission(tmp_path / "valid.csv", {gid: scores})
    assert path.stat().st_size > 131_072  # beyond the csv module's default field limit
    order = read_submission(path)[gid]
    assert order.size == BIG and order[0] == 0 and order[-1] == BIG - 1
    everything = ValidProtocol(None)
    assert validate_submission(path, big_root, Split.VALID, protocol=everything) == []
    report = score_submission(path, big_root, Split.VALID, protocol=everything)
    assert report.scores()[NLP] == pytest.approx(-1.0)
    assert report.collections[NLP].graphs[0].opa == pytest.approx(0.0)
    # The same full row under the default protocol is scored on its 1,000 configs, still exactly reversed.
    report = score_submission(path, big_root, Split.VALID)
    assert report.collections[NLP].graphs[0].num_configs == 1000
    assert report.scores()[NLP] == pytest.approx(-1.0)
    assert "1,000 fixed configs" in report.format_table()


def test_a_subset_row_is_scored_on_its_configs_and_refused_under_all(big_root, tmp_path: Path):
    gid = submission_id(NLP, "big")
    rows = DEFAULT_PROTOCOL.configs(NLP, "big", BIG)
    runtimes = (BIG - rows).astype(np.float64)
    rng = np.random.default_rng(0)
    scores = runtimes + rng.normal(0, 20_000, rows.size)  # a noisy but informative model
    path = write_submission(tmp_path / "sub.csv", {gid: scores}, {gid: rows})
    written = read_submission(path)[gid]
    assert set(written.tolist()) == set(rows.tolist())  # the file holds the graph's own config indices
    report = score_submission(path, big_root, Split.VALID)
    assert report.scores()[NLP] == pytest.approx(kendall_tau(scores, runtimes))
    problems = validate_submission(path, big_root, Split.VALID, protocol=ValidProtocol(None))
    assert len(problems) == 1 and f"not a permutation of range({BIG})" in problems[0].message
    problems = validate_submission(path, big_root, Split.VALID, protocol=ValidProtocol(1000, seed=3))
    assert len(problems) == 1 and "valid protocol's 1000 configs" in problems[0].message


@pytest.mark.parametrize(("content", "shown"), [
    (b"ID,TopConfigs\nlayout:nlp:default:big,\"0;1;2\n", "line 2: malformed CSV: unexpected end of data"),
    (b"ID,TopConfigs\nlayout:nlp:default:big,\"0;1\";2\n", "line 2: malformed CSV: ',' expected after '\"'"),
    (b"ID,TopConfigs\nlayout:nlp:default:big,0;1;2\xff\xfe\n", "file: expected UTF-8 text"),
    ("ID,TopConfigs\n".encode("utf-16"), "file: expected UTF-8 text"),
    (b"ID,TopConfigs\nlayout:nlp:default:big,\"0;1\x00;2\"\n", "row 1 [layout:nlp:default:big]: non-integer"),
])
def test_a_malformed_csv_is_a_problem_naming_file_and_line(big_root, tmp_path: Path, content, shown):
    path = tmp_path / "bad.csv"
    path.write_bytes(content)
    with pytest.raises(SubmissionError) as info:
        read_submission(path)
    assert str(info.value).startswith(f"{path}: 1 problem(s)\n  {shown}")
    problems = validate_submission(path, big_root, Split.VALID)
    assert str(problems[0]).startswith(shown)


def test_a_folder_or_missing_file_is_a_problem(tmp_path: Path):
    with pytest.raises(SubmissionError, match="found a folder"):
        read_submission(tmp_path)
    with pytest.raises(SubmissionError, match="cannot be read"):
        read_submission(tmp_path / "absent.csv")
