"""Memory as 64-bit words: how a native handle's id stored in graph memory or an argument blob is found."""

from __future__ import annotations

import numpy as np


def id_words(words: np.ndarray, ids) -> np.ndarray:
    """Positions of the 64-bit ``words`` that equal one of ``ids``: how a handle id stored in memory is found
    (in live regions at capture end, in saved contents and argument blobs at save)."""
    if not len(words) or not len(ids):
        return np.empty(0, dtype=np.intp)
    return np.flatnonzero(np.isin(words, np.asarray(ids, dtype=np.uint64)))


def as_words(data) -> np.ndarray:
    """Bytes as little-endian 64-bit words (a trailing partial word is not one)."""
    return np.frombuffer(data, dtype="<u8", count=len(data) // 8)
