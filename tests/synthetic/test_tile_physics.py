"""Tile runtime model (hand-computed configs, on-chip penalty, sampling) and the measurement noise."""

from __future__ import annotations

import math

import numpy as np
import pytest

from competition.hlo.ir import Computation, ConvDims, DotDims, Module, Shape
from competition.synthetic.physics import HBM_BYTES_PER_NS, ONCHIP_BYTES, VECTOR_FLOPS_PER_NS, measure
from competition.synthetic.tile_physics import HALO, SPILL_SLOPE, TILE_OVERHEAD_NS, TileProblem

NHWC = ConvDims(input_batch=0, input_feature=3, input_spatial=(1, 2), kernel_input_feature=2,
                kernel_output_feature=3, kernel_spatial=(0, 1), output_batch=0, output_feature=3,
                output_spatial=(1, 2))


def _elementwise(dims: tuple[int, ...]) -> Module:
    """Two f32 parameters -> add -> exponential (root)."""
    c = Computation("fused")
    x = c.add("parameter", Shape("f32", dims), parameter_number=0)
    y = c.add("parameter", Shape("f32", dims), parameter_number=1)
    z = c.add("add", Shape("f32", dims), (x, y))
    c.add("exponential", Shape("f32", dims), (z,))
    return Module("ew", [c])


def _conv(b: int, h: int, cin: int, cout: int) -> Module:
    c = Computation("fused")
    x = c.add("parameter", Shape("bf16", (b, h, h, cin)), parameter_number=0)
    w = c.add("parameter", Shape("bf16", (3, 3, cin, cout)), parameter_number=1)
    c.add("convolution", Shape("bf16", (b, h, h, cout)), (x, w), conv_dims=NHWC)
    return Module("conv", [c])


def _row(out: list[int]) -> np.ndarray:
    f = np.zeros(24, dtype=np.float32)
    f[8: 8 + len(out)] = out
    f[14], f[15] = sum(out), math.prod(out)
    return f


def test_hand_computed_tile_runtime() -> None:
    p = TileProblem.from_kernel(_elementwise((16, 200)))
    # Operands 2 x 16x200x4 = 25600 bytes, output 12800 bytes, 2 vector ops per output element.
    # [8,128]: 2 x 2 = 4 tiles of 8x128 padded elements (4096 for 3200 real), 3 extra tiles re-read a halo.
    t1 = 4 * TILE_OVERHEAD_NS + max(2 * 3200 * (4096 / 3200) / VECTOR_FLOPS_PER_NS,
                                    (12800 + 25600 * (1 + HALO * 3)) / HBM_BYTES_PER_NS)
    # [16,200]: 1 tile of 16 x 256 padded (4096 again), no halo.
    t2 = 1 * TILE_OVERHEAD_NS + max(2 * 4096 / VECTOR_FLOPS_PER_NS, (12800 + 25600) / HBM_BYTES_PER_NS)
    np.testing.assert_allclose(p.runtime_ns(np.stack([_row([8, 128]), _row([16, 200])])), [t1, t2], rtol=1e-12)


def test_bigger_than_onchip_is_penalised() -> None:
    p = TileProblem.from_kernel(_elementwise((4096, 4096)))
    whole, split = _row([4096, 4096]), _row([64, 4096])
    r_whole, r_split = p.runtime_ns(np.stack([whole, split]))
    # Whole tile: double-buffered output tile + both operands = 2 x 3 x 64 MiB = 24 x on-chip memory.
    spill = 1 + SPILL_SLOPE * math.log2(2 * 3 * 4096 * 4096 * 4 / ONCHIP_BYTES)
    unspilled = TILE_OVERHEAD_NS + max(2 * 4096**2 / VECTOR_FLOPS_PER_NS, 3 * 4096**2 * 4 / HBM_BYTES_PER_NS)
    assert r_whole == pytest.approx(unspilled * spill, rel=1e-12)
    assert r_whole > 3 * r_split  # 64 x 4096 tiles fit (2 x 3 x 1 MiB), despite 63 extra halo re-reads


def test_sampled_configs() -> None:
    rng = np.random.default_rng(0)
    p = TileProblem.from_kernel(_conv(8, 28, 64, 128))
    f = p.sample_configs(100, rng)
    assert f.dtype == np.float32 and f.shape[1] == 24 and 2 <= len(f) <= 100
    assert len(np.unique(f, axis=0)) == len(f)
    d = p.default_config()
    assert np.any(np.all(f == d, axis=1))
    assert np.all(f[:, 16:] == 0)  # input_bounds left to the compiler
    np.testing.assert_array_equal(f[:, 14], f[:, 8:14].sum(axis=1))
    np.testing.assert_array_equal(f[:, 15], np.prod(f[:, 8:12], axis=1))
    np.testing.assert_array_equal(f[:, 7], np.prod(f[:, 0:4], axis=1))
    r = p.runtime_ns(f)
    dflt = p.runtime_ns(d[None])[0]
    assert r.min() <= dflt and r.max() / dflt > 1.2
    # A non-conv kernel has no kernel bounds: all 0, product 0 for the empty list.
    e = TileProblem.from_kernel(_elementwise((2, 4))).sample_configs(50, rng)
    assert 2 <= len(e) <= 8 and np.all(e[:, :8] == 0)


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
