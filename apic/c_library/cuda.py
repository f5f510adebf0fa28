"""A saved CUDA graph exported to a C library (docs/EXPORT.md, "CUDA graphs"): the library loads the graph's
CUBIN or PTX, as saved, through the CUDA driver API (``cuModuleLoadData``), which it opens with ``dlopen`` at
``<name>_open``, and replays the graph's ops with ``cuLaunchKernel``, ``cuMemcpyDtoDAsync`` and
``cuMemset*Async`` on a stream the caller passes.

The file is read with the reader and module checks ``capture_load`` uses (no GPU and no cuda-python needed to
export); the steps are worked out from the recording with the lowering the Python replay uses
(``apic.replay.cuda.lowering``: memset widths, the fill kernel and its constants, kernel parameters relocated
into a host arena of the blobs, each kept once), so the library makes the calls ``graph.mode = "launch"`` makes.
``capture_if`` / ``capture_while`` run as the Python replay runs them op by op: each condition read on the host
when it is reached (``cuStreamSynchronize`` and a 4-byte ``cuMemcpyDtoH``), the ops kept in their sequence with
their branches and jumps (one step per op, so a branch's target is a step's index).
"""

from __future__ import annotations

import os

from apic.c_library import toolchain
from apic.c_library.emit import C_NAME, MAX_DIMS, c_ints, c_string, incbin_image, runtime_file
from apic.c_library.relocatable import ExportError
from apic.format import cuda_source, reader, writer
from apic import persist
from apic.format.module_folder import ModuleFolder
from apic.record import ops as rec
from apic.replay.cuda import lowering as low
from apic.targets.cuda import DEFAULT_SMEM

RUNTIME_FILES = ("apic_cuda_runtime.c", "apic_cuda_image.h", "apic_cuda_bindings.inc")
ALIGN = 16  # each blob starts 16-byte aligned in the host arena (apic.replay.relocate.ALIGN)
# the runtime's step kinds and relocation targets (apic_cuda_image.h)
STEP_NOP, STEP_KERNEL, STEP_MEMCPY, STEP_MEMSET, STEP_BRANCH, STEP_JUMP = 0, 1, 2, 3, 4, 5
TARGET_REGION, TARGET_CONSTANTS = 1, 2


def read(path) -> tuple:
    """``(saved, images)`` of the graph file at ``path``: the reader's and the module folder's checks, as
    ``capture_load`` makes them (their errors unchanged), without a device."""
    wrp_path, modules_dir = writer.wrp_paths(path)
    shown = os.fspath(path) if os.fspath(path).endswith(".wrp") else f"{os.fspath(path)}.wrp"
    saved = reader.read(persist._read_graph_file(wrp_path, shown))  # capture_load's errors for a missing file
    if not is_cuda(saved):
        return saved, None
    folder = ModuleFolder.of(modules_dir, saved)
    try:
        return saved, cuda_source.images(saved, folder.fetch, modules_dir)
    finally:
        folder.close()


def is_cuda_graph(graph) -> bool:
    """Whether ``graph`` is an apic CUDA graph (live or loaded), which export saves to a file first."""
    return getattr(graph, "recording", None) is not None and str(getattr(graph, "device", "")).startswith("cuda")


def is_cuda(saved) -> bool:
    """Whether the read file ``saved`` holds a CUDA graph."""
    return (saved.device or {}).get("kind") == "cuda"


def refusals(saved, images) -> list[str]:
    """Why the CUDA graph cannot be exported (empty: it can)."""
    found = []
    kinds = sorted({type(op).__name__ for op in saved.recording.ops if STEPS.get(type(op)) is _UNSUPPORTED})
    if kinds:
        found.append(f"its ops include {', '.join(kinds)}{_UNSUPPORTED.why}")
    missing = sorted({m.file for m in saved.modules if images.get(m.file) is None})
    if missing:
        found.append(f"the module object(s) {', '.join(missing)} are missing or corrupt (a saved source is not "
                     "compiled by the export)")
    for kernel in saved.recording.kernels:
        if not C_NAME.match(kernel.symbol):
            found.append(f"kernel symbol {kernel.symbol!r} is not a C identifier")
    return found


class _Layout:
    """The host arena of kernel parameters (blobs and fill arguments), its relocations, and the steps."""

    def __init__(self, recording, fill_kernel: int) -> None:
        self.arena = bytearray()
        self.relocs: list[tuple] = []  # (arena byte, target kind, index, offset)
        self.params: list[int] = []  # per kernel parameter of each kernel step: its arena offset
        self.steps: list[tuple] = []
        self.fills: dict[bytes, int] = {}  # fill value -> its offset among the constants (as the lowering)
        for op in recording.ops:
            if low.needs_fill_kernel(op) and op.value.data not in self.fills:
                self.fills[op.value.data] = sum(-(-len(v) // 16) * 16 for v in self.fills)
        self.constants = bytearray(sum(-(-len(v) // 16) * 16 for v in self.fills))
        for value, at in self.fills.items():
            self.constants[at : at + len(value)] = value
        self._blobs: dict[int, int] = {}
        self._recording, self._fill = recording, fill_kernel

    def _blob(self, blob: rec.Blob) -> int:
        at = self._blobs.get(id(blob))
        if at is None:
            at = self._blobs[id(blob)] = self._put(blob.data)
            for reloc in blob.relocs:
                self.relocs.append((at + reloc.at, TARGET_REGION, reloc.target.region, reloc.target.offset))
        return at

    def _put(self, data: bytes) -> int:
        at = len(self.arena)
        self.arena += data + bytes((((len(data) or 1) + ALIGN - 1) & -ALIGN) - len(data))
        return at

    def _kernel(self, function: int, grid, block, smem: int, offsets: list[int]) -> None:
        self.steps.append((STEP_KERNEL, function, *grid, *block, smem, len(self.params), len(offsets),
                           0, 0, 0, 0, 0, 0, 0))
        self.params += offsets

    def launch(self, op) -> None:
        kernel = self._recording.kernels[op.kernel]
        at = self._blob(op.params)
        self._kernel(op.kernel, op.grid, op.block, op.smem, [at + offset for offset, _ in kernel.params])

    def copy(self, op) -> None:
        self.steps.append((STEP_MEMCPY, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, op.dst.region, op.dst.offset,
                           op.src.region, op.src.offset, 0, 1, op.nbytes))

    def memset(self, op) -> None:
        self.steps.append((STEP_MEMSET, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, op.dst.region, op.dst.offset, 0, 0,
                           op.value, 1, op.nbytes))

    def control(self, kind: int, op) -> None:
        """A branch (to ``op.target`` if the int32 at ``op.cond`` is zero) or a jump: one step per op, so that a
        target, a position of the op sequence, is the index of its step."""
        cond = getattr(op, "cond", None)
        region, offset = (cond.region, cond.offset) if cond is not None else (0, 0)
        self.steps.append((kind, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, region, offset, 0, 0, 0, 0, op.target))

    def nop(self) -> None:
        self.steps.append((STEP_NOP, *[0] * 17))

    def fill(self, op) -> None:
        if not low.needs_fill_kernel(op):
            width = low.memset_width(op)
            value = int.from_bytes(op.value.data[:width], "little")
            self.steps.append((STEP_MEMSET, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, op.dst.region, op.dst.offset, 0, 0,
                               value, width, len(op.value.data) * op.count // width))
            return
        # the fill kernel: dst, the value in the constants, its size, the bytes in all
        total = len(op.value.data) * op.count
        at = self._put(bytes(8) * 2 + len(op.value.data).to_bytes(8, "little") + total.to_bytes(8, "little"))
        self.relocs += [(at, TARGET_REGION, op.dst.region, op.dst.offset),
                        (at + 8, TARGET_CONSTANTS, 0, self.fills[op.value.data])]
        blocks = min(-(-total // low.FILL_BLOCK), low.FILL_MAX_BLOCKS)
        self._kernel(self._fill, (blocks, 1, 1), (low.FILL_BLOCK, 1, 1), 0, [at + 8 * k for k in range(4)])


_UNSUPPORTED = rec.Refused(", which the exported CUDA runtime does not run", ExportError)
# op type -> (op, _Layout) -> None: its steps added (``refusals`` names the ops of a Refused entry first)
STEPS = {
    rec.CudaLaunch: lambda op, layout: layout.launch(op),
    rec.Memcpy: lambda op, layout: layout.copy(op),
    rec.Memset: lambda op, layout: layout.memset(op),
    rec.Memtile: lambda op, layout: layout.fill(op),
    rec.Alloc: lambda op, layout: layout.nop(),
    rec.Branch: lambda op, layout: layout.control(STEP_BRANCH, op),
    rec.Jump: lambda op, layout: layout.control(STEP_JUMP, op),
    **{spec.type: _UNSUPPORTED for spec in rec.OP_SPECS if "cuda" not in spec.targets},
}


def sources(folder: str, saved, images) -> list[str]:
    """Write the graph's saved state (``graph.c``, ``image.S`` and its binary files) into ``folder``; the files
    to compile."""
    recording = saved.recording
    files = list(dict.fromkeys(m.file for m in saved.modules))
    module_of = [files.index(saved.modules[k.module].file) for k in recording.kernels]
    names = [(m.file, m.arch, m.arch_suffix) for m in {m.file: m for m in saved.modules}.values()]
    blobs = [bytes(images[file]) for file in files]
    symbols = [k.symbol for k in recording.kernels]
    smem = [0] * len(symbols)
    for op in recording.ops:
        if rec.is_cuda_launch(op):
            smem[op.kernel] = max(smem[op.kernel], op.smem)
    fill = len(symbols)
    layout = _Layout(recording, fill)
    for op in recording.ops:
        rec.handler(STEPS, op, "exporting a CUDA graph")(op, layout)
    if layout.fills:  # the fill kernel, as the Python replay loads it
        files.append("apic_fill.ptx")
        names.append(("apic_fill.ptx", 50, ""))
        blobs.append(low.FILL_PTX.rstrip(b"\0"))
        module_of.append(len(files) - 1)
        symbols.append(low.FILL_SYMBOL)
        smem.append(0)
    data = {"arena": bytes(layout.arena), "constants": bytes(layout.constants)}
    region_offsets, regions = [], bytearray()
    for region, contents in zip(recording.regions, saved.contents):
        if not contents:  # graph-owned: zeroed at open (as the Python load does)
            region_offsets.append(-1)
            continue
        regions += b"\0" * (-len(regions) % 64)
        region_offsets.append(len(regions))
        regions += bytes(contents[: region.nbytes]) + bytes(max(0, region.nbytes - len(contents)))
    data["regions"] = bytes(regions)
    for k, blob in enumerate(blobs):
        ptx = files[k].endswith(".ptx")
        data[f"module_{k}"] = (blob.rstrip(b"\0") + b"\0") if ptx else blob  # PTX is a C string to the driver
    incbin_image(folder, "apic_cuda_", data)

    lines = ["#include <stdint.h>", '#include "apic_export_api.h"', '#include "apic_cuda_image.h"']
    lines += [f"extern const unsigned char apic_cuda_{key}[];" for key in data]
    modules = [f"{{apic_cuda_module_{k}, {len(data[f'module_{k}'])}, {int(f.endswith('.ptx'))}, {c_string(f)}, "
               f"{c_string(f'sm_{arch}{suffix}')}}}" for k, (f, arch, suffix) in enumerate(names)]
    lines.append("static const apic_cuda_module modules[] = {" + (", ".join(modules) or "{0}") + "};")
    layouts = [[v for param in kernel.params for v in param] for kernel in recording.kernels]
    for k, layout_k in enumerate(layouts):  # each kernel's (offset, size) pairs, checked against the driver's
        lines.append(f"static const int64_t layout_{k}[] = {c_ints(layout_k)};")
    kernels = [f"{{{c_string(s)}, {module_of[k]}, {smem[k] if smem[k] > DEFAULT_SMEM else 0}, "
               + (f"{len(layouts[k]) // 2}, layout_{k}}}" if k < len(layouts) else "-1, 0}")  # the fill kernel's: -1
               for k, s in enumerate(symbols)]
    lines.append("static const apic_cuda_kernel kernels[] = {" + (", ".join(kernels) or "{0}") + "};")
    lines.append(f"static const int64_t region_sizes[] = {c_ints([r.nbytes for r in recording.regions])};")
    lines.append(f"static const int64_t region_offsets[] = {c_ints(region_offsets)};")
    lines.append("static const apic_cuda_reloc relocs[] = {" +
                 (", ".join(c_ints(r) for r in layout.relocs) or "{0}") + "};")
    lines.append(f"static const int64_t params[] = {c_ints(layout.params)};")
    lines.append("static const apic_cuda_step steps[] = {" + (", ".join(c_ints(s) for s in layout.steps) or "{0}")
                 + "};")
    bindings = []
    for b in saved.bindings:
        shape, strides = tuple(b.shape), tuple(b.strides)
        if len(shape) > MAX_DIMS:
            raise ExportError(f"cannot export binding {b.name!r}: {len(shape)} dimensions (at most {MAX_DIMS})")
        lo, hi = b.extent()
        kind = "APIC_BINDING_OUTPUT" if b.kind == "output" else "APIC_BINDING_INPUT"
        bindings.append(f"{{{c_string(b.name)}, {kind}, {c_string(b.dtype)}, {b.region}, {b.offset}, {b.nbytes}, "
                        f"{b.elem_size}, {len(shape)}, {c_ints(shape)}, {c_ints(strides)}, {lo}, {hi}}}")
    lines.append("static const apic_cuda_binding bindings[] = {" + (", ".join(bindings) or "{0}") + "};")
    lines.append(
        f"const apic_cuda_image apic_cuda_graph = {{APIC_EXPORT_ABI_VERSION, {len(files)}, modules, {len(symbols)}, "
        f"kernels, {len(recording.regions)}, region_sizes, region_offsets, apic_cuda_regions, "
        f"{len(layout.constants)}, apic_cuda_constants, {len(layout.arena)}, apic_cuda_arena, {len(layout.relocs)}, "
        f"relocs, {len(layout.params)}, params, {len(layout.steps)}, steps, {len(bindings)}, bindings}};")
    with open(os.path.join(folder, "graph.c"), "w") as f:
        f.write("/* generated by apic export: the CUDA graph's saved state */\n" + "\n".join(lines) + "\n")
    return ["graph.c", "image.S"]


def header(name: str) -> str:
    """The public header ``<name>.h`` of a CUDA export: the CPU header's shared block, its own functions."""
    common = runtime_file("header.h.in")
    start = common.index("#ifndef APIC_EXPORT_ABI_VERSION")
    end = common.index("#endif", common.index("} apic_binding_info;")) + len("#endif")
    return runtime_file("cuda_header.h.in").replace("@COMMON@", common[start:end]).replace("@NAME@", name)


def cpp_header(name: str) -> str:
    """The C++ RAII header ``<name>.hpp`` of a CUDA export."""
    return runtime_file("cuda_header.hpp.in").replace("@NAME@", name)


def link(build: str, saved, images, name: str, library: str) -> None:
    """Write the runtime and the graph's sources into ``build`` and link ``library`` there."""
    problems = refusals(saved, images)
    if problems:
        raise ExportError("cannot export this CUDA graph to a C library: " + "; ".join(problems))
    graph_files = sources(build, saved, images)
    for file in RUNTIME_FILES:
        with open(os.path.join(build, file), "w") as f:
            f.write(runtime_file(file))
    with open(os.path.join(build, "apic_export_api.h"), "w") as f:
        f.write(header(name))
    with open(os.path.join(build, "exports.map"), "w") as f:
        f.write(f"{{\n  global: {name}_*;\n  local: *;\n}};\n")
    toolchain.link(build, ["apic_cuda_runtime.c", *graph_files], [], name, library, libraries=["-ldl"])
