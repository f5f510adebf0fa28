"""The ctypes types Warp packs a kernel's CUDA parameters into, from its Warp argument types: what the CUDA
recorder lays a launch's param blob out with (:func:`apic.targets.cuda.param_layout` then places them).
Kept out of :mod:`apic.targets.cuda`, which holds facts only: this reads Warp's types through ``_compat``."""

from __future__ import annotations

import ctypes

from apic._compat import kernel_bounds_type, wp_codegen, wp_types
from apic.errors import UnsupportedOperationError


def arg_ctype(arg_type, adjoint: bool = False) -> type:
    """The ctypes type Warp packs a kernel argument of Warp type ``arg_type`` into (as a CUDA param).

    Raises ``UnsupportedOperationError`` for argument kinds apic does not record on CUDA.
    """
    if wp_types.is_array(arg_type):
        if adjoint and wp_types.matches_array_class(arg_type, wp_types.indexedarray):
            return wp_types.array_t  # codegen: the adjoint of an indexed array is a regular array
        ctype = type(arg_type.__ctype__())
        if ctype not in (wp_types.array_t, wp_types.indexedarray_t):
            raise UnsupportedOperationError(
                f"a CUDA launch with a {ctype.__name__} argument", "Fabric arrays are not recorded yet", capture="CUDA"
            )
        return ctype
    if isinstance(arg_type, wp_codegen.Struct):
        return arg_type.ctype
    if isinstance(arg_type, type) and issubclass(arg_type, ctypes.Array):  # vec, mat, quat, transform
        return arg_type
    scalar = {int: ctypes.c_int32, float: ctypes.c_float, bool: ctypes.c_bool}.get(arg_type)
    if scalar is not None:
        return scalar
    ctype = getattr(arg_type, "_type_", None)  # Warp scalar types: float32._type_ is c_float, ...
    if isinstance(ctype, type) and issubclass(ctype, ctypes._SimpleCData):
        return ctype
    raise UnsupportedOperationError(
        f"a CUDA launch with an argument of type {getattr(arg_type, '__name__', arg_type)!r}",
        "apic does not know how Warp passes it", capture="CUDA",
    )


def param_types(kernel, adjoint: bool) -> list[type]:
    """ctypes types of every parameter of a kernel's CUDA entry point: bounds, args[, adjoints]."""
    args = kernel.adj.args
    types = [kernel_bounds_type(kernel)]
    types += [arg_ctype(a.type) for a in args]
    if adjoint:
        types += [arg_ctype(a.type, adjoint=True) for a in args]
    return types
