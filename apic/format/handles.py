"""Native handles (Mesh, Bvh, HashGrid, Volume) on the wire: written, and read back with every field checked.

A graph with handles is written as format version 2 (``schema.HANDLES_VERSION``); one without stays
version 1, so older readers keep reading what they can. Three places carry them:

* ``handles``: one map per object, ``{"kind", "arrays": [[name, region, offset, dtype, length]],
  "options": {name: scalar}, "data": bin | None}`` (``data``: a Volume's NanoVDB buffer);
* ``{"handles": [[at, index]]}`` inside a kernel-argument blob: the id of handle ``index`` goes
  into the 8 bytes at ``at`` (which the writer zeroes);
* ``handle_slots``: ``[[region, offset, index]]``, words of saved memory that hold an id (an
  array of mesh ids, or a binding's ``wp.handle`` field: ``apic.format.bound_handles``), zeroed in
  the saved contents and written with the new id on load.
"""

from __future__ import annotations

import math
import struct

import numpy as np

from apic.errors import FormatError
from apic.format import fields, schema
from apic.record import handles as rec_handles
from apic.record import ops as rec
from apic.record import handle_words
from apic.targets import handle_kinds as hk

# NanoVDB grid buffers start with one of these magic numbers; the grid's byte size is a u64 at 32.
_NANOVDB_MAGICS = (b"NanoVDB0", b"NanoVDB1", b"NanoVDB2")
_NANOVDB_SIZE = struct.Struct("<Q")
_CONSTRUCTORS = ("sah", "median", "lbvh", "cubql")


def _fail(where: str, message: str):
    raise FormatError(f"corrupt apic graph file: {where}: {message}")


# --- write -------------------------------------------------------------------------------------------
def handle_wire(handle: rec_handles.Handle) -> dict:
    """One handle's map (a Volume's buffer is read from the object now, like region contents)."""
    arrays = [[name, a.start.region, a.start.offset, a.dtype, a.length] for name, a in handle.arrays]
    data = rec_handles.volume_bytes(handle.obj) if handle.kind == hk.VOLUME else None
    return {"kind": handle.kind, "arrays": arrays, "options": dict(handle.options), "data": data}


def blob_handles(blob: rec.Blob) -> list:
    """``[[at, index]]`` of the handle relocations of a blob."""
    return [[r.at, r.target.index] for r in blob.relocs if isinstance(r.target, rec.HandleRef)]


def find_slots(contents: bytes, region: int, ids: dict[int, int]) -> tuple[bytes, list]:
    """Words of ``contents`` that hold a handle id (``ids``: id -> index): zeroed, and listed."""
    words = handle_words.as_words(contents)
    hits = handle_words.id_words(words, list(ids))
    if not len(hits):
        return contents, []
    # an array of a million mesh ids is a million slots: found, numbered and zeroed with NumPy
    known = np.fromiter(ids, dtype=np.uint64, count=len(ids))
    order = np.argsort(known)
    index = np.fromiter((ids[int(i)] for i in known[order]), dtype=np.int64, count=len(ids))
    handles = index[np.searchsorted(known[order], words[hits])]
    cleared = words.copy()
    cleared[hits] = 0
    offsets = hits.astype(np.int64) * 8
    slots = np.column_stack((np.full(len(hits), region, dtype=np.int64), offsets, handles)).tolist()
    return cleared.tobytes() + bytes(contents[len(words) * 8 :]), slots


def clear_slots(contents: bytes, slots: list) -> tuple[bytes, list]:
    """``contents`` with the 8 bytes of each ``[region, offset, index]`` slot zeroed, and the slots."""
    if not slots:
        return contents, slots
    cleared = bytearray(contents)
    for _, offset, _ in slots:
        cleared[offset : offset + 8] = bytes(8)
    return bytes(cleared), slots


# --- read --------------------------------------------------------------------------------------------
def _check_option(kind: str, name: str, value, where: str):
    if name not in rec_handles.OPTIONS[kind]:
        _fail(where, f"a wp.{kind} has no option {name!r}")
    if name in ("support_winding_number",):
        ok = isinstance(value, bool)
    elif name in ("bvh_constructor", "constructor"):
        ok = isinstance(value, str) and value in _CONSTRUCTORS
    elif name in ("bvh_leaf_size", "leaf_size"):
        least = 0 if name == "bvh_leaf_size" else 1  # a Mesh's 0 asks cuBQL to choose; a Bvh's must be >= 1
        ok = type(value) is int and least <= value <= schema.MAX_LEAF_SIZE
    elif name in ("dim_x", "dim_y", "dim_z"):
        ok = type(value) is int and 1 <= value <= schema.MAX_GRID_CELLS
    elif name == "dtype":
        ok = isinstance(value, str) and value in rec_handles.SCALARS  # a list or map is unhashable
    else:  # radius
        ok = isinstance(value, float) and math.isfinite(value) and value > 0
    if not ok:
        _fail(where, f"option {name} of a wp.{kind} has the invalid value {value!r}")
    return value


_REQUIRED = {hk.MESH: ("points", "indices"), hk.BVH: ("lowers", "uppers"), hk.HASH_GRID: (), hk.VOLUME: ()}


def read_handle(entry, where: str, ctx) -> tuple[rec_handles.Handle, bytes | None]:
    """One handle map, checked: its arrays lie inside their regions, its options are in range."""
    entry = fields.check_map(entry, where, ("kind", "arrays", "options"))
    kind = fields.check_str(entry["kind"], f"{where}.kind", max_len=schema.MAX_TAG)
    if kind not in rec_handles.KINDS:
        _fail(f"{where}.kind", f"{kind!r} is not one of {rec_handles.KINDS}")
    arrays = {}
    for i, item in enumerate(fields.check_list(entry["arrays"], f"{where}.arrays", schema.MAX_HANDLE_ARRAYS)):
        w = f"{where}.arrays[{i}]"
        item = fields.check_list(item, w, 5)
        if len(item) != 5:
            _fail(w, "expected [name, region, offset, dtype, length]")
        name = fields.check_str(item[0], f"{w}[0]", max_len=schema.MAX_HANDLE_ARRAY_NAME)
        dtype = fields.check_str(item[3], f"{w}[3]", max_len=schema.MAX_TAG)
        if name not in rec_handles.ARRAYS[kind] or name in arrays:
            _fail(w, f"a wp.{kind} has no array {name!r} (or it is listed twice)")
        if dtype not in rec_handles.DTYPES:
            _fail(w, f"unknown handle array dtype {dtype!r}")
        length = fields.check_int(item[4], f"{w}[4]", 0, schema.MAX_INT32)
        nbytes = length * rec_handles.DTYPE_SIZES[dtype]
        arrays[name] = rec_handles.HandleArray(ctx.ref(item[1:3], w, nbytes), dtype, length)
    options = {}
    raw_options = entry["options"]
    if not isinstance(raw_options, dict) or len(raw_options) > schema.MAX_HANDLE_OPTIONS:
        _fail(f"{where}.options", f"expected a map of at most {schema.MAX_HANDLE_OPTIONS} options")
    for name, value in raw_options.items():
        options[name] = _check_option(kind, name, value, f"{where}.options.{name}")
    missing = [n for n in _REQUIRED[kind] if n not in arrays]
    if kind == hk.HASH_GRID:
        missing += [n for n in ("dim_x", "dim_y", "dim_z") if n not in options]
        if "radius" in options and "points" not in arrays:
            missing.append("points")
        if math.prod(options.get(n, 1) for n in ("dim_x", "dim_y", "dim_z")) > schema.MAX_GRID_CELLS:
            _fail(f"{where}.options", f"a hash grid of more than {schema.MAX_GRID_CELLS} cells")
    if missing:
        _fail(where, f"a wp.{kind} without {', '.join(missing)}")
    data = None
    if kind == hk.VOLUME:
        data = fields.check_bin(entry.get("data"), f"{where}.data")
        if data[:8] not in _NANOVDB_MAGICS or len(data) < 40 or _NANOVDB_SIZE.unpack_from(data, 32)[0] > len(data):
            _fail(f"{where}.data", "not a NanoVDB grid buffer (bad magic or a grid larger than the buffer)")
    handle = rec_handles.Handle(kind, tuple(arrays.items()), tuple(options.items()))
    return handle, data


def read_blob_handles(value: dict, where: str, data_len: int, handle_count: int) -> list[rec.Reloc]:
    """The ``handles`` relocations of a blob (kernel arguments only), each 8 bytes inside it."""
    relocs = []
    for i, item in enumerate(fields.check_list(value.get("handles", []), f"{where}.handles", data_len // 8)):
        w = f"{where}.handles[{i}]"
        item = fields.check_list(item, w, 2)
        if len(item) != 2:
            _fail(w, "expected [at, handle]")
        at = fields.check_int(item[0], f"{w}[0]", 0, max(data_len - 8, 0))
        if at + 8 > data_len:
            _fail(w, f"a handle at byte {at} does not fit in the {data_len}-byte blob")
        if not handle_count:
            _fail(w, "the graph has no handles")
        relocs.append(rec.Reloc(at, rec.HandleRef(fields.check_int(item[1], f"{w}[1]", 0, handle_count - 1))))
    return relocs


def read_slots(value, ctx, handle_count: int) -> tuple[tuple[int, int, int], ...]:
    """``handle_slots``: saved words of non-owned regions that get a rebuilt handle's id."""
    items = fields.check_list(value, "handle_slots")
    valid = _valid_slots(items, ctx, handle_count)
    if valid is not None:
        return valid
    slots, seen = [], set()  # some entry is wrong: read them one by one, so that the error names the first
    for i, item in enumerate(items):
        w = f"handle_slots[{i}]"
        item = fields.check_list(item, w, 3)
        if len(item) != 3:
            _fail(w, "expected [region, offset, handle]")
        ref = ctx.ref(item[:2], w, 8)
        if ctx.regions[ref.region].owned:
            _fail(w, "a handle slot in graph-owned memory")
        if (ref.region, ref.offset) in seen:
            _fail(w, "listed twice")
        seen.add((ref.region, ref.offset))
        if not handle_count:
            _fail(w, "the graph has no handles")
        slots.append((ref.region, ref.offset, fields.check_int(item[2], f"{w}[2]", 0, handle_count - 1)))
    return tuple(slots)


def _valid_slots(items: list, ctx, handle_count: int) -> tuple[tuple[int, int, int], ...] | None:
    """The slots of ``items`` when every entry passes ``read_slots``'s checks, checked with NumPy (a file with
    an array of a million mesh ids loads several times faster); None when any entry fails one."""
    if not items or not handle_count or not ctx.regions:
        return None
    if not all(type(item) is list and len(item) == 3 and type(item[0]) is int and type(item[1]) is int
               and type(item[2]) is int for item in items):
        return None  # not three integers (a bool, a float, a map): the one-by-one reader says where
    try:
        table = np.array(items, dtype=np.int64)
    except OverflowError:
        return None
    regions, offsets, handles = table.T
    if regions.min() < 0 or regions.max() >= len(ctx.regions) or offsets.min() < 0:
        return None
    if handles.min() < 0 or handles.max() >= handle_count:
        return None
    nbytes = np.array([r.nbytes for r in ctx.regions], dtype=np.int64)
    owned = np.array([r.owned for r in ctx.regions], dtype=bool)
    if (offsets > nbytes[regions] - 8).any() or owned[regions].any():
        return None
    order = np.lexsort((offsets, regions))
    if ((np.diff(regions[order]) == 0) & (np.diff(offsets[order]) == 0)).any():
        return None  # listed twice
    ids = np.array([r.id for r in ctx.regions], dtype=np.int64)
    return tuple(map(tuple, np.column_stack((ids[regions], offsets, handles)).tolist()))


# --- the data a native builder will read (checked at load, before Warp builds anything) -----------------
_NUMPY = {"vec3h": np.float16, "vec3f": np.float32, "vec3d": np.float64, "int32": np.int32}
CUBQL = _CONSTRUCTORS.index("cubql")  # Warp's BvhConstructor.CUBQL: its builder crashes on some inputs


def _values(array: rec_handles.HandleArray, views) -> np.ndarray:
    start = array.start.offset
    count = 3 * array.length if array.dtype.startswith("vec3") else array.length
    raw = views[array.start.region][start : start + count * np.dtype(_NUMPY[array.dtype]).itemsize]
    return raw.view(_NUMPY[array.dtype])


def check_handle_data(index: int, handle: rec_handles.Handle, views) -> None:
    """Refuse (FormatError naming the handle and field) data Warp's native builders must not see.

    ``views``: the loaded regions' bytes. Points and bounds must be finite (warp 1.19's cuBQL builder
    crashes on all-NaN mesh points), a Bvh's lower bounds must not exceed its upper bounds (cuBQL
    crashes on lower > upper), a mesh's triangle indices must be whole triangles of its points
    (every builder trusts them), and neither may be empty (Warp's queries and refits crash on an empty
    one, eagerly too).
    """
    arrays = dict(handle.arrays)
    where = f"handles[{index}]"
    for name in ("points", "lowers", "uppers", "velocities"):
        if name in arrays and not np.isfinite(_values(arrays[name], views)).all():
            _fail(f"{where}.arrays.{name}", f"a wp.{handle.kind}'s {name} must be finite (NaN or infinity found)")
    if handle.kind == hk.BVH:
        lowers = _values(arrays["lowers"], views)
        uppers = _values(arrays["uppers"], views)
        if len(lowers) != len(uppers) or (lowers > uppers).any():
            _fail(f"{where}.arrays.lowers", "a wp.Bvh's lower bounds must not exceed its upper bounds "
                                            "(and lowers and uppers must have one entry each per item)")
        if not len(lowers):  # eager Warp builds an empty Bvh, then crashes refitting or querying it
            _fail(f"{where}.arrays.lowers", "a wp.Bvh needs at least one item (Warp crashes on an empty one)")
    if handle.kind == hk.MESH:
        points, indices = arrays["points"], arrays["indices"]
        if "velocities" in arrays and arrays["velocities"].length != points.length:
            _fail(f"{where}.arrays.velocities", f"{arrays['velocities'].length} velocities for {points.length} points")
        values = _values(indices, views)
        if not indices.length:  # eager Warp builds a mesh without triangles, then crashes querying it
            _fail(f"{where}.arrays.indices", "a wp.Mesh needs at least one triangle (Warp crashes querying "
                                             "or refitting one without)")
        if indices.length % 3 or (len(values) and (values.min() < 0 or values.max() >= points.length)):
            _fail(f"{where}.arrays.indices", f"mesh triangle indices must be whole triangles of the mesh's "
                                             f"{points.length} points")
