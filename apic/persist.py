"""Saving and loading graphs: ``capture_save``, ``capture_load``, ``capture_load_from_bytes``, and
``capture_save_to_bytes`` (apic's own: the bytes ``capture_load_from_bytes`` takes, made in memory).

Same names, signatures and semantics as Warp 1.19's, installed as ``wp.capture_save`` etc. by
``import apic`` on every supported warp-lang version. The files are apic's own (see
docs/FORMAT.md): ``<stem>.wrp`` plus ``<stem>_modules/`` with one compiled binary per Warp module.
"""

from __future__ import annotations

import functools
import gc
import os
from collections.abc import Mapping


from apic.errors import CaptureError, GraphLoadError, GraphNotFoundError
from apic.format.module_folder import ModuleFolder, read_regular
from apic.targets.cpu import check_cpu_level

# The file format and the loaders are imported by the first save or load, not by ``import apic``
# (they add about 70 ms, a quarter of it, to a process that only captures and replays).


def capture_save(graph, path, inputs: dict | None = None, outputs: dict | None = None,
                 source_fallback: bool = False, cpu_target: str | None = None) -> None:
    """Serialize a captured graph to a ``.wrp`` file for later replay, in this or another process.

    The graph must have been captured on the CPU with ``apic=True``. Writes ``<stem>.wrp`` and
    ``<stem>_modules/`` (one compiled binary per Warp module); keep them together. The save is
    atomic: if it fails at any point, an earlier artifact at ``path`` stays intact; if the process
    is killed, ``path`` holds the earlier artifact or the new one, complete (docs/RELIABILITY.md,
    section 4, lists what else such a kill can leave, which loads ignore and the next save removes).

    Args:
        graph: A graph returned by ``wp.capture_end`` / ``wp.ScopedCapture`` (``apic=True``), or a
            loaded graph.
        path: Output path; ``.wrp`` is added if missing.
        inputs: Named input arrays, e.g. ``{"positions": pos}``.
        outputs: Named output arrays, e.g. ``{"results": out}``.
        source_fallback: Also keep each module's generated source (C++, or CUDA ``.cu``) and build
            options, so that a load where a saved object cannot be used (another CPU's instruction set,
            another warp-lang's native layouts; a CUBIN / PTX the GPU cannot run or its driver rejects;
            a missing or corrupt object) compiles the source with that machine's Warp instead of
            refusing (docs/FORMAT.md).
        cpu_target: (apic only) ``None`` saves each module's object as Warp compiled it, for this host's
            CPU (``-march=native``), so it loads only on CPUs with every feature this one has. An x86-64
            level, ``"x86-64-v2"``, ``"x86-64-v3"`` or ``"x86-64-v4"``, compiles each module's generated
            source for that level instead (plus the features Warp's compiler always uses: AVX and F16C),
            and the file records it: the graph then loads on any such CPU. On AArch64 the levels are
            ``"armv8-a"``, ``"armv8.2-a"`` (Jetson Orin), ``"armv9-a"`` (Grace) and ``"armv9.2-a"`` (Jetson
            Thor); a level is one of this machine's CPU family (``apic.targets.cpu.CPU_LEVELS``). Needs the
            generated source (Warp's kernel cache, or a loaded graph saved with ``source_fallback=True``).

    A named array no captured operation touches is saved as extra graph memory (its current
    contents), as upstream does: the loaded graph's ``set_param`` / ``get_param`` reach it, and no
    replayed operation uses it. Unlike upstream Warp, a name binds the
    array itself (its offset, dtype, shape and strides), not its whole base allocation. The saved
    contents of each region are its bytes at the time of the save. A loaded graph saved again
    keeps its parameters (a binding given here replaces one of the same name).

    Raises:
        RuntimeError: If the graph was not captured with ``apic=True``, or, with ``source_fallback=True`` or
            ``cpu_target``, a module's source is missing or does not compile (``apic.CaptureError``).
        TypeError: If ``graph`` is not an apic graph or a binding is not a Warp array.
        ValueError: If ``cpu_target`` is not a level apic compiles for, a binding name is used twice, or
            (``apic.BindingError``) an array lies partly inside and partly outside memory the graph uses.
        NotImplementedError: If the graph holds something that cannot be saved yet (a Mesh id).
        OSError: If the files cannot be written (the earlier artifact stays intact).
    """
    from apic.format import writer  # lazy: the file format (see the top of this module)

    graph = _saveable(graph, inputs, outputs, cpu_target)
    writer.save(graph, path, inputs, outputs, source_fallback=bool(source_fallback), cpu_level=cpu_target)


def capture_save_to_bytes(graph, inputs: dict | None = None, outputs: dict | None = None,
                          source_fallback: bool = False, cpu_target: str | None = None) -> tuple[bytes, dict]:
    """Serialize a captured graph in memory: what :func:`capture_save` would write, without touching the disk.

    (apic only: upstream Warp has no such call.) The arguments are :func:`capture_save`'s, less the path.
    Returns ``(data, modules)``: the ``.wrp`` file's bytes and a new dict mapping each file name of
    ``<stem>_modules/`` to its contents, exactly the two arguments :func:`capture_load_from_bytes` takes::

        data, modules = wp.capture_save_to_bytes(graph, inputs={"x": x})
        g = wp.capture_load_from_bytes(data, modules)   # in this or any other process

    Everything is made before anything is returned: a failure raises (the exceptions of
    :func:`capture_save`, less ``OSError``) and returns nothing partial. The bytes are a snapshot of
    the graph's memory at the call, as a save is.
    """
    from apic.format import writer  # lazy: the file format (see the top of this module)

    graph = _saveable(graph, inputs, outputs, cpu_target, "capture_save_to_bytes")
    data, images = writer.serialize(graph, inputs, outputs, source_fallback=bool(source_fallback), cpu_level=cpu_target)
    return data, dict(images)


def _saveable(graph, inputs, outputs, cpu_target, call: str = "capture_save"):
    """What the writer serializes for ``graph``, once it is checked to be saveable (see ``capture_save``)."""
    from apic.format import unrecorded_bindings, write_bindings  # lazy: the file format (the top of this module)

    check_cpu_level(cpu_target)
    backend = getattr(graph, "backend", None)  # every apic graph has one (apic.replay.backends)
    if backend is None:
        raise TypeError(
            f"{call}() with apic saves graphs captured by apic (on the CPU, or on CUDA with apic=True); "
            f"got {type(graph).__name__}"
        )
    if not graph.apic:
        raise CaptureError(
            "Graph was not captured with apic=True. Pass apic=True to capture_begin() or ScopedCapture()."
        )
    invalid = getattr(graph.recording, "invalid_handles", ())
    if invalid:
        # upstream's words ("invalid or expired mesh ID 0x..."); a wp.handle may name any native object
        raise CaptureError(
            f"{call}(): invalid or expired mesh ID {invalid[0]}: no live wp.Mesh, Bvh, HashGrid or Volume "
            "has that id, so the graph cannot be saved"
        )
    if not backend.keeps_untouched_arrays:
        return graph
    # arrays no captured operation touches are saved as extra graph memory, as upstream does
    return unrecorded_bindings.with_untouched(graph, write_bindings.named_arrays(inputs, outputs))


def _read_graph_file(wrp_path: str, shown: str) -> bytes:
    """The ``.wrp`` bytes; a file that cannot be read raises upstream's message (``shown``: the path as given)."""
    try:
        return read_regular(wrp_path)  # a regular file only: a FIFO or /dev/zero would hang or fill memory
    except OSError as error:
        kind = GraphNotFoundError if isinstance(error, FileNotFoundError) else GraphLoadError
        raise kind(error.errno, f"Failed to load APIC graph from {shown}: {error.strerror or error}",
                             wrp_path) from error


def _without_gc_passes(load):
    """``load`` with the cyclic garbage collector paused: a load makes a few objects per op of the file and
    keeps them all, so the passes that allocation would trigger find nothing and cost more than the load
    (a 10,000-op file: most of its time). Garbage it leaves is collected at the next pass after."""

    @functools.wraps(load)
    def paused(*args, **kwargs):
        if not gc.isenabled():
            return load(*args, **kwargs)
        gc.disable()
        try:
            return load(*args, **kwargs)
        finally:
            gc.enable()

    return paused


@_without_gc_passes
def capture_load(path, device=None):
    """Load a graph saved by :func:`capture_save` from ``<stem>.wrp`` and ``<stem>_modules/``.

    Works in a process that never defined the graph's kernels, before or after ``wp.init()``.

    Args:
        path: Path to the ``.wrp`` file (the extension is added if missing).
        device: The device to replay on: ``None`` means ``"cpu"`` for a CPU graph and ``"cuda:0"`` for a
            CUDA graph (saved from a CUDA capture with ``apic=True``; replayed with cuda-python).

    Returns:
        A loaded :class:`apic.Graph` (``is_loaded`` is True) for ``wp.capture_launch``.

    Raises:
        apic.FormatError: The file is not an apic graph, or is corrupt, truncated, tampered
            with, upstream Warp's own format, or of a newer format version.
        apic.IncompatibleGraphError: The graph cannot run safely here (other CPU, OS, ...).
        apic.GraphLoadError: The file cannot be read ("Failed to load APIC graph from <path>.wrp"); an
            ``OSError`` and a ``RuntimeError``.
    """
    from apic.format import reader, writer  # lazy: the file format (see the top of this module)

    wrp_path, modules_dir = writer.wrp_paths(path)
    shown = os.fspath(path) if os.fspath(path).endswith(".wrp") else f"{os.fspath(path)}.wrp"
    saved = reader.read(_read_graph_file(wrp_path, shown))

    folder = ModuleFolder.of(modules_dir, saved)
    fetch = folder.fetch
    try:
        return _load(saved, fetch, modules_dir, device, folder.names)
    finally:
        folder.close()


def _load(saved, fetch, modules_dir: str, device, names=list):
    """Replay-ready graph from a read ``saved`` and its module source ``fetch`` (``apic.loading.load``)."""
    from apic import loading  # lazy: the loaders (see the top of this module)

    return loading.load(saved, fetch, f"{modules_dir}", device, names)


@_without_gc_passes
def capture_load_from_bytes(data, modules: Mapping | None = None, device=None):
    """Load a graph from in-memory bytes: ``data`` is a ``.wrp`` file's contents.

    Args:
        data: The ``.wrp`` contents: bytes, bytearray, memoryview or a C-contiguous NumPy array.
        modules: Maps each file name in ``<stem>_modules/`` to its contents (bytes-like). Entries
            the graph does not use are ignored. May be omitted when the graph launches no kernels.
        device: The device to replay on (``None`` means ``"cpu"``).

    apic copies everything it needs, so the caller may release the buffers afterwards.

    Raises:
        TypeError: ``data`` or a module is not bytes-like, ``modules`` is not a mapping, or a
            module name is not a string.
        ValueError: A buffer is not C-contiguous.
        apic.FormatError: The data is malformed, or a needed module is missing or does not match
            its checksum.
    """
    from apic.format import reader  # lazy: the file format (see the top of this module)

    if modules is None:
        modules = {}
    elif not isinstance(modules, Mapping):
        raise TypeError(f"modules must be a mapping from filename to bytes, got {type(modules).__name__}")
    views = {}
    for name, contents in modules.items():
        if not isinstance(name, str):
            raise TypeError(f"Module names must be strings, got {type(name).__name__}")
        views[name] = reader.as_bytes(contents, f"Module '{name}'")
    return _load(reader.read(reader.as_bytes(data)), views.get, "the provided modules", device, views.keys)
