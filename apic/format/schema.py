"""The ``.wrp`` wire format: every constant a writer and a reader must agree on, in one place.

A file is a fixed 56-byte header followed by one msgpack map (the *body*)::

    offset  size  field
    0       8     MAGIC            b"APICWRP\\0"
    8       4     format version   uint32, little-endian
    12      4     reserved         uint32, zero
    16      8     body length      uint64, little-endian
    24      32    body SHA-256     digest of the body bytes
    56      n     body             msgpack map, described field by field in docs/FORMAT.md

Changelog (one entry per format version; never change the meaning of a written version):

* 1 (2026-11-21): first version. Header as above; body keys ``format``, ``format_version``,
  ``writer``, ``target``, ``abi``, ``regions``, ``modules``, ``kernels``, ``ops`` (each distinct op
  once), ``sequence`` (uint32 indices into ``ops``, in execution order), ``bindings``.
  Added before the first release, still version 1: op kinds 8 ``branch`` and 9 ``jump``
  (``wp.capture_if`` / ``capture_while``; targets are positions in ``sequence``) and 10
  ``native_call`` (``wp.utils`` host utilities from an allow-list).
  Also added before the first release, still version 1: CUDA graphs (an optional ``device`` map,
  ABI ``"cuda-params-v1"``, ``.cubin``/``.ptx`` modules with ``arch``, kernels with ``params``,
  op kind 11 ``cuda_launch``; see ``apic.targets.cuda``). CPU files are unchanged.
* 2 (2026-11-22): native handles (``wp.Mesh``, ``wp.Bvh``, ``wp.HashGrid``, ``wp.Volume``). New body keys
  ``handles`` (each handle's kind, the region ranges of its arrays, its options and, for a Volume, its
  NanoVDB buffer: rebuilt on load) and ``handle_slots`` (saved words that hold a handle's id, rewritten
  with the rebuilt id); blob relocations may target a handle; op kind 12 ``handle_call`` (refit,
  rebuild, build, reserve). Written only for a graph that has handles: every other graph is still
  written as version 1, so older readers keep reading it. A reader refuses ``handles`` in a version 1
  file.
  2026-11-25, still version 2: optional kernel keys ``args_size`` / ``adj_args_size`` (the packed
  argument struct's size; files without them still read, their launches checked against each other),
  the optional module key ``source`` (``source_fallback=True``: generated C++, or CUDA ``.cu`` in a
  CUDA graph, and build options; docs/FORMAT.md 2.5.1 and 8), both also valid in version 1 files: readers that predate them ignore them.
  Also 2026-11-25, still version 2 (and valid in every version): the optional kernel key ``split_writes`` (parallel replay: the byte
  offsets of the arrays a kernel proved splittable writes); a reader that predates it replays serially.
  2026-11-26, valid in every version: the optional kernel key ``split_world`` (a kernel proved splittable
  by whole worlds: ``writes``, ``rows``, ``tiles``); such a kernel has no ``split_writes``, so a reader that
  predates the key ignores it and replays the kernel serially.
  Also 2026-11-25, valid in every version (1 to 3): the optional module key ``manifest`` (the module's
  kernel manifest, a content-addressed ``.kernels`` file beside the binary that fixes each launched
  symbol's argument layout and handle kinds; docs/FORMAT.md 2.5.2); readers that predate it ignore it.
  A file without manifests is read as before, unless its modules folder holds a manifest of one of its
  module files (then the ``.wrp`` must name it). A ``handle_call`` must be a method of its handle's kind.
  Every version is read more strictly since: repeated map keys, launch bounds that are not Warp's for
  the op's ``dim``, backward jumps that do not return to a loop's branch, and a cuBQL Bvh rebuild at
  replay are refused.
* 3 (2026-11-25): named scalar parameters (``apic.param``; ``Graph.set_param(name, value)``). A binding of
  kind ``"scalar"`` (``name``, ``dtype``, ``nbytes``, ``np_dtype``, ``elem_shape``, ``value``: no region), and
  launch ``args`` / ``adj_args`` blobs may list ``"params": [[at, binding index]]``, the bytes a loader
  rewrites when the parameter is set. Written only for a graph that has a named scalar parameter (with
  or without native handles); every other graph is written as before (1, or 2 with handles). A reader
  refuses a scalar binding in a file of version 1 or 2. An older apic would refuse the binding kind
  anyway; the version says why.

2026-11-26, written files only (every version reads as before): the kernel manifest travels at the end of
the module's object and source files behind a 16-byte trailer instead of in a ``.kernels`` file
(``apic.format.manifest``; Warp's loader ignores the bytes, so earlier readers load such a file as one
without manifests); ``target.cpu`` may name an x86-64 level (``capture_save(cpu_target=...)``). Read more
strictly: ``source.options.extra_flags`` takes only Warp's default compiler flags.

2026-11-28, every version (no new version: an older reader refuses such a file, naming op kind 8, rather than
misreading it): CUDA graphs may hold ``branch`` and ``jump`` (``wp.capture_if`` / ``capture_while``), which must
nest as conditional nodes (``apic.record.cuda.conditional_tree``; docs/FORMAT.md 8.1) within
``MAX_CONDITIONAL_DEPTH`` and ``MAX_CONDITIONAL_BODY_OPS``. Golden file: ``tests/data/golden/cuda-conditional``.

Compatibility promise (docs/FORMAT.md, section 6.1): an apic release reads every format version from
``MIN_READ_VERSION`` to ``FORMAT_VERSION``; ``MIN_READ_VERSION`` moves only in a new minor release, and a
version stays readable for at least 6 months after the first release that wrote a newer one.
``tests/data/golden/`` holds one file per version (per supported warp-lang) that every release must read.
"""  # noqa: E501 (long docstring lines kept: rewrapping would change __doc__)

from __future__ import annotations

import struct

import msgpack

from apic.errors import FormatError
from apic.record.ops import OpKind
from apic.targets import cuda as cuda_target
from apic.targets import files

MAGIC = b"APICWRP\0"
FORMAT_NAME = "apic.wrp"
FORMAT_VERSION = 3  # the newest version this apic writes (and reads)
BASE_VERSION = 1  # what it writes for a graph without native handles or named scalar parameters
HANDLES_VERSION = 2  # a graph with native handles (Mesh, Bvh, HashGrid, Volume: "handles" in the body)
PARAMS_VERSION = 3  # a graph with named scalar parameters ("scalar" bindings, blob "params")
MIN_READ_VERSION = 1  # oldest version this apic still reads

HEADER = struct.Struct("<8sIIQ32s")  # magic, format version, reserved, body length, body SHA-256
assert HEADER.size == 56

# Upstream Warp's own capture_save files (warp-lang 1.13+): b"WRP1" then a uint32 format version.
UPSTREAM_MAGIC = b"WRP1"
UPSTREAM_VERSION = struct.Struct("<I")
# Upstream format version -> the warp-lang release that writes it (for error messages only).
UPSTREAM_WRITERS = {3: "1.13", 10: "1.14", 14: "1.15", 15: "1.16/1.17", 16: "1.18", 18: "1.19"}

MODULES_SUFFIX = "_modules"
EXTENSION = ".wrp"


# Op kinds on the wire are the recording's own kind numbers (explicit, never reused).
WireOp = OpKind


# Fields of each op map besides "kind", with the wire type of each (see docs/FORMAT.md).
#   "ref": [region, offset]; "blob": {"data": bin, "relocs": [[at, region, offset], ...]}
OP_FIELDS: dict[WireOp, dict[str, str]] = {
    WireOp.LAUNCH: {"kernel": "int", "dim": "ints", "bounds": "blob", "args": "blob", "adj_args": "blob?"},
    WireOp.MEMCPY: {"dst": "ref", "src": "ref", "nbytes": "int"},
    WireOp.MEMSET: {"dst": "ref", "value": "int", "nbytes": "int"},
    WireOp.MEMTILE: {"dst": "ref", "value": "blob", "count": "int"},
    WireOp.ARRAY_COPY: {"dst": "blob", "src": "blob", "dst_type": "int", "src_type": "int", "elem_size": "int"},
    WireOp.ARRAY_FILL: {"dst": "blob", "array_type": "int", "value": "blob"},
    WireOp.ALLOC: {"dst": "ref", "nbytes": "int"},
    WireOp.BRANCH: {"cond": "ref", "target": "int"},
    WireOp.JUMP: {"target": "int"},
    WireOp.NATIVE_CALL: {"fn": "str", "args": "list"},
    # ``groups``: an array_t descriptor blob, as docs/FORMAT.md's table says; a ref there is refused
    WireOp.HANDLE_CALL: {"fn": "str", "handle": "int", "ints": "list", "radius": "float?", "points": "blob?",
                         "groups": "blob?"},
    WireOp.CUDA_LAUNCH: {"kernel": "int", "dim": "ints", "params": "blob", "grid": "ints", "block": "ints",
                         "smem": "int"},
}

# Warp's array type ids in ArrayCopy / ArrayFill descriptors.
from apic.targets.cpu import ARRAY_T_POINTER_SLOTS, ARRAY_T_SIZE, ARRAY_TYPE_INDEXED, ARRAY_TYPE_REGULAR  # noqa: E402,F401
from apic.targets.cpu import INDEXEDARRAY_T_POINTER_SLOTS, INDEXEDARRAY_T_SIZE  # noqa: E402,F401

# Binding kinds: views of arrays, and (format 3) named scalar parameters held in launch arguments.
BINDING_KINDS = ("input", "output")
SCALAR_KIND = "scalar"

# Limits a reader enforces: a file beyond one is refused, not attempted. Each is read from here, and
# tests/format/test_format_limits.py reads a file at each (accepted) and one past it (refused).
# integers and shapes
MAX_INT = (1 << 63) - 1  # int64: what the op table and NumPy hold
MAX_INT32 = (1 << 31) - 1  # Warp's shapes, strides and counts are C ints in native code
MAX_UINT32 = (1 << 32) - 1  # an extent of a CPU launch's dim (32 bits in the launch bounds)
MAX_DIMS = 4  # Warp's arrays and launches have at most 4 dimensions
MAX_REGION_BYTES = 1 << 46  # 64 TiB: more than any address space a region is allocated in
MAX_ELEM_BYTES = 1 << 20  # an array element (a copy's, a fill's, a binding's): far above Warp's largest dtype
MAX_ELEM_DIM = 1 << 16  # an extent of a binding's element shape (vector and matrix dtypes)
MAX_ARGS_BYTES = 1 << 24  # a kernel's packed argument struct, and so a written array's offset in it
MAX_SCALAR_BYTES = 1 << 12  # a named scalar parameter's value
MAX_SCALAR_ELEM_DIM = 1 << 8  # an extent of a named scalar parameter's element shape
MAX_SCALAR_RANK = 2  # a named scalar parameter is a scalar, vector or matrix
# strings (characters)
MAX_TAG = 16  # a word from a short list: device kind, binding kind, handle kind and array dtype, NumPy dtype
MAX_HANDLE_ARRAY_NAME = 32  # the name of a native handle's array (points, indices, ...)
MAX_WORD = 64  # versions in writer, the ABI tag, a native function's name, a native type's name
MAX_LABEL = 256  # target and device descriptions, CPU features, Warp dtype names
MAX_NAME = 1024  # module names, kernel keys and symbols, binding names
MAX_TEXT = 4096  # any other string
MAX_FILE_STEM = files.READ_STEM_MAX  # a saved file's name part, before its digest and extension
# list lengths
MAX_FEATURES = 4096  # CPU features named in target.features
MAX_HANDLES = 1 << 16  # native handles of one graph
MAX_HANDLE_ARRAYS = 8  # arrays of one native handle (a Mesh has the most)
MAX_HANDLE_OPTIONS = 8  # options of one native handle
MAX_NATIVE_TYPES = 64  # native Warp struct types one module reads
MAX_SPLIT_WRITES = 4096  # array offsets in one list of a kernel proved splittable (split_writes, split_world)
MAX_KERNEL_PARAMS = 4096  # parameters of a CUDA kernel (its [offset, size] pairs)
MAX_CONDITIONAL_DEPTH = 16  # how deep a CUDA graph's conditional nodes nest (each level is a child graph)
MAX_CONDITIONAL_BODY_OPS = 1 << 20  # sequence positions in one body of a CUDA conditional node
MAX_CPU_NESTING = 256  # how deep a CPU graph's capture_if / capture_while bodies nest (control_flow.nesting_depth)
MAX_OP_KIND = 1 << 16  # an op's kind number, read before it is looked up
MAX_SOURCE_FLAGS = 16  # compiler flags of a module's saved source (Warp's defaults are fewer)
# handles
MAX_GRID_CELLS = 1 << 28  # a hash grid allocates per cell: bound what a file can ask for
MAX_LEAF_SIZE = 1 << 16  # a Mesh's or Bvh's BVH leaf size
# CPU target and CUDA devices
MIN_POINTER_BITS = 8  # target.pointer_bits: any machine's
MAX_POINTER_BITS = 128
MIN_ARCH = 10  # sm_10 .. sm_999x: the architecture number 10 * major + minor
MAX_ARCH = 10_000
MAX_ARCH_SUFFIX = 1  # "a" or "f" (or none)
MAX_BLOCK_THREADS = 1024  # CUDA's, and Warp's largest block (also a CPU block launch's folded block size)
MAX_GRID_YZ = cuda_target.GRID_YZ_MAX  # CUDA's grid extent in y and z
MAX_BLOCK_DIM = 1 << 16  # a saved source's block_dim option
MAX_SOURCE_BYTES = MAX_INT32  # a module's saved source file
MAX_OPTIMIZATION_LEVEL = 3  # a saved source's optimization_level option (clang's -O0 .. -O3)
# kernel manifests (checked at load)
MAX_ID_WORDS = 1 << 20  # handle ids in one array argument: an array of more is not recorded as one
MAX_MANIFEST_BYTES = 1 << 24  # a manifest lists at most a few thousand kernels


# --- unpacking: every msgpack document apic reads (a body, a kernel manifest) with one set of limits ---
class DuplicateKey(Exception):
    """A msgpack map with a repeated key (raised out of the unpacker, turned into a FormatError)."""


def unique_map(pairs: list) -> dict:
    """A msgpack map as a dict, refusing a repeated key: one reader keeps the first value, another the last,
    so a file with one could mean two graphs (one checked, another run)."""
    out = dict(pairs)
    if len(out) != len(pairs):
        seen = set()
        for key, _ in pairs:
            if key in seen:
                raise DuplicateKey(key)
            seen.add(key)
    return out


def unpack_options(n: int) -> dict:
    """The options every unpacking of a document of ``n`` bytes takes. No declared length may exceed what the
    bytes can hold (nothing is allocated for a length the bytes do not back), extension types are refused, map
    keys must be strings or bytes, a map may hold a key once (``unique_map``); nesting is bounded by msgpack's
    own stack (StackError)."""
    return dict(strict_map_key=True, raw=False, use_list=True, max_str_len=n, max_bin_len=n, max_array_len=n,
                max_map_len=n // 2, max_ext_len=0, object_pairs_hook=unique_map)


def unpack_manifest(data, what: str) -> dict:
    """A kernel manifest's map, unpacked with the reader's options (``unpack_options``) and at most
    ``MAX_MANIFEST_BYTES``; a ``FormatError`` naming ``what`` (the manifest, for the message) otherwise."""
    if len(data) > MAX_MANIFEST_BYTES:
        raise FormatError(f"invalid apic graph file: {what} cannot be read: {len(data):,} bytes, more than the "
                          f"{MAX_MANIFEST_BYTES:,} a manifest may hold")
    try:
        doc = msgpack.unpackb(data, **unpack_options(len(data)))
    except DuplicateKey as error:
        raise FormatError(f"invalid apic graph file: {what} cannot be read: a map has the key "
                          f"{str(error.args[0])[:64]!r} more than once") from None
    except (ValueError, msgpack.UnpackException) as error:  # ExtraData, FormatError, StackError, ...
        raise FormatError(f"invalid apic graph file: {what} cannot be read ({type(error).__name__})") from None
    if not isinstance(doc, dict):
        raise FormatError(f"invalid apic graph file: {what} cannot be read: not a map")
    return doc
