"""Real programs for the synthetic world: a small zoo of JAX models, lowered to HLO and read into :class:`Module`.

``fastslow data synth --programs jax`` takes its layout programs, and the programs its tile kernels are cut from,
from here instead of :mod:`competition.synthetic.programs`; the runtime physics, the config searches and the file
format stay the world's own. The zoo:

* ``mlp``: dense layers (``dot``, bias ``broadcast`` + ``add``, ReLU as ``maximum``), some with layer norm;
* ``resnet``: a ResNet-style CNN (``convolution`` in NHWC or NCHW, batch norm from batch statistics, ReLU,
  ``reduce-window`` max pooling, projection shortcuts, global average pool and a dense head);
* ``transformer``: a BERT-like encoder (embedding ``gather``, fused QKV ``dot``, ``reshape`` / ``transpose`` into
  heads, softmax, layer norm, tanh-GELU feed-forward);
* ``unet``: a 2-D UNet (convolution blocks, max pooling, transposed convolutions, skip ``concatenate``);
* each of them as a training step: ``jax.value_and_grad`` of its loss and an SGD-momentum or Adam update, for a
  share of them run for several steps inside ``lax.fori_loop`` (a ``while`` with its body and condition).

Sizes, batch sizes and dtypes (f32, bf16, f16) are drawn from the caller's random stream; the depth (layers,
blocks per stage, convolutions per level) is then fitted so the node count comes near the wanted one, as
:func:`competition.synthetic.programs.build_program` does for its own programs. ``xla`` draws every family,
``nlp`` only the transformer (swept over layers, hidden size, heads, batch and sequence length).

The programs are lowered with ``jax.jit(f).lower(...)`` on abstract arguments (nothing is allocated or run) and
read as HLO text before optimisation (``as_text(dialect="hlo")``) by :func:`competition.hlo.text.parse_hlo_text`.
The optimised text of the CPU compiler (``.compile().as_text()``) is not used: it carries rewrites of the CPU
backend (bf16 and f16 arithmetic widened to f32 through ``convert`` pairs, convolutions and dots left out of
fusions, so its fusions hold only elementwise roots), none of which a TPU program has. Tile kernels are cut
from these programs by the generator's own cutter (:func:`competition.synthetic.tile_kernels.tile_kernels`).

jax is imported here only, and only when a program is lowered (it is a dev extra: ``make install``);
:func:`require_jax` fails with one line when it is missing. The bytes depend on the jax version (its lowering).
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from competition.hlo.ir import Module

FAMILIES: tuple[str, ...] = ("mlp", "resnet", "transformer", "unet")
"""The zoo's model families (``xla`` draws all of them, ``nlp`` the transformer only)."""

MAX_DEPTH: dict[str, int] = {"mlp": 48, "resnet": 8, "transformer": 24, "unet": 4}
"""Deepest program of each family: layers, blocks per stage, layers, convolutions per level."""

TRAIN_SHARE: dict[str, float] = {"xla": 0.5, "nlp": 0.5}
"""Share of programs that are training steps, by source."""

LOOP_SHARE: float = 0.5
"""Share of training steps run for several steps inside a ``fori_loop`` (a ``while``)."""

FIT_TRIES: int = 6
"""``xla``: families redrawn at most this many times while even the shallowest program overshoots the target."""


class JaxUnavailable(RuntimeError):
    """jax is not installed: the message says how to install it."""


def require_jax() -> None:
    """Fail with :class:`JaxUnavailable` (one line) when jax cannot be imported."""
    if importlib.util.find_spec("jax") is None:
        raise JaxUnavailable("--programs jax lowers JAX models, and jax is not installed: install the dev extras "
                             "(make install, or pip install 'jax[cpu]') or use --programs generator")


@dataclass(frozen=True)
class ZooSpec:
    """One zoo program but its depth.

    Attributes:
        family: one of :data:`FAMILIES`.
        dtype: ``f32``, ``bf16`` or ``f16``.
        batch: batch size.
        width: hidden width (mlp, transformer) or base channels (resnet, unet).
        size: input features (mlp), image side (resnet, unet) or sequence length (transformer).
        heads: attention heads (transformer).
        levels: stages (resnet) or down-sampling levels (unet).
        nchw: convolutions in NCHW instead of NHWC (resnet).
        norm: layer norm after each hidden layer (mlp).
        classes: outputs of the head.
        train: a training step (value_and_grad + optimizer update) instead of a forward pass.
        optimizer: ``momentum`` or ``adam``.
        steps: training steps in a ``fori_loop`` (0: one step, no loop).
    """

    family: str
    dtype: str
    batch: int
    width: int
    size: int
    heads: int = 1
    levels: int = 3
    nchw: bool = False
    norm: bool = False
    classes: int = 10
    train: bool = False
    optimizer: str = "momentum"
    steps: int = 0

    def name(self, depth: int) -> str:
        """A model-like name: family, shape knobs, dtype, depth and mode."""
        mode = "train" if self.train else "test"
        dt = {"f32": "fp32", "bf16": "bf16", "f16": "fp16"}[self.dtype]
        if self.family == "transformer":
            return f"jax_bert_L-{depth}_H-{self.width}_A-{self.heads}_S-{self.size}_batch_size_{self.batch}_{mode}"
        layout = ".nchw" if self.nchw else ""
        return f"jax_{self.family}{layout}.d{depth}.w{self.width}.b{self.batch}.{dt}_{mode}"


def draw_spec(source: str, rng: np.random.Generator, target: int) -> ZooSpec:
    """Everything of a program but its depth, drawn from ``rng`` (``target`` steers the family for ``xla``)."""
    if source == "nlp":
        family = "transformer"
    elif source == "xla":
        # Convolution families have a large smallest program: small targets get dense ones more often.
        probs = np.array([0.2, 0.3, 0.3, 0.2]) if target >= 600 else np.array([0.4, 0.15, 0.35, 0.1])
        family = str(rng.choice(FAMILIES, p=probs / probs.sum()))
    else:
        raise ValueError(f"unknown program source {source!r}")
    dtype = str(rng.choice(["f32", "bf16", "f16"], p=[0.45, 0.4, 0.15]))
    train = bool(rng.random() < TRAIN_SHARE[source])
    steps = int(rng.integers(2, 9)) if train and rng.random() < LOOP_SHARE else 0
    optimizer = str(rng.choice(["momentum", "adam"]))
    common = dict(family=family, dtype=dtype, train=train, steps=steps, optimizer=optimizer)
    if family == "mlp":
        return ZooSpec(batch=int(rng.choice([16, 64, 256, 1024])), width=int(rng.choice([128, 256, 512, 1024])),
                       size=int(rng.choice([64, 784, 1024])), norm=bool(rng.random() < 0.4),
                       classes=int(rng.choice([10, 100])), **common)
    if family == "resnet":
        return ZooSpec(batch=int(rng.choice([8, 16, 32, 64])), width=int(rng.choice([16, 32, 64])),
                       size=int(rng.choice([32, 64, 96])), levels=int(rng.choice([3, 4])),
                       nchw=bool(rng.random() < 0.3), classes=int(rng.choice([10, 100, 1000])), **common)
    if family == "unet":
        return ZooSpec(batch=int(rng.choice([1, 2, 4, 8])), width=int(rng.choice([8, 16, 32])),
                       size=int(rng.choice([64, 128])), levels=int(rng.choice([2, 3, 4])),
                       classes=int(rng.choice([2, 3, 4])), **common)
    width = int(rng.choice([128, 256, 512, 768]))
    return ZooSpec(batch=int(rng.choice([1, 8, 16, 32])), width=width, size=int(rng.choice([64, 128, 256])),
                   heads=width // int(rng.choice([32, 64])), classes=2, **common)


def lower_text(spec: ZooSpec, depth: int) -> str:
    """The HLO text (before optimisation) of ``spec`` at ``depth``: ``jax.jit(f).lower(...)`` on abstract
    arguments."""
    import jax

    fn, args = _program(spec, depth)
    return jax.jit(fn).lower(*args).as_text(dialect="hlo")


def read_program(spec: ZooSpec, depth: int) -> Module:
    """``spec`` at ``depth``, lowered and read into a :class:`Module` named by :meth:`ZooSpec.name`."""
    from competition.hlo.text import parse_hlo_text

    name = spec.name(depth)
    module = parse_hlo_text(lower_text(spec, depth), source=name)
    module.name = name
    return module


def build_jax_program(source: str, rng: np.random.Generator, target_nodes: int) -> Module:
    """Draw one zoo program of ``source`` (``"xla"`` or ``"nlp"``) with about ``target_nodes`` instructions.

    The node count is fitted as linear in the depth from the programs of depth 1 and 2, and the program is lowered
    at the depth that hits the target, within the family's :data:`MAX_DEPTH` (so a target beyond the deepest
    program gives a smaller one, and one below the shallowest a larger one). ``xla`` redraws the family, up to
    :data:`FIT_TRIES` times, while even depth 1 overshoots the target by more than half.

    Args:
        source: ``"xla"`` (every family) or ``"nlp"`` (the transformer).
        rng: random stream; the result is a deterministic function of its state (and of the jax version).
        target_nodes: wanted number of nodes.
    """
    require_jax()
    built: dict[tuple[ZooSpec, int], Module] = {}

    def program(spec: ZooSpec, depth: int) -> Module:
        if (spec, depth) not in built:
            built[(spec, depth)] = read_program(spec, depth)
        return built[(spec, depth)]

    spec = draw_spec(source, rng, target_nodes)
    for _ in range(FIT_TRIES - 1 if source == "xla" else 0):
        if program(spec, 1).num_nodes <= 1.5 * target_nodes:
            break
        spec = draw_spec(source, rng, target_nodes)
    n1, n2 = program(spec, 1).num_nodes, program(spec, 2).num_nodes
    slope = max(n2 - n1, 1)
    depth = int(np.clip(round(1 + (target_nodes - n1) / slope), 1, MAX_DEPTH[spec.family]))
    return program(spec, depth)


def zoo_examples() -> dict[str, tuple[ZooSpec, int]]:
    """One small program per family, and training steps (one in a loop): for tests and inspection."""
    return {
        "mlp": (ZooSpec("mlp", "f32", 16, 64, 32, norm=True), 2),
        "resnet": (ZooSpec("resnet", "bf16", 4, 8, 16, levels=2), 1),
        "transformer": (ZooSpec("transformer", "f32", 2, 64, 16, heads=4, classes=2), 2),
        "unet": (ZooSpec("unet", "f32", 1, 8, 16, levels=2, classes=2), 1),
        "mlp_train": (ZooSpec("mlp", "f32", 16, 64, 32, train=True, optimizer="adam"), 2),
        "resnet_train_loop": (ZooSpec("resnet", "f32", 2, 8, 16, levels=2, train=True, steps=3), 1),
    }


# ----------------------------------------------------------------------------------------------------------------
# The models, in plain jax (no framework): parameters are pytrees of abstract arrays.
# ----------------------------------------------------------------------------------------------------------------


def _program(spec: ZooSpec, depth: int) -> tuple[Callable, tuple]:
    """The function to lower and its abstract arguments."""
    import jax
    import jax.numpy as jnp

    dt = {"f32": jnp.float32, "bf16": jnp.bfloat16, "f16": jnp.float16}[spec.dtype]
    params, x, forward, target = _MODELS[spec.family](spec, depth, dt)
    if not spec.train:
        return forward, (params, x)

    def loss(p, xb, yb):
        out = forward(p, xb).astype(jnp.float32)
        if yb.dtype == jnp.int32:  # class labels: softmax cross-entropy
            out = out - jax.lax.stop_gradient(out.max(axis=-1, keepdims=True))
            logp = out - jnp.log(jnp.exp(out).sum(axis=-1, keepdims=True))
            return -jnp.take_along_axis(logp, yb[:, None], axis=-1).mean()
        return jnp.square(out - yb.astype(jnp.float32)).mean()

    def update(p, state, xb, yb):
        value, grads = jax.value_and_grad(loss)(p, xb, yb)
        count, m, v = state
        count = count + 1
        if spec.optimizer == "adam":
            m = jax.tree.map(lambda a, g: 0.9 * a + 0.1 * g, m, grads)
            v = jax.tree.map(lambda a, g: 0.999 * a + 0.001 * g * g, v, grads)
            c1, c2 = 1 - 0.9 ** count.astype(jnp.float32), 1 - 0.999 ** count.astype(jnp.float32)
            p = jax.tree.map(lambda w, a, b: (w - 1e-3 * (a / c1) / (jnp.sqrt(b / c2) + 1e-8)).astype(w.dtype),
                             p, m, v)
        else:
            m = jax.tree.map(lambda a, g: 0.9 * a + g, m, grads)
            p = jax.tree.map(lambda w, a: (w - 0.01 * a).astype(w.dtype), p, m)
        return value, p, (count, m, v)

    def step(p, state, xb, yb):
        if not spec.steps:
            return update(p, state, xb, yb)

        def body(_, carry):
            _, q, s = carry
            return update(q, s, xb, yb)

        return jax.lax.fori_loop(0, spec.steps, body, (jnp.zeros((), jnp.float32), p, state))

    state = (jax.ShapeDtypeStruct((), jnp.int32), params,
             params if spec.optimizer == "adam" else jax.tree.map(lambda a: jax.ShapeDtypeStruct((), a.dtype), params))
    return step, (params, state, x, target)


def _mlp(spec: ZooSpec, depth: int, dt) -> tuple:
    import jax
    import jax.numpy as jnp

    S = jax.ShapeDtypeStruct
    dims = [spec.size] + [spec.width] * depth + [spec.classes]
    params = [(S((a, b), dt), S((b,), dt), S((b,), dt)) for a, b in zip(dims[:-1], dims[1:], strict=True)]

    def forward(p, x):
        for k, (w, b, g) in enumerate(p):
            x = x @ w + b
            if k < len(p) - 1:
                x = jnp.maximum(x, 0)
                if spec.norm:
                    x = _layernorm(x, g)
        return x

    return params, S((spec.batch, spec.size), dt), forward, S((spec.batch,), jnp.int32)


def _layernorm(x, g):
    import jax.numpy as jnp

    mu = x.mean(axis=-1, keepdims=True)
    var = jnp.square(x - mu).mean(axis=-1, keepdims=True)
    return (x - mu) * (1.0 / jnp.sqrt(var + 1e-5)).astype(x.dtype) * g


def _conv(x, w, stride: int = 1, nchw: bool = False, transpose: bool = False):
    from jax import lax

    dn = ("NCHW", "OIHW", "NCHW") if nchw else ("NHWC", "HWIO", "NHWC")
    if transpose:
        return lax.conv_transpose(x, w, (stride, stride), "SAME", dimension_numbers=dn)
    return lax.conv_general_dilated(x, w, (stride, stride), "SAME", dimension_numbers=dn)


def _batchnorm(x, g, b, axes):
    import jax.numpy as jnp

    mu = x.mean(axis=axes, keepdims=True)
    var = jnp.square(x - mu).mean(axis=axes, keepdims=True)
    shape = [1] * x.ndim
    shape[1 if axes == (0, 2, 3) else -1] = g.shape[0]
    return (x - mu) / jnp.sqrt(var + 1e-5) * g.reshape(shape) + b.reshape(shape)


def _maxpool(x, nchw: bool):
    import jax.numpy as jnp
    from jax import lax

    win = (1, 1, 2, 2) if nchw else (1, 2, 2, 1)
    return lax.reduce_window(x, -jnp.inf, lax.max, win, win, "VALID")


def _kernel(S, k: int, cin: int, cout: int, dt, nchw: bool):
    return S((cout, cin, k, k) if nchw else (k, k, cin, cout), dt)


def _resnet(spec: ZooSpec, depth: int, dt) -> tuple:
    import jax
    import jax.numpy as jnp

    S, nchw = jax.ShapeDtypeStruct, spec.nchw
    axes = (0, 2, 3) if nchw else (0, 1, 2)
    c = spec.width
    params: dict = {"stem": _kernel(S, 3, 3, c, dt, nchw), "stages": []}
    cin = c
    for s in range(spec.levels):
        cout = c * 2 ** s
        blocks = []
        for b in range(depth):
            blk = {"w1": _kernel(S, 3, cin, cout, dt, nchw), "w2": _kernel(S, 3, cout, cout, dt, nchw),
                   "g1": S((cout,), dt), "b1": S((cout,), dt), "g2": S((cout,), dt), "b2": S((cout,), dt)}
            if b == 0 and s > 0:
                blk["proj"] = _kernel(S, 1, cin, cout, dt, nchw)
            blocks.append(blk)
            cin = cout
        params["stages"].append(blocks)
    params["head"] = (S((cin, spec.classes), dt), S((spec.classes,), dt))

    def forward(p, x):
        x = jnp.maximum(_conv(x, p["stem"], 1, nchw), 0)
        x = _maxpool(x, nchw)
        for s, blocks in enumerate(p["stages"]):
            for b, blk in enumerate(blocks):
                stride = 2 if b == 0 and s > 0 else 1
                y = jnp.maximum(_batchnorm(_conv(x, blk["w1"], stride, nchw), blk["g1"], blk["b1"], axes), 0)
                y = _batchnorm(_conv(y, blk["w2"], 1, nchw), blk["g2"], blk["b2"], axes)
                skip = _conv(x, blk["proj"], stride, nchw) if "proj" in blk else x
                x = jnp.maximum(y + skip, 0)
        pooled = x.mean(axis=(2, 3) if nchw else (1, 2))
        return pooled @ p["head"][0] + p["head"][1]

    shape = (spec.batch, 3, spec.size, spec.size) if nchw else (spec.batch, spec.size, spec.size, 3)
    return params, S(shape, dt), forward, S((spec.batch,), jnp.int32)


def _unet(spec: ZooSpec, depth: int, dt) -> tuple:
    import jax
    import jax.numpy as jnp

    S = jax.ShapeDtypeStruct
    axes = (0, 1, 2)

    def block(cin: int, cout: int) -> list:
        return [(_kernel(S, 3, cin if k == 0 else cout, cout, dt, False), S((cout,), dt), S((cout,), dt))
                for k in range(depth)]

    chans = [spec.width * 2 ** k for k in range(spec.levels + 1)]
    params: dict = {"down": [], "up": []}
    cin = 3
    for c in chans[:-1]:
        params["down"].append(block(cin, c))
        cin = c
    params["bottom"] = block(cin, chans[-1])
    for c_hi, c in zip(chans[:0:-1], chans[-2::-1], strict=True):
        params["up"].append({"t": _kernel(S, 2, c_hi, c, dt, False), "conv": block(2 * c, c)})
    params["head"] = _kernel(S, 1, chans[0], spec.classes, dt, False)

    def run(x, blk):
        for w, g, b in blk:
            x = jnp.maximum(_batchnorm(_conv(x, w), g, b, axes), 0)
        return x

    def forward(p, x):
        skips = []
        for blk in p["down"]:
            x = run(x, blk)
            skips.append(x)
            x = _maxpool(x, False)
        x = run(x, p["bottom"])
        for up, skip in zip(p["up"], skips[::-1], strict=True):
            x = _conv(x, up["t"], 2, transpose=True)
            x = run(jnp.concatenate([x, skip], axis=-1), up["conv"])
        return _conv(x, p["head"])

    shape = (spec.batch, spec.size, spec.size)
    return params, S((*shape, 3), dt), forward, S((*shape, spec.classes), dt)


def _transformer(spec: ZooSpec, depth: int, dt) -> tuple:
    import jax
    import jax.numpy as jnp

    S = jax.ShapeDtypeStruct
    h, heads, seq = spec.width, spec.heads, spec.size
    dh = h // heads
    layer = {"qkv": S((h, 3 * h), dt), "bqkv": S((3 * h,), dt), "o": S((h, h), dt), "g1": S((h,), dt),
             "f1": S((h, 4 * h), dt), "bf1": S((4 * h,), dt), "f2": S((4 * h, h), dt), "g2": S((h,), dt)}
    params = {"tok": S((1000, h), dt), "pos": S((seq, h), dt), "layers": [dict(layer) for _ in range(depth)],
              "head": S((h, spec.classes), dt)}

    def attention(x, lp):
        b = x.shape[0]
        qkv = (x @ lp["qkv"] + lp["bqkv"]).reshape(b, seq, 3, heads, dh)
        q, k, v = (qkv[:, :, i].transpose(0, 2, 1, 3) for i in range(3))
        scores = jnp.einsum("bhqd,bhkd->bhqk", q, k) / jnp.asarray(np.sqrt(dh), x.dtype)
        scores = jnp.exp(scores - scores.max(axis=-1, keepdims=True))
        probs = scores / scores.sum(axis=-1, keepdims=True)
        ctx = jnp.einsum("bhqk,bhkd->bhqd", probs, v).transpose(0, 2, 1, 3).reshape(b, seq, h)
        return ctx @ lp["o"]

    def forward(p, tokens):
        x = jnp.take(p["tok"], tokens, axis=0) + p["pos"]
        for lp in p["layers"]:
            x = _layernorm(x + attention(x, lp), lp["g1"])
            y = x @ lp["f1"] + lp["bf1"]
            y = 0.5 * y * (1 + jnp.tanh(0.7978845608 * (y + 0.044715 * y * y * y)))
            x = _layernorm(x + y @ lp["f2"], lp["g2"])
        return x[:, 0] @ p["head"]

    return params, S((spec.batch, seq), jnp.int32), forward, S((spec.batch,), jnp.int32)


_MODELS: dict[str, Callable] = {"mlp": _mlp, "resnet": _resnet, "transformer": _transformer, "unet": _unet}
