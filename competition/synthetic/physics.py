"""The machine of the synthetic world: every constant of the runtime model, in one place.

The synthetic TPU-like machine (a score on it says nothing about the Kaggle leaderboard):

* A matrix unit with peak :data:`PEAK_FLOPS_PER_NS` (197 TFLOP/s) and high-bandwidth memory with
  :data:`HBM_BYTES_PER_NS` (820 GB/s).
* Arrays are stored in (8, 128) tiles over their two most-minor dimensions: the most-minor dimension is padded up to a
  multiple of :data:`LANE` (128) and the second-minor to a multiple of :data:`SUBLANE` (8). That padding is the
  *physical* size that memory traffic pays for (:func:`physical_elements`).
* An op's time is a roofline ``max(flops / peak * inefficiency, physical bytes / bandwidth) + LAUNCH_NS``
  (:func:`roofline_ns`); the matrix-unit inefficiency comes from layouts (layout model) or padded tiles (tile model).
* A copy (a layout change) costs its physical bytes read plus written over the bandwidth, plus a launch.
* Kernels keep a tile's working set in :data:`ONCHIP_BYTES` (16 MiB) of on-chip memory; beyond it they spill.
* Measurements are the true time times ``exp(e)``, ``e`` normal with sigma :data:`NOISE_SIGMA` clipped to
  :data:`NOISE_CLIP` sigmas: two measurements of one config then differ by a median of about 0.03% and at most
  ``2 * NOISE_CLIP * NOISE_SIGMA`` (about 0.2%), as duplicated configs do in the real records.
* A tile measurement times one kernel of microseconds, not a whole program of milliseconds, so it is far noisier
  (:func:`measure_tile`): a relative sigma :data:`TILE_NOISE_SIGMA` (re-measured configs differ by a few percent),
  plus an absolute timer jitter :data:`TILE_JITTER_NS` that dominates the shortest kernels, and on a busy host
  (:data:`TILE_BUSY_SHARE` of the kernels) some runs are slowed by interference: repeated runs of one config
  spread up to about 2x.

All times are nanoseconds (float64 while computed, int64 once measured).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from competition.schema import TPU_LANES, TPU_SUBLANES

PEAK_FLOPS_PER_NS: float = 197e3
"""Peak matrix-unit throughput: 197 TFLOP/s = 197,000 flops per ns."""

VECTOR_FLOPS_PER_NS: float = 197e3 / 16
"""Throughput of non-matrix work (elementwise, reductions in kernels): 1/16 of the matrix unit."""

HBM_BYTES_PER_NS: float = 820.0
"""Memory bandwidth: 820 GB/s = 820 bytes per ns."""

LAUNCH_NS: float = 1000.0
"""Fixed cost of launching one op (or one inserted copy), ns."""

LANE: int = TPU_LANES
"""The most-minor dimension is stored in tiles of 128 (lanes)."""

SUBLANE: int = TPU_SUBLANES
"""The second-minor dimension is stored in tiles of 8 (sublanes)."""

ONCHIP_BYTES: int = 16 * 2**20
"""On-chip memory holding a kernel tile's working set: 16 MiB."""

NOISE_SIGMA: float = 3.1e-4
"""Sigma of the log-normal measurement noise (log units); the median |difference| of two draws is ~0.954 sigma."""

NOISE_CLIP: float = 3.2
"""Noise draws are clipped to this many sigmas, so two measurements never differ by more than ~0.2%."""

TILE_NOISE_SIGMA: float = 0.015
"""Sigma of the relative log-normal noise of one tile measurement: re-measured configs differ by a median of ~1.4%."""

TILE_JITTER_NS: float = 5.0
"""Absolute timer and launch jitter of one tile measurement, ns (as a sigma): 5% of a 100 ns kernel."""

TILE_BUSY_SHARE: float = 0.05
"""Share of tile kernels measured on a busy host, whose runs are sometimes slowed by interference."""

TILE_BUSY_HIT: float = 0.3
"""On a busy host, the chance that one run is slowed."""

TILE_BUSY_SLOWDOWN: float = 0.4
"""A slowed run takes ``1 + X`` times as long, ``X`` exponential with this mean (about 2x at its p90)."""


def physical_elements(dims: Sequence[int], minor_to_major: Sequence[int]) -> int:
    """Number of stored elements of an array under (8, 128) tiling.

    Args:
        dims: logical dimension sizes.
        minor_to_major: layout, most-minor dimension first (a permutation of ``range(len(dims))``).

    Returns:
        The element count with the most-minor dimension padded to a multiple of :data:`LANE` and the second-minor
        to a multiple of :data:`SUBLANE`. Scalars count 1.
    """
    if not dims:
        return 1
    sizes = [int(dims[d]) for d in minor_to_major]
    sizes[0] = -(-sizes[0] // LANE) * LANE
    if len(sizes) > 1:
        sizes[1] = -(-sizes[1] // SUBLANE) * SUBLANE
    return math.prod(sizes)


def roofline_ns(flops: float, nbytes: float, inefficiency: float = 1.0) -> float:
    """Time of one op: ``max(flops / peak * inefficiency, bytes / bandwidth) + LAUNCH_NS`` in ns."""
    return max(flops / PEAK_FLOPS_PER_NS * inefficiency, nbytes / HBM_BYTES_PER_NS) + LAUNCH_NS


def copy_ns(bytes_read: float, bytes_written: float) -> float:
    """Time of an inserted layout-changing copy, ns: memory-bound plus a launch."""
    return (bytes_read + bytes_written) / HBM_BYTES_PER_NS + LAUNCH_NS


def measure(true_ns: npt.ArrayLike, rng: np.random.Generator) -> npt.NDArray[np.int64]:
    """Measure runtimes: multiplicative log-normal noise, rounded to whole ns.

    Args:
        true_ns: noiseless runtimes in ns, any shape.
        rng: the generator drawing the noise.

    Returns:
        int64 ns of the same shape, ``round(true * exp(e))`` with ``e ~ N(0, NOISE_SIGMA)`` clipped to
        ``NOISE_CLIP`` sigmas (at least 1 ns).
    """
    true = np.asarray(true_ns, dtype=np.float64)
    e = np.clip(rng.standard_normal(true.shape), -NOISE_CLIP, NOISE_CLIP) * NOISE_SIGMA
    return np.maximum(np.rint(true * np.exp(e)), 1).astype(np.int64)


def measure_tile(true_ns: npt.ArrayLike, rng: np.random.Generator, busy: bool = False) -> npt.NDArray[np.int64]:
    """Measure tile kernel runtimes: relative plus timer noise, and interference on a busy host.

    Args:
        true_ns: noiseless runtimes in ns, any shape.
        rng: the generator drawing the noise.
        busy: the kernel was measured on a busy host (see :data:`TILE_BUSY_SHARE`).

    Returns:
        int64 ns of the same shape: ``round(true * exp(e) * slow)``, ``e ~ N(0, s)`` clipped to ``NOISE_CLIP``
        sigmas with ``s = sqrt(TILE_NOISE_SIGMA**2 + (TILE_JITTER_NS / true)**2)``, and ``slow`` 1, or on a busy
        host with probability :data:`TILE_BUSY_HIT` ``1 + Exp(TILE_BUSY_SLOWDOWN)`` (at least 1 ns).
    """
    true = np.asarray(true_ns, dtype=np.float64)
    sigma = np.sqrt(TILE_NOISE_SIGMA**2 + (TILE_JITTER_NS / np.maximum(true, 1.0)) ** 2)
    out = true * np.exp(np.clip(rng.standard_normal(true.shape), -NOISE_CLIP, NOISE_CLIP) * sigma)
    if busy:
        slow = rng.random(true.shape) < TILE_BUSY_HIT
        out = out * (1.0 + slow * rng.exponential(TILE_BUSY_SLOWDOWN, true.shape))
    return np.maximum(np.rint(out), 1).astype(np.int64)
