"""Range entry points for Warp CPU kernels: run tasks ``[begin, end)`` of a launch, not all of them.

Warp's exported CPU entry ``<name>_cpu_forward(bounds, args)`` loops over every task of the launch
itself; the per-task function ``<name>_cpu_kernel_forward`` is ``static`` (a template from 1.19 on)
and so is not in the object's symbol table. Changing the bounds cannot select a slice either: the task
index always starts at 0 and the thread id is computed from it and the bounds' shape. So this module
appends one ``extern "C"`` entry per kernel to Warp's own generated module source (kept in the kernel
cache next to the ``.o``) and compiles it with Warp's own CPU compiler and the module's options (once; later
processes load it from :mod:`apic.replay.parallel.range_cache`):

    <name>_cpu_forward_range(bounds*, args*, size_t begin, size_t end)

Each task is the same generated code as in Warp's loop, so a launch split into ranges computes the
same bits, provided its tasks are independent (see :mod:`apic.record.parallel.splittable`). The parallel graph
replay calls these entries from ``OP_SPLIT`` rows (``apic.replay.parallel.split_pool``);
:mod:`apic.replay.parallel.threaded_launch` from Python threads.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import queue
import re
import threading

from apic import _compat
from apic.record.recording import module_source
from apic.replay.parallel import range_cache, thread_count
from apic.targets.cpu import CPU_LEVELS

_ENTRY_RE = re.compile(r"WP_API void (\w+)_cpu_forward\(\s*(wp::launch_bounds_t(?:<\d+>)?)\s*\*?\s*dim")

_RANGE_TEMPLATE = """
extern "C" {{
WP_API void {name}_cpu_forward_range({bounds} *dim, wp_args_{name} *_wp_args, size_t begin, size_t end)
{{
    wp::tile_shared_storage_t tile_mem;
#if defined(WP_ENABLE_TILES_IN_STACK_MEMORY)
    wp::shared_tile_storage = &tile_mem;
#endif
{body}
}}

// A launch split by world (apic.record.parallel.world_split): each chunk boundary moves up to the next whole
// world (worlds are the launch's first dimension, so a world's tasks are consecutive), so every
// world runs whole, in order, in one chunk.
WP_API void {name}_cpu_forward_world_range({bounds} *dim, wp_args_{name} *_wp_args, size_t begin, size_t end)
{{
    const size_t per_world = dim->shape[0] ? dim->size / dim->shape[0] : 1;
    if (per_world > 1)
    {{
        begin = (begin + per_world - 1) / per_world * per_world;
        end = (end + per_world - 1) / per_world * per_world;
        if (end > dim->size) end = dim->size;
        if (begin > end) begin = end;
    }}
    {name}_cpu_forward_range(dim, _wp_args, begin, end);
}}
}}
"""

RANGE_FN = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_size_t)


def range_source(cpp: str) -> tuple[str, list[str]]:
    """Warp's module source with a range entry appended per forward kernel; also the kernel names."""
    parts, names = [cpp], []
    for name, bounds in _ENTRY_RE.findall(cpp):
        # From warp 1.19 the per-task function is a template on whether the launch is linear and
        # contiguous; <false> is the general path (it only changes how indices are computed).
        per_task = r"template <bool wp_linear_contiguous>\s*static void " + re.escape(name) + r"_cpu_kernel_forward\("
        templated = re.search(per_task, cpp)
        loop = "    for (size_t t = begin; t < end; ++t) {call}(*dim, t, _wp_args);"
        if not templated:
            body = loop.format(call=f"{name}_cpu_kernel_forward")
        else:
            # Choose the linear/contiguous specialisation exactly as Warp's own dispatch does, so
            # each task runs the code it runs in Warp's loop.
            dispatch = re.search(
                r"void " + re.escape(name) + r"_cpu_forward_dispatch\([^)]*\)\s*\{(.*?)\n\}", cpp, re.S
            )
            condition = dispatch and re.search(r"const bool wp_linear_contiguous = (.*?);\n", dispatch.group(1))
            slow = loop.format(call=f"{name}_cpu_kernel_forward<false>")
            if condition:
                fast = loop.format(call=f"{name}_cpu_kernel_forward<true>")
                body = f"    if ({condition.group(1)})\n    {fast}\n    else\n    {slow}"
            else:
                body = slow
        parts.append(_RANGE_TEMPLATE.format(name=name, bounds=bounds, body=body))
        names.append(name)
    return "".join(parts), names


_loaded: dict[str, str] = {}  # SHA-256 of (module source, build options) -> LLVM module of its range object
_images: dict[str, bytes] = {}  # that key -> the compiled range object, to load copies of (per_thread_entries)
_copies: dict[tuple[str, int], str] = {}  # (that key, thread slot) -> LLVM module of that slot's own copy
_lock = threading.Lock()
_forked_mid_build = False  # this process was forked while another thread was building (see _after_fork_in_child)


def _range_object(module_name: str, module_exec) -> str:
    """The key of a module's range object, compiled (once per process) and loaded; under ``_lock``."""
    source, options = module_source(module_name, module_exec)
    level = getattr(module_exec, "apic_cpu_level", None)  # a loaded object built for a CPU level
    key = hashlib.sha256(source + repr((sorted(options.items()), level)).encode()).hexdigest()
    if key not in _loaded and _forked_mid_build:
        raise LookupError("this process was forked while another thread was building a range object: the "
                          "compiler's own locks may be held for ever in it, so it builds none (serial launches)")
    if key not in _loaded:
        if level is not None:  # code built for a level runs here: never for one this CPU lacks (a SIGILL)
            lacking = sorted(CPU_LEVELS[level] - set(_compat.host_target()["features"]))
            if lacking:
                raise LookupError(f"module '{module_name}' was built for {level}, and this CPU lacks "
                                  f"{', '.join(lacking)}: no range object is built for it (serial launches)")
        try:
            text = source.decode("utf-8")
        except UnicodeDecodeError:  # (a load refuses such a source; a live module's is Warp's own)
            raise LookupError(f"the generated source of module '{module_name}' is not UTF-8 text") from None
        text, _ = range_source(text)
        kept = range_cache.key(text.encode("utf-8"), options, level)
        image = range_cache.load(kept)  # built by an earlier process
        if image is None:
            image = _compat.compile_cpu_source(text.encode("utf-8"), options, level)
            range_cache.store(kept, image)
        handle = f"apic_range_{len(_loaded)}_{os.getpid()}"
        _compat.load_object(image, handle)
        _images[key], _loaded[key] = image, handle
    return key


def _lookup(handle: str, module_name: str, symbol_name: str, world: bool) -> int:
    suffix = "_cpu_forward_world_range" if world else "_cpu_forward_range"
    address = _compat.lookup_symbol(handle, symbol_name + suffix)
    if not address:
        raise LookupError(f"no range entry for kernel symbol '{symbol_name}' in module '{module_name}'")
    return address


def range_entry(module_name: str, module_exec, symbol_name: str, world: bool = False) -> int:
    """Address of ``<symbol_name>_cpu_forward_range`` of a module (its range object built once per process);
    with ``world``, of ``<symbol_name>_cpu_forward_world_range``, which runs whole worlds only.

    ``module_exec`` is a live Warp ``ModuleExec`` or a loaded graph's module (``apic.record.recording.module_source``).
    The object is Warp's generated source plus the range entries, compiled with Warp's CPU compiler and
    the options the module was compiled with, so each task runs the same code as in Warp's own loop.
    """
    with _lock:
        handle = _loaded[_range_object(module_name, module_exec)]
    return _lookup(handle, module_name, symbol_name, world)


# A call of a tile builtin in Warp's generated CPU source (wp::tile_load<...>(, wp::adj_tile_store(, ...); every
# kernel declares a wp::tile_shared_storage_t, tiles or not, which this does not match.
_TILE_CALL = re.compile(rb"\bwp::(?:adj_)?tile_\w+\s*[(<]")


def module_uses_tiles(module_name: str, module_exec) -> bool:
    """Whether any kernel or function of a module's generated source calls a tile builtin, as Warp spells
    the call. A kernel that calls tiles (itself or through a function) run by two threads in one loaded
    object corrupts its tile memory (``per_thread_entries``), so a split kernel of a module that calls tiles
    anywhere gets per-thread copies whatever its flag says. This is a second, cautious look only: a loaded
    graph's ``tiles`` flag is the one sealed in its module's kernel manifest (``apic.format.sealed_claims``)
    and its source the one that manifest names, neither of which a ``.wrp`` can change."""
    source, _options = module_source(module_name, module_exec)
    return _TILE_CALL.search(source) is not None


def per_thread_entries(module_name: str, module_exec, symbol_name: str, slots: int, world: bool = False) -> tuple:
    """The range entry of :func:`range_entry` in ``slots`` copies of the range object, one per thread slot.

    A kernel using tiles needs them. On x86-64 Warp's CPU tile code finds its tile memory (the 256 KiB
    arena on the stack of the call that runs the tasks) through a pointer that is a ``static`` of the
    loaded module (``tile.h``: LLVM's JIT has no thread-local storage): two threads in one loaded module
    point each other's tiles into one arena, and corrupt them or crash. Each copy loaded here has its
    own static, so each thread runs its chunks in its own copy, with its own arena. The copies are
    used by split rows only, never by :func:`range_entry`'s callers, and are compiled once: the same
    image is loaded again under another name.
    """
    addresses = []
    with _lock:
        key = _range_object(module_name, module_exec)
        for slot in range(slots):
            handle = _copies.get((key, slot))
            if handle is None and _forked_mid_build:  # the loader's locks may be held for ever, as above
                raise LookupError("this process was forked while another thread was loading a range object: "
                                  "it loads no more copies (serial launches)")
            if handle is None:
                handle = _copies[(key, slot)] = f"apic_range_copy_{len(_copies)}_{os.getpid()}"
                _compat.load_object(_images[key], handle)
            addresses.append(_lookup(handle, module_name, symbol_name, world))
    return tuple(addresses)


class _Pool:
    """Worker threads kept alive across launches: starting a thread per launch costs ~50 us.

    A forked child gets a new pool (:func:`_after_fork_in_child`): the workers did not come along, and
    jobs put in their inboxes would wait for ever.
    """

    def __init__(self) -> None:
        self._workers: list[queue.SimpleQueue] = []
        self._done: queue.SimpleQueue = queue.SimpleQueue()

    def _worker(self, inbox: queue.SimpleQueue) -> None:
        while True:
            job = inbox.get()
            try:
                job[0](*job[1:])
                self._done.put(None)
            except BaseException as exc:  # reported to the launching thread, never lost
                self._done.put(exc)

    def run(self, jobs: list[tuple]) -> None:
        """Run ``jobs[1:]`` on workers and ``jobs[0]`` here; return when all are done."""
        while len(self._workers) < len(jobs) - 1:
            inbox: queue.SimpleQueue = queue.SimpleQueue()
            name = f"apic-range-{len(self._workers)}"
            threading.Thread(target=self._worker, args=(inbox,), daemon=True, name=name).start()
            self._workers.append(inbox)
        for inbox, job in zip(self._workers, jobs[1:]):
            inbox.put(job)
        first_error = None
        try:
            jobs[0][0](*jobs[0][1:])
        finally:
            for _ in jobs[1:]:
                result = self._done.get()
                first_error = first_error or result
        if first_error is not None:
            raise first_error


_pool = _Pool()
_pool_lock = threading.Lock()  # one split launch at a time uses the pool


def run_split(address: int, bounds_ptr: int, args_ptr: int, size: int, threads: int, _keep=None) -> None:
    """Run tasks ``[0, size)`` as ``threads`` contiguous ranges on pooled threads (ctypes drops the GIL),
    or as fewer when fewer can run (``thread_count.running``: one range per OS thread).

    The calling thread runs the first range; ``_keep`` holds what owns the pointers alive meanwhile.
    """
    threads = thread_count.running(threads)
    fn = RANGE_FN(address)
    cuts = [size * k // threads for k in range(threads + 1)]
    jobs = [(fn, bounds_ptr, args_ptr, cuts[k], cuts[k + 1]) for k in range(threads)]
    with _pool_lock:
        _pool.run(jobs)


def _after_fork_in_child() -> None:
    # The child has only the forking thread: the pool's workers are gone, and a lock held by another
    # thread at the fork (a split launch, or a range object being built) would never be released.
    # What _loaded names stays loaded (the child has the parent's memory); a build the fork cut short
    # left no entry, and is done again on first use.
    # A build in flight may also have held Warp's compiler's (LLVM's) internal locks, which no hook
    # resets: such a child builds no range object and runs those launches serially (same bits).
    global _lock, _pool, _pool_lock, _forked_mid_build
    _forked_mid_build = _forked_mid_build or _lock.locked()
    _lock, _pool_lock, _pool = threading.Lock(), threading.Lock(), _Pool()


if hasattr(os, "register_at_fork"):  # POSIX
    os.register_at_fork(after_in_child=_after_fork_in_child)
