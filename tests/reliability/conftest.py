"""Fixtures shared by the reliability tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from competition.collections import Collection, Split
from competition.reader import find_data_root, list_graphs, load_secret_runtime
from competition.submission import submission_id, write_submission


@pytest.fixture(scope="module")
def perfect(tiny_world: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A valid submission of the tiny world's test split, ranked by the hidden runtimes."""
    root = find_data_root(tiny_world)
    runtimes = {submission_id(c, p.stem): load_secret_runtime(root, c, p.stem).ranking_runtime()
                for c in Collection for p in list_graphs(root, c, Split.TEST)}
    return write_submission(tmp_path_factory.mktemp("sub") / "perfect.csv", runtimes)
