"""apic: graph capture, serialization and replay for NVIDIA Warp.

``import apic`` is the drop-in: afterwards ``wp.ScopedCapture(device="cpu")``,
``wp.capture_begin/end`` and ``wp.capture_launch`` work on the CPU on every supported warp-lang
version, and a captured graph replays in one native call with no Python per operation.
``apic.uninstall()`` puts warp back exactly as it was.
"""

from apic.capture import ScopedCapture, capture_begin, capture_end, capture_launch
from apic.errors import ApicError, BindingError, CaptureError, FormatError, GraphMemoryError
from apic.errors import GraphLoadError, IncompatibleGraphError, LoopLimitError
from apic.errors import ReplayError, ReplayIndexError, UnsupportedOperationError
from apic.graph import Graph
from apic.record.params import Param, param
from apic.persist import capture_load, capture_load_from_bytes, capture_save, capture_save_to_bytes
from apic.installation import install, is_installed, uninstall
from apic.replay.program import max_loop_iterations, set_max_loop_iterations
from apic.replay.cpu.profile import ProfileReport, profile
# The default CPU backend's modules load with the package (about 2 ms here), not inside the first
# wp.capture_launch, whose latency users see; its interpreter is still loaded at the first replay.
from apic.replay.backends import cpu_native as _cpu_native  # noqa: F401

from apic._version import __version__


def export(graph_or_path, outdir, name=None) -> dict:
    """Export a CPU graph (a saved ``.wrp`` path, or a live or loaded graph) to a C shared library in ``outdir``:
    ``lib<name>.so``, ``<name>.h``, ``<name>.hpp``, a pkg-config file and a CMake package config, that replay it
    with no Python (docs/EXPORT.md). Same as ``python -m apic export``; see
    :func:`apic.c_library.library.export` for the arguments, what it returns and raises."""
    from apic.c_library.library import export as export_library  # lazy: the C toolchain, for export only

    return export_library(graph_or_path, outdir, name=name)


__all__ = [
    "ApicError",
    "BindingError",
    "CaptureError",
    "FormatError",
    "Graph",
    "GraphLoadError",
    "GraphMemoryError",
    "IncompatibleGraphError",
    "LoopLimitError",
    "Param",
    "ReplayError",
    "ReplayIndexError",
    "ScopedCapture",
    "UnsupportedOperationError",
    "__version__",
    "capture_begin",
    "capture_end",
    "capture_launch",
    "capture_load",
    "capture_load_from_bytes",
    "capture_save",
    "capture_save_to_bytes",
    "export",
    "install",
    "profile",
    "ProfileReport",
    "is_installed",
    "param",
    "max_loop_iterations",
    "set_max_loop_iterations",
    "uninstall",
]

install()
