"""What identifies a file's bytes: their SHA-256, read in chunks, and computed once per process for a file that has not
changed since.

A data file is named by its content wherever state is kept for it: the saved-run key
(:func:`fastslow.saved_runs.data_key`), the processed-graph cache (:class:`features.cache.SourceFile`) and the
GNN run's ``data_key`` all take :func:`content_digest`, so a file whose bytes change is another file to each of them,
even at the same size and modification time (a file copied over another with its times kept, or rewritten and its
mtime set back).

:func:`content_digest` keeps each digest for the rest of the process under the file's status: device, inode, size,
``mtime_ns`` and ``ctime_ns``. Rewriting a file in place, renaming another over it or setting its times back all
change its ``ctime``, which no user can set, so a changed file is read again. As git does for its index, a digest is
not kept when the file changed too shortly before it was read (within :data:`RACY_SECONDS`): a second change within
the same timestamp tick would leave its status as it was.
"""

from __future__ import annotations

import hashlib
import os
import threading
import time

CHUNK_BYTES = 1 << 20
"""Bytes read at a time: the memory a digest takes whatever the file's size."""
RACY_SECONDS = 2.0
"""A digest is kept only for a file whose last change (``ctime``) is at least this much older than its reading: above
the timestamp granularity of common file systems (a kernel tick; 1 s for some, 2 s for FAT)."""

_known: dict[tuple[str, int, int, int, int, int], str] = {}
_lock = threading.Lock()


def file_sha256(path: str | os.PathLike[str]) -> str:
    """The SHA-256 (hex) of the file's bytes, read :data:`CHUNK_BYTES` at a time."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(CHUNK_BYTES), b""):
            h.update(chunk)
    return h.hexdigest()


def _status(path: str) -> tuple[str, int, int, int, int, int]:
    st = os.stat(path)
    return path, st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns


def content_digest(path: str | os.PathLike[str]) -> str:
    """:func:`file_sha256` of ``path``, read once per process while the file's status stays the same (see the
    module's docstring).

    Raises:
        OSError: the file cannot be read.
    """
    name = os.path.abspath(os.fspath(path))
    before = _status(name)
    with _lock:
        known = _known.get(before)
    if known is not None:
        return known
    started = time.time_ns()
    digest = file_sha256(name)
    if _status(name) == before and started - before[5] >= RACY_SECONDS * 1e9:
        with _lock:
            _known[before] = digest
    return digest
