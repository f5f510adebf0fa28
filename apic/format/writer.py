"""Writing a graph: ``Recording`` (+ live memory and module binaries) -> ``.wrp`` bytes -> files.

``document`` turns a graph into the msgpack body (plain dicts, lists, ints, strings and bytes);
``encode`` puts the header in front. ``save`` publishes ``<stem>.wrp`` and ``<stem>_modules/``
so that a save that fails at any point leaves an earlier artifact at that path intact:

1. everything is gathered in memory first (nothing on disk changes if that fails);
2. every file is written and fsync'ed before any is published. On Linux each is an unnamed file
   (``O_TMPFILE``) until then, so a process killed while writing leaves nothing behind; elsewhere
   it is a temporary file with a fixed name, ``.<name>.apic-tmp``;
3. saves in one folder take turns from here on (``flock`` on the folder, where the system has it);
   on systems without unnamed files, step 2 happens under the lock too;
4. module binaries are content-addressed (``<module>.<sha256[:16]>.o``), so publishing the new ones
   in ``<stem>_modules/`` (made now, for a first save) never touches a file the old ``.wrp`` uses;
5. the new ``.wrp`` is renamed over the old one (or, for a first save, linked into place): this is
   the commit point. Replacing needs a named source, so on Linux the ``.wrp`` is linked at
   ``.<stem>.wrp.apic-tmp`` for the two system calls before the rename;
6. only then are the files apic wrote in ``<stem>_modules/`` that the new ``.wrp`` does not name
   removed (a module file whose contents match the hash in its name, or a temporary name of one;
   ``ownership``), with the ``.wrp``'s temporary name. The user's own files there are never removed.

An exception before the commit removes every file this save created. A killed process leaves the
old or the new artifact, complete. Killed between the first publication and the end of step 6 (a
few system calls that write no data), it also leaves module files the committed ``.wrp`` does not
name and at most the one temporary name (and a first save, ``<stem>_modules/``); a load ignores
them and the next save at that path removes them. docs/RELIABILITY.md (section 4) has the exact
guarantee and why POSIX allows no less.
"""

from __future__ import annotations

import ctypes
import errno
import gc
import hashlib
import os
import re

import msgpack
import numpy as np

from apic import _compat
from apic.bindings import Binding, make_binding
from apic.errors import BindingError, CaptureError, UnsupportedOperationError
from apic.format import handles as wire_handles
from apic.format import manifest as kernel_manifest
from apic.format import ownership
from apic.format import schema
from apic.format import source as source_format
from apic.record import words as rec_words
from apic.record import ops as rec
from apic.targets.cpu import module_file_name

_TEMP_TAG = ".apic-tmp"

# Native objects a kernel reaches through a u64 handle, found in a module's generated C++ source.
_HANDLE_CALL = re.compile(r"\bwp::(?:adj_)?(mesh|bvh|hash_grid|volume|marching_cubes)_\w+\s*\(")
_HANDLE_NAMES = {"mesh": "Mesh", "bvh": "Bvh", "hash_grid": "HashGrid", "volume": "Volume",
                 "marching_cubes": "MarchingCubes"}


# --- document ---------------------------------------------------------------------------------------
def wrp_paths(path) -> tuple[str, str]:
    """``(<stem>.wrp, <stem>_modules)`` for a user path (``.wrp`` added if missing), absolute."""
    path = os.fspath(path)
    wrp = os.path.abspath(path if path.endswith(schema.EXTENSION) else path + schema.EXTENSION)
    return wrp, wrp[: -len(schema.EXTENSION)] + schema.MODULES_SUFFIX


def _module_image(info) -> tuple[bytes, tuple[str, ...]]:
    """The binary of one recorded module and the native handle types its kernels can dereference."""
    image = getattr(info.module_exec, "apic_image", None)  # a module of a loaded graph
    if image is not None:
        return image, tuple(info.module_exec.native_types)
    if info.module_exec is None:
        raise CaptureError(f"the graph no longer holds Warp module '{info.name}', so it cannot be saved")
    path = _compat.module_binary_path(info.name, info.module_exec)
    with open(path, "rb") as f:
        image = f.read()
    native = set()
    source = _compat.module_source_path(path)
    if source is not None:
        with open(source, encoding="utf-8", errors="replace") as f:
            native = {_HANDLE_NAMES[m] for m in _HANDLE_CALL.findall(f.read())}
    return image, tuple(sorted(native))


def _live_handle_ids() -> np.ndarray:
    """Addresses (``.id``) of every live Warp Mesh, Bvh, HashGrid, Volume... in this process."""
    types = _compat.native_handle_types()
    ids = set()
    if types:
        for obj in gc.get_objects():
            # type(), not isinstance(): isinstance may consult a proxy's __class__ (and warn)
            if issubclass(type(obj), types):
                value = getattr(obj, "id", None)
                if isinstance(value, int) and value:
                    ids.add(value)
    return np.array(sorted(ids), dtype=np.uint64)


def _holds_handle(data: bytes, handle_ids: np.ndarray) -> bool:
    return bool(len(rec_words.id_words(rec_words.as_words(data), handle_ids)))


def _blob(blob: rec.Blob, clear: tuple[slice, ...] = (), params: dict | None = None) -> dict:
    """A blob on the wire; relocated slots (and handle ids) are zeroed so no live address leaks into the file.

    ``params`` maps each named scalar parameter to ``(binding index, current value)``: its slots hold
    the value the graph has now (``set_param`` changed the arena, not the recording) and are listed.
    """
    data = bytearray(blob.data)
    for reloc in blob.relocs:
        data[reloc.at : reloc.at + 8] = bytes(8)
    for slot in blob.params:
        value = params[slot.name][1]
        data[slot.at : slot.at + len(value)] = value
    for part in clear:
        data[part] = bytes(len(data[part]))
    relocs = [[r.at, r.target.region, r.target.offset] for r in blob.relocs if isinstance(r.target, rec.Ref)]
    wire = {"data": bytes(data), "relocs": relocs}
    if blob.arrays:
        wire["arrays"] = [[a.at, a.elem_size, a.indexed] for a in blob.arrays]
    if len(relocs) != len(blob.relocs):
        wire["handles"] = wire_handles.blob_handles(blob)
    if blob.params:
        wire["params"] = [[slot.at, params[slot.name][0]] for slot in blob.params]
    return wire


def _ref(ref: rec.Ref) -> list:
    return [ref.region, ref.offset]


# The int16 flags after a descriptor's int16 ndim mean nothing to Warp's native copy/fill, but a
# warp <= 1.12 reads ndim as int32, so they are written as zero.
_DESCRIPTOR_FLAGS = (slice(50, 56),)


def _op(op, params: dict) -> dict:
    if isinstance(op, rec.Launch):
        return {
            "kind": int(schema.WireOp.LAUNCH), "kernel": op.kernel, "dim": list(op.dim), "bounds": _blob(op.bounds),
            "args": _blob(op.args, (), params),
            "adj_args": None if op.adj_args is None else _blob(op.adj_args, (), params),
        }
    if isinstance(op, rec.Memcpy):
        return {"kind": int(schema.WireOp.MEMCPY), "dst": _ref(op.dst), "src": _ref(op.src), "nbytes": op.nbytes}
    if isinstance(op, rec.Memset):
        return {"kind": int(schema.WireOp.MEMSET), "dst": _ref(op.dst), "value": op.value, "nbytes": op.nbytes}
    if isinstance(op, rec.Memtile):
        return {"kind": int(schema.WireOp.MEMTILE), "dst": _ref(op.dst), "value": _blob(op.value), "count": op.count}
    if isinstance(op, rec.ArrayCopy):
        return {
            "kind": int(schema.WireOp.ARRAY_COPY), "dst": _blob(op.dst, _DESCRIPTOR_FLAGS),
            "src": _blob(op.src, _DESCRIPTOR_FLAGS), "dst_type": op.dst_type, "src_type": op.src_type,
            "elem_size": op.elem_size,
        }
    if isinstance(op, rec.ArrayFill):
        return {
            "kind": int(schema.WireOp.ARRAY_FILL), "dst": _blob(op.dst, _DESCRIPTOR_FLAGS),
            "array_type": op.array_type, "value": _blob(op.value),
        }
    if isinstance(op, rec.Alloc):
        return {"kind": int(schema.WireOp.ALLOC), "dst": _ref(op.dst), "nbytes": op.nbytes}
    if isinstance(op, rec.Branch):
        return {"kind": int(schema.WireOp.BRANCH), "cond": _ref(op.cond), "target": op.target}
    if isinstance(op, rec.Jump):
        return {"kind": int(schema.WireOp.JUMP), "target": op.target}
    if isinstance(op, rec.NativeCall):
        args = [_ref(a) if isinstance(a, rec.Ref) else a for a in op.args]
        return {"kind": int(schema.WireOp.NATIVE_CALL), "fn": op.name, "args": args}
    if isinstance(op, rec.HandleCall):
        return {
            "kind": int(schema.WireOp.HANDLE_CALL), "fn": op.name, "handle": op.handle.index, "ints": list(op.ints),
            "radius": op.radius, "points": None if op.points is None else _blob(op.points, _DESCRIPTOR_FLAGS),
            "groups": None if op.groups is None else _blob(op.groups, _DESCRIPTOR_FLAGS),
        }
    raise UnsupportedOperationError(f"saving an op of type {type(op).__name__}", "this apic cannot write it yet")


def _args_sizes(ops, kernel: int) -> dict:
    """``args_size`` (and ``adj_args_size``) of a CPU kernel: the byte size of Warp's packed argument
    struct (``ctypes.sizeof`` of the ctypes struct its launches were packed with), which every launch's
    blob must then match exactly; empty for a kernel no CPU launch uses."""
    launch = next((op for op in ops if isinstance(op, rec.Launch) and op.kernel == kernel), None)
    if launch is None:
        return {}
    sizes = {"args_size": len(launch.args.data)}
    if launch.adj_args is not None:
        sizes["adj_args_size"] = len(launch.adj_args.data)
    return sizes


def _binding(binding: Binding) -> dict:
    return {
        "name": binding.name, "kind": binding.kind, "region": binding.region, "offset": binding.offset,
        "nbytes": binding.nbytes, "dtype": binding.dtype, "shape": list(binding.shape),
        "strides": list(binding.strides), "elem_size": binding.elem_size, "np_dtype": binding.np_dtype,
        "elem_shape": list(binding.elem_shape),
    }


def named_arrays(inputs, outputs):
    """``(kind, name, array)`` for each entry of ``capture_save``'s ``inputs`` and ``outputs``."""
    seen = set()
    for kind, mapping in (("input", inputs), ("output", outputs)):
        if mapping is None:
            continue
        if not hasattr(mapping, "items"):
            raise TypeError(f"{kind}s must be a dict mapping names to Warp arrays, got {type(mapping).__name__}")
        for name, arr in mapping.items():
            if name in seen:
                raise ValueError(f"binding name '{name}' is used twice (in inputs and outputs)")
            seen.add(name)
            yield kind, name, arr


def _scalar_binding(param, value: bytes) -> dict:
    """A named scalar parameter on the wire (format 3): its type and value; the launch blobs list its slots."""
    return {"name": param.name, "kind": "scalar", "dtype": param.dtype, "nbytes": param.nbytes,
            "np_dtype": param.np_dtype, "elem_shape": list(param.elem_shape), "value": bytes(value)}


def collect_bindings(graph, inputs, outputs) -> list[Binding]:
    """The named bindings of ``inputs`` and ``outputs`` (name -> Warp array) for ``graph``."""
    regions = graph.recording.regions
    scalars = {p.name for p in graph.recording.params}
    found: dict[str, Binding] = {}
    for kind, name, arr in named_arrays(inputs, outputs):
        if name in scalars:
            raise BindingError(f"{kind} '{name}': the graph has a named scalar parameter '{name}' (apic.param); "
                               "an array binding cannot take its name")
        found[name] = make_binding(name, kind, arr, regions, graph.region_addresses)
    # A loaded graph saved again keeps its parameters, unless a new binding takes the name.
    kept = [b for name, b in getattr(graph, "bindings", {}).items() if name not in found]
    return kept + list(found.values())


def document(graph, bindings: list[Binding]) -> tuple[dict, dict[str, bytes]]:
    """The msgpack body of ``graph`` and its module binaries (file name -> bytes)."""
    import warp as wp

    from apic._version import __version__

    recording = graph.recording
    # ids of the graph's own handles are saved as relocations; any other live one cannot be
    graph_ids = {value: i for i, value in enumerate(getattr(graph, "handle_ids", ()))}
    handle_ids = np.setdiff1d(_live_handle_ids(), np.array(list(graph_ids), dtype=np.uint64))

    regions, slots = [], []
    for region in recording.regions:
        contents = None
        if not region.owned:
            contents = ctypes.string_at(graph.region_addresses[region.id], region.nbytes) if region.nbytes else b""
            contents, found = wire_handles.find_slots(contents, region.id, graph_ids)
            slots += found
            if _holds_handle(contents, handle_ids):
                raise UnsupportedOperationError(
                    "capture_save of a graph whose memory holds the id of a native object it does not use",
                    "the object (a Mesh, Bvh, HashGrid, Volume or MarchingCubes) was never passed to the captured "
                    "work, so apic cannot save it; its address is only valid in this process",
                )
        regions.append(region_wire(region, contents))

    images: dict[str, bytes] = {}
    modules = []
    for info in recording.modules:
        image, native = _module_image(info)
        digest = hashlib.sha256(image).hexdigest()
        name = module_file_name(info.name, digest)
        images[name] = image
        modules.append({"name": info.name, "file": name, "sha256": digest, "size": len(image),
                        "native_types": list(native)})

    # each named scalar parameter: (index in "bindings", its value now), after the array bindings
    values = getattr(graph, "param_values", {})
    params = {p.name: (len(bindings) + i, values.get(p.name, p.value)) for i, p in enumerate(recording.params)}
    for op in recording.ops:
        if isinstance(op, rec.Launch):
            for blob in (op.args, op.adj_args):
                # a parameter's bytes are the user's number, never a native object's id
                unnamed = None if blob is None else tuple(slice(s.at, s.at + len(params[s.name][1])) for s in blob.params)
                if blob is not None and _holds_handle(_blob(blob, unnamed, params)["data"], handle_ids):
                    kernel = recording.kernels[op.kernel].key
                    raise UnsupportedOperationError(
                        f"capture_save of a launch of '{kernel}' with an unrecorded native object id argument",
                        "the object was not known to the capture (a MarchingCubes, or one made before the capture "
                        "in a way apic did not see); its address is only valid in this process",
                    )

    target = dict(_compat.host_target())
    target.pop("known_features", None)
    doc = {
        "format": schema.FORMAT_NAME,
        "format_version": schema.BASE_VERSION,  # raised below for a graph with handles
        "writer": {"apic": __version__, "warp": wp.config.version, "numpy": np.__version__},
        "target": target,
        "abi": recording.abi,
        "regions": regions,
        "modules": modules,
        "kernels": [
            {"module": k.module, "key": k.key, "symbol": k.symbol, "adjoint": bool(k.adjoint),
             **({"cpu_blocks": True} if k.cpu_blocks else {}), **_args_sizes(recording.ops, i),
             **({"split_writes": list(k.split_writes)} if k.split_writes is not None else {})}
            for i, k in enumerate(recording.kernels)
        ],
        **_ops_and_sequence(recording.ops, params),
        "bindings": [_binding(b) for b in bindings]
        + [_scalar_binding(p, params[p.name][1]) for p in recording.params],
    }
    if recording.handles:  # a graph without handles stays readable by apic releases that predate them
        doc["handles"] = [wire_handles.handle_wire(h) for h in recording.handles]
        doc["handle_slots"] = slots
    doc["format_version"] = required_version(doc)
    return doc, images


def region_wire(region, contents: bytes | None) -> dict:
    """A region on the wire: size, ownership, the array that covers it (if one does) and its bytes."""
    array = None
    if region.array is not None:
        array = {"dtype": region.array.dtype, "shape": list(region.array.shape), "strides": list(region.array.strides)}
    return {"nbytes": region.nbytes, "owned": region.owned, "array": array, "contents": contents}


def _ops_and_sequence(ops, params: dict) -> dict:
    """Each distinct op once (``ops``), and the order they run in (``sequence``, uint32 indices)."""
    index: dict[int, int] = {}  # id(op) -> position in "ops"; the recording shares equal ops
    distinct = []
    sequence = np.empty(len(ops), dtype="<u4")
    for i, op in enumerate(ops):
        j = index.get(id(op))
        if j is None:
            j = index[id(op)] = len(distinct)
            distinct.append(_op(op, params))
        sequence[i] = j
    return {"ops": distinct, "sequence": sequence.tobytes()}


def required_version(doc) -> int:
    """The format version a body needs: the oldest that holds it, so older apic releases keep reading it:
    3 if it has named scalar parameters, 2 if it holds native handles, else 1."""
    if not isinstance(doc, dict):
        return schema.BASE_VERSION
    bindings = doc.get("bindings")
    if isinstance(bindings, list) and any(isinstance(b, dict) and b.get("kind") == schema.SCALAR_KIND for b in bindings):
        return schema.PARAMS_VERSION
    return schema.HANDLES_VERSION if "handles" in doc else schema.BASE_VERSION


def encode(doc: dict) -> bytes:
    """Header + msgpack body."""
    body = msgpack.packb(doc, use_bin_type=True)
    header = schema.HEADER.pack(schema.MAGIC, required_version(doc), 0, len(body), hashlib.sha256(body).digest())
    return header + body


# --- atomic publication ---------------------------------------------------------------------------
def _write_all(fd: int, data) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        if written <= 0:
            raise OSError(errno.EIO, "short write")
        view = view[written:]


def _temp_path(final: str) -> str:
    """The one temporary name a save ever gives ``final``'s new contents: ``.<name>.apic-tmp``, beside it.

    Fixed, not random: a killed save leaves at most this name per file, which the next save at that
    path (holding the same lock, so the name is stale) reuses or removes, and which a load never
    reads (module names may not start with a dot).
    """
    return os.path.join(os.path.dirname(final), "." + os.path.basename(final) + _TEMP_TAG)


def _unlink_quiet(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


class _Staged:
    """A complete, fsync'ed file for ``final``, not published yet: unnamed (``fd``, Linux) or ``named``
    ``_temp_path(final)``."""

    def __init__(self, final: str, fd: int | None) -> None:
        self.final, self.temp, self.fd, self.named = final, _temp_path(final), fd, False

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)  # an unnamed file that was never linked disappears here
            self.fd = None


def _open_unnamed(folder: str) -> int | None:
    """A new unnamed file in ``folder`` (Linux ``O_TMPFILE``), or None where the system cannot make one."""
    flag = getattr(os, "O_TMPFILE", 0)
    if not flag or not os.path.isdir("/proc/self/fd"):  # naming it later goes through /proc/self/fd
        return None
    try:
        return os.open(folder, flag | os.O_RDWR, 0o644)
    except OSError:  # no O_TMPFILE on this file system; the named file then reports real problems (EACCES, ...)
        return None


def _open_temp(temp: str, created: list[str]) -> int:
    """Create ``temp`` afresh for writing; a file already there is a killed save's (the caller holds the lock)."""
    _unlink_quiet(temp)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0) | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(temp, flags, 0o644)
    created.append(temp)
    return fd


def _stage(final: str, data, created: list[str], folder: str | None = None, named: bool = True) -> _Staged | None:
    """Write ``data`` to a new file for ``final`` and fsync it; not published yet (see ``_publish``).

    Where it can be, the file is unnamed (in ``folder``, by default ``final``'s; on the same file
    system), so a process killed meanwhile leaves nothing. Otherwise it is ``_temp_path(final)``,
    listed in ``created`` (the caller holds the lock), or, unless ``named``, not written: None.
    """
    staged = _Staged(final, _open_unnamed(folder or os.path.dirname(final)))
    if staged.fd is None:
        if not named:
            return None
        staged.fd, staged.named = _open_temp(staged.temp, created), True
    try:
        if hasattr(os, "fchmod"):
            os.fchmod(staged.fd, 0o644)
        _write_all(staged.fd, data)
        os.fsync(staged.fd)
    except BaseException:
        staged.close()
        raise
    if staged.named:
        staged.close()
    return staged


def _link(fd: int, path: str) -> None:
    """Give the unnamed file ``fd`` the name ``path`` (which must not exist).

    ``linkat(AT_FDCWD, "/proc/self/fd/N", dir, name, AT_SYMLINK_FOLLOW)``, as open(2) describes;
    passing ``dst_dir_fd`` makes Python call ``linkat`` rather than ``link`` (which would not follow).
    """
    folder = os.open(os.path.dirname(path), os.O_RDONLY)
    try:
        os.link(f"/proc/self/fd/{fd}", os.path.basename(path), dst_dir_fd=folder, follow_symlinks=True)
    finally:
        os.close(folder)


def _copy_to_temp(fd: int, temp: str, created: list[str]) -> None:
    """Where an unnamed file cannot be linked after all: copy it to ``temp``, fsync'ed."""
    out = _open_temp(temp, created)
    try:
        if hasattr(os, "fchmod"):
            os.fchmod(out, 0o644)
        offset = 0
        while chunk := os.pread(fd, 1 << 20, offset):
            _write_all(out, chunk)
            offset += len(chunk)
        os.fsync(out)
    finally:
        os.close(out)


def _publish(staged: _Staged, created: list[str]) -> None:
    """Put a staged file at its final name, atomically replacing any file there; ``created`` lists new names.

    An unnamed file goes straight to a free final name (``linkat``: no temporary name at all).
    Replacing a file is a rename, and a rename needs a named source: POSIX has no call that puts an
    unnamed file over an existing name. So the file is linked at its temporary name for the two
    system calls before the rename.
    """
    if not staged.named:
        try:
            if not os.path.lexists(staged.final):
                try:
                    _link(staged.fd, staged.final)
                except FileExistsError:
                    pass
                else:
                    created.append(staged.final)
                    return
            _unlink_quiet(staged.temp)  # a killed save's (the caller holds the lock)
            _link(staged.fd, staged.temp)
            created.append(staged.temp)
        except OSError as error:
            if error.errno not in (errno.EXDEV, errno.EPERM, errno.ENOENT, errno.EOPNOTSUPP, errno.EINVAL):
                raise
            _copy_to_temp(staged.fd, staged.temp, created)  # /proc cannot be linked from here
        staged.named = True
    os.replace(staged.temp, staged.final)
    created.remove(staged.temp)


def _fsync_dir(folder: str) -> None:
    if os.name != "posix":
        return
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _same_contents(path: str, data: bytes) -> bool:
    try:
        if os.path.islink(path) or not os.path.isfile(path) or os.path.getsize(path) != len(data):
            return False
        with open(path, "rb") as f:
            return f.read() == data
    except OSError:
        return False


def _lock(folder: str) -> int | None:
    """Lock ``folder`` (``flock``, exclusive) for this process; returns the descriptor to close, or None.

    Saves in one folder take turns to publish, commit and collect garbage, so no save removes a
    module file another has published and is about to commit, and a temporary name found by a save
    is a killed save's. The lock goes with the process: a killed save holds none. Where the system
    has no ``flock`` (Windows), or the folder cannot be opened or locked (some network file
    systems), saves are not serialized.
    """
    try:
        import fcntl
    except ImportError:
        return None
    try:
        fd = ownership.open_folder(folder)  # never through a symlink swapped in after the caller resolved it
    except OSError as error:
        if error.errno in (errno.ELOOP, errno.ENOTDIR):
            raise
        return None  # a folder this user may write but not read, say
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
    except OSError as error:
        if error.errno not in (errno.ENOLCK, errno.EOPNOTSUPP, errno.EINVAL, errno.EBADF):
            os.close(fd)
            raise
    except BaseException:
        os.close(fd)
        raise
    return fd


def publish(wrp_path: str, modules_dir: str, data: bytes, images: dict[str, bytes]) -> None:
    """Write ``data`` to ``wrp_path`` and exactly ``images`` into ``modules_dir``, atomically (see above)."""
    os.makedirs(os.path.dirname(wrp_path), exist_ok=True)
    # resolved once: the lock and the cleanup then open the folders with O_NOFOLLOW
    out_dir = os.path.realpath(os.path.dirname(wrp_path))
    wrp_path = os.path.join(out_dir, os.path.basename(wrp_path))
    modules_dir = os.path.join(out_dir, os.path.basename(modules_dir))
    if os.path.isdir(wrp_path):
        raise IsADirectoryError(errno.EISDIR, "cannot save a graph over a directory", wrp_path)
    if os.path.islink(modules_dir) or (os.path.lexists(modules_dir) and not os.path.isdir(modules_dir)):
        raise FileExistsError(errno.EEXIST, "the modules folder path exists and is not a folder", modules_dir)

    created: list[str] = []  # names this save created, removed on failure (and the folder, if made)
    staged: dict[str, _Staged | None] = {}
    lock, made_dir = None, False
    try:
        try:
            # Unnamed files are written before taking the lock: nothing can see them. (Modules are
            # made in the .wrp's folder when there is no modules folder yet: it is made only later.)
            early = modules_dir if os.path.isdir(modules_dir) else out_dir
            for name, image in images.items():
                final = os.path.join(modules_dir, name)
                if not _same_contents(final, image):
                    staged[final] = _stage(final, image, created, early, named=False)
            staged[wrp_path] = _stage(wrp_path, data, created, out_dir, named=False)
            lock = _lock(out_dir)
            if not os.path.isdir(modules_dir):
                os.mkdir(modules_dir)
                made_dir = True
            # under the lock, look again (another save may have changed the folder meanwhile), and
            # write what could not be written unnamed: every file is written before any is published
            modules = []
            for name, image in images.items():
                final = os.path.join(modules_dir, name)
                if _same_contents(final, image):
                    if staged.get(final) is not None:
                        staged.pop(final).close()
                    continue
                if staged.get(final) is None:
                    staged[final] = _stage(final, image, created)
                modules.append(staged[final])
            if staged[wrp_path] is None:
                staged[wrp_path] = _stage(wrp_path, data, created)
            if made_dir:
                _fsync_dir(out_dir)  # the new folder's name is on disk before a .wrp can refer to it
            # everything is written and synced: publish the modules, then commit the .wrp
            for file in modules:
                _publish(file, created)
            _fsync_dir(modules_dir)
            _publish(staged[wrp_path], created)  # the commit point
        except BaseException:
            for path in reversed(created):
                try:
                    os.unlink(path)
                except OSError:
                    pass
            if made_dir:
                try:
                    os.rmdir(modules_dir)
                except OSError:
                    pass
            raise
        finally:
            for file in staged.values():
                if file is not None:
                    file.close()
        try:
            _fsync_dir(out_dir)
        except OSError:
            pass
        _collect_garbage(wrp_path, modules_dir, set(images), lock)
    finally:
        if lock is not None:
            os.close(lock)


def _collect_garbage(wrp_path: str, modules_dir: str, keep: set[str], out_fd: int | None) -> None:
    """After a commit: remove the ``.wrp``'s temporary name and, in ``<stem>_modules/``, every file
    apic wrote (an earlier graph's, a killed save's) that the committed ``.wrp`` does not use
    (``keep``). A file apic cannot show it wrote is never removed (``ownership``). Works relative to
    ``out_fd`` (the locked folder) where there is one, never through a symlink."""
    def name(path: str) -> str:  # relative to the locked folder where there is one
        return path if out_fd is None else os.path.basename(path)

    try:
        os.unlink(name(_temp_path(wrp_path)), dir_fd=out_fd)
    except OSError:
        pass
    try:
        folder = ownership.open_folder(name(modules_dir), dir_fd=out_fd)
    except OSError:
        return  # gone, or a symlink swapped in: nothing is removed
    try:
        ownership.remove_stale(folder, keep)
    finally:
        os.close(folder)


def save(graph, path, inputs=None, outputs=None, source_fallback: bool = False) -> str:
    """Serialize ``graph`` to ``<stem>.wrp`` + ``<stem>_modules/``; returns the ``.wrp`` path."""
    wrp_path, modules_dir = wrp_paths(path)
    bindings = collect_bindings(graph, inputs, outputs)
    doc, images = document(graph, bindings)
    if source_fallback:  # each module's generated C++ and build options too (apic.format.source)
        source_format.add_sources(graph, doc, images)
    # each module's kernel manifest (the argument layouts its kernels expect, and its source's SHA-256),
    # beside the module binary: what a load checks the file's launches against
    kernel_manifest.add_manifests(graph.recording, doc, images)
    publish(wrp_path, modules_dir, encode(doc), images)
    return wrp_path
