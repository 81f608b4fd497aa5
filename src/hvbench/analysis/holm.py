"""Holm's step-down: a family of tests (a comparison's metrics, a run's trends) kept from crying
wolf, each p value adjusted so that the family's error stays at the level asked for.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def holm(p_values: Sequence[float]) -> np.ndarray:
    """Holm's step-down adjusted p-values: the k-th smallest of m is multiplied by m − k + 1,
    then made non-decreasing. Rejecting where the adjusted p < α keeps the chance of any false
    call in the family at most α, whatever the dependence between the tests. NaN (untested)
    stays NaN and is not counted in m."""
    p = np.asarray(p_values, dtype=float)
    out = np.full(p.shape, np.nan)
    idx = np.flatnonzero(np.isfinite(p))
    if len(idx) == 0:
        return out
    order = idx[np.argsort(p[idx], kind="stable")]
    m = len(order)
    stepped = np.maximum.accumulate(p[order] * (m - np.arange(m)))
    out[order] = np.minimum(stepped, 1.0)
    return out
