"""``python -m apic replay``: load a saved graph (``.wrp``) and replay it, with named inputs and outputs.

Every option is checked before the work it feeds: names against the graph's parameters (an array
parameter takes ``--input`` / ``--output``, a scalar one ``--set``), a ``.npy`` file's header (dtype,
shape, size) before its data is read, an output's folder before the replay.
"""

from __future__ import annotations

import io
import math
import os
import time

from apic.cli import UserError, check_graph_path, check_output_path, int_option, naming, write_output

MAX_ITERS = (1 << 63) - 1  # the interpreter counts replays in an int64
_LISTED = 20  # names an error message lists before "... and N more"


def add_parser(subparsers):
    parser = subparsers.add_parser(
        "replay",
        help="load a saved graph (.wrp) and replay it",
        description="Load a graph saved by wp.capture_save, optionally set named inputs from .npy files, "
        "replay it ITERS times, and write named outputs to .npy files.",
    )
    parser.add_argument("path", help="the .wrp file (its <stem>_modules/ folder must be beside it)")
    parser.add_argument("--device", default="cpu", help="device to replay on (apic graphs replay on the CPU)")
    parser.add_argument("--iters", type=int_option(0, MAX_ITERS), default=1, metavar="N",
                        help="number of replays (default 1)")
    parser.add_argument("--input", action="append", default=[], metavar="NAME=FILE.npy",
                        help="set the named array parameter from a .npy file of its dtype and shape before "
                             "replaying (repeatable)")
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE", dest="set_values",
                        help="set a named scalar parameter before replaying: dt=0.005, or a vector / matrix as "
                             "comma-separated components in row order, g=0,-9.8,0 (repeatable)")
    parser.add_argument("--output", action="append", default=[], metavar="NAME=FILE.npy",
                        help="write the named array parameter to FILE.npy (that exact path) after replaying "
                             "(repeatable)")
    parser.add_argument("--time", action="store_true", help="print how long the replays took")
    parser.add_argument("--threads", type=int_option(1), default=1, metavar="N",
                        help="split large race-free launches over N threads, run on at most the usable CPUs "
                             "(docs/PARALLEL.md; default 1: serial)")
    parser.add_argument("--profile", action="store_true",
                        help="time every op from inside the interpreter and print a table by kernel and op kind")
    parser.add_argument("--profile-plot", metavar="FILE.png", help="with --profile: also plot it (needs matplotlib)")
    return parser


def _pairs(values: list[str], option: str, form: str = "NAME=FILE.npy") -> list[tuple[str, str]]:
    pairs = []
    for value in values:
        name, sep, path = value.partition("=")
        if not sep or not name or not path:
            raise UserError(f"{option} expects {form}, got {value!r}")
        pairs.append((name, path))
    return pairs


def _listed(names) -> str:
    """``names`` sorted, at most ``_LISTED`` of them (a graph may have thousands), or "none"."""
    names = sorted(names)
    shown = ", ".join(repr(n) for n in names[:_LISTED]) or "none"
    return shown + (f" and {len(names) - _LISTED} more" if len(names) > _LISTED else "")


def _no_such(graph, option: str, name: str) -> UserError:
    return UserError(f"{option} {name}: the graph has no parameter named {name!r} (its array parameters: "
                     f"{_listed(graph.bindings)}; its scalar parameters: {_listed(graph.scalars)})")


def _words(name: str, text: str, scalar) -> list[str]:
    """The comma-separated components of ``--set NAME=TEXT``, as many as ``scalar`` has (counted before
    any is parsed)."""
    words = [word.strip() for word in text.split(",")]
    size = math.prod(scalar.elem_shape)
    if len(words) != size:
        what = "one number" if not scalar.elem_shape else f"{size} comma-separated components"
        raise UserError(f"--set {name}={text}: a {scalar.dtype} parameter takes {what}, got {len(words)}")
    return words


def _scalar_value(graph, name: str, text: str):
    """The value ``--set NAME=TEXT`` gives a named scalar parameter: numbers as its components' kind."""
    import numpy as np  # lazy, as in run: a quick --help

    scalar = graph.scalars.get(name)
    if scalar is None:
        binding = graph.bindings.get(name)
        if binding is not None:
            raise UserError(f"--set {name}={text}: {name!r} is an array parameter ({binding.dtype} "
                            f"{tuple(binding.shape)}): set it from a .npy file with --input {name}=FILE.npy")
        raise _no_such(graph, "--set", name)
    words = _words(name, text, scalar)
    kind = np.dtype(scalar.np_dtype).kind
    longest = max(words, key=len)
    if len(longest) > 64:  # no number a parameter holds is this long (and Python refuses to parse some)
        raise UserError(f"--set {name}: a component of {len(longest)} characters is not a {scalar.dtype} value")
    try:
        if kind == "b":
            truth = {"true": True, "1": True, "false": False, "0": False}
            items = [truth[word.lower()] for word in words]
        elif kind in "iu":
            items = [int(word, 0) for word in words]
        else:
            items = [float(word) for word in words]
    except (KeyError, ValueError):
        what = {"b": "true/false", "i": "integers", "u": "integers"}.get(kind, "numbers")
        raise UserError(f"--set {name}={text}: expected {what} for a {scalar.dtype} parameter") from None
    if not scalar.elem_shape:
        return items[0]
    return np.array(items, dtype=object).reshape(scalar.elem_shape)


def _array_view(graph, name: str, option: str):
    """The zero-copy NumPy view of the array parameter ``name``, or why ``option`` cannot use it."""
    if name in graph.scalars:
        scalar = graph.scalars[name]
        raise UserError(f"{option} {name}: {name!r} is a named scalar parameter ({scalar.dtype}), not an array: "
                        f"set it with --set {name}=VALUE (python -m apic inspect shows its value)")
    binding = graph.bindings.get(name)
    if binding is None:
        raise _no_such(graph, option, name)
    if binding.np_dtype is None:
        raise UserError(f"{option} {name}: parameter of dtype {binding.dtype} has no NumPy equivalent")
    return graph.param_numpy(name)


def _npy_header(f, where: str):
    """``(shape, fortran_order, dtype)`` from the header of the open ``.npy`` file ``f``; nothing else read."""
    from numpy.lib import format as npy  # lazy, as in run: a quick --help

    start = f.read(6)
    f.seek(0)
    if start.startswith(b"PK"):
        raise UserError(f"{where}: is a .npz archive; save the one array with np.save (a .npy file)")
    try:
        version = npy.read_magic(f)
        if version == (1, 0):
            return npy.read_array_header_1_0(f)
        return npy.read_array_header_2_0(f)
    except (ValueError, TypeError, SyntaxError) as error:  # NumPy's refusals of a bad magic string or header
        raise UserError(f"{where}: not a .npy file (as np.save writes): {error}") from None


def _read_npy(name: str, path: str, view):
    """The array in ``path`` if it is a .npy file of exactly ``view``'s dtype and shape: the header is
    checked, and the file's size against it, before any data is read (a wrong or hostile file costs
    nothing however large it claims to be)."""
    import numpy as np  # lazy, as in run: a quick --help

    from apic.format.module_folder import open_regular  # lazy, as above

    where = f"--input {name}={path}"
    try:
        f = open_regular(path)  # never blocks on a FIFO, never reads a device
    except OSError as error:
        raise UserError(f"{where}: cannot read the file: {error.strerror or error}") from None
    with f:
        shape, fortran, dtype = _npy_header(f, where)
        if dtype != view.dtype or tuple(shape) != view.shape:
            raise UserError(f"{where}: the file holds {dtype} {tuple(shape)}, the parameter is "
                            f"{view.dtype} {view.shape}")
        size, expected = os.fstat(f.fileno()).st_size, f.tell() + view.nbytes
        if size != expected:
            raise UserError(f"{where}: the file is {size} bytes; a .npy of {dtype} {tuple(shape)} is {expected} "
                            "(truncated, or data after the array)")
        data = f.read(view.nbytes)
    if len(data) != view.nbytes:
        raise UserError(f"{where}: the file changed while being read")
    return np.frombuffer(data, dtype=dtype).reshape(view.shape, order="F" if fortran else "C")


def _npy_prefix(array) -> bytes:
    """The ``.npy`` header ``np.save`` writes before a C-contiguous ``array``'s bytes (format 1.0, or 2.0
    for a header too large for it)."""
    from numpy.lib import format as npy  # lazy, as in run: a quick --help

    header = io.BytesIO()
    fields = npy.header_data_from_array_1_0(array)
    try:
        npy.write_array_header_1_0(header, fields)
    except ValueError:  # a header of more than 65,535 bytes: format 2.0
        header = io.BytesIO()
        npy.write_array_header_2_0(header, fields)
    return header.getvalue()


def _check_plot(args) -> None:
    if args.profile_plot:
        try:
            import matplotlib  # noqa: F401  (lazy: an optional dependency; refused before the replay without it)
        except ImportError:
            raise UserError("--profile-plot needs matplotlib (pip install matplotlib)") from None
        check_output_path(f"--profile-plot {args.profile_plot}", args.profile_plot)


def _device(name: str):
    import warp as wp  # lazy, as in run: a quick --help

    try:
        device = wp.get_device(name)
    except Exception as error:  # Warp raises several types for an unknown device
        raise UserError(f"--device {name}: {error}") from None
    if not device.is_cpu:
        raise UserError(f"--device {name}: apic graphs replay on the CPU")
    return device


def _load(wp, path: str, device):
    """``wp.capture_load``: what it refuses (apic's errors, an unreadable file) is reported as it words it;
    anything else that escapes a load (a CUDA graph asked onto the CPU, Python's or Warp's own errors)
    becomes one line naming the file, not a traceback."""
    import apic  # lazy, as in run: a quick --help

    try:
        return wp.capture_load(path, device=device)
    except (apic.ApicError, OSError, KeyboardInterrupt):
        raise
    except Exception as error:  # noqa: BLE001 - whatever a load of a hostile or foreign file raises
        raise UserError(f"cannot load {path}: {error}") from None


def run(args) -> int:
    # lazy, as every import of NumPy, Warp or apic in the CLI: `python -m apic --help` stays quick
    import numpy as np  # lazy (above)
    import warp as wp  # lazy (above)

    import apic  # noqa: F401  (lazy, above; installs wp.capture_load)
    from apic import _compat  # lazy (above)

    inputs = _pairs(args.input, "--input")
    settings = _pairs(args.set_values, "--set", "NAME=VALUE")
    outputs = _pairs(args.output, "--output")
    for name, path in outputs:
        check_output_path(f"--output {name}={path}", path)
    _check_plot(args)
    check_graph_path(args.path)
    _compat.quiet_warp()
    device = _device(args.device)

    graph = _load(wp, args.path, device)
    graph.threads = args.threads

    for name, text in settings:
        try:
            graph.set_param(name, _scalar_value(graph, name, text))
        except apic.BindingError as error:
            raise UserError(f"--set {name}={text}: {error}") from None
    for name, path in inputs:
        view = _array_view(graph, name, "--input")
        view[...] = _read_npy(name, path, view)
    for name, _ in outputs:
        _array_view(graph, name, "--output")

    if args.profile or args.profile_plot:
        report = apic.profile(graph, replays=args.iters)
        print(report.table())
        if args.profile_plot:
            with naming(f"--profile-plot {args.profile_plot}"):
                report.plot(args.profile_plot)
        args.iters = 0  # the profiled replays were the replays
    if args.time:
        graph.launch(0)  # load the interpreter (and range entries) outside the timing (zero replays: no effect)
    start = time.perf_counter()
    graph.launch(args.iters)
    elapsed = time.perf_counter() - start

    for name, path in outputs:  # that exact path (np.save given a name would add ".npy" to it)
        data = np.ascontiguousarray(graph.param_numpy(name))
        write_output(f"--output {name}={path}", path, _npy_prefix(data), data.reshape(-1).view(np.uint8))
    if args.time:
        per = elapsed / args.iters * 1e6 if args.iters else 0.0
        print(f"replayed {args.iters} iteration(s) of {graph.op_count} ops in {elapsed * 1e3:.3f} ms "
              f"({per:.2f} us per iteration)")
    return 0
