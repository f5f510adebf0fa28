"""The description of one target (:class:`Target`) and the targets apic knows (:data:`CPU`, :data:`CUDA`)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from apic.targets import cpu, cuda


@dataclass(frozen=True)
class Target:
    """One kind of device a graph can be recorded on, saved for, and replayed on."""

    name: str  # "cpu", "cuda"
    device_kind: str | None  # the ``device.kind`` a graph file of this target has (None: no ``device`` map)
    abis: tuple[str, ...]  # kernel ABI tags a graph file of this target may carry
    kernel_suffixes: tuple[str, str]  # of a kernel's forward and backward entry point symbols
    module_kinds: tuple[str, ...]  # file extensions of its compiled modules
    module_file: re.Pattern  # the module file names a reader accepts
    bounds_sizes: tuple[int, ...]  # byte sizes of the launch bounds the kernels take

    def kernel_suffix(self, adjoint: bool) -> str:
        """The suffix of the forward (``adjoint=False``) or backward entry point's symbol."""
        return self.kernel_suffixes[bool(adjoint)]


CPU = Target(
    name=cpu.NAME, device_kind=None, abis=cpu.KERNEL_ABIS,
    kernel_suffixes=(cpu.KERNEL_SUFFIX[False], cpu.KERNEL_SUFFIX[True]), module_kinds=(cpu.MODULE_EXTENSION[1:],),
    module_file=cpu.MODULE_FILE, bounds_sizes=cpu.BOUNDS_SIZES,
)
CUDA = Target(
    name=cuda.NAME, device_kind=cuda.DEVICE_KIND, abis=(cuda.ABI,),
    kernel_suffixes=(cuda.KERNEL_SUFFIX[False], cuda.KERNEL_SUFFIX[True]), module_kinds=cuda.MODULE_KINDS,
    module_file=cuda.MODULE_FILE, bounds_sizes=cuda.BOUNDS_SIZES,
)
TARGETS = (CPU, CUDA)


def of_abi(abi: str) -> Target | None:
    """The target whose kernels a graph file's ``abi`` tag names, or None for an unknown tag."""
    return next((t for t in TARGETS if abi in t.abis), None)


def of_device_kind(kind: str | None) -> Target | None:
    """The target of a graph file's ``device.kind`` (None: a CPU file, which has no ``device``)."""
    return next((t for t in TARGETS if t.device_kind == kind), None)
