"""Layout runtime model of the synthetic world: what a layout config costs, evaluated for many configs at once.

The model (the machine's constants in :mod:`competition.synthetic.physics`, the model's below):

* A layout is a minor-to-major permutation per tensor. Configurable nodes are convolution, dot and reshape. A
  convolution or dot config names the two most-minor dims of its output, input (operand 0) and kernel (operand 1),
  the rest of each tensor following in descending order; as in the real graph's search
  (``competition/data/real_records/alexnet/``), each tensor takes one of two layouts, its two non-spatial dims in
  either order (:func:`_key_pairs`), so a node has 8 explicit choices. A reshape config names full permutations of
  output and input; its search keeps those that leave it a bitcast. Choice 0 of every node is the compiler's default
  heuristic (feature row all -1): the node's locally cheapest layouts, costing its own op, the elementwise chains
  working in its output layout and its copies to and from fixed (row-major) neighbours, but not the copies between
  two layout decisions, which a local heuristic does not see (ties go to the first option of each tensor).
* A reshape's choices beyond the default are swept as a tuner's first sweep leaves them (:func:`_sweep`): the
  layouts whose change alone slows the program by at most :data:`SWEEP_SLACK` (at least :data:`MIN_KEPT`), plus
  ``floor(WILD_SHARE * kept)`` of the worst others.
* A convolution or dot runs at ``max(flops / peak, physical bytes / bandwidth) * inefficiency + launch``. Only its
  output's layout costs: the inefficiency is the output's physical over logical size to the power
  :data:`PAD_EXPONENT` (the matrix unit writes (8, 128) tiles, and what padding fills of them is wasted work and
  stores). The operands are read as their producers store them: in the real graph, input and kernel layouts move
  the runtime by less than the noise. Physical bytes pad the minor dim to 128 and the second-minor to 8.
* Every other op takes the default (row-major) layout, except elementwise ops (:data:`ELEMENTWISE`, same shape as
  operand 0), which carry operand 0's layout on: chains of them carry a configurable producer's output layout to
  its consumers, and they pay their own physical bytes in that layout.
* Where a consumer needs a layout other than its producer's, a copy is charged: physical bytes read plus written
  over the bandwidth, plus a launch. A reshape demands its chosen input layout on its operand; an elementwise op
  demands operand 0's layout on its other same-shape operands; a convolution or dot demands nothing; every other op
  (reduce, transpose, gather, concatenate, tuple, computation roots...) demands row-major.
* A reshape is free (a bitcast) when its input and output layouts line up (both row-major over their non-unit dims
  with equal most-minor size, or the same non-unit dims in the same order), and a copy otherwise.
* Searches tie nodes (:func:`_ties`): nodes of one kind whose choices write the same rows take the same choice, at
  most :data:`TIE_MAX` a group, as the real search ties its convolutions and its dots. A ``random`` search rarely
  leaves a group's compiler output layout (:data:`OUTPUT_FLIP` on xla programs) and draws the rest uniformly.

So ``runtime = base + sum over nodes own[node, choice] + sum over links table[link, opt_a, opt_b]``: the base holds
every layout-independent op, ``own`` a node's efficiency and its copies against fixed (row-major) neighbours, and
each link a copy between two layout decisions. The tables are built once (:meth:`LayoutProblem.from_module`) and
configs are evaluated with vectorised look-ups (:meth:`LayoutProblem.runtime_ns`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from itertools import product

import numpy as np
import numpy.typing as npt

from competition.hlo.ir import ITEMSIZE, Instruction, Module, Shape, default_layout
from competition.schema import row_hashes
from competition.synthetic import physics

CONFIGURABLE: frozenset[str] = frozenset({"convolution", "dot", "reshape"})

ELEMENTWISE: frozenset[str] = frozenset({
    "abs", "add", "and", "atan2", "bitcast-convert", "cbrt", "ceil", "clamp", "compare", "convert", "cosine",
    "divide", "exponential", "exponential-minus-one", "floor", "imag", "is-finite", "log", "log-plus-one",
    "logistic", "maximum", "minimum", "multiply", "negate", "not", "or", "popcnt", "power", "real",
    "reduce-precision", "remainder", "round-nearest-afz", "round-nearest-even", "rsqrt", "select", "shift-left",
    "shift-right-arithmetic", "shift-right-logical", "sign", "sine", "sqrt", "subtract", "tan", "tanh", "xor",
    "stochastic-convert",
})
"""Ops that follow their operand 0's layout (so layouts flow through chains of them)."""

FREE_OPS: frozenset[str] = frozenset({
    "parameter", "constant", "get-tuple-element", "tuple", "bitcast", "fusion", "while", "call", "conditional",
    "after-all", "add-dependency", "opt-barrier", "domain",
})
"""Ops with no cost of their own (bookkeeping, or their called computations pay)."""

NO_DEMAND: frozenset[str] = frozenset({"get-tuple-element", "bitcast", "add-dependency", "opt-barrier", "domain"})
"""Ops that place no layout demand on their operands."""

PAD_EXPONENT: float = 1.5
"""A convolution's or dot's time (its whole roofline) grows as (its output's physical size / its logical size) to this
power: the output tile is (8, 128), and what padding fills of it is wasted work and stores. The real graph's
costliest layout puts a dim of 3 minor (padded to 128): its one convolution then runs several times the whole
program's best. Above 1 (plain wasted work) so that the world's random searches reach the real graph's tail
(docs/synthetic.md, "Layout structure")."""

OUTPUT_FLIP: float = 1 / 12
"""``random`` search: the probability that a tied group's output layout leaves the compiler's (the real graph's
search leaves it for about one group in 12; its input and kernel layouts are uniform)."""

TIE_MAX: int = 8
"""A search ties nodes whose choices read the same (same opcode and dimension numbers), at most this many a group in
node order (the real graph's largest groups hold 8)."""

MAX_CHOICES: int = 200
"""At most this many explicit choices per node (plus choice 0, the default)."""

SWEEP_SLACK: float = 0.005
"""The sweep keeps a one-node change from the default when it slows the program by at most this share of the
default config's runtime."""

MIN_KEPT: int = 3
"""The sweep keeps at least a node's this many cheapest layouts, however much they cost (in a small program every
change weighs more than :data:`SWEEP_SLACK`)."""

WILD_SHARE: float = 0.1
"""Besides the sweep's ``kept`` layouts a node keeps ``floor(WILD_SHARE * kept)`` of the others, the worst first."""

MAX_RESHAPE_OPTIONS: int = 12
"""At most this many layouts per reshape tensor (keeps link tables small)."""


DEFAULT_MAX_MUTATIONS: int = 5
"""``default`` search changes at most this many nodes from the compiler default per config."""
DEFAULT_OUTPUT_FLIP: float = 1 / 6
"""A ``default`` search that wanders changes the output layout in this share of its steps (half as often as a
step that changes one of a convolution's three tensors uniformly would): its configs then hold enough signal
above the noise for a model to reach the real default collections' taus, and no more."""

_OUT, _IN, _KERNEL = 0, 1, 2


def _full_layout(written: tuple[int, ...], rank: int) -> tuple[int, ...]:
    """Complete a written (most-minor-first) prefix with the remaining dims in descending order."""
    rest = [d for d in range(rank - 1, -1, -1) if d not in written]
    return tuple(written) + tuple(rest)


def _pair_options(rank: int) -> list[tuple[int, ...]]:
    """Ordered pairs of distinct dims (the two most-minor dims), descending order first."""
    if rank == 0:
        return [()]
    if rank == 1:
        return [(0,)]
    first = (rank - 1, rank - 2)
    return [first] + [(a, b) for a in range(rank) for b in range(rank) if a != b and (a, b) != first]


@lru_cache(maxsize=1 << 16)
def _phys_bytes(shape: Shape, layout: tuple[int, ...]) -> float:
    return float(physics.physical_elements(shape.dims, layout) * ITEMSIZE[shape.element_type])


def _is_bitcast(in_shape: Shape, in_layout: Sequence[int], out_shape: Shape, out_layout: Sequence[int]) -> bool:
    """Whether a reshape between these layouts is a pure reinterpretation of the stored bytes."""
    ri = [d for d in in_layout if in_shape.dims[d] != 1]
    ro = [d for d in out_layout if out_shape.dims[d] != 1]
    si = [in_shape.dims[d] for d in ri]
    so = [out_shape.dims[d] for d in ro]
    if not si or not so:
        return True
    row_major = ri == sorted(ri, reverse=True) and ro == sorted(ro, reverse=True)
    if row_major and si[0] == so[0]:
        return True
    # Only unit dims inserted or removed: same physical order of the same non-unit dims.
    in_logical = [in_shape.dims[d] for d in range(in_shape.rank) if in_shape.dims[d] != 1]
    out_logical = [out_shape.dims[d] for d in range(out_shape.rank) if out_shape.dims[d] != 1]
    if in_logical != out_logical:
        return False
    rank_i = {d: k for k, d in enumerate(d for d in range(in_shape.rank) if in_shape.dims[d] != 1)}
    rank_o = {d: k for k, d in enumerate(d for d in range(out_shape.rank) if out_shape.dims[d] != 1)}
    return [rank_i[d] for d in ri] == [rank_o[d] for d in ro]


@dataclass
class _Node:
    """One configurable node: its tensors, their layout options and the choice -> option maps."""

    kind: str
    shapes: list[Shape]                     # output, input[, kernel]
    written: list[list[tuple[int, ...]]]    # per tensor: the options as written into the feature row
    layouts: list[list[tuple[int, ...]]]    # per tensor: the same options as full minor-to-major layouts
    sub: list[npt.NDArray[np.int64]]        # per tensor: option index of each choice (choice 0 = default)
    own: npt.NDArray[np.float64]            # [num_choices] own cost, ns
    unary: list[npt.NDArray[np.float64]]    # per tensor: [num_options] cost against fixed neighbours, ns

    @property
    def num_choices(self) -> int:
        return int(self.sub[0].size)


def _key_pairs(ins: Instruction, shapes: list[Shape]) -> list[list[tuple[int, ...]]]:
    """A convolution's or dot's written options per tensor (output, input, kernel): its two non-spatial dims in
    either order, the structural guess first (convolution: feature minor, then batch; kernel: input feature, then
    output feature; dot: the last two dims). The real search tries only these."""
    cd = ins.conv_dims if ins.opcode == "convolution" else None
    out: list[list[tuple[int, ...]]] = []
    for t, s in enumerate(shapes):
        r = s.rank
        if r < 2:
            out.append([_pair_options(r)[0]])
            continue
        if cd is not None:
            a, b = ((cd.output_feature, cd.output_batch), (cd.input_feature, cd.input_batch),
                    (cd.kernel_input_feature, cd.kernel_output_feature))[t]
        elif ins.opcode == "convolution":  # NHWC-like: features last, batch first; kernel HWIO
            a, b = (r - 1, 0) if t != _KERNEL else (r - 2, r - 1)
        else:
            a, b = r - 1, r - 2
        out.append([(a, b), (b, a)] if a != b else [(a, next(d for d in range(r - 1, -1, -1) if d != a))])
    return out


def _all_combos(counts: Sequence[int], default_combo: tuple[int, ...]) -> list[tuple[int, ...]]:
    """Every option combo of a node, the default's first (a convolution or dot has 8, a reshape at most
    :data:`MAX_RESHAPE_OPTIONS` squared)."""
    return [default_combo] + [c for c in product(*[range(c) for c in counts]) if c != default_combo]


def _build_node(ins: Instruction, comp_ins: list[Instruction]) -> _Node:
    ops = [comp_ins[o].shape for o in ins.operands]
    if ins.opcode == "reshape":
        shapes = [ins.shape, ops[0]]
        written = []
        for s in shapes:
            opts = [_full_layout(p, s.rank) for p in _pair_options(s.rank)]
            opts = list(dict.fromkeys(opts))
            if len(opts) > MAX_RESHAPE_OPTIONS:
                keep = np.unique(np.linspace(0, len(opts) - 1, MAX_RESHAPE_OPTIONS).round().astype(int))
                opts = [opts[int(k)] for k in keep]
            written.append(opts)
        layouts = [list(w) for w in written]
        default_combo = (0, 0)  # row-major is the first option of each
    else:
        shapes = [ins.shape, ops[0], ops[1]]
        written = _key_pairs(ins, shapes)
        layouts = [[_full_layout(w, s.rank) for w in ws] for ws, s in zip(written, shapes, strict=True)]
        default_combo = (0, 0, 0)
    combos = _all_combos([len(w) for w in written], default_combo)
    arr = np.asarray([default_combo] + combos, dtype=np.int64)
    sub = [arr[:, t].copy() for t in range(len(shapes))]

    if ins.opcode == "reshape":
        cost = np.zeros((len(layouts[0]), len(layouts[1])))
        for a, lo in enumerate(layouts[0]):
            for b, li in enumerate(layouts[1]):
                if not _is_bitcast(shapes[1], li, shapes[0], lo):
                    cost[a, b] = physics.copy_ns(_phys_bytes(shapes[1], li), _phys_bytes(shapes[0], lo))
        own = cost[sub[0], sub[1]]
        # The search tries the layouts that keep a reshape a bitcast (the real graph's reshapes take two such
        # layouts each and move its runtime by less than 0.2%), and the default's.
        keep = np.union1d([0, 1], np.nonzero(own == 0)[0])
        sub, own = [x[keep] for x in sub], own[keep]
    else:
        # Only the output's layout costs: the operands are read in their producers' layouts (the real graph's input
        # and kernel layouts move its runtime by less than the noise).
        out = shapes[_OUT]
        phys = np.asarray([_phys_bytes(out, lay) for lay in layouts[_OUT]])
        logical = max(out.num_elements, 1) * ITEMSIZE[out.element_type]
        ineff = (phys[sub[_OUT]] / logical) ** PAD_EXPONENT
        nbytes = phys[sub[_OUT]] + sum(_phys_bytes(s, default_layout(s.rank)) for s in shapes[1:])
        flops = _flops(ins, shapes)
        own = np.maximum(flops / physics.PEAK_FLOPS_PER_NS, nbytes / physics.HBM_BYTES_PER_NS) * ineff
        own = own + physics.LAUNCH_NS
    unary = [np.zeros(len(lay)) for lay in layouts]
    return _Node(ins.opcode, shapes, written, layouts, sub, own.astype(np.float64), unary)


def _flops(ins: Instruction, shapes: list[Shape]) -> float:
    out = shapes[0].num_elements
    if ins.opcode == "convolution":
        kernel = shapes[2]
        cd = ins.conv_dims
        kout = kernel.dims[cd.kernel_output_feature] if cd else (kernel.dims[-1] if kernel.dims else 1)
        per_out = kernel.num_elements / max(kout, 1) / max(ins.feature_group_count, 1)
        return 2.0 * out * per_out
    dd = ins.dot_dims
    lhs = shapes[1]
    contract = dd.lhs_contracting if dd else ((lhs.rank - 1,) if lhs.rank else ())
    k = int(np.prod([lhs.dims[d] for d in contract])) if contract else 1
    return 2.0 * out * k


def _default_op_ns(ins: Instruction, operand_shapes: list[Shape]) -> float:
    """Time of a non-configurable op in row-major layouts (its own work, no copies)."""
    if ins.opcode in FREE_OPS or ins.shape.is_tuple:
        return 0.0
    shapes = [ins.shape, *[s for s in operand_shapes if not s.is_tuple]]
    nbytes = sum(_phys_bytes(s, default_layout(s.rank)) for s in shapes)
    return physics.roofline_ns(float(ins.shape.num_elements), nbytes)


def _elementwise_ns(ins: Instruction, operand_shapes: list[Shape], layout: Sequence[int]) -> float:
    """Time of an elementwise op whose tensors (same shape as the output) are stored in ``layout``."""
    nbytes = 0.0
    for s in [ins.shape, *operand_shapes]:
        nbytes += _phys_bytes(s, layout if s.dims == ins.shape.dims else default_layout(s.rank))
    return physics.roofline_ns(float(ins.shape.num_elements), nbytes)


def _settle_default(node: _Node) -> None:
    """Make choice 0 (the compiler default) the node's locally cheapest explicit choice: its own roofline or copy
    plus its terms against fixed neighbours (elementwise chains, copies to and from row-major ops), not the copies
    between two layout decisions, which a local heuristic does not see. Ties keep the structural guess
    (the first option of each tensor, choice 1)."""
    cost = node.own + sum(u[s] for u, s in zip(node.unary, node.sub, strict=True))
    j = 1 + int(np.argmin(cost[1:]))
    if cost[1] <= cost[j] * (1 + 1e-12):
        j = 1
    for s in node.sub:
        s[0] = s[j]
    node.own[0] = node.own[j]


def _sweep(nodes: list[_Node], links: dict[tuple[int, int, int, int], npt.NDArray[np.float64]],
           base_ns: float) -> None:
    """Keep each node's search space, as a tuner's first sweep over one-node changes from the default leaves it.

    A node keeps its layouts whose change alone, every other node at the default, slows the program by at most
    :data:`SWEEP_SLACK` of the default config's runtime (at least its :data:`MIN_KEPT` cheapest; the cheapest
    ``MAX_CHOICES / (1 + WILD_SHARE)`` if more),
    and the ``floor(WILD_SHARE * kept)`` worst others (layouts a search keeps trying: the catastrophes of a random
    search). Choice 0 (the default) stays; the kept choices keep their order, the worst follow them.
    """
    local = [n.own + sum(u[s] for u, s in zip(n.unary, n.sub, strict=True)) for n in nodes]
    delta = [c - c[0] for c in local]
    total = base_ns + sum(float(c[0]) for c in local)
    for (a, ta, b, tb), tab in links.items():
        na, nb = nodes[a], nodes[b]
        da, db = int(na.sub[ta][0]), int(nb.sub[tb][0])
        total += float(tab[da, db])
        delta[a] = delta[a] + tab[na.sub[ta], db] - tab[da, db]
        delta[b] = delta[b] + tab[da, nb.sub[tb]] - tab[da, db]
    cap = int(MAX_CHOICES / (1 + WILD_SHARE))
    for n, d in zip(nodes, delta, strict=True):
        if n.kind != "reshape":
            continue  # a convolution or dot keeps its few options, as the real search tries them all
        explicit = np.arange(1, n.num_choices)
        ok = d[1:] <= SWEEP_SLACK * total
        ok[np.argsort(d[1:], kind="stable")[:MIN_KEPT]] = True  # a small graph's nodes each weigh more than the slack
        kept = explicit[ok]
        if kept.size > cap:
            kept = np.sort(kept[np.argsort(d[kept], kind="stable")[:cap]])
        rest = explicit[~ok]
        rest = rest[np.argsort(-d[rest], kind="stable")]
        n_wild = min(int(WILD_SHARE * kept.size), rest.size)
        wild = rest[:n_wild]
        sel = np.concatenate([[0], kept, wild]).astype(np.int64)
        n.sub = [s[sel] for s in n.sub]
        n.own = n.own[sel]


def _ties(nodes: list[_Node], feats: npt.NDArray[np.float32], offsets: npt.NDArray[np.int64]
          ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """The groups a search ties (:data:`TIE_MAX`): nodes of one kind whose choices write the same feature rows and
    whose defaults take the same layouts.

    Returns:
        ``(leaders [G], group [NC])``: each group's first node, ascending, and each node's group.
    """
    seen: dict[bytes, list[int]] = {}
    group = np.empty(len(nodes), dtype=np.int64)
    leaders: list[int] = []
    for k, n in enumerate(nodes):
        default = np.asarray([sub[0] for sub in n.sub], dtype=np.int64)  # the same default layouts, too
        key = n.kind.encode() + default.tobytes() + feats[offsets[k]: offsets[k] + n.num_choices].tobytes()
        members = seen.setdefault(key, [])
        if not members or len(members) % TIE_MAX == 0:
            leaders.append(k)
        members.append(k)
        group[k] = len(leaders) - 1 if len(members) % TIE_MAX == 1 or TIE_MAX == 1 else group[members[-2]]
    return np.asarray(leaders, dtype=np.int64), group


class LayoutProblem:
    """The layout cost tables of one module, and vectorised evaluation of configs.

    Attributes:
        node_config_ids: int64 ``[NC]`` ascending global node ids of the configurable nodes.
        num_choices: int64 ``[NC]`` choices per node; choice 0 is the compiler default (feature row all -1).
        base_ns: the layout-independent part of every config's runtime, ns.
    """

    def __init__(self, nodes: list[_Node], node_ids: npt.NDArray[np.int64], base_ns: float,
                 links: dict[tuple[int, int, int, int], npt.NDArray[np.float64]]) -> None:
        self._nodes = nodes
        self.node_config_ids = node_ids.astype(np.int64)
        self.num_choices = np.asarray([n.num_choices for n in nodes], dtype=np.int64)
        self.base_ns = float(base_ns)
        nc = len(nodes)
        self._choice_off = np.concatenate([[0], np.cumsum(self.num_choices)]).astype(np.int64)[:nc]
        unary = [sum(u[s] for u, s in zip(n.unary, n.sub, strict=True)) for n in nodes]
        self._own_only = np.concatenate([n.own for n in nodes]) if nodes else np.zeros(0)  # runtime_parts' own
        self._own = self._own_only + (np.concatenate(unary) if unary else 0.0)  # own and unary: a choice's row
        feats = []
        for n in nodes:
            f = np.full((n.num_choices, 18), -1.0, dtype=np.float32)
            for t, ws in enumerate(n.written):
                table = np.full((len(ws), 6), -1.0, dtype=np.float32)
                for k, w in enumerate(ws):
                    table[k, : len(w)] = w
                f[:, 6 * t: 6 * t + 6] = table[n.sub[t]]
            f[0] = -1.0
            feats.append(f)
        self._feats = np.concatenate(feats) if feats else np.zeros((0, 18), np.float32)
        self._sorted_choices: list[tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]] | None = None  # choices_of
        self._leaders, self._group = _ties(nodes, self._feats, self._choice_off)
        # Links: flat tables, and per link a row map (choice of a -> row offset) and a column map (choice of b).
        keys = sorted(links)
        self._link_a = np.asarray([k[0] for k in keys], dtype=np.int64)
        self._link_b = np.asarray([k[2] for k in keys], dtype=np.int64)
        tables, rows, cols = [], [], []
        off = 0
        for k in keys:
            a, ta, b, tb = k
            tab = links[k]
            tables.append(tab.ravel())
            rows.append(nodes[a].sub[ta] * tab.shape[1] + off)
            cols.append(nodes[b].sub[tb])
            off += tab.size
        self._link_table = np.concatenate(tables) if tables else np.zeros(0)
        self._rows = np.concatenate(rows) if rows else np.zeros(0, np.int64)
        self._cols = np.concatenate(cols) if cols else np.zeros(0, np.int64)
        self._row_off = np.concatenate([[0], np.cumsum([r.size for r in rows])])[:-1].astype(np.int64)
        self._col_off = np.concatenate([[0], np.cumsum([c.size for c in cols])])[:-1].astype(np.int64)

    @property
    def num_links(self) -> int:
        """Number of producer -> consumer links between two layout decisions."""
        return int(self._link_a.size)

    def layouts(self, node: int, choice: int) -> list[tuple[int, ...]]:
        """Full minor-to-major layouts (output, input[, kernel]) of configurable node ``node`` (index into
        ``node_config_ids``) under ``choice``."""
        n = self._nodes[node]
        return [n.layouts[t][int(n.sub[t][choice])] for t in range(len(n.shapes))]

    @classmethod
    def from_module(cls, module: Module) -> LayoutProblem:
        """Analyse a module once: cost tables for its configurable nodes and the links between them.

        Deterministic (no randomness): choice lists are fixed subsets of each node's layout options.
        """
        nodes: list[_Node] = []
        node_ids: list[int] = []
        base = 0.0
        links: dict[tuple[int, int, int, int], npt.NDArray[np.float64]] = {}
        gid0 = 0
        for comp in module.computations:
            insts = comp.instructions
            src: list[int] = [-1] * len(insts)  # configurable node whose output layout this node carries
            for i, ins in enumerate(insts):
                opshapes = [insts[o].shape for o in ins.operands]
                if ins.opcode in CONFIGURABLE and not ins.shape.is_tuple and (
                        ins.opcode == "reshape" or len(ins.operands) >= 2):
                    src[i] = len(nodes)
                    nodes.append(_build_node(ins, insts))
                    node_ids.append(gid0 + i)
                elif (ins.opcode in ELEMENTWISE and ins.operands
                      and insts[ins.operands[0]].shape.dims == ins.shape.dims and src[ins.operands[0]] >= 0):
                    src[i] = src[ins.operands[0]]
                    n = nodes[src[i]]
                    n.unary[_OUT] += np.asarray([_elementwise_ns(ins, opshapes, lay) for lay in n.layouts[_OUT]])
                else:
                    base += _default_op_ns(ins, opshapes)
                me = src[i] if ins.opcode in CONFIGURABLE else -1
                for k, o in enumerate(ins.operands):
                    if k != ins.operands.index(o):
                        continue  # an operand used twice demands once
                    shape = insts[o].shape
                    if shape.is_tuple:
                        continue
                    supplier = src[o]
                    if me >= 0 and nodes[me].kind != "reshape":
                        continue  # a convolution or dot reads its operands in any layout
                    if me >= 0:
                        tensor = k + 1 if k < len(nodes[me].shapes) - 1 else None
                        demand = (me, tensor) if tensor is not None else None
                    elif ins.opcode in ELEMENTWISE and src[i] >= 0:
                        if k == 0 or shape.dims != ins.shape.dims:
                            continue
                        demand = (src[i], _OUT)
                    elif ins.opcode in NO_DEMAND:
                        continue
                    else:
                        demand = None
                    cls._charge(nodes, links, shape, supplier, demand)
            root = comp.root_index
            if insts and src[root] >= 0 and not insts[root].shape.is_tuple:
                cls._charge(nodes, links, insts[root].shape, src[root], None)
            gid0 += len(insts)
        for n in nodes:
            _settle_default(n)
        _sweep(nodes, links, base)
        ids = np.asarray(node_ids, dtype=np.int64)
        problem = cls(nodes, ids, base, links)
        return cls(nodes, ids, base, links) if problem._settle_outputs() else problem

    def _settle_outputs(self, passes: int = 2) -> bool:
        """Let the compiler's default see the copies between decisions for output layouts: group by group (in
        node order, ``passes`` times), the default takes the other output layout (the rest of the node as the
        default) when the whole program then runs faster, every other group as settled so far. Changes the nodes'
        choice 0 in place; the problem must be built again when it returns true.

        The real search's common output layouts are its fastest (the real graph's configs that keep them all lie
        within 0.3% of its best): a default that misses such a copy would leave no config near the best.
        """
        current = np.zeros(self.num_choices.size, dtype=np.int64)
        best = float(self.runtime_ns(current[None])[0])
        changed = False
        for _ in range(passes):
            moved = False
            for j, lead in enumerate(self._leaders.tolist()):
                node = self._nodes[lead]
                now = int(current[lead])
                others = [sub[now] for sub in node.sub[1:]]
                alt = [c for c in range(1, node.num_choices) if node.sub[_OUT][c] != node.sub[_OUT][now]
                       and [sub[c] for sub in node.sub[1:]] == others]
                if not alt:
                    continue
                trial = current.copy()
                trial[self._group == j] = alt[0]
                runtime = float(self.runtime_ns(trial[None])[0])
                if runtime < best * (1 - 1e-9):
                    current, best, moved = trial, runtime, True
            changed |= moved
            if not moved:
                break
        for k in np.nonzero(current)[0].tolist():
            node = self._nodes[k]
            for sub in node.sub:
                sub[0] = sub[int(current[k])]
            node.own[0] = node.own[int(current[k])]
        return changed

    @staticmethod
    def _charge(nodes: list[_Node], links: dict[tuple[int, int, int, int], npt.NDArray[np.float64]],
                shape: Shape, supplier: int, demand: tuple[int, int] | None) -> None:
        """Add the copy cost of moving ``shape`` from the supplier's output layout to the demanded one."""
        row_major = default_layout(shape.rank)
        if supplier < 0 and demand is None:
            return
        if supplier < 0 or demand is None:
            n, t = (nodes[demand[0]], demand[1]) if demand is not None else (nodes[supplier], _OUT)
            n.unary[t] += np.asarray([
                0.0 if lay == row_major else physics.copy_ns(_phys_bytes(shape, row_major), _phys_bytes(shape, lay))
                for lay in n.layouts[t]])
            return
        if demand == (supplier, _OUT):
            return
        a, b = nodes[supplier], nodes[demand[0]]
        la, lb = a.layouts[_OUT], b.layouts[demand[1]]
        pa = np.asarray([_phys_bytes(shape, x) for x in la])
        pb = np.asarray([_phys_bytes(shape, y) for y in lb])
        same = np.asarray([[x == y for y in lb] for x in la], dtype=bool).reshape(len(la), len(lb))
        copy = (pa[:, None] + pb[None, :]) / physics.HBM_BYTES_PER_NS + physics.LAUNCH_NS  # physics.copy_ns
        tab = np.where(same, 0.0, copy)
        key = (supplier, _OUT, demand[0], demand[1])
        links[key] = links[key] + tab if key in links else tab

    def _check(self, choices: npt.ArrayLike) -> npt.NDArray[np.int64]:
        c = np.asarray(choices, dtype=np.int64)
        if c.ndim != 2 or c.shape[1] != self.num_choices.size:
            raise ValueError(f"choices must be [n, {self.num_choices.size}], got {c.shape}")
        if c.size and (c.min() < 0 or np.any(c >= self.num_choices)):
            raise ValueError("choice out of range")
        return c

    def config_features(self, choices: npt.ArrayLike) -> npt.NDArray[np.float32]:
        """Feature rows of configs.

        Args:
            choices: int ``[n, NC]`` choice per configurable node.

        Returns:
            float32 ``[n, NC, 18]``: chosen dims (output slots 0-5, input 6-11, kernel 12-17), -1 unused; all -1
            for choice 0.
        """
        c = self._check(choices)
        return self._feats[c + self._choice_off]

    def runtime_ns(self, choices: npt.ArrayLike, chunk: int = 2048) -> npt.NDArray[np.float64]:
        """Noiseless runtimes of configs, ns.

        Args:
            choices: int ``[n, NC]`` choice per configurable node.
            chunk: configs evaluated at once (bounds memory to about ``chunk * (NC + links) * 16`` bytes).

        Returns:
            float64 ``[n]``.
        """
        c = self._check(choices)
        out = np.full(c.shape[0], self.base_ns)
        for s in range(0, c.shape[0], chunk):
            block = c[s: s + chunk]
            total = self._own[block + self._choice_off].sum(axis=1)
            if self._link_a.size:
                r = self._rows[block[:, self._link_a] + self._row_off]
                q = self._cols[block[:, self._link_b] + self._col_off]
                total += self._link_table[r + q].sum(axis=1)
            out[s: s + chunk] += total
        return out

    def runtime_parts(self, choices: npt.ArrayLike) -> dict[str, npt.NDArray[np.float64]]:
        """The noiseless runtimes of configs split by the model's terms (they sum to :meth:`runtime_ns`).

        Args:
            choices: int ``[n, NC]`` choice per configurable node.

        Returns:
            float64 ``[n]`` each: ``base`` (every layout-independent op, the same for every config), ``own`` (the
            configurable nodes' own efficiency: a convolution's or dot's roofline, a reshape's copy), ``unary`` (each
            decision against fixed neighbours: copies to and from row-major ops, and the elementwise chains that
            work in its output layout), ``links`` (the copies between two decisions), ns.
        """
        c = self._check(choices)
        rows = c + self._choice_off
        parts = {"base": np.full(c.shape[0], self.base_ns), "own": self._own_only[rows].sum(axis=1),
                 "unary": (self._own - self._own_only)[rows].sum(axis=1)}
        parts["links"] = self.runtime_ns(c) - parts["base"] - parts["own"] - parts["unary"]
        return parts

    def choices_of(self, config_feat: npt.ArrayLike) -> npt.NDArray[np.int64]:
        """The choices behind config feature rows (the inverse of :meth:`config_features`).

        Rows are compared by their :func:`~competition.schema.row_hashes`, per node with a binary search over its
        choices' (sorted once per problem): a file's configs decode block by block
        (:meth:`competition.reader.LayoutGraph.iter_config_blocks`) in vectorised passes.

        Args:
            config_feat: ``[n, NC, 18]``, as a graph file's ``node_config_feat`` holds them.

        Returns:
            int64 ``[n, NC]``.

        Raises:
            ValueError: a row that is none of its node's choices (the file is not this problem's).
        """
        f = np.asarray(config_feat)
        nc = self.num_choices.size
        if f.ndim != 3 or f.shape[1:] != (nc, 18):
            raise ValueError(f"config features must be [n, {nc}, 18], got {f.shape}")
        if self._sorted_choices is None:
            hashes = row_hashes(self._feats)
            order = [np.argsort(hashes[o: o + m], kind="stable") for o, m in zip(self._choice_off, self.num_choices,
                                                                                   strict=True)]
            self._sorted_choices = [(hashes[o: o + m][i], i) for o, m, i in zip(self._choice_off, self.num_choices,
                                                                                 order, strict=True)]
        rows = row_hashes(f.reshape(-1, 18)).reshape(f.shape[:2])
        out = np.empty(f.shape[:2], dtype=np.int64)
        for k, (keys, order) in enumerate(self._sorted_choices):
            pos = np.minimum(np.searchsorted(keys, rows[:, k]), keys.size - 1)
            found = keys[pos] == rows[:, k]
            if not found.all():
                j = int(np.argmin(found))
                raise ValueError(f"config {j}: node {k}'s row {f[j, k].tolist()} is none of its "
                                 f"{int(self.num_choices[k])} choices")
            out[:, k] = order[pos]
        return out

    def _near_default_pools(self) -> list[tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]]:
        """Per group leader, its explicit choices whose layouts differ from the default's in at most one tensor:
        those that keep the default's output layout, and those that change it (each side falls back to the other
        when empty, and both to every explicit choice)."""
        pools = []
        for node in (self._nodes[k] for k in self._leaders):
            diff = sum((sub != sub[0]).astype(np.int64) for sub in node.sub)
            near = np.nonzero(diff <= 1)[0]
            near = near[near > 0]
            if not near.size:
                near = np.arange(1, node.num_choices)
            keeps = node.sub[_OUT][near] == node.sub[_OUT][0]
            keep, change = near[keeps], near[~keeps]
            pools.append((keep if keep.size else change, change if change.size else keep))
        return pools

    def _sample_near_default(self, n: int, rng: np.random.Generator, explore: float = 0.0) -> npt.NDArray[np.int32]:
        """``default`` search over the groups' leaders (see :meth:`sample_configs`)."""
        lead = self._leaders
        ng = lead.size
        out = np.zeros((n, ng), dtype=np.int32)
        k = rng.integers(1, min(DEFAULT_MAX_MUTATIONS, ng) + 1, size=n)
        picked = rng.integers(0, ng, size=(n, DEFAULT_MAX_MUTATIONS))
        mask = np.arange(DEFAULT_MAX_MUTATIONS)[None, :] < k[:, None]
        values = np.empty(picked.shape, dtype=np.int32)
        # A search that stays near the default changes no output layout; one that wanders does, in
        # DEFAULT_OUTPUT_FLIP of its steps.
        flip = rng.random(picked.shape) < (DEFAULT_OUTPUT_FLIP if explore > 0 else 0.0)
        u = rng.random(picked.shape)
        for j, (keep, change) in enumerate(self._near_default_pools()):
            at = picked == j
            pool_flip, pool_keep = change[(u[at] * change.size).astype(np.int64)], keep[(u[at] * keep.size).astype(
                np.int64)]
            values[at] = np.where(flip[at], pool_flip, pool_keep)
        if explore > 0:  # some steps go anywhere in the node's search space
            far = rng.random(picked.shape) < explore
            anywhere = 1 + (rng.random(picked.shape) * (self.num_choices[lead][picked] - 1)).astype(np.int32)
            values = np.where(far, anywhere, values)
        out[np.broadcast_to(np.arange(n)[:, None], picked.shape)[mask], picked[mask]] = values[mask]
        return out

    def _output_pools(self) -> list[tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]]:
        """Per group leader, its explicit choices that keep the default's output layout, and those that change it
        (all explicit choices on both sides when every one keeps it)."""
        pools = []
        for node in (self._nodes[k] for k in self._leaders):
            explicit = np.arange(1, node.num_choices)
            keeps = node.sub[_OUT][explicit] == node.sub[_OUT][0]
            keep, change = explicit[keeps], explicit[~keeps]
            pools.append((keep if keep.size else explicit, change if change.size else explicit))
        return pools

    def sample_configs(self, search: str, n: int, rng: np.random.Generator,
                       explore: float = 0.0, at_least: int = 1, flip: float = OUTPUT_FLIP) -> npt.NDArray[np.int32]:
        """Draw configs as a search would.

        A search ties nodes (:func:`_ties`): the nodes of a group take the same choice, as the real search ties
        its convolutions or dots. ``default``: each config differs from the default (choice 0) in 1 to
        :data:`DEFAULT_MAX_MUTATIONS` groups (drawn with replacement, so sometimes fewer), each set to a uniform
        choice among those that change at most one of its tensors' layouts (the output's only in a search that
        wanders, ``explore > 0``, and then with probability :data:`DEFAULT_OUTPUT_FLIP`), as a tuner stepping out
        from the default would; with ``explore``, each step goes to a uniform explicit choice instead with that
        probability (a search that wanders further, as most ``default`` searches of the world do:
        :data:`~competition.synthetic.searches.DEFAULT_EXPLORE`).
        ``random``: every group takes an explicit choice, uniform among those that keep the compiler's output
        layout, or with probability ``flip`` (times ``at_least``) among those that change it. The real alexnet
        graph's random search leaves a group's output layout about one time in 12 (:data:`OUTPUT_FLIP`) and draws
        its input and kernel layouts uniformly, so most configs hold only cheap output layouts (half within 0.3% of
        the best) and a few hold a costly one (the tail to 5x). Draws may repeat a config;
        :meth:`sample_distinct` keeps the distinct ones, as a search records them.

        Args:
            search: ``"default"`` or ``"random"``.
            n: number of configs.
            rng: the generator.
            explore: ``default`` only: the probability that a step leaves the near-default choices.
            at_least: ``random`` only: scales the chance that a group's output layout changes (a redraw of
                :meth:`sample_distinct` steps further out).
            flip: ``random`` only: the chance that a group leaves its compiler output layout.

        Returns:
            int32 ``[n, NC]``.
        """
        nc = self.num_choices.size
        if nc == 0 or n == 0:
            return np.zeros((n, nc), dtype=np.int32)
        if search == "default":
            return self._sample_near_default(n, rng, explore)[:, self._group]
        if search != "random":
            raise ValueError(f"unknown search {search!r}")
        groups = self._leaders.size
        flip_p = min(1.0, flip * max(at_least, 1))
        out = np.empty((n, groups), dtype=np.int32)
        for j, (keep, change) in enumerate(self._output_pools()):
            u = rng.random(n)
            flip = rng.random(n) < flip_p
            out[:, j] = np.where(flip, change[(u * change.size).astype(np.int64)],
                                 keep[(u * keep.size).astype(np.int64)])
        return out[:, self._group]

    def sample_distinct(self, search: str, n: int, rng: np.random.Generator,
                        rounds: int = 8, explore: float = 0.0, flip: float = OUTPUT_FLIP) -> npt.NDArray[np.int32]:
        """Up to ``n`` distinct configs, in the order ``search`` draws them (:meth:`sample_configs`): a search
        does not measure a config it has measured. Fewer come back when the configs the search reaches are fewer
        (a graph with few configurable nodes under the ``default`` search), after ``rounds`` redraws. A ``random``
        search whose one-node changes run out steps further out: redraw ``r`` (from 0) mutates at least ``r + 2``
        nodes, so the configs it adds are the nearest left, not a fresh draw's far tail.

        Returns:
            int32 ``[m, NC]``, ``m <= n``, no two rows equal.
        """
        rows = self.sample_configs(search, n, rng, explore, flip=flip)
        keys = row_hashes(rows)
        _, first = np.unique(keys, return_index=True)
        if first.size < n:  # (all distinct: keep the rows, no copy of a possibly large array)
            first.sort()
            rows, keys = rows[first], keys[first]
        for r in range(rounds):
            if rows.shape[0] >= n:
                break
            more = self.sample_configs(search, max(2 * (n - rows.shape[0]), 64), rng, explore, at_least=r + 2,
                                       flip=flip)
            mkeys = row_hashes(more)
            _, idx = np.unique(mkeys, return_index=True)
            idx = np.sort(idx)
            idx = idx[~np.isin(mkeys[idx], keys)]
            rows = np.concatenate([rows, more[idx]])
            keys = np.concatenate([keys, mkeys[idx]])
        return rows[:n]

