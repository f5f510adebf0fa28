"""The serial interpreter's machine code, kept in apic's cache and loaded without importing Numba.

Importing Numba and loading the interpreter from Numba's cache would cost a process's first replay
hundreds of milliseconds. Numba compiles the interpreter (``native_entry.py``) once per cache key
instead; its object file is kept in ``$XDG_CACHE_HOME/apic`` (by default ``~/.cache/apic``) and every
later process loads it with Warp's CPU object loader and calls it through ctypes.

The cache key covers everything the machine code depends on: apic's version and the source of the
modules the interpreter is compiled from, the Numba, llvmlite and warp-lang versions, the platform
and this CPU (its vendor, model and instruction-set flags, from CPUID). A cached file holds its full
key and the digest of its object: a file whose key or digest does not match (another CPU, another
apic, a truncated or changed file) is rebuilt, never loaded. Storing a new object prunes the objects
no longer used (``apic._probes.cache_store.prune_cache``).
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import os
import platform
import sys

import warp

from apic import _compat
from apic._probes import cache_store, host

_HERE = os.path.dirname(os.path.abspath(__file__))
_PACKAGE = os.path.dirname(os.path.dirname(_HERE))  # apic/
# the modules whose code the object holds (and this one, which names the entry's signature)
_SOURCES = ("replay/cpu/interpreter.py", "replay/cpu/_intrinsics.py", "replay/cpu/table.py",
            "replay/cpu/native_entry.py", "replay/cpu/native_interpreter.py", "_version.py")
_MAGIC = b"APIC-NATIVE-INTERPRETER 1\n"
_MAX_FILE_BYTES = 16 << 20
ENTRY_SYMBOL = "apic_serial_run"  # the C entry native_entry.py makes (named here: loading imports no Numba)
# what the entry returns should Numba's code report an error (it raises none): no status of the loop's
STATUS_NATIVE_ERROR = -(1 << 62)

#: ``int64_t apic_serial_run(const int64_t call[6])``: the call block holds the table's address, its
#: rows, the repeats, the limits' address, the loops and the loop counts' address (``native_entry.py``).
#: ctypes releases the GIL around the call, as Numba's ``nogil`` did.
SERIAL_RUN = ctypes.CFUNCTYPE(ctypes.c_int64, ctypes.c_void_p)


def cache_key() -> dict:
    """What the cached object depends on (see the module docstring)."""
    sources = hashlib.sha256()
    for name in _SOURCES:
        with open(os.path.join(_PACKAGE, name), "rb") as source:
            sources.update(name.encode() + b"\0" + source.read() + b"\0")
    return {
        "sources": sources.hexdigest(),
        "numba": host.distribution_version("numba"),
        "llvmlite": host.distribution_version("llvmlite"),
        "warp": str(getattr(warp.config, "version", "")),
        "platform": f"{sys.platform}-{platform.machine()}-{ctypes.sizeof(ctypes.c_void_p) * 8}",
        "cpu": host.cpu_identity() or json.dumps(_compat.native_target()),
    }


def _digest(key: dict) -> str:
    return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()


def cache_path(key: dict) -> str:
    """The file of ``key``'s object in apic's cache folder (``cache_store.cache_folder``)."""
    return os.path.join(cache_store.cache_folder(), f"serial-interpreter-{_digest(key)[:32]}.o")


def _pack(key: dict, code: bytes) -> bytes:
    header = json.dumps({"key": key, "symbol": ENTRY_SYMBOL, "size": len(code),
                         "sha256": hashlib.sha256(code).hexdigest()}, sort_keys=True)
    return _MAGIC + header.encode() + b"\n" + code


def read_cached(path: str, key: dict) -> bytes | None:
    """The object in ``path`` if it was built for ``key`` and is whole; None otherwise (absent, foreign,
    stale or damaged: the caller rebuilds it)."""
    data = cache_store.read_cache_file(path, _MAX_FILE_BYTES)
    if data is None or not data.startswith(_MAGIC) or len(data) > _MAX_FILE_BYTES:
        return None
    line_end = data.find(b"\n", len(_MAGIC))
    try:
        header = json.loads(data[len(_MAGIC):line_end].decode())
        code = data[line_end + 1:]
        whole = (header["key"] == key and header["symbol"] == ENTRY_SYMBOL and header["size"] == len(code)
                 and header["sha256"] == hashlib.sha256(code).hexdigest())
    except (ValueError, TypeError, KeyError, AttributeError):
        return None
    return code if line_end > 0 and whole else None


def _build() -> bytes:
    from apic.replay.cpu.native_entry import build_object  # lazy: Numba compiles it, once per cache key

    return build_object(ENTRY_SYMBOL, STATUS_NATIVE_ERROR)


_loaded = 0  # objects loaded in this process (each under a module name of its own)


def load_serial_run():
    """The native serial interpreter, ``SERIAL_RUN``: from the cache, else built (with Numba) and cached.

    Raises what the build or Warp's loader raises where it cannot be had (the caller keeps the Numba
    dispatcher then).
    """
    global _loaded
    key = cache_key()
    path = cache_path(key)
    code = read_cached(path, key)
    if code is None:
        code = _build()
        cache_store.store_in_cache(path, _pack(key, code), _MAGIC)
    _loaded += 1
    name = f"apic_serial_interpreter_{_digest(key)[:16]}_{os.getpid()}_{_loaded}"
    _compat.load_object(code, name)
    address = _compat.lookup_symbol(name, ENTRY_SYMBOL)
    if not address:
        raise RuntimeError(f"Warp's CPU loader found no {ENTRY_SYMBOL} in apic's native interpreter")
    return SERIAL_RUN(address)
