"""The CPU side: the kernel entry ABI, module binaries in Warp's cache, loading them, compiling source."""

from __future__ import annotations

import contextlib
import ctypes
import functools
import hashlib
import inspect
import json
import os
import platform
import re
import sys
import tempfile

import warp as wp

from apic._probes import cache_store, host, host_os
from apic._probes.internals import WARP_VERSION, cache_folders, mangled_name, runtime, wp_build, wp_codegen, wp_context
from apic.targets.cpu import ABI_BY_POINTER, ABI_BY_VALUE, CPU_LEVELS, FEATURE_MACROS
from apic.targets.cpu import check_cpu_level, cpu_family
from apic.targets.cpu import KERNEL_SUFFIX as CPU_KERNEL_SUFFIX

# Builds and loads below make temporary files. Python resolves its temporary folder on first use while
# holding a lock of tempfile's, which no at-fork hook resets: a child forked while another thread was
# there (a range object's first build) would wait for ever in its own build. Resolved once here, in
# the importing thread, it is never resolved again (about half a millisecond).
tempfile.gettempdir()

# --- CPU kernel entry ABI -------------------------------------------------------------------------
# warp 1.9-1.12 export `f(launch_bounds_t dim, args*)` with the 32-byte bounds struct *by value*;
# 1.13 and later export `f(launch_bounds_t* dim, args*)`. Read it off the code generator's template.
_ENTRY_RE = re.compile(r"_cpu_forward\(\s*wp::launch_bounds_t(?:<[^>]*>)?\s*(\*?)\s*dim")


def _probe_bounds_by_value() -> bool:
    templates = [v for k, v in vars(wp_codegen).items() if k.startswith("cpu_module") and isinstance(v, str)]
    match = next(filter(None, map(_ENTRY_RE.search, templates)), None)
    if match is None:
        raise ImportError(
            f"apic does not recognise the CPU kernel entry point of warp-lang {WARP_VERSION}; "
            "supported versions are 1.12 to 1.19"
        )
    return match.group(1) != "*"


BOUNDS_BY_VALUE: bool = _probe_bounds_by_value()

# How a by-value 32-byte struct is passed on this platform. SysV x86-64 puts it on the stack after
# the six register arguments; Win64 and AArch64 pass a pointer to a caller-owned copy instead.
SYSV_X86_64: bool = getattr(cpu_family(platform.machine()), "BIG_STRUCT_ON_STACK", False) and sys.platform != "win32"

# Name of the ABI, written into saved files so a loader can refuse an incompatible one.
KERNEL_ABI: str = ABI_BY_VALUE if BOUNDS_BY_VALUE else ABI_BY_POINTER


def kernel_symbol(module_exec, kernel, adjoint: bool) -> str:
    """The exported symbol name of a kernel's CPU entry point."""
    return mangled_name(module_exec, kernel) + CPU_KERNEL_SUFFIX[bool(adjoint)]


# --- Saved graphs: module binaries, native object loading, host target -----------------------------
def module_binary_path(module_name: str, module_exec) -> str:
    """Path of the compiled CPU binary (``.o``) behind a loaded ``module_exec`` in Warp's kernel cache.

    warp 1.19 records it as ``module_exec.binary_path``. Earlier versions keep it at
    ``<kernel cache>/wp_<name>_<hash7>/<same>[.cpu<isa>].o`` (``wp_<name>`` with ``strip_hash``).
    """
    path = getattr(module_exec, "binary_path", None)
    if path:
        return os.fspath(path)
    for stem, folder in cache_folders(module_name, module_exec):
        exact = os.path.join(folder, stem + ".o")
        if os.path.isfile(exact):
            return exact
        try:
            candidates = sorted(f for f in os.listdir(folder) if f.startswith(stem) and f.endswith(".o"))
        except OSError:
            continue
        if len(candidates) == 1:
            return os.path.join(folder, candidates[0])
    raise FileNotFoundError(
        f"cannot find the compiled CPU binary of Warp module '{module_name}' in the kernel cache "
        f"({wp.config.kernel_cache_dir}); was the cache cleared after the capture?"
    )


def module_source_path(binary_path: str) -> str | None:
    """The generated C++ source next to a module binary in the cache, if it is there."""
    folder = os.path.dirname(binary_path)
    stem = os.path.basename(folder)
    path = os.path.join(folder, stem + ".cpp")
    return path if os.path.isfile(path) else None


def _llvm():
    llvm = getattr(runtime(), "llvm", None)
    if llvm is None:
        raise RuntimeError("loading saved CPU graphs needs Warp's LLVM backend (warp-clang), which is not available")
    return llvm


def _legacy_linker_arg() -> list:
    """``wp_load_obj`` takes a ``use_legacy_linker`` flag from warp 1.13 on (with the config option)."""
    llvm = _llvm()
    argtypes = getattr(llvm.wp_load_obj, "argtypes", None)
    takes_flag = len(argtypes) == 3 if argtypes else hasattr(wp.config, "legacy_cpu_linker")
    return [ctypes.c_bool(bool(getattr(wp.config, "legacy_cpu_linker", False)))] if takes_flag else []


def _object_loader_from_memory():
    """Warp's ``wp_load_obj_from_bytes`` where it has one that apic can call (1.19+), else None."""
    return getattr(_llvm(), "wp_load_obj_from_bytes", None) if _legacy_linker_arg() else None


def loads_objects_from_memory() -> bool:
    """Whether a CPU object is loaded from memory; else through a file (written, so a file-size limit or a full
    disk makes loading fail)."""
    return _object_loader_from_memory() is not None


def load_object(data: bytes, name: str) -> None:
    """Load a relocatable CPU object (a module's ``.o``) from memory under the LLVM module ``name``.

    Uses ``wp_load_obj_from_bytes`` where Warp has it (1.19+), else a private unnamed (or temporary) file.
    ``name`` must be unique in the process: loading a name twice returns the old module's code.
    """
    llvm = _llvm()
    flag = _legacy_linker_arg()
    from_bytes = _object_loader_from_memory()
    if from_bytes is not None:
        buffer = ctypes.create_string_buffer(data, len(data))
        result = from_bytes(ctypes.cast(buffer, ctypes.c_void_p), ctypes.c_size_t(len(data)),
                            ctypes.c_char_p(name.encode()), *flag)
    else:
        # Warp reads the object from a path: an unnamed file (Linux O_TMPFILE, reached through
        # /proc/self/fd) leaves nothing behind even if the process dies here; else a temporary file.
        fd, path = None, None
        if getattr(os, "O_TMPFILE", 0) and host_os.fd_path(0) is not None:
            try:
                fd = os.open(tempfile.gettempdir(), os.O_TMPFILE | os.O_RDWR, 0o600)
                path = host_os.fd_path(fd)
            except OSError:
                fd = None
        if fd is None:
            fd, path = tempfile.mkstemp(prefix="apic-", suffix=".o")
        try:
            view = memoryview(data)
            try:
                while view:
                    view = view[os.write(fd, view) :]
            except OSError as error:  # a full disk: say what was being written, and where
                raise OSError(error.errno, f"cannot stage the module object '{name}' in the temporary folder "
                                           f"{tempfile.gettempdir()} for Warp's loader (warp-lang "
                                           f"{WARP_VERSION} loads objects from files): {error.strerror}") from None
            result = llvm.wp_load_obj(ctypes.c_char_p(path.encode()), ctypes.c_char_p(name.encode()), *flag)
        finally:
            os.close(fd)
            if not path.startswith(host_os.PROC + os.sep):
                os.unlink(path)
    if result != 0:
        found, here = host_os.object_format_of(data), host_os.object_format()
        why = "" if found == here else f": it is {found or 'in no object format apic knows'}, this system loads {here}"
        raise RuntimeError(f"Warp's LLVM backend could not load the CPU module object '{name}' (error {result}){why}")


def lookup_symbol(name: str, symbol: str) -> int:
    """Address of ``symbol`` in the loaded LLVM module ``name`` (0 if absent). Never after unload."""
    return int(_llvm().wp_lookup(ctypes.c_char_p(name.encode()), ctypes.c_char_p(symbol.encode())) or 0)


def unload_object(name: str) -> None:
    """Unload the LLVM module ``name`` (quietly does nothing once Warp is shutting down)."""
    try:
        wp_context.runtime.llvm.wp_unload_obj(ctypes.c_char_p(name.encode()))
    except (AttributeError, TypeError):
        pass


@functools.lru_cache(maxsize=None)
def native_target() -> dict:
    """The CPU this process runs on: OS, machine, CPU name and the instruction-set features it has (what
    Warp's ``-march=native`` objects may use).

    Asked of LLVM (llvmlite) once per CPU and llvmlite version, then kept in apic's cache folder: a later
    process reads it there instead of loading LLVM (a load pays for no llvmlite import). Kept only where
    the CPU's own CPUID names it (``host.cpu_identity``), so that a cache folder shared with another
    machine, or an emulated CPU, never gets this one's answer.
    """
    identity = host.cpu_identity()
    key = {"cpu": identity, "llvmlite": host.distribution_version("llvmlite"), "system": sys.platform,
           "machine": platform.machine().lower()}
    path = os.path.join(cache_store.cache_folder(), "host-target-" + hashlib.sha256(
        json.dumps(key, sort_keys=True).encode()).hexdigest()[:32] + ".json") if identity else None
    cached = _read_target(path, key) if path else None
    if cached is not None:
        return cached
    target = _llvm_target()
    if path:
        kept = json.dumps({"key": key, "target": target}, sort_keys=True).encode()
        cache_store.store_in_cache(path, kept, _TARGET_MAGIC)
    return target


def _llvm_target() -> dict:
    try:
        from llvmlite import binding as llvm_binding  # lazy, numba's dependency: loading LLVM costs time

        cpu = llvm_binding.get_host_cpu_name()
        features = sorted(k for k, v in llvm_binding.get_host_cpu_features().items() if v)
        known = sorted(llvm_binding.get_host_cpu_features().keys())
    except Exception:  # pragma: no cover - llvmlite without host queries
        cpu, features, known = "unknown", [], []
    probed = host.cpu_features()  # the family's probe decides the features it reads off the CPU itself
    if probed is not None:
        cpu = probed["cpu"] or cpu
        features = sorted(set(features) - probed["known"] | probed["features"])
        known = sorted(set(known) | probed["known"])
    return {
        "system": sys.platform,
        "machine": platform.machine().lower(),
        "cpu": cpu,
        "features": features,
        "known_features": known,
        "byteorder": sys.byteorder,
        "pointer_bits": ctypes.sizeof(ctypes.c_void_p) * 8,
    }


_MAX_TARGET_BYTES = 1 << 20
_TARGET_MAGIC = b'{"key": '  # how a kept target's file starts (its keys sorted)


def _read_target(path: str, key: dict) -> dict | None:
    """The target kept in ``path`` for ``key``, if the file holds exactly that; else None (asked again)."""
    try:
        kept = json.loads((cache_store.read_cache_file(path, _MAX_TARGET_BYTES) or b"").decode())
        target = kept["target"]
        shaped = (kept["key"] == key and set(target) == {"system", "machine", "cpu", "features", "known_features",
                                                         "byteorder", "pointer_bits"}
                  and all(isinstance(target[k], str) for k in ("system", "machine", "cpu", "byteorder"))
                  and all(isinstance(target[k], list) and all(isinstance(v, str) for v in target[k])
                          for k in ("features", "known_features"))
                  and type(target["pointer_bits"]) is int)
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        return None
    if not shaped or target["system"] != sys.platform or target["pointer_bits"] != ctypes.sizeof(ctypes.c_void_p) * 8:
        return None
    return target


def host_target() -> dict:
    """The CPU a load checks a saved graph against: ``native_target()``."""
    return native_target()


# --- Source fallback: a module's CPU build options, and compiling its generated C++ again --------------
def module_build_options(module_name: str, module_exec) -> dict:
    """The options Warp compiled module ``module_name`` with for the CPU (what ``build_cpu`` is given).

    warp 1.19 resolves them with ``Module.resolve_options``; earlier versions take the module's own
    options with ``config.mode`` / ``config.verify_fp`` filled in (they pass no optimization level or
    flags). A module Warp no longer knows gets Warp's defaults.
    """
    module = getattr(wp_context, "user_modules", {}).get(module_name)
    block_dim = int(getattr(module_exec, "block_dim", None) or 256)
    # probed on the class: warp 1.12's Module.__getattr__ recurses on a missing attribute
    if module is not None and hasattr(type(module), "resolve_options"):
        options = dict(module.resolve_options(wp.config, block_dim=block_dim))
    else:
        options = dict((vars(module).get("options") if module is not None else None) or {})
        options["verify_fp"] = bool(getattr(wp.config, "verify_fp", False))
    level = options.get("optimization_level")
    return {
        "mode": str(options.get("mode") or wp.config.mode or "release"),
        "fast_math": bool(options.get("fast_math", False)),
        "fuse_fp": bool(options.get("fuse_fp", True)),
        "verify_fp": bool(options.get("verify_fp", False)),
        "optimization_level": 2 if level is None else int(level),  # Warp's CPU default
        "block_dim": block_dim,
        "enable_tiles_in_stack_memory": bool(options.get("enable_tiles_in_stack_memory", False)),
        "extra_flags": str(options.get("cpu_compiler_flags") or ""),
    }


def _build_cpu(source: bytes, options: dict, extra_flags: str) -> bytes:
    """Compile ``source`` with this process's Warp (``warp._src.build.build_cpu``); the ``.o``. Options this
    warp-lang's ``build_cpu`` does not take are left out (1.12 takes mode, verify_fp, fast_math and fuse_fp only,
    and reads the tile setting from its config). A compiler error names the source ``module.cpp``, the same
    words in every process (``apic.format.source_cache`` keeps them), never its temporary folder.
    """
    if getattr(wp_context, "runtime", None) is None:
        wp.init()
    _llvm()
    accepted = inspect.signature(wp_build.build_cpu).parameters
    kwargs = {key: value for key, value in {**options, "extra_flags": extra_flags}.items() if key in accepted}
    with tempfile.TemporaryDirectory(prefix="apic-source-") as folder:
        cpp_path, obj_path = os.path.join(folder, "module.cpp"), os.path.join(folder, "module.o")
        with open(cpp_path, "wb") as f:
            f.write(source)
        with _compiler_messages(os.path.join(folder, "messages.txt")) as messages:
            try:
                wp_build.build_cpu(obj_path, cpp_path, **kwargs)
            except Exception as error:
                raise RuntimeError(f"{error}: {messages().replace(folder + os.sep, '')}") from None
        with open(obj_path, "rb") as f:
            return f.read()


@contextlib.contextmanager
def _compiler_messages(path: str):
    """Warp's CPU compiler writes its diagnostics to file descriptor 2: send them to ``path`` while it runs
    (a library is quiet), and yield a function that returns the first of them, for an error message."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(path, "wb") as sink:
            os.dup2(sink.fileno(), 2)
            try:
                def first_lines() -> str:
                    with open(path, "rb") as f:
                        lines = [line for line in f.read(4096).decode("utf-8", "replace").splitlines() if line.strip()]
                    return " | ".join(line.strip() for line in lines[:3]) or "no compiler message"
                yield first_lines
            finally:
                os.dup2(saved, 2)
    finally:
        os.close(saved)


def _without_cpu_choice(flags: str) -> str:
    """Compiler flags less ``-march=native``, which would give a module every feature of this host."""
    return " ".join(flag for flag in flags.split() if flag != "-march=native")


@functools.lru_cache(maxsize=None)
def forced_features() -> frozenset:
    """The instruction-set features Warp's CPU compiler turns on whatever the target CPU, probed
    (``apic.targets.cpu.FEATURE_MACROS``): warp 1.12 to 1.19 add F16C, and with it AVX, for ``half``."""
    probe = "".join(f"#ifdef {macro}\nextern \"C\" void apic_has_{i}(void) {{}}\n#endif\n"
                    for i, macro in enumerate(FEATURE_MACROS.values()))
    image = _build_cpu(probe.encode(), {"mode": "release"}, "")
    return frozenset(f for i, f in enumerate(FEATURE_MACROS) if f"apic_has_{i}\0".encode() in image)


def level_features(level: str) -> list[str]:
    """The features a module compiled for ``level`` may use: the level's and those Warp always turns on."""
    return sorted(CPU_LEVELS[level] | forced_features())


# Object sections whose code runs at load, outside the functions that the level's attribute reaches.
_STARTUP_SECTIONS = (b".init_array\0", b".ctors\0", b".preinit_array\0")


def _level_pragma(attribute: str) -> bytes:
    """What goes before a module's source to give every function the target ``attribute``; an attribute the
    compiler would ignore is an error rather than a silent build for this host."""
    return ('#pragma clang diagnostic error "-Wignored-attributes"\n'
            f'#pragma clang attribute push(__attribute__((target("{attribute}"))), apply_to = function)\n').encode()


@functools.lru_cache(maxsize=None)
def target_attribute(level: str) -> str:
    """The target attribute that builds for CPU ``level`` with this Warp: ``arch=<level>`` where its compiler
    takes an architecture there (a small compile tells), else the level's features as ``+name`` (warp-lang
    1.12's clang for AArch64 takes only CPU names after ``arch=``): no more than the level promises."""
    probe = _level_pragma(f"arch={level}") + b'extern "C" int apic_level_probe(int x) { return x; }\n'
    try:
        _build_cpu(probe + b"#pragma clang attribute pop\n", {"mode": "release"}, "")
        return f"arch={level}"
    except RuntimeError as error:
        if "unknown architecture" not in str(error):
            raise
    return ",".join(f"+{feature}" for feature in sorted(CPU_LEVELS[level]))


def compile_cpu_source(source: bytes, options: dict, level: str | None = None) -> bytes:
    """Compile a module's generated C++ with this process's Warp and ``options`` (``module_build_options``,
    or a saved file's, checked by ``apic.format.source``); the ``.o``.

    ``level`` None: as the options say (Warp's default flags build for this host, ``-march=native``).
    An x86-64 level (``apic.targets.cpu.CPU_LEVELS``): for any CPU with ``level_features(level)``.
    Every function then gets the level as its target attribute, from a pragma put before the source
    (warp 1.12 takes no compiler flags), and an attribute the compiler would ignore is an error rather
    than a silent build for this host.
    """
    flags = str(options.get("extra_flags") or "")
    if level is None:
        return _build_cpu(source, options, flags)
    check_cpu_level(level)  # first: a message quotes the level only once it is one of the few apic knows
    family = cpu_family(level=level)
    if cpu_family(platform.machine()) is not family:
        raise ValueError(f"CPU level {level} is an {family.NAME} level; this machine is {platform.machine()}")
    image = _build_cpu(_level_pragma(target_attribute(level)) + source + b"\n#pragma clang attribute pop\n",
                       options, _without_cpu_choice(flags))
    if any(section in image for section in _STARTUP_SECTIONS):
        raise RuntimeError(f"the module has static initializers, which the compiler builds for this host's CPU "
                           f"rather than {level}")
    return image
