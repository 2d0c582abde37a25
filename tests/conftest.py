"""Shared fixtures: one tiny synthetic world per test session, generated once."""

from __future__ import annotations

from pathlib import Path

import pytest

TINY_SEED = 7


@pytest.fixture(autouse=True, scope="session")
def _one_torch_thread():
    """Tests use tiny tensors, and pytest-xdist already runs one worker per core: torch's intra-op threads would
    only contend (tens of times slower on a loaded 2-core machine)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(autouse=True, scope="session")
def _session_runs_dir(tmp_path_factory: pytest.TempPathFactory):
    """``fastslow submit`` saves every model's fit in ``runs/`` of the working directory by default, and reuses a
    finished one: in the tests, in a folder of the session's instead (for fixtures of a wider scope than a test), so
    that no test writes into the checkout's ``runs/`` nor reuses a run from it."""
    from fastslow import pipeline

    patch = pytest.MonkeyPatch()
    patch.setattr(pipeline, "DEFAULT_RUNS_DIR", tmp_path_factory.mktemp("session-runs"))
    yield
    patch.undo()


@pytest.fixture(autouse=True)
def _test_runs_dir(_session_runs_dir: None, tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch):
    """Each test's ``fastslow submit`` and ``predict`` use a runs folder of their own (not under ``tmp_path``, which
    some tests list): no test reuses another's fits."""
    from fastslow import pipeline

    monkeypatch.setattr(pipeline, "DEFAULT_RUNS_DIR", tmp_path_factory.mktemp("runs"))



def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests marked ``slow`` run first (the order is otherwise kept): the workers of ``make test`` (``-n 2 --dist
    loadfile``, a file's tests on one worker) take the files that hold them first and end together, instead of one
    waiting while the other runs a long test that began last."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)

HERMETIC_VARS = ("FASTSLOW_DATA", "KAGGLE_USERNAME", "KAGGLE_KEY", "KAGGLE_API_TOKEN", "KAGGLE_KERNEL_RUN_TYPE",
                 "KAGGLE_CONFIG_DIR")


@pytest.fixture(autouse=True)
def _hermetic(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Each test starts in an empty working directory of its own, with no ``$FASTSLOW_DATA`` and no Kaggle
    variables: nothing a user's checkout holds (the ``data/synthetic-demo`` that ``make submit`` leaves, ``runs/``,
    a data root in the environment) reaches a test. A test that needs one of them sets it itself."""
    for var in HERMETIC_VARS:
        monkeypatch.delenv(var, raising=False)
    cwd = tmp_path_factory.mktemp("cwd")
    monkeypatch.chdir(cwd)
    return cwd


@pytest.fixture(scope="session")
def tiny_world(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny world (two graphs per collection and split at most), read-only for the tests that use it."""
    from competition.synthetic.world import generate_world

    out = tmp_path_factory.mktemp("tiny-world")
    return generate_world(out, scale="tiny", seed=TINY_SEED, limit=2, workers=1, progress=False)


CREDENTIAL_VARS = ("KAGGLE_USERNAME", "KAGGLE_KEY", "KAGGLE_API_TOKEN", "KAGGLE_KERNEL_RUN_TYPE", "KAGGLE_CONFIG_DIR",
                   "XDG_CONFIG_HOME")


@pytest.fixture
def no_credentials(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """No Kaggle credentials anywhere: the variables unset, ``$KAGGLE_CONFIG_DIR`` an empty folder (returned)."""
    for var in CREDENTIAL_VARS:
        monkeypatch.delenv(var, raising=False)
    config = tmp_path / "kaggle-config"
    config.mkdir()
    monkeypatch.setenv("KAGGLE_CONFIG_DIR", str(config))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    return config
