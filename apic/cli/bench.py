"""``python -m apic bench``: the dispatch-overhead benchmarks, side by side with Warp and the native floor.

The suite is part of the package (``apic/bench/``), so an installed apic runs it; the repository's
``benchmarks/`` folder keeps the results and the other measurement scripts.
"""

from __future__ import annotations

import sys

from apic.cli import UserError, check_output_path, naming, write_output


def add_parser(subparsers):
    parser = subparsers.add_parser(
        "bench", help="time apic replay against wp.launch, Launch objects, Warp's CPU replay and a native floor"
    )
    parser.add_argument("--quick", action="store_true", help="a smoke run of a few seconds (timings meaningless)")
    parser.add_argument("--json", metavar="FILE", help="write every result as JSON to FILE")
    parser.add_argument("--plot", metavar="FILE.png", help="draw the results into FILE.png (needs matplotlib)")
    parser.add_argument("--markdown", metavar="FILE", help="write the results as Markdown tables to FILE")
    parser.add_argument("--no-progress", action="store_true", help="do not show progress on stderr")
    return parser


def _suite():
    """The suite (``apic.bench.run``), imported only when the command runs: it imports Warp's kernels."""
    from apic.bench import run  # lazy: building the workloads compiles kernels

    return run


class _Progress:
    """One updating line on a terminal; a line per phase otherwise."""

    def __init__(self, stream) -> None:
        self.stream = stream
        self.tty = stream.isatty()
        self.last_phase = None

    def __call__(self, done: int, total: int, label: str) -> None:
        if self.tty:
            filled = int(24 * done / max(total, 1))
            line = f"\r[{'#' * filled}{'.' * (24 - filled)}] {100 * done // max(total, 1):3d}%  {label}"
            self.stream.write(f"{line:<100.100}")
            if done >= total:
                self.stream.write("\n")
        else:
            phase = label.split(":")[0]
            if phase != self.last_phase:
                self.stream.write(f"[{100 * done // max(total, 1):3d}%] {phase}\n")
                self.last_phase = phase
        self.stream.flush()


def _check_outputs(args) -> None:
    """Refuse, before the suite runs for minutes, an output path that cannot be written: a folder, or in a
    folder that does not exist; and ``--plot`` without matplotlib."""
    for option, path in (("--json", args.json), ("--markdown", args.markdown), ("--plot", args.plot)):
        if path is not None:
            check_output_path(f"{option} {path}", path)
    if args.plot:
        try:
            import matplotlib  # noqa: F401  (lazy: an optional dependency; refuse --plot early without it)
        except ImportError:
            raise UserError("--plot needs matplotlib (pip install matplotlib)") from None


def run(args) -> int:
    _check_outputs(args)
    suite = _suite()
    config = suite.QUICK if args.quick else suite.FULL
    progress = (lambda *a: None) if args.no_progress else _Progress(sys.stderr)
    try:
        results = suite.run_suite(config, progress=progress)
    except suite.MismatchError as error:
        print(f"\nbench FAILED, a method disagrees with eager Warp: {error}", file=sys.stderr)
        return 1
    print(suite.format_report(results))
    if args.json:
        from apic._text import json_text  # lazy: imports apic, as _suite

        text = json_text(results, indent=1)  # strict JSON: a NaN or infinite timing is a string
        write_output(f"--json {args.json}", args.json, text.encode())
        print(f"results written to {args.json}")
    if args.markdown:
        from apic.bench.markdown import format_markdown  # lazy: imports the suite, as _suite

        text = format_markdown(results)
        write_output(f"--markdown {args.markdown}", args.markdown, text.encode())
        print(f"Markdown written to {args.markdown}")
    if args.plot:
        with naming(f"--plot {args.plot}"):
            suite.plot(results, args.plot)
        print(f"plot written to {args.plot}")
    return 0
