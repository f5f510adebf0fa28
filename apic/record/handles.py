"""Native handles: the Warp objects a kernel reaches through a ``uint64`` id (Mesh, Bvh, HashGrid, Volume).

A handle's ``id`` is the address of a native struct in this process, so a graph cannot carry the
number itself. apic records *what the object was built from* instead, and rebuilds it on load:

* **Registry.** ``apic.record.cpu.handle_shims`` wraps the four classes' ``__init__`` (and ``HashGrid.build``) so every
  object made after ``import apic`` is known by id, with the constructor options Warp does not keep
  as attributes. Objects made before are found once, on demand, by a sweep of the garbage collector.
* **Capture.** A kernel argument (a ``uint64``/``int64``/``wp.handle`` scalar or struct field) or a
  word of graph memory that holds a registered id makes the recorder note the object: its arrays
  become regions of the graph (so a kernel that moves mesh points and a ``Mesh.refit`` in the same
  capture stay aliased after a load), and every place holding the id becomes a handle relocation.
* **Save.** A ``Handle`` lists the object's kind, its arrays as region references and its options;
  a Volume's NanoVDB buffer is saved as bytes (read at save time, as region contents are).
* **Load.** ``rebuild`` makes a new object over the loaded regions with Warp's own constructor; the
  program and the memory slots that held the old id get the new one.

What a word in graph memory holds is not typed, so a memory word is taken for a handle when it
equals the id of a live object of these classes: an exact 64-bit heap address, which ordinary data
does not produce.
"""

from __future__ import annotations

import enum
import gc
import weakref
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import warp as wp

from apic import _compat
from apic.errors import UnsupportedOperationError
from apic.targets.cpu import HANDLE_CALLS
from apic.targets import handle_kinds as hk

KINDS = hk.RECORDED

# Element types a handle's arrays may have, by the name saved in the file; a HashGrid's scalar type.
DTYPES = {"vec3h": wp.vec3h, "vec3f": wp.vec3f, "vec3d": wp.vec3d, "int32": wp.int32}
DTYPE_SIZES = {"vec3h": 6, "vec3f": 12, "vec3d": 24, "int32": 4}
SCALARS = {"float16": wp.float16, "float32": wp.float32, "float64": wp.float64}
# Bytes per point of a hash grid by Warp's point type id (0: vec3h, 1: vec3f, 2: vec3d; 1.12 has only 1).
GRID_POINT_SIZES = {0: 6, 1: 12, 2: 24}

# Constructor options saved per kind (the arrays are read off the object itself); values are
# msgpack scalars. ``bvh_constructor``/``constructor`` are saved as Warp's lower-case names.
OPTIONS = {
    hk.MESH: ("support_winding_number", "bvh_constructor", "bvh_leaf_size"),
    hk.BVH: ("constructor", "leaf_size"),
    hk.HASH_GRID: ("dim_x", "dim_y", "dim_z", "dtype", "radius"),
    hk.VOLUME: (),
}
ARRAYS = {
    hk.MESH: ("points", "indices", "velocities", "groups"),
    hk.BVH: ("lowers", "uppers", "groups"),
    hk.HASH_GRID: ("points", "groups"),  # of its last build, if it was built
    hk.VOLUME: (),
}


@dataclass(frozen=True)
class HandleArray:
    """A contiguous array a handle was built over: where it starts (``Ref`` or, in capture, ``RawPtr``)."""

    start: Any
    dtype: str  # a key of DTYPES
    length: int


@dataclass(frozen=True)
class Handle:
    """One native object of a graph, described well enough to build it again."""

    kind: str
    arrays: tuple[tuple[str, HandleArray], ...]
    options: tuple[tuple[str, Any], ...]
    obj: Any = field(default=None, compare=False, repr=False)  # the live (or rebuilt) Warp object


# --- registry -------------------------------------------------------------------------------------
_registry: "weakref.WeakValueDictionary[int, Any]" = weakref.WeakValueDictionary()  # CPU objects
_device_registry: "weakref.WeakValueDictionary[int, Any]" = weakref.WeakValueDictionary()  # objects on a GPU
_swept = False


def handle_classes() -> dict[str, type]:
    return {kind: vars(wp).get(kind) for kind in KINDS if isinstance(vars(wp).get(kind), type)}


def kind_of(obj) -> str | None:
    """``"Mesh"``, ``"Bvh"``, ... for a handle object (exact class or subclass), else None."""
    for kind, cls in handle_classes().items():
        if issubclass(type(obj), cls):  # type(), not isinstance(): a proxy's __class__ may lie
            return kind
    return None


def register(obj) -> None:
    """Know ``obj`` by its id: a CPU object for captures to remap, one on a GPU for CUDA saves to refuse."""
    value = getattr(obj, "id", None)
    if not isinstance(value, int) or not value:
        return
    device = getattr(obj, "device", None)
    if getattr(device, "is_cpu", False):
        _registry[value] = obj
    elif device is not None:
        _device_registry[value] = obj


def lookup(value: int):
    """The live CPU handle object whose id is ``value``, or None."""
    found = _registry.get(value)
    if found is None and not _swept:
        _sweep()
        found = _registry.get(value)
    return found


def lookup_any(value: int):
    """The live handle object, on the CPU or a GPU, whose id is ``value``, or None (a CUDA graph cannot carry
    such an id: ``apic.record.cuda.recorder`` refuses to save it)."""
    found = lookup(value)
    return found if found is not None else _device_registry.get(value)


def _sweep() -> None:
    """Register the handle objects made before ``import apic`` (once per process)."""
    global _swept
    _swept = True
    classes = tuple(handle_classes().values())
    for obj in gc.get_objects():
        if issubclass(type(obj), classes):
            register(obj)


def live_ids() -> np.ndarray:
    """Ids of every registered live handle, sorted (uint64)."""
    if not _swept:
        _sweep()
    return np.array(sorted(_registry.keys()), dtype=np.uint64)


# The native exports a CPU capture records for a handle method (see ``apic.record.cpu.handle_shims``).
NATIVE_CALLS = HANDLE_CALLS


def option_value(value):
    """A constructor option as a msgpack scalar (Warp's enums by their lower-case name, dtypes by name)."""
    if isinstance(value, enum.Enum):  # BvhConstructor (an IntEnum: test before int)
        return value.name.lower()
    if isinstance(value, type):
        return value.__name__
    return value if value is None or isinstance(value, (bool, int, float, str)) else str(value)


# --- description (capture) -------------------------------------------------------------------------
def dtype_name(arr, what: str) -> str:
    """The saved name of a handle array's dtype (a key of ``DTYPES``); refuses other dtypes."""
    for name, dtype in DTYPES.items():
        if arr.dtype is dtype or arr.dtype == dtype:
            return name
    raise UnsupportedOperationError(what, f"apic does not record handle arrays of dtype {arr.dtype}")


def handle_arrays(kind: str, obj) -> list[tuple[str, Any]]:
    """The Warp arrays ``obj`` was built over, by the names its constructor takes."""
    if kind == hk.HASH_GRID:
        built = getattr(obj, "_apic_build", None)
        return [] if built is None else [("points", built[0]), ("groups", built[2])]
    return [(name, getattr(obj, name, None)) for name in ARRAYS[kind]]


def options_of(kind: str, obj) -> tuple[tuple[str, Any], ...]:
    """The constructor options of ``obj`` (what the registry saw, else what its attributes say)."""
    options = dict(getattr(obj, "_apic_options", {}))
    if kind == hk.MESH:
        options["support_winding_number"] = bool(getattr(obj, "support_winding_number", False))
    elif kind == hk.BVH and getattr(obj, "_constructor", None) is not None:
        options["constructor"] = option_value(obj._constructor)  # rebuild() may have changed it
    elif kind == hk.HASH_GRID:
        for axis in ("dim_x", "dim_y", "dim_z"):
            if axis not in options and hasattr(obj, "_" + axis):
                options[axis] = int(getattr(obj, "_" + axis))
        if getattr(obj, "dtype", None) is not None:
            options["dtype"] = option_value(obj.dtype)
        if not all(axis in options for axis in ("dim_x", "dim_y", "dim_z")):
            raise UnsupportedOperationError(
                "a wp.HashGrid made before `import apic`", "its dimensions are unknown; make it after importing apic"
            )
        built = getattr(obj, "_apic_build", None)
        if built is not None:
            options["radius"] = built[1]
    return tuple((k, options[k]) for k in OPTIONS[kind] if k in options and options[k] is not None)


def describe(obj, resolve) -> Handle:
    """The ``Handle`` of a live object: its kind, its arrays as region references (``resolve(address)``)
    and its constructor options."""
    kind = kind_of(obj)
    arrays = []
    for name, arr in handle_arrays(kind, obj):
        if arr is not None:
            what = f"a wp.{kind} over the array '{name}'"
            arrays.append((name, HandleArray(resolve(arr.ptr), dtype_name(arr, what), arr.size)))
    return Handle(kind, tuple(arrays), options_of(kind, obj), obj)


def volume_bytes(obj) -> bytes:
    """A Volume's NanoVDB buffer, as it is now."""
    buffer = obj.array()
    return bytes(buffer.numpy().tobytes()) if buffer.size else b""


# --- rebuild (load) -------------------------------------------------------------------------------
def _view(array: HandleArray, address: int):
    dtype = DTYPES[array.dtype]
    return wp.array(ptr=address, dtype=dtype, shape=(array.length,), device="cpu")


def rebuild(handle: Handle, address_of, volume_data: bytes | None = None):
    """A new Warp object equal to the saved ``handle``, over the loaded graph's memory.

    ``address_of(ref)`` is the address of a region reference in the loaded graph.
    """
    cls = handle_classes().get(handle.kind)
    if cls is None:
        raise UnsupportedOperationError(f"rebuilding a wp.{handle.kind}", f"warp-lang {_compat.WARP_VERSION} has none")
    arrays = {name: _view(a, address_of(a.start)) for name, a in handle.arrays}
    options = dict(handle.options)
    if handle.kind == hk.VOLUME:
        data = np.frombuffer(volume_data or b"", dtype=np.uint8)
        return cls(wp.array(data, dtype=wp.uint8, device="cpu"), copy=True)
    if handle.kind == hk.HASH_GRID:
        radius = options.pop("radius", None)
        kwargs = _accepted(cls.__init__, {"dtype": SCALARS.get(options.pop("dtype", None))})
        grid = cls(options["dim_x"], options["dim_y"], options["dim_z"], device="cpu", **kwargs)
        if radius is not None:
            groups = arrays.get("groups")
            grid.build(arrays["points"], radius, *([groups] if groups is not None else []))
        return grid
    return cls(**_accepted(cls.__init__, {**arrays, **options}, required=tuple(arrays)))


def _accepted(function, kwargs: dict, required: tuple = ()) -> dict:
    """``kwargs`` less None values; refuse a set option this warp-lang's ``function`` does not take."""
    parameters = _compat.parameters_of(function)
    out = {}
    for name, value in kwargs.items():
        if value is None:
            continue
        if name not in parameters:
            raise UnsupportedOperationError(
                f"rebuilding a native handle with option {name}={value!r}",
                f"warp-lang {_compat.WARP_VERSION} does not take it; load the graph with the warp-lang that saved it",
            )
        out[name] = value
    return out
