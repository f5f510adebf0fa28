"""A loaded CUDA graph's ops lowered to driver steps, and the one CUDA graph built from them.

Each op becomes one step: a kernel node (a launch, with its param blob relocated to the loaded regions),
a memcpy node, a memset node (a memset, or a fill of a 1, 2 or 4-byte value at an aligned address), or
a launch of the small fill kernel below (any other fill). ``graph.mode = "launch"`` walks the same steps
with ``cuLaunchKernel`` / ``cuMemcpyDtoDAsync`` / ``cuMemsetD*Async`` instead. A graph with
``wp.capture_if`` / ``wp.capture_while`` lowers to a nested plan (``"if"`` and ``"while"`` steps around
the plain ones) that ``apic.replay.cuda.conditional`` builds as CUDA conditional nodes.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass

from apic.record import ops as rec
from apic.record.cuda.conditional_tree import IfNode, WhileNode, conditional_tree, has_conditionals
from apic.replay.relocate import Arena

# The fill kernel for fills memset nodes cannot do: dst[i] = src[i % size] for each byte i < total.
# Hand-written PTX (ISA 6.0, sm_50) so that every driver apic can meet JIT-compiles it.
FILL_SYMBOL = "apic_fill_bytes"
FILL_PTX = b"""//
// apic fill kernel: dst[i] = src[i % size] for each byte i < total (grid-stride loop)
//
.version 6.0
.target sm_50
.address_size 64

.visible .entry apic_fill_bytes(
\t.param .u64 apic_fill_bytes_param_0,
\t.param .u64 apic_fill_bytes_param_1,
\t.param .u64 apic_fill_bytes_param_2,
\t.param .u64 apic_fill_bytes_param_3
)
{
\t.reg .pred \t%p<2>;
\t.reg .b16 \t%rs<2>;
\t.reg .b32 \t%r<5>;
\t.reg .b64 \t%rd<11>;

\tld.param.u64 \t%rd1, [apic_fill_bytes_param_0];
\tld.param.u64 \t%rd2, [apic_fill_bytes_param_1];
\tld.param.u64 \t%rd3, [apic_fill_bytes_param_2];
\tld.param.u64 \t%rd4, [apic_fill_bytes_param_3];
\tcvta.to.global.u64 \t%rd1, %rd1;
\tcvta.to.global.u64 \t%rd2, %rd2;
\tmov.u32 \t%r1, %ctaid.x;
\tmov.u32 \t%r2, %ntid.x;
\tmov.u32 \t%r3, %tid.x;
\tmov.u32 \t%r4, %nctaid.x;
\tmul.wide.u32 \t%rd5, %r1, %r2;
\tcvt.u64.u32 \t%rd6, %r3;
\tadd.s64 \t%rd5, %rd5, %rd6;
\tmul.wide.u32 \t%rd7, %r4, %r2;
$L__loop:
\tsetp.ge.u64 \t%p1, %rd5, %rd4;
\t@%p1 bra \t$L__done;
\trem.u64 \t%rd8, %rd5, %rd3;
\tadd.s64 \t%rd9, %rd2, %rd8;
\tld.global.u8 \t%rs1, [%rd9];
\tadd.s64 \t%rd10, %rd1, %rd5;
\tst.global.u8 \t[%rd10], %rs1;
\tadd.s64 \t%rd5, %rd5, %rd7;
\tbra.uni \t$L__loop;
$L__done:
\tret;
}
\x00"""
FILL_BLOCK = 256
FILL_MAX_BLOCKS = 4096


@dataclass
class Lowered:
    """The steps of a plan, and the host memory their kernel parameters point into (kept alive with them)."""

    plan: list
    keep: list


def memset_width(op) -> int:
    """The element size (1, 2, 4) of a memset node that can do this fill, or 0."""
    if rec.is_byte_fill(op):
        return 1
    if rec.is_tile_fill(op):
        size = len(op.value.data)
        value = op.value.data
        for width in (1, 2, 4):
            if size % width == 0 and value == value[:width] * (size // width):
                return width
    return 0

def needs_fill_kernel(op) -> bool:
    """Whether a fill needs the fill kernel: a memset node cannot do it (wider value, or unaligned)."""
    return rec.is_tile_fill(op) and (not memset_width(op) or op.dst.offset % memset_width(op))


def lower(recording, regions: list[int], functions: list, fill, cu, memory: list) -> Lowered:
    """One step per op: ("kernel", fn, grid, block, smem, params), ("memcpy", ...), ("memset", ...).

    ``regions``: the device address of each region; ``functions``: the ``CUfunction`` of each kernel;
    ``fill``: the fill kernel's (where a fill needs it); ``cu``: the driver (``Driver``); device memory it
    allocates (the fill values) is appended to ``memory``, which the graph frees.
    """

    def address(ref: rec.Ref) -> int:
        return regions[ref.region] + ref.offset

    # Host arena of relocated param blobs (each distinct blob once), and device constants for fills.
    arena = Arena([op.params for op in recording.ops if rec.is_cuda_launch(op)])
    arena.fill(address)
    fills, fill_size = {}, 0
    for op in recording.ops:
        if needs_fill_kernel(op) and op.value.data not in fills:
            fills[op.value.data] = fill_size
            fill_size += -(-len(op.value.data) // 16) * 16
    constants = 0
    if fills:
        staging = bytearray(fill_size)
        for value, offset in fills.items():
            staging[offset : offset + len(value)] = value
        pointer = cu("cuMemAlloc", fill_size)
        memory.append(pointer)
        cu("cuMemcpyHtoD", pointer, bytes(staging), fill_size)
        constants = int(pointer)

    keep = [arena.buffer]  # the param arena, kernelParams arrays and fill arguments: alive as long as the plan
    steps = _Steps(recording, address, functions, arena, fill, constants, fills, keep)
    if has_conditionals(recording.ops):
        return Lowered(_lower_body(conditional_tree(recording.ops), steps), keep)
    plan = []
    for op in recording.ops:
        step = rec.handler(_STEP, op, "lowering a graph for CUDA replay")(op, steps)
        if step is not None:
            plan.append(step)
    return Lowered(plan, keep)


def _lower_body(body: tuple, steps: "_Steps") -> list:
    """The steps of a conditional tree's body: ``("if", cond, then, otherwise-or-None)`` and
    ``("while", cond, body)`` (``cond``: the device address of the int32) around the plain steps."""
    plan = []
    for item in body:
        if isinstance(item, IfNode):
            otherwise = None if item.otherwise is None else _lower_body(item.otherwise, steps)
            plan.append(("if", steps.address(item.cond), _lower_body(item.then, steps), otherwise))
        elif isinstance(item, WhileNode):
            plan.append(("while", steps.address(item.cond), _lower_body(item.body, steps)))
        else:
            step = rec.handler(_STEP, item, "lowering a graph for CUDA replay")(item, steps)
            if step is not None:
                plan.append(step)
    return plan


@dataclass(frozen=True)
class _Steps:
    """What turning one op into a step needs (see ``lower``)."""

    recording: object
    address: object  # Ref -> device address
    functions: list  # the CUfunction of each kernel
    arena: Arena  # the relocated param blobs, in host memory
    fill: object  # the fill kernel's CUfunction
    constants: int  # the device address of the fill values
    fills: dict  # fill value -> its offset in the constants
    keep: list  # host memory the steps point into


def _kernel_step(op: rec.CudaLaunch, c: _Steps) -> tuple:
    kernel = c.recording.kernels[op.kernel]
    start = c.arena.address(op.params)
    params = (ctypes.c_void_p * len(kernel.params))(*[start + offset for offset, _ in kernel.params])
    c.keep.append(params)
    return ("kernel", c.functions[op.kernel], op.grid, op.block, op.smem, ctypes.addressof(params))


def _memtile_step(op: rec.Memtile, c: _Steps) -> tuple:
    if not needs_fill_kernel(op):
        width = memset_width(op)
        value = int.from_bytes(op.value.data[:width], "little")
        return ("memset", c.address(op.dst), value, width, len(op.value.data) * op.count // width)
    total = len(op.value.data) * op.count
    values = (ctypes.c_uint64 * 4)(c.address(op.dst), c.constants + c.fills[op.value.data], len(op.value.data), total)
    params = (ctypes.c_void_p * 4)(*[ctypes.addressof(values) + 8 * i for i in range(4)])
    c.keep.extend((values, params))
    blocks = min(-(-total // FILL_BLOCK), FILL_MAX_BLOCKS)
    return ("kernel", c.fill, (blocks, 1, 1), (FILL_BLOCK, 1, 1), 0, ctypes.addressof(params))


def _outside_tree(op, c: _Steps):
    """A CUDA graph with branches is lowered through its conditional tree (``_lower_body``), which holds none."""
    raise TypeError(f"a {type(op).__name__} op outside the conditional tree of a CUDA graph")


# op type -> (op, _Steps) -> one step, or None (nothing to do); the reader lets no CPU-only kind into a CUDA graph
_CPU_ONLY = rec.Refused("cannot replay a {type} op on CUDA")
_STEP = {
    rec.CudaLaunch: _kernel_step,
    rec.Memcpy: lambda op, c: ("memcpy", c.address(op.dst), c.address(op.src), op.nbytes),
    rec.Memset: lambda op, c: ("memset", c.address(op.dst), op.value, 1, op.nbytes),
    rec.Memtile: _memtile_step,
    rec.Alloc: lambda op, c: None,
    rec.Branch: _outside_tree,
    rec.Jump: _outside_tree,
    **{spec.type: _CPU_ONLY for spec in rec.OP_SPECS if "cuda" not in spec.targets},
}


def add_node(step: tuple, graph, previous: list, cu, context):
    """Add one plain step (kernel, memcpy, memset) to ``graph`` after the nodes ``previous``; the new node."""
    driver = cu.cu
    if step[0] == "kernel":
        _, fn, grid, block, smem, params = step
        node_params = driver.CUDA_KERNEL_NODE_PARAMS()
        node_params.func = fn
        node_params.gridDimX, node_params.gridDimY, node_params.gridDimZ = grid
        node_params.blockDimX, node_params.blockDimY, node_params.blockDimZ = block
        node_params.sharedMemBytes = smem
        node_params.kernelParams = params
        return cu("cuGraphAddKernelNode", graph, previous, len(previous), node_params)
    if step[0] == "memcpy":
        _, dst, src, nbytes = step
        copy = driver.CUDA_MEMCPY3D()
        copy.srcMemoryType = driver.CUmemorytype.CU_MEMORYTYPE_DEVICE
        copy.dstMemoryType = driver.CUmemorytype.CU_MEMORYTYPE_DEVICE
        copy.srcDevice = driver.CUdeviceptr(src)
        copy.dstDevice = driver.CUdeviceptr(dst)
        copy.srcPitch = copy.dstPitch = nbytes
        copy.srcHeight = copy.dstHeight = 1
        copy.WidthInBytes, copy.Height, copy.Depth = nbytes, 1, 1
        return cu("cuGraphAddMemcpyNode", graph, previous, len(previous), copy, context)
    _, dst, value, width, count = step
    memset = driver.CUDA_MEMSET_NODE_PARAMS()
    memset.dst = driver.CUdeviceptr(dst)
    memset.value = value
    memset.elementSize = width
    memset.width = count
    memset.height = 1
    memset.pitch = count * width
    return cu("cuGraphAddMemsetNode", graph, previous, len(previous), memset, context)


def enqueue_step(step: tuple, stream, cu) -> None:
    """Enqueue one plain step on ``stream`` (the context is current): ``cuLaunchKernel``, ``cuMemcpyDtoDAsync``
    or ``cuMemsetD*Async``."""
    driver = cu.cu
    if step[0] == "kernel":
        _, fn, grid, block, smem, params = step
        cu("cuLaunchKernel", fn, *grid, *block, smem, stream, params, 0)
    elif step[0] == "memcpy":
        _, dst, src, nbytes = step
        cu("cuMemcpyDtoDAsync", driver.CUdeviceptr(dst), driver.CUdeviceptr(src), nbytes, stream)
    else:
        _, dst, value, width, count = step
        name = {1: "cuMemsetD8Async", 2: "cuMemsetD16Async", 4: "cuMemsetD32Async"}[width]
        cu(name, driver.CUdeviceptr(dst), value, count, stream)
