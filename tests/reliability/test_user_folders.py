"""Nothing of the user's folder runs, and no output deletes what fastslow did not write: the commit recorded on the
leaderboard comes from fastslow's own installation with git's hooks and fsmonitor off; a report or a synthetic
world written into a folder of the user's replaces only what fastslow wrote there."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from fastslow.board import INSTALL_ROOT, git_commit, read_rows
from fastslow.cli import EXIT_ERROR, EXIT_OK
from fastslow.report import REPORT_MARKER
from tests.reliability.helpers import run, snapshot


def git(folder: Path, *args: str) -> str:
    return subprocess.run(["git", "-c", "user.email=t@t", "-c", "user.name=t", *args], cwd=folder, check=True,
                          capture_output=True, text=True).stdout.strip()


@pytest.fixture()
def planted(tmp_path: Path) -> tuple[Path, Path]:
    """A git repository whose config runs a command on every ``git status`` (``core.fsmonitor``) and whose hooks
    would too: ``(repository, the file those commands create)``."""
    repo, marker = tmp_path / "unpacked", tmp_path / "PWNED"
    repo.mkdir()
    git(repo, "init", "-q")
    (repo / "a.txt").write_text("a")
    git(repo, "add", "a.txt")
    git(repo, "commit", "-qm", "x")
    git(repo, "config", "core.fsmonitor", f"touch {marker}; true")
    for hook in ("pre-commit", "post-checkout", "post-index-change", "reference-transaction"):
        path = repo / ".git" / "hooks" / hook
        path.write_text(f"#!/bin/sh\ntouch {marker}\n")
        path.chmod(0o755)
    return repo, marker


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
def test_the_planted_hook_runs_under_plain_git(planted: tuple[Path, Path]):
    """The control: the planted repository does run a command on ``git status``, so the tests below can fail."""
    repo, marker = planted
    subprocess.run(["git", "status", "--porcelain"], cwd=repo, capture_output=True, check=True)
    assert marker.exists()


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
def test_score_runs_nothing_from_the_folder_the_user_stands_in(planted: tuple[Path, Path], tiny_world: Path,
                                                                perfect: Path, tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str],
                                                                monkeypatch: pytest.MonkeyPatch):
    repo, marker = planted
    monkeypatch.chdir(repo)
    board = tmp_path / "lb.csv"
    code, _, err = run(["score", perfect, "--data", tiny_world, "--split", "test", "--leaderboard", board,
                        "--producer", "mine"], capsys)
    assert code == EXIT_OK, err
    assert not marker.exists()
    # The commit is the installation's, not the repository the user stands in.
    row = read_rows(board)[0]
    assert row["commit"] == git_commit() and not row["commit"].startswith(git(repo, "rev-parse", "--short=12", "HEAD"))


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
def test_the_installations_own_repository_is_asked_with_hooks_and_fsmonitor_off(planted: tuple[Path, Path]):
    repo, marker = planted
    assert git_commit(repo) == git(repo, "rev-parse", "--short=12", "HEAD")
    (repo / "a.txt").write_text("changed")
    assert git_commit(repo).endswith("+dirty")
    assert not marker.exists()


def test_no_checkout_records_unknown(tmp_path: Path):
    assert git_commit(tmp_path) == "unknown"
    # Never a repository found upwards: the installation's folder itself must hold .git.
    assert (git_commit() == "unknown") == (not (INSTALL_ROOT / ".git").exists())


# -- fastslow report --out ------------------------------------------------------------------------------------


@pytest.fixture()
def site(tmp_path: Path) -> Path:
    """A static site of the user's: an index.html and other files."""
    site = tmp_path / "site"
    (site / "css").mkdir(parents=True)
    (site / "index.html").write_text("<html>my site</html>")
    (site / "about.html").write_text("about")
    (site / "css" / "main.css").write_text("body {}")
    return site


def _report(out: Path, tiny_world: Path, tmp_path: Path, *extra: str) -> list[object]:
    return ["report", "--out", out, "--data", tiny_world, "--leaderboard", tmp_path / "none.csv", "--runs",
            tmp_path / "no-runs", "--graphs", "0", "--no-progress", *extra]


def test_report_refuses_a_folder_with_an_index_html_that_is_not_a_report(site: Path, tiny_world: Path,
                                                                        tmp_path: Path,
                                                                        capsys: pytest.CaptureFixture[str]):
    before = snapshot(site)
    code, _, err = run(_report(site, tiny_world, tmp_path), capsys)
    assert code == EXIT_ERROR and "Traceback" not in err and err.count("\n") == 1
    assert str(site) in err and "not a fastslow report" in err and "--force" in err
    assert snapshot(site) == before


def test_report_force_writes_beside_the_users_files_and_deletes_none(site: Path, tiny_world: Path, tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]):
    before = snapshot(site)
    code, out, err = run(_report(site, tiny_world, tmp_path, "--force"), capsys)
    assert code == EXIT_OK, err
    assert f"kept your {site / 'index.html'} as index.html.orig" in out
    after = snapshot(site)
    # Every file of the user's is there with its bytes, the index under its kept name.
    assert {k: v for k, v in after.items() if k in before and k != "index.html"} == {
        k: v for k, v in before.items() if k != "index.html"}
    assert after["index.html.orig"] == before["index.html"]
    assert "fastslow report" in (site / "index.html").read_text()
    # Again: the report's own files are replaced, the user's untouched, nothing kept twice.
    code, out, err = run(_report(site, tiny_world, tmp_path, "--force"), capsys)
    assert code == EXIT_OK and "kept your" not in out, err
    listed = set((site / REPORT_MARKER).read_text().split())
    assert not listed & {"about.html", "css", "index.html.orig"}
    assert {k: v for k, v in snapshot(site).items() if k in before and k != "index.html"} == {
        k: v for k, v in before.items() if k != "index.html"}
    assert snapshot(site)["index.html.orig"] == before["index.html"]


# -- fastslow data synth --out --------------------------------------------------------------------------------


@pytest.fixture()
def data_root(tmp_path: Path) -> Path:
    """A hand-made data root of the user's: graphs under npz_all/, a sample submission, notes."""
    root = tmp_path / "mine"
    (root / "npz_all" / "npz" / "tile" / "xla" / "train").mkdir(parents=True)
    (root / "npz_all" / "npz" / "tile" / "xla" / "train" / "k.npz").write_bytes(b"my graph")
    (root / "npz_all" / "extra").mkdir()
    (root / "npz_all" / "extra" / "x.npz").write_bytes(b"my other graph")
    (root / "sample_submission.csv").write_text("ID,TopConfigs\n")
    (root / "notes.txt").write_text("notes")
    return root


def _synth(out: Path, *extra: str) -> list[object]:
    return ["data", "synth", "--scale", "tiny", "--limit", "1", "--workers", "1", "--no-progress", "--out", out,
            *extra]


@pytest.mark.parametrize("force", [False, True])
def test_synth_refuses_a_data_root_that_is_not_a_world(data_root: Path, force: bool, tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]):
    before = snapshot(data_root)
    code, _, err = run(_synth(data_root, *(["--force"] if force else [])), capsys)
    assert code == 2 and "Traceback" not in err and err.count("\n") == 1
    assert str(data_root) in err and ("--force" in err if not force else "sample_submission.csv" in err)
    assert snapshot(data_root) == before


def test_synth_force_writes_a_world_beside_unrelated_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    out = tmp_path / "folder"
    (out / "npz_all" / "extra").mkdir(parents=True)
    (out / "npz_all" / "extra" / "x.npz").write_bytes(b"mine")
    (out / "notes.txt").write_text("notes")
    before = snapshot(out)
    code, _, err = run(_synth(out), capsys)
    assert code == 2 and "--force" in err
    code, _, err = run(_synth(out, "--force"), capsys)
    assert code == EXIT_OK, err
    after = snapshot(out)
    assert {k: after[k] for k in before} == before and (out / "world.json").is_file()


def test_synth_force_over_another_world_removes_only_the_worlds_files(tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture[str]):
    out = tmp_path / "w"
    assert run(_synth(out), capsys)[0] == EXIT_OK
    world_files = set(snapshot(out))
    # The user's folders and files in and beside the world's folders.
    split = out / "npz_all" / "npz" / "tile" / "xla" / "train"
    (split / "mine.npz").write_bytes(b"my graph, no secret twin")
    (out / "npz_all" / "mine").mkdir()
    (out / "npz_all" / "mine" / "a.npz").write_bytes(b"a")
    (out / "secret" / "notes.txt").write_text("notes")
    (out / "README").write_text("readme")
    users = {k: v for k, v in snapshot(out).items() if k not in world_files}
    code, out_text, err = run(_synth(out, "--seed", "3"), capsys)
    assert code == 2 and "--force" in err
    code, _, err = run(_synth(out, "--seed", "3", "--force"), capsys)
    assert code == EXIT_OK, err
    assert {k: v for k, v in snapshot(out).items() if k in users} == users
    assert '"seed": 3' in (out / "world.json").read_text()


def test_synth_refuses_an_unreadable_manifest_naming_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    out = tmp_path / "w"
    out.mkdir()
    (out / "world.json").write_text("{not json")
    code, _, err = run(_synth(out), capsys)
    assert code == 2 and str(out / "world.json") in err and "Traceback" not in err
    assert (out / "world.json").read_text() == "{not json"


def test_synth_leaves_the_users_temporary_looking_files_outside_the_world(tmp_path: Path,
                                                                          capsys: pytest.CaptureFixture[str]):
    out = tmp_path / "w"
    assert run(_synth(out), capsys)[0] == EXIT_OK
    mine = out / "docs" / ".draft.abcdefgh.part"
    mine.parent.mkdir()
    mine.write_text("a draft named like a temporary")
    old = os.stat(mine).st_mtime - 10 ** 6
    os.utime(mine, (old, old))
    assert run(_synth(out, "--seed", "3", "--force"), capsys)[0] == EXIT_OK
    assert mine.read_text() == "a draft named like a temporary"
