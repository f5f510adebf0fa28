"""Checks of the fields of a ``.wrp`` body: every reader of the format (CPU, CUDA, native handles) uses these.

Each check returns the value it was given when it is of the expected kind and range, and otherwise raises
:class:`apic.FormatError` naming the field (``where``, a path such as ``ops[3].dim[0]``) and what is wrong.
"""

from __future__ import annotations

import re

from apic.errors import FormatError
from apic.format import schema


def fail(where: str, message: str):
    """Raise the FormatError of a file whose field ``where`` is invalid, saying why."""
    raise FormatError(f"invalid apic graph file: {where}: {message}")


def check_map(value, where: str, required: tuple[str, ...]) -> dict:
    """``value`` as a map that has every ``required`` key."""
    if not isinstance(value, dict):
        fail(where, f"expected a map, found {type(value).__name__}")
    missing = [k for k in required if k not in value]
    if missing:
        fail(where, f"missing field(s) {', '.join(missing)}")
    return value


def check_list(value, where: str, max_len: int | None = None) -> list:
    """``value`` as a list of at most ``max_len`` entries."""
    if not isinstance(value, list):
        fail(where, f"expected a list, found {type(value).__name__}")
    if max_len is not None and len(value) > max_len:
        fail(where, f"{len(value)} entries, at most {max_len} allowed")
    return value


def check_int(value, where: str, lo: int = 0, hi: int = schema.MAX_INT) -> int:
    """``value`` as an integer (not a bool) in ``[lo, hi]``."""
    if type(value) is not int:
        fail(where, f"expected an integer, found {type(value).__name__}")
    if not lo <= value <= hi:
        fail(where, f"{value} is outside [{lo}, {hi}]")
    return value


def check_ints(value, where: str, lo: int = 0, hi: int = schema.MAX_INT, max_len: int = schema.MAX_DIMS) -> tuple:
    """``value`` as a tuple of at most ``max_len`` integers, each in ``[lo, hi]``."""
    if all(type(v) is int and lo <= v <= hi for v in check_list(value, where, max_len)):
        return tuple(value)
    return tuple(check_int(v, f"{where}[{i}]", lo, hi) for i, v in enumerate(check_list(value, where, max_len)))


def check_str(value, where: str, pattern: re.Pattern | None = None, max_len: int = schema.MAX_TEXT) -> str:
    """``value`` as a string of at most ``max_len`` characters that matches ``pattern`` (if given)."""
    if not isinstance(value, str):
        fail(where, f"expected a string, found {type(value).__name__}")
    if len(value) > max_len:
        fail(where, f"string of {len(value)} characters, at most {max_len} allowed")
    if pattern is not None and not pattern.fullmatch(value):
        fail(where, f"{value!r} is not a valid value here")
    return value


def check_bool(value, where: str) -> bool:
    """``value`` as a boolean."""
    if type(value) is not bool:
        fail(where, f"expected a boolean, found {type(value).__name__}")
    return value


def check_bin(value, where: str) -> bytes:
    """``value`` as msgpack binary data (bytes)."""
    if not isinstance(value, bytes):
        fail(where, f"expected binary data, found {type(value).__name__}")
    return value
