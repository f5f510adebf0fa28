"""Strings and numbers that may come from a file (or a caller), made safe for reports and messages.

``escape`` writes every character a terminal could act on as an escape, so a string from a ``.wrp``
can neither forge a line of a text report nor drive the terminal. ``json_text`` writes strict JSON
(RFC 8259): every float JSON cannot hold becomes a string. ``short_repr`` bounds what an error
message quotes of a value, however large the value.
"""

from __future__ import annotations

import json
import math
import reprlib
import unicodedata

import numpy as np

# Control, format, surrogate, private-use and unassigned code points, and line/paragraph separators:
# what a terminal may act on, or what str.splitlines() and other readers may take for a line end.
_UNSAFE_CATEGORIES = frozenset(("Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"))


def _code(char: str) -> str:
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def escape(text: str, backslash: bool = True) -> str:
    """``text`` with every character a terminal could act on written as an escape: control and format
    characters (ESC, CR, LF, NUL, bidi overrides such as U+202E), line/paragraph separators, surrogates,
    unassigned code points, and (``backslash``) the backslash itself, so that an escape in the output
    always means one."""
    out = []
    for char in text:
        if char == "\\":
            out.append("\\\\" if backslash else char)
        elif char.isprintable():  # False for every unsafe category: the common case costs one call
            out.append(char)
        elif unicodedata.category(char) in _UNSAFE_CATEGORIES:
            out.append(_code(char))
        else:  # a space other than " " (no-break, ideographic): printable on a terminal, kept
            out.append(char)
    return "".join(out)


def one_line(text) -> str:
    """``str(text)`` as one line of terminal output (an error message): every unsafe character escaped,
    backslashes kept as they are (a path or a value the user typed reads as typed)."""
    return escape(str(text), backslash=False)


class _Short(reprlib.Repr):
    """reprlib's bounded repr, with integers too large to write in decimal (Python refuses past 4,300 digits,
    and the digits say nothing in a message) given by their size."""

    def repr_int(self, x, level):
        if x.bit_length() > 256:
            return f"<an integer of {x.bit_length()} bits>"
        return super().repr_int(x, level)


_SHORT = _Short()
_SHORT.maxstring = 60
_SHORT.maxother = 60
_SHORT.maxlong = 60


def short_repr(value) -> str:
    """``repr(value)`` cut to a few dozen characters (a list's first items, a string's ends): what an error
    message quotes of a value that may hold millions of items."""
    return _SHORT.repr(value)


def _key(key) -> str:
    """A JSON object key (JSON keys are strings) for a key of ``plain``'s input."""
    if isinstance(key, str):
        return key
    value = plain(key)
    return value if isinstance(value, str) else json.dumps(value, allow_nan=False)


def plain(value):
    """``value`` as data every strict JSON writer takes: non-finite floats as the strings ``"nan"``,
    ``"inf"`` and ``"-inf"``, bytes as a lowercase hex string, tuples as lists, NumPy scalars and arrays
    as Python numbers and lists, every key a string. Integers stay exact whatever their size."""
    if isinstance(value, (str, bool)) or value is None:
        return value
    if isinstance(value, np.ndarray):
        return plain(value.tolist())
    if isinstance(value, np.generic):
        return plain(value.item())
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return float(value)
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value).hex()
    if isinstance(value, dict):
        return {_key(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    raise TypeError(f"no JSON form for a {type(value).__name__}")


def json_text(value, indent: int | None = None) -> str:
    """``value`` (through ``plain``) as strict JSON text: ASCII only (every control and non-ASCII
    character a JSON escape), and never ``NaN`` or ``Infinity``, which RFC 8259 has no place for."""
    return json.dumps(plain(value), indent=indent, ensure_ascii=True, allow_nan=False)
