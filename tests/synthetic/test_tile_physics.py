"""Tile runtime model (hand-computed configs, on-chip penalty, sampling) and the measurement noise.

Config bounds count hardware tiles (:mod:`competition.hlo.tiles`): a bound ``b`` on a dim of granule ``g`` covers
``min(b * g, size)`` elements.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from competition.hlo.ir import Computation, ConvDims, DotDims, Module, Shape
from competition.hlo.tiles import granules, tile_sizes, tile_units
from competition.synthetic.physics import (
    HBM_BYTES_PER_NS,
    ONCHIP_BYTES,
    PEAK_FLOPS_PER_NS,
    VECTOR_FLOPS_PER_NS,
    measure,
)
from competition.synthetic.tile_physics import (
    HALO,
    KERNEL_LAUNCH_NS,
    SAMPLE_STEPS,
    SPILL_SLOPE,
    TILE_OVERHEAD_NS,
    WIDE_STEPS,
    TileProblem,
)

NHWC = ConvDims(input_batch=0, input_feature=3, input_spatial=(1, 2), kernel_input_feature=2,
                kernel_output_feature=3, kernel_spatial=(0, 1), output_batch=0, output_feature=3,
                output_spatial=(1, 2))


def _elementwise(dims: tuple[int, ...], ops: int = 2) -> Module:
    """Two f32 parameters -> add -> ``ops - 1`` exponentials (the last the root): ``ops`` vector ops."""
    c = Computation("fused")
    x = c.add("parameter", Shape("f32", dims), parameter_number=0)
    y = c.add("parameter", Shape("f32", dims), parameter_number=1)
    z = c.add("add", Shape("f32", dims), (x, y))
    for _ in range(ops - 1):
        z = c.add("exponential", Shape("f32", dims), (z,))
    return Module("ew", [c])


def _conv(b: int, h: int, cin: int, cout: int) -> Module:
    c = Computation("fused")
    x = c.add("parameter", Shape("bf16", (b, h, h, cin)), parameter_number=0)
    w = c.add("parameter", Shape("bf16", (3, 3, cin, cout)), parameter_number=1)
    c.add("convolution", Shape("bf16", (b, h, h, cout)), (x, w), conv_dims=NHWC)
    return Module("conv", [c])


def _row(out: list[int], kernel: list[int] = ()) -> np.ndarray:
    """A config row: kernel bounds in 0-5 (sum 6, product 7), output bounds in 8-13 (sum 14, product 15)."""
    f = np.zeros(24, dtype=np.float32)
    f[8: 8 + len(out)] = out
    f[14], f[15] = sum(out), math.prod(out)
    if kernel:
        f[0: len(kernel)] = kernel
        f[6], f[7] = sum(kernel), math.prod(kernel)
    return f


def _by_hand(p: TileProblem, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(working set bytes, steps) of config rows, from the module docstring: element tiles ``min(b * g, size)``;
    steps = output tiles x kernel chunks (free kernel dims); the double-buffered working set holds the output tile
    padded to granules, its share of the other operands, and for a matrix kernel the input's share (the output
    tile's major dims, times the kernel chunk's share) and the kernel chunk."""
    rows = np.asarray(rows, dtype=np.float64).reshape(-1, 24)
    dims = np.asarray(p.out_dims, dtype=np.float64)
    g = np.asarray(granules(len(p.out_dims)), dtype=np.float64)
    tiles = np.minimum(rows[:, 8: 8 + dims.size] * g, dims)
    steps = np.ceil(dims / tiles).prod(axis=1) * p.lead
    ws = np.ceil(tiles / g).prod(axis=1) * g.prod() * p.itemsize + tiles.prod(axis=1) / dims.prod() * p.other_bytes
    if p.kernel_dims:
        kd = np.asarray(p.kernel_dims, dtype=np.float64)
        kt = np.minimum(rows[:, : kd.size] * np.asarray(granules(kd.size)), kd)
        steps = steps * np.ceil(kd / kt)[:, p.kernel_free].prod(axis=1)
        kshare = (kt / kd).prod(axis=1)
        major = tiles[:, :-1].prod(axis=1) / dims[:-1].prod()
        ws = ws + p.input_bytes / p.lead * major * kshare + kd.prod() * p.kernel_itemsize * kshare
    return 2 * ws, steps


def _body(compute: float, memory: float, steps: float) -> float:
    """A double-buffered pipeline of ``steps`` steps: all but the first load and the last compute overlap."""
    return max(compute, memory) + min(compute, memory) / steps


def test_hand_computed_tile_runtime() -> None:
    """time = launch + (steps' overhead + max(C, T) + min(C, T) / steps) * spill, step by step."""
    # Elementwise f32 [16, 300], 200 vector ops (add + 199 exponentials) per element: units [16/8, ceil(300/128)]
    # = [2, 3]. Operands 2 x 16 x 300 x 4 = 38400 bytes, output 19200 bytes, 4800 elements.
    p = TileProblem.from_kernel(_elementwise((16, 300), ops=200))
    assert p.out_units == [2, 3] and p.other_bytes == 38400 and p.out_bytes == 19200 and p.vector_ops == 200
    # Padded compute is the same for every config: dim 0 is 16 elements (whole granules); dim 1 is whole tiles of
    # 128 or 256 plus a last partial tile of 44 elements padded to its own granule, 128: 384 (not 512).
    padded = 16 * 384
    compute = 200 * padded / VECTOR_FLOPS_PER_NS  # 99.8 ns: more than the traffic, so compute-bound
    # [1, 2]: tiles of 8 x 256 elements: 2 x 2 = 4 tiles, one step each; 3 extra tiles re-read a halo.
    # Working set 2 x (8*256*4 + 2048/4800 * 38400) = 49152 bytes: no spill.
    t_a = KERNEL_LAUNCH_NS + 4 * TILE_OVERHEAD_NS + _body(compute, (19200 + 38400 * (1 + 3 * HALO)) / HBM_BYTES_PER_NS, 4)
    # [1, 1]: 8 x 128: 2 x 3 = 6 tiles, 5 halos.
    t_b = KERNEL_LAUNCH_NS + 6 * TILE_OVERHEAD_NS + _body(compute, (19200 + 38400 * (1 + 5 * HALO)) / HBM_BYTES_PER_NS, 6)
    # [2, 3]: the whole 16 x 300 in one tile, no halo.
    # One step: nothing overlaps, the load and the compute add up.
    t_c = KERNEL_LAUNCH_NS + 1 * TILE_OVERHEAD_NS + compute + (19200 + 38400) / HBM_BYTES_PER_NS
    assert compute > (19200 + 38400 * (1 + 5 * HALO)) / HBM_BYTES_PER_NS
    rows = np.stack([_row([1, 2]), _row([1, 1]), _row([2, 3])])
    np.testing.assert_allclose(p.runtime_ns(rows), [t_a, t_b, t_c], rtol=1e-9)
    ws, _ = _by_hand(p, rows)
    np.testing.assert_allclose(ws, [49152, 2 * (8 * 128 * 4 + 1024 / 4800 * 38400), 2 * (16 * 384 * 4 + 38400)])
    # With 2 vector ops the same kernel is memory-bound.
    q = TileProblem.from_kernel(_elementwise((16, 300)))
    np.testing.assert_allclose(q.runtime_ns(rows[:1]),
                               [KERNEL_LAUNCH_NS + 4 * TILE_OVERHEAD_NS
                                + (19200 + 38400 * (1 + 3 * HALO)) / HBM_BYTES_PER_NS
                                + 2 * padded / VECTOR_FLOPS_PER_NS / 4], rtol=1e-9)

    # Convolution, bf16: input [8,10,10,64] (102400 bytes), kernel [3,3,64,256] (294912 bytes), output
    # [8,10,10,256] (409600 bytes, 204800 elements); matrix work 2 x 204800 x (3*3*64) = 235929600 flops.
    # Output units [8, 10, ceil(10/8), 256/128] = [8,10,2,2]; kernel units [3,3,64/8,256/128] = [3,3,8,2], the last
    # (output feature) tied to the output's most-minor bound, the other three chunked freely.
    c = TileProblem.from_kernel(_conv(8, 10, 64, 256))
    assert c.out_units == [8, 10, 2, 2] and c.kernel_units == [3, 3, 8, 2]
    assert c.kernel_free == [0, 1, 2] and c.kernel_tied == 3 and c.kernel_spatial == [0, 1]
    assert c.matrix_flops == 235929600 and c.input_bytes == 102400 and c.other_bytes == 0 and c.vector_ops == 0
    # Padding: the output's dim of 10 is one whole granule of 8 and a last partial tile of 2 padded to 8 (or one tile
    # of 10 padded to 16): 16/10; every kernel chunk is whole granules. Compute-bound work at peak:
    conv_compute = 235929600 * (16 / 10) / PEAK_FLOPS_PER_NS  # 1916.2 ns
    # Row A: output [1,5,1,1] = tiles of 1x5x8x128: 8 x 2 x 2 x 2 = 64 tiles; kernel [3,1,4,1]: chunks of 3x1x32
    # (x128 tied): 1 x 3 x 2 = 6 chunks a tile. Steps: 64 x 6 = 384, each at the full step cost.
    steps_a = 384 * TILE_OVERHEAD_NS
    # Traffic: output once; the input once per tile of the output's most-minor dim (2) and per chunk of the spatial
    # window (1 x 3: the kernel width is cut in three); the kernel once per tile of the other output dims
    # (8 x 2 x 2 = 32).
    traffic_a = 409600 + 102400 * 2 * 3 + 294912 * 32
    t_conv_a = KERNEL_LAUNCH_NS + steps_a + _body(conv_compute, traffic_a / HBM_BYTES_PER_NS, 384)  # memory-bound
    # Row B: output [8,10,2,1] = 8x10x10x128: 2 tiles; the whole kernel in one chunk [3,3,8,1]: 2 steps.
    traffic_b = 409600 + 102400 * 2 + 294912 * 1
    t_conv_b = KERNEL_LAUNCH_NS + 2 * TILE_OVERHEAD_NS + _body(conv_compute, traffic_b / HBM_BYTES_PER_NS, 2)
    assert traffic_a / HBM_BYTES_PER_NS > conv_compute > traffic_b / HBM_BYTES_PER_NS
    conv_rows = np.stack([_row([1, 5, 1, 1], [3, 1, 4, 1]), _row([8, 10, 2, 1], [3, 3, 8, 1])])
    # Working sets: A 2 x (5120 x 2 + 102400 x 40/800 x 1/12 + 294912 / 12); B 2 x (8x10x16x128 x 2 + 102400 x 1/2
    # + 294912 / 2): both far below on-chip memory, so no spill.
    ws, steps = _by_hand(c, conv_rows)
    np.testing.assert_allclose(ws, [2 * (10240 + 102400 * 0.05 / 12 + 24576), 2 * (327680 + 51200 + 147456)])
    assert steps.tolist() == [384, 2] and ws.max() < ONCHIP_BYTES
    np.testing.assert_allclose(c.runtime_ns(conv_rows), [t_conv_a, t_conv_b], rtol=1e-9)
    # Row C: output [1,10,2,1] = 1x10x10x128: 8 x 2 = 16 tiles, 8 of the other output dims; the whole kernel in
    # one chunk stays on chip across them, so it is read once, not 8 times. Row D: the same output tiles with the
    # contracting dim in two chunks [3,3,4,1]: 32 steps, and the kernel is read again for each of the 8.
    traffic_c = 409600 + 102400 * 2 + 294912 * 1
    t_conv_c = KERNEL_LAUNCH_NS + 16 * TILE_OVERHEAD_NS + _body(conv_compute, traffic_c / HBM_BYTES_PER_NS, 16)
    traffic_d = 409600 + 102400 * 2 + 294912 * 8
    t_conv_d = KERNEL_LAUNCH_NS + 32 * TILE_OVERHEAD_NS + _body(conv_compute, traffic_d / HBM_BYTES_PER_NS, 32)
    resident = np.stack([_row([1, 10, 2, 1], [3, 3, 8, 1]), _row([1, 10, 2, 1], [3, 3, 4, 1])])
    assert _by_hand(c, resident)[1].tolist() == [16, 32]
    np.testing.assert_allclose(c.runtime_ns(resident), [t_conv_c, t_conv_d], rtol=1e-9)
    # Row E: row B's output tiles with the kernel width cut in chunks of 2 [3,2,8,1]: two chunks of the window
    # (2 + 1), 4 steps, the input read once per chunk of the window. The last, partial chunk is computed whole
    # (masked), so the matrix work is 4/3 of the kernel's, not the 3/3 its elements would cost.
    traffic_e = 409600 + 102400 * 2 * 2 + 294912 * 1
    t_conv_e = KERNEL_LAUNCH_NS + 4 * TILE_OVERHEAD_NS + _body(conv_compute * 4 / 3, traffic_e / HBM_BYTES_PER_NS, 4)
    partial = _row([8, 10, 2, 1], [3, 2, 8, 1])[None]
    assert _by_hand(c, partial)[1].tolist() == [4]
    np.testing.assert_allclose(c.runtime_ns(partial), [t_conv_e], rtol=1e-9)


def test_bigger_than_onchip_is_penalised() -> None:
    p = TileProblem.from_kernel(_elementwise((4096, 4096)))
    assert p.out_units == [512, 32]
    whole, split = _row([512, 32]), _row([8, 32])  # 4096 x 4096 elements; 64 x 4096
    r_whole, r_split = p.runtime_ns(np.stack([whole, split]))
    # Whole tile: double-buffered output tile + both operands = 2 x 3 x 64 MiB = 24 x on-chip memory.
    spill = 1 + SPILL_SLOPE * math.log2(2 * 3 * 4096 * 4096 * 4 / ONCHIP_BYTES)
    unspilled = TILE_OVERHEAD_NS + 2 * 4096**2 / VECTOR_FLOPS_PER_NS + 3 * 4096**2 * 4 / HBM_BYTES_PER_NS
    assert r_whole == pytest.approx(KERNEL_LAUNCH_NS + unspilled * spill, rel=1e-9)
    # 64 x 4096 tiles fit (2 x 3 x 1 MiB), despite 63 extra halo re-reads.
    assert r_split == pytest.approx(KERNEL_LAUNCH_NS + 64 * TILE_OVERHEAD_NS
                                    + (4096**2 * 4 + 2 * 4096**2 * 4 * (1 + 63 * HALO)) / HBM_BYTES_PER_NS
                                    + 2 * 4096**2 / VECTOR_FLOPS_PER_NS / 64, rel=1e-9)
    assert r_whole > 3 * r_split
    # A search never measures a config that does not fit (the compiler refuses it): every sampled config's working
    # set is within max(on-chip, the default's). The grid is small enough that the search returns all it allows,
    # which are exactly the grid's combos that fit and take at most SAMPLE_STEPS x the default's steps.
    d_ws, d_steps = _by_hand(p, p.default_config())
    limit = max(ONCHIP_BYTES, d_ws[0])
    assert d_ws[0] <= ONCHIP_BYTES
    for wide in (False, True):
        f = p.sample_configs(100_000, np.random.default_rng(0), wide=wide)
        ws, steps = _by_hand(p, f)
        assert ws.max() <= limit and steps.max() <= SAMPLE_STEPS * d_steps[0]
        assert not np.any(np.all(f == whole, axis=1))
        sizes = [tile_sizes(u, WIDE_STEPS if wide else ()) for u in p.out_units]
        grid = np.stack([_row([a, b]) for a in sizes[0] for b in sizes[1]])
        g_ws, g_steps = _by_hand(p, grid)
        allowed = grid[(g_ws <= limit) & (g_steps <= SAMPLE_STEPS * d_steps[0])]
        assert (g_ws > limit).sum() > 0 and len(allowed) < len(grid)
        assert len(f) == len(allowed) == p.config_space(wide=wide)
        assert {r.tobytes() for r in f} == {r.tobytes() for r in allowed}
    # The same holds for a convolution's sampled configs (kernel chunks count in the working set and steps).
    c = TileProblem.from_kernel(_conv(8, 56, 256, 256))
    f = c.sample_configs(3000, np.random.default_rng(1), wide=True)
    ws, steps = _by_hand(c, f)
    d_ws, d_steps = _by_hand(c, c.default_config())
    assert ws.max() <= max(ONCHIP_BYTES, d_ws[0]) and steps.max() <= SAMPLE_STEPS * d_steps[0]


def test_sampled_configs() -> None:
    rng = np.random.default_rng(0)
    p = TileProblem.from_kernel(_conv(8, 28, 64, 256))
    f = p.sample_configs(100, rng)
    assert f.dtype == np.float32 and f.shape == (100, 24)
    assert len(np.unique(f, axis=0)) == len(f)
    d = p.default_config()
    assert np.any(np.all(f == d, axis=1))
    assert np.all(f[:, 16:] == 0)  # input_bounds left to the compiler
    np.testing.assert_array_equal(f[:, 14], f[:, 8:14].sum(axis=1))
    np.testing.assert_array_equal(f[:, 15], np.prod(f[:, 8:12], axis=1))
    np.testing.assert_array_equal(f[:, 6], f[:, 0:6].sum(axis=1))
    np.testing.assert_array_equal(f[:, 7], np.prod(f[:, 0:4], axis=1))
    # Bounds are whole units, 1 to the dim's units: output [8,28,28,256] -> [8,28,4,2]; kernel [3,3,64,256] ->
    # [3,3,8,2], all four kernel dims bounded.
    out_units, kernel_units = tile_units((8, 28, 28, 256)), tile_units((3, 3, 64, 256))
    assert out_units == [8, 28, 4, 2] and kernel_units == [3, 3, 8, 2]
    assert np.all(f == np.round(f)) and np.all(f[:, 12:14] == 0) and np.all(f[:, 4:6] == 0)
    assert np.all((f[:, 8:12] >= 1) & (f[:, 8:12] <= out_units))
    assert np.all((f[:, 0:4] >= 1) & (f[:, 0:4] <= kernel_units))
    # The kernel's output-feature dim (its most-minor, 128 elements a unit like the output's) follows the output
    # tile's most-minor bound; the free dims vary on their own.
    np.testing.assert_array_equal(f[:, 3], f[:, 11])
    assert all(len(np.unique(f[:, j])) > 1 for j in (0, 1, 2, 8, 9, 10, 11))
    r = p.runtime_ns(f)
    dflt = p.runtime_ns(d[None])[0]
    assert r.min() <= dflt and r.max() / dflt > 1.2
    # A dot whose kernel [1024, 1000] is laid out {0,1}: physical [1000, 1024], the output feature (1000) its major
    # dim, in units of 8. Its bound covers the output tile's minor dim (output [512, 1000] -> units [64, 8]):
    # ceil(min(b x 128, 1000) / 8) = 16, 32, 64 or 125 for b = 1, 2, 4, 8, as in the real record fusion.205.
    c = Computation("fused")
    x = c.add("parameter", Shape("f32", (512, 1024)), parameter_number=0)
    w = c.add("parameter", Shape("f32", (1024, 1000), minor_to_major=(0, 1)), parameter_number=1)
    c.add("dot", Shape("f32", (512, 1000)), (x, w), dot_dims=DotDims((1,), (0,)))
    q = TileProblem.from_kernel(Module("dot", [c]))
    assert q.kernel_dims == (1000, 1024) and q.kernel_tied == 0 and q.kernel_units == [125, 8]
    tied = {1: 16, 2: 32, 4: 64, 8: 125}
    # Its grid: output bounds 1..64 x 1..8 (powers of two), contracting chunks 1..8: 7 x 4 x 4 = 112 combos, of
    # which the search measures those within on-chip memory and SAMPLE_STEPS x the default's steps: all of them
    # when it asks for more.
    grid = np.stack([_row([a, b], [tied[b], k]) for a in tile_sizes(64) for b in tile_sizes(8) for k in tile_sizes(8)])
    g_ws, g_steps = _by_hand(q, grid)
    d_ws, d_steps = _by_hand(q, q.default_config())
    allowed = grid[(g_ws <= max(ONCHIP_BYTES, d_ws[0])) & (g_steps <= SAMPLE_STEPS * d_steps[0])]
    g = q.sample_configs(200, rng)
    assert len(grid) == 112 and len(np.unique(g, axis=0)) == len(g) == q.config_space() == len(allowed) < 112
    assert {r.tobytes() for r in g} == {r.tobytes() for r in allowed}
    assert np.all((g[:, 8:10] >= 1) & (g[:, 8:10] <= [64, 8])) and np.all((g[:, 0:2] >= 1) & (g[:, 0:2] <= [125, 8]))
    assert set(g[:, 9].tolist()) == set(tied)
    assert g[:, 0].tolist() == [tied[int(b)] for b in g[:, 9]]
    # A non-conv kernel has no kernel bounds: all 0, product 0 for the empty list. [16, 256] f32 has units [2, 2]:
    # its four configs, all of them; [2, 4] is one unit each way: only its default.
    e = TileProblem.from_kernel(_elementwise((16, 256))).sample_configs(50, rng)
    assert np.all(e[:, :8] == 0) and sorted(e[:, 8:10].tolist()) == [[1, 1], [1, 2], [2, 1], [2, 2]]
    one = TileProblem.from_kernel(_elementwise((2, 4)))
    assert one.config_space() == one.config_space(wide=True) == 1
    np.testing.assert_array_equal(one.sample_configs(50, rng), one.default_config()[None])
    np.testing.assert_array_equal(one.default_config(), _row([1, 1]))


def test_dot_kernel() -> None:
    c = Computation("fused")
    x = c.add("parameter", Shape("f32", (512, 1024)), parameter_number=0)
    w = c.add("parameter", Shape("f32", (1024, 256)), parameter_number=1)
    c.add("dot", Shape("f32", (512, 256)), (x, w), dot_dims=DotDims((1,), (0,)))
    p = TileProblem.from_kernel(Module("dot", [c]))
    assert p.kernel_dims == (1024, 256)
    f = p.sample_configs(30, np.random.default_rng(1))
    assert np.all(np.isfinite(p.runtime_ns(f))) and np.all(p.runtime_ns(f) > 0)


def test_measure_noise() -> None:
    rng = np.random.default_rng(42)
    true = np.full(200_000, 3e6)
    a, b = measure(true, rng), measure(true, rng)
    assert a.dtype == np.int64
    rel = np.abs(a - b) / true
    assert 0.00025 < np.median(rel) < 0.00035
    assert rel.max() < 0.0021
