"""``@wp.struct`` arguments in the world-split proof (:mod:`apic.record.parallel.world_split`).

A struct passed by value carries its arrays' descriptors inside the kernel's packed arguments, where
each launch records them as array slots of their own (``apic.record.layout.array_slots``). So an array
field is proved and checked per launch exactly as a top-level array argument is, under the name
``<argument>.<field>`` (``p.inner.m`` through a nested struct). An array whose elements are structs
stays refused: arrays behind its elements' fields are no slots of the launch.
"""

from __future__ import annotations

from apic._compat import wp_codegen


def is_struct(warp_type) -> bool:
    return isinstance(warp_type, wp_codegen.Struct)


def is_array(warp_type) -> bool:
    """Whether a kernel argument's or struct field's Warp type is an array (of any kind)."""
    return isinstance(getattr(warp_type, "ndim", None), int) and hasattr(warp_type, "dtype")


def array_fields(root: str, struct) -> dict:
    """``{"root.field": Warp type}`` for every array field of a struct value named ``root``, nested
    structs' fields included."""
    found = {}
    for name, var in struct.vars.items():
        if is_struct(var.type):
            found.update(array_fields(f"{root}.{name}", var.type))
        elif is_array(var.type):
            found[f"{root}.{name}"] = var.type
    return found


def struct_elements(root: str, warp_type) -> str | None:
    """The name of an array of structs in an argument (itself, or a field of a struct it is), or None."""
    if is_array(warp_type) and is_struct(warp_type.dtype):
        return root
    if is_struct(warp_type):
        for name, var in warp_type.vars.items():
            found = struct_elements(f"{root}.{name}", var.type)
            if found is not None:
                return found
    return None


def array_offsets(kernel, args_layout) -> dict[str, int]:
    """``{array name: byte offset of its descriptor in the packed arguments}`` for a kernel's array
    arguments and the array fields of its struct arguments (named as :func:`array_fields` does)."""
    ctypes_of = dict(args_layout.struct_type._fields_)
    found: dict[str, int] = {}
    for i, arg in enumerate(kernel.adj.args):
        _collect(arg.label, arg.type, ctypes_of[f"a{i}"], getattr(args_layout.struct_type, f"a{i}").offset, found)
    return found


def _collect(root: str, warp_type, ctype_cls, at: int, found: dict) -> None:
    if is_struct(warp_type):
        field_ctypes = dict(ctype_cls._fields_)
        for name, var in warp_type.vars.items():
            _collect(f"{root}.{name}", var.type, field_ctypes[name], at + getattr(ctype_cls, name).offset, found)
    elif is_array(warp_type):
        found[root] = at
