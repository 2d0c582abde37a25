"""The layers the synthetic programs are built of, with a gradient tape.

Each forward layer (convolution, batch and layer norm, ReLU / GELU, pooling, dense, attention, dropout...) emits
its ops through an :class:`~competition.synthetic.program_emitter.Emitter` and, in a training program, pushes a
closure that emits its backward ops (convolutions / dots / select-and-scatter / scatter, ReLU and dropout
gradients as compare + select); weights are parameters, converted when the program's precision differs from the
master copy.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import numpy as np

from competition.hlo.ir import ConvDims, Shape, Window
from competition.synthetic.program_emitter import Emitter, Program, prod

_Back = Callable[[int], int]


class Net:
    """Layers with a gradient tape: each forward layer pushes a closure that emits its backward ops."""

    def __init__(self, prog: Program, e: Emitter, train: bool, dtype: str, master: str) -> None:
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
            count = e.full(self.dt, (c,), f"count:{prod([s.dims[a] for a in axes])}")
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

    def bias(self, x: int, feat: int) -> int:
        """``x`` plus a trained bias along dimension ``feat`` (a convolution's bias, without batch norm)."""
        e = self.e
        dims = e.sh(x).dims
        b = self.weight((dims[feat],))
        bparam = self._last_param
        y = e.ew("add", x, self.vec_bcast(b, dims, feat))

        def back(g: int) -> int:
            self.grad(bparam, e.reduce(g, tuple(a for a in range(len(dims)) if a != feat)))
            return g

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
        count = f"count:{prod([s.dims[a] for a in spatial])}"
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
            bparam = self._last_param
            y = e.ew("add", y, e.bcast(b, e.sh(y).dims, (r - 1,)))

        def back(g: int) -> int:
            lead = tuple(range(r - 1))
            if bias:
                self.grad(bparam, e.reduce(g, lead))
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
