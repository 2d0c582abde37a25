"""``fastslow kaggle download``'s unpack: the archive is checked before anything is written (names, symlinks,
member count, unpacked size), the bytes written are counted, and only the unpack's own stale temporaries are
removed.

Every archive is built by hand in ``tmp_path``; the Kaggle API is replaced at its seam
(``fastslow.kaggle._api``) by a fake that copies the archive into the download folder. Nothing touches the
network.
"""

from __future__ import annotations

import re
import shutil
import struct
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest

import fastslow.kaggle as kg
from competition.atomic import temp_sibling
from fastslow.cli import EXIT_ERROR, main

GRAPH = "npz_all/npz/tile/xla/train/a.npz"
TREE = {GRAPH: b"tile graph", "npz_all/npz/layout/xla/random/valid/b.npz": b"layout graph",
        "sample_submission.csv": b"ID,TopConfigs\n"}
NEWER = {**TREE, GRAPH: b"tile graph, newer"}
REPO = Path(__file__).resolve().parents[2]


class ZipApi:
    """A Kaggle API whose download copies ``archive`` into the download folder as the competition's zip."""

    def __init__(self, archive: Path) -> None:
        self.archive = archive

    def competition_download_files(self, competition: str, path: str, force: bool = False,
                                   quiet: bool = True) -> None:
        shutil.copyfile(self.archive, Path(path) / f"{competition}.zip")


def make_zip(path: Path, members: dict[str, bytes]) -> Path:
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    return path


def download(target: Path, archive: Path, monkeypatch: pytest.MonkeyPatch,
             capsys: pytest.CaptureFixture[str], *, force: bool = True) -> tuple[int, str, str]:
    """Exit code, stdout and stderr of ``fastslow kaggle download --data target [--force]`` fetching
    ``archive``."""
    monkeypatch.setattr(kg, "_api", lambda: ZipApi(archive))
    capsys.readouterr()
    code = main(["kaggle", "download", "--data", str(target), *(["--force"] if force else [])])
    out, err = capsys.readouterr()
    return code, out, err


def downloaded(target: Path) -> Path:
    """Where the download leaves the zip it unpacks (and keeps it when the unpack fails)."""
    return target.with_name(f".{target.name}.download") / f"{kg.COMPETITION}.zip"


def tree(folder: Path) -> dict[str, bytes | None]:
    """Every file (with its bytes) and folder (``None``) under ``folder``."""
    return {p.relative_to(folder).as_posix(): (p.read_bytes() if p.is_file() else None)
            for p in sorted(folder.rglob("*"))}


def previous_download(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                      capsys: pytest.CaptureFixture[str]) -> tuple[Path, dict[str, bytes | None]]:
    """A complete earlier download in ``tmp_path/data`` and its contents."""
    target = tmp_path / "data"
    code, _, err = download(target, make_zip(tmp_path / "good.zip", TREE), monkeypatch, capsys, force=False)
    assert (code, err) == (0, "")
    return target, tree(target)


@pytest.fixture
def no_temp_sibling(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """Records every temporary the unpack asks for; a refused archive must ask for none."""
    asked: list[Path] = []

    def spy(path: Any, **kwargs: Any) -> Any:
        asked.append(Path(path))
        return temp_sibling(path, **kwargs)

    monkeypatch.setattr(kg, "temp_sibling", spy)
    return asked


def one_line(err: str) -> str:
    assert err.endswith("\n") and err.count("\n") == 1, err
    assert err.startswith("error: "), err
    return err


# ------------------------------------------------------------------------------------------------------------
# Only the unpack's own temporaries are removed
# ------------------------------------------------------------------------------------------------------------


def test_a_backup_named_like_an_old_download_survives(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture[str]):
    target, _ = previous_download(tmp_path, monkeypatch, capsys)
    backups = [tmp_path / ".data.mybackup.old", tmp_path / ".data.12345.old", tmp_path / ".data.1.old"]
    for i, backup in enumerate(backups):
        (backup / "npz").mkdir(parents=True)
        (backup / "npz" / "mine.npz").write_bytes(bytes(range(i, i + 64)))
        (backup / "notes.txt").write_text(f"my backup {i}\n")
    before = {b.name: tree(b) for b in backups}

    code, out, err = download(target, make_zip(tmp_path / "newer.zip", NEWER), monkeypatch, capsys)

    assert (code, err) == (0, "") and f"data root: {target} (2 graphs)" in out
    assert (target / GRAPH).read_bytes() == NEWER[GRAPH]
    assert {b.name: tree(b) for b in backups} == before
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".data")) == sorted(before)


def test_a_target_named_with_glob_characters_leaves_its_siblings_alone(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch,
                                                                       capsys: pytest.CaptureFixture[str]):
    target = tmp_path / "[xy]"
    siblings = [tmp_path / name for name in ("x", ".x.mine.old", ".y.1.old", ".x.abcd1234.part")]
    for sibling in siblings:
        sibling.mkdir()
        (sibling / "keep.bin").write_bytes(sibling.name.encode() * 3)
    before = {s.name: tree(s) for s in siblings}

    code, _, err = download(target, make_zip(tmp_path / "good.zip", TREE), monkeypatch, capsys, force=False)
    assert (code, err) == (0, "")
    code, out, err = download(target, make_zip(tmp_path / "newer.zip", NEWER), monkeypatch, capsys)

    assert (code, err) == (0, "") and f"data root: {target} (2 graphs)" in out
    assert (target / GRAPH).read_bytes() == NEWER[GRAPH]
    assert {s.name: tree(s) for s in siblings} == before


KILLED_UNPACK = """
import sys, time
from competition.atomic import temp_sibling
with temp_sibling(sys.argv[1], directory=True) as tmp:
    (tmp / "half.npz").write_bytes(b"half written")
    print(tmp, flush=True)
    time.sleep(120)
"""


def test_a_killed_unpacks_temporary_is_removed_and_a_live_one_kept(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch,
                                                                   capsys: pytest.CaptureFixture[str]):
    target, _ = previous_download(tmp_path, monkeypatch, capsys)
    proc = subprocess.Popen([sys.executable, "-c", KILLED_UNPACK, str(target)], cwd=REPO,
                            stdout=subprocess.PIPE, text=True)
    try:
        stale = Path(proc.stdout.readline().strip())  # type: ignore[union-attr]
    finally:
        proc.kill()
        proc.communicate()
    assert stale.name.startswith(".data.") and (stale / "half.npz").is_file()

    with temp_sibling(target, directory=True) as live:  # a concurrent unpack, still writing
        (live / "half.npz").write_bytes(b"being written")
        code, out, err = download(target, make_zip(tmp_path / "newer.zip", NEWER), monkeypatch, capsys)
        assert (code, err) == (0, "") and f"data root: {target} (2 graphs)" in out
        assert not stale.exists()
        assert tree(live) == {"half.npz": b"being written"}
    assert (target / GRAPH).read_bytes() == NEWER[GRAPH]
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".data")) == []


# ------------------------------------------------------------------------------------------------------------
# The archive is checked before anything is written
# ------------------------------------------------------------------------------------------------------------


def test_a_zip_bomb_is_refused_and_the_previous_data_kept(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str],
                                                          no_temp_sibling: list[Path]):
    target, before = previous_download(tmp_path, monkeypatch, capsys)
    no_temp_sibling.clear()
    bomb = make_zip(tmp_path / "bomb.zip", {**TREE, "npz_all/npz/tile/xla/train/zeros.npz": bytes(8 << 20)})
    assert bomb.stat().st_size < 64 << 10
    monkeypatch.setattr(kg, "MAX_UNPACKED_BYTES", 1 << 20)

    code, _, err = download(target, bomb, monkeypatch, capsys)

    assert code == EXIT_ERROR
    assert f"error: {downloaded(target)}: unpacks to 8,388,644 bytes" in one_line(err)
    assert "more than the limit of 1,048,576 bytes" in err and "--force" in err
    assert no_temp_sibling == []
    assert tree(target) == before
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".data")) == [".data.download"]


def test_too_many_members_are_refused_and_the_previous_data_kept(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch,
                                                                 capsys: pytest.CaptureFixture[str],
                                                                 no_temp_sibling: list[Path]):
    target, before = previous_download(tmp_path, monkeypatch, capsys)
    no_temp_sibling.clear()
    extra = {f"npz_all/npz/tile/xla/train/{i}.npz": b"" for i in range(20)}
    many = make_zip(tmp_path / "many.zip", {**TREE, **extra})
    monkeypatch.setattr(kg, "MAX_MEMBERS", 10)

    code, _, err = download(target, many, monkeypatch, capsys)

    assert code == EXIT_ERROR
    assert f"error: {downloaded(target)}: holds 23 members, more than the limit of 10" in one_line(err)
    assert no_temp_sibling == []
    assert tree(target) == before


def test_a_symlink_member_is_refused_and_the_previous_data_kept(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch,
                                                                capsys: pytest.CaptureFixture[str],
                                                                no_temp_sibling: list[Path]):
    target, before = previous_download(tmp_path, monkeypatch, capsys)
    no_temp_sibling.clear()
    archive = make_zip(tmp_path / "link.zip", TREE)
    with zipfile.ZipFile(archive, "a") as zf:
        link = zipfile.ZipInfo("npz_all/npz/tile/xla/train/link.npz")
        link.create_system, link.external_attr = 3, 0o120777 << 16
        zf.writestr(link, "/etc/passwd")

    code, _, err = download(target, archive, monkeypatch, capsys)

    assert code == EXIT_ERROR
    assert (f"error: {downloaded(target)}: member 'npz_all/npz/tile/xla/train/link.npz' is a symbolic link"
            in one_line(err))
    assert no_temp_sibling == []
    assert tree(target) == before


def understate(archive: Path, name: str, size: int) -> None:
    """Make the local and central headers of member ``name`` declare ``size`` uncompressed bytes."""
    data, encoded = bytearray(archive.read_bytes()), name.encode()
    for signature, size_at, name_at in ((b"PK\x03\x04", 22, 30), (b"PK\x01\x02", 24, 46)):
        at = data.find(signature)
        while data[at + name_at:at + name_at + len(encoded)] != encoded:
            at = data.find(signature, at + 1)
            assert at >= 0, f"no {signature!r} header for {name}"
        struct.pack_into("<I", data, at + size_at, size)
    archive.write_bytes(bytes(data))


def test_a_member_whose_header_understates_its_size_is_refused(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch,
                                                               capsys: pytest.CaptureFixture[str]):
    target, before = previous_download(tmp_path, monkeypatch, capsys)
    liar = "npz_all/npz/tile/xla/train/liar.npz"
    archive = make_zip(tmp_path / "liar.zip", {**TREE, liar: bytes(4 << 20)})
    understate(archive, liar, 100)
    with zipfile.ZipFile(archive) as zf:
        assert zf.getinfo(liar).file_size == 100
    monkeypatch.setattr(kg, "MAX_UNPACKED_BYTES", 1 << 20)  # the declared sizes pass, the real ones would not

    code, _, err = download(target, archive, monkeypatch, capsys)

    assert code == EXIT_ERROR
    damaged = f"error: {downloaded(target)}: cannot unpack (BadZipFile: Bad CRC-32 for file {liar!r})"
    assert damaged in one_line(err)
    assert tree(target) == before
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".data")) == [".data.download"]


def test_the_bytes_written_are_counted_whatever_the_headers_say(tmp_path: Path):
    """The second guard: writing stops once the bytes actually written pass the bound, even where the declared
    sizes were within it (zipfile itself stops a member at its declared size; this does not rely on it)."""
    archive = make_zip(tmp_path / "big.zip", {**TREE, "npz_all/npz/tile/xla/train/big.npz": bytes(3 << 20)})
    out = tmp_path / "out"
    out.mkdir()
    with zipfile.ZipFile(archive) as zf:
        members = kg._checked_members(zf, archive)
        bound = rf"^{re.escape(str(archive))}: unpacks to more than the limit of 1,048,576 bytes"
        with pytest.raises(kg.KaggleError, match=bound):
            kg._write_members(zf, members, out, archive, limit=1 << 20)
    assert sum(p.stat().st_size for p in out.rglob("*") if p.is_file()) <= 1 << 20
