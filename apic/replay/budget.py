"""What loading a saved graph allocates, added up before anything is allocated.

One budget (``apic.loading.max_graph_bytes``) covers everything a load makes a file's numbers
turn into memory: the regions (graph-owned ones are not in the file, so a small file can ask for any
amount), the native memory of its handles (a hash grid's cells, the points it reserves for, now or at
replay, a BVH's nodes, a Volume's buffer) and the replay program itself (one table row per op of the
sequence, which a file holds as 4 bytes). Native sizes are upper estimates of what Warp allocates.
"""

from __future__ import annotations

import math

from apic.record.effects import EFFECTS
from apic.replay.cpu import table as tbl
from apic.targets import handle_kinds as hk

REGION_ALIGN = 64  # each region is allocated with this much slack for alignment
GRID_CELL_BYTES = 8  # a hash grid's cell_starts and cell_ends: one int32 each per cell
GRID_POINT_BYTES = 32  # per reserved point: point ids and cells, and their radix-sort double buffers
# per primitive: bounds, at most two nodes (lower and upper bounds), indices, the builder's scratch
BVH_ITEM_BYTES = 256
VOLUME_COPIES = 2  # a Volume's buffer: the wp.array it is read from and the native copy
TABLE_ROW_BYTES = 8 * tbl.OP_COLUMNS  # the replay program: one table row per op of the sequence
OP_REF_BYTES = 8  # the reader's expanded op sequence: one reference per position


def needs(saved) -> list[tuple[str, int]]:
    """``(what, bytes)`` for every part of a load that the file's numbers size."""
    recording = saved.recording
    parts = [("memory regions", sum(r.nbytes + REGION_ALIGN for r in recording.regions))]
    reserved: dict[int, int] = {}  # hash grid handle -> the most points any build or reserve asks for
    sizing = {kind for kind in set(map(type, recording.ops)) if EFFECTS[kind].grid_points is not None}
    for op in dict(zip(map(id, recording.ops), recording.ops)).values() if sizing else ():
        grid_points = EFFECTS[type(op)].grid_points
        sized = grid_points(op) if grid_points is not None else None
        if sized is not None:
            reserved[sized[0]] = max(reserved.get(sized[0], 0), sized[1])
    handles = 0
    for index, (handle, data) in enumerate(
        zip(recording.handles, saved.volume_data or (None,) * len(recording.handles))
    ):
        arrays, options = dict(handle.arrays), dict(handle.options)
        if handle.kind == hk.HASH_GRID:
            cells = math.prod(int(options.get(axis, 1)) for axis in ("dim_x", "dim_y", "dim_z"))
            points = max(reserved.get(index, 0), arrays["points"].length if "points" in arrays else 0)
            handles += cells * GRID_CELL_BYTES + points * GRID_POINT_BYTES
        elif handle.kind == hk.MESH:
            handles += (arrays["indices"].length // 3 if "indices" in arrays else 0) * BVH_ITEM_BYTES
        elif handle.kind == hk.BVH:
            handles += (arrays["lowers"].length if "lowers" in arrays else 0) * BVH_ITEM_BYTES
        elif handle.kind == hk.VOLUME:
            handles += VOLUME_COPIES * len(data or b"")
    parts.append(("native handles (hash grid cells and points, BVH nodes, Volume buffers)", handles))
    parts.append(("the replay program (op table)", len(recording.ops) * (TABLE_ROW_BYTES + OP_REF_BYTES)))
    return parts
