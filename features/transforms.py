"""PyG transforms over graphs from :func:`features.data.graph_to_data`, chained with ``torch_geometric.transforms.Compose``.

Each transform stores its arguments unchanged, works in ``forward(data)`` and shows its arguments in ``repr``.
Node-indexed attributes (``x``, ``op``, ``config_node_index``), ``edge_index`` and the config-indexed attributes
(``y``, ``runtime``, ``config_feat``, ``config_ids``) are kept consistent by every transform.

Order matters where a transform reads ``x`` columns by their position in the 140-column format (cols 21-26 shape
dims, 134-139 layout, ...): run :class:`PadLayoutMinusOne`, :class:`ShapeAlignmentFeatures`,
:class:`DotConvFeatures` and :class:`ConfigDimensionSizes` before :class:`LogTransform` (which changes the values
they read), and :class:`DropConstantColumns` / :class:`Normalize` last. The appending transforms add columns at the
end, so the original positions stay valid after them.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import torch
from torch_geometric.data import Data
from torch_geometric.transforms import BaseTransform
from torch_geometric.utils import subgraph

from competition.opcodes import CONVOLUTION, DOT, OPCODE_GROUP_NAMES, OPCODE_GROUP_OF
from competition.schema import (
    COL_TUPLE_COUNT,
    COLS_CONV_DIMS,
    COLS_INPUT_BOUNDS,
    COLS_KERNEL_BOUNDS,
    COLS_LAYOUT,
    COLS_OUTPUT_BOUNDS,
    COLS_SHAPE,
    CONV_INPUT_BATCH,
    CONV_INPUT_FEATURE,
    CONV_KERNEL_INPUT_FEATURE,
    CONV_KERNEL_OUTPUT_FEATURE,
    CONV_OUTPUT_BATCH,
    CONV_OUTPUT_FEATURE,
    MAX_RANK,
    TPU_LANES,
    TPU_SUBLANES,
)
from features.data import NODE_ATTRS, num_configs, select_configs
from features.tabular_tile import tile_shares

PLACEHOLDER_OPCODE = 0
"""Opcode id of the placeholder nodes of :class:`CollapseChains` (0 is "unknown" in the opcode table)."""

_DIRECTIONS = ("in", "out", "both")


def _check_direction(direction: str) -> None:
    if direction not in _DIRECTIONS:
        raise ValueError(f"direction must be one of {_DIRECTIONS}, got {direction!r}")


def _k_hop_mask(seeds: torch.Tensor, edge_index: torch.Tensor, num_nodes: int, hops: int, direction: str
                ) -> torch.Tensor:
    """Nodes within ``hops`` steps of ``seeds``: bool ``[N]``.

    ``torch_geometric.utils.k_hop_subgraph`` walks one direction only; "both" here lets every step go either
    way (the undirected k-hop ball), so this small frontier walk serves all three directions alike.
    """
    src, dst = edge_index
    mask = torch.zeros(num_nodes, dtype=torch.bool)
    mask[seeds] = True
    for _ in range(hops):
        step = mask.clone()
        if direction in ("in", "both"):
            step[src[mask[dst]]] = True
        if direction in ("out", "both"):
            step[dst[mask[src]]] = True
        if torch.equal(step, mask):
            break
        mask = step
    return mask


def _keep_nodes(data: Data, keep: torch.Tensor) -> Data:
    """Restrict ``data`` to the nodes where ``keep`` (bool ``[N]``) holds, relabelling nodes and edges, in place."""
    num_nodes = int(data.num_nodes)
    data.num_nodes_before = num_nodes
    data.num_edges_before = int(data.edge_index.shape[1])
    data.edge_index, _ = subgraph(keep, data.edge_index, relabel_nodes=True, num_nodes=num_nodes)
    for key in NODE_ATTRS:
        if key in data:
            data[key] = data[key][keep]
    new_id = torch.full((num_nodes,), -1, dtype=torch.long)
    new_id[keep] = torch.arange(int(keep.sum()))
    data.config_node_index = new_id[data.config_node_index]
    data.num_nodes = int(keep.sum())
    return data


class PruneToConfigurable(BaseTransform):
    """Keep the configurable nodes of a layout graph and their ``hops``-hop neighbourhood.

    Nodes are relabelled in their original order, edges between kept nodes are kept, and ``config_node_index``
    points at the same nodes afterwards. Records ``num_nodes_before`` and ``num_edges_before`` (ints). A graph
    without ``config_node_index`` (tile: every node matters to the kernel) is returned unchanged.

    Args:
        hops: neighbourhood radius, 1 to 5.
        direction: ``"in"`` follows producers (inputs), ``"out"`` consumers, ``"both"`` either way at every step
            (so with ``hops >= 2`` it also reaches siblings, e.g. other consumers of a shared input).
    """

    def __init__(self, hops: int = 1, direction: str = "both") -> None:
        if not 1 <= hops <= 5:
            raise ValueError(f"hops must be in 1..5, got {hops}")
        _check_direction(direction)
        self.hops = hops
        self.direction = direction

    def forward(self, data: Data) -> Data:
        if data.get("config_node_index") is None:
            return data
        keep = _k_hop_mask(data.config_node_index, data.edge_index, int(data.num_nodes), self.hops, self.direction)
        return _keep_nodes(data, keep)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(hops={self.hops}, direction={self.direction!r})"


def _csr(src: torch.Tensor, dst: torch.Tensor, num_nodes: int) -> tuple[list[int], list[int]]:
    """Adjacency lists of ``src -> dst`` as Python lists (indptr, targets), for the per-source walks."""
    order = torch.argsort(src, stable=True)
    indptr = torch.zeros(num_nodes + 1, dtype=torch.long)
    indptr[1:] = torch.cumsum(torch.bincount(src, minlength=num_nodes), 0)
    return indptr.tolist(), dst[order].tolist()


class CollapseChains(BaseTransform):
    """Keep the configurable nodes (plus ``hops`` hops) and bridge what was removed between kept nodes.

    If kept node ``u`` reaches kept node ``v`` through a directed path whose inner nodes were all removed, the
    pruned graph gets ``u -> v`` (``mode="edge"``) or ``u -> p -> v`` through a new placeholder node ``p``
    (``mode="node"``: one per bridged pair, zero features, opcode :data:`PLACEHOLDER_OPCODE`, appended after the
    kept nodes). So layout links running through chains of elementwise ops are not cut. Bridges are added in
    ``(u, v)`` order after the kept edges; a pair already joined by a kept edge is bridged too (the bridge says
    a longer path exists).

    With ``through="elementwise"`` only removed elementwise ops (the ``elementwise`` opcode group, which keep their
    operand's layout) carry a path: the layout links between decisions, without the bridges through reductions,
    broadcasts or fusions that join most kept nodes to most others in a large module (bridging through everything
    multiplies a pruned nlp graph's edges: lab/journal.md, "figures moved out of docstrings").

    Paths are found by one walk per kept node that only enters removed (passable) nodes and stops at kept ones: the
    cost is the number of (kept node, removed node it reaches through removed nodes) pairs, small when removed
    regions are chains between kept nodes as in real programs, and never all pairs of nodes. Records
    ``num_nodes_before`` and ``num_edges_before``. A graph without ``config_node_index`` (tile) is unchanged.

    Args:
        hops: neighbourhood radius kept around configurable nodes, 0 to 5 (0: the configurable nodes only).
        direction: as for :class:`PruneToConfigurable`.
        mode: ``"edge"`` or ``"node"``.
        through: ``"all"`` removed nodes, or only ``"elementwise"`` ones, carry a path.
    """

    def __init__(self, hops: int = 0, direction: str = "both", mode: str = "edge", through: str = "all") -> None:
        if not 0 <= hops <= 5:
            raise ValueError(f"hops must be in 0..5, got {hops}")
        _check_direction(direction)
        if mode not in ("edge", "node"):
            raise ValueError(f"mode must be 'edge' or 'node', got {mode!r}")
        if through not in ("all", "elementwise"):
            raise ValueError(f"through must be 'all' or 'elementwise', got {through!r}")
        self.hops = hops
        self.direction = direction
        self.mode = mode
        self.through = through

    def _bridges(self, keep: torch.Tensor, edge_index: torch.Tensor, op: torch.Tensor) -> torch.Tensor:
        """Pairs ``(u, v)`` of kept nodes linked through removed (passable) nodes only: int64 ``[2, B]``, old ids,
        sorted."""
        num_nodes = keep.shape[0]
        src, dst = edge_index
        if self.through == "elementwise":  # a removed node that is not elementwise is a dead end: drop its edges
            passable = keep | (_group_table()[op] == OPCODE_GROUP_NAMES.index("elementwise"))
            usable = passable[src] & passable[dst]
            src, dst = src[usable], dst[usable]
        indptr, targets = _csr(src, dst, num_nodes)
        kept = keep.tolist()
        entry = keep[src] & ~keep[dst]
        pairs: set[tuple[int, int]] = set()
        for u in src[entry].unique().tolist():
            seen: set[int] = set()
            stack = [w for w in targets[indptr[u]:indptr[u + 1]] if not kept[w]]
            while stack:
                w = stack.pop()
                if w in seen:
                    continue
                seen.add(w)
                for t in targets[indptr[w]:indptr[w + 1]]:
                    if kept[t]:
                        pairs.add((u, t))
                    elif t not in seen:
                        stack.append(t)
        if not pairs:
            return torch.empty(2, 0, dtype=torch.long)
        return torch.tensor(sorted(pairs), dtype=torch.long).T

    def forward(self, data: Data) -> Data:
        if data.get("config_node_index") is None:
            return data
        num_nodes = int(data.num_nodes)
        keep = _k_hop_mask(data.config_node_index, data.edge_index, num_nodes, self.hops, self.direction)
        bridges = self._bridges(keep, data.edge_index, data.op)
        new_id = torch.cumsum(keep.long(), 0) - 1
        data = _keep_nodes(data, keep)
        bridges = new_id[bridges]
        if self.mode == "edge":
            data.edge_index = torch.cat([data.edge_index, bridges], 1)
            return data
        count = bridges.shape[1]
        placeholder = torch.arange(data.num_nodes, data.num_nodes + count)
        data.edge_index = torch.cat(
            [data.edge_index, torch.stack([bridges[0], placeholder]), torch.stack([placeholder, bridges[1]])], 1
        )
        data.x = torch.cat([data.x, data.x.new_zeros(count, data.x.shape[1])])
        data.op = torch.cat([data.op, data.op.new_full((count,), PLACEHOLDER_OPCODE)])
        data.num_nodes = data.num_nodes + count
        return data

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(hops={self.hops}, direction={self.direction!r}, mode={self.mode!r}, "
                f"through={self.through!r})")


def _ranks(x: torch.Tensor) -> torch.Tensor:
    """Each node's rank from ``x``: its nonzero shape dims (cols 21-26), 0 for a tuple (col 29 > 0)."""
    rank = (x[:, COLS_SHAPE] != 0).sum(1)
    return torch.where(x[:, COL_TUPLE_COUNT] > 0, torch.zeros_like(rank), rank)


def _pad_beyond_rank(values: torch.Tensor, rank: torch.Tensor) -> torch.Tensor:
    """Replace the zeros at positions ``>= rank`` of each row by -1: ``values [R, 6]``, ``rank [R]``."""
    beyond = torch.arange(values.shape[1]) >= rank[:, None]
    return torch.where(beyond & (values == 0), torch.full_like(values, -1), values)


class PadLayoutMinusOne(BaseTransform):
    """Pad layouts with -1 instead of 0, so that dimension 0 and "no dimension" differ.

    * ``x`` cols 134-139 (the node's default ``minor_to_major``): zeros at positions ``>= rank`` become -1, where
      rank is the number of nonzero shape dims in cols 21-26; tuples (col 29 > 0) and scalars have rank 0 and so
      get six -1.
    * tile ``config_feat`` ``[C, 24]``: in each bounds group (kernel cols 0-5, output 8-13, input 16-21) zeros at
      positions ``>=`` the group's count of nonzero entries become -1 (an all-zero group becomes all -1). The
      sum and product columns are left alone.
    * layout ``config_feat`` ``[C, NC, 18]`` already uses -1 and is left alone.

    Only zeros are replaced, so a value is never lost even if a row is not a prefix of nonzeros.
    """

    def forward(self, data: Data) -> Data:
        x = data.x.clone()
        x[:, COLS_LAYOUT] = _pad_beyond_rank(x[:, COLS_LAYOUT], _ranks(data.x))
        data.x = x
        config_feat = data.get("config_feat")
        if isinstance(config_feat, torch.Tensor) and config_feat.dim() == 2:
            config_feat = config_feat.clone()
            for group in (COLS_KERNEL_BOUNDS, COLS_OUTPUT_BOUNDS, COLS_INPUT_BOUNDS):
                cols = slice(group.start, group.start + MAX_RANK)
                config_feat[:, cols] = _pad_beyond_rank(config_feat[:, cols], (config_feat[:, cols] != 0).sum(1))
            data.config_feat = config_feat
        return data


def _group_table() -> torch.Tensor:
    return torch.tensor(OPCODE_GROUP_OF, dtype=torch.long)


class OpcodeGroupFeatures(BaseTransform):
    """Append a one-hot opcode group to ``x``: 7 float32 columns in the order of :data:`OPCODE_GROUP_NAMES`.

    Groups: elementwise, reduction (incl. batch norms), data movement (incl. reshape, transpose, sort), matrix
    (convolution, dot), collective (incl. send/recv), control (while, call, fusion, tuples, async), other.

    Shapes:
        ``x [N, F] -> [N, F + 7]``.
    """

    def forward(self, data: Data) -> Data:
        group = _group_table()[data.op]
        onehot = torch.nn.functional.one_hot(group, len(OPCODE_GROUP_NAMES)).to(data.x.dtype)
        data.x = torch.cat([data.x, onehot], 1)
        return data


class TileShares(BaseTransform):
    """Append to tile ``config_feat`` what share of its arrays each config cuts
    (:func:`features.tabular_tile.tile_shares`: each tiled dim's share per output tile, the kernel's tiles and the share
    one covers), from the raw ``x``, ``op`` and bounds: before :class:`PadLayoutMinusOne` and :class:`LogTransform`.
    A graph without a 2-D ``config_feat`` (layout) is unchanged.

    Shapes:
        tile ``config_feat [C, 24] -> [C, 24 + len(features.tabular_tile.TILE_SHARE_NAMES)]``.
    """

    def forward(self, data: Data) -> Data:
        config_feat = data.get("config_feat")
        if not isinstance(config_feat, torch.Tensor) or config_feat.dim() != 2:
            return data
        shares = tile_shares(data.x.numpy(), data.op.numpy(), config_feat.numpy())
        data.config_feat = torch.cat([config_feat, torch.from_numpy(shares).to(config_feat.dtype)], 1)
        return data



class ShapeAlignmentFeatures(BaseTransform):
    """Append TPU alignment features of the shape dims (cols 21-26): ``d % 128``, ``d // 128``, ``d % 8``.

    128 is the TPU vector lane width and 8 the sublane count, so these say how much of a tile a dim wastes.
    Columns are appended grouped by feature: six ``% 128``, six ``// 128``, six ``% 8`` (dims 0-5 each).

    Shapes:
        ``x [N, F] -> [N, F + 18]``.
    """

    def forward(self, data: Data) -> Data:
        dims = data.x[:, COLS_SHAPE]
        data.x = torch.cat([data.x, dims.remainder(TPU_LANES), dims.div(TPU_LANES, rounding_mode="floor"),
                            dims.remainder(TPU_SUBLANES)], 1)
        return data


def operand_nodes(edge_index: torch.Tensor, nodes: torch.Tensor, num_nodes: int
                  ) -> tuple[torch.Tensor, torch.Tensor]:
    """The first and second operand of each of ``nodes``: its producers in ``edge_index`` (data-flow direction) in
    ascending node order, since the file does not keep operand order; a node with one producer uses it for both,
    a node with none gets -1 for both.

    Returns:
        int64 ``[len(nodes)]`` twice.
    """
    first = torch.full((nodes.numel(),), -1, dtype=torch.long)
    second = first.clone()
    if not nodes.numel() or not edge_index.numel():
        return first, second
    src, dst = edge_index
    slot_of = torch.full((num_nodes,), -1, dtype=torch.long)
    slot_of[nodes] = torch.arange(nodes.numel())
    owner = slot_of[dst]
    sel = owner >= 0
    owner, producer = owner[sel], src[sel]
    order = torch.argsort(owner * num_nodes + producer)  # by slot, then producer id
    owner, producer = owner[order], producer[order]
    new = torch.ones_like(owner, dtype=torch.bool)
    new[1:] = owner[1:] != owner[:-1]
    position = torch.arange(owner.numel())
    rank = position - torch.cummax(torch.where(new, position, 0), 0).values  # 0 for a slot's first producer
    first[owner[rank == 0]] = producer[rank == 0]
    second[owner[rank == 1]] = producer[rank == 1]
    return first, torch.where(second < 0, first, second)


def slot_tensors(data: Data) -> torch.Tensor | None:
    """int64 ``[NC, 3]``: the nodes of each configurable slot's output and two operands (:func:`operand_nodes`;
    -1 for an operand not in the graph), the tensors a layout config's 18 values speak of; ``None`` for a graph
    without configurable slots (tile)."""
    nodes = data.get("config_node_index")
    if nodes is None:
        return None
    first, second = operand_nodes(data.edge_index, nodes, data.x.shape[0])
    return torch.stack([nodes, first, second], 1)


class ConfigDimensionSizes(BaseTransform):
    """Attach, per layout config slot group, the size of every dimension its config values can name:
    ``config_dim_sizes`` float32 ``[NC, 3, 7]``.

    A layout config gives, for the output and two operands of a configurable node, the dimensions in minor-to-major
    order (values 0..5, -1 for none). ``config_dim_sizes[s, t, v + 1]`` is the size of dimension ``v`` of tensor
    ``t`` (0 output, 1 and 2 the operands, see :func:`operand_nodes`) of slot ``s``'s node, read from cols 21-26 of
    that tensor's node; 0 at ``v = -1``, beyond the tensor's rank, for a tuple-shaped tensor and for an operand
    that is not in the graph. :meth:`models.gnn.net.RankNet.config_embedding` turns the size each config value
    names into features (``dim_tokens=True``): which dimension lands minor-most, and how well it fills the TPU's
    (8, 128) tile, is what a layout changes.

    Run it before :class:`LogTransform` (it reads the raw sizes) and after pruning (it indexes nodes). Graphs
    without configurable slots (tile) are left alone.

    Shapes:
        adds ``config_dim_sizes [NC, 3, 7]``.
    """

    def forward(self, data: Data) -> Data:
        tensors = slot_tensors(data)
        if tensors is None:
            return data
        shapes = data.x[:, COLS_SHAPE].float()
        shapes = torch.where((data.x[:, COL_TUPLE_COUNT] > 0)[:, None], torch.zeros_like(shapes), shapes)
        shapes = torch.cat([torch.zeros(shapes.shape[0] + 1, 1), torch.cat([shapes, torch.zeros(1, MAX_RANK)])], 1)
        missing = shapes.shape[0] - 1  # the all-zero row stands for an absent operand
        tensors = torch.where(tensors < 0, torch.full_like(tensors, missing), tensors)
        data.config_dim_sizes = shapes[tensors]  # [NC, 3, 7]
        return data


DOT_CONV_COLUMNS: tuple[str, ...] = (
    "dot_batch_dims",
    "dot_lhs_contracting_dim",
    "dot_rhs_contracting_dim",
    "dot_contracting_size",
    "dot_lhs_minor_dim",
    "dot_rhs_minor_dim",
    "dot_lhs_minor_is_contracting",
    "dot_rhs_minor_is_contracting",
    "conv_input_minor_is_feature",
    "conv_input_minor_is_batch",
    "conv_kernel_minor_is_input_feature",
    "conv_kernel_minor_is_output_feature",
    "conv_output_minor_is_feature",
    "conv_output_minor_is_batch",
)
"""The columns :class:`DotConvFeatures` appends, in order."""


def _shape(row: list[float]) -> list[int]:
    """A shape from cols 21-26 of one node: the dims up to the first zero."""
    out: list[int] = []
    for d in row:
        if d == 0:
            break
        out.append(int(d))
    return out


def _infer_dot(lhs: list[int], rhs: list[int], out: list[int]) -> tuple[int, int, int] | None:
    """``(batch dims, lhs contracting dim, rhs contracting dim)`` of a dot with one contracting dim, or None.

    Batch dims are the leading dims equal in lhs, rhs and output (at most one fewer than either operand's rank).
    The contracting pair is the first (lhs dim from the last, rhs dim from the first after the batch dims) of
    equal size such that the remaining lhs dims, then rhs dims, are the output after its batch dims, as XLA
    orders a dot's output. Square operands can make the answer ambiguous; this order then picks the usual one.
    """
    nb = 0
    while nb < min(len(lhs), len(rhs)) - 1 and nb < len(out) and lhs[nb] == rhs[nb] == out[nb]:
        nb += 1
    for i in range(len(lhs) - 1, nb - 1, -1):
        lhs_free = lhs[nb:i] + lhs[i + 1:]
        if out[nb:nb + len(lhs_free)] != lhs_free:
            continue
        for j in range(nb, len(rhs)):
            if rhs[j] == lhs[i] and out[nb + len(lhs_free):] == rhs[nb:j] + rhs[j + 1:]:
                return nb, i, j
    return None


class DotConvFeatures(BaseTransform):
    """Append features of dot and convolution nodes (:data:`DOT_CONV_COLUMNS`, 14 float32 columns).

    A node's operands are :func:`operand_nodes`: (lhs, rhs) for dot and (input, kernel) for convolution. Shapes
    come from cols 21-26 (up to the first zero), an operand's minor
    dimension from its col 134 (first entry of its default ``minor_to_major``).

    * dot: batch dims, lhs / rhs contracting dim and its size as inferred by :func:`_infer_dot` (one contracting
      dim, best effort: -1 for both dims and 0 for the size when no split fits), each operand's minor dim and
      whether it is the contracting dim (1/0).
    * convolution: whether the input's minor dim is its feature (col 94) or batch (col 93) dim, the kernel's minor
      dim its input feature (col 99) or output feature (col 100) dim, the output's minor dim (its own col 134) its
      feature (col 106) or batch (col 105) dim (1/0 each).
    * every other node: zeros.

    Run it before :class:`LogTransform`, which changes the shapes it reads; before or after
    :class:`PadLayoutMinusOne` gives the same result except that a -1 minor dim matches no dimension.

    Shapes:
        ``x [N, F] -> [N, F + 14]``.
    """

    def forward(self, data: Data) -> Data:
        num_nodes = data.x.shape[0]
        feats = torch.zeros(num_nodes, len(DOT_CONV_COLUMNS), dtype=data.x.dtype)
        targets = ((data.op == DOT) | (data.op == CONVOLUTION)).nonzero().flatten()
        if targets.numel():
            first, second = operand_nodes(data.edge_index, targets, num_nodes)
            shapes = data.x[:, COLS_SHAPE].tolist()
            minor = data.x[:, COLS_LAYOUT.start].tolist()
            conv_dims = data.x[:, COLS_CONV_DIMS].tolist()
            ops = data.op.tolist()
            for node, a, b in zip(targets.tolist(), first.tolist(), second.tolist(), strict=True):
                if a < 0:
                    continue
                row = feats[node]
                if ops[node] == DOT:
                    row[4], row[5] = minor[a], minor[b]
                    found = _infer_dot(_shape(shapes[a]), _shape(shapes[b]), _shape(shapes[node]))
                    if found is None:
                        row[1] = row[2] = -1
                        continue
                    nb, i, j = found
                    row[0], row[1], row[2], row[3] = nb, i, j, _shape(shapes[a])[i]
                    row[6], row[7] = float(minor[a] == i), float(minor[b] == j)
                else:
                    cd = conv_dims[node]  # offsets into cols 93-106
                    row[8] = float(minor[a] == cd[CONV_INPUT_FEATURE])
                    row[9] = float(minor[a] == cd[CONV_INPUT_BATCH])
                    row[10] = float(minor[b] == cd[CONV_KERNEL_INPUT_FEATURE])
                    row[11] = float(minor[b] == cd[CONV_KERNEL_OUTPUT_FEATURE])
                    row[12] = float(minor[node] == cd[CONV_OUTPUT_FEATURE])
                    row[13] = float(minor[node] == cd[CONV_OUTPUT_BATCH])
        data.x = torch.cat([data.x, feats], 1)
        return data


DEFAULT_LOG_COLUMNS: tuple[int, ...] = (*range(21, 30), *range(37, 45), *range(107, 125))
"""Heavy-tailed ``x`` columns: 21-29 (shape dims, sum, product, tuple count), 37-44 (window size dims, sum,
product), 107-124 (feature / batch group counts, slice start / stride / limit, dynamic-slice sizes)."""


class LogTransform(BaseTransform):
    """Replace ``x`` columns by ``sign(x) * log1p(|x|)``, which tames heavy tails and keeps 0 and the sign.

    Args:
        columns: ``x`` column indices; default :data:`DEFAULT_LOG_COLUMNS`.
    """

    def __init__(self, columns: Sequence[int] = DEFAULT_LOG_COLUMNS) -> None:
        self.columns = tuple(columns)

    def forward(self, data: Data) -> Data:
        x = data.x.clone()
        cols = list(self.columns)
        x[:, cols] = torch.sign(x[:, cols]) * torch.log1p(x[:, cols].abs())
        data.x = x
        return data

    def __repr__(self) -> str:
        if self.columns == DEFAULT_LOG_COLUMNS:
            return f"{type(self).__name__}(columns=DEFAULT_LOG_COLUMNS)"
        return f"{type(self).__name__}(columns={list(self.columns)})"


def _not_fitted(transform: BaseTransform) -> Exception:
    """scikit-learn's ``NotFittedError`` for a fitted transform applied before ``fit`` (imported only then: scikit-learn
    is slow to import and nothing else here needs it)."""
    from sklearn.exceptions import NotFittedError

    return NotFittedError(f"{type(transform).__name__} is not fitted: call fit(train_datas) or from_state_dict first")


class DropConstantColumns(BaseTransform):
    """Drop the ``x`` columns that are constant across the training graphs (fitted).

    ``fit`` learns ``kept_`` (int64 ``[K]``, ascending column indices) and ``num_columns_``; ``forward`` never
    refits. Store it beside a model with :meth:`state_dict` and restore it with :meth:`from_state_dict`.

    Shapes:
        ``x [N, F] -> [N, K]``.
    """

    def fit(self, datas: Iterable[Data]) -> DropConstantColumns:
        lo: torch.Tensor | None = None
        hi: torch.Tensor | None = None
        for data in datas:
            if data.x.shape[0] == 0:
                continue
            cmin, cmax = data.x.min(0).values, data.x.max(0).values
            lo = cmin if lo is None else torch.minimum(lo, cmin)
            hi = cmax if hi is None else torch.maximum(hi, cmax)
        if lo is None or hi is None:
            raise ValueError("DropConstantColumns.fit: no nodes in the training graphs")
        self.kept_ = (hi > lo).nonzero().flatten()
        self.num_columns_ = int(lo.shape[0])
        return self

    def forward(self, data: Data) -> Data:
        if not hasattr(self, "kept_"):
            raise _not_fitted(self)
        if data.x.shape[1] != self.num_columns_:
            raise ValueError(f"DropConstantColumns: fitted on {self.num_columns_} columns, x has {data.x.shape[1]}")
        data.x = data.x[:, self.kept_]
        return data

    def state_dict(self) -> dict[str, Any]:
        """Plain-Python state: ``{"kept": [int], "num_columns": int}``."""
        return {"kept": self.kept_.tolist(), "num_columns": self.num_columns_}

    @classmethod
    def from_state_dict(cls, state: dict[str, Any]) -> DropConstantColumns:
        out = cls()
        out.kept_ = torch.tensor(state["kept"], dtype=torch.long)
        out.num_columns_ = int(state["num_columns"])
        return out

    def __repr__(self) -> str:
        if not hasattr(self, "kept_"):
            return f"{type(self).__name__}(unfitted)"
        return f"{type(self).__name__}(kept={len(self.kept_)} of {self.num_columns_})"


class Normalize(BaseTransform):
    """Standardise ``x`` per column with the mean and std of the training nodes (fitted).

    ``fit`` learns ``mean_`` and ``std_`` (float32 ``[F]``, std floored at ``std_floor`` so constant columns map to
    0 rather than inf), accumulated in float64 over all nodes of all graphs.

    Args:
        std_floor: the smallest std used.
    """

    def __init__(self, std_floor: float = 1e-6) -> None:
        self.std_floor = std_floor

    def fit(self, datas: Iterable[Data]) -> Normalize:
        total: torch.Tensor | None = None
        total_sq: torch.Tensor | None = None
        count = 0
        for data in datas:
            x = data.x.double()
            total = x.sum(0) if total is None else total + x.sum(0)
            total_sq = (x * x).sum(0) if total_sq is None else total_sq + (x * x).sum(0)
            count += x.shape[0]
        if total is None or total_sq is None or count == 0:
            raise ValueError("Normalize.fit: no nodes in the training graphs")
        mean = total / count
        var = (total_sq / count - mean * mean).clamp_min(0)
        self.mean_ = mean.float()
        self.std_ = var.sqrt().clamp_min(self.std_floor).float()
        return self

    def forward(self, data: Data) -> Data:
        if not hasattr(self, "mean_"):
            raise _not_fitted(self)
        data.x = (data.x - self.mean_) / self.std_
        return data

    def state_dict(self) -> dict[str, Any]:
        """Plain-Python state: ``{"mean": [float], "std": [float], "std_floor": float}``."""
        return {"mean": self.mean_.tolist(), "std": self.std_.tolist(), "std_floor": self.std_floor}

    @classmethod
    def from_state_dict(cls, state: dict[str, Any]) -> Normalize:
        out = cls(std_floor=float(state["std_floor"]))
        out.mean_ = torch.tensor(state["mean"], dtype=torch.float32)
        out.std_ = torch.tensor(state["std"], dtype=torch.float32)
        return out

    def __repr__(self) -> str:
        fitted = f", fitted on {len(self.mean_)} columns" if hasattr(self, "mean_") else ""
        return f"{type(self).__name__}(std_floor={self.std_floor}{fitted})"


class DedupConfigs(BaseTransform):
    """Merge configs with identical ``config_feat`` rows (tile ``[C, 24]``, layout ``[C, NC, 18]``).

    One config is kept per group, at the position and with the ``config_ids`` of its first occurrence; ``y`` and
    ``runtime`` are the group's minimum (``"min"``) or mean (``"mean"``; ``runtime`` rounded to int64 ns).
    ``config_feat`` is the shared row. Records ``num_configs_before``.

    Args:
        reduce: ``"min"`` or ``"mean"``.
    """

    def __init__(self, reduce: str = "min") -> None:
        if reduce not in ("min", "mean"):
            raise ValueError(f"reduce must be 'min' or 'mean', got {reduce!r}")
        self.reduce = reduce

    def forward(self, data: Data) -> Data:
        count = num_configs(data)
        data.num_configs_before = count
        if count == 0:
            return data
        _, group = torch.unique(data.config_feat.reshape(count, -1), dim=0, return_inverse=True)
        num_groups = int(group.max()) + 1
        positions = torch.arange(count)
        first = torch.full((num_groups,), count, dtype=torch.long).scatter_reduce(0, group, positions, "amin")
        order = torch.argsort(first)
        rank_of_group = torch.empty_like(order)
        rank_of_group[order] = torch.arange(num_groups)
        reduced = {}
        for key in ("y", "runtime"):
            value = data.get(key)
            if not isinstance(value, torch.Tensor):
                continue
            source = value.double()
            how = "amin" if self.reduce == "min" else "mean"
            out = torch.zeros(num_groups, dtype=torch.float64).scatter_reduce(0, group, source, how,
                                                                              include_self=False)
            reduced[key] = out[order].round().to(value.dtype) if key == "runtime" else out[order].to(value.dtype)
        select_configs(data, first[order])
        for key, value in reduced.items():
            data[key] = value
        return data

    def __repr__(self) -> str:
        return f"{type(self).__name__}(reduce={self.reduce!r})"


class SampleConfigs(BaseTransform):
    """Keep a random subset of ``k`` configs (all if there are fewer), in their original order.

    The generator is seeded once, at the first call: a transform built with a seed draws the same sequence of
    subsets in every run (a new subset per call, as a training loop wants), one without a seed draws from fresh
    entropy.

    Args:
        k: configs to keep.
        seed: seed of the ``torch.Generator``; ``None`` for a nondeterministic one.
    """

    def __init__(self, k: int, seed: int | None = None) -> None:
        if k < 1:
            raise ValueError(f"k must be >= 1, got {k}")
        self.k = k
        self.seed = seed

    def forward(self, data: Data) -> Data:
        count = num_configs(data)
        if count <= self.k:
            return data
        if not hasattr(self, "_generator"):
            self._generator = torch.Generator()
            if self.seed is None:
                self._generator.seed()
            else:
                self._generator.manual_seed(self.seed)
        chosen = torch.randperm(count, generator=self._generator)[: self.k].sort().values
        return select_configs(data, chosen)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(k={self.k}, seed={self.seed})"
