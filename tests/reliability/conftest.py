"""Fixtures shared by the reliability tests."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from competition.collections import Collection, Split
from competition.dataroot import find_data_root
from competition.labels import load_labels
from competition.submission_format import write_submission


@pytest.fixture(scope="module")
def perfect(tiny_world: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A valid submission of the tiny world's test split, ranked by the hidden runtimes."""
    root = find_data_root(tiny_world)
    targets = load_labels(root, list(Collection), Split.TEST).targets()
    return write_submission(tmp_path_factory.mktemp("sub") / "perfect.csv", targets)


@pytest.fixture()
def read_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A folder nobody may write into. Root writes anyway, so for root ``os.access`` gives the answer any other
    user gets (what the commands check before any work)."""
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    if os.geteuid() == 0:
        real = os.access

        def access(path, mode, *args, **kwargs):
            if mode & os.W_OK and Path(os.path.abspath(path)) == ro:
                return False
            return real(path, mode, *args, **kwargs)

        monkeypatch.setattr(os, "access", access)
    yield ro
    ro.chmod(0o755)
