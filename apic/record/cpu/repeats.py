"""Repeated launches in a capture: the same ``wp.launch`` call again records the same op, without Warp.

A simulation step launches the same kernels with the same arrays and scalars, step after step.
Recording runs Warp's whole launch path (argument checks and packing, about 10 us) only to find,
at the native sink, an op equal to one it already has. ``repeat_key`` names a call by what decides
its packed bytes; when a capture has seen that key produce exactly one launch op, the ``wp.launch``
shim appends that op again and skips Warp.

A key exists only for calls made of plain values, so that equal keys mean equal packed bytes:
``wp.array`` (exact type: identity, data and grad pointers, shape and strides, which are what its
descriptor holds), Python ``int``/``bool``/``str``/``None``, ``float`` (by its ``repr`` for zeros,
which keeps -0.0 apart from 0.0), ``Device`` objects, and lists and tuples of these. Anything else
(structs, vectors, NumPy values, indexed arrays, a stream, ``record_cmd``) has no key and takes
Warp's path every time; so does every launch while a ``wp.Tape`` records. The default device is
part of every key. What a key does not see: module options or Warp settings changed in the middle
of a capture (Warp would rebuild the module; a repeated launch keeps the code it recorded first). Arrays in a key stay alive for the capture (the recorder keeps them), so an id
is never reused within it.
"""  # noqa: E501 (long docstring lines kept: rewrapping would change __doc__)

from __future__ import annotations

from apic._compat import wp_context, wp_types
from apic.record.params import Param

_ARRAY = wp_types.array
_DEVICE = wp_context.Device
_PLAIN = (int, bool, str, type(None))


def _value_key(value):
    """A hashable stand-in for one launch argument, or None if the value has none."""
    kind = type(value)
    if kind is _ARRAY:
        grad = value.grad
        return (id(value), value.ptr, value.shape, value.strides, 0 if grad is None else grad.ptr)
    if kind is float:
        return (kind, value) if value else (kind, repr(value))
    if kind in _PLAIN:
        return (kind, value)
    if kind is list or kind is tuple:
        keys = []
        for item in value:
            key = _value_key(item)
            if key is None:
                return None
            keys.append(key)
        return (kind, *keys)
    if kind is _DEVICE:
        return (kind, id(value))
    if kind is Param:  # kept alive by the capture (its id stays unique); its bytes are what a launch packs
        return (kind, id(value), value.packed)
    return None


def repeat_key(args: tuple, kwargs: dict):
    """The key of a ``wp.launch(*args, **kwargs)`` call, or None when it cannot be repeated safely."""
    runtime = wp_context.runtime
    if runtime.tape is not None or not args or len(args) > 7:  # positional stream, adjoint, record_cmd...
        return None
    parts = [id(args[0]), id(runtime.default_device)]
    for value in args[1:]:
        key = _value_key(value)
        if key is None:
            return None
        parts.append(key)
    for name, value in kwargs.items():
        if name == "stream" and value is not None or name == "record_cmd" and value:
            return None
        key = _value_key(value)
        if key is None:
            return None
        parts.append((name, key))
    return tuple(parts)
