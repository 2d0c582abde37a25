"""Fused tile kernels cut from the synthetic programs: a root (convolution, dot, reduce or elementwise) and the
fusible producers pulled in below it, the rest of its inputs becoming parameters.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from competition.hlo.ir import Computation, Module

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
        module: a program from :func:`competition.synthetic.programs.build_program`.
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
