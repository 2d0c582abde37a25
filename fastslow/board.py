"""The offline leaderboard: every scoring of a submission appends a row to ``submissions/leaderboard.csv``.

A row records when, which file (and its SHA-256), the git commit of the code, what produced the file, which
split and data root it was scored on, the score of each collection, the combined score, and whether all five
collections were present, for an ensemble what it combined (``components``), and for a valid scoring the valid
protocol it was scored under (``protocol``: ``1000@0``, ``all``, ``official``...); the last two columns were added
later, and older files without them still read. ``complete`` is ``false`` for a partial scoring (``fastslow score
--partial``, or a data root with fewer than five collections): its combined score is not comparable with
complete ones. ``fastslow leaderboard`` prints the history best first and plots scores per collection over
time.

Appends from concurrent runs never lose a row: each holds an exclusive lock (``flock`` on a hidden sibling file,
``.leaderboard.csv.lock``) around read, append and the atomic rewrite.
"""

from __future__ import annotations

import csv
import io
import logging
import os
import subprocess
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

from competition.atomic import atomic_path, atomic_write_text, exclusive_lock
from competition.collections import Collection
from competition.errors import shown
from competition.fingerprint import file_sha256
from fastslow.display import csv_cell, plot_label, plots_plain_text, printable

log = logging.getLogger(__name__)

DEFAULT_PATH = Path("submissions") / "leaderboard.csv"
COLUMNS: tuple[str, ...] = (
    "time", "file", "sha256", "commit", "producer", "split", "data", "synthetic",
    *(c.value for c in Collection), "combined", "complete", "components", "protocol",
)
OPTIONAL_COLUMNS: frozenset[str] = frozenset({"components", "protocol"})
"""Columns added after the first release: files written before them still read, with these left empty."""


INSTALL_ROOT = Path(__file__).resolve().parent.parent
"""The folder fastslow's code runs from: a checkout's root when installed editable (``pip install -e .``)."""

_GIT_SAFE = ("-c", "core.fsmonitor=false", "-c", f"core.hooksPath={os.devnull}", "-c", "core.untrackedCache=false")
"""Options that keep git from running anything a repository configures (the fsmonitor hook, hooks) while it is only
asked for the commit: ``-c`` overrides every configuration file."""


def git_commit(checkout: str | os.PathLike[str] | None = None) -> str:
    """The commit of fastslow's own code (with ``+dirty`` when its tree has changes), or ``unknown`` when it was not
    installed from a git checkout.

    Only the installation's repository is asked (``checkout``, default :data:`INSTALL_ROOT`), never the folder the
    user stands in: a ``.git`` there (an unpacked archive, a shared project folder) may configure commands that git
    would run, and its commit is not the code's. Git is named the repository explicitly (no discovery upwards), with
    hooks and the fsmonitor disabled (:data:`_GIT_SAFE`) and no optional locks taken.
    """
    root = Path(checkout) if checkout is not None else INSTALL_ROOT
    if not (root / ".git").exists():
        return "unknown"
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(GIT_DIR=str(root / ".git"), GIT_WORK_TREE=str(root), GIT_OPTIONAL_LOCKS="0",
               GIT_CEILING_DIRECTORIES=str(root.parent), GIT_TERMINAL_PROMPT="0")

    def git(*args: str) -> str:
        return subprocess.run(["git", *_GIT_SAFE, *args], cwd=root, env=env, capture_output=True, text=True,
                              check=True, timeout=10, stdin=subprocess.DEVNULL).stdout.strip()

    try:
        rev = git("rev-parse", "--short=12", "HEAD")
        dirty = git("status", "--porcelain", "--untracked-files=no")
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return rev + ("+dirty" if dirty else "")


def append_row(
    scores: Mapping[Collection, float],
    *,
    file: str | os.PathLike[str],
    producer: str,
    split: str,
    data: str | os.PathLike[str],
    synthetic: bool,
    path: str | os.PathLike[str] = DEFAULT_PATH,
    now: datetime | None = None,
    components: str = "",
    protocol: str = "",
    partial: bool = False,
) -> dict[str, str]:
    """Append one scoring to the leaderboard (rewritten atomically, so an interrupted append loses nothing).

    Concurrent appends to one leaderboard, from threads or processes, are serialised by an exclusive lock: every row
    is kept.

    Args:
        scores: score per collection present in the submission.
        file: the submission file scored.
        producer: what produced it (a model name, ``ensemble(...)``, ``manual``...).
        split: the split it was scored on.
        data: the data root.
        synthetic: whether the data root is a synthetic world.
        path: the leaderboard CSV.
        now: the time to record (default: now, UTC).
        components: what an ensemble combined (its ``describe()`` text); empty for a single model.
        protocol: for a valid-split scoring, the valid protocol's tag (``1000@0``, ``all``, ``official``...:
            :attr:`competition.protocol.ValidProtocol.tag`).
        partial: the file was scored on part of what its split expects (``fastslow score --partial``): recorded
            as ``complete=false`` whatever collections it holds.

    Returns:
        The row written, as strings.
    """
    path = Path(path)
    present = [c for c in Collection if c in scores]
    row = {
        "time": (now or datetime.now(UTC)).isoformat(timespec="seconds"),
        "file": csv_cell(str(file)),
        "sha256": file_sha256(file),  # before the cell below may mark it for spreadsheets
        "commit": git_commit(),
        "producer": csv_cell(producer),
        "split": split,
        "data": csv_cell(str(data)),
        "synthetic": str(bool(synthetic)).lower(),
        **{c.value: (f"{scores[c]:.6f}" if c in scores else "") for c in Collection},
        "combined": f"{float(np.mean([scores[c] for c in present])):.6f}" if present else "",
        "complete": str(len(present) == len(Collection) and not partial).lower(),
        "components": csv_cell(components),
        "protocol": protocol,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    with _locked(path):
        rows = read_rows(path)
        rows.append(row)
        buf = io.StringIO()
        writer = csv.DictWriter(buf, fieldnames=COLUMNS, lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
        atomic_write_text(path, buf.getvalue())
    return row


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    """Hold an exclusive lock on the leaderboard ``path`` (:func:`competition.atomic.exclusive_lock` on
    ``.<name>.lock`` beside it); where the file system cannot lock, append without one, with a warning."""
    lock = path.with_name(f".{path.name}.lock")
    with exclusive_lock(lock) as held:
        if not held:
            log.warning("%s: cannot lock here; appending without a lock", lock)
        yield


def read_rows(path: str | os.PathLike[str] = DEFAULT_PATH) -> list[dict[str, str]]:
    """All rows, oldest first; an absent file is an empty leaderboard.

    Raises:
        ValueError: not a leaderboard (other columns, not UTF-8 text, malformed CSV), naming the file.
    """
    path = Path(path)
    if not path.exists():
        return []
    from competition.submission_reading import CSV_FIELD_LIMIT  # not at the top: that module brings scipy

    csv.field_size_limit(CSV_FIELD_LIMIT)  # an ensemble's components or a long path may pass the default 128 kB
    try:
        with open(path, newline="", encoding="utf-8") as f:
            reader = csv.DictReader(f)
            missing = set(COLUMNS) - OPTIONAL_COLUMNS - set(reader.fieldnames or ())
            if missing:
                raise ValueError(f"{printable(path)}: expected leaderboard columns {', '.join(COLUMNS)}; found "
                                 f"{shown(', '.join(reader.fieldnames or ()))} (missing "
                                 f"{', '.join(sorted(missing))})")
            return [{k: r.get(k) or "" for k in COLUMNS} for r in reader]
    except UnicodeDecodeError as exc:
        raise ValueError(f"{printable(path)}: expected a leaderboard CSV in UTF-8; found byte {exc.start} "
                         f"undecodable ({exc.reason}); pass another --leaderboard or move this file aside") from None
    except csv.Error as exc:
        raise ValueError(f"{printable(path)}: expected a leaderboard CSV; found malformed CSV ({printable(exc)}); "
                         "pass another --leaderboard or move this file aside") from None


def _combined(row: Mapping[str, str]) -> float:
    return float(row["combined"]) if row["combined"] else float("-inf")


def format_leaderboard(rows: list[dict[str, str]], top: int | None = None) -> str:
    """A table of the rows, best combined score first."""
    ordered = sorted(rows, key=_combined, reverse=True)[:top]
    short = {"tile:xla": "tile", "layout:xla:default": "xla-def", "layout:xla:random": "xla-rnd",
             "layout:nlp:default": "nlp-def", "layout:nlp:random": "nlp-rnd"}
    head = f"{'#':>3} {'combined':>8} " + " ".join(f"{short[c.value]:>8}" for c in Collection)
    head += f" {'split':12} {'producer':24} {'time':25} file"
    lines = [head]
    for i, r in enumerate(ordered, 1):
        cells = " ".join(f"{float(r[c.value]):8.4f}" if r[c.value] else f"{'-':>8}" for c in Collection)
        comb = f"{_combined(r):8.4f}" if r["combined"] else f"{'-':>8}"
        star = "" if r["complete"] == "true" else " (partial)"
        data = " synthetic" if r["synthetic"] == "true" else ""
        # Valid scorings of different protocols are not comparable: the split column says which one.
        split = printable(r["split"] + (f"[{r['protocol']}]" if r.get("protocol") else ""))
        lines.append(f"{i:>3} {comb} {cells} {split:12} {printable(r['producer'])[:24]:24} "
                     f"{printable(r['time']):25} {printable(Path(r['file']).name)}{star}{data}")
    return "\n".join(lines)


@plots_plain_text
def plot_leaderboard(rows: list[dict[str, str]], ax=None, *, split: str | None = None):
    """Scores per collection (and combined) of one split's scorings, oldest to newest. Returns the ``Axes``.

    Scorings of different splits are not comparable, so each split gets its own axes (``split=None`` plots all
    rows, for a leaderboard that holds one split only).
    """
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    rows = [r for r in rows if split is None or r["split"] == split]
    if ax is None:
        _, ax = plt.subplots(figsize=(9, 4.5))
    x = np.arange(len(rows))
    for name in [c.value for c in Collection] + ["combined"]:
        y = np.array([float(r[name]) if r[name] else np.nan for r in rows])
        if np.isfinite(y).any():
            ax.plot(x, y, marker="o", lw=2.5 if name == "combined" else 1.0, label=name)
    ax.set_xlabel("scoring (oldest to newest): time and producer")
    ax.set_ylabel("score (tile: 2 - slowdown; layout: tau)")
    ax.set_title(f"offline leaderboard: {plot_label(split or 'all')} split")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="best")
    if rows:
        labels = [f"{plot_label(r['time'][5:16].replace('T', ' '))}\n{plot_label(r['producer'], 18)}" for r in rows]
        ax.set_xticks(x, labels, rotation=45, ha="right", fontsize=7)
    return ax


@plots_plain_text
def save_plot(rows: list[dict[str, str]], out: str | os.PathLike[str]) -> Path:
    """Plot the leaderboard to a PNG, one panel per split (written atomically)."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    out = Path(out)
    splits = list(dict.fromkeys(r["split"] for r in rows)) or [None]
    fig, axes = plt.subplots(len(splits), 1, figsize=(9, 4.2 * len(splits)), squeeze=False)
    for ax, split in zip(axes[:, 0], splits, strict=True):
        plot_leaderboard(rows, ax, split=split)
    fig.tight_layout()
    with atomic_path(out) as tmp:
        fig.savefig(tmp, dpi=110, format="png")
    plt.close(fig)
    return out
