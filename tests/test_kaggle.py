"""``fastslow kaggle download|submit``: credentials, HTTP errors, validation before sending, atomic unpacking.

No test touches the network: the Kaggle API is replaced at its one seam, ``fastslow.kaggle._api``.
"""

from __future__ import annotations

import argparse
import hashlib
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest
import requests

import fastslow.kaggle as kg
from competition.collections import Collection, Split
from competition.dataroot import find_data_root
from competition.submission_checks import validate_submission

GRAPH = "npz_all/npz/tile/xla/train/a.npz"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="fastslow")
    sub = parser.add_subparsers(dest="command", required=True)
    kg.add_parser(sub)
    return parser


def run(*argv: str) -> int:
    args = _parser().parse_args(["kaggle", *argv])
    return args.func(args)


def http_error(status: int) -> requests.HTTPError:
    response = requests.Response()
    response.status_code = status
    response.url = "https://www.kaggle.com/api/v1/competitions/data/download-all/predict-ai-model-runtime"
    return requests.HTTPError(f"{status} Client Error", response=response)


def make_zip(path: Path, members: dict[str, bytes]) -> Path:
    with zipfile.ZipFile(path, "w") as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    return path


GOOD_ZIP = {GRAPH: b"not read by the unpacker", "npz_all/npz/layout/xla/random/valid/b.npz": b"x",
            "sample_submission.csv": b"ID,TopConfigs\n"}


class FakeApi:
    """Records every call; ``download_files`` go into the download folder as a zip; ``error`` is raised instead."""

    def __init__(self, members: dict[str, bytes] | None = None, error: BaseException | None = None) -> None:
        self.members = GOOD_ZIP if members is None else members
        self.error = error
        self.calls: list[tuple[Any, ...]] = []

    def competition_download_files(self, competition: str, path: str, force: bool = False,
                                   quiet: bool = True) -> None:
        self.calls.append(("download", competition, path, force))
        if self.error is not None:
            raise self.error
        make_zip(Path(path) / f"{competition}.zip", self.members)

    def competition_submit(self, file_name: str, message: str, competition: str) -> Any:
        self.calls.append(("submit", file_name, message, competition))
        if self.error is not None:
            raise self.error
        return argparse.Namespace(message="Successfully submitted to Google - Fast or Slow? Predict AI Model Runtime")


@pytest.fixture
def fake_api(monkeypatch: pytest.MonkeyPatch) -> FakeApi:
    api = FakeApi()
    monkeypatch.setattr(kg, "_api", lambda: api)
    return api


@pytest.fixture
def no_api(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Fails the test's expectations if Kaggle is contacted: every attempt is recorded."""
    attempts: list[str] = []

    def refuse() -> Any:
        attempts.append("_api")
        raise AssertionError("Kaggle must not be contacted")

    monkeypatch.setattr(kg, "_api", refuse)
    return attempts


@pytest.fixture(scope="module")
def valid_submission(tiny_world: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    from competition.dataset import Dataset
    from competition.submission_format import write_submission
    from fastslow.fitting import predict_split

    root = find_data_root(tiny_world)
    preds = predict_split("random", Dataset.open(root), progress=False)
    path = write_submission(tmp_path_factory.mktemp("subs") / "submission.csv", preds[Split.TEST.value])
    assert validate_submission(path, root, Split.TEST) == []
    return path


# --------------------------------------------------------------------------------------------------------------
# Credentials and HTTP errors
# --------------------------------------------------------------------------------------------------------------


def test_download_without_credentials_exits_2_with_the_message(no_credentials: Path, tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]):
    target = tmp_path / "kaggle-data"
    assert run("download", "--data", str(target)) == 2
    out, err = capsys.readouterr()
    assert err == f"error: {kg.CREDENTIALS_MESSAGE}\n"
    assert "Traceback" not in out + err
    assert not target.exists()


def test_submit_without_credentials_exits_2_with_the_message(no_credentials: Path, tiny_world: Path,
                                                             valid_submission: Path,
                                                             capsys: pytest.CaptureFixture[str]):
    assert run("submit", str(valid_submission), "-m", "first", "--data", str(tiny_world)) == 2
    out, err = capsys.readouterr()
    assert err == f"error: {kg.CREDENTIALS_MESSAGE}\n"
    assert "Traceback" not in out + err


def test_credentials_are_found_in_env_or_kaggle_json(no_credentials: Path, monkeypatch: pytest.MonkeyPatch):
    assert kg.credential_source() is None and kg.kaggle_username() is None
    (no_credentials / "kaggle.json").write_text('{"username": "alice", "key": "k"}')
    assert kg.credential_source() == str(no_credentials / "kaggle.json")
    assert kg.kaggle_username() == "alice"
    monkeypatch.setenv("KAGGLE_USERNAME", "bob")
    monkeypatch.setenv("KAGGLE_KEY", "k")
    assert kg.credential_source() == "$KAGGLE_USERNAME/$KAGGLE_KEY"
    assert kg.kaggle_username() == "bob"


def test_a_kaggle_package_that_cannot_be_imported_is_one_clear_message(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("KAGGLE_USERNAME", "alice")
    monkeypatch.setenv("KAGGLE_KEY", "k")
    monkeypatch.setitem(sys.modules, "kaggle.api.kaggle_api_extended", None)  # import raises ImportError
    with pytest.raises(kg.KaggleError, match=r"^cannot import the kaggle package \(.*\); install it in this "
                                             r"environment with `pip install"):
        kg._api()


@pytest.mark.parametrize(("error", "expected"), [
    (http_error(403), kg.RULES_MESSAGE),
    (http_error(401), kg.BAD_CREDENTIALS_MESSAGE),
])
def test_http_errors_of_download_give_what_to_do(error: Exception, expected: str, tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch,
                                                 capsys: pytest.CaptureFixture[str]):
    api = FakeApi(error=error)
    monkeypatch.setattr(kg, "_api", lambda: api)
    assert run("download", "--data", str(tmp_path / "d")) == 2
    out, err = capsys.readouterr()
    assert err == f"error: {expected}\n"
    assert "Traceback" not in out + err
    assert [c[0] for c in api.calls] == ["download"]
    assert list(tmp_path.iterdir()) == []  # neither the data folder nor an empty download folder


def test_rules_message_names_the_rules_page():
    assert "https://www.kaggle.com/competitions/predict-ai-model-runtime/rules" in kg.RULES_MESSAGE


def test_403_on_submit_gives_the_rules_message(tiny_world: Path, valid_submission: Path,
                                               monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]):
    api = FakeApi(error=http_error(403))
    monkeypatch.setattr(kg, "_api", lambda: api)
    assert run("submit", str(valid_submission), "-m", "m", "--data", str(tiny_world)) == 2
    assert capsys.readouterr().err == f"error: {kg.RULES_MESSAGE}\n"
    assert api.calls == [("submit", str(valid_submission), "m", kg.COMPETITION)]


def test_network_error_is_reported_without_traceback(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                     capsys: pytest.CaptureFixture[str]):
    api = FakeApi(error=requests.ConnectionError("Failed to resolve 'www.kaggle.com'"))
    monkeypatch.setattr(kg, "_api", lambda: api)
    assert run("download", "--data", str(tmp_path / "d")) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: network error while downloading the competition data: Failed to resolve")
    assert "Traceback" not in err


# --------------------------------------------------------------------------------------------------------------
# submit
# --------------------------------------------------------------------------------------------------------------


def test_invalid_submission_exits_1_and_never_contacts_kaggle(tiny_world: Path, valid_submission: Path,
                                                              tmp_path: Path, no_api: list[str],
                                                              capsys: pytest.CaptureFixture[str]):
    lines = valid_submission.read_text().splitlines()
    bad = tmp_path / "bad.csv"
    bad.write_text("\n".join(lines[:2] + [lines[2].split(",")[0] + ",0;0"] + lines[4:]) + "\n")
    bad_id, dropped_id = lines[2].split(",")[0], lines[3].split(",")[0]
    problems = validate_submission(bad, find_data_root(tiny_world), Split.TEST)
    assert [(p.row, p.id) for p in problems] == [(2, bad_id), (2, bad_id), (None, dropped_id)]
    assert run("submit", str(bad), "-m", "m", "--data", str(tiny_world)) == 1
    out = capsys.readouterr().out.splitlines()
    assert out == [f"{bad}: {p}" for p in problems] + [
        f"{bad}: 3 problem(s) against the test split of {tiny_world}; nothing was sent to Kaggle"]
    assert out[0] == f"{bad}: row 2 [{bad_id}]: duplicated index(es): 0"
    assert out[2] == f"{bad}: missing row [{dropped_id}]: expected ID missing from the submission"
    assert no_api == []


def test_missing_submission_file_exits_1(tmp_path: Path, no_api: list[str], capsys: pytest.CaptureFixture[str]):
    assert run("submit", str(tmp_path / "nope.csv"), "-m", "m", "--dry-run") == 1
    assert capsys.readouterr().err == f"{tmp_path / 'nope.csv'}: no such file; nothing was sent to Kaggle\n"
    assert no_api == []


def test_dry_run_prints_what_would_be_sent_without_credentials(no_credentials: Path, tiny_world: Path,
                                                               valid_submission: Path, no_api: list[str],
                                                               capsys: pytest.CaptureFixture[str]):
    assert run("submit", str(valid_submission), "-m", "try 1", "--data", str(tiny_world), "--dry-run") == 0
    out = capsys.readouterr().out
    digest = hashlib.sha256(valid_submission.read_bytes()).hexdigest()
    assert f"  sha256:      {digest}\n" in out
    assert f"  rows:        {2 * len(Collection)}\n" in out
    assert f"  size:        {valid_submission.stat().st_size:,} bytes\n" in out
    assert f"  competition: {kg.COMPETITION}\n" in out
    assert "  message:     try 1\n" in out
    assert out.endswith("nothing was sent to Kaggle.\n")
    assert no_api == []


def test_valid_submission_is_sent(tiny_world: Path, valid_submission: Path, fake_api: FakeApi,
                                  capsys: pytest.CaptureFixture[str]):
    assert run("submit", str(valid_submission), "-m", "gbdt v2", "--data", str(tiny_world)) == 0
    assert fake_api.calls == [("submit", str(valid_submission), "gbdt v2", kg.COMPETITION)]
    out = capsys.readouterr().out
    assert "Kaggle: Successfully submitted to Google - Fast or Slow? Predict AI Model Runtime\n" in out


# --------------------------------------------------------------------------------------------------------------
# download
# --------------------------------------------------------------------------------------------------------------


def _siblings(target: Path) -> list[str]:
    return sorted(p.name for p in target.parent.iterdir() if p.name != target.name)


def test_download_unpacks_atomically_and_is_kept_on_rerun(tmp_path: Path, fake_api: FakeApi,
                                                          capsys: pytest.CaptureFixture[str]):
    target = tmp_path / "data" / "kaggle"
    assert run("download", "--data", str(target)) == 0
    assert fake_api.calls == [("download", kg.COMPETITION, str(tmp_path / "data" / ".kaggle.download"), False)]
    assert (target / GRAPH).read_bytes() == GOOD_ZIP[GRAPH]
    assert (target / "sample_submission.csv").is_file() and (target / kg.MARKER).is_file()
    assert _siblings(target) == []  # no temporary folder, no zip left
    root = find_data_root(target)
    assert root.root == target and root.tree_format == "kaggle"
    out = capsys.readouterr().out
    assert f"data root: {target} (2 graphs)\n" in out
    assert f"pass --data {target} or run `export FASTSLOW_DATA={target}`" in out

    assert run("download", "--data", str(target)) == 0  # complete: kept, Kaggle not asked again
    assert len(fake_api.calls) == 1
    assert "the competition data is already there (use --force" in capsys.readouterr().out

    fake_api.members = {**GOOD_ZIP, "npz_all/npz/tile/xla/test/c.npz": b"y"}
    assert run("download", "--data", str(target), "--force", "--keep-zip") == 0
    assert fake_api.calls[-1] == ("download", kg.COMPETITION, str(tmp_path / "data" / ".kaggle.download"), True)
    assert (target / "npz_all/npz/tile/xla/test/c.npz").is_file()
    assert _siblings(target) == [".kaggle.download"]
    assert (tmp_path / "data" / ".kaggle.download" / f"{kg.COMPETITION}.zip").is_file()


def test_hint_says_when_the_default_search_finds_it(tmp_path: Path, fake_api: FakeApi,
                                                        monkeypatch: pytest.MonkeyPatch,
                                                        capsys: pytest.CaptureFixture[str]):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("FASTSLOW_DATA", str(tmp_path / "data" / "kaggle"))
    assert run("download") == 0
    assert (tmp_path / "data" / "kaggle" / GRAPH).is_file()
    assert capsys.readouterr().out.endswith(f"fastslow finds it by default ({tmp_path / 'data' / 'kaggle'}).\n")


def test_interrupted_run_is_redone_cleanly(tmp_path: Path, fake_api: FakeApi):
    target = tmp_path / "kaggle"
    leftover = tmp_path / ".kaggle.k1ll3d_x.part"  # what a killed unpack leaves behind
    (leftover / "npz_all").mkdir(parents=True)
    assert run("download", "--data", str(target)) == 0
    assert not leftover.exists()
    assert (target / GRAPH).is_file() and _siblings(target) == []


def test_corrupt_zip_leaves_nothing_and_says_what_to_do(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    zip_path = tmp_path / "predict-ai-model-runtime.zip"
    zip_path.write_bytes(b"PK\x03\x04 truncated")
    with pytest.raises(kg.KaggleError, match=r"cannot unpack .*run again with --force"):
        kg.unpack_zip(zip_path, tmp_path / "kaggle")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["predict-ai-model-runtime.zip"]


def test_zip_without_the_tree_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                         capsys: pytest.CaptureFixture[str]):
    api = FakeApi(members={"readme.txt": b"hello"})
    monkeypatch.setattr(kg, "_api", lambda: api)
    assert run("download", "--data", str(tmp_path / "kaggle")) == 2
    err = capsys.readouterr().err
    assert "does not hold the TpuGraphs tree" in err and "it holds readme.txt" in err
    assert not (tmp_path / "kaggle").exists()


def test_zip_members_outside_the_folder_are_refused(tmp_path: Path):
    zip_path = make_zip(tmp_path / "evil.zip", {**GOOD_ZIP, "../outside.txt": b"x"})
    with pytest.raises(kg.KaggleError, match=r"'\.\./outside\.txt' would be written outside"):
        kg.unpack_zip(zip_path, tmp_path / "out" / "kaggle")
    assert not (tmp_path / "outside.txt").exists()
    assert not (tmp_path / "out").exists()  # refused before anything was written, the folder included


def test_existing_foreign_folder_is_not_replaced_without_force(tmp_path: Path, fake_api: FakeApi,
                                                               capsys: pytest.CaptureFixture[str]):
    target = tmp_path / "kaggle"
    target.mkdir()
    (target / "notes.txt").write_text("mine")
    assert run("download", "--data", str(target)) == 2
    assert "exists but holds no complete download" in capsys.readouterr().err
    assert fake_api.calls == [] and (target / "notes.txt").read_text() == "mine"


# --------------------------------------------------------------------------------------------------------------
# Command line
# --------------------------------------------------------------------------------------------------------------


def test_every_option_has_help():
    parser = _parser()
    kaggle = parser._subparsers._group_actions[0].choices["kaggle"]  # type: ignore[union-attr]
    actions = kaggle._subparsers._group_actions[0]  # type: ignore[union-attr]
    assert set(actions.choices) == {"download", "submit"}
    for name, sub in actions.choices.items():
        for action in sub._actions:
            assert action.help, f"kaggle {name} {action.option_strings or action.dest}: no help text"
