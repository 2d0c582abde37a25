"""A real layout graph with signal: alexnet's measured layout configs, restored to the TpuGraphs format.

``competition/data/real_records/alexnet/`` ships one real ``layout:xla`` graph (:data:`ALEXNET_FILE`, its README
gives the source and license) whose source dropped every node column that is constant over the graph and every
config column that is -1 everywhere, without saving which. :data:`NODE_COLUMNS` and :data:`CONFIG_COLUMNS` are the
positions recovered from the values (the evidence for each is in the folder's README, and
``tests/test_real_layout.py`` checks the internal relations that pin them); :func:`restore_arrays` puts the kept
columns back in place and fills the dropped ones with the value the format gives a column that does not apply to
any node of the graph (0; 1 for the product of a list that is empty on every node; -1 for an unused config slot).

:func:`split_configs` splits the graph's distinct configs, once and for all, into train / valid / test
(:data:`SPLIT_SHARES`, seeded by :data:`SPLIT_SEED`); :func:`alexnet_root` writes the train and valid configs as a
data root (``layout:xla:random``), as a user's own measured runs would be, and :func:`alexnet_test` gives the test
configs, repeats averaged, to rank.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

from competition.collections import Collection, Split
from competition.dataroot import DataRoot, find_data_root
from competition.labels import distinct_groups
from competition.reader import LayoutGraph, load_graph
from competition.real_records import RECORDS_DIR
from competition.schema import EMPTY_PRODUCT_COLUMNS

ALEXNET_FILE = RECORDS_DIR / "alexnet" / "alexnet_layout_xla_80pct.npz"
"""80% of the distinct configs of one real ``layout:xla`` graph, 70 of 140 node columns and 10 of 18 config columns."""
ALEXNET_SHA256 = "54d3d56ee09bb39809f6f37403be7053857417575b06674f4cd0954ae53bf501"
ALEXNET_STEM = "alexnet_train_batch_32"
"""The graph's name in the real data, as its size and opcodes suggest (the source file does not name it)."""
ALEXNET_COLLECTION = Collection.LAYOUT_XLA_RANDOM
"""The collection the graph's runs come from (a random search: runtimes spanning 5x)."""

NODE_COLUMNS: tuple[int, ...] = (
    0, 3, 6, 7, 10, 13, 18, 20,            # is_root; element types pred, s32, s64 (uncertain), u32, f32, tuple, token
    21, 22, 23, 24, 27, 28,                # shape dims 0-3, sum, product
    29, 30,                                # tuple element count, parameter number
    31, 32, 33,                            # dimensions 0-2
    37, 38, 39, 40, 43, 44,                # window size 0-3, sum, product
    45, 46, 47, 48, 51, 52,                # window stride 0-3, sum, product
    53, 54, 59, 60,                        # window padding low 0-1, sum, product
    61, 62, 67, 68,                        # window padding high 0-1, sum, product
    69, 70, 71, 72, 75, 76,                # window dilation 0-3, sum, product
    77, 78, 79, 80, 83,                    # base dilation 0-3, sum
    85, 86, 91, 92,                        # window reversal 0-1, true count, false count
    93, 94, 95, 96, 99, 100, 101, 102, 105, 106,  # convolution dimension numbers (2 spatial dims)
    107, 108,                              # feature group count, batch group count
    134, 135, 136, 137,                    # layout minor-to-major 0-3
)
"""The ``node_feat`` column (0-139) of each of the file's 70 columns, in order."""
CONFIG_COLUMNS: tuple[int, ...] = (0, 1, 2, 3, 6, 7, 8, 9, 12, 13)
"""The ``node_config_feat`` slot (0-17) of each of the file's 10 columns: output 0-3, input 0-3, kernel 0-1."""

TEST_FOLDER = "test-configs"
"""Where :func:`alexnet_root` keeps the test configs: beside the data root's tree, which no fit reads."""
SPLIT_SEED = 0
SPLIT_SHARES: tuple[float, float, float] = (0.6, 0.2, 0.2)
"""Train / valid / test shares of the distinct configs."""


def _check_mapping() -> None:
    if len(NODE_COLUMNS) != 70 or len(CONFIG_COLUMNS) != 10:
        raise AssertionError("the column maps must name 70 node and 10 config columns")
    for cols in (NODE_COLUMNS, CONFIG_COLUMNS):
        if list(cols) != sorted(set(cols)):
            raise AssertionError("the source kept columns in order: the maps must be strictly ascending")


_check_mapping()


def restore_arrays(path: str | os.PathLike[str] = ALEXNET_FILE) -> dict[str, npt.NDArray[np.generic]]:
    """The file's arrays with ``node_feat`` ``[N, 140]`` and ``node_config_feat`` ``[C, NC, 18]`` restored.

    Raises:
        ValueError: the file does not hold 70 node columns and 10 config columns.
    """
    with np.load(path) as z:
        arrays = {k: z[k] for k in z.files}
    feat, conf = arrays["node_feat"], arrays["node_config_feat"]
    if feat.shape[1:] != (len(NODE_COLUMNS),) or conf.shape[2:] != (len(CONFIG_COLUMNS),):
        raise ValueError(f"{path}: node_feat [N, {len(NODE_COLUMNS)}] and node_config_feat [C, NC, "
                         f"{len(CONFIG_COLUMNS)}] expected, found {feat.shape} and {conf.shape}")
    full = np.zeros((feat.shape[0], 140), dtype=np.float32)
    full[:, sorted(set(EMPTY_PRODUCT_COLUMNS) - set(NODE_COLUMNS))] = 1.0  # the shape product (28) is kept
    full[:, list(NODE_COLUMNS)] = feat
    slots = np.full((*conf.shape[:2], 18), -1.0, dtype=np.float32)
    slots[:, :, list(CONFIG_COLUMNS)] = conf
    arrays["node_feat"], arrays["node_config_feat"] = full, slots
    return arrays


@dataclass(frozen=True)
class ConfigSplit:
    """The graph's distinct configs split three ways.

    Attributes:
        group: int64 ``[C]``, each run's distinct config (:func:`distinct_groups`).
        parts: per split, the distinct configs in it (int64, in the seeded order the split drew them, so the first
            ``n`` of train are a fixed smaller train set).
    """

    group: npt.NDArray[np.int64]
    parts: dict[Split, npt.NDArray[np.int64]]

    def runs(self, split: Split, limit: int | None = None) -> npt.NDArray[np.int64]:
        """The runs (ascending) of the split's distinct configs, of its first ``limit`` of them with a limit."""
        chosen = self.parts[split][:limit]
        return np.nonzero(np.isin(self.group, chosen))[0].astype(np.int64)


def split_configs(config_feat: npt.ArrayLike, seed: int = SPLIT_SEED,
                  shares: tuple[float, float, float] = SPLIT_SHARES) -> ConfigSplit:
    """A seeded split of the distinct configs (every repeat of a config on one side)."""
    _, group = distinct_groups(config_feat)
    distinct = int(group.max()) + 1 if group.size else 0
    order = np.random.default_rng(seed).permutation(distinct).astype(np.int64)
    cut = np.cumsum(np.rint(np.asarray(shares[:2]) * distinct).astype(np.int64))
    parts = dict(zip((Split.TRAIN, Split.VALID, Split.TEST), np.split(order, cut), strict=True))
    return ConfigSplit(group, parts)


def _content_key(train_limit: int | None) -> str:
    digest = hashlib.sha256(ALEXNET_FILE.read_bytes())
    digest.update(repr((NODE_COLUMNS, CONFIG_COLUMNS, SPLIT_SEED, SPLIT_SHARES, train_limit)).encode())
    return digest.hexdigest()[:12]


def alexnet_root(base: str | os.PathLike[str], train_limit: int | None = None) -> DataRoot:
    """The graph's train and valid configs as a data root under ``base``, written once and reused.

    ``npz/layout/xla/random/{train,valid}/alexnet_train_batch_32.npz`` hold every run of the split's distinct
    configs (repeats kept, as the real files keep them); with ``train_limit``, train holds only the first
    ``train_limit`` distinct configs of the split's fixed order. Written into a temporary folder and renamed.
    """
    from competition.npzio import write_npz

    base = Path(base)
    root = base / f"alexnet-{_content_key(train_limit)}"
    if not root.is_dir():
        arrays = restore_arrays()
        split = split_configs(arrays["node_config_feat"])
        base.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{root.name}-", dir=base))
        try:
            order = ("edge_index", "node_feat", "node_opcode", "node_config_feat", "node_config_ids",
                     "node_splits", "config_runtime")
            for part, limit in ((Split.TRAIN, train_limit), (Split.VALID, None), (Split.TEST, None)):
                rows = split.runs(part, limit)
                out = dict(arrays, node_config_feat=arrays["node_config_feat"][rows],
                           config_runtime=arrays["config_runtime"][rows])
                if part is Split.TEST:  # one row per distinct config, its repeats' mean runtime
                    group = split.group[rows]
                    _, first, inverse = np.unique(group, return_index=True, return_inverse=True)
                    mean = np.bincount(inverse, weights=out["config_runtime"]) / np.bincount(inverse)
                    out.update(node_config_feat=out["node_config_feat"][first],
                               config_runtime=np.rint(mean).astype(np.int64))
                folder = tmp / "npz" / "layout" / "xla" / "random" / part.value if part is not Split.TEST \
                    else tmp / TEST_FOLDER
                write_npz(folder / f"{ALEXNET_STEM}.npz", {k: out[k] for k in order})
            os.replace(tmp, root)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    return find_data_root(root)


def alexnet_test(root: DataRoot) -> LayoutGraph:
    """The test split of the graph ``root`` was written from (:func:`alexnet_root`): one config per distinct
    test config, its runtime the mean of its repeats (ns, rounded)."""
    graph = load_graph(root.root / TEST_FOLDER / f"{ALEXNET_STEM}.npz", ALEXNET_COLLECTION)
    assert isinstance(graph, LayoutGraph)
    return graph
