"""The generic package names must resolve to this project, not to some installed namesake."""

from pathlib import Path

import competition
import features
import models

ROOT = Path(__file__).resolve().parents[1]


def test_packages_are_ours():
    for pkg in (competition, features, models):
        assert Path(pkg.__file__).resolve().parent.parent == ROOT
