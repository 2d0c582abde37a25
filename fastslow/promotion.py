"""Which run's submission stands as ``submission.csv``: a better result is never replaced by a worse one.

``submission.csv`` has a record beside it, ``submission.json``: the run that wrote it, its producer, its valid scores,
the valid protocol and data root they were scored on, the file's SHA-256, and the settings of that run (each model's
and the ensemble's). A run puts its best submission in place only when it scores at least as well on valid as the
one there, on the same protocol, data root and collections (:func:`promote`). Otherwise:

* a worse submission is written beside it as ``submission.new.csv`` (with ``submission.new.json``), and
  ``submission.csv`` is kept (a run whose own submission is put in place later removes the ``.new`` files it
  wrote);
* a submission that cannot be compared (no record, a record of another protocol or data root, or a file changed
  since its record was written) is moved aside as ``submission.prev.csv`` (``submission.prev-1.csv``, ...) with its
  record, never deleted.

The ensemble's settings file, ``ensemble.json``, belongs to the submission: it is written with the run's submission
when that is put in place, as ``ensemble.new.json`` beside ``submission.new.csv`` otherwise, and an earlier run's
is moved aside with the submission it belonged to. A run may put its submission in place several times (after each
model that beats its best so far); the comparison and the writes hold a lock on the output folder, so two runs
into one folder take turns.

``fastslow predict`` writes through the same function under its ``--out`` name (``<stem>.csv`` with the record
``<stem>.json``, ``<stem>.new.csv``, ``<stem>.prev.csv``): its record has no valid score (``combined`` is ``None``:
predict does not score), so it never replaces a scored submission (it goes beside it as ``<stem>.new.csv``), it
replaces an unscored one of its own, and a submission of ``submit`` puts an unscored one aside. A file with no record
saying fastslow wrote it is refused there (``foreign="refuse"``) unless the caller is told to keep it aside.
"""

from __future__ import annotations

import json
import os
import secrets
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from competition.atomic import RejectedOutput, atomic_write_text, exclusive_lock, first_free, temp_sibling
from competition.fingerprint import file_sha256
from competition.nesting import json_loads

SUBMISSION = "submission.csv"
RECORD = "submission.json"
ENSEMBLE_FILE = "ensemble.json"
RECORD_FORMAT = 1


def new_run_id() -> str:
    """A name for one pipeline run: its start time and a random part."""
    return f"{datetime.now(UTC):%Y%m%dT%H%M%SZ}-{secrets.token_hex(3)}"


@dataclass
class SubmissionRecord:
    """What ``submission.json`` says of the ``submission.csv`` beside it.

    Attributes:
        run: the run that wrote it (:func:`new_run_id`).
        producer: the model (or ``ensemble``) whose test predictions it holds.
        combined: its producer's combined valid score; ``None`` for an output that was not scored (``fastslow
            predict``'s).
        scores: its producer's valid score per collection (empty when not scored).
        protocol: the valid protocol's tag those scores were measured under.
        data: the data root.
        sha256: the submission file's SHA-256 (a file changed since is not this record's).
        time: when it was written.
        settings: the run's settings, per model (and ``ensemble``: the saved ensemble, when one was fitted).
    """

    run: str
    producer: str
    combined: float | None
    scores: dict[str, float]
    protocol: str
    data: str
    sha256: str = ""
    time: str = ""
    settings: dict[str, Any] = field(default_factory=dict)

    @property
    def scored(self) -> bool:
        """Whether it has a valid score (``fastslow predict``'s outputs have none)."""
        return self.combined is not None

    def comparable(self, other: SubmissionRecord) -> bool:
        """Whether the two were scored on the same valid graphs and configs (protocol, data root, collections)."""
        return (self.scored and other.scored and
                (self.protocol, self.data, sorted(self.scores)) == (other.protocol, other.data, sorted(other.scores)))

    def to_json(self) -> str:
        return json.dumps({"format": RECORD_FORMAT, **asdict(self)}, indent=1, allow_nan=False, default=repr) + "\n"


def read_record(path: Path) -> SubmissionRecord | None:
    """The record in ``path``, or ``None`` when there is none or it cannot be read (the submission beside it is
    then of unknown origin)."""
    try:
        doc = json_loads(path.read_text(encoding="utf-8"))
        if not isinstance(doc, dict) or doc.pop("format", None) != RECORD_FORMAT:
            return None
        record = SubmissionRecord(**doc)
    except (OSError, UnicodeDecodeError, ValueError, TypeError):
        return None
    combined = record.combined
    if combined is not None and (isinstance(combined, bool) or not isinstance(combined, int | float)):
        return None
    return record


@dataclass(frozen=True)
class Names:
    """The files of one output name in its folder: ``<stem>.csv`` and what goes with it.

    Attributes:
        out_dir: the folder.
        stem: the name without ``.csv`` (``submission`` for ``submit``).
    """

    out_dir: Path
    stem: str

    @classmethod
    def of(cls, path: Path) -> Names:
        """The names of the output ``path``, a ``.csv`` file."""
        if path.suffix != ".csv" or not path.stem:
            raise ValueError(f"{path}: expected a CSV file name ending in .csv")
        return cls(path.parent, path.stem)

    @property
    def target(self) -> Path:
        return self.out_dir / f"{self.stem}.csv"

    @property
    def record(self) -> Path:
        return self.out_dir / f"{self.stem}.json"

    @property
    def new(self) -> Path:
        return self.out_dir / f"{self.stem}.new.csv"

    @property
    def new_record(self) -> Path:
        return self.out_dir / f"{self.stem}.new.json"

    @property
    def has_ensemble(self) -> bool:
        """Whether an ensemble file goes with it (``submission.csv`` alone has ``ensemble.json`` beside it)."""
        return self.target.name == SUBMISSION

    def aside(self) -> Path:
        """``<stem>.prev.csv``, else ``<stem>.prev-1.csv``, ...: a name nothing holds yet."""
        return _aside_name(self.out_dir, self.stem, ".csv")


class OutputRefused(ValueError):
    """An output that would replace a file nothing says fastslow wrote (one line, exit 2).

    Attributes:
        path: the output.
        problem: what :func:`foreign_problem` says.
    """

    def __init__(self, path: Path, problem: str) -> None:
        self.path, self.problem = Path(path), problem
        super().__init__(f"{path}: {problem}; nothing was written")


def foreign_problem(path: Path) -> str | None:
    """Why the output ``path`` (a ``.csv`` file) may not be written over unseen, or ``None``: a file is there and no
    record beside it (``<stem>.json``) says fastslow wrote it (none, another file's, or the file changed since); or
    the record's name holds a file that is no record."""
    names = Names.of(path)
    if os.path.lexists(names.record) and read_record(names.record) is None:
        return f"{names.record} (where its record goes) is no record of fastslow's"
    if not os.path.lexists(names.target):
        return None
    record = read_record(names.record)
    if record is None:
        return f"nothing says fastslow wrote it (no record {names.record.name} beside it)"
    if record.sha256 != _sha_or_empty(names.target):
        return f"it changed since fastslow wrote it (its record {names.record.name} gives another SHA-256)"
    return None


def settled_foreign_problem(path: Path) -> str | None:
    """:func:`foreign_problem` as it stands when no fastslow run is writing ``path``: a problem seen at once is
    checked again under the output folder's lock, since another run may be between writing the file and writing its
    record (it holds the lock for both). Where the lock cannot be taken (a folder one may not write into), the first
    answer stands."""
    problem = foreign_problem(path)
    if problem is None:
        return None
    names = Names.of(path)
    try:
        with _folder_lock(names.out_dir, names.stem):
            return foreign_problem(path)
    except OSError:
        return problem


@dataclass
class Promotion:
    """Where a run's submission went.

    Attributes:
        path: the file written (``submission.csv``, or ``submission.new.csv`` when the one in place is better).
        in_place: whether it is ``submission.csv``.
        said: what happened to earlier files, one line each, for the run's output.
    """

    path: Path
    in_place: bool
    said: list[str] = field(default_factory=list)


def _aside_name(out_dir: Path, stem: str, suffix: str) -> Path:
    """``<stem>.prev<suffix>``, else ``<stem>.prev-1<suffix>``, ...: a name nothing holds yet."""
    return first_free(out_dir / f"{stem}.prev{'' if i == 0 else f'-{i}'}{suffix}" for i in range(100_000))


@contextmanager
def _folder_lock(out_dir: Path, stem: str = "submission") -> Iterator[None]:
    with exclusive_lock(out_dir / f".{stem}.lock"):
        yield


def promote(out_dir: Path, text: str, record: SubmissionRecord, *, validate: Callable[[Path], str | None],
            ensemble: Mapping[str, Any] | None = None, name: str = SUBMISSION, foreign: str = "aside") -> Promotion:
    """Write a run's submission (``text``, valid-scored as ``record`` says), in place of ``submission.csv`` when
    it is at least as good as the one there (see the module's docstring).

    Args:
        out_dir: the output folder.
        text: the submission's CSV text.
        record: what it is; its ``sha256`` and ``time`` are filled in here.
        validate: called with the complete new file under a temporary name; a returned reason keeps it from being
            written anywhere (it is kept as ``<name>.rejected`` and :class:`~competition.atomic.RejectedOutput`
            raised).
        ensemble: the run's fitted ensemble as saved (its JSON document), written beside the submission (only
            beside ``submission.csv``).
        name: the file's name, ``<stem>.csv`` (``fastslow predict``'s ``--out``).
        foreign: what becomes of a file of that name that no record says fastslow wrote
            (:func:`foreign_problem`): ``aside``, kept as ``<stem>.prev.csv``; ``refuse``, nothing is written and
            :class:`OutputRefused` raised (the check is made under the folder's lock, when the file is written).

    Returns:
        Where it went and what happened to earlier files.
    """
    names = Names.of(out_dir / name)
    if ensemble is not None and not names.has_ensemble:
        raise ValueError(f"an ensemble goes with {SUBMISSION} only, not {name}")
    out_dir.mkdir(parents=True, exist_ok=True)
    with _folder_lock(out_dir, names.stem):
        target, record_path = names.target, names.record
        said: list[str] = []
        problem = foreign_problem(target)
        if problem is not None and foreign == "refuse":
            raise OutputRefused(target, problem)
        exists = os.path.lexists(target)
        old = read_record(record_path) if exists and problem is None else None
        if not exists and os.path.lexists(record_path) and read_record(record_path) is None:
            said += _keep_aside(out_dir, record_path.name, "someone's file under the name of the record")
        where = _where(old, record) if exists else "in place"
        aside, better_there = where == "aside", where == "beside"
        if better_there:
            assert old is not None
            target, record_path = names.new, names.new_record
            ours = (f"this one's valid score is unknown ({record.producer} was not scored)" if not record.scored
                    else f"above this run's {record.combined:.4f}")
            said.append(f"{names.target.name} kept: it scored {old.combined:.4f} on valid ({old.producer}, run "
                        f"{old.run}), {ours}; this run's is {target}")
        with temp_sibling(target) as tmp:
            with open(tmp, "w", encoding="utf-8", newline="") as f:
                f.write(text)
                f.flush()
                os.fsync(f.fileno())
            reason = validate(tmp)
            if reason is not None:
                rejected = target.with_name(target.name + ".rejected")
                os.replace(tmp, rejected)
                raise RejectedOutput(target, rejected, reason, os.path.lexists(target))
            if aside:
                said += _move_aside(names, old)
            os.replace(tmp, target)
        record.sha256, record.time = file_sha256(target), datetime.now(UTC).isoformat(timespec="seconds")
        if ensemble is not None:
            record.settings = {**record.settings, "ensemble": dict(ensemble)}
        atomic_write_text(record_path, record.to_json())
        if names.has_ensemble:
            said += _ensemble_beside(out_dir, ensemble, old, record, better_there=better_there, aside=aside)
        if not better_there:
            _drop_own_new(names, record.run)
        return Promotion(target, not better_there, said)


def _where(old: SubmissionRecord | None, new: SubmissionRecord) -> str:
    """Where a new file goes when one is in place, recorded as ``old`` (``None``: unknown origin): ``in place``,
    ``beside`` (the one there is better) or ``in place`` after keeping the one there ``aside``."""
    if old is None:
        return "aside"
    if not old.scored:  # fastslow predict's: another of predict's replaces it, a scored one puts it aside
        return "in place" if not new.scored else "aside"
    if not new.scored:  # a scored submission is never replaced by an unscored one
        return "beside"
    if not old.comparable(new):
        return "aside"
    assert old.combined is not None and new.combined is not None
    return "beside" if old.run != new.run and old.combined > new.combined else "in place"


def _ensemble_beside(out_dir: Path, ensemble: Mapping[str, Any] | None, old: SubmissionRecord | None,
                     record: SubmissionRecord, *, better_there: bool, aside: bool) -> list[str]:
    """Write the run's ensemble settings beside its ``submission.csv``, or drop those of the submission it
    replaced: ``ensemble.json`` always belongs to the submission beside it."""
    ens_path = out_dir / (ENSEMBLE_FILE if not better_there else "ensemble.new.json")
    if ensemble is not None:
        atomic_write_text(ens_path, json.dumps(ensemble, indent=1, allow_nan=False) + "\n")
    elif not better_there and not aside and os.path.lexists(ens_path):
        # The submission in place is now this run's: an earlier run's ensemble settings beside it would be
        # taken for its own. Those of the submission it replaced go with it; one of unknown origin is kept aside.
        if old is not None and old.run != record.run:
            ens_path.unlink()
        elif old is None:
            return _keep_aside(out_dir, ENSEMBLE_FILE)
    return []


def _drop_own_new(names: Names, run: str) -> None:
    """Remove the ``<stem>.new.*`` files run ``run`` wrote earlier (a model below the submission then in place)
    once the run's own submission is in place: they are this run's, and worse."""
    old = read_record(names.new_record)
    if old is not None and old.run == run:
        names.new.unlink(missing_ok=True)
        names.new_record.unlink(missing_ok=True)


def save_ensemble(out_dir: Path, run: str, ensemble: Mapping[str, Any]) -> Path:
    """Write run ``run``'s fitted ensemble (its JSON document) beside its submission: ``ensemble.json`` when that
    run's submission is in place (and into its record), ``ensemble.new.json`` otherwise."""
    with _folder_lock(out_dir):
        target, record_path = out_dir / SUBMISSION, out_dir / RECORD
        record = read_record(record_path)
        ours = record is not None and record.run == run and record.sha256 == _sha_or_empty(target)
        path = out_dir / (ENSEMBLE_FILE if ours else "ensemble.new.json")
        atomic_write_text(path, json.dumps(ensemble, indent=1, allow_nan=False) + "\n")
        if ours:
            assert record is not None
            record.settings = {**record.settings, "ensemble": dict(ensemble)}
            atomic_write_text(record_path, record.to_json())
        return path


def _sha_or_empty(path: Path) -> str:
    try:
        return file_sha256(path)
    except OSError:
        return ""


def _keep_aside(out_dir: Path, name: str, why: str = "it belonged to the submission that was there") -> list[str]:
    path = out_dir / name
    if not os.path.lexists(path):
        return []
    stem, dot, suffix = name.rpartition(".")
    aside = _aside_name(out_dir, stem, dot + suffix)
    os.replace(path, aside)
    return [f"{path} kept as {aside.name} ({why})"]


def _move_aside(names: Names, old: SubmissionRecord | None) -> list[str]:
    """Keep the file in place, with its record (and ensemble), under ``.prev`` names."""
    target = names.target
    aside = names.aside()
    why = (f"nothing says how it scored (no {names.record.name}, or the file changed since)" if old is None else
           f"it was not scored ({old.producer}, written by fastslow predict)" if not old.scored else
           "its valid scores were measured on another protocol, data root or collections")
    os.replace(target, aside)
    said = [f"{target} kept as {aside.name}: {why}, so this run's does not replace it unseen"]
    if os.path.lexists(names.record):
        os.replace(names.record, aside.with_suffix(".json"))
    return said + (_keep_aside(names.out_dir, ENSEMBLE_FILE) if names.has_ensemble else [])
