"""Writing a named scalar parameter's new value into every slot of a replay arena (``Graph.set_param``).

One jitted loop over the slots' byte offsets: a float32 parameter received by a thousand distinct
launches is a thousand 4-byte copies, about 3 us here, where NumPy's fancy indexing of the same bytes
took about 100 us (``benchmarks/param_update.py`` times the whole ``set_param``).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from apic.replay.cpu.jit_cache import CACHE


@njit(cache=CACHE, nogil=True)
def write_slots(arena: np.ndarray, offsets: np.ndarray, value: np.ndarray) -> None:  # pragma: no cover - jitted
    """``arena[o : o + len(value)] = value`` for every offset ``o`` (bytes; the lowering checked each fits)."""
    n = value.shape[0]
    for k in range(offsets.shape[0]):
        at = offsets[k]
        for j in range(n):
            arena[at + j] = value[j]
