"""Kaggle integration: download the competition data, and submit a checked submission file.

Two commands, added to the ``fastslow`` command line by :func:`add_parser`:

* ``fastslow kaggle download [--data DIR] [--force] [--keep-zip]`` fetches the competition zip through the
  ``kaggle`` package and unpacks it atomically into the data root (default ``data/kaggle``): the archive is
  checked (member names, count, size) before anything is written, then extracted into a temporary sibling
  folder which is renamed into place only once complete, so an interrupted run leaves nothing half-written
  behind and a re-run starts the unpacking over cleanly. A complete download is kept unless ``--force``.
* ``fastslow kaggle submit FILE -m MSG [--data DIR] [--dry-run]`` validates FILE against the test split first and
  sends it only if it has no problem; ``--dry-run`` prints what would be sent and needs no credentials.

Every Kaggle failure (no credentials, competition rules not accepted, bad credentials, network) is reported as one
clear message with exit code 2, never a traceback. All access to the Kaggle API goes through :func:`_api`, the one
seam tests replace with a fake.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import io
import json
import os
import shutil
import stat
import sys
import time
import zipfile
import zlib
from collections.abc import Callable, Mapping
from pathlib import Path, PurePosixPath
from typing import Any, TypeVar

from competition.atomic import atomic_write_text, temp_sibling
from competition.collections import Split
from competition.errors import DataFileError, DataRootNotFound
from competition.fingerprint import file_sha256
from competition.nesting import json_loads

COMPETITION = "predict-ai-model-runtime"
COMPETITION_URL = f"https://www.kaggle.com/competitions/{COMPETITION}"
RULES_URL = f"{COMPETITION_URL}/rules"
DEFAULT_DATA_DIR = Path("data") / "kaggle"
MARKER = ".fastslow-download.json"  # written last into a complete unpacked download

MAX_MEMBERS = 32_000
"""The most members an archive may hold to be unpacked: four times the real competition archive's 7,869 files
(the graph counts of ``shared/spec/real-sizes.md`` and ``sample_submission.csv``), rounded up for its folder
entries."""
MAX_UNPACKED_BYTES = 40 * 10**9
"""The most bytes an archive may unpack to: four times the real competition data unpacked, rounded up to 10 GB
(about 9 GB on disk by one report, 6 GB on the Kaggle data page by another:
``shared/spec/tpugraphs-format.md``, "Sizes")."""
_COPY_BLOCK = 1 << 20

EXIT_PROBLEMS = 1  # the submission has problems: nothing was sent
EXIT_ERROR = 2  # Kaggle, the data or the arguments failed

CREDENTIALS_MESSAGE = (
    "no Kaggle credentials found. Create an API token at https://www.kaggle.com/settings/api, then either save "
    "kaggle.json to ~/.kaggle/kaggle.json (chmod 600; or to the folder $KAGGLE_CONFIG_DIR names), or set "
    "KAGGLE_USERNAME and KAGGLE_KEY (or KAGGLE_API_TOKEN) in the environment."
)
RULES_MESSAGE = (
    f"Kaggle refused access (HTTP 403): accept the competition rules at {RULES_URL} with the account whose "
    "credentials are used, then run this again."
)
BAD_CREDENTIALS_MESSAGE = (
    "Kaggle rejected the credentials (HTTP 401): the username or key is wrong or the token has expired. Create a "
    "new API token at https://www.kaggle.com/settings/api and replace ~/.kaggle/kaggle.json (or KAGGLE_USERNAME "
    "and KAGGLE_KEY)."
)

T = TypeVar("T")


class KaggleError(RuntimeError):
    """A Kaggle operation that failed for a reason the user can act on; the message says which and what to do."""


# --------------------------------------------------------------------------------------------------------------
# The API seam
# --------------------------------------------------------------------------------------------------------------


def _config_dirs(env: Mapping[str, str]) -> list[Path]:
    """Folders the kaggle package reads ``kaggle.json`` and tokens from."""
    if env.get("KAGGLE_CONFIG_DIR"):
        return [Path(env["KAGGLE_CONFIG_DIR"]).expanduser()]
    home = Path(env.get("HOME") or Path.home())
    xdg = Path(env["XDG_CONFIG_HOME"]) if env.get("XDG_CONFIG_HOME") else home / ".config"
    return [home / ".kaggle", xdg / "kaggle"]


def credential_source(env: Mapping[str, str] | None = None) -> str | None:
    """Where Kaggle credentials would come from, without importing the kaggle package or using the network.

    Args:
        env: the environment to read (default ``os.environ``).

    Returns:
        A description such as ``$KAGGLE_USERNAME/$KAGGLE_KEY`` or the path of ``kaggle.json``; ``None`` when there
        are none (inside a Kaggle notebook the kaggle package finds its own, so that counts as a source).
    """
    env = os.environ if env is None else env
    if env.get("KAGGLE_USERNAME") and env.get("KAGGLE_KEY"):
        return "$KAGGLE_USERNAME/$KAGGLE_KEY"
    if env.get("KAGGLE_API_TOKEN"):
        return "$KAGGLE_API_TOKEN"
    if env.get("KAGGLE_KERNEL_RUN_TYPE"):
        return "the Kaggle notebook environment"
    home = Path(env.get("HOME") or Path.home())
    candidates = [d / "kaggle.json" for d in _config_dirs(env)]
    candidates += [home / ".kaggle" / name for name in ("access_token", "access_token.txt", "credentials.json")]
    for path in candidates:
        if path.is_file():
            return str(path)
    return None


def kaggle_username(env: Mapping[str, str] | None = None) -> str | None:
    """The Kaggle username: ``$KAGGLE_USERNAME``, else the ``username`` of ``kaggle.json``; ``None`` if unknown.

    Used by the Makefile to fill the ``YOUR_KAGGLE_USERNAME`` placeholder of the notebook's metadata files.
    """
    env = os.environ if env is None else env
    if env.get("KAGGLE_USERNAME"):
        return env["KAGGLE_USERNAME"]
    for d in _config_dirs(env):
        try:
            name = json_loads((d / "kaggle.json").read_text(encoding="utf-8")).get("username")
        except (OSError, ValueError, AttributeError):
            continue
        if name:
            return str(name)
    return None


_JSON_TYPES = {dict: "object", list: "array", str: "string", int: "number", float: "number", bool: "boolean"}
_KAGGLE_JSON_FIX = ('it should hold {"username": "...", "key": "..."}: fix it, or save a new API token from '
                    "https://www.kaggle.com/settings/api over it")


def kaggle_json_problem(env: Mapping[str, str] | None = None) -> str | None:
    """What is wrong with the ``kaggle.json`` the kaggle package would read, in one line naming the file.

    The package skips a file it cannot use without a word and then reports no credentials at all; this says which
    file and why: not a file, unreadable, not UTF-8, invalid JSON (with line and column), not an object, or missing
    ``username`` / ``key``. (The package only warns about a file readable by others, so that is no problem here.)

    Args:
        env: the environment to read (default ``os.environ``).

    Returns:
        The problem of the first ``kaggle.json`` found; ``None`` when it is usable or there is none.
    """
    env = os.environ if env is None else env
    path = next((d / "kaggle.json" for d in _config_dirs(env) if os.path.lexists(d / "kaggle.json")), None)
    if path is None:
        return None
    if path.is_dir():
        return f"{path} is a folder, not a file; {_KAGGLE_JSON_FIX}"
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        return f"{path}: not UTF-8 text (byte {exc.start} undecodable); {_KAGGLE_JSON_FIX}"
    except OSError as exc:
        return f"{path}: cannot be read ({exc.strerror or exc}); check its owner and permissions (chmod 600)"
    try:
        doc = json_loads(text)
    except json.JSONDecodeError as exc:
        return f"{path}: not valid JSON ({exc.msg} at line {exc.lineno}, column {exc.colno}); {_KAGGLE_JSON_FIX}"
    if not isinstance(doc, dict):
        return f"{path}: a JSON {_JSON_TYPES.get(type(doc), 'null')}, not an object; {_KAGGLE_JSON_FIX}"
    missing = [k for k in ("username", "key") if k not in doc]
    if missing:
        return f"{path}: no {' and no '.join(repr(k) for k in missing)} field; {_KAGGLE_JSON_FIX}"
    return None


def _api() -> Any:
    """An authenticated ``KaggleApi``; the one place this module touches the kaggle package.

    The package is imported here, not at the top of the module: importing it authenticates at once, which prints
    and exits when there are no credentials.

    Raises:
        KaggleError: no credentials, the kaggle package cannot be imported, or authentication failed.
    """
    if credential_source() is None:
        raise KaggleError(kaggle_json_problem() or CREDENTIALS_MESSAGE)
    noise = io.StringIO()  # the package prints its own help on failure; the KaggleError says what to do
    try:
        with contextlib.redirect_stdout(noise), contextlib.redirect_stderr(noise):
            from kaggle.api.kaggle_api_extended import KaggleApi

            api = KaggleApi()
            api.authenticate()
    except ImportError as exc:
        name = getattr(exc, "name", None) or ""
        if name and not name.startswith("kaggle"):  # kaggle 2.2.4 imports six without declaring it
            fix = f"the kaggle package needs {name!r}, which is not installed: `pip install {name}`"
        else:
            fix = "install it in this environment with `pip install 'kaggle>=1.6'`"
        raise KaggleError(f"cannot import the kaggle package ({exc}); {fix}") from None
    except SystemExit:  # the package found no usable credentials; a broken kaggle.json is the likely cause
        raise KaggleError(kaggle_json_problem() or CREDENTIALS_MESSAGE) from None
    except Exception as exc:  # noqa: BLE001 - any failure of a third-party login becomes one clear message
        # The package trips over a kaggle.json that is JSON but not an object (AttributeError, TypeError).
        problem = None if _status(exc) is not None or _is_network_error(exc) else kaggle_json_problem()
        raise (KaggleError(problem) if problem else _explain(exc, "authenticating with Kaggle")) from None
    return api


def _status(exc: BaseException) -> int | None:
    """The HTTP status of an error raised by the kaggle package (requests' ``HTTPError`` or its older
    ``ApiException``), or ``None``."""
    response = getattr(exc, "response", None)
    for value in (getattr(response, "status_code", None), getattr(exc, "status", None),
                  getattr(exc, "status_code", None)):
        if isinstance(value, int):
            return value
    return None


def _is_network_error(exc: BaseException) -> bool:
    names = {cls.__name__ for cls in type(exc).__mro__}
    return bool(names & {"ConnectionError", "Timeout", "NewConnectionError", "MaxRetryError", "ProtocolError",
                         "SSLError", "ProxyError", "TimeoutError", "gaierror"})


def _explain(exc: BaseException, doing: str) -> KaggleError:
    """Turn an exception from the kaggle package into a :class:`KaggleError` that says what to do."""
    status = _status(exc)
    if status == 403:
        return KaggleError(RULES_MESSAGE)
    if status == 401:
        return KaggleError(BAD_CREDENTIALS_MESSAGE)
    if status == 404:
        return KaggleError(f"Kaggle answered 404 (not found) while {doing}: is the competition {COMPETITION!r} "
                           f"visible to this account? ({COMPETITION_URL})")
    if status == 429:
        return KaggleError(f"Kaggle answered 429 (too many requests) while {doing}: wait a while and try again.")
    if status is not None:
        return KaggleError(f"Kaggle answered HTTP {status} while {doing}: {exc}")
    if _is_network_error(exc):
        return KaggleError(f"network error while {doing}: {exc}. Check the internet connection (and any proxy), "
                           "then run this again.")
    if isinstance(exc, SystemExit):
        return KaggleError(f"the kaggle package stopped while {doing} (exit code {exc.code}).")
    return KaggleError(f"{doing} failed: {type(exc).__name__}: {exc}")


def _call(doing: str, fn: Callable[[], T]) -> T:
    """Run one Kaggle API call, turning any failure into a :class:`KaggleError`."""
    try:
        return fn()
    except KaggleError:
        raise
    except (Exception, SystemExit) as exc:  # noqa: BLE001 - see _explain
        raise _explain(exc, doing) from None


def _error(message: str) -> int:
    print(f"error: {message}", file=sys.stderr)
    return EXIT_ERROR


# --------------------------------------------------------------------------------------------------------------
# download
# --------------------------------------------------------------------------------------------------------------


def _is_complete(target: Path) -> bool:
    """A finished download: our marker (written last), or a data root put there by hand."""
    if (target / MARKER).is_file():
        return True
    from competition.dataroot import find_data_root

    try:
        find_data_root(target)
    except DataRootNotFound:
        return False
    return True


def _damaged(zip_path: Path, exc: BaseException) -> KaggleError:
    return KaggleError(f"{zip_path}: cannot unpack ({type(exc).__name__}: {exc}); the download is probably "
                       "incomplete or damaged: run again with --force to download it anew")


def _refused(zip_path: Path, problem: str) -> KaggleError:
    return KaggleError(f"{zip_path}: {problem}; refusing to unpack this archive (it is not the "
                       "competition's, or it is damaged): run again with --force to download it anew")


def _checked_members(zf: zipfile.ZipFile, zip_path: Path) -> list[tuple[zipfile.ZipInfo, PurePosixPath]]:
    """The archive's members with their paths inside the extraction folder, read from its central directory
    alone; nothing is written.

    Refused: more than :data:`MAX_MEMBERS` members, more than :data:`MAX_UNPACKED_BYTES` declared in all, a
    member that would land outside the extraction folder (absolute, ``..``, a drive) or has no name, a
    symbolic link, an encrypted member.

    Raises:
        KaggleError: the first problem found, naming the archive, the member or the bound.
    """
    infos = zf.infolist()
    if len(infos) > MAX_MEMBERS:
        raise _refused(zip_path, f"holds {len(infos):,} members, more than the limit of {MAX_MEMBERS:,} "
                                 "(four times the real competition archive's)")
    total = sum(m.file_size for m in infos)
    if total > MAX_UNPACKED_BYTES:
        raise _refused(zip_path, f"unpacks to {total:,} bytes, more than the limit of "
                                 f"{MAX_UNPACKED_BYTES:,} bytes (four times the real competition data)")
    members = []
    for m in infos:
        p = PurePosixPath(m.filename.replace("\\", "/"))
        if p.is_absolute() or ".." in p.parts or (p.parts and ":" in p.parts[0]):
            raise KaggleError(f"{zip_path}: member {m.filename!r} would be written outside the data folder; "
                              "refusing to unpack this archive")
        if not p.parts and not m.is_dir():
            raise _refused(zip_path, f"member {m.filename!r} has no file name")
        if stat.S_ISLNK(m.external_attr >> 16):
            raise _refused(zip_path, f"member {m.filename!r} is a symbolic link")
        if m.flag_bits & 0x1:
            raise _refused(zip_path, f"member {m.filename!r} is encrypted")
        members.append((m, p))
    return members


def _write_members(zf: zipfile.ZipFile, members: list[tuple[zipfile.ZipInfo, PurePosixPath]], dest: Path,
                   zip_path: Path, *, limit: int) -> None:
    """Write the checked members into the folder ``dest``, counting the bytes written.

    The count stops the unpack once it passes ``limit``, whatever the members' headers declared: the declared
    sizes were checked already, this bounds what is actually written.

    Raises:
        KaggleError: more than ``limit`` bytes.
        zipfile.BadZipFile, zlib.error, EOFError, OSError, NotImplementedError: the archive is damaged, uses
            an unsupported compression, or a file cannot be written.
    """
    written = 0
    for m, rel in members:
        out = dest.joinpath(*rel.parts)
        if m.is_dir():
            out.mkdir(parents=True, exist_ok=True)
            continue
        out.parent.mkdir(parents=True, exist_ok=True)
        with zf.open(m) as src, open(out, "wb") as dst:
            while block := src.read(_COPY_BLOCK):
                written += len(block)
                if written > limit:
                    raise _refused(zip_path, f"unpacks to more than the limit of {limit:,} bytes (at member "
                                             f"{m.filename!r}, whose header declares {m.file_size:,})")
                dst.write(block)


def unpack_zip(zip_path: str | os.PathLike[str], target: str | os.PathLike[str], *, force: bool = False) -> Path:
    """Unpack a competition zip into ``target`` atomically.

    The archive is checked first, from its central directory, before anything is written: member names, no
    symbolic links, at most :data:`MAX_MEMBERS` members and :data:`MAX_UNPACKED_BYTES` in all (see
    :func:`_checked_members`). It then goes into a temporary sibling folder (``.<name>.<random>.part``, see
    :func:`~competition.atomic.temp_sibling`), counting the bytes written against the same bound, is checked to
    hold the TpuGraphs tree, gets a marker file, and only then is renamed to ``target``. The previous
    ``target`` is set aside into another such temporary, removed once the new one is in place. A killed run
    leaves only temporaries, which the next run removes before starting over; those of a concurrent run, still
    locked, are left alone, and nothing else beside ``target`` is ever removed.

    Args:
        zip_path: the downloaded archive.
        target: the folder to create (the data root).
        force: replace an existing ``target``; without it an existing non-empty ``target`` is an error.

    Returns:
        ``target``.

    Raises:
        KaggleError: the archive is corrupt, unsafe, too large or does not hold the TpuGraphs tree, or
            ``target`` exists.
    """
    from competition.dataroot import find_data_root

    zip_path, target = Path(zip_path), Path(target).absolute()
    if target.exists() and not force and (not target.is_dir() or any(target.iterdir())):
        raise KaggleError(f"{target} already exists and is not empty; use --force to replace it")
    try:
        zf = zipfile.ZipFile(zip_path)
    except (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError, OSError) as exc:
        raise _damaged(zip_path, exc) from None
    with zf:
        members = _checked_members(zf, zip_path)
        with temp_sibling(target, directory=True) as tmp:
            try:
                _write_members(zf, members, tmp, zip_path, limit=MAX_UNPACKED_BYTES)
            except (zipfile.BadZipFile, zipfile.LargeZipFile, zlib.error, EOFError, OSError,
                    NotImplementedError) as exc:
                raise _damaged(zip_path, exc) from None
            try:
                find_data_root(tmp)
            except DataRootNotFound:
                found = ", ".join(sorted(p.name for p in tmp.iterdir())) or "nothing"
                raise KaggleError(f"{zip_path}: the archive does not hold the TpuGraphs tree (npz_all/npz/ "
                                  f"or npz/ with tile/ or layout/); it holds {found}") from None
            marker = {"competition": COMPETITION, "zip": zip_path.name, "zip_bytes": zip_path.stat().st_size,
                      "unpacked_at": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
            atomic_write_text(tmp / MARKER, json.dumps(marker, indent=2) + "\n")
            with temp_sibling(target, directory=True) as aside:  # removed, with the previous target, on exit
                previous = aside / target.name
                if os.path.lexists(target):
                    os.replace(target, previous)
                try:
                    os.replace(tmp, target)
                except OSError:
                    if os.path.lexists(previous):
                        os.replace(previous, target)
                    raise
    return target


def _usage_hint(target: Path) -> str:
    """How later commands find ``target``: automatically, or with ``--data`` / ``FASTSLOW_DATA``."""
    from competition.dataroot import find_data_root

    try:
        found = find_data_root().root.resolve()
    except DataRootNotFound:
        found = None
    if found == target.resolve():
        return f"fastslow finds it by default ({target})."
    from competition.errors import shell_word

    return (f"fastslow does not look there by default: pass --data {shell_word(target)} or run "
            f"`export FASTSLOW_DATA={shell_word(target)}`.")


def download(data: str | os.PathLike[str] | None = None, *, force: bool = False, keep_zip: bool = False) -> Path:
    """Download the competition data and unpack it into ``data`` (default ``data/kaggle``).

    The zip is fetched into a hidden sibling folder (``.<name>.download``; the kaggle package resumes a partial
    file there) and unpacked with :func:`unpack_zip`; the zip is deleted afterwards unless ``keep_zip``.

    Args:
        data: the data root to create.
        force: download and unpack again even if a complete download is there.
        keep_zip: keep the downloaded zip.

    Returns:
        The data root.

    Raises:
        KaggleError: credentials, rules, network, or a bad archive; the message says what to do.
    """
    target = Path(data if data is not None else DEFAULT_DATA_DIR).absolute()
    if not force and target.exists() and _is_complete(target):
        print(f"{target}: the competition data is already there (use --force to download it again).")
        return target
    if not force and target.exists() and (not target.is_dir() or any(target.iterdir())):
        raise KaggleError(f"{target} exists but holds no complete download (no {MARKER}, no TpuGraphs tree); "
                          "use --force to replace it, or choose another --data folder")
    api = _api()
    zip_dir = target.with_name(f".{target.name}.download")
    zip_dir.mkdir(parents=True, exist_ok=True)
    print(f"downloading {COMPETITION} into {zip_dir} ...")
    try:
        _call("downloading the competition data",
              lambda: api.competition_download_files(COMPETITION, path=str(zip_dir), force=force, quiet=False))
    except KaggleError:
        if not any(zip_dir.iterdir()):  # keep a partial zip: the next run resumes it
            zip_dir.rmdir()
        raise
    zips = sorted(zip_dir.glob("*.zip"), key=lambda p: (p.name != f"{COMPETITION}.zip", p.name))
    if not zips:
        raise KaggleError(f"{zip_dir}: the download finished but no .zip file is there")
    print(f"unpacking {zips[0]} into {target} ...")
    unpack_zip(zips[0], target, force=True)
    if keep_zip:
        print(f"kept {zips[0]}")
    else:
        shutil.rmtree(zip_dir, ignore_errors=True)
    return target


def _cmd_download(args: argparse.Namespace) -> int:
    try:
        target = download(args.data, force=args.force, keep_zip=args.keep_zip)
    except KaggleError as exc:
        return _error(str(exc))
    from competition.dataroot import find_data_root

    counts = find_data_root(target).available()
    print(f"data root: {target} ({sum(counts.values())} graphs)")
    print(_usage_hint(target))
    return 0


# --------------------------------------------------------------------------------------------------------------
# submit
# --------------------------------------------------------------------------------------------------------------


def _count_rows(path: Path) -> int:
    with open(path, newline="", encoding="utf-8-sig") as f:
        return max(sum(1 for fields in csv.reader(f) if fields) - 1, 0)


def submit(file: str | os.PathLike[str], message: str, data: str | os.PathLike[str] | None = None, *,
           dry_run: bool = False) -> int:
    """Validate a submission against the test split, then send it to Kaggle (or, ``dry_run``, describe it).

    Args:
        file: the submission CSV.
        message: the submission's description on Kaggle.
        data: the data root (default: found as every command does).
        dry_run: print what would be sent and stop; needs no credentials.

    Returns:
        The exit code: 0 sent (or dry run), 1 the file has problems (nothing sent), 2 Kaggle or the data failed.
    """
    from competition.dataroot import find_data_root
    from competition.submission_checks import validate_submission
    from competition.submission_format import problem_count

    path = Path(file)
    if not path.is_file():
        print(f"{path}: no such file; nothing was sent to Kaggle", file=sys.stderr)
        return EXIT_PROBLEMS
    try:
        root = find_data_root(data)
    except DataRootNotFound as exc:
        return _error(str(exc))
    try:
        problems = validate_submission(path, root, Split.TEST)
    except (OSError, UnicodeDecodeError, DataFileError, ValueError) as exc:
        print(f"{path}: cannot be checked: {exc}; nothing was sent to Kaggle", file=sys.stderr)
        return EXIT_PROBLEMS
    if problems:
        for p in problems:
            print(f"{path}: {p}")
        print(f"{path}: {problem_count(problems)} problem(s) against the test split of {root.root}; nothing was "
              "sent to Kaggle")
        return EXIT_PROBLEMS
    size, rows, digest = path.stat().st_size, _count_rows(path), file_sha256(path)
    summary = (f"  file:        {path.absolute()}\n  size:        {size:,} bytes\n  rows:        {rows}\n"
               f"  sha256:      {digest}\n  competition: {COMPETITION}\n  message:     {message}")
    if dry_run:
        print(f"dry run: valid against {root.root}; would send:\n{summary}\nnothing was sent to Kaggle.")
        return 0
    try:
        api = _api()
        print(f"submitting:\n{summary}")
        result = _call("submitting", lambda: api.competition_submit(str(path), message, COMPETITION))
    except KaggleError as exc:
        return _error(str(exc))
    reply = getattr(result, "message", None) or str(result)
    if reply == "Could not submit to competition":  # the kaggle package's upload-failed reply
        return _error(f"{path}: Kaggle did not accept the upload ({reply}); try again later")
    print(f"Kaggle: {reply}\nsee {COMPETITION_URL}/submissions for the score.")
    return 0


def _cmd_submit(args: argparse.Namespace) -> int:
    return submit(args.file, args.message, args.data, dry_run=args.dry_run)


# --------------------------------------------------------------------------------------------------------------
# Command line
# --------------------------------------------------------------------------------------------------------------


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``kaggle`` command (``download``, ``submit``) to the ``fastslow`` command line.

    Args:
        subparsers: what ``parser.add_subparsers()`` returned; each sub-command sets ``func`` (Namespace -> exit
            code) with ``set_defaults``.
    """
    from competition.dataroot import DATA_ROOT_HELP

    kaggle = subparsers.add_parser(
        "kaggle", help="download the competition data, submit to Kaggle",
        description=f"Talk to Kaggle about the competition {COMPETITION!r}. Needs Kaggle credentials "
                    "(~/.kaggle/kaggle.json, or KAGGLE_USERNAME and KAGGLE_KEY) and the rules accepted at "
                    f"{RULES_URL}.",
    )
    ksub = kaggle.add_subparsers(dest="kaggle_command", metavar="ACTION", required=True)

    dl = ksub.add_parser(
        "download", help="download the competition data and unpack it into the data root",
        description="Download the competition zip through the kaggle package and unpack it atomically (into a "
                    "temporary sibling folder, renamed into place when complete). A complete download is kept "
                    "unless --force; an interrupted one is redone cleanly.",
    )
    dl.add_argument("--data", metavar="DIR", default=None,
                    help=f"folder to unpack into: it becomes the data root (default: {DEFAULT_DATA_DIR})")
    dl.add_argument("--force", action="store_true",
                    help="download and unpack again even if a complete download is there")
    dl.add_argument("--keep-zip", action="store_true",
                    help="keep the downloaded zip (in .<DIR name>.download beside DIR) instead of deleting it")
    dl.set_defaults(func=_cmd_download)

    sm = ksub.add_parser(
        "submit", help="validate a submission against the test split, then send it to Kaggle",
        description="Validate FILE against the test split of the data root; any problem is printed with its row "
                    "and ID and nothing is sent (exit 1). Otherwise submit it to Kaggle with the message.",
    )
    sm.add_argument("file", metavar="FILE", help="the submission CSV")
    sm.add_argument("-m", "--message", required=True, help="the submission's description on Kaggle")
    sm.add_argument("--data", metavar="DIR", default=None, help=f"{DATA_ROOT_HELP}. The submission is validated against it")
    sm.add_argument("--dry-run", action="store_true",
                    help="validate and print what would be sent (file, size, rows, SHA-256, competition, message) "
                         "without contacting Kaggle; needs no credentials")
    sm.set_defaults(func=_cmd_submit)
