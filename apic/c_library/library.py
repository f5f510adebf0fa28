"""``export(graph_or_path, outdir, name=...)``: a saved CPU graph as a C shared library that runs with no Python
(docs/EXPORT.md); ``python -m apic export GRAPH.wrp OUTDIR`` calls it.

It writes ``lib<name>.so`` (the graph's kernels, a small C runtime that replays its op table, and its saved
state), ``<name>.h``, ``<name>.hpp`` (C++ RAII), ``<name>.pc`` (pkg-config) and ``<name>Config.cmake``.

The file is read by ``apic.capture_load`` (a file it refuses, export refuses with the same error), twice: the
words of the two loads' op tables and arenas that differ are the addresses the library relocates at open
(``relocatable.py``). Graphs whose ops need Warp's native runtime at replay (native handles: Mesh, Bvh,
HashGrid, Volume; sparse ops; CPU block kernels) are refused, naming what; Warp's host sorts, scans and
reductions run as the runtime's ports of Warp's CPU code (``c/apic_natives.inc``).
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile

from apic._version import __version__
from apic.c_library import cuda, emit, toolchain
from apic.c_library.from_graph import is_cpu_graph, snapshot
from apic.c_library.relocatable import ExportError, image
from apic.c_library.toolchain import ToolchainError
from apic.persist import capture_load, capture_save

__all__ = ["ExportError", "ToolchainError", "export", "default_name"]


def default_name(path) -> str:
    """The library name for a graph file: its stem made a C identifier (``lib<name>.so``, ``<name>_open``)."""
    stem = os.path.basename(os.fspath(path))
    stem = stem[: -len(".wrp")] if stem.endswith(".wrp") else stem
    name = re.sub(r"[^A-Za-z0-9_]", "_", stem) or "graph"
    return name if not name[0].isdigit() else f"g_{name}"


def _check_name(name) -> str:
    if not isinstance(name, str) or not emit.C_NAME.match(name) or len(name) > 64:
        raise ExportError(f"the export's name must be a C identifier of at most 64 characters, got {name!r}")
    return name


def export(graph_or_path, outdir, name: str | None = None) -> dict[str, str]:
    """Export a graph to a C shared library in ``outdir`` (created if needed); a CUDA graph's library drives the
    GPU through the CUDA driver API (``apic.c_library.cuda``).

    Args:
        graph_or_path: The path of a saved graph (``.wrp``; its ``_modules`` folder beside it), or an apic CPU
            graph (live or loaded), which is saved to a temporary folder first.
        outdir: The folder the library, headers and package files are written to.
        name: The library's name (a C identifier): ``lib<name>.so``, functions ``<name>_open`` ... Default: the
            file's stem.

    Returns:
        ``{"library", "header", "cpp_header", "pkg_config", "cmake"}``: the paths written.

    Raises:
        What ``apic.capture_load`` raises for the file; ``ExportError`` for a graph the export cannot run
        (naming the op, handle or kernel); ``ToolchainError`` when no C compiler is found or linking fails.
    """
    with tempfile.TemporaryDirectory(prefix="apic-export-") as work:
        if isinstance(graph_or_path, (str, os.PathLike)):
            path = os.fspath(graph_or_path)
        else:
            if not is_cpu_graph(graph_or_path) and not cuda.is_cuda_graph(graph_or_path):
                raise ExportError(f"apic export takes an apic graph (CPU or CUDA) or the path of a saved one, got "
                                  f"{type(graph_or_path).__name__}")
            path = os.path.join(work, "graph.wrp")
            capture_save(graph_or_path, path)
        name = _check_name(name if name is not None else default_name(path))
        toolchain.check_system()  # before the loads: no linker for this system's objects, or no compiler,
        toolchain.compiler()  # are the cheapest refusals
        saved, images = cuda.read(path)  # a CUDA graph is exported from the file: no GPU needed (cuda.py)
        if cuda.is_cuda(saved):
            return _build_cuda(work, saved, images, name, os.fspath(outdir))
        first = capture_load(path)  # the loader's checks and errors, as they are
        second = capture_load(path)
        snap = snapshot(first)
        img = image(snap, snapshot(second))
        return _build(work, img, snap, name, os.fspath(outdir))


def _build_cuda(work: str, saved, images, name: str, outdir: str) -> dict[str, str]:
    """A CUDA graph's library (``cuda.py``) and the same package files as a CPU graph's."""
    build = os.path.join(work, "build")
    os.makedirs(build)
    cuda.link(build, saved, images, name, f"lib{name}.so")
    return _install(build, name, outdir, cuda.header(name), cuda.cpp_header(name))


def _build(work: str, img, snap, name: str, outdir: str) -> dict[str, str]:
    """Write the sources into ``work``, link, and copy what a user needs into ``outdir``."""
    build = os.path.join(work, "build")
    os.makedirs(build)
    sources = emit.graph_sources(build, img, snap)
    for file in emit.RUNTIME_FILES:
        with open(os.path.join(build, file), "w") as f:
            f.write(emit.runtime_file(file))
    with open(os.path.join(build, "apic_export_api.h"), "w") as f:
        f.write(emit.header(name))
    with open(os.path.join(build, "exports.map"), "w") as f:
        f.write(emit.version_script(name))
    objects = []
    for k, data in enumerate(snap.module_images):
        objects.append(f"module_{k}.o")
        with open(os.path.join(build, objects[-1]), "wb") as f:
            f.write(data)
    library = f"lib{name}.so"
    toolchain.link(build, ["apic_runtime.c", *sources], objects, name, library)
    return _install(build, name, outdir, emit.header(name), emit.cpp_header(name))


def _install(build: str, name: str, outdir: str, header: str, cpp_header: str) -> dict[str, str]:
    """Copy the library linked in ``build`` and write the headers and package files into ``outdir``."""
    library = f"lib{name}.so"
    os.makedirs(outdir, exist_ok=True)
    out = os.path.abspath(outdir)
    written = {"library": os.path.join(out, library), "header": os.path.join(out, f"{name}.h"),
               "cpp_header": os.path.join(out, f"{name}.hpp"), "pkg_config": os.path.join(out, f"{name}.pc"),
               "cmake": os.path.join(out, f"{name}Config.cmake")}
    shutil.copyfile(os.path.join(build, library), written["library"] + ".tmp")
    os.replace(written["library"] + ".tmp", written["library"])  # a running program keeps the file it mapped
    texts = {"header": header, "cpp_header": cpp_header,
             "pkg_config": emit.pkg_config(name, out, __version__), "cmake": emit.cmake_config(name)}
    for key, text in texts.items():
        with open(written[key], "w") as f:
            f.write(text)
    return written

