"""The per-launch checks of a kernel proved splittable by world (:mod:`apic.record.parallel.world_split`): from one
recorded launch's argument bytes, whether its written arrays have one row per world and rows that overlap
nothing else the launch reaches. Only lowering calls it, once per recorded launch.
"""

from __future__ import annotations

from apic.record.layout import extent
from apic.record.ops import HandleRef
from apic.targets import cpu as _cpu


def world_launch_refusal(data: bytes, blob, writes: tuple[int, ...], rows: tuple[int, ...], dim: tuple,
                         region_span) -> str | None:
    """Why one recorded launch of a kernel proved splittable by world must stay serial, or None.

    As :func:`apic.record.parallel.splittable.graph_launch_refusal`, with ``rows`` the offsets of the arrays the
    kernel accesses only at the world's row and ``dim`` the launch's shape: each written array must be
    a plain array with ``shape[0] == dim[0]`` (one row per world) whose rows do not overlap each other
    (non-negative strides, ``strides[0]`` at least a row's extent), and overlap no other memory the
    launch reaches except the identical view passed again as another argument accessed only at the
    world's row.
    """
    if not dim:
        return "a launch without dimensions"
    worlds = int(dim[0])
    views, exact = {}, set()
    for slot in blob.arrays:
        if slot.indexed:
            continue
        ptr, _, *dims, ndim = _cpu.ARRAY_T.unpack_from(data, slot.at)
        shape, strides = tuple(dims[:4][:ndim]), tuple(dims[4:][:ndim])
        views[slot.at] = (ptr, shape, strides, slot.elem_size, extent(ptr, slot.elem_size, shape, strides))
        exact.add(slot.at)
    others = []
    for reloc in blob.relocs:
        if isinstance(reloc.target, HandleRef):
            return "an argument holds a native handle id"
        if reloc.at not in exact:  # a gradient, an indexed array's data or indices: its whole region
            others.append(region_span(reloc.target))
    for at in writes:
        view = views.get(at)
        if view is None:
            return f"the written argument at byte {at} is not a plain array"
        _, shape, strides, elem_size, _ = view
        if not shape or shape[0] != worlds:
            return f"the written array at byte {at} has {shape[0] if shape else 0} rows for {worlds} worlds"
        lo, hi = view[4]
        if hi <= lo:  # no element: nothing to write
            continue
        row_extent = elem_size + sum((n - 1) * s for n, s in zip(shape[1:], strides[1:]))
        if any(s < 0 for s in strides) or (worlds > 1 and strides[0] < row_extent):
            return f"the rows of the written array at byte {at} overlap"
        for other_at, other in views.items():
            if other_at == at or other[4][1] <= other[4][0] or not (lo < other[4][1] and other[4][0] < hi):
                continue
            if other[:4] != view[:4] or other_at not in rows or at not in rows:
                return f"the written array at byte {at} overlaps another argument of the launch"
        if any(lo < a + n and a < hi for a, n in others if n):
            return f"the written array at byte {at} overlaps other memory the launch reaches"
    return None
