"""What configs are ranked by: the one definition the reader, the labels and the metrics share."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt


def ranking_target(runtime: npt.ArrayLike, normalizers: npt.ArrayLike | None = None) -> npt.NDArray[np.float64]:
    """What configs are ranked by, lower = faster: the runtime divided by the normalizers (tile), or the runtime
    itself (layout, or tile ranked on raw runtimes).

    Args:
        runtime: int ``[C]`` runtimes in ns.
        normalizers: int ``[C]`` ``config_runtime_normalizers`` of a tile graph; ``None`` for layout.

    Returns:
        float64 ``[C]`` (inf or NaN where a normalizer is 0, as in test files).
    """
    y = np.asarray(runtime).astype(np.float64)
    if normalizers is None:
        return y
    n = np.asarray(normalizers).astype(np.float64)
    if n.shape != y.shape:
        raise ValueError(f"normalizers {n.shape} and runtimes {y.shape} differ in shape")
    with np.errstate(divide="ignore", invalid="ignore"):
        return y / n
