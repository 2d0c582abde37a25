"""The real TPU tuning records shipped with the package, and their TpuGraphs npz files.

Two files of google-research-datasets/tpu_graphs (Apache License 2.0) live in ``competition/data/real_records/``
with a README that gives their source, checksums and contents: :data:`TILE_RECORDS`, a ``TuningData`` of 10 real
fused kernels with measured tile configs, and :data:`LAYOUT_RECORDS`, a ``ModuleTuningData`` of one real module
with measured layout runs. :func:`featurize_records` writes them as a data root (one tile npz per kernel, one layout
npz for the module, all in the train split) with :func:`competition.hlo.export.featurize_files`, as ``fastslow featurize`` does, once per content: the folder is
named by a digest of the records and of the featurizer's source, so a changed featurizer writes a new one.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from pathlib import Path

from competition.collections import Collection

RECORDS_DIR = Path(__file__).resolve().parent / "data" / "real_records"
"""The package data folder holding the records and their README."""
TILE_RECORDS = RECORDS_DIR / "op_tuning_data_10_kernels.pb"
"""A serialized ``TuningData``: 10 fused kernels with their measured tile runs."""
LAYOUT_RECORDS = RECORDS_DIR / "module_tuning_data_layout.pb"
"""A serialized ``ModuleTuningData``: one module with its measured layout runs."""
SHA256: dict[str, str] = {
    TILE_RECORDS.name: "b762cb5d1105d10e91ff9b69f680d11dae2c92b09b829942a869f1dc9f51faa0",
    LAYOUT_RECORDS.name: "cdfd4b169a2078fcc5333c11d8d9868ca5f18e59877d6b92dc5683589785e9b6",
}
"""The SHA-256 of each shipped file, as its README lists them."""
LAYOUT_COLLECTION = Collection.LAYOUT_XLA_RANDOM
"""The layout collection the module's file is written to (``fastslow featurize``'s default)."""
_FEATURIZER = Path(__file__).resolve().parent / "hlo"


def content_key() -> str:
    """SHA-256 (hex) of the two record files and of every source file of the featurizer (``competition/hlo``):
    what names the folder :func:`featurize_records` writes."""
    digest = hashlib.sha256()
    for path in (TILE_RECORDS, LAYOUT_RECORDS, *sorted(_FEATURIZER.glob("*.py"))):
        digest.update(path.name.encode("utf-8") + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def featurize_records(base: str | os.PathLike[str]) -> Path:
    """The records as a data root under ``base``, written once per :func:`content_key` and reused after.

    The root is ``base/real-records-<12 hex digits>``: ``npz/tile/xla/train/<kernel>_<fingerprint>.npz`` per kernel
    and ``npz/layout/xla/random/train/module_tuning_data_layout.npz``, what ``fastslow featurize --tile-records
    TILE --layout-records LAYOUT --out ROOT`` writes (failed runs dropped, repeats kept, the default run first). It
    is written into a temporary folder beside it and renamed, so an interrupted run leaves no half root.

    Returns:
        The data root.

    Raises:
        HloFormatError: the featurizer refused the records (one whose file would fail its checks among them).
    """
    from competition.hlo.export import featurize_files

    base = Path(base)
    root = base / f"real-records-{content_key()[:12]}"
    if root.is_dir():
        return root
    base.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{root.name}-", dir=base))
    try:
        featurize_files(tile_records=[TILE_RECORDS], layout_records=[LAYOUT_RECORDS],
                        collection=LAYOUT_COLLECTION.value, out=tmp, echo=lambda line: None)
        try:
            tmp.rename(root)
        except OSError:
            if not root.is_dir():  # another process renamed its copy first: use that one
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return root
