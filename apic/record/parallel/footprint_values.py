"""The values of the footprint evaluation (:mod:`apic.record.parallel.footprint_eval`): a known integer or boolean, an
array argument viewed with some of its indices applied (:class:`View`), a tuple of values, :data:`UNKNOWN`
(a value that is no array), or :data:`MAYBE_ARRAY` (one of several arrays, or an array or not, chosen per
task: a store through it cannot be listed, so any use of it refuses); and how two ways through a branch join.

A known integer is always a Warp ``int32`` (or a ``bool``): the evaluation follows no other integer type
(an ``int8`` element, a ``uint32`` argument, ``wp.uint8(x)`` are unknown), and an ``int32`` result outside
its range is unknown where the kernel would wrap (:func:`as_int`). So every known value is the kernel's own,
bit for bit (docs/PARALLEL.md, "Why a footprint split cannot race")."""

from __future__ import annotations


class Refused(Exception):
    """The evaluation cannot show the launch's tasks apart: the launch stays serial, for this reason."""


class _Unknown:
    __slots__ = ()

    def __repr__(self) -> str:
        return "UNKNOWN"


UNKNOWN = _Unknown()


class _MaybeArray:
    __slots__ = ()

    def __repr__(self) -> str:
        return "MAYBE_ARRAY"


MAYBE_ARRAY = _MaybeArray()
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
    """Whether a value is, or holds, a view of an array the kernel may write (or may be one)."""
    if value is MAYBE_ARRAY:
        return True
    if isinstance(value, View):
        return value.array.may_write
    return isinstance(value, tuple) and any(writable(v) for v in value)


def holds_view(value) -> bool:
    """Whether a value is, or holds, a view of an array (or may be one)."""
    if value is MAYBE_ARRAY or isinstance(value, View):
        return True
    return isinstance(value, tuple) and any(holds_view(v) for v in value)


def known(value) -> bool:
    """Whether a value is a known integer or boolean."""
    return type(value) in (int, bool)


def as_int(value):
    """A Python integer as the kernel's int holds it: itself inside int32, else unknown."""
    return value if -_LIMIT <= value < _LIMIT else UNKNOWN


def same(a, b) -> bool:
    """Whether two values are the same value (``True`` is not ``1``)."""
    return a is b or (type(a) is type(b) and a == b)


def either(a, b):
    """The value of what is ``a`` one way and ``b`` the other: itself when the same; else unknown, or
    :data:`MAYBE_ARRAY` when either may be an array (an array chosen per task is no known array)."""
    if same(a, b):
        return a
    return MAYBE_ARRAY if holds_view(a) or holds_view(b) else UNKNOWN


def join(a: dict | None, b: dict | None) -> dict | None:
    """The names after two ways through a branch (None: a way that left the block): a name the two leave
    different is unknown (:func:`either`)."""
    if a is None:
        return b
    if b is None:
        return a
    # a name one way left unbound is unknown (not the module global of that name)
    return {name: either(value, b.get(name, UNKNOWN)) for name, value in a.items()} | {
        name: either(UNKNOWN, b[name]) for name in b.keys() - a.keys()}


def join_all(envs) -> dict | None:
    """:func:`join` of any number of ways."""
    found = None
    for env in envs:
        found = join(found, env)
    return found

