"""Named scalar parameters: a scalar launch argument that a graph lets the user change after the capture.

::

    dt = apic.param("dt", wp.float32, 0.01)
    with wp.ScopedCapture(device="cpu") as capture:
        wp.launch(step, dim=n, inputs=[x, v, dt], device="cpu")
    capture.graph.set_param("dt", 0.005)   # every launch that received dt sees 0.005 at the next replay

A :class:`Param` passed to ``wp.launch`` is packed by Warp itself, as its value would be (eagerly it
*is* its value). During a CPU capture the recorder also notes where the value lands: the byte offset
in the launch's forward or adjoint argument blob (``apic.record.ops.ParamSlot``). ``Graph.set_param``
packs a new value once (:func:`pack`, Warp's own rounding) and writes it into every slot of the
replay arena: no re-lowering, no Python per op at replay. Saved graphs keep each parameter as a
``"scalar"`` binding (docs/FORMAT.md, 2.8).

A parameter is a scalar (``int8`` ... ``uint64``, ``float16/32/64``, ``bool``), a vector, matrix,
quaternion or transform of one. A ``@wp.struct`` field cannot hold one (Warp refuses it: a struct is
packed by value, so no slot could be found for it).
"""

from __future__ import annotations

import ctypes
import math
import numbers
import struct
import dataclasses
from dataclasses import dataclass
from typing import Callable

import numpy as np

from apic._compat import wp_codegen, wp_types
from apic._text import short_repr
from apic.record.bindings import claimed_shape, dtype_name, numpy_layout
from apic.errors import BindingError

# NumPy kind -> byte sizes a parameter component may have ('b': bool, 'i'/'u': integers, 'f': floats)
COMPONENT_SIZES = {"b": (1,), "i": (1, 2, 4, 8), "u": (1, 2, 4, 8), "f": (2, 4, 8)}


@dataclass(frozen=True)
class ScalarParam:
    """What a graph knows of one named scalar parameter: its type and its value when recorded (or saved)."""

    name: str
    dtype: str  # Warp type name ("float32", "vec3f", "mat22d")
    np_dtype: str  # NumPy type of one component ("<f4")
    elem_shape: tuple[int, ...]  # () for a scalar, (3,) for vec3, (2, 2) for mat22
    value: bytes  # the packed value (its size is the parameter's size)

    @property
    def nbytes(self) -> int:
        return len(self.value)

    def describe(self, value: bytes) -> dict:
        """What ``Graph.params`` reports for this parameter, holding ``value``."""
        return {"size": self.nbytes, "kind": "scalar", "dtype": self.dtype, "shape": (), "value": unpack(self, value)}


def check_name(name) -> str:
    if not isinstance(name, str) or not name:
        raise BindingError(f"a parameter name must be a non-empty string, got {name!r}")
    return name


def spec_of(name: str, dtype) -> ScalarParam:
    """The type facts of a Warp value type ``dtype`` (a scalar, vector, matrix, quaternion or transform)."""
    if dtype in (bool, int, float):  # Python types, as Warp's kernel annotations take them
        dtype = {bool: wp_types.bool, int: wp_types.int32, float: wp_types.float32}[dtype]
    what = f"apic.param('{name}')"
    if isinstance(dtype, wp_codegen.Struct) or wp_types.is_array(dtype):
        raise BindingError(f"{what}: a named parameter is a scalar, vector or matrix value, not "
                           f"{getattr(dtype, 'key', dtype)!r}; bind arrays by name with capture_save(inputs=...)")
    scalar = dtype is wp_types.bool or dtype in wp_types.scalar_types
    if not isinstance(dtype, type) or not (scalar or hasattr(dtype, "_wp_scalar_type_")) or (
            dtype is getattr(wp_types, "handle", None)):
        raise BindingError(f"{what}: {dtype!r} is not a Warp value type (wp.float32, wp.vec3, wp.mat22, ...)")
    np_dtype, elem_shape = numpy_layout(dtype)
    if np_dtype is None or np.dtype(np_dtype).kind not in COMPONENT_SIZES:
        raise BindingError(f"{what}: dtype {dtype_name(dtype)} has no NumPy equivalent (bfloat16 and other "
                           "types apic cannot pack are not supported as parameters)")
    itemsize = np.dtype(np_dtype).itemsize
    size = wp_types.type_size_in_bytes(dtype)
    if itemsize * math.prod(elem_shape) != size:  # pragma: no cover - every Warp value type is packed densely
        raise BindingError(f"{what}: dtype {dtype_name(dtype)} is not a dense array of {np_dtype}")
    return ScalarParam(name, dtype_name(dtype), np_dtype, elem_shape, bytes(size))


# --- packing (as Warp's pack_arg does) -----------------------------------------------------------------
def _warp_scalar_types() -> tuple:
    return (*wp_types.scalar_types, wp_types.bool)


def _component(kind: str, size: int, value, where: str) -> bytes:
    """One component packed as Warp packs a kernel argument of that scalar type (``ctypes`` conversion)."""
    if isinstance(value, np.generic):
        value = value.item()
    elif type(value) in _warp_scalar_types():  # wp.float32(0.5): its Python value, as Warp's pack_arg reads it
        value = value.value
    if kind == "b":
        if isinstance(value, bool) or (type(value) is int and value in (0, 1)):
            return bytes(ctypes.c_bool(value))
        raise BindingError(f"{where}: expected a bool, got {short_repr(value)}")
    if kind in "iu":
        if not isinstance(value, numbers.Integral):
            raise BindingError(f"{where}: expected an integer, got {type(value).__name__} {short_repr(value)}")
        value = int(value)
        lo, hi = (-(1 << (8 * size - 1)), (1 << (8 * size - 1)) - 1) if kind == "i" else (0, (1 << (8 * size)) - 1)
        if not lo <= value <= hi:
            raise BindingError(f"{where}: {short_repr(value)} is out of range for a {8 * size}-bit "
                               f"{'signed' if kind == 'i' else 'unsigned'} integer [{lo}, {hi}]")
        return value.to_bytes(size, "little", signed=kind == "i")
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise BindingError(f"{where}: expected a number, got {type(value).__name__} {short_repr(value)}")
    try:
        value = float(value)
    except OverflowError:
        raise BindingError(f"{where}: {short_repr(value)} is too large for a float") from None
    if size == 2:  # Warp packs float16 through its own conversion (round to nearest even)
        return struct.pack("<H", wp_types.float_to_half_bits(value))
    # c_float / c_double of a Python float: the conversion Warp's pack_arg makes
    return bytes(ctypes.c_float(value)) if size == 4 else bytes(ctypes.c_double(value))


def pack(param: ScalarParam, value, where: str) -> bytes:
    """``value`` packed for ``param``: checked (type, range, shape) and rounded exactly as Warp packs it."""
    np_type = np.dtype(param.np_dtype)
    kind, size = np_type.kind, np_type.itemsize
    if not param.elem_shape:
        return _component(kind, size, value, where)
    if isinstance(value, ctypes.Array) and hasattr(type(value), "_wp_scalar_type_"):
        if dtype_name(type(value)) != param.dtype:
            raise BindingError(f"{where}: a {dtype_name(type(value))} value (expected {param.dtype})")
        return bytes(value)
    if isinstance(value, (str, bytes)) or not hasattr(value, "__len__") and not isinstance(value, np.ndarray):
        raise BindingError(f"{where}: expected a {param.dtype} (a sequence of shape {param.elem_shape}), "
                           f"got {type(value).__name__} {short_repr(value)}")
    shape = tuple(param.elem_shape)
    claimed = claimed_shape(value)
    if claimed is not None and claimed != shape:  # refused before NumPy makes an object per element
        raise BindingError(f"{where}: shape {claimed} (expected {shape} for {param.dtype})")
    if type(value) in (list, tuple) and len(shape) == 1 and len(value) == shape[0] and not any(
            hasattr(v, "__len__") for v in value):
        items = value  # the common case (g = (0, -9.8, 0)) without NumPy's object arrays
    else:
        try:
            array = np.array(value, dtype=object)
        except (ValueError, TypeError) as error:  # ragged nesting
            raise BindingError(f"{where}: cannot read {short_repr(value)} as a {param.dtype}: {error}") from None
        if array.shape != shape:
            raise BindingError(f"{where}: shape {array.shape} (expected {shape} for {param.dtype})")
        items = array.flat
    return b"".join(_component(kind, size, item, f"{where}[{i}]") for i, item in enumerate(items))


def unpack(param: ScalarParam, data: bytes):
    """The value ``data`` holds: a Python ``bool``/``int``/``float``, or a NumPy array for a vector or matrix."""
    values = np.frombuffer(data, dtype=np.dtype(param.np_dtype)).reshape(param.elem_shape)
    return values.item() if not param.elem_shape else values.copy()


# --- the placeholder ------------------------------------------------------------------------------------
_created = False  # whether any Param exists (or existed): apic.install() then routes Warp's pack_arg
# Called when a Param is made: set by ``apic.installation`` while installed (it routes Warp's pack_arg
# through the shims), so that this module imports nothing of the recording that uses it.
_on_create: Callable[[], None] | None = None


def created() -> bool:
    """Whether this process has made an ``apic.param`` (``apic.install`` patches ``pack_arg`` for it)."""
    return _created


def set_on_create(hook: Callable[[], None] | None) -> None:
    """Register ``hook()``, called by every new :class:`Param` (None: apic is uninstalled)."""
    global _on_create
    _on_create = hook


class Param:
    """A named scalar launch argument (made by :func:`param`): pass it to ``wp.launch`` like its value.

    Eagerly it is its value. In a CPU capture, every launch that receives it records where the value
    lands, and ``graph.set_param(name, value)`` changes it in all of them. ``value`` can be set (checked
    as ``set_param`` checks it); it is what eager launches and later captures use.
    """

    __slots__ = ("name", "dtype", "spec", "_value", "_packed")

    def __init__(self, name: str, dtype, value) -> None:
        self.name = check_name(name)
        self.dtype = dtype
        self.spec = spec_of(name, dtype)
        self.value = value
        global _created
        _created = True  # a later apic.install() routes pack_arg again for this placeholder
        if _on_create is not None:
            _on_create()

    @property
    def value(self):
        """The value eager launches and later captures use; setting it checks it as ``set_param`` does."""
        return self._value

    @value.setter
    def value(self, value) -> None:
        self._packed = pack(self.spec, value, f"apic.param('{self.name}')")
        self._value = value
        self.spec = dataclasses.replace(self.spec, value=self._packed)  # a graph that never packs it keeps this

    @property
    def packed(self) -> bytes:
        """The value's bytes as a kernel receives them."""
        return self._packed

    def warp_value(self, arg_type):
        """What Warp's ``pack_arg`` is given for a kernel argument of ``arg_type``: the value itself for a
        scalar (so Warp's own conversion packs it), a ``arg_type`` built from the packed bytes otherwise."""
        if not self.spec.elem_shape:
            return self._value
        return arg_type.from_buffer_copy(self._packed)

    def __repr__(self) -> str:
        return f"apic.param({self.name!r}, {self.spec.dtype}, {self._value!r})"


def param(name: str, dtype, value) -> Param:
    """A named scalar parameter for ``wp.launch``: ``dt = apic.param("dt", wp.float32, 0.01)``.

    Pass it to ``wp.launch(..., inputs=[..., dt])`` in place of the value. Outside a capture it behaves
    as its value. In a CPU capture the graph remembers every launch argument it filled, and
    ``graph.set_param("dt", 0.005)`` changes them all for the next replays, on the live graph and on a
    saved and loaded one. ``dtype`` is a Warp scalar, vector, matrix, quaternion or transform type; the
    kernel argument must be of exactly that type.

    Raises:
        apic.BindingError: ``value`` does not fit ``dtype`` (an integer out of range, a wrong shape), or
            ``dtype`` is not a value type apic can pack (structs, arrays, bfloat16).
    """
    return Param(name, dtype, value)
