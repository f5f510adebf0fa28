"""The values of the footprint evaluation (:mod:`apic.record.footprint_eval`): a known integer or boolean, an
array argument viewed with some of its indices applied (:class:`View`), a tuple of values, or
:data:`UNKNOWN`; and how two ways through a branch join."""

from __future__ import annotations


class Refused(Exception):
    """The evaluation cannot show the launch's tasks apart: the launch stays serial, for this reason."""


class _Unknown:
    __slots__ = ()

    def __repr__(self) -> str:
        return "UNKNOWN"


UNKNOWN = _Unknown()
_LIMIT = 1 << 31  # an integer outside int32 is not followed (Warp's int wraps there)


class Array:
    """One array argument of the launch: its descriptor, and whether the kernel may write it."""

    __slots__ = ("label", "ptr", "shape", "strides", "dtype", "may_write", "values")

    def __init__(self, label: str, ptr: int, shape: tuple, strides: tuple, dtype, may_write: bool) -> None:
        self.label, self.ptr, self.shape, self.strides = label, ptr, shape, strides
        self.dtype, self.may_write, self.values = dtype, may_write, None


class View:
    """An array value in the evaluation: ``array`` indexed by ``prefix`` so far."""

    __slots__ = ("array", "prefix")

    def __init__(self, array: Array, prefix: tuple = ()) -> None:
        self.array, self.prefix = array, prefix

    def __eq__(self, other) -> bool:
        return type(other) is View and other.array is self.array and other.prefix == self.prefix

    __hash__ = None


def writable(value) -> bool:
    """Whether a value is, or holds, a view of an array the kernel may write."""
    if isinstance(value, View):
        return value.array.may_write
    return isinstance(value, tuple) and any(writable(v) for v in value)


def holds_view(value) -> bool:
    """Whether a value is, or holds, a view of an array."""
    return isinstance(value, View) or (isinstance(value, tuple) and any(holds_view(v) for v in value))


def known(value) -> bool:
    """Whether a value is a known integer or boolean."""
    return type(value) in (int, bool)


def as_int(value):
    """A Python integer as the kernel's int holds it: itself inside int32, else unknown."""
    return value if -_LIMIT <= value < _LIMIT else UNKNOWN


def same(a, b) -> bool:
    """Whether two values are the same value (``True`` is not ``1``)."""
    return a is b or (type(a) is type(b) and a == b)


def join(a: dict | None, b: dict | None) -> dict | None:
    """The names after two ways through a branch (None: a way that left the block): a name the two leave
    different is unknown."""
    if a is None:
        return b
    if b is None:
        return a
    # a name one way left unbound is unknown (not the module global of that name)
    return {name: value if same(value, b.get(name, UNKNOWN)) else UNKNOWN for name, value in a.items()} | {
        name: UNKNOWN for name in b.keys() - a.keys()}


def join_all(envs) -> dict | None:
    """:func:`join` of any number of ways."""
    found = None
    for env in envs:
        found = join(found, env)
    return found

