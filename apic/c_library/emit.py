"""The sources of an exported library, written from a relocatable ``Image`` and a ``Snapshot``: the graph's
state (``<name>_graph.c`` and the binary files ``<name>_image.S`` includes), the public header (from
``c/header.h.in``), a C++ RAII header, a pkg-config file and a CMake package config."""

from __future__ import annotations

import os
import re
from importlib import resources

import numpy as np

from apic.c_library.relocatable import ExportError, Image

C_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
MAX_DIMS = 8
_SAFE = set(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-+ ")
# the runtime's files, copied into the build folder
RUNTIME_FILES = ("apic_runtime.c", "apic_image.h", "apic_bindings.inc", "apic_interpreter.inc", "apic_natives.inc")


def c_string(text: str) -> str:
    """``text`` as a C string literal (bytes outside a safe set as octal escapes: names may come from a file)."""
    return '"' + "".join(chr(c) if c in _SAFE else f"\\{c:03o}" for c in text.encode("utf-8")) + '"'


def runtime_file(name: str) -> str:
    """The text of one of the runtime's C files (package data)."""
    return resources.files("apic.c_library").joinpath("c").joinpath(name).read_text(encoding="utf-8")


def header(name: str) -> str:
    """The public header ``<name>.h``."""
    return runtime_file("header.h.in").replace("@NAME@", name)


def cpp_header(name: str) -> str:
    """The C++ RAII header ``<name>.hpp``."""
    return runtime_file("header.hpp.in").replace("@NAME@", name)


def incbin_image(folder: str, prefix: str, blobs: dict[str, bytes]) -> None:
    """Write each blob to ``folder/<key>.bin`` and ``image.S``, which includes them as the read-only, hidden
    symbols ``<prefix><key>``, each 64-byte aligned and followed by a NUL (a PTX image is then a C string)."""
    asm = []
    for key, data in blobs.items():
        with open(os.path.join(folder, f"{key}.bin"), "wb") as f:
            f.write(data)
        asm += [f"    .globl {prefix}{key}", f"    .hidden {prefix}{key}", "    .balign 64", f"{prefix}{key}:",
                f'    .incbin "{key}.bin"', "    .byte 0"]
    with open(os.path.join(folder, "image.S"), "w") as f:
        f.write("    .section .rodata\n" + "\n".join(asm) + '\n    .section .note.GNU-stack,"",@progbits\n')


def _regions(img: Image) -> tuple[bytes, list[int]]:
    """The regions' saved contents packed 64-byte aligned, and each one's offset (-1: all zero)."""
    packed, offsets = bytearray(), []
    for data in img.region_contents:
        if not any(data):
            offsets.append(-1)
            continue
        packed += b"\0" * (-len(packed) % 64)
        offsets.append(len(packed))
        packed += data
    return bytes(packed), offsets


def c_ints(values) -> str:
    """``values`` as a C initializer of 64-bit integers."""
    return "{" + ", ".join(f"{int(v)}LL" for v in values) + "}" if len(values) else "{0}"


def _bytes(values: bytes) -> str:
    return "{" + ", ".join(str(b) for b in values) + "}" if values else "{0}"


def graph_sources(folder: str, img: Image, snap) -> list[str]:
    """Write ``graph.c`` and ``image.S`` (with their binary files) into ``folder``; the files to compile."""
    regions, region_offsets = _regions(img)
    blobs = {"table": img.table.astype("<i8").tobytes(), "table_relocs": img.table_relocs.astype("<i8").tobytes(),
             "arena": img.arena, "arena_relocs": img.arena_relocs.astype("<i8").tobytes(), "regions": regions}
    incbin_image(folder, "apic_img_", blobs)

    for symbol in snap.kernel_symbols:
        if not C_NAME.match(symbol):
            raise ExportError(f"cannot export this graph: kernel symbol {symbol!r} is not a C identifier")
    lines = ['#include <stdint.h>', '#include "apic_export_api.h"', '#include "apic_image.h"']
    lines += [f"extern const unsigned char apic_img_{key}[];" for key in blobs]
    lines += [f"extern void {symbol}(void);" for symbol in sorted(set(snap.kernel_symbols))]
    kernels = ", ".join(f"(void*)&{s}" for s in snap.kernel_symbols) or "0"
    lines.append(f"static void* const kernels[] = {{{kernels}}};")
    lines.append(f"static const int64_t region_sizes[] = {c_ints(img.region_sizes)};")
    lines.append(f"static const int64_t region_offsets[] = {c_ints(region_offsets)};")
    bindings = []
    for b in snap.bindings:
        shape, strides = tuple(b.shape), tuple(b.strides)
        if len(shape) > MAX_DIMS:
            raise ExportError(f"cannot export binding {b.name!r}: {len(shape)} dimensions (at most {MAX_DIMS})")
        kind = "APIC_BINDING_OUTPUT" if b.kind == "output" else "APIC_BINDING_INPUT"
        bindings.append(f"{{{c_string(b.name)}, {kind}, {c_string(b.dtype)}, {b.region}, {b.offset}, "
                        f"{int(np.prod(shape, dtype=np.int64)) * b.elem_size}, {b.elem_size}, {len(shape)}, "
                        f"{c_ints(shape)}, {c_ints(strides)}}}")
    lines.append("static const apic_image_binding bindings[] = {" + (", ".join(bindings) or "{0}") + "};")
    scalars = []
    for k, (name, dtype, value, offsets) in enumerate(snap.scalars):
        lines.append(f"static const unsigned char scalar_value_{k}[] = {_bytes(value)};")
        lines.append(f"static const int64_t scalar_offsets_{k}[] = {c_ints(offsets)};")
        scalars.append(f"{{{c_string(name)}, {c_string(dtype)}, {len(value)}, scalar_value_{k}, {len(offsets)}, "
                       f"scalar_offsets_{k}}}")
    lines.append("static const apic_image_scalar scalars[] = {" + (", ".join(scalars) or "{0}") + "};")
    lines.append(
        "const apic_image apic_graph_image = {APIC_EXPORT_ABI_VERSION, "
        f"{len(img.table)}, (const int64_t*)apic_img_table, {len(img.table_relocs)}, "
        f"(const apic_table_reloc*)apic_img_table_relocs, {len(img.arena)}, apic_img_arena, {len(img.arena_relocs)}, "
        f"(const apic_arena_reloc*)apic_img_arena_relocs, {len(img.region_sizes)}, region_sizes, region_offsets, "
        f"apic_img_regions, {len(snap.kernel_symbols)}, kernels, {img.loops}, {len(bindings)}, bindings, "
        f"{len(scalars)}, scalars}};")
    with open(os.path.join(folder, "graph.c"), "w") as f:
        f.write("/* generated by apic export: the graph's saved state */\n" + "\n".join(lines) + "\n")
    return ["graph.c", "image.S"]


def version_script(name: str) -> str:
    """The linker version script: only the header's functions are exported (the kernels stay local)."""
    return f"{{\n  global: {name}_*;\n  local: *;\n}};\n"


def pkg_config(name: str, prefix: str, version: str) -> str:
    """``<name>.pc`` (prefix: the export's folder)."""
    return (f"prefix={prefix}\nlibdir=${{prefix}}\nincludedir=${{prefix}}\n\nName: {name}\n"
            f"Description: an apic graph exported to a C library\nVersion: {version}\n"
            f"Libs: -L${{libdir}} -Wl,-rpath,${{libdir}} -l{name}\nCflags: -I${{includedir}}\n")


def cmake_config(name: str) -> str:
    """``<name>Config.cmake``: ``find_package(<name>)`` then ``target_link_libraries(app <name>::<name>)``."""
    return (f"# apic export: find_package({name} CONFIG) with {name}_DIR set to this folder\n"
            f"if(NOT TARGET {name}::{name})\n"
            f"  add_library({name}::{name} SHARED IMPORTED)\n"
            f"  set_target_properties({name}::{name} PROPERTIES\n"
            f'    IMPORTED_LOCATION "${{CMAKE_CURRENT_LIST_DIR}}/lib{name}.so"\n'
            f'    INTERFACE_INCLUDE_DIRECTORIES "${{CMAKE_CURRENT_LIST_DIR}}")\n'
            f"endif()\nset({name}_FOUND TRUE)\n")
