"""Synthetic HLO-like programs for the TpuGraphs world, and the fused tile kernels cut from them.

``xla`` programs mix model families, as the real ``xla`` collections do:

* ``resnet``: ResNet-like CNNs (convolution, batch norm spelled as elementwise ops, ``maximum`` as ReLU,
  ``reduce-window`` pooling, global average pool + dense head);
* ``inception``: Inception-like modules whose branches are joined by ``concatenate``;
* ``unet3d``: a 3-D UNet on 5-D tensors (rank-5 convolutions, instance norm through reshapes, transposed
  convolutions with base dilation, skip concatenations);
* ``bert``: BERT-like encoders (embedding ``gather``, ``dot``, ``reshape``, ``transpose``, softmax as
  exponential / reduce / divide, layer norm, GELU);
* ``dlrm`` / ``mlp``: recommender and plain MLP graphs (``gather`` embeddings, ``concatenate``, a batched ``dot``
  interaction, dense layers).

Each comes in inference variants (some running several batches in a ``while`` loop, results leaving through
``outfeed``) and training variants. A training step (:func:`_train_step`) mirrors the forward pass with its gradients
(convolutions / dots / select-and-scatter / scatter, ReLU and dropout gradients as compare + select), all-reduces the
weight gradients across devices, may clip them by their global norm, and updates every weight with momentum, LARS,
AdamW or LAMB (LARS and LAMB guard their trust ratios by compare / select), at a learning rate chosen by a warm-up /
decay ``conditional``; an f16 step scales its loss dynamically (``is-finite`` checks, a ``select`` per update, a
second conditional for the scale). The step sits in a ``while`` loop whose body and condition are separate
computations, so the real ``node_splits`` rule (cut after cluster / while / cond computations) gives 3 to 7 segments.
Equal scalar constants and their broadcasts are one node per computation, as XLA's CSE leaves them.

``nlp`` programs are one transformer family: real TF-Hub architectures (:data:`NLP_MODELS`, 2 to 24 layers, hidden
128 to 1024) at several batch sizes, trained or run, named as the real files are, so they resemble each other far
more than ``xla`` programs do.

``xla`` node counts are steered to a target by fitting the count as linear in the number of layers / blocks; an
``nlp`` program is the real architecture whose node count is nearest the target.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace

import numpy as np

from competition.hlo.ir import Computation, ConvDims, DotDims, Instruction, Module, Shape, Window

_Back = Callable[[int], int]

# Opcodes a tile kernel may fuse below its root: cheap data movement and elementwise math.
_FUSIBLE = frozenset({
    "add", "subtract", "multiply", "divide", "maximum", "minimum", "exponential", "rsqrt", "tanh", "negate",
    "log", "sqrt", "abs", "logistic", "convert", "compare", "select", "broadcast", "constant", "reshape",
    "transpose", "bitcast", "copy", "slice", "pad", "iota", "power", "clamp", "concatenate",
})
_ELEMENTWISE_ROOTS = frozenset({
    "add", "subtract", "multiply", "divide", "maximum", "minimum", "exponential", "rsqrt", "tanh", "select",
    "convert", "logistic", "negate",
})


# The initial value of a reduction of each kind (what its constant operand holds).
_INIT = {"add": "zero", "maximum": "lowest", "minimum": "highest", "and": "true", "or": "false"}


def _prod(dims: tuple[int, ...] | list[int]) -> int:
    out = 1
    for d in dims:
        out *= int(d)
    return out


@dataclass
class _Program:
    """Module-wide state: the name, the random stream, and the helper computations created on demand."""

    name: str
    rng: np.random.Generator
    subs: list[Computation] = field(default_factory=list)
    reducers: dict[tuple[str, str], str] = field(default_factory=dict)
    counter: int = 0

    def uid(self) -> int:
        self.counter += 1
        return self.counter

    def reducer(self, kind: str, dtype: str) -> str:
        """Name of a 3-node scalar ``kind`` (add / maximum / ...) computation over ``dtype``, created once."""
        key = (kind, dtype)
        if key not in self.reducers:
            name = f"{kind}_{dtype.upper()}.{self.uid()}" if kind != "ge" else f"ge_{dtype.upper()}.{self.uid()}"
            comp = Computation(name)
            scalar = Shape(dtype)
            comp.add("parameter", scalar, name="lhs", parameter_number=0)
            comp.add("parameter", scalar, name="rhs", parameter_number=1)
            if kind == "ge":
                comp.add("compare", Shape("pred"), (0, 1), name="cmp")
            else:
                comp.add(kind, scalar, (0, 1), name=kind)
            self.subs.append(comp)
            self.reducers[key] = name
        return self.reducers[key]


class _Emitter:
    """Appends instructions to one computation, deriving output shapes from operands."""

    def __init__(self, prog: _Program, comp: Computation) -> None:
        self.prog = prog
        self.comp = comp
        self.nparam = 0
        self.consts: dict[tuple[str, str], int] = {}
        self.cse: dict[tuple[str, tuple[int, ...], str], int] = {}
        self.splats: dict[tuple[int, tuple[int, ...]], int] = {}

    def sh(self, x: int) -> Shape:
        return self.comp.instructions[x].shape

    def op(self, opcode: str, shape: Shape, operands: tuple[int, ...] | list[int] = (), **attrs: object) -> int:
        return self.comp.add(opcode, shape, tuple(operands), name=f"{opcode}.{self.prog.uid()}", **attrs)

    def param(self, shape: Shape) -> int:
        self.nparam += 1
        return self.op("parameter", shape, parameter_number=self.nparam - 1)

    def const(self, dtype: str, value: str = "zero") -> int:
        """The scalar constant ``value`` (a name: ``zero``, ``one``, ``eps``...) of ``dtype``: one node per value and
        dtype in the computation, because XLA's common-subexpression pass merges equal constants."""
        key = (dtype, value)
        if key not in self.consts:
            self.consts[key] = self.op("constant", Shape(dtype))
        return self.consts[key]

    def full(self, dtype: str, dims: tuple[int, ...], value: str = "zero") -> int:
        """The constant ``value`` broadcast to ``dims`` (how XLA spells ``zeros`` / ``eps`` tensors); equal
        broadcasts are merged like equal constants."""
        key = (dtype, dims, value)
        if key not in self.cse:
            c = self.const(dtype, value)
            self.cse[key] = self.op("broadcast", Shape(dtype, dims), (c,), dimensions=()) if dims else c
        return self.cse[key]

    def splat(self, x: int, dims: tuple[int, ...]) -> int:
        """Scalar ``x`` broadcast to ``dims``, once per shape."""
        key = (x, dims)
        if key not in self.splats:
            self.splats[key] = self.bcast(x, dims, ()) if dims else x
        return self.splats[key]

    def ew(self, opcode: str, *xs: int) -> int:
        s = self.sh(xs[0])
        if opcode == "compare":
            s = Shape("pred", s.dims)
        return self.op(opcode, Shape(s.element_type, s.dims) if opcode != "compare" else s, xs)

    def convert(self, x: int, dtype: str) -> int:
        return self.op("convert", Shape(dtype, self.sh(x).dims), (x,))

    def bcast(self, x: int, dims: tuple[int, ...], mapping: tuple[int, ...]) -> int:
        return self.op("broadcast", Shape(self.sh(x).element_type, dims), (x,), dimensions=mapping)

    def reshape(self, x: int, dims: tuple[int, ...]) -> int:
        s = self.sh(x)
        if _prod(dims) != s.num_elements:
            raise ValueError(f"reshape {s.dims} -> {dims} changes the element count")
        return self.op("reshape", Shape(s.element_type, tuple(dims)), (x,))

    def transpose(self, x: int, perm: tuple[int, ...]) -> int:
        s = self.sh(x)
        return self.op("transpose", Shape(s.element_type, tuple(s.dims[p] for p in perm)), (x,), dimensions=perm)

    def reduce(self, x: int, axes: tuple[int, ...], kind: str = "add") -> int:
        s = self.sh(x)
        init = self.const(s.element_type, _INIT[kind])
        out = tuple(d for k, d in enumerate(s.dims) if k not in axes)
        return self.op("reduce", Shape(s.element_type, out), (x, init), dimensions=tuple(axes),
                       called=(self.prog.reducer(kind, s.element_type),))

    def dot(self, x: int, y: int, lc: tuple[int, ...], rc: tuple[int, ...], lb: tuple[int, ...] = (),
            rb: tuple[int, ...] = ()) -> int:
        a, b = self.sh(x), self.sh(y)
        for i, j in zip(lc, rc, strict=True):
            if a.dims[i] != b.dims[j]:
                raise ValueError(f"dot contracts {a.dims}[{i}] with {b.dims}[{j}]")
        out = [a.dims[i] for i in lb]
        out += [d for k, d in enumerate(a.dims) if k not in lc and k not in lb]
        out += [d for k, d in enumerate(b.dims) if k not in rc and k not in rb]
        return self.op("dot", Shape(a.element_type, tuple(out)), (x, y), dot_dims=DotDims(lc, rc, lb, rb))

    def concat(self, xs: list[int], dim: int) -> int:
        s = self.sh(xs[0])
        dims = list(s.dims)
        dims[dim] = sum(self.sh(x).dims[dim] for x in xs)
        return self.op("concatenate", Shape(s.element_type, tuple(dims)), xs, dimensions=(dim,))

    def slice(self, x: int, starts: tuple[int, ...], limits: tuple[int, ...]) -> int:
        s = self.sh(x)
        dims = tuple(hi - lo for lo, hi in zip(starts, limits, strict=True))
        return self.op("slice", Shape(s.element_type, dims), (x,), slice_starts=starts, slice_limits=limits,
                       slice_strides=(1,) * len(dims))

    def pad(self, x: int, low: tuple[int, ...], high: tuple[int, ...]) -> int:
        s = self.sh(x)
        value = self.const(s.element_type)
        dims = tuple(d + lo + hi for d, lo, hi in zip(s.dims, low, high, strict=True))
        return self.op("pad", Shape(s.element_type, dims), (x, value), pad_low=low, pad_high=high,
                       pad_interior=(0,) * len(dims))

    def tuple_(self, xs: list[int]) -> int:
        return self.op("tuple", Shape("tuple", tuple_shapes=tuple(self.sh(x) for x in xs)), xs)

    def gte(self, t: int, k: int) -> int:
        return self.op("get-tuple-element", self.sh(t).tuple_shapes[k], (t,))

    def window_op(self, x: int, window: Window, kind: str) -> int:
        s = self.sh(x)
        init = self.const(s.element_type, _INIT[kind])
        out = tuple(
            (d + lo + hi - k) // st + 1
            for d, k, st, lo, hi in zip(s.dims, window.size, window.stride, window.pad_low, window.pad_high,
                                        strict=True)
        )
        return self.op("reduce-window", Shape(s.element_type, out), (x, init), window=window,
                       called=(self.prog.reducer(kind, s.element_type),))


class _Net:
    """Layers with a gradient tape: each forward layer pushes a closure that emits its backward ops."""

    def __init__(self, prog: _Program, e: _Emitter, train: bool, dtype: str, master: str) -> None:
        self.prog = prog
        self.e = e
        self.train = train
        self.dt = dtype
        self.master = master  # weights are stored in this type and converted when it differs from dt
        self.tape: list[_Back] = []
        self.wgrads: list[tuple[int, int]] = []
        self._last_param = -1  # the parameter behind the latest weight() (before any convert)
        self.alt_layout_p = float(prog.rng.uniform(0.0, 0.35))
        # Cross-layer weight sharing (ALBERT): the first layer's weights are recorded, later layers replay them.
        self.shared: list[tuple[int, int]] | None = None
        self.replay = False
        self.share_pos = 0

    # -- plumbing ------------------------------------------------------------------------------------------
    def push(self, back: _Back) -> None:
        if self.train:
            self.tape.append(back)

    def capture(self, fn: Callable[[], int]) -> tuple[int, list[_Back]]:
        saved, self.tape = self.tape, []
        try:
            y = fn()
            return y, self.tape
        finally:
            self.tape = saved

    def back(self, tape: list[_Back], g: int) -> int:
        for b in reversed(tape):
            g = b(g)
        return g

    def weight(self, dims: tuple[int, ...]) -> int:
        if self.shared is not None and self.replay:
            p, y = self.shared[self.share_pos]
            self.share_pos += 1
            self._last_param = p
            return y
        p = self.e.param(Shape(self.master, dims))
        self._last_param = p
        y = self.e.convert(p, self.dt) if self.master != self.dt else p
        if self.shared is not None:
            self.shared.append((p, y))
        return y

    def grad(self, param: int, g: int) -> None:
        self.wgrads.append((param, g))

    def vec_bcast(self, v: int, dims: tuple[int, ...], axis: int) -> int:
        return self.e.bcast(v, dims, (axis,))

    # -- layers --------------------------------------------------------------------------------------------
    def conv(self, x: int, cout: int, k: int, stride: int = 1, nchw: bool = False) -> int:
        e = self.e
        s = e.sh(x)
        r = s.rank
        ns = r - 2
        if nchw:
            feat, spatial = 1, tuple(range(2, r))
            cin = s.dims[1]
            wdims = (cout, cin) + (k,) * ns
            cd = ConvDims(0, 1, spatial, 1, 0, tuple(range(2, r)), 0, 1, spatial)
        else:
            feat, spatial = r - 1, tuple(range(1, r - 1))
            cin = s.dims[-1]
            wdims = (k,) * ns + (cin, cout)
            cd = ConvDims(0, r - 1, spatial, ns, ns + 1, tuple(range(ns)), 0, r - 1, spatial)
        w = self.weight(wdims)
        wparam = self._last_param
        outs, plo, phi = [], [], []
        for a in spatial:
            n_in = s.dims[a]
            n_out = -(-n_in // stride)
            total = max((n_out - 1) * stride + k - n_in, 0)
            outs.append(n_out)
            plo.append(total // 2)
            phi.append(total - total // 2)
        dims = list(s.dims)
        dims[feat] = cout
        for a, n_out in zip(spatial, outs, strict=True):
            dims[a] = n_out
        layout = None
        if self.prog.rng.random() < self.alt_layout_p:
            layout = tuple(int(v) for v in self.prog.rng.permutation(r))
        window = Window.simple((k,) * ns, (stride,) * ns, plo, phi)
        y = e.op("convolution", Shape(self.dt, tuple(dims), layout), (x, w), window=window, conv_dims=cd)

        def back(g: int) -> int:
            # Input gradient: the kernel flipped (window reversal) and the output dilated by the stride.
            win = Window(window.size, (1,) * ns, tuple(k - 1 - p for p in plo), tuple(k - 1 - p for p in phi),
                         (1,) * ns, (stride,) * ns, (True,) * ns)
            gcd = replace(cd, kernel_input_feature=cd.kernel_output_feature,
                          kernel_output_feature=cd.kernel_input_feature)
            dx = e.op("convolution", Shape(self.dt, s.dims), (g, w), window=win, conv_dims=gcd)
            # Weight gradient: batch and feature swap roles, the output gradient is the "kernel".
            wcd = ConvDims(cd.input_feature, cd.input_batch, cd.input_spatial, cd.output_batch, cd.output_feature,
                           cd.output_spatial, cd.kernel_input_feature, cd.kernel_output_feature, cd.kernel_spatial)
            wwin = Window(tuple(outs), (1,) * ns, tuple(plo), tuple(phi), (stride,) * ns, (1,) * ns,
                          (False,) * ns)
            dw = e.op("convolution", Shape(self.dt, wdims), (x, g), window=wwin, conv_dims=wcd)
            self.grad(wparam, dw)
            return dx

        self.push(back)
        return y

    def batchnorm(self, x: int, feat: int) -> int:
        e = self.e
        s = e.sh(x)
        c = s.dims[feat]
        axes = tuple(a for a in range(s.rank) if a != feat)
        gamma = self.weight((c,))
        gparam = self._last_param
        beta = self.weight((c,))
        bparam = self._last_param
        if self.train:
            count = e.full(self.dt, (c,), f"count:{_prod([s.dims[a] for a in axes])}")
            mean = e.ew("divide", e.reduce(x, axes), count)
            cen = e.ew("subtract", x, self.vec_bcast(mean, s.dims, feat))
            var = e.ew("divide", e.reduce(e.ew("multiply", cen, cen), axes), count)
        else:
            mean, var = e.param(Shape(self.dt, (c,))), e.param(Shape(self.dt, (c,)))
            cen = e.ew("subtract", x, self.vec_bcast(mean, s.dims, feat))
        inv = e.ew("rsqrt", e.ew("add", var, e.full(self.dt, (c,), "eps")))
        scale = e.ew("multiply", inv, gamma)
        y = e.ew("add", e.ew("multiply", cen, self.vec_bcast(scale, s.dims, feat)),
                 self.vec_bcast(beta, s.dims, feat))

        def back(g: int) -> int:
            dbeta = e.reduce(g, axes)
            dgamma = e.reduce(e.ew("multiply", g, cen), axes)
            t = e.ew("multiply", g, self.vec_bcast(scale, s.dims, feat))
            corr = e.ew("multiply", dgamma, e.ew("multiply", inv, inv))
            t = e.ew("subtract", t, e.ew("multiply", cen, self.vec_bcast(corr, s.dims, feat)))
            dx = e.ew("subtract", t, self.vec_bcast(e.ew("multiply", dbeta, scale), s.dims, feat))
            self.grad(gparam, dgamma)
            self.grad(bparam, dbeta)
            return dx

        self.push(back)
        return y

    def relu(self, x: int) -> int:
        e = self.e
        dims = e.sh(x).dims
        y = e.ew("maximum", x, e.full(self.dt, dims))

        def back(g: int) -> int:
            mask = e.ew("compare", y, e.full(self.dt, dims))
            return e.op("select", e.sh(g), (mask, g, e.full(self.dt, dims)))

        self.push(back)
        return y

    def maxpool(self, x: int, k: int, stride: int, spatial: tuple[int, ...]) -> int:
        e = self.e
        s = e.sh(x)
        size = tuple(k if a in spatial else 1 for a in range(s.rank))
        st = tuple(stride if a in spatial else 1 for a in range(s.rank))
        lo = tuple((k - 1) // 2 if a in spatial else 0 for a in range(s.rank))
        hi = tuple(k // 2 if a in spatial else 0 for a in range(s.rank))
        window = Window.simple(size, st, lo, hi)
        y = e.window_op(x, window, "maximum")

        def back(g: int) -> int:
            init = e.const(self.dt)
            return e.op("select-and-scatter", s, (x, g, init), window=window,
                        called=(self.prog.reducer("ge", self.dt), self.prog.reducer("add", self.dt)))

        self.push(back)
        return y

    def global_pool(self, x: int, spatial: tuple[int, ...]) -> int:
        e = self.e
        s = e.sh(x)
        summed = e.reduce(x, spatial)
        count = f"count:{_prod([s.dims[a] for a in spatial])}"
        y = e.ew("divide", summed, e.full(self.dt, e.sh(summed).dims, count))
        keep = tuple(a for a in range(s.rank) if a not in spatial)

        def back(g: int) -> int:
            g = e.ew("divide", g, e.full(self.dt, e.sh(g).dims, count))
            return e.bcast(g, s.dims, keep)

        self.push(back)
        return y

    def dense(self, x: int, out: int, bias: bool = True) -> int:
        e = self.e
        s = e.sh(x)
        r = s.rank
        w = self.weight((s.dims[-1], out))
        wparam = self._last_param
        y = e.dot(x, w, (r - 1,), (0,))
        if bias:
            b = self.weight((out,))
            y = e.ew("add", y, e.bcast(b, e.sh(y).dims, (r - 1,)))

        def back(g: int) -> int:
            lead = tuple(range(r - 1))
            if bias:
                e.reduce(g, lead)
            dw = e.dot(x, g, lead, lead)
            self.grad(wparam, dw)
            return e.dot(g, w, (r - 1,), (1,))

        self.push(back)
        return y

    def einsum_dense(self, x: int, heads: int, dh: int) -> int:
        """``[b, s, h] x [h, heads, dh] -> [b, s, heads, dh]`` plus bias."""
        e = self.e
        b, s, h = e.sh(x).dims
        w = self.weight((h, heads, dh))
        wparam = self._last_param
        bias = self.weight((heads, dh))
        y = e.dot(x, w, (2,), (0,))
        y = e.ew("add", y, e.bcast(bias, (b, s, heads, dh), (2, 3)))

        def back(g: int) -> int:
            e.reduce(g, (0, 1))
            self.grad(wparam, e.dot(x, g, (0, 1), (0, 1)))
            return e.dot(g, w, (2, 3), (1, 2))

        self.push(back)
        return y

    def slice(self, x: int, starts: tuple[int, ...], limits: tuple[int, ...]) -> int:
        e = self.e
        full = e.sh(x).dims
        y = e.slice(x, starts, limits)
        # The gradient of a slice is the output gradient padded back to the input's extent.
        self.push(lambda g: e.pad(g, starts, tuple(d - lim for d, lim in zip(full, limits, strict=True))))
        return y

    def reshape(self, x: int, dims: tuple[int, ...]) -> int:
        e = self.e
        src = e.sh(x).dims
        y = e.reshape(x, dims)
        self.push(lambda g: e.reshape(g, src))
        return y

    def transpose(self, x: int, perm: tuple[int, ...]) -> int:
        e = self.e
        inv = tuple(int(v) for v in np.argsort(perm))
        y = e.transpose(x, perm)
        self.push(lambda g: e.transpose(g, inv))
        return y

    def layernorm(self, x: int) -> int:
        e = self.e
        s = e.sh(x)
        r = s.rank
        lead = tuple(range(r - 1))
        h = s.dims[-1]
        gamma = self.weight((h,))
        gparam = self._last_param
        beta = self.weight((h,))
        bparam = self._last_param
        red = s.dims[:-1]
        count = f"count:{h}"
        mean = e.ew("divide", e.reduce(x, (r - 1,)), e.full(self.dt, red, count))
        cen = e.ew("subtract", x, e.bcast(mean, s.dims, lead))
        var = e.ew("divide", e.reduce(e.ew("multiply", cen, cen), (r - 1,)), e.full(self.dt, red, count))
        inv = e.ew("rsqrt", e.ew("add", var, e.full(self.dt, red, "eps")))
        xhat = e.ew("multiply", cen, e.bcast(inv, s.dims, lead))
        y = e.ew("add", e.ew("multiply", xhat, e.bcast(gamma, s.dims, (r - 1,))), e.bcast(beta, s.dims, (r - 1,)))

        def back(g: int) -> int:
            self.grad(bparam, e.reduce(g, lead))
            self.grad(gparam, e.reduce(e.ew("multiply", g, xhat), lead))
            gx = e.ew("multiply", g, e.bcast(gamma, s.dims, (r - 1,)))
            m1 = e.bcast(e.ew("divide", e.reduce(gx, (r - 1,)), e.full(self.dt, red, count)), s.dims, lead)
            m2 = e.bcast(e.ew("divide", e.reduce(e.ew("multiply", gx, xhat), (r - 1,)),
                              e.full(self.dt, red, count)), s.dims, lead)
            t = e.ew("subtract", e.ew("subtract", gx, m1), e.ew("multiply", xhat, m2))
            return e.ew("multiply", t, e.bcast(inv, s.dims, lead))

        self.push(back)
        return y

    def gelu(self, x: int) -> int:
        e = self.e
        dims = e.sh(x).dims
        cube = e.ew("multiply", e.ew("multiply", x, x), x)
        inner = e.ew("multiply", e.ew("add", x, e.ew("multiply", cube, e.full(self.dt, dims, "gelu_cubic"))),
                     e.full(self.dt, dims, "sqrt_2_over_pi"))
        t = e.ew("tanh", inner)
        y = e.ew("multiply", e.ew("multiply", x, e.full(self.dt, dims, "half")),
                 e.ew("add", t, e.full(self.dt, dims, "one")))

        def back(g: int) -> int:
            dt = e.ew("subtract", e.full(self.dt, dims, "one"), e.ew("multiply", t, t))
            return e.ew("multiply", g, e.ew("add", e.ew("multiply", x, dt), t))

        self.push(back)
        return y

    def softmax(self, x: int) -> int:
        e = self.e
        s = e.sh(x)
        r = s.rank
        lead = tuple(range(r - 1))
        mx = e.reduce(x, (r - 1,), "maximum")
        ex = e.ew("exponential", e.ew("subtract", x, e.bcast(mx, s.dims, lead)))
        y = e.ew("divide", ex, e.bcast(e.reduce(ex, (r - 1,)), s.dims, lead))

        def back(g: int) -> int:
            gy = e.ew("multiply", g, y)
            return e.ew("subtract", gy, e.ew("multiply", y, e.bcast(e.reduce(gy, (r - 1,)), s.dims, lead)))

        self.push(back)
        return y

    def dropout(self, x: int) -> int:
        if not self.train:
            return x
        e = self.e
        dims = e.sh(x).dims
        rnd = e.op("rng", Shape(self.dt, dims), (e.const(self.dt), e.const(self.dt, "one")))
        keep = e.ew("compare", rnd, e.full(self.dt, dims, "dropout_rate"))
        y = e.op("select", Shape(self.dt, dims), (keep, e.ew("multiply", x, e.full(self.dt, dims, "inv_keep")),
                                                  e.full(self.dt, dims)))
        self.push(lambda g: e.op("select", Shape(self.dt, dims), (keep, g, e.full(self.dt, dims))))
        return y

    def add_residual(self, main: Callable[[], int], skip: Callable[[], int] | None, x: int) -> int:
        e = self.e
        y_main, t_main = self.capture(main)
        if skip is None:
            y_skip, t_skip = x, []
        else:
            y_skip, t_skip = self.capture(skip)
        y = e.ew("add", y_main, y_skip)
        self.push(lambda g: e.ew("add", self.back(t_main, g), self.back(t_skip, g)))
        return y

    def head_mix(self, x: int) -> int:
        """Talking-heads attention: mix ``[b, heads, s, s]`` scores across heads with a ``[heads, heads]`` weight."""
        e = self.e
        w = self.weight((e.sh(x).dims[1],) * 2)
        wparam = self._last_param
        y = e.transpose(e.dot(x, w, (1,), (0,)), (0, 3, 1, 2))

        def back(g: int) -> int:
            gt = e.transpose(g, (0, 2, 3, 1))
            self.grad(wparam, e.dot(x, gt, (0, 2, 3), (0, 1, 2)))
            return e.transpose(e.dot(gt, w, (3,), (1,)), (0, 3, 1, 2))

        self.push(back)
        return y

    def attention(self, x: int, heads: int, mask: int, talking: bool = False) -> int:
        e = self.e
        b, s, h = e.sh(x).dims
        dh = h // heads

        def proj() -> int:
            # Einsum-style projection straight to [b, s, heads, dh], as TF2 BERT lowers it (no reshape).
            return self.transpose(self.einsum_dense(x, heads, dh), (0, 2, 1, 3))

        q, tq = self.capture(proj)
        k, tk = self.capture(proj)
        v, tv = self.capture(proj)
        scores = e.dot(q, k, (3,), (3,), (0, 1), (0, 1))
        scores = e.ew("multiply", scores, e.full(self.dt, (b, heads, s, s), "inv_sqrt_dh"))
        scores = e.ew("add", scores, e.bcast(mask, (b, heads, s, s), (0, 3)))
        if talking:
            p, tp = self.capture(lambda: self.head_mix(self.dropout(self.softmax(self.head_mix(scores)))))
        else:
            p, tp = self.capture(lambda: self.dropout(self.softmax(scores)))
        ctx = e.dot(p, v, (3,), (2,), (0, 1), (0, 1))

        def core_back(g: int) -> int:
            gp = e.dot(g, v, (3,), (3,), (0, 1), (0, 1))
            gv = e.dot(p, g, (2,), (2,), (0, 1), (0, 1))
            gs = self.back(tp, gp)
            gq = e.dot(gs, k, (3,), (2,), (0, 1), (0, 1))
            gk = e.dot(gs, q, (2,), (2,), (0, 1), (0, 1))
            return e.ew("add", e.ew("add", self.back(tq, gq), self.back(tk, gk)), self.back(tv, gv))

        self.push(core_back)
        y = self.reshape(self.transpose(ctx, (0, 2, 1, 3)), (b, s, h))
        return self.dense(y, h)


# ----------------------------------------------------------------------------------------------------------------
# Families. Each takes (net, cfg, layers) and returns the network output; cfg holds the drawn hyper-parameters.
# ----------------------------------------------------------------------------------------------------------------


def _resnet(net: _Net, cfg: dict, layers: int) -> int:
    e = net.e
    nchw = cfg["nchw"]
    b, hw = cfg["batch"], cfg["image"]
    # Images arrive flattened from the input pipeline and are reshaped on device.
    flat = e.param(Shape(net.dt, (b, hw * hw * 3)))
    x = e.reshape(flat, (b, 3, hw, hw) if nchw else (b, hw, hw, 3))
    feat = 1 if nchw else 3
    spatial = (2, 3) if nchw else (1, 2)
    width = cfg["width"]
    x = net.relu(net.batchnorm(net.conv(x, width, 7, 2, nchw), feat))
    x = net.maxpool(x, 3, 2, spatial)
    # One block per stage at least; further blocks spread 3:4:6:3 as in ResNet-50.
    cum = np.round((layers - 1) * np.cumsum([0, 3, 4, 6, 3]) / 16.0).astype(int)
    stages = [1 + int(v) for v in np.diff(cum)]
    cin = width
    for si, nblocks in enumerate(stages):
        cout = width * 4 * 2**si
        for bi in range(nblocks):
            stride = 2 if (bi == 0 and si > 0) else 1
            mid = cout // 4
            xin = x

            def main(xin: int = xin, stride: int = stride, mid: int = mid, cout: int = cout) -> int:
                y = net.relu(net.batchnorm(net.conv(xin, mid, 1, 1, nchw), feat))
                y = net.relu(net.batchnorm(net.conv(y, mid, 3, stride, nchw), feat))
                return net.batchnorm(net.conv(y, cout, 1, 1, nchw), feat)

            skip = None
            if bi == 0:
                def skip(xin: int = xin, stride: int = stride, cout: int = cout) -> int:
                    return net.batchnorm(net.conv(xin, cout, 1, stride, nchw), feat)
            x = net.relu(net.add_residual(main, skip, xin))
            cin = cout
    x = net.global_pool(x, spatial)
    x = net.reshape(x, (b, cin))
    return net.dense(x, cfg["classes"])


def _inception(net: _Net, cfg: dict, layers: int) -> int:
    e = net.e
    b, hw = cfg["batch"], cfg["image"]
    x = e.reshape(e.param(Shape(net.dt, (b, hw * hw * 3))), (b, hw, hw, 3))
    x = net.relu(net.batchnorm(net.conv(x, 32, 3, 2), 3))
    x = net.relu(net.batchnorm(net.conv(x, 64, 3, 1), 3))
    x = net.maxpool(x, 3, 2, (1, 2))
    x = net.relu(net.batchnorm(net.conv(x, 80, 1, 1), 3))
    x = net.relu(net.batchnorm(net.conv(x, 192, 3, 1), 3))
    x = net.maxpool(x, 3, 2, (1, 2))
    # At least two modules, so that even the smallest variant carries a couple of dozen convolutions.
    for li in range(layers + 1):
        reduction = li % 4 == 3 and e.sh(x).dims[1] > 4
        stride = 2 if reduction else 1
        xin = x
        c = e.sh(x).dims[3]

        def cbr(y: int, cout: int, k: int, s: int = 1) -> int:
            return net.relu(net.batchnorm(net.conv(y, cout, k, s), 3))

        branches = [
            lambda xin=xin, s=stride: cbr(xin, 64, 1, s),
            lambda xin=xin, s=stride: cbr(cbr(xin, 48, 1), 64, 3, s),
            lambda xin=xin, s=stride: cbr(cbr(cbr(xin, 64, 1), 96, 3), 96, 3, s),
        ]
        if not reduction:
            branches.append(lambda xin=xin, c=c: cbr(net.maxpool(xin, 3, 1, (1, 2)), max(32, c // 8), 1))
        outs, tapes = zip(*(net.capture(f) for f in branches), strict=True)
        x = e.concat(list(outs), 3)
        widths = [e.sh(o).dims[3] for o in outs]
        shape = e.sh(x)

        def back(g: int, tapes=tapes, widths=widths, shape=shape) -> int:
            start, acc = 0, None
            for t, w in zip(tapes, widths, strict=True):
                lim = list(shape.dims)
                lim[3] = start + w
                part = e.slice(g, (0, 0, 0, start), tuple(lim))
                gi = net.back(t, part)
                acc = gi if acc is None else e.ew("add", acc, gi)
                start += w
            return acc

        net.push(back)
    x = net.global_pool(x, (1, 2))
    x = net.dropout(x)
    return net.dense(x, cfg["classes"])


def _unet3d(net: _Net, cfg: dict, layers: int) -> int:
    e = net.e
    b, d, c0 = cfg["batch"], cfg["image"], cfg["width"]
    x = e.param(Shape(net.dt, (b, d, d, d, 1)))
    levels = cfg["levels"]
    extra = layers - 1

    nblocks = [0]

    def block(y: int, cout: int) -> int:
        y = net.conv(y, cout, 3, 1)
        n, dd, hh, ww, cc = net.e.sh(y).dims
        nblocks[0] += 1
        if nblocks[0] % 4 == 1:
            # Instance norm computed on a flattened view, as some frameworks lower it.
            flat = net.reshape(y, (n, dd * hh * ww, cc))
            flat = net.layernorm(net.transpose(flat, (0, 2, 1)))
            y = net.reshape(net.transpose(flat, (0, 2, 1)), (n, dd, hh, ww, cc))
        else:
            y = net.batchnorm(y, 4)
        return net.relu(y)

    skips = []
    pending: dict[int, int] = {}
    c = c0
    for lvl in range(levels):
        x = block(block(x, c), c)
        skips.append(x)
        # The skip gradient is deposited by the decoder's backward closure, which runs before this one.
        net.push(lambda g, lvl=lvl: e.ew("add", g, pending[lvl]) if lvl in pending else g)
        x = net.maxpool(x, 2, 2, (1, 2, 3))
        c *= 2
    for _ in range(extra + 1):
        x = block(x, c)
    for lvl in reversed(range(levels)):
        c //= 2
        # Transposed convolution: stride-2 upsampling expressed as a convolution with base dilation 2.
        s = e.sh(x)
        w = net.weight((2, 2, 2, s.dims[4], c))
        wparam = net._last_param
        dims = (s.dims[0], s.dims[1] * 2, s.dims[2] * 2, s.dims[3] * 2, c)
        win = Window((2, 2, 2), (1, 1, 1), (1, 1, 1), (0, 0, 0), (1, 1, 1), (2, 2, 2), (False,) * 3)
        cd = ConvDims(0, 4, (1, 2, 3), 3, 4, (0, 1, 2), 0, 4, (1, 2, 3))
        xin = x
        up = e.op("convolution", Shape(net.dt, dims), (x, w), window=win, conv_dims=cd)
        skip = skips[lvl]
        sk = e.sh(skip).dims
        cropped = sk[1:4] != dims[1:4]
        if cropped:
            up = e.slice(up, (0, 0, 0, 0, 0), sk[:4] + (c,))
        x = e.concat([up, skip], 4)

        def back(g: int, lvl: int = lvl, xin: int = xin, w: int = w, wparam: int = wparam, dims=dims, sk=sk,
                 cropped: bool = cropped, c: int = c, cd: ConvDims = cd) -> int:
            gs = e.sh(g).dims
            g_up = e.slice(g, (0,) * 5, gs[:4] + (c,))
            pending[lvl] = e.slice(g, (0, 0, 0, 0, c), gs)
            if cropped:
                g_up = e.pad(g_up, (0,) * 5, tuple(a - b for a, b in zip(dims, e.sh(g_up).dims, strict=True)))
            down = Window((2, 2, 2), (2, 2, 2), (0, 0, 0), (0, 0, 0), (1, 1, 1), (1, 1, 1), (True,) * 3)
            gcd = replace(cd, kernel_input_feature=cd.kernel_output_feature,
                          kernel_output_feature=cd.kernel_input_feature)
            dx = e.op("convolution", e.sh(xin), (g_up, w), window=down, conv_dims=gcd)
            wcd = ConvDims(4, 0, (1, 2, 3), 0, 4, (1, 2, 3), 3, 4, (0, 1, 2))
            dw = e.op("convolution", e.sh(w), (xin, g_up), window=down, conv_dims=wcd)
            net.grad(wparam, dw)
            return dx

        net.push(back)
        x = block(block(x, c), c)
    x = net.conv(x, cfg["classes"], 1, 1)
    return x


def _bert(net: _Net, cfg: dict, layers: int) -> int:
    e = net.e
    b, s, h, heads = cfg["batch"], cfg["seq"], cfg["hidden"], cfg["heads"]
    vocab = cfg["vocab"]
    emb_dim = cfg.get("embed", h)  # ALBERT factorizes the embedding: a narrow table, then a projection to h
    ids = e.param(Shape("s32", (b, s)))
    mask_in = e.param(Shape("s32", (b, s)))
    table = net.weight((vocab, emb_dim))
    tparam = net._last_param
    idx = e.reshape(ids, (b, s, 1))
    emb = e.op("gather", Shape(net.dt, (b, s, emb_dim)), (table, idx))
    pos = net.weight((cfg["max_pos"], emb_dim))
    pos = e.slice(pos, (0, 0), (s, emb_dim))
    x = e.ew("add", emb, e.bcast(pos, (b, s, emb_dim), (1, 2)))

    def emb_back(g: int) -> int:
        dt = e.op("scatter", Shape(net.dt, (vocab, emb_dim)), (e.full(net.dt, (vocab, emb_dim)), idx, g),
                  called=(net.prog.reducer("add", net.dt),))
        net.grad(tparam, dt)
        return g

    net.push(emb_back)
    if not cfg.get("lite"):
        x = net.dropout(net.layernorm(x))
    if emb_dim != h:
        x = net.dense(x, h)
    mask = e.ew("multiply", e.convert(mask_in, net.dt), e.full(net.dt, (b, s), "mask_bias"))
    talking = bool(cfg.get("talking"))
    for li in range(layers):
        if cfg.get("share"):
            # ALBERT: every layer runs the first layer's weights (their gradients are summed in the step).
            if li == 0:
                net.shared = []
            else:
                net.replay, net.share_pos = True, 0
        xin = x
        x = net.layernorm(net.add_residual(
            lambda xin=xin: net.dropout(net.attention(xin, heads, mask, talking)), None, xin))
        xin = x
        x = net.layernorm(net.add_residual(
            lambda xin=xin: net.dropout(net.dense(net.gelu(net.dense(xin, 4 * h)), h)), None, xin))
    net.shared, net.replay = None, False
    if cfg.get("lite"):
        # Small exports keep only the encoder: the sequence output is the result.
        return x
    cls = net.reshape(net.slice(x, (0, 0, 0), (b, 1, h)), (b, h))
    pooled = net.e.ew("tanh", net.dense(cls, h))
    return net.softmax(net.dense(pooled, cfg["classes"]))


def _dlrm(net: _Net, cfg: dict, layers: int) -> int:
    e = net.e
    b, d = cfg["batch"], cfg["embed"]
    tables = max(1, layers)
    dense_in = e.param(Shape("f32", (b, 13)))
    x = e.convert(dense_in, net.dt) if net.dt != "f32" else dense_in
    for width in (512, 256):
        x = net.relu(net.dense(x, width))
    x = net.relu(net.dense(x, d))
    # Features enter the interaction as [b, 1, d] slabs; broadcast adds the unit dimension without a reshape.
    feats = [e.bcast(x, (b, 1, d), (0, 2))]
    lookups: list[tuple[int, int, int]] = []
    for _ in range(tables):
        rows = int(net.prog.rng.integers(1000, 100_000))
        ids = e.convert(e.param(Shape("s64", (b, 1))), "s32")
        ids = e.op("clamp", Shape("s32", (b, 1)), (e.full("s32", (b, 1)), ids, e.full("s32", (b, 1), f"max:{rows}")))
        tab = net.weight((rows, d))
        lookups.append((ids, rows, net._last_param))
        g_emb = e.op("gather", Shape(net.dt, (b, d)), (tab, ids))
        feats.append(e.bcast(g_emb, (b, 1, d), (0, 2)))
    f = len(feats)
    t = e.concat(feats, 1)
    z = e.dot(t, t, (2,), (2,), (0,), (0,))
    z = e.reshape(z, (b, f * f))
    x = e.concat([x, z], 1)

    def back(g: int) -> int:
        g_bottom = e.slice(g, (0, 0), (b, d))
        gz = e.reshape(e.slice(g, (0, d), (b, d + f * f)), (b, f, f))
        gt = e.dot(gz, t, (2,), (1,), (0,), (0,))
        gt = e.ew("add", gt, gt)
        for k, (ids, rows, tparam) in enumerate(lookups):
            gk = e.reshape(e.slice(gt, (0, k + 1, 0), (b, k + 2, d)), (b, d))
            dt = e.op("scatter", Shape(net.dt, (rows, d)), (e.full(net.dt, (rows, d)), ids, gk),
                      called=(net.prog.reducer("add", net.dt),))
            net.grad(tparam, dt)
        g0 = e.reshape(e.slice(gt, (0, 0, 0), (b, 1, d)), (b, d))
        return e.ew("add", g_bottom, g0)

    net.push(back)
    for _ in range(2 + layers // 3):
        x = net.relu(net.dense(x, 256))
    y = net.dense(x, 1)
    return e.ew("logistic", y)


def _mlp(net: _Net, cfg: dict, layers: int) -> int:
    e = net.e
    b, width = cfg["batch"], cfg["width"]
    x = e.param(Shape(net.dt, (b, cfg["features"])))
    for _ in range(max(1, layers)):
        y = net.batchnorm(net.dense(x, width, bias=False), 1)
        x = net.dropout(net.gelu(y) if cfg["gelu"] else net.relu(y))
    return net.softmax(net.dense(x, cfg["classes"]))


_FAMILIES: dict[str, Callable[[_Net, dict, int], int]] = {
    "resnet": _resnet, "inception": _inception, "unet3d": _unet3d, "bert": _bert, "dlrm": _dlrm, "mlp": _mlp,
    "transformer": _bert,
}


# ----------------------------------------------------------------------------------------------------------------
# Drawing a model configuration and a name.
# ----------------------------------------------------------------------------------------------------------------


# The real nlp layout graphs are TF-Hub BERT-family encoders (names in shared/spec/real-sizes.md): a name stem,
# its (layers, hidden) variants (heads = hidden / 64), and what sets the variant apart: ALBERT shares one layer's
# weights across all layers and factorizes the embedding, talking-heads mixes attention scores across heads.
NLP_MODELS: tuple[tuple[str, tuple[tuple[int, int], ...], dict], ...] = (
    ("small_bert_bert_en_uncased_L-{L}_H-{H}_A-{A}",
     tuple((layers, h) for layers in (2, 4, 6, 8, 10, 12) for h in (128, 256, 512, 768)), {}),
    ("bert_en_uncased_L-{L}_H-{H}_A-{A}", ((12, 768), (24, 1024)), {}),
    ("bert_en_cased_L-{L}_H-{H}_A-{A}", ((12, 768), (24, 1024)), {}),
    ("bert_multi_cased_L-{L}_H-{H}_A-{A}", ((12, 768),), {"vocab": 119547}),
    ("bert_en_wwm_uncased_L-{L}_H-{H}_A-{A}", ((24, 1024),), {}),
    ("albert_en_base", ((12, 768),), {"share": True, "embed": 128, "vocab": 30000}),
    ("albert_en_large", ((24, 1024),), {"share": True, "embed": 128, "vocab": 30000}),
    ("electra_small", ((12, 256),), {}),
    ("electra_base", ((12, 768),), {}),
    ("electra_large", ((24, 1024),), {}),
    ("talking-heads_base", ((12, 768),), {"talking": True}),
    ("talking-heads_large", ((24, 1024),), {"talking": True}),
)
NLP_BATCH_SIZES: tuple[int, ...] = (16, 32, 64)


def _draw_nlp_config(rng: np.random.Generator, target: int) -> dict:
    """What an nlp program's size does not depend on: batch, sequence length, precision and training step."""
    dtype = str(rng.choice(["f32", "bf16", "f16"], p=[0.6, 0.3, 0.1]))
    return dict(family="transformer", batch=int(rng.choice(NLP_BATCH_SIZES)),
                seq=int(rng.choice([128, 256, 512], p=[0.5, 0.25, 0.25])), vocab=30522, max_pos=512, classes=2,
                dtype=dtype, devices=1, optimizer=str(rng.choice(["adamw", "lamb"], p=[0.6, 0.4])),
                schedule=bool(rng.random() < 0.9), clip=bool(rng.random() < 0.7), loss_scale=dtype == "f16",
                loop=bool(rng.random() < 0.4) and target >= 300, lite=target < 300)


def _draw_config(source: str, rng: np.random.Generator, target: int) -> dict:
    dtype = str(rng.choice(["f32", "bf16", "f16"], p=[0.4, 0.4, 0.2]))
    if target < 250:
        family = "mlp"
    else:
        # Recommenders are mostly embedding lookups: only large ones carry enough dots to be layout graphs.
        # and plain MLPs have too few layout nodes once past toy sizes.
        probs = np.array([0.26, 0.16, 0.12, 0.26, 0.12 if target >= 1000 else 0.0, 0.08 if target < 400 else 0.0])
        family = str(rng.choice(["resnet", "inception", "unet3d", "bert", "dlrm", "mlp"], p=probs / probs.sum()))
    train = bool(rng.random() < (0.65 if target >= 600 else 0.0))
    devices = int(rng.choice([1, 4, 8, 16])) if train else 1
    cfg = dict(family=family, dtype=dtype, train=train, devices=devices, classes=int(rng.choice([10, 100, 1000])))
    if family in ("resnet", "inception"):
        cfg.update(batch=int(rng.choice([8, 32, 64, 128])), image=int(rng.choice([224, 299] if family == "inception"
                                                                                   else [224, 192])),
                   width=int(rng.choice([32, 64])), nchw=bool(rng.random() < 0.3))
    elif family == "unet3d":
        cfg.update(batch=int(rng.choice([1, 2, 4])), image=int(rng.choice([64, 96, 128])),
                   width=int(rng.choice([8, 16, 32])), classes=int(rng.choice([2, 3, 4])),
                   levels=int(rng.choice([3, 4])))
    elif family == "bert":
        cfg.update(batch=int(rng.choice([8, 24, 32, 64])), seq=int(rng.choice([128, 384, 512])),
                   hidden=int(rng.choice([256, 512, 768, 1024])), vocab=30522, max_pos=512, classes=2)
        cfg["heads"] = cfg["hidden"] // 64
    elif family == "dlrm":
        cfg.update(batch=int(rng.choice([256, 512, 2048])), embed=int(rng.choice([16, 64, 128])))
    else:
        cfg.update(batch=int(rng.choice([32, 128, 512])), width=int(rng.choice([256, 512, 1024])),
                   features=int(rng.choice([64, 784, 1024])), gelu=bool(rng.random() < 0.4))
    # The training step: BERT-like models train with Adam-type optimizers and clip gradients, CNNs with momentum or
    # LARS; f16 needs dynamic loss scaling; most steps follow a learning-rate schedule. Inference sometimes runs
    # several batches in a loop.
    # (Mostly LAMB and LARS, as MLPerf's BERT and ResNet use them.)
    optimizers = {"bert": ["adamw", "lamb"], "resnet": ["momentum", "lars"], "inception": ["momentum", "lars"],
                  "unet3d": ["momentum", "lars"]}.get(family)
    cfg.update(optimizer=str(rng.choice(optimizers, p=[0.3, 0.7])) if optimizers else "momentum",
               schedule=bool(rng.random() < 0.8), clip=bool(rng.random() < (0.7 if family == "bert" else 0.2)),
               loss_scale=dtype == "f16", loop=bool(rng.random() < 0.4))
    return cfg


def _model_name(cfg: dict, rng: np.random.Generator, layers: int) -> str:
    mode = "train" if cfg["train"] else "test"
    if cfg["family"] == "transformer":
        stem = cfg["stem"].format(L=layers, H=cfg["hidden"], A=cfg["heads"])
        return f"{stem}_batch_size_{cfg['batch']}_{mode}"
    fam = cfg["family"]
    dt = {"f32": "fp32", "bf16": "bf16", "f16": "fp16"}[cfg["dtype"]]
    topo = str(rng.choice(["2x2", "4x4", "8x8"]))
    stems = {
        "resnet": [f"resnet50.{topo}.{dt}", f"resnet_v1_{50 if layers < 24 else 101}_official_batch_{cfg['batch']}_{dt}",
                   f"resnet_batch_{cfg['batch']}_{mode}"],
        "inception": [f"inception_v3_batch_{cfg['batch']}_{mode}", f"inception_v4.{topo}.{dt}"],
        "unet3d": [f"unet_3d.{topo}.{dt}", f"unet3d_batch_{cfg['batch']}_{mode}"],
        "bert": [f"bert_pretraining.{topo}.{dt}", f"mlperf_bert_batch_{cfg['batch']}_{topo}",
                 "tf2_bert_pretrain_dynamic_batch_size"],
        "dlrm": [f"dlrm_batch_{cfg['batch']}_{mode}", f"ncf_batch_{cfg['batch']}_{mode}"],
        "mlp": [f"mlp_batch_{cfg['batch']}_{mode}", f"mnist_mlp.{topo}.{dt}"],
    }[fam]
    return str(stems[int(rng.integers(len(stems)))])


# ----------------------------------------------------------------------------------------------------------------
# Assembly: forward (+ backward + optimizer inside a while loop) into a Module.
# ----------------------------------------------------------------------------------------------------------------


def _params_to_tuple(comp: Computation, prog: _Program) -> list[Shape]:
    """Replace the parameters of ``comp`` by get-tuple-elements of one tuple parameter inserted first.

    Every instruction index shifts by exactly one, so operands are remapped by adding 1.

    Returns:
        The element shapes of the tuple parameter, in parameter-number order.
    """
    shapes: dict[int, Shape] = {}
    new = []
    for ins in comp.instructions:
        ops = tuple(o + 1 for o in ins.operands)
        if ins.opcode == "parameter":
            shapes[ins.parameter_number] = ins.shape
            new.append(Instruction("get-tuple-element", ins.shape, (0,), name=f"get-tuple-element.{prog.uid()}"))
        else:
            ins.operands = ops
            new.append(ins)
    elems = [shapes[k] for k in range(len(shapes))]
    tup = Instruction("parameter", Shape("tuple", tuple_shapes=tuple(elems)), (), name=f"arg_tuple.{prog.uid()}",
                      parameter_number=0)
    comp.instructions = [tup, *new]
    return elems


def _conditional(prog: _Program, e: _Emitter, pred: int, args: list[int],
                 branches: dict[str, Callable[[_Emitter, list[int]], list[int]]]) -> list[int]:
    """``tf.cond``: a ``conditional`` on ``pred`` whose branches are computations ``cond_true_N`` / ``cond_false_N``
    (``branches["true"]`` / ``["false"]`` build them from the get-tuple-elements of a tuple of ``args`` and return
    their results); the results' get-tuple-elements are returned."""
    uid = prog.uid()
    arg_shapes = tuple(e.sh(a) for a in args)
    names: list[str] = []
    out_shapes: tuple[Shape, ...] = ()
    for tag in ("true", "false"):
        comp = Computation(f"cond_{tag}_{uid}")
        be = _Emitter(prog, comp)
        tp = be.op("parameter", Shape("tuple", tuple_shapes=arg_shapes), parameter_number=0)
        ys = branches[tag](be, [be.gte(tp, k) for k in range(len(args))])
        be.tuple_(ys)
        shapes = tuple(be.sh(y) for y in ys)
        if out_shapes and shapes != out_shapes:
            raise ValueError(f"conditional branches return {out_shapes} and {shapes}")
        out_shapes = shapes
        prog.subs.append(comp)
        names.append(comp.name)
    arg = e.tuple_(args)
    c = e.op("conditional", Shape("tuple", tuple_shapes=out_shapes), (pred, arg, arg), called=tuple(names))
    return [e.gte(c, k) for k in range(len(out_shapes))]


def _learning_rate(prog: _Program, e: _Emitter, step: int) -> int:
    """This step's learning rate (f32 scalar): linear warm-up, then polynomial decay, chosen by a conditional on the
    step counter, as ``tf.cond`` lowers a schedule."""

    def warmup(be: _Emitter, xs: list[int]) -> list[int]:
        return [be.ew("multiply", be.convert(xs[0], "f32"), be.const("f32", "warmup_slope"))]

    def decay(be: _Emitter, xs: list[int]) -> list[int]:
        left = be.ew("subtract", be.const("f32", "one"),
                     be.ew("divide", be.convert(xs[0], "f32"), be.const("f32", "total_steps")))
        return [be.ew("multiply", be.const("f32", "base_lr"), be.ew("power", left, be.const("f32", "decay_power")))]

    pred = e.ew("compare", step, e.const("s32", "warmup_steps"))
    return _conditional(prog, e, pred, [step], {"true": warmup, "false": decay})[0]


def _all_axes(e: _Emitter, x: int) -> tuple[int, ...]:
    return tuple(range(e.sh(x).rank))


def _optimizer(e: _Emitter, kind: str, w: int, g: int, lr: int) -> tuple[int, dict[int, int]]:
    """One weight's update: the new weight and ``{slot parameter: new slot}`` (the slots are new loop-carried
    parameters). ``momentum``: heavy-ball SGD; ``lars``: momentum SGD whose rate is scaled per kernel (rank 2 or
    more; biases and norm scales keep plain momentum, as large-batch CNN training does) by the trust ratio
    ``eta |w| / (|g| + wd |w|)``, guarded against zero norms by compare / select; ``adamw``: Adam with decoupled
    weight decay; ``lamb``: AdamW's step scaled per weight by the trust ratio ``|w| / |step|``, guarded likewise."""
    master = e.sh(w).element_type
    dims = e.sh(w).dims
    if kind == "lars" and len(dims) >= 2:
        mom = e.param(e.sh(w))
        w_norm = e.ew("sqrt", e.reduce(e.ew("multiply", w, w), _all_axes(e, w)))
        g_norm = e.ew("sqrt", e.reduce(e.ew("multiply", g, g), _all_axes(e, g)))
        zero, one = e.const(master), e.const(master, "one")
        decay = e.const(master, "weight_decay")
        ratio = e.ew("divide", e.ew("multiply", e.const(master, "lars_eta"), w_norm),
                     e.ew("add", g_norm, e.ew("multiply", decay, w_norm)))
        ratio = e.op("select", Shape(master), (e.ew("compare", g_norm, zero), ratio, one))
        ratio = e.op("select", Shape(master), (e.ew("compare", w_norm, zero), ratio, one))
        step = e.ew("add", g, e.ew("multiply", w, e.full(master, dims, "weight_decay")))
        step = e.ew("multiply", step, e.bcast(e.ew("multiply", lr, ratio), dims, ()))
        m_new = e.ew("add", e.ew("multiply", mom, e.full(master, dims, "momentum")), step)
        return e.ew("subtract", w, m_new), {mom: m_new}
    if kind in ("momentum", "lars"):
        mom = e.param(e.sh(w))
        m_new = e.ew("add", e.ew("multiply", mom, e.full(master, dims, "momentum")), g)
        return e.ew("subtract", w, e.ew("multiply", m_new, e.splat(lr, dims))), {mom: m_new}
    m, v = e.param(e.sh(w)), e.param(e.sh(w))
    m_new = e.ew("add", e.ew("multiply", m, e.full(master, dims, "beta1")),
                 e.ew("multiply", g, e.full(master, dims, "one_minus_beta1")))
    v_new = e.ew("add", e.ew("multiply", v, e.full(master, dims, "beta2")),
                 e.ew("multiply", e.ew("multiply", g, g), e.full(master, dims, "one_minus_beta2")))
    step = e.ew("divide", m_new, e.ew("add", e.ew("sqrt", v_new), e.full(master, dims, "eps")))
    step = e.ew("add", step, e.ew("multiply", w, e.full(master, dims, "weight_decay")))
    rate = lr
    if kind == "lamb":
        w_norm = e.ew("sqrt", e.reduce(e.ew("multiply", w, w), _all_axes(e, w)))
        s_norm = e.ew("sqrt", e.reduce(e.ew("multiply", step, step), _all_axes(e, step)))
        zero, one = e.const(master), e.const(master, "one")
        ratio = e.op("select", Shape(master), (e.ew("compare", s_norm, zero), e.ew("divide", w_norm, s_norm), one))
        ratio = e.op("select", Shape(master), (e.ew("compare", w_norm, zero), ratio, one))
        rate = e.ew("multiply", lr, ratio)
        w_new = e.ew("subtract", w, e.ew("multiply", step, e.bcast(rate, dims, ())))
    else:
        w_new = e.ew("subtract", w, e.ew("multiply", step, e.splat(rate, dims)))
    return w_new, {m: m_new, v: v_new}


def _train_step(prog: _Program, e: _Emitter, net: _Net, cfg: dict, out: int, counter: int) -> dict[int, int]:
    """Loss, backward pass and weight updates after the forward pass ``out``.

    The gradients are all-reduced across devices, optionally clipped by their global norm, and with dynamic loss
    scaling (f16) unscaled and checked for overflow: every update is then a ``select`` between the new and the
    old value on "all gradients finite", and the scale itself is updated by a conditional. The learning rate comes
    from a warm-up / decay conditional (``schedule``) or is a constant.

    Returns:
        ``{loop parameter: its new value}`` for every weight, optimizer slot and loss-scale state.
    """
    dt, master = cfg["dtype"], net.master
    updates: dict[int, int] = {}
    scale = good = -1
    if cfg.get("loss_scale"):
        scale, good = e.param(Shape("f32")), e.param(Shape("s32"))
    # Loss and its gradient seed: reduce to a scalar, then broadcast back (scaled up under loss scaling).
    s = e.sh(out)
    loss = e.reduce(out, tuple(range(s.rank)))
    if scale < 0:
        seed = e.const(dt, "one")
    else:
        seed = e.convert(scale, dt) if dt != "f32" else scale
    g = e.bcast(e.ew("multiply", loss, seed), s.dims, ())
    for b in reversed(net.tape):
        g = b(g)
    grads: dict[int, int] = {}
    for w, dw in net.wgrads:
        # A weight used several times (shared layers) gets the sum of its gradients.
        grads[w] = e.ew("add", grads[w], dw) if w in grads else dw
    for w, dw in grads.items():
        if cfg["devices"] > 1:
            dw = e.op("all-reduce", e.sh(dw), (dw,), called=(prog.reducer("add", e.sh(dw).element_type),))
        if e.sh(dw).element_type != master:
            dw = e.convert(dw, master)
        grads[w] = dw
    finite = -1
    if scale >= 0:
        inv = e.ew("divide", e.const("f32", "one"), scale)
        checks = []
        for w, dw in grads.items():
            dw = grads[w] = e.ew("multiply", dw, e.splat(inv, e.sh(dw).dims))
            ok = e.op("is-finite", Shape("pred", e.sh(dw).dims), (dw,))
            checks.append(e.reduce(ok, _all_axes(e, ok), "and"))
        finite = checks[0]
        for c in checks[1:]:
            finite = e.ew("and", finite, c)

        def grow(be: _Emitter, xs: list[int]) -> list[int]:
            return [be.ew("multiply", xs[0], be.const("f32", "growth")), be.ew("add", xs[1], be.const("s32", "one"))]

        def shrink(be: _Emitter, xs: list[int]) -> list[int]:
            return [be.ew("multiply", xs[0], be.const("f32", "backoff")), be.const("s32")]

        updates[scale], updates[good] = _conditional(prog, e, finite, [scale, good], {"true": grow, "false": shrink})
    if cfg.get("clip"):
        total = -1
        for dw in grads.values():
            sq = e.reduce(e.ew("multiply", dw, dw), _all_axes(e, dw))
            total = sq if total < 0 else e.ew("add", total, sq)
        clip = e.const(master, "clip_norm")
        factor = e.ew("divide", clip, e.ew("maximum", e.ew("sqrt", total), clip))
        grads = {w: e.ew("multiply", dw, e.splat(factor, e.sh(dw).dims)) for w, dw in grads.items()}
    lr = _learning_rate(prog, e, counter) if cfg.get("schedule") else e.const("f32", "learning_rate")
    for w, dw in grads.items():
        w_new, slots = _optimizer(e, cfg.get("optimizer", "momentum"), w, dw, lr)
        for var, new in [(w, w_new), *slots.items()]:
            if finite >= 0:
                new = e.op("select", e.sh(new), (e.splat(finite, e.sh(new).dims), new, var))
            updates[var] = new
    return updates


def _build(source: str, cfg: dict, layers: int, seed: int, name: str) -> Module:
    prog = _Program(name, np.random.default_rng(seed))
    uid = prog.uid()
    train = cfg["train"]
    looped = train or bool(cfg.get("loop"))
    master = "f32"
    body_name = f"while_body_{uid}" if looped else (f"cluster_{uid}__XlaCompiledKernel_true" if
                                                    prog.rng.random() < 0.6 else f"main.{uid}")
    comp = Computation(body_name)
    e = _Emitter(prog, comp)
    net = _Net(prog, e, train, cfg["dtype"], master)
    counter = e.param(Shape("s32")) if looped else -1
    out = _FAMILIES[cfg["family"]](net, cfg, layers)
    if not looped:
        return Module(name, [*prog.subs, comp])
    if train:
        updates = _train_step(prog, e, net, cfg, out, counter)
    else:
        # An inference loop (several batches per device launch): results leave through the outfeed.
        e.op("outfeed", Shape("token"), (out, e.op("after-all", Shape("token"))))
        updates = {}
    updates[counter] = e.ew("add", counter, e.const("s32", "one"))
    params = [i for i, ins in enumerate(comp.instructions) if ins.opcode == "parameter"]
    e.tuple_([updates.get(p, p) for p in params])
    elems = _params_to_tuple(comp, prog)

    cond = Computation(f"while_cond_{uid}")
    ce = _Emitter(prog, cond)
    tp = ce.op("parameter", Shape("tuple", tuple_shapes=tuple(elems)), parameter_number=0)
    it = ce.gte(tp, 0)
    ce.op("compare", Shape("pred"), (it, ce.const("s32", "steps")))

    entry = Computation(f"cluster_{uid}__XlaCompiledKernel_true__XlaNumConstantArgs_0__XlaNumResourceArgs_"
                        f"{len(elems) - 1}_.{prog.uid()}")
    ee = _Emitter(prog, entry)
    args = [ee.param(sh) for sh in elems]
    init = ee.tuple_(args)
    loop = ee.op("while", ee.sh(init), (init,), called=(cond.name, body_name))
    results = [ee.gte(loop, k) for k in range(1, len(elems))]
    ee.tuple_(results)
    return Module(name, [*prog.subs, cond, comp, entry])


def build_program(source: str, rng: np.random.Generator, target_nodes: int) -> Module:
    """Draw one program of ``source`` (``"xla"`` or ``"nlp"``) with about ``target_nodes`` instructions.

    ``xla``: the node count is fitted as linear in the number of layers / blocks from two small builds, then the
    program is built at the layer count that hits the target (usually within 15%, always aimed within 35%).
    ``nlp``: a real architecture (:data:`NLP_MODELS`: 2 to 24 layers, hidden 128 to 1024) and mode (train or
    test) whose estimated node count is near the target; the count follows the architecture, so a target beyond
    what a 24-layer training step holds gives a smaller program, and one below a 2-layer encoder a larger one.

    Args:
        source: ``"xla"`` (a mix of model families) or ``"nlp"`` (one transformer family).
        rng: random stream; the result is a deterministic function of its state.
        target_nodes: wanted number of nodes, about 50 to 44,000.

    Returns:
        A module with computations in post-order (helpers first, entry last).
    """
    if source not in ("xla", "nlp"):
        raise ValueError(f"unknown program source {source!r}")
    seed = int(rng.integers(2**63))
    name_rng = np.random.default_rng(int(rng.integers(2**63)))

    def count(cfg: dict, layers: int) -> int:
        return _build(source, cfg, layers, seed, "probe").num_nodes

    if source == "nlp":
        return _build_nlp(rng, target_nodes, count, seed)
    # Some families have a large minimum (a 4-level UNet, a ResNet training step): redraw when even one
    # layer overshoots the target, trying the inference variant first.
    for _ in range(12):
        cfg = _draw_config(source, rng, target_nodes)
        n1 = count(cfg, 1)
        if n1 <= 1.2 * target_nodes:
            break
        if cfg["train"]:
            cfg.update(train=False, devices=1)
            n1 = count(cfg, 1)
            if n1 <= 1.2 * target_nodes:
                break
    n3 = count(cfg, 3)
    slope = max((n3 - n1) / 2.0, 1.0)
    layers = max(1, int(round(1 + (target_nodes - n1) / slope)))
    module = _build(source, cfg, layers, seed, "probe")
    n = module.num_nodes
    if abs(n - target_nodes) > 0.15 * target_nodes and layers > 3:
        # The count is not quite linear (spatial sizes shrink, branches change); one secant step fixes it.
        slope = max((n - n1) / (layers - 1), 1.0)
        layers = max(1, int(round(1 + (target_nodes - n1) / slope)))
        module = _build(source, cfg, layers, seed, "probe")
    module.name = _model_name(cfg, name_rng, layers)
    return module


def _build_nlp(rng: np.random.Generator, target: int, count: Callable[[dict, int], int], seed: int) -> Module:
    """An nlp program: the real architecture and mode whose node count is nearest ``target`` (one drawn at random
    among those within 10% of the nearest), named as the real files are."""
    cfg = _draw_nlp_config(rng, target)
    fit: dict[bool, tuple[float, float]] = {}
    for train in (False, True):
        probe = dict(cfg, train=train, hidden=128, heads=2)
        n1, n3 = count(probe, 1), count(probe, 3)
        fit[train] = (n1, max((n3 - n1) / 2.0, 1.0))
    cands = [(abs(float(np.log((fit[train][0] + fit[train][1] * (layers - 1)) / target))), k, layers, h, train)
             for train in (False, True) for k, (_, variants, _) in enumerate(NLP_MODELS) for layers, h in variants]
    best = min(c[0] for c in cands)
    near = [c for c in cands if c[0] <= best + 0.1]
    _, k, layers, h, train = near[int(rng.integers(len(near)))]
    stem, _, extra = NLP_MODELS[k]
    cfg.update(extra, stem=stem, hidden=h, heads=h // 64, train=train)
    module = _build("nlp", cfg, layers, seed, "probe")
    module.name = _model_name(cfg, rng, layers)
    return module


# ----------------------------------------------------------------------------------------------------------------
# Tile kernels.
# ----------------------------------------------------------------------------------------------------------------


def _cut_kernel(comp: Computation, root: int, budget: int, rng: np.random.Generator, index: int) -> Module | None:
    """A fused kernel rooted at ``root``: fusible producers pulled in breadth-first, the rest become parameters."""
    ins = comp.instructions
    chosen = {root}
    frontier = list(ins[root].operands)
    while frontier and len(chosen) < budget:
        k = int(rng.integers(len(frontier)))
        o = frontier.pop(k)
        if o in chosen or ins[o].opcode not in _FUSIBLE:
            continue
        outside = {p for i in chosen | {o} for p in ins[i].operands if p not in chosen and p != o}
        if len(chosen) + 1 + len(outside) > budget:
            continue
        chosen.add(o)
        frontier.extend(ins[o].operands)
    order = sorted(chosen)
    inputs: list[int] = []
    for i in order:
        for p in ins[i].operands:
            if p not in chosen and p not in inputs:
                inputs.append(p)
    if len(order) + len(inputs) < 2:
        return None
    fused = Computation(f"fused_computation.{index}")
    remap: dict[int, int] = {}
    for k, p in enumerate(inputs):
        remap[p] = fused.add("parameter", ins[p].shape, name=f"param_{k}.{index}", parameter_number=k)
    for i in order:
        src = ins[i]
        copy = replace(src, operands=tuple(remap[o] for o in src.operands), called=())
        fused.instructions.append(copy)
        remap[i] = len(fused.instructions) - 1
    return Module(f"fused_computation.{index}", [fused])


def tile_kernels(module: Module, rng: np.random.Generator, max_nodes: int = 80) -> list[Module]:
    """Cut fused kernels (convolution, dot, reduce or elementwise roots) out of ``module``.

    Each kernel is a module with one computation ``fused_computation.<k>``: parameters for its inputs, then the
    fused instructions in program order, the fusion root last.

    Args:
        module: a program from :func:`build_program`.
        rng: random stream.
        max_nodes: most nodes per kernel (parameters included); kernels have at least 2.

    Returns:
        A list of kernel modules (several per program, of mixed root kinds), possibly empty for a trivial module.
    """
    comp = max(module.computations, key=len)
    groups: dict[str, list[int]] = {"convolution": [], "dot": [], "reduce": [], "elementwise": []}
    for i, ins in enumerate(comp.instructions):
        if ins.opcode in ("convolution", "dot", "reduce"):
            groups[ins.opcode].append(i)
        elif ins.opcode in _ELEMENTWISE_ROOTS:
            groups["elementwise"].append(i)
    kernels: list[Module] = []
    for kind, cands in groups.items():
        if not cands:
            continue
        n_pick = min(len(cands), {"convolution": 4, "dot": 4, "reduce": 2, "elementwise": 3}[kind])
        for root in rng.choice(cands, size=n_pick, replace=False):
            budget = int(rng.integers(2, max_nodes + 1))
            kern = _cut_kernel(comp, int(root), budget, rng, int(rng.integers(1, 5000)))
            if kern is not None and 2 <= kern.num_nodes <= max_nodes:
                kern.name = module.name
                kernels.append(kern)
    return kernels
