"""The CUDA target: kernel parameters, launch grids and module (PTX / CUBIN) rules, in pure Python.

No GPU and no cuda-python are needed: the recorder, the ``.wrp`` reader and writer and the CUDA replay all
read these instead of spelling them again.

A Warp CUDA kernel takes its parameters one by one, by value::

    extern "C" __global__ void <mangled>_cuda_kernel_forward(wp::launch_bounds_t<N> dim, T0 var_a, T1 var_b, ...)

and the backward entry point takes the forward arguments and then one adjoint per argument (an
``indexedarray`` argument's adjoint is a plain ``array``). apic packs them into one *param blob*: a
C struct ``{bounds, arg0, arg1, ...}`` with natural alignment, which is exactly the device-side
parameter layout the CUDA driver uses. A launch passes ``kernelParams[i] = &blob[offset_i]``.

This module computes that layout from the kernel's signature, packs a blob from the addresses
Warp hands to ``wp_cuda_launch_kernel``, replicates Warp's grid computation (``native/warp.cu``),
parses the ``.entry`` parameter lists of PTX (which the offline tests compare against), and says which
GPUs a module can run on (:func:`arch_problem`).
"""

from __future__ import annotations

import ctypes
import re
from dataclasses import dataclass

from apic.targets import files


NAME = "cuda"
ABI = "cuda-params-v1"  # the kernel ABI of a CUDA graph file: by-value params after the launch bounds
DEVICE_KIND = "cuda"  # its ``device.kind``
KERNEL_SUFFIX = {False: "_cuda_kernel_forward", True: "_cuda_kernel_backward"}
MODULE_KINDS = ("cubin", "ptx")
MODULE_FILE = files.read_rule(r"\.(cubin|ptx)", 196)
ARCH_SUFFIXES = ("", "a", "f")  # sm_90a: architecture-specific; sm_100f: family-specific
MAX_PARAM_BYTES = 32764  # the CUDA limit on a kernel's parameters (4 KiB before CUDA 12.1 / Volta)
BOUNDS_SIZES = (24, 32)  # the launch bounds, the first parameter of every Warp CUDA kernel
MAX_SMEM = 1 << 24
DEFAULT_SMEM = 48 * 1024  # dynamic shared memory a kernel may use without opting in

INT32_MAX = 2147483647
LEAN_MAX_THREADS_X = 1 << 24  # lean kernels: gridDim.x * blockDim.x stays within this (warp.cu)
GRID_YZ_MAX = 65535
DRIVER_LIBRARY = "libcuda.so.1"  # the CUDA driver library, as cuda-python and Warp load it on Linux


# --- parameter types and layout ------------------------------------------------------------------
@dataclass(frozen=True)
class ParamLayout:
    """Where each parameter lives in the param blob (natural alignment, as the CUDA driver lays them out)."""

    offsets: tuple[int, ...]
    sizes: tuple[int, ...]
    aligns: tuple[int, ...]
    size: int  # the blob's size: the end of the last parameter

    def __len__(self) -> int:
        return len(self.offsets)


def layout_of(sizes_aligns) -> ParamLayout:
    """The natural-alignment layout of parameters given as ``(size, alignment)`` pairs."""
    offsets, sizes, aligns = [], [], []
    at = 0
    for size, align in sizes_aligns:
        at = -(-at // align) * align
        offsets.append(at)
        sizes.append(size)
        aligns.append(align)
        at += size
    return ParamLayout(tuple(offsets), tuple(sizes), tuple(aligns), at)


def param_layout(types) -> ParamLayout:
    """The param blob layout of parameters of the given ctypes types."""
    return layout_of((ctypes.sizeof(t), ctypes.alignment(t)) for t in types)


def pack(layout: ParamLayout, addresses) -> bytes:
    """A param blob from the address of each parameter's bytes (Warp's ``kernelParams`` array)."""
    if len(addresses) != len(layout):
        raise ValueError(f"{len(addresses)} parameter addresses for {len(layout)} parameters")
    blob = bytearray(layout.size)
    for at, size, address in zip(layout.offsets, layout.sizes, addresses):
        if not address:
            raise ValueError("a null kernel parameter pointer")
        blob[at : at + size] = ctypes.string_at(address, size)
    return bytes(blob)


def pack_objects(layout: ParamLayout, objects) -> bytes:
    """A param blob from the ctypes objects Warp packed (``Launch.params``)."""
    return pack(layout, [ctypes.addressof(o) for o in objects])


# --- launch grid ---------------------------------------------------------------------------------
def _int32(value: int) -> int:
    """``value`` converted to a C ``int`` as ``int x = (size_t)value`` does (two's complement wrap)."""
    value &= 0xFFFFFFFF
    return value - (1 << 32) if value & 0x80000000 else value


@dataclass(frozen=True)
class Grid:
    """The ``cuLaunchKernel`` geometry of one launch."""

    grid: tuple[int, int, int]
    block: tuple[int, int, int]


def launch_grid(dim: int, block_dim: int, max_blocks: int = 0, grid_stride: bool = True, cluster_dim: int = 1,
                arch: int | None = None) -> Grid | None:
    """The grid and block ``wp_cuda_launch_kernel`` launches ``dim`` threads with (``native/warp.cu``).

    * grid-stride kernels (every kernel up to warp 1.14; the default after): ``ceil(dim / block_dim)``
      blocks along x, as a C ``int``, capped by ``max_blocks`` (``<= 0``: no cap) and by INT32_MAX
      when the ``int`` overflows; a clustered grid cut by ``max_blocks`` is rounded down to whole clusters;
    * lean kernels (``@wp.kernel(grid_stride=False)``, warp 1.15+): the blocks are spread over a 3-D grid,
      ``x`` at most ``2**24 / block_dim`` (a multiple of ``cluster_dim``), ``y`` and ``z`` at most 65535.

    ``block_dim <= 0`` means 256. Cluster dims (sm_90+ only; 1 on an older ``arch``) are compiled
    into the kernel. Returns None for ``dim == 0`` (nothing is launched); raises ``ValueError``
    where Warp refuses the launch.
    """
    if dim < 0:
        raise ValueError(f"negative launch size {dim}")
    if block_dim <= 0:
        block_dim = 256
    if cluster_dim <= 0 or (cluster_dim > 1 and arch is not None and arch < 90):
        cluster_dim = 1
    if dim == 0:
        return None
    block = (block_dim, 1, 1)
    total_blocks = (dim + block_dim - 1) // block_dim
    if grid_stride:
        natural = _int32(total_blocks)
        cap = max_blocks if max_blocks > 0 else INT32_MAX
        grid_x = cap if natural < 0 or natural > cap else natural
        if cluster_dim > 1 and grid_x > 0:
            if grid_x == natural:
                if grid_x % cluster_dim:
                    raise ValueError(
                        f"a clustered launch needs a whole number of clusters ({grid_x} blocks, "
                        f"cluster_dim={cluster_dim})"
                    )
            else:
                grid_x = grid_x // cluster_dim * cluster_dim
                if grid_x == 0:
                    raise ValueError(f"max_blocks={max_blocks} is less than cluster_dim={cluster_dim}")
        return Grid((max(grid_x, 1), 1, 1), block)
    if cluster_dim > 1 and total_blocks % cluster_dim:
        raise ValueError(
            f"a clustered launch needs a whole number of clusters ({total_blocks} blocks, cluster_dim={cluster_dim})"
        )
    max_x = LEAN_MAX_THREADS_X // block_dim
    if cluster_dim > 1:
        max_x = max_x // cluster_dim * cluster_dim or cluster_dim
    gx = max(min(total_blocks, max_x), 1)
    remaining = -(-total_blocks // gx)
    gy = max(min(remaining, GRID_YZ_MAX), 1)
    gz = min(max(-(-remaining // gy), 1), GRID_YZ_MAX)
    return Grid((gx, gy, gz), block)


# --- PTX -----------------------------------------------------------------------------------------
_ENTRY = re.compile(r"\.entry\s+([A-Za-z_$][\w$]*)\s*\(([^)]*)\)", re.S)
_PARAM = re.compile(r"\.param\s+(?:\.align\s+(\d+)\s+)?\.([a-z]+)(\d+)(?:\s+\.ptr(?:\s+\.\w+)*(?:\s+\.align\s+\d+)?)?"
                    r"\s+([A-Za-z_$][\w$]*)(?:\[(\d+)\])?")
_TARGET = re.compile(r"^\s*\.target\s+sm_(\d+)([a-z]?)", re.M)


def ptx_entries(ptx: str) -> dict[str, list[tuple[int, int]]]:
    """Every ``.entry`` of a PTX module: name -> its parameters as ``(size, alignment)`` in bytes."""
    entries = {}
    for match in _ENTRY.finditer(ptx):
        params = []
        for text in filter(None, (p.strip() for p in match.group(2).split(","))):
            param = _PARAM.fullmatch(text)
            if param is None:
                raise ValueError(f"cannot read the PTX parameter {text!r} of {match.group(1)}")
            align, _, bits, _, count = param.groups()
            elem = int(bits) // 8
            size = elem * int(count) if count else elem
            params.append((size, int(align) if align else elem))
        entries[match.group(1)] = params
    return entries


def ptx_target(ptx: str) -> tuple[int, str] | None:
    """The ``.target sm_XY[a]`` of a PTX module as ``(arch, suffix)``, or None."""
    match = _TARGET.search(ptx)
    return (int(match.group(1)), match.group(2)) if match else None


# --- modules ----------------------------------------------------------------------------------------------
_ARCH_IN_NAME = re.compile(r"\.sm(\d+)([a-z]?)\.(cubin|ptx)$")


def module_arch(path: str, image: bytes) -> tuple[int, str, str]:
    """``(arch, suffix, kind)`` of a compiled CUDA module, from Warp's file name (or a PTX ``.target``)."""
    match = _ARCH_IN_NAME.search(path)
    if match:
        return int(match.group(1)), match.group(2), match.group(3)
    if path.endswith(".ptx"):
        target = ptx_target(image.decode("latin-1"))
        if target:
            return target[0], target[1], "ptx"
    raise ValueError(f"cannot tell which GPU architecture the CUDA module {path} was compiled for")


def arch_problem(kind: str, arch: int, suffix: str, gpu_arch: int) -> str | None:
    """Why a ``kind`` (``"cubin"`` / ``"ptx"``) module built for ``sm_<arch><suffix>`` cannot run on an
    ``sm_<gpu_arch>`` GPU, or None when it can.

    A CUBIN for ``sm_XY`` runs on GPUs of the same major version ``X`` and a minor version ``>= Y``;
    an architecture-specific one (``sm_90a``) only on ``sm_XY`` itself; a family-specific one
    (``sm_100f``) within its major version from ``Y`` up. PTX runs on its own architecture or any newer
    one (the driver compiles it), except architecture-specific PTX, which runs only on its own.
    """
    major, minor = divmod(gpu_arch, 10)
    saved_major, saved_minor = divmod(arch, 10)
    if kind == "cubin":
        if suffix == "a":
            return None if arch == gpu_arch else "an architecture-specific CUBIN runs only on that architecture"
        if saved_major == major and saved_minor <= minor:
            return None
        return (f"a CUBIN runs only on GPUs of its major version (sm_{saved_major}x) with an equal or higher "
                "minor version")
    if arch > gpu_arch or (suffix and arch != gpu_arch):
        return "PTX runs on its own architecture or a newer one"
    return None
