"""The labels owner: keyed by submission ID, the valid protocol honoured, test labels from secret/, read once;
scores in memory equal the scores of the files written from the same predictions."""

from __future__ import annotations

import builtins
import io
import math
import shutil
import threading
import zipfile
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from competition.collections import Collection, Split, submission_id
from competition.dataroot import find_data_root, list_graphs, load_secret_runtime
from competition.errors import DataFileError
from competition.labels import HiddenLabelsError, graph_target, load_labels, ranking_target
from competition.metrics import graph_score
from competition.npzio import NpzReader, write_npz
from competition.protocol import ValidProtocol
from competition.reader import load_graph
from competition.stats import graph_oracle, oracle_scores
from competition.submission_format import SubmissionError, submission_orders, write_submission
from competition.submission_reading import read_submission
from competition.submission_scoring import IN_MEMORY, score_orders, score_predictions, score_submission
from fastslow.pipeline import run_pipeline

TILE = Collection.TILE_XLA
NR = Collection.LAYOUT_NLP_RANDOM
RUNTIME_KEYS = {"config_runtime", "config_runtime_normalizers", "config_runtime_noiseless",
                "default_runtime_noiseless"}


def test_ranking_target_by_hand():
    np.testing.assert_array_equal(ranking_target([30, 10, 20], [10, 10, 5]), [3.0, 1.0, 4.0])
    np.testing.assert_array_equal(ranking_target(np.array([7, 5], np.int64)), [7.0, 5.0])
    assert ranking_target([1, 2]).dtype == np.float64
    with pytest.raises(ValueError, match="differ in shape"):
        ranking_target([1, 2], [1])


def test_valid_labels_are_keyed_by_id_and_match_the_graph_files(tiny_world: Path):
    root = find_data_root(tiny_world)
    labels = load_labels(root, list(Collection), Split.VALID, ValidProtocol(None))
    expected = [submission_id(c, p.stem) for c in Collection for p in list_graphs(root, c, Split.VALID)]
    assert list(labels) == expected and labels.collections == list(Collection)
    for c in Collection:
        for p in list_graphs(root, c, Split.VALID):
            g, lab = load_graph(p, c), labels[submission_id(c, p.stem)]
            assert (lab.id, lab.collection, lab.stem, lab.rows, lab.num_configs) == (
                submission_id(c, p.stem), c, p.stem, None, g.num_configs)
            np.testing.assert_array_equal(lab.runtime, g.config_runtime)
            np.testing.assert_array_equal(lab.target(), graph_target(g))
            if c.is_tile:
                np.testing.assert_array_equal(lab.target(), g.normalized_runtime())
                np.testing.assert_array_equal(lab.target(raw=True), g.config_runtime.astype(np.float64))
            else:
                assert lab.normalizers is None
    assert set(labels.of([TILE])) == {k for k in labels if k.startswith("tile:xla:")}


def test_the_valid_protocols_subset_is_honoured(tiny_world: Path):
    root = find_data_root(tiny_world)
    protocol = ValidProtocol(5, seed=3)
    labels = load_labels(root, [TILE, NR], Split.VALID, protocol)
    for p in list_graphs(root, NR, Split.VALID):
        g, lab = load_graph(p, NR), labels[submission_id(NR, p.stem)]
        rows = protocol.configs(NR, p.stem, g.num_configs)
        assert rows is not None and rows.size == 5
        np.testing.assert_array_equal(lab.rows, rows)
        np.testing.assert_array_equal(lab.runtime, g.config_runtime[rows])
        np.testing.assert_array_equal(lab.target(), graph_target(protocol.select(g, NR)))
        assert lab.num_configs == g.num_configs and labels.rows()[lab.id] is lab.rows
        # a submitted row (the file's indices) as positions into the scored configs; others are dropped
        np.testing.assert_array_equal(lab.local_order(rows[::-1]), np.arange(5)[::-1])
        np.testing.assert_array_equal(lab.local_order(np.arange(g.num_configs)[::-1]), np.arange(5)[::-1])
    assert all(labels[submission_id(TILE, p.stem)].rows is None for p in list_graphs(root, TILE, Split.VALID))
    assert labels.protocol == protocol and labels.split == Split.VALID


def test_test_labels_come_from_secret(tiny_world: Path, tmp_path: Path):
    root = find_data_root(tiny_world)
    labels = load_labels(root, list(Collection), Split.TEST)
    for c in Collection:
        for p in list_graphs(root, c, Split.TEST):
            lab, secret = labels[submission_id(c, p.stem)], load_secret_runtime(root, c, p.stem)
            assert not load_graph(p, c).config_runtime.any(), "the visible test runtimes are zeros"
            np.testing.assert_array_equal(lab.runtime, secret.config_runtime)
            np.testing.assert_array_equal(lab.target(), ranking_target(secret.config_runtime,
                                                                       secret.config_runtime_normalizers))
            assert lab.rows is None and lab.noiseless is not None
    copy = Path(shutil.copytree(tiny_world, tmp_path / "world", ignore=shutil.ignore_patterns("secret")))
    with pytest.raises(HiddenLabelsError, match="score the valid split instead"):
        load_labels(find_data_root(copy), [TILE], Split.TEST)


def test_labels_read_only_the_runtime_members(tiny_world: Path, monkeypatch: pytest.MonkeyPatch):
    read: Counter[str] = Counter()
    load, load_rows = NpzReader.load, NpzReader.load_rows

    def counting_load(self, key):
        read[key] += 1
        return load(self, key)

    def counting_rows(self, key, rows):
        read[key] += 1
        return load_rows(self, key, rows)

    monkeypatch.setattr(NpzReader, "load", counting_load)
    monkeypatch.setattr(NpzReader, "load_rows", counting_rows)
    monkeypatch.setattr(NpzReader, "iter_blocks", lambda *a, **k: pytest.fail("streamed configs"))
    root = find_data_root(tiny_world)
    for split in Split:
        load_labels(root, list(Collection), split)
    assert read and set(read) <= RUNTIME_KEYS, read


def test_all_zero_valid_runtimes_name_the_file(tiny_world: Path, tmp_path: Path):
    world = Path(shutil.copytree(tiny_world, tmp_path / "world"))
    path = list_graphs(find_data_root(world), NR, Split.VALID)[0]
    with NpzReader(path) as r:
        arrays = {k: r.load(k) for k in r.keys()}
    write_npz(path, {**arrays, "config_runtime": np.zeros_like(arrays["config_runtime"])})
    with pytest.raises(DataFileError, match=rf"{path}.*config_runtime.*runtimes > 0 ns in a valid file"):
        load_labels(find_data_root(world), [NR], Split.VALID)


def test_the_oracle_is_the_score_of_the_noiseless_ranking(tiny_world: Path):
    root = find_data_root(tiny_world)
    labels = load_labels(root, list(Collection), Split.VALID)
    for lab in labels.values():
        assert graph_oracle(lab) == graph_score(lab.collection, lab.target(), scores=lab.noiseless)
    oracles = oracle_scores(labels)
    assert oracles is not None and set(oracles) == set(Collection)
    assert oracles[TILE] == pytest.approx(np.mean([graph_oracle(labels[k]) for k in labels.of([TILE])]))


def _tied_predictions(labels, seed: int = 0) -> dict[str, np.ndarray]:
    """Scores with many ties (rounded noisy targets): the written row breaks them by config index."""
    rng = np.random.default_rng(seed)
    out = {}
    for sid, lab in labels.items():
        y = lab.target()
        out[sid] = np.round((np.argsort(np.argsort(y)) + rng.normal(0, y.size / 4, y.size)) / max(y.size / 4, 1))
    return out


def _same(a, b) -> bool:
    return a == b or (isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b))


@pytest.mark.parametrize("split, protocol", [(Split.VALID, ValidProtocol(6, seed=2)), (Split.VALID, ValidProtocol(None)),
                                             (Split.TEST, ValidProtocol())])
def test_in_memory_scores_equal_the_written_files_scores(split: Split, protocol: ValidProtocol, tiny_world: Path,
                                                        tmp_path: Path):
    root = find_data_root(tiny_world)
    labels = load_labels(root, list(Collection), split, protocol)
    preds = _tied_predictions(labels)
    assert any(np.unique(s).size < s.size for s in preds.values()), "the scores must tie somewhere"
    in_memory = score_predictions(preds, labels)
    path = write_submission(tmp_path / "s.csv", preds, labels.rows())
    from_file = score_submission(path, root, split, protocol=protocol)
    assert in_memory.protocol == from_file.protocol and list(in_memory.collections) == list(from_file.collections)
    for a, b in zip(in_memory.graphs(), from_file.graphs(), strict=True):
        assert all(_same(x, y) for x, y in zip(a.__dict__.values(), b.__dict__.values(), strict=True)), (a, b)
    assert in_memory.combined == from_file.combined
    # the rows scored in memory are the rows of the file
    orders = read_submission(path)
    assert {k: v.tolist() for k, v in orders.items()} == {
        k: v.tolist() for k, v in submission_orders(preds, labels.rows()).items()}
    assert score_submission(path, root, split, labels=labels).combined == from_file.combined


def test_invalid_rows_in_memory_are_refused(tiny_world: Path):
    root = find_data_root(tiny_world)
    labels = load_labels(root, [NR], Split.VALID, ValidProtocol(None))
    orders = {sid: np.arange(lab.num_configs) for sid, lab in labels.items()}
    first = next(iter(orders))
    with pytest.raises(SubmissionError, match="expected ID missing") as exc:
        score_orders({k: v for k, v in orders.items() if k != first}, labels)
    assert exc.value.path == IN_MEMORY
    with pytest.raises(SubmissionError, match="not a permutation"):
        score_orders({**orders, first: orders[first][:-1]}, labels)
    assert score_orders(orders, labels).complete is False


# -- one read of each valid file per run ---------------------------------------------------------------------------


class _OpenCounter:
    """Counts the opens of each file by ``open``, ``io.open``, ``np.load`` and ``zipfile.ZipFile``, the outermost
    only (a ZipFile opening its file is one open)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.counts: Counter[Path] = Counter()
        self._depth = threading.local()
        wrapped = self._wrap(builtins.open)
        monkeypatch.setattr(builtins, "open", wrapped)
        monkeypatch.setattr(io, "open", wrapped)
        monkeypatch.setattr(np, "load", self._wrap(np.load))
        counter, base = self, zipfile.ZipFile

        class CountingZipFile(base):  # type: ignore[misc, valid-type]
            def __init__(self, file, *args, **kwargs):
                with counter._counted(file):
                    super().__init__(file, *args, **kwargs)

        monkeypatch.setattr(zipfile, "ZipFile", CountingZipFile)

    def _counted(self, file):
        counter = self

        class _Ctx:
            def __enter__(self):
                depth = getattr(counter._depth, "n", 0)
                if depth == 0 and isinstance(file, (str, Path)):
                    counter.counts[Path(file).resolve()] += 1
                counter._depth.n = depth + 1

            def __exit__(self, *exc):
                counter._depth.n -= 1

        return _Ctx()

    def _wrap(self, fn):
        def opener(file, *args, **kwargs):
            with self._counted(file):
                return fn(file, *args, **kwargs)
        return opener


MAX_VALID_OPENS = 4
"""Opens of one valid npz in a run of random and default-first: the labels once, each model's prediction once, and
default-first's walk of a layout graph's configs; scoring the three valid files and the test file adds none."""


def test_each_valid_file_is_read_a_fixed_number_of_times_per_run(tiny_world: Path, tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch):
    monkeypatch.chdir(tmp_path)
    counter = _OpenCounter(monkeypatch)
    res = run_pipeline(tiny_world, models=["random", "default-first"], out_dir=tmp_path / "out", progress=False)
    monkeypatch.undo()
    root = find_data_root(tiny_world)
    valid = [p.resolve() for c in Collection for p in list_graphs(root, c, Split.VALID)]
    opens = {p: counter.counts[p] for p in valid}
    assert 0 < max(opens.values()) <= MAX_VALID_OPENS, opens
    written = {p.name: counter.counts[p.resolve()] for p in (tmp_path / "out").glob("*.csv")}
    # valid files are written, then hashed for the leaderboard: never read back to be scored
    assert all(n == 1 for name, n in written.items() if name.startswith("valid-")), written
    # what was scored in memory is what the files hold
    for name, report in res.valid_reports.items():
        assert score_submission(tmp_path / "out" / f"valid-{name}.csv", root, Split.VALID).combined == report.combined
    assert res.test_report is not None
    assert score_submission(res.submission, root, Split.TEST).combined == res.test_report.combined
