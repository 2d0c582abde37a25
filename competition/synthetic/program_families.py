"""The model families of the synthetic programs: the forward pass of each (:data:`FAMILIES`).

Each family builds its network of :class:`~competition.synthetic.program_layers.Net` layers: it takes
``(net, cfg, layers)`` and returns the network output; ``cfg`` holds the drawn hyper-parameters and ``layers``
the depth (layers or blocks) that :func:`competition.synthetic.programs.build_program` fits to the target node
count:

* ``resnet``: ResNet-like CNNs (convolution, batch norm spelled as elementwise ops, ``maximum`` as ReLU,
  ``reduce-window`` pooling, global average pool + dense head);
* ``plaincnn``: AlexNet- and VGG-like plain CNNs (a large strided stem, AlexNet's 11x11 stride 4, then 5x5 and
  3x3 convolutions between max pools, no normalisation or skips, a head of two wide dense layers with dropout);
* ``inception``: Inception-like modules whose branches are joined by ``concatenate``;
* ``unet3d``: a 3-D UNet on 5-D tensors (rank-5 convolutions, instance norm through reshapes, transposed
  convolutions with base dilation, skip concatenations);
* ``bert`` / ``transformer``: BERT-like encoders (embedding ``gather``, ``dot``, ``reshape``, ``transpose``, softmax
  as exponential / reduce / divide, layer norm, GELU; ALBERT's shared layers and factorized embedding,
  talking-heads attention);
* ``dlrm`` / ``mlp``: recommender and plain MLP graphs (``gather`` embeddings, ``concatenate``, a batched ``dot``
  interaction, dense layers).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import numpy as np

from competition.hlo.ir import ConvDims, Shape, Window
from competition.synthetic.program_layers import Net


def _resnet(net: Net, cfg: dict, layers: int) -> int:
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


def _plaincnn(net: Net, cfg: dict, layers: int) -> int:
    e = net.e
    nchw = cfg["nchw"]
    b, hw, width = cfg["batch"], cfg["image"], cfg["width"]
    x = e.reshape(e.param(Shape(net.dt, (b, hw * hw * 3))), (b, 3, hw, hw) if nchw else (b, hw, hw, 3))
    spatial = (2, 3) if nchw else (1, 2)
    feat = 1 if nchw else 3

    def conv(y: int, cout: int, k: int, stride: int = 1) -> int:
        """A convolution with a bias, as AlexNet's and VGG's (no batch norm)."""
        return net.bias(net.conv(y, cout, k, stride, nchw), feat)

    stem, stride = cfg["stem"]
    x = net.maxpool(net.relu(conv(x, width, stem, stride)), 3, 2, spatial)
    x = net.maxpool(net.relu(conv(x, 3 * width, 5)), 3, 2, spatial)
    # AlexNet's three 3x3 convolutions (384, 256, 256 channels at width 64); deeper variants repeat the last.
    for i in range(max(1, layers)):
        x = net.relu(conv(x, 6 * width if i == 0 else 4 * width, 3))
    x = net.maxpool(x, 3, 2, spatial)
    x = net.reshape(x, (b, int(np.prod(e.sh(x).dims[1:]))))
    for _ in range(2):
        x = net.dropout(net.relu(net.dense(x, cfg["hidden"])))
    return net.dense(x, cfg["classes"])


def _inception(net: Net, cfg: dict, layers: int) -> int:
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


def _unet3d(net: Net, cfg: dict, layers: int) -> int:
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


def _bert(net: Net, cfg: dict, layers: int) -> int:
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


def _dlrm(net: Net, cfg: dict, layers: int) -> int:
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


def _mlp(net: Net, cfg: dict, layers: int) -> int:
    e = net.e
    b, width = cfg["batch"], cfg["width"]
    x = e.param(Shape(net.dt, (b, cfg["features"])))
    for _ in range(max(1, layers)):
        y = net.batchnorm(net.dense(x, width, bias=False), 1)
        x = net.dropout(net.gelu(y) if cfg["gelu"] else net.relu(y))
    return net.softmax(net.dense(x, cfg["classes"]))


FAMILIES: dict[str, Callable[[Net, dict, int], int]] = {
    "resnet": _resnet, "plaincnn": _plaincnn, "inception": _inception, "unet3d": _unet3d, "bert": _bert,
    "dlrm": _dlrm, "mlp": _mlp, "transformer": _bert,
}
"""The forward pass of each family, by the name ``cfg["family"]`` holds (``transformer``: the nlp family)."""
