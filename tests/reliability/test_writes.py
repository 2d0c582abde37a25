"""Safe writes, replayed through the command line: a file that fails its own checks never replaces a good one, files
get the user's umask, killed runs leave no temporary files behind for good, synth workers end with their parent,
and a broken kaggle.json is named with what is wrong in it."""

from __future__ import annotations

import os
import shutil
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest

from competition.atomic import remove_stale_temps
from competition.collections import Collection, Split, submission_id
from competition.dataroot import find_data_root, list_graphs
from competition.submission_format import write_submission
from competition.submission_reading import read_submission
from fastslow import kaggle as kg
from fastslow import pipeline
from fastslow.cli import main

REPO = Path(__file__).resolve().parents[2]
TILE = Collection.TILE_XLA
SUBMIT = ["--models", "random", "--no-progress"]


def _submit(world: Path, out: Path) -> int:
    return main(["submit", "--data", str(world), "--out-dir", str(out), *SUBMIT])


def _modes(root: Path) -> set[tuple[str, int]]:
    """``("file" | "dir", permission bits)`` of everything under ``root``."""
    return {("dir" if p.is_dir() else "file", stat.S_IMODE(p.stat().st_mode)) for p in root.rglob("*")}


@pytest.fixture
def umask() -> Iterator[Callable[[int], None]]:
    """Sets the process umask for the test, restoring it after."""
    before = os.umask(0o022)
    os.umask(before)
    yield os.umask
    os.umask(before)


@pytest.fixture(scope="module")
def good(tiny_world: Path, tmp_path_factory: pytest.TempPathFactory) -> bytes:
    """A valid submission.csv for the tiny world, made by the same command as the failing runs."""
    out = tmp_path_factory.mktemp("good")
    assert _submit(tiny_world, out) == 0
    return (out / "submission.csv").read_bytes()


def _first_tile_test(world: Path) -> Path:
    return list_graphs(find_data_root(world), TILE, Split.TEST)[0]


def _remove_test_split(world: Path) -> None:
    shutil.rmtree(find_data_root(world).collection_dir(TILE, Split.TEST))


def _remove_train_split(world: Path) -> None:
    shutil.rmtree(find_data_root(world).collection_dir(TILE, Split.TRAIN))


def _npz_to_folder(world: Path) -> Path:
    npz = _first_tile_test(world)
    npz.unlink()
    npz.mkdir()
    return npz


def _npz_to_symlink_loop(world: Path) -> Path:
    npz = _first_tile_test(world)
    npz.unlink()
    npz.symlink_to(npz.name)
    return npz


def _comma_in_name(world: Path) -> None:
    npz = _first_tile_test(world)
    npz.rename(npz.with_name("a,b.npz"))


def _tile_test_ids(world: Path) -> list[str]:
    return sorted(submission_id(TILE, p.stem) for p in list_graphs(find_data_root(world), TILE, Split.TEST))


def _no_preflight(monkeypatch: pytest.MonkeyPatch) -> None:
    """Let submit go past its check of the data root, to reach the check of the file it writes."""
    monkeypatch.setattr(pipeline, "preflight", lambda *args: None)


def _damaged_run(damage: Callable[[Path], Path | None], tiny_world: Path, good: bytes, tmp_path: Path,
                 monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> tuple[Path, Path | None, str]:
    """Copy the world, damage it, run ``submit`` over a good ``submission.csv``: ``(out dir, damaged file, stderr)``
    once the run has failed with exit code 2, leaving the good file byte for byte and no temporary file."""
    world = tmp_path / "world"
    shutil.copytree(tiny_world, world, symlinks=True)
    damaged = damage(world)
    out = tmp_path / "subs"
    out.mkdir()
    (out / "submission.csv").write_bytes(good)
    monkeypatch.chdir(tmp_path)
    capsys.readouterr()

    assert _submit(world, out) == 2

    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and "Traceback" not in err
    assert (out / "submission.csv").read_bytes() == good
    assert not list(out.glob(".*.part"))
    return out, damaged, err


def _rejected(out: Path, found: str) -> str:
    return (f"error: {out / 'submission.csv'} was not replaced (the previous one is unchanged): the new file failed "
            f"its checks: {found}; it is kept as {out / 'submission.csv.rejected'}\n")


@pytest.mark.parametrize("damage, split", [(_remove_test_split, "test"), (_remove_train_split, "train")],
                         ids=["test-split", "train-split"])
def test_a_missing_split_folder_is_refused_before_any_fitting(damage: Callable[[Path], None], split: str,
                                                              tiny_world: Path, good: bytes, tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch,
                                                              capsys: pytest.CaptureFixture[str]):
    out, _, err = _damaged_run(damage, tiny_world, good, tmp_path, monkeypatch, capsys)
    world = find_data_root(tmp_path / "world")
    count = {"test": 2, "train": 1}[split]  # a missing test split also leaves the sample's tile IDs unmatched
    assert err.startswith(f"error: {count} problem(s) of the data root {world.root}, found before any fitting "
                          f"(`fastslow data validate --data {world.root}` lists them all); the first: "
                          f"{world.collection_dir(TILE, Split(split))}: expected tile:xla {split} graphs")
    assert not (out / "submission.csv.rejected").exists() and not (out / "valid-random.csv").exists()


@pytest.mark.parametrize("damage", [_remove_test_split, _remove_train_split], ids=["test-split", "train-split"])
def test_a_missing_split_folder_never_replaces_the_good_submission(damage: Callable[[Path], None], tiny_world: Path,
                                                                   good: bytes, tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch,
                                                                   capsys: pytest.CaptureFixture[str]):
    """Past the check of the data root, the written file's own check still keeps the good one."""
    _no_preflight(monkeypatch)
    tile_ids = _tile_test_ids(tiny_world)
    out, _, err = _damaged_run(damage, tiny_world, good, tmp_path, monkeypatch, capsys)
    assert err == _rejected(out, f"{len(tile_ids)} problem(s) against the test split of {tmp_path / 'world'}, the "
                                 f"first: missing row [{tile_ids[0]}]: expected ID missing from the submission")
    rejected = read_submission(out / "submission.csv.rejected")
    assert len(rejected) == len(read_submission(out / "submission.csv")) - len(tile_ids)


def test_a_name_holding_a_comma_is_written_quoted_and_rejected_as_unknown(tiny_world: Path, good: bytes,
                                                                          tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch,
                                                                          capsys: pytest.CaptureFixture[str]):
    out, _, err = _damaged_run(_comma_in_name, tiny_world, good, tmp_path, monkeypatch, capsys)
    assert "found before any fitting" in err and "a,b.npz" in err  # refused up front, naming the file
    _no_preflight(monkeypatch)
    shutil.rmtree(tmp_path / "world")
    shutil.rmtree(tmp_path / "subs")
    out, _, err = _damaged_run(_comma_in_name, tiny_world, good, tmp_path, monkeypatch, capsys)
    rejected = out / "submission.csv.rejected"
    ids = list(read_submission(rejected))
    assert "tile:xla:a,b" in ids and '\n"tile:xla:a,b",' in rejected.read_text()
    assert err == _rejected(out, f"2 problem(s) against the test split of {tmp_path / 'world'}, the first: row "
                                 f"{ids.index('tile:xla:a,b') + 1} [tile:xla:a,b]: unknown ID: no such graph in the "
                                 "test split")


@pytest.mark.parametrize("damage", [_npz_to_folder, _npz_to_symlink_loop], ids=["folder", "symlink-loop"])
def test_a_test_npz_that_is_no_file_never_replaces_the_good_submission(damage: Callable[[Path], Path],
                                                                       tiny_world: Path, good: bytes,
                                                                       tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch,
                                                                       capsys: pytest.CaptureFixture[str]):
    out, npz, err = _damaged_run(damage, tiny_world, good, tmp_path, monkeypatch, capsys)
    assert npz is not None
    # The reader names the damaged file when it lists the split; were it skipped there, the submission written
    # without it would be rejected by its own check.
    if (out / "submission.csv.rejected").exists():
        assert err == _rejected(out, f"1 problem(s) against the test split of {tmp_path / 'world'}, the first: "
                                     f"missing row [{submission_id(TILE, npz.stem)}]: expected ID missing from the "
                                     "submission")
    else:
        assert err.startswith(f"error: {npz}: ")


def test_without_a_previous_file_the_rejected_one_is_all_there_is(tiny_world: Path, tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]):
    world = tmp_path / "world"
    shutil.copytree(tiny_world, world)
    _remove_test_split(world)
    out = tmp_path / "subs"
    with pytest.MonkeyPatch.context() as mp:
        _no_preflight(mp)
        assert _submit(world, out) == 2

    err = capsys.readouterr().err
    assert err.startswith(f"error: {out / 'submission.csv'} was not replaced (there was no previous one): ")
    assert err.endswith(f"; it is kept as {out / 'submission.csv.rejected'}\n") and err.count("\n") == 1
    assert not (out / "submission.csv").exists() and (out / "submission.csv.rejected").is_file()


def test_ids_needing_quotes_are_written_quoted_and_read_back(tmp_path: Path):
    ids = ["tile:xla:a,b", 'tile:xla:say "hi"', "tile:xla:plain"]
    path = write_submission(tmp_path / "s.csv", {sid: [3.0, 1.0, 2.0] for sid in ids})
    assert path.read_text() == ('ID,TopConfigs\n"tile:xla:a,b",1;2;0\ntile:xla:plain,1;2;0\n'
                                '"tile:xla:say ""hi""",1;2;0\n')
    assert {sid: order.tolist() for sid, order in read_submission(path).items()} == {sid: [1, 2, 0] for sid in ids}


@pytest.mark.parametrize("mask, file_mode, dir_mode", [(0o022, 0o644, 0o755), (0o027, 0o640, 0o750)],
                         ids=["umask-022", "umask-027"])
def test_written_files_follow_the_umask(mask: int, file_mode: int, dir_mode: int, tmp_path: Path,
                                        umask: Callable[[int], None], monkeypatch: pytest.MonkeyPatch):
    umask(mask)
    monkeypatch.chdir(tmp_path)
    assert main(["data", "synth", "--scale", "tiny", "--limit", "1", "--workers", "1", "--out", "world",
                 "--no-progress"]) == 0
    assert _submit(tmp_path / "world", tmp_path / "subs") == 0
    assert _modes(tmp_path / "world") == {("file", file_mode), ("dir", dir_mode)}
    assert _modes(tmp_path / "subs") == {("file", file_mode)}
    assert {p.name for p in (tmp_path / "subs").iterdir()} >= {"submission.csv", "valid-random.csv",
                                                               "leaderboard.csv"}

    zip_path = tmp_path / "predict-ai-model-runtime.zip"
    shutil.make_archive(str(zip_path.with_suffix("")), "zip", tmp_path / "world", "npz_all")
    target = kg.unpack_zip(zip_path, tmp_path / "kaggle")
    assert stat.S_IMODE(target.stat().st_mode) == dir_mode
    assert _modes(target) == {("file", file_mode), ("dir", dir_mode)}


def _hold_temp(target: Path) -> tuple[subprocess.Popen[str], Path]:
    """A process that starts an atomic write of ``target`` and waits: its temporary file, held."""
    code = ("import sys, time\nfrom competition.atomic import atomic_path\n"
            "cm = atomic_path(sys.argv[1])\nprint(cm.__enter__(), flush=True)\ntime.sleep(120)\n")
    proc = subprocess.Popen([sys.executable, "-c", code, str(target)], cwd=REPO, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    tmp = Path(proc.stdout.readline().strip())
    assert tmp.name.startswith(f".{target.name}.") and tmp.name.endswith(".part") and tmp.is_file()
    return proc, tmp


def _kill(proc: subprocess.Popen[str]) -> None:
    proc.kill()
    proc.wait()


def test_a_killed_writers_temp_file_is_removed_on_rerun_a_live_ones_kept(tiny_world: Path, tmp_path: Path):
    out = tmp_path / "subs"
    killed, stale = _hold_temp(out / "submission.csv")
    live, held = _hold_temp(out / "submission.csv")
    try:
        assert remove_stale_temps(out) == [] and stale.is_file()
        _kill(killed)
        assert stale.is_file(), "SIGKILL leaves the temporary file"

        assert _submit(tiny_world, out) == 0

        assert not stale.exists()
        assert held.is_file(), "a concurrent run's temporary file is never removed"
    finally:
        _kill(killed)
        _kill(live)
    assert remove_stale_temps(out) == [held]
    assert not list(out.glob(".*.part"))


def test_a_killed_training_runs_temp_file_is_removed_on_rerun(tiny_world: Path, tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch):
    monkeypatch.chdir(tmp_path)
    model = tmp_path / "runs" / "default-first" / "tile-xla" / "model.json"
    killed, stale = _hold_temp(model)
    _kill(killed)

    assert main(["train", "--data", str(tiny_world), "--model", "default-first", "--collections", "tile:xla",
                 "--no-progress"]) == 0

    assert model.is_file() and not stale.exists()


def _alive(p: psutil.Process) -> bool:
    try:
        return p.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_synth_workers_end_with_their_killed_parent_and_a_rerun_cleans_up(tmp_path: Path):
    out = tmp_path / "world"
    synth = [sys.executable, "-m", "fastslow", "data", "synth", "--scale", "demo", "--limit", "1",
             "--workers", "2", "--out", str(out), "--no-progress"]
    proc = subprocess.Popen(synth, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    parent = psutil.Process(proc.pid)
    workers: list[psutil.Process] = []
    try:
        deadline = time.monotonic() + 60
        while len(workers) < 2 and time.monotonic() < deadline and proc.poll() is None:
            workers = parent.children()
            time.sleep(0.01)
        assert len(workers) == 2, "the synth run ended before its workers were seen"
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        deadline = time.monotonic() + 5
        while any(_alive(w) for w in workers) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not [w.pid for w in workers if _alive(w)], "workers outlived their killed parent"
    finally:
        for w in workers:
            if _alive(w):
                w.kill()
        _kill(proc)

    folder = out / "npz_all" / "npz" / "tile" / "xla" / "train"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / ".x.npz.abcd1234.part").write_bytes(b"what a killed writer leaves")  # no process holds it
    rerun = subprocess.run(synth, cwd=REPO, capture_output=True, text=True, timeout=120)
    assert rerun.returncode == 0 and "Traceback" not in rerun.stderr
    assert not list(out.rglob("*.part"))
    assert find_data_root(out).available()


@pytest.fixture
def kaggle_json(no_credentials: Path) -> Path:
    """Where the kaggle package reads its token in this test: ``$KAGGLE_CONFIG_DIR/kaggle.json`` (not yet there)."""
    return no_credentials / "kaggle.json"


FIX = ('it should hold {"username": "...", "key": "..."}: fix it, or save a new API token from '
       "https://www.kaggle.com/settings/api over it")


@pytest.mark.parametrize("text, problem", [
    ('{"username": "me",\n "key": }\n', "not valid JSON (Expecting value at line 2, column 9); " + FIX),
    ('{"username": "me"', "not valid JSON (Expecting ',' delimiter at line 1, column 18); " + FIX),
    ('{"username": "me"}', "no 'key' field; " + FIX),
    ("{}", "no 'username' and no 'key' field; " + FIX),
    ('["me", "secret"]', "a JSON array, not an object; " + FIX),
], ids=["bad-value", "truncated", "no-key", "empty-object", "array"])
def test_a_broken_kaggle_json_is_named_with_its_problem(text: str, problem: str, kaggle_json: Path,
                                                        tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    kaggle_json.write_text(text)
    kaggle_json.chmod(0o600)

    assert main(["kaggle", "download", "--data", str(tmp_path / "data")]) == 2

    assert capsys.readouterr().err == f"error: {kaggle_json}: {problem}\n"
    assert not (tmp_path / "data").exists()


def test_a_kaggle_json_folder_is_named(kaggle_json: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    kaggle_json.mkdir()
    assert main(["kaggle", "download", "--data", str(tmp_path / "data")]) == 2
    assert capsys.readouterr().err == f"error: {kaggle_json} is a folder, not a file; {FIX}\n"


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0, reason="root reads any file")
def test_an_unreadable_kaggle_json_is_named(kaggle_json: Path, tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]):
    kaggle_json.write_text('{"username": "me", "key": "secret"}')
    kaggle_json.chmod(0)
    assert main(["kaggle", "download", "--data", str(tmp_path / "data")]) == 2
    assert capsys.readouterr().err == (f"error: {kaggle_json}: cannot be read (Permission denied); check its owner "
                                       "and permissions (chmod 600)\n")


@pytest.mark.slow
def test_concurrent_fits_end_with_their_killed_pipeline(tiny_world: Path, tmp_path: Path):
    """The fits of `--jobs 2` run in processes forked by a fork server: killing the pipeline ends the server (its
    pipe from the pipeline closes), and the fits with it (each watches its parent, the server)."""
    submit = [sys.executable, "-m", "fastslow", "submit", "--data", str(tiny_world), "--models", "gnn-attn",
              "--jobs", "2", "--param", "epochs=1000", "--param", "patience=1000", "--out-dir", str(tmp_path / "out"),
              "--no-progress"]
    proc = subprocess.Popen(submit, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(REPO)})
    parent = psutil.Process(proc.pid)
    processes: list[psutil.Process] = []
    try:
        deadline = time.monotonic() + 120
        while len(processes) < 3 and time.monotonic() < deadline and proc.poll() is None:
            processes = parent.children(recursive=True)  # the fork server and two fits
            time.sleep(0.05)
        assert len(processes) >= 3, f"the fits were not seen: {processes}; {proc.stderr.read() if proc.stderr else ''}"
        assert any(p.ppid() != proc.pid for p in processes)  # the fits' parent is the server, not the pipeline
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        deadline = time.monotonic() + 10
        while any(_alive(p) for p in processes) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not [p.pid for p in processes if _alive(p)], "fits outlived their killed pipeline"
    finally:
        for p in processes:
            if _alive(p):
                p.kill()
        _kill(proc)


@pytest.mark.parametrize("pidfd", [True, False])
def test_end_with_process_ends_a_worker_when_another_process_ends(pidfd: bool):
    """A worker watching a process that is not its parent ends when that process is killed (by a pidfd, or by
    polling where the platform has none), and at once when it is already gone."""
    target = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    drop = "" if pidfd else "del os.pidfd_open; "
    code = (f"import os, time; {drop}from competition.workers import end_with_process; "
            "end_with_process(int(os.sys.argv[1])); time.sleep(60)")
    watcher = subprocess.Popen([sys.executable, "-c", code, str(target.pid)], cwd=REPO)
    try:
        time.sleep(1.0)
        assert watcher.poll() is None  # the target lives: the worker goes on
        target.kill()
        target.wait()
        assert watcher.wait(timeout=10) == 1
        gone = subprocess.run([sys.executable, "-c", code, str(target.pid)], cwd=REPO, timeout=30)
        assert gone.returncode == 1
    finally:
        _kill(target)
        _kill(watcher)
