"""``python -m apic export``: a saved graph (``.wrp``; CPU, or CUDA through the driver API) as a C shared library,
header and package files that run it with no Python (docs/EXPORT.md)."""

from __future__ import annotations

import os

from apic.cli import UserError, check_graph_path


def add_parser(subparsers):
    parser = subparsers.add_parser(
        "export",
        help="export a saved graph (.wrp; CPU or CUDA) to a C shared library that runs without Python",
        description="Write lib<NAME>.so (the graph's kernels, its replay and its saved state), <NAME>.h, <NAME>.hpp, "
        "<NAME>.pc and <NAME>Config.cmake into OUTDIR. Links with the system C compiler (cc, or $CC).",
    )
    parser.add_argument("path", help="the .wrp file (its <stem>_modules/ folder must be beside it)")
    parser.add_argument("outdir", help="the folder to write the library into (created if needed)")
    parser.add_argument("--name", help="the library's name, a C identifier (default: the file's stem)")
    return parser


def run(args) -> int:
    from apic import _compat  # lazy: importing any apic module imports apic, and so Warp (a quick --help)
    from apic.c_library.library import export  # lazy: the loader and the toolchain, for this command only

    _compat.quiet_warp()  # stdout is the report alone
    check_graph_path(args.path)
    if os.path.exists(args.outdir) and not os.path.isdir(args.outdir):
        raise UserError(f"{args.outdir} is a file; name a folder to write the library into")
    written = export(args.path, args.outdir, name=args.name)
    for key in ("library", "header", "cpp_header", "pkg_config", "cmake"):
        print(written[key])
    return 0
