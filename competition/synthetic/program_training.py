"""The training step of the synthetic training programs (:func:`train_step`).

After the forward pass: the loss, the backward pass through the gradient tape, the weight gradients all-reduced
across devices, optionally clipped by their global norm and (f16) unscaled under dynamic loss scaling, and every
weight updated by its optimizer at a scheduled learning rate.

The optimizers are momentum, LARS, AdamW and LAMB (LARS and LAMB guard their trust ratios by compare / select);
the learning rate is chosen by a warm-up / decay ``conditional``; an f16 step checks its gradients with
``is-finite``, updates through a ``select`` per weight and slot, and updates the scale by a second conditional.
"""

from __future__ import annotations

from collections.abc import Callable

from competition.hlo.ir import Computation, Shape
from competition.synthetic.program_emitter import Emitter, Program
from competition.synthetic.program_layers import Net


def _conditional(prog: Program, e: Emitter, pred: int, args: list[int],
                 branches: dict[str, Callable[[Emitter, list[int]], list[int]]]) -> list[int]:
    """``tf.cond``: a ``conditional`` on ``pred`` whose branches are computations ``cond_true_N`` / ``cond_false_N``
    (``branches["true"]`` / ``["false"]`` build them from the get-tuple-elements of a tuple of ``args`` and return
    their results); the results' get-tuple-elements are returned."""
    uid = prog.uid()
    arg_shapes = tuple(e.sh(a) for a in args)
    names: list[str] = []
    out_shapes: tuple[Shape, ...] = ()
    for tag in ("true", "false"):
        comp = Computation(f"cond_{tag}_{uid}")
        be = Emitter(prog, comp)
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


def _learning_rate(prog: Program, e: Emitter, step: int) -> int:
    """This step's learning rate (f32 scalar): linear warm-up, then polynomial decay, chosen by a conditional on the
    step counter, as ``tf.cond`` lowers a schedule."""

    def warmup(be: Emitter, xs: list[int]) -> list[int]:
        return [be.ew("multiply", be.convert(xs[0], "f32"), be.const("f32", "warmup_slope"))]

    def decay(be: Emitter, xs: list[int]) -> list[int]:
        left = be.ew("subtract", be.const("f32", "one"),
                     be.ew("divide", be.convert(xs[0], "f32"), be.const("f32", "total_steps")))
        return [be.ew("multiply", be.const("f32", "base_lr"), be.ew("power", left, be.const("f32", "decay_power")))]

    pred = e.ew("compare", step, e.const("s32", "warmup_steps"))
    return _conditional(prog, e, pred, [step], {"true": warmup, "false": decay})[0]


def _all_axes(e: Emitter, x: int) -> tuple[int, ...]:
    return tuple(range(e.sh(x).rank))


def _optimizer(e: Emitter, kind: str, w: int, g: int, lr: int) -> tuple[int, dict[int, int]]:
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


def train_step(prog: Program, e: Emitter, net: Net, cfg: dict, out: int, counter: int) -> dict[int, int]:
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

        def grow(be: Emitter, xs: list[int]) -> list[int]:
            return [be.ew("multiply", xs[0], be.const("f32", "growth")), be.ew("add", xs[1], be.const("s32", "one"))]

        def shrink(be: Emitter, xs: list[int]) -> list[int]:
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
