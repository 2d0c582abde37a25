"""An output never replaces what it should not: ``predict --out`` goes through the promotion rules of ``submit`` and
refuses its inputs, the data root, the runs folder and files it did not write; ``featurize`` checks every file before
it writes any, writes no hidden names, and puts each in place only where nothing is yet."""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

import fastslow.inference as predict_module
from competition.collections import Collection, Split
from competition.dataroot import find_data_root, list_graphs
from competition.graphfile import validate_file
from competition.hlo.featurize import fusion_kernels
from competition.hlo.ir import Module
from competition.hlo.records import ModuleRecords, Run, TileConfig, write_layout_records, write_tile_records
from competition.hlo.text import parse_hlo_text
from fastslow.cli import EXIT_ERROR, EXIT_OK, main
from fastslow.promotion import OutputRefused, SubmissionRecord, promote, read_record
from tests.hlo.conftest import HAND_HLO
from tests.reliability.helpers import one_line, run, snapshot


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# --------------------------------------------------------------------------------------------------------------
# predict --out
# --------------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def fitted(tiny_world: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The runs folder and the submissions folder of one ``submit`` of the cheap models: its submission is the
    ensemble's, with a valid score."""
    base = tmp_path_factory.mktemp("fitted")
    runs, subs = base / "runs", base / "subs"
    assert main(["submit", "--data", str(tiny_world), "--models", "default-first", "random", "--out-dir", str(subs),
                 "--runs-dir", str(runs), "--jobs", "1", "--no-progress"]) == EXIT_OK
    return runs, subs


def _predict(world: Path, runs: Path, out: Path, *extra: object) -> list[object]:
    return ["predict", "--data", world, "--runs-dir", runs, "--submissions", out.parent / "no-submissions",
            "--models", "random", "--out", out, "--no-progress", *extra]


def test_predict_never_replaces_a_better_submission(fitted, tiny_world: Path, tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]):
    """The reproduction: ``predict --out submissions/submission.csv`` replaced the ensemble's submission while its
    ``submission.json`` still described the ensemble. It goes beside it, with its record."""
    runs, subs = fitted[0], tmp_path / "subs"
    shutil.copytree(fitted[1], subs)
    before = snapshot(subs)
    record = read_record(subs / "submission.json")
    assert record is not None and record.producer == "ensemble" and record.combined is not None
    code, text, err = run(["predict", "--data", tiny_world, "--runs-dir", runs, "--submissions", subs, "--models",
                           "random", "--out", subs / "submission.csv", "--no-progress"], capsys)
    assert code == EXIT_OK and err == ""
    after = snapshot(subs)
    assert {name: after[name] for name in before} == before
    assert set(after) - set(before) == {"submission.new.csv", "submission.new.json"}
    assert (f"submission.csv kept: it scored {record.combined:.4f} on valid (ensemble, run {record.run}), this one's "
            f"valid score is unknown (random was not scored); this run's is {subs / 'submission.new.csv'}") in text
    new = read_record(subs / "submission.new.json")
    assert new is not None and new.producer == "random" and new.combined is None and new.scores == {}
    assert new.sha256 == sha(subs / "submission.new.csv")
    assert new.settings["predict"]["what"] == "submission"


def _test_npz(world: Path) -> Path:
    return list_graphs(find_data_root(world), Collection.TILE_XLA, Split.TEST)[0]


REFUSED: dict[str, Callable[[Path, Path, Path], tuple[list[object], Path, str]]] = {
    "the model.json it reads": lambda world, runs, tmp: (
        _predict(world, runs, runs / "random" / "tile-xla" / "model.json"),
        runs / "random" / "tile-xla" / "model.json",
        "is the saved run of random for tile:xla, which this command reads: predict never writes over its inputs"),
    "an input npz": lambda world, runs, tmp: (
        ["predict", _test_npz(world), "--runs-dir", runs, "--models", "random", "--out", _test_npz(world),
         "--no-progress"],
        _test_npz(world),
        f"is the input file of tile:xla:{_test_npz(world).stem}, which this command reads: predict never writes "
        "over its inputs"),
    "the data root's sample_submission.csv": lambda world, runs, tmp: (
        _predict(world, runs, world / "sample_submission.csv"), world / "sample_submission.csv",
        f"is inside the data root {world}: predict never writes there"),
    "a new file in the data root of the files given": lambda world, runs, tmp: (
        ["predict", _test_npz(world), "--runs-dir", runs, "--models", "random", "--out", world / "ranks.csv",
         "--no-progress"], world / "ranks.csv", f"is inside the data root {world}: predict never writes there"),
    "a new file in the runs folder": lambda world, runs, tmp: (
        _predict(world, runs, runs / "ranks.csv"), runs / "ranks.csv",
        f"is inside the runs folder {runs}: predict never writes there"),
    "a name that is no CSV": lambda world, runs, tmp: (
        _predict(world, runs, tmp / "out.json"), tmp / "out.json",
        "expected a CSV file name ending in .csv (its record is written beside it as <stem>.json)"),
}


@pytest.mark.parametrize("case", list(REFUSED))
def test_predict_refuses_to_write_over_what_it_should_not(case: str, fitted, tiny_world: Path, tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]):
    runs = fitted[0]
    argv, out, why = REFUSED[case](tiny_world, runs, tmp_path)
    before = {"world": snapshot(tiny_world), "runs": snapshot(runs), "tmp": snapshot(tmp_path)}
    existed = out.exists()
    for force in ([], ["--force"]):  # --force writes over a file of unknown origin, never over these
        code, _, err = run(argv + force, capsys)
        assert code == EXIT_ERROR
        assert one_line(err) == f"error: --out {out}: {why}"
        assert {"world": snapshot(tiny_world), "runs": snapshot(runs), "tmp": snapshot(tmp_path)} == before
        assert out.exists() == existed


def test_predict_refuses_a_file_it_did_not_write_unless_force(fitted, tiny_world: Path, tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]):
    runs = fitted[0]
    notes = tmp_path / "notes.csv"
    notes.write_text("my,notes\n")
    mine = sha(notes)
    before = snapshot(tmp_path)
    hint = "give another --out, or --force to keep what is there aside (notes.prev.csv, notes.prev.json) and write there"
    code, _, err = run(_predict(tiny_world, runs, notes), capsys)
    assert code == EXIT_ERROR
    assert one_line(err) == f"error: --out {notes}: nothing says fastslow wrote it (no record notes.json beside it): {hint}"
    assert snapshot(tmp_path) == before
    # A user's file under the name its record would take is refused too.
    other = tmp_path / "other.csv"
    (tmp_path / "other.json").write_text('{"mine": 1}\n')
    code, _, err = run(_predict(tiny_world, runs, other), capsys)
    assert code == EXIT_ERROR and one_line(err).startswith(
        f"error: --out {other}: {tmp_path / 'other.json'} (where its record goes) is no record of fastslow's: ")
    assert not other.exists() and (tmp_path / "other.json").read_text() == '{"mine": 1}\n'
    # --force: the user's file is kept aside, never deleted.
    code, text, err = run(_predict(tiny_world, runs, notes, "--force"), capsys)
    assert code == EXIT_OK and err == ""
    assert sha(tmp_path / "notes.prev.csv") == mine
    assert f"{notes} kept as notes.prev.csv: nothing says how it scored (no notes.json" in text
    record = read_record(tmp_path / "notes.json")
    assert record is not None and record.combined is None and record.sha256 == sha(notes)
    # Its own file it replaces; one edited since is the user's again.
    code, _, err = run(_predict(tiny_world, runs, notes), capsys)
    assert code == EXIT_OK and err == "" and not (tmp_path / "notes.prev-1.csv").exists()
    with open(notes, "a") as f:
        f.write("edited\n")
    edited = snapshot(tmp_path)
    code, _, err = run(_predict(tiny_world, runs, notes), capsys)
    assert code == EXIT_ERROR
    assert one_line(err) == (f"error: --out {notes}: it changed since fastslow wrote it (its record notes.json gives "
                             f"another SHA-256): {hint}")
    assert snapshot(tmp_path) == edited


def test_predict_checks_again_when_it_writes(fitted, tiny_world: Path, tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch):
    """A file that appears at ``--out`` after the check before predicting, while the graphs are ranked, is found
    by the check made under the lock when the file is written."""
    runs = fitted[0]
    out = tmp_path / "ranks.csv"
    real = predict_module.predict_targets

    def meanwhile(*args, **kwargs):
        out.write_text("someone else's\n")
        return real(*args, **kwargs)

    monkeypatch.setattr(predict_module, "predict_targets", meanwhile)
    code, _, err = run(_predict(tiny_world, runs, out), capsys)
    assert code == EXIT_ERROR
    assert one_line(err) == (f"error: --out {out}: nothing says fastslow wrote it (no record ranks.json beside it): "
                             "give another --out, or --force to keep what is there aside (ranks.prev.csv, "
                             "ranks.prev.json) and write there")
    assert out.read_text() == "someone else's\n" and sorted(p.name for p in tmp_path.iterdir()) == ["ranks.csv"]


@pytest.mark.slow
def test_two_predict_runs_on_one_out_leave_one_whole_file_from_a_read_only_root(fitted, tiny_world: Path,
                                                                                tmp_path: Path, capsys):
    world = tmp_path / "world"
    shutil.copytree(tiny_world, world)
    for folder, _dirs, files in os.walk(world):
        for name in files:
            os.chmod(os.path.join(folder, name), stat.S_IRUSR | stat.S_IRGRP)
        os.chmod(folder, stat.S_IRUSR | stat.S_IXUSR | stat.S_IRGRP | stat.S_IXGRP)
    before = snapshot(world)
    out = tmp_path / "out" / "submission.csv"
    argv = [sys.executable, "-m", "fastslow", *map(str, _predict(world, fitted[0], out))]
    procs = [subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path)
             for _ in range(2)]
    done = [p.communicate(timeout=300) + (p.returncode,) for p in procs]
    assert [code for _, _, code in done] == [EXIT_OK, EXIT_OK], [err for _, err, _ in done]
    assert sorted(p.name for p in out.parent.iterdir()) == ["submission.csv", "submission.json"]
    record = read_record(out.parent / "submission.json")
    assert record is not None and record.sha256 == sha(out)
    # The whole file: what one run alone writes.
    alone = tmp_path / "alone" / "submission.csv"
    assert run(_predict(world, fitted[0], alone), capsys)[0] == EXIT_OK
    assert out.read_bytes() == alone.read_bytes()
    assert snapshot(world) == before


def test_the_promotion_rules_of_an_unscored_output(tmp_path: Path):
    """``predict``'s record has no score: it replaces its own kind, goes beside a scored one, and a scored one puts
    it aside; a file of unknown origin is refused where the caller asks."""
    out = tmp_path / "subs"
    ok = lambda _: None  # noqa: E731

    def record(run: str, combined: float | None) -> SubmissionRecord:
        scores = {} if combined is None else {"tile:xla": combined}
        return SubmissionRecord(run=run, producer="m", combined=combined, scores=scores,
                                protocol="" if combined is None else "1000@0", data="/d")

    assert promote(out, "p1\n", record("p1", None), validate=ok).in_place
    assert promote(out, "p2\n", record("p2", None), validate=ok).in_place  # another unscored one: replaced
    assert sorted(p.name for p in out.iterdir()) == ["submission.csv", "submission.json"]
    done = promote(out, "s1\n", record("s1", 0.5), validate=ok)  # a scored one puts the unscored one aside
    assert done.in_place and (out / "submission.prev.csv").read_text() == "p2\n"
    assert read_record(out / "submission.prev.json").run == "p2"
    assert done.said == [f"{out / 'submission.csv'} kept as submission.prev.csv: it was not scored (m, written by "
                         "fastslow predict), so this run's does not replace it unseen"]
    done = promote(out, "p3\n", record("p3", None), validate=ok)  # never over a scored one
    assert not done.in_place and done.path == out / "submission.new.csv"
    assert (out / "submission.csv").read_text() == "s1\n" and (out / "submission.new.csv").read_text() == "p3\n"
    # A file nothing says fastslow wrote, refused when asked, checked under the lock.
    (out / "mine.csv").write_text("mine\n")
    with pytest.raises(OutputRefused, match="nothing says fastslow wrote it"):
        promote(out, "p4\n", record("p4", None), validate=ok, name="mine.csv", foreign="refuse")
    assert (out / "mine.csv").read_text() == "mine\n" and not (out / "mine.json").exists()
    # A user's file under the record's name, with no file beside it: kept aside, never replaced.
    (out / "x.json").write_text("mine\n")
    done = promote(out, "p5\n", record("p5", None), validate=ok, name="x.csv")
    assert (out / "x.prev.json").read_text() == "mine\n" and read_record(out / "x.json").run == "p5"


def test_the_check_before_predicting_waits_for_a_run_between_its_file_and_its_record(tmp_path: Path,
                                                                                   monkeypatch: pytest.MonkeyPatch):
    """Another run holds the folder's lock while it writes the file and then its record. A check that sees the file
    without its record looks again under the lock, so it finds the pair whole rather than a foreign file. With no
    writer, a file without a record is still refused."""
    import threading

    import fastslow.promotion as promotion

    out = tmp_path / "subs"
    record = SubmissionRecord(run="r1", producer="m", combined=None, scores={}, protocol="", data="/d")
    assert promote(out, "r1\n", record, validate=lambda _: None, name="ranks.csv").in_place
    target, kept = out / "ranks.csv", tmp_path / "ranks.json"
    (out / "ranks.json").rename(kept)  # the writer is between the file and its record
    looked = threading.Event()
    first = promotion.foreign_problem

    def looking(path: Path) -> str | None:
        try:
            return first(path)
        finally:
            looked.set()

    monkeypatch.setattr(promotion, "foreign_problem", looking)
    answers: list[str | None] = []
    with promotion._folder_lock(out, "ranks"):
        checker = threading.Thread(target=lambda: answers.append(promotion.settled_foreign_problem(target)))
        checker.start()
        assert looked.wait(timeout=60)  # it saw the file without its record, and now waits for the lock
        kept.rename(out / "ranks.json")  # the writer writes the record, then lets go
    checker.join(timeout=60)
    assert answers == [None]
    (out / "ranks.json").unlink()  # no writer: a file without a record stays refused
    assert promotion.settled_foreign_problem(target) == "nothing says fastslow wrote it (no record ranks.json beside it)"


# --------------------------------------------------------------------------------------------------------------
# featurize
# --------------------------------------------------------------------------------------------------------------

LAYOUT = (((1, 0), (0, 1), (3, 2)), ((1, 0), (3, 2, 1, 0)), ((0, 1), (1, 0), (0, 1)))
"""A layout of the hand module's configurable nodes: conv 2, reshape 10, dot 11."""


def _layout_record(runtime: int = 1200, nodes: tuple[int, ...] = (2, 10, 11)) -> bytes:
    return write_layout_records(ModuleRecords(parse_hlo_text(HAND_HLO), [Run(runtime, LAYOUT if nodes else (),
                                                                             is_default=True)], nodes))


def _kernel(name: str | None = None) -> Module:
    (_, kernel), = fusion_kernels(parse_hlo_text(HAND_HLO))
    return kernel if name is None else Module(name, kernel.computations)


def _tile_record(bounds: tuple[int, ...] = (2, 4, 6, 6), name: str | None = None, fingerprint: int = 7) -> bytes:
    return write_tile_records([ModuleRecords(_kernel(name), [Run(50, tile=TileConfig(output_bounds=bounds),
                                                                 is_default=True)], fingerprint=fingerprint)])


def _reshape(dim: int) -> bytes:
    """A program of one reshape of f32[dim, dim, dim, dim]: a layout file with its node."""
    shape = f"f32[{dim},{dim},{dim},{dim}]"
    return (f"HloModule big\n\nENTRY %e (p: {shape}) -> {shape} {{\n  %p = {shape}{{3,2,1,0}} parameter(0)\n"
            f"  ROOT %r = {shape}{{0,1,2,3}} reshape(%p)\n}}\n").encode()


FAILING = {  # input name, flag, a valid input, the input whose output fails, its output, the problem
    "a product of dims past float32": (
        "big.hlo", [], _reshape(4), _reshape(10**10), "layout/xla/random/test/big.npz",
        "[node_feat]: expected finite values; found inf at node 0, column 28 (2 non-finite in all)"),
    "a 2^63 runtime in a train file": (
        "rec.pb", ["--layout-records"], _layout_record(), _layout_record(runtime=2**63),
        "layout/xla/random/train/rec.npz",
        "[config_runtime]: expected runtimes >= 0 ns; found -9223372036854775808 at config 0 (1 negative)"),
    "a record that configures no node": (
        "rec.pb", ["--layout-records"], _layout_record(), _layout_record(nodes=()),
        "layout/xla/random/train/rec.npz",
        "[node_config_feat]: expected at least one configurable node (NC >= 1); found shape (1, 0, 18): configs "
        "that configure no node"),
    "tile bounds of 100 entries": (
        "tiles.pb", ["--tile-records"], _tile_record(), _tile_record(bounds=(7,) * 100), "tile/xla/train/hand.f_7.npz",
        "[config_feat]: expected finite values; found inf at config 0, column 15 (1 non-finite in all)"),
}


@pytest.mark.parametrize("case", list(FAILING))
def test_an_output_failing_its_checks_is_never_written(case: str, tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]):
    name, flag, good, bad, rel, problem = FAILING[case]
    source, out = tmp_path / name, tmp_path / "root"
    source.write_bytes(bad)
    argv = ["featurize", *flag, source, "--out", out]
    expected = (f"error: {source}: its output would fail its checks, so nothing was written: {out / 'npz' / rel} "
                f"{problem}")
    code, _, err = run(argv, capsys)
    assert code == EXIT_ERROR and one_line(err) == expected
    assert not out.exists() or snapshot(out) == {}
    # With --force, the failing file never replaces the valid one there.
    source.write_bytes(good)
    code, _, err = run(argv, capsys)
    assert code == EXIT_OK, err
    assert validate_file(out / "npz" / rel, deep=True) == []
    before = snapshot(out)
    source.write_bytes(bad)
    code, _, err = run([*argv, "--force"], capsys)
    assert code == EXIT_ERROR and one_line(err) == expected
    assert snapshot(out) == before


HIDDEN = {  # input name, flag, its bytes, the output's name, where the name comes from
    ".prog.hlo": ([], HAND_HLO.encode(), ".prog.npz", "the file's name '.prog.hlo'"),
    ".x": ([], HAND_HLO.encode(), ".x.npz", "the file's name '.x'"),
    ".rec.pb": (["--layout-records"], _layout_record(), ".rec.npz", "the file's name '.rec.pb'"),
    "dot.pb": (["--tile-records"], _tile_record(name=".", fingerprint=0), "._0.npz", "the kernel's module name '.'"),
}


@pytest.mark.parametrize("name", list(HIDDEN))
def test_a_hidden_output_name_is_refused(name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    flag, data, output, named_by = HIDDEN[name]
    source, out = tmp_path / name, tmp_path / "root"
    source.write_bytes(data)
    code, _, err = run(["featurize", *flag, source, "--out", out], capsys)
    assert code == EXIT_ERROR
    assert one_line(err) == (f"error: {source}: its output would be named {output!r}, a hidden file that every "
                             f"reader skips (the name comes from {named_by}): rename it so that it does not start "
                             "with '.'")
    assert not out.exists() or snapshot(out) == {}


def test_names_with_slashes_and_dots_stay_inside_the_output_tree(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    source, out = tmp_path / "tiles.pb", tmp_path / "root"
    source.write_bytes(_tile_record(name="k/../../../escaped"))
    code, _, err = run(["featurize", "--tile-records", source, "--out", out], capsys)
    assert code == EXIT_OK, err
    assert list(snapshot(out)) == ["npz/tile/xla/train/k_.._.._.._escaped_7.npz"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["root", "tiles.pb"]


def test_a_file_written_meanwhile_is_never_replaced(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                    monkeypatch: pytest.MonkeyPatch):
    """Another run puts its file in place after this one's check at plan time and before its own is promoted: the
    exclusive create at write time refuses, and the other file stays whole."""
    import competition.graphfile as graphfile

    source, out = tmp_path / "hand.hlo", tmp_path / "root"
    source.write_text(HAND_HLO)
    target = out / "npz" / "layout" / "xla" / "random" / "test" / "hand.npz"
    theirs = b"the other run's file"
    real = graphfile.validate_file

    def meanwhile(path, *args, **kwargs):
        if not target.exists():
            target.write_bytes(theirs)
        return real(path, *args, **kwargs)

    monkeypatch.setattr(graphfile, "validate_file", meanwhile)
    code, _, err = run(["featurize", source, "--out", out, "--what", "layout"], capsys)
    assert code == EXIT_ERROR
    assert one_line(err) == (f"error: {target}: exists already: written since this run began (another run into the "
                             "same root?); it is kept, and this run stops here: --force replaces it")
    assert target.read_bytes() == theirs
    assert sorted(p.name for p in target.parent.iterdir()) == ["hand.npz"]  # no temporary, nothing rejected


def test_two_featurize_runs_into_one_root_one_wins(tmp_path: Path):
    source, out = tmp_path / "hand.hlo", tmp_path / "root"
    source.write_text(HAND_HLO)
    argv = [sys.executable, "-m", "fastslow", "featurize", str(source), "--out", str(out), "--what", "layout"]
    procs = [subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path)
             for _ in range(2)]
    done = sorted((p.communicate(timeout=300)[1], p.returncode) for p in procs)
    target = out / "npz" / "layout" / "xla" / "random" / "test" / "hand.npz"
    assert sorted(code for _, code in done) == [EXIT_OK, EXIT_ERROR]
    err = next(err for err, code in done if code == EXIT_ERROR)
    assert one_line(err).startswith(f"error: {target}: exists already")
    assert sorted(p.name for p in target.parent.iterdir()) == ["hand.npz"]
    assert validate_file(target, deep=True) == []
