"""``python -m apic replay``: load a saved graph (``.wrp``) and replay it, with named inputs and outputs."""

from __future__ import annotations

import time

from apic.cli import UserError


def add_parser(subparsers):
    parser = subparsers.add_parser(
        "replay",
        help="load a saved graph (.wrp) and replay it",
        description="Load a graph saved by wp.capture_save, optionally set named inputs from .npy files, "
        "replay it ITERS times, and write named outputs to .npy files.",
    )
    parser.add_argument("path", help="the .wrp file (its <stem>_modules/ folder must be beside it)")
    parser.add_argument("--device", default="cpu", help="device to replay on (apic graphs replay on the CPU)")
    parser.add_argument("--iters", type=int, default=1, metavar="N", help="number of replays (default 1)")
    parser.add_argument("--input", action="append", default=[], metavar="NAME=FILE.npy",
                        help="set the named parameter from a .npy file before replaying (repeatable)")
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE", dest="set_values",
                        help="set a named scalar parameter before replaying: dt=0.005, or a vector / matrix as "
                             "comma-separated components in row order, g=0,-9.8,0 (repeatable)")
    parser.add_argument("--output", action="append", default=[], metavar="NAME=FILE.npy",
                        help="write the named parameter to a .npy file after replaying (repeatable)")
    parser.add_argument("--time", action="store_true", help="print how long the replays took")
    parser.add_argument("--threads", type=int, default=1, metavar="N",
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


def _scalar_value(graph, name: str, text: str):
    """The value ``--set NAME=TEXT`` gives a named scalar parameter: numbers as its components' kind."""
    import numpy as np  # lazy, as in run: a quick --help

    scalar = graph.scalars.get(name)
    if scalar is None:
        known = ", ".join(sorted(graph.scalars)) or "none"
        raise UserError(f"--set {name}: the graph has no named scalar parameter {name!r} (its scalar parameters: {known})")
    kind = np.dtype(scalar.np_dtype).kind
    words = [word.strip() for word in text.split(",")]
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
        if len(items) != 1:
            raise UserError(f"--set {name}={text}: {scalar.dtype} is one number, got {len(items)}")
        return items[0]
    size = int(np.prod(scalar.elem_shape))
    if len(items) != size:
        raise UserError(f"--set {name}={text}: {scalar.dtype} has {size} components, got {len(items)}")
    return np.array(items, dtype=object).reshape(scalar.elem_shape)


def _view(graph, name: str, option: str):
    if name not in graph.params:
        known = ", ".join(sorted(graph.params)) or "none"
        raise UserError(f"{option} {name}: the graph has no parameter named {name!r} (its parameters: {known})")
    binding = graph.bindings[name]
    if binding.np_dtype is None:
        raise UserError(f"{option} {name}: parameter of dtype {binding.dtype} has no NumPy equivalent")
    return graph.param_numpy(name)


def run(args) -> int:
    # lazy, as every import of NumPy, Warp or apic in the CLI: `python -m apic --help` stays quick
    import numpy as np  # lazy (above)
    import warp as wp  # lazy (above)

    import apic  # noqa: F401  (lazy, above; installs wp.capture_load)
    from apic import _compat  # lazy (above)

    inputs = _pairs(args.input, "--input")
    settings = _pairs(args.set_values, "--set", "NAME=VALUE")
    outputs = _pairs(args.output, "--output")
    if args.iters < 0:
        raise UserError(f"--iters must be 0 or more, got {args.iters}")
    if args.threads < 1:
        raise UserError(f"--threads must be 1 or more, got {args.threads}")
    _compat.quiet_warp()
    try:
        device = wp.get_device(args.device)
    except Exception as error:  # Warp raises several types for an unknown device
        raise UserError(f"--device {args.device}: {error}") from None
    if not device.is_cpu:
        raise UserError(f"--device {args.device}: apic graphs replay on the CPU")

    graph = wp.capture_load(args.path, device=device)
    graph.threads = args.threads

    for name, text in settings:
        try:
            graph.set_param(name, _scalar_value(graph, name, text))
        except apic.BindingError as error:
            raise UserError(f"--set {name}={text}: {error}") from None

    for name, path in inputs:
        view = _view(graph, name, "--input")
        try:
            data = np.load(path, allow_pickle=False)
        except ValueError as error:
            raise UserError(f"--input {name}: cannot read {path} as a .npy array ({error})") from None
        if data.dtype != view.dtype or data.shape != view.shape:
            raise UserError(
                f"--input {name}: {path} holds {data.dtype} {data.shape}, the parameter is {view.dtype} {view.shape}"
            )
        view[...] = data
    for name, _ in outputs:
        _view(graph, name, "--output")

    if args.profile or args.profile_plot:
        report = apic.profile(graph, replays=args.iters)
        print(report.table())
        if args.profile_plot:
            report.plot(args.profile_plot)
        args.iters = 0  # the profiled replays were the replays
    if args.time:
        graph.launch(0)  # load the interpreter (and range entries) outside the timing (zero replays: no effect)
    start = time.perf_counter()
    graph.launch(args.iters)
    elapsed = time.perf_counter() - start

    for name, path in outputs:
        np.save(path, np.ascontiguousarray(graph.param_numpy(name)))
    if args.time:
        per = elapsed / args.iters * 1e6 if args.iters else 0.0
        print(f"replayed {args.iters} iteration(s) of {graph.op_count} ops in {elapsed * 1e3:.3f} ms "
              f"({per:.2f} us per iteration)")
    return 0
