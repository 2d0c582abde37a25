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

from competition.fingerprint import file_sha256
from competition.nesting import json_loads
from competition.npzio import RejectedOutput, atomic_write_text, exclusive_lock, first_free, temp_sibling

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
        combined: its producer's combined valid score.
        scores: its producer's valid score per collection.
        protocol: the valid protocol's tag those scores were measured under.
        data: the data root.
        sha256: the submission file's SHA-256 (a file changed since is not this record's).
        time: when it was written.
        settings: the run's settings, per model (and ``ensemble``: the saved ensemble, when one was fitted).
    """

    run: str
    producer: str
    combined: float
    scores: dict[str, float]
    protocol: str
    data: str
    sha256: str = ""
    time: str = ""
    settings: dict[str, Any] = field(default_factory=dict)

    def comparable(self, other: SubmissionRecord) -> bool:
        """Whether the two were scored on the same valid graphs and configs (protocol, data root, collections)."""
        return (self.protocol, self.data, sorted(self.scores)) == (other.protocol, other.data, sorted(other.scores))

    def to_json(self) -> str:
        return json.dumps({"format": RECORD_FORMAT, **asdict(self)}, indent=1, allow_nan=False, default=repr) + "\n"


def read_record(path: Path) -> SubmissionRecord | None:
    """The record in ``path``, or ``None`` when there is none or it cannot be read (the submission beside it is
    then of unknown origin)."""
    try:
        doc = json_loads(path.read_text(encoding="utf-8"))
        if not isinstance(doc, dict) or doc.pop("format", None) != RECORD_FORMAT:
            return None
        return SubmissionRecord(**doc)
    except (OSError, UnicodeDecodeError, ValueError, TypeError):
        return None


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
def _folder_lock(out_dir: Path) -> Iterator[None]:
    with exclusive_lock(out_dir / ".submission.lock"):
        yield


def promote(out_dir: Path, text: str, record: SubmissionRecord, *, validate: Callable[[Path], str | None],
            ensemble: Mapping[str, Any] | None = None) -> Promotion:
    """Write a run's submission (``text``, valid-scored as ``record`` says), in place of ``submission.csv`` when
    it is at least as good as the one there (see the module's docstring).

    Args:
        out_dir: the output folder.
        text: the submission's CSV text.
        record: what it is; its ``sha256`` and ``time`` are filled in here.
        validate: called with the complete new file under a temporary name; a returned reason keeps it from being
            written anywhere (it is kept as ``<name>.rejected`` and :class:`~competition.npzio.RejectedOutput`
            raised).
        ensemble: the run's fitted ensemble as saved (its JSON document), written beside the submission.

    Returns:
        Where it went and what happened to earlier files.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    with _folder_lock(out_dir):
        target, record_path = out_dir / SUBMISSION, out_dir / RECORD
        said: list[str] = []
        old = read_record(record_path) if os.path.lexists(target) else None
        if old is not None and old.sha256 != _sha_or_empty(target):
            old = None
        exists = os.path.lexists(target)
        aside = exists and (old is None or not old.comparable(record))
        better_there = (exists and old is not None and not aside and old.run != record.run
                        and old.combined > record.combined)
        if better_there:
            assert old is not None
            target, record_path = out_dir / "submission.new.csv", out_dir / "submission.new.json"
            said.append(f"{SUBMISSION} kept: it scored {old.combined:.4f} on valid ({old.producer}, run {old.run}), "
                        f"above this run's {record.combined:.4f}; this run's is {target}")
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
                said += _move_aside(out_dir, old is not None)
            os.replace(tmp, target)
        record.sha256, record.time = file_sha256(target), datetime.now(UTC).isoformat(timespec="seconds")
        if ensemble is not None:
            record.settings = {**record.settings, "ensemble": dict(ensemble)}
        atomic_write_text(record_path, record.to_json())
        ens_path = out_dir / (ENSEMBLE_FILE if not better_there else "ensemble.new.json")
        if ensemble is not None:
            atomic_write_text(ens_path, json.dumps(ensemble, indent=1, allow_nan=False) + "\n")
        elif not better_there and not aside and os.path.lexists(ens_path):
            # The submission in place is now this run's: an earlier run's ensemble settings beside it would be
            # taken for its own. Those of the submission it replaced go with it; one of unknown origin is kept aside.
            if old is not None and old.run != record.run:
                ens_path.unlink()
            elif old is None:
                said += _keep_aside(out_dir, ENSEMBLE_FILE)
        if not better_there:
            _drop_own_new(out_dir, record.run)
        return Promotion(target, not better_there, said)


def _drop_own_new(out_dir: Path, run: str) -> None:
    """Remove the ``submission.new.*`` files run ``run`` wrote earlier (a model below the submission then in place)
    once the run's own submission is in place: they are this run's, and worse."""
    new_record = out_dir / "submission.new.json"
    old = read_record(new_record)
    if old is not None and old.run == run:
        (out_dir / "submission.new.csv").unlink(missing_ok=True)
        new_record.unlink(missing_ok=True)


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


def _keep_aside(out_dir: Path, name: str) -> list[str]:
    path = out_dir / name
    if not os.path.lexists(path):
        return []
    stem, dot, suffix = name.rpartition(".")
    aside = _aside_name(out_dir, stem, dot + suffix)
    os.replace(path, aside)
    return [f"{path} kept as {aside.name} (it belonged to the submission that was there)"]


def _move_aside(out_dir: Path, recorded: bool) -> list[str]:
    """Keep the submission in place, with its record and ensemble, under ``.prev`` names."""
    target = out_dir / SUBMISSION
    aside = _aside_name(out_dir, "submission", ".csv")
    why = ("its valid scores were measured on another protocol, data root or collections" if recorded else
           "nothing says how it scored (no submission.json, or the file changed since)")
    os.replace(target, aside)
    said = [f"{target} kept as {aside.name}: {why}, so this run's does not replace it unseen"]
    if os.path.lexists(out_dir / RECORD):
        os.replace(out_dir / RECORD, aside.with_suffix(".json"))
    return said + _keep_aside(out_dir, ENSEMBLE_FILE)
