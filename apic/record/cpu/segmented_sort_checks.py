"""``wp.utils.segmented_sort_pairs`` in a CPU capture: upstream Warp 1.19's argument checks, on every warp-lang.

Warp 1.19's function checks its arguments before it reaches the native sort (and the sort checks each
segment range, which apic's replay does too: ``apic.replay.program``). warp-lang 1.12's checks almost
none of them: given an end array shorter than the start array it reads past it, given strided segment
arrays it ignores their strides. A capture makes 1.19's checks first, in its order, with its error
classes and messages, so that a call is recorded only where upstream 1.19 would record it.
"""

from __future__ import annotations

import operator

from apic._compat import wp_types

_INT32_MAX = (1 << 31) - 1


def check(call: dict) -> bool:
    """Raise as Warp 1.19's ``segmented_sort_pairs`` does for bad arguments (``call``: its bound arguments).

    Returns False where 1.19 returns without sorting (``count`` 0, or no segment), True otherwise.
    """
    keys, values, count = call["keys"], call["values"], call["count"]
    starts, ends = call["segment_start_indices"], call.get("segment_end_indices")
    if isinstance(count, bool):
        raise TypeError("count must be an integer")
    try:
        count = operator.index(count)
    except TypeError as e:
        raise TypeError("count must be an integer") from e
    if count < 0:
        raise ValueError(f"count must be non-negative, got {count}")
    if count > _INT32_MAX:
        raise ValueError(f"count must not exceed {_INT32_MAX}, got {count}")
    devices_match = starts.device == keys.device and (ends is None or ends.device == keys.device)
    if keys.device != values.device or not devices_match:
        raise RuntimeError("Keys, values, and segment index array storage devices must match")
    if count == 0:
        return False
    if keys.size < 2 * count or values.size < 2 * count:
        raise RuntimeError("Array storage must be large enough to contain 2*count elements")
    for name, arr in (("keys", keys), ("values", values)):
        if not arr.is_contiguous:
            raise RuntimeError(f"segmented_sort_pairs() requires a contiguous {name} array")
    for name, arr in (("segment_start_indices", starts), ("segment_end_indices", ends)):
        if arr is None:
            continue
        if arr.dtype != wp_types.int32:
            raise RuntimeError(f"{name} array must be of type int32")
        if arr.ndim != 1:
            raise RuntimeError(f"{name} must be one-dimensional")
        if not arr.is_contiguous:
            raise RuntimeError(f"segmented_sort_pairs() requires a contiguous {name} array")
    if ends is not None and starts.size != ends.size:
        raise RuntimeError(
            f"segment_start_indices and segment_end_indices must have the same size ({starts.size} vs {ends.size})"
        )
    return (starts.size if ends is not None else starts.size - 1) > 0
