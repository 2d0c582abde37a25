"""Fixtures shared by the reliability tests."""

from __future__ import annotations

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
