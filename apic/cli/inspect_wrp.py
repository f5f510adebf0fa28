"""``python -m apic inspect``: what a saved graph (``.wrp``) holds, without running anything in it."""

from __future__ import annotations

import collections
import dataclasses
import hashlib
import os

from apic import _compat, dot, loading
from apic.cli import UserError, check_graph_path, check_output_path, naming, write_output
from apic._text import escape as _escape
from apic._text import json_text
from apic.errors import ApicError, FormatError
from apic.format import reader, writer
from apic.format.module_folder import ModuleFolder, read_regular
from apic.record.params import unpack
from apic.record import ops as rec
from apic.replay.cuda.loaded_graph import unavailable_reason


def add_parser(subparsers):
    parser = subparsers.add_parser(
        "inspect",
        help="describe a saved graph (.wrp): versions, modules, kernels, regions, handles, bindings, ops",
        description="Validate a graph saved by wp.capture_save and describe it. Nothing in it is run.",
    )
    parser.add_argument("path", help="the .wrp file")
    parser.add_argument("--json", action="store_true", help="print one JSON document instead of text")
    parser.add_argument("--dot", metavar="FILE.dot", help="also write a picture of the graph as Graphviz DOT")
    parser.add_argument("--png", metavar="FILE.png", help="also render that picture (needs Graphviz's dot program)")
    return parser


def _ref(ref) -> dict:
    if hasattr(ref, "index"):  # a HandleRef: the id of a native handle
        return {"handle": ref.index}
    return {"region": ref.region, "offset": ref.offset}


def _blob(blob) -> dict:
    return {"bytes": len(blob.data), "relocs": [{"at": r.at, **_ref(r.target)} for r in blob.relocs]}


def _launch(op: rec.Launch, kernels) -> dict:
    entry = {"kernel": op.kernel, "name": kernels[op.kernel].key, "dim": list(op.dim), "args": _blob(op.args)}
    if op.adj_args is not None:
        entry["adj_args"] = _blob(op.adj_args)
    return entry


def _plain(value):
    """A field of an op as plain data: pointers as regions (or handles), blobs by size and relocations."""
    if isinstance(value, (rec.Ref, rec.HandleRef)):
        return _ref(value)
    if isinstance(value, rec.Blob):
        return _blob(value)
    if isinstance(value, tuple):
        return [_plain(v) for v in value]
    return value


def _fields(op, kernels) -> dict:
    """Every field of an op, for a kind with no description of its own below."""
    return {f.name: _plain(getattr(op, f.name)) for f in dataclasses.fields(op)}


_DESCRIBE = {  # op type -> (op, kernels) -> what inspect shows of it besides its kind
    **{spec.type: _fields for spec in rec.OP_SPECS},
    rec.Launch: _launch,
    rec.CudaLaunch: lambda op, kernels: {"kernel": op.kernel, "name": kernels[op.kernel].key, "dim": list(op.dim),
                                         "grid": list(op.grid), "block": list(op.block), "smem": op.smem,
                                         "params": _blob(op.params)},
    rec.Memcpy: lambda op, kernels: {"dst": _ref(op.dst), "src": _ref(op.src), "nbytes": op.nbytes},
    rec.Memset: lambda op, kernels: {"dst": _ref(op.dst), "value": op.value, "nbytes": op.nbytes},
    rec.Memtile: lambda op, kernels: {"dst": _ref(op.dst), "value_bytes": len(op.value.data), "count": op.count},
    rec.ArrayCopy: lambda op, kernels: {"dst": _blob(op.dst), "src": _blob(op.src), "dst_type": op.dst_type,
                                        "src_type": op.src_type, "elem_size": op.elem_size},
    rec.ArrayFill: lambda op, kernels: {"dst": _blob(op.dst), "array_type": op.array_type,
                                        "value_bytes": len(op.value.data)},
    rec.Branch: lambda op, kernels: {"cond": _ref(op.cond), "target": op.target},
    rec.Jump: lambda op, kernels: {"target": op.target},
    rec.NativeCall: lambda op, kernels: {"fn": op.name,
                                         "args": [_ref(a) if isinstance(a, rec.Ref) else a for a in op.args]},
    rec.HandleCall: lambda op, kernels: {"fn": op.name, "handle": op.handle.index, "ints": list(op.ints),
                                         "radius": op.radius},
    rec.Alloc: lambda op, kernels: {"dst": _ref(op.dst), "nbytes": op.nbytes},
}


def _op(op, kernels) -> dict:
    """``op`` as inspect shows it: ``kind`` (its name, ``OpSpec.name``), then its fields."""
    describe = rec.handler(_DESCRIBE, op, "inspect")
    return {"kind": rec.SPEC_OF_TYPE[type(op)].name, **describe(op, kernels)}


def _distinct_ops(sequence, kernels) -> list[dict]:
    """Each distinct op once, in order of first use, with ``count`` (times it runs in the sequence) and
    ``first`` (its first position). The reader hands every repeat of a distinct op as the same object,
    so counting by identity keeps inspect's own working set to the distinct ops, whatever the
    sequence's length (no per-position entry is ever built)."""
    counts = collections.Counter(map(id, sequence))
    first: dict[int, tuple[int, object]] = {}
    for position, op in enumerate(sequence):
        if id(op) not in first:
            first[id(op)] = (position, op)
            if len(first) == len(counts):
                break
    return [{**_op(op, kernels), "count": counts[key], "first": position}
            for key, (position, op) in first.items()]


def _cpu_loads_here(saved, modules_dir: str) -> str | None:
    """What a load of this CPU graph checks before it runs anything from the file, raising what it would
    raise: None when the saved objects load, else why they cannot (the load then compiles the modules'
    saved source, and so does this: it is the only way to know that the source compiles here)."""
    refused = loading.objects_refused(saved)
    loading.check_memory(saved)
    folder = ModuleFolder.of(modules_dir, saved)
    try:
        loading.checked_images(saved, folder.fetch, folder.names, modules_dir, refused)
    finally:
        folder.close()
    return None if refused is None else str(refused)


def _read(path: str):
    """``(wrp_path, modules_dir, file_size, saved)``: the graph file at ``path``, read once (a regular file
    only: a FIFO or a device node would block or never end) and validated."""
    wrp_path, modules_dir = writer.wrp_paths(path)
    data = read_regular(wrp_path)
    return wrp_path, modules_dir, len(data), reader.read(data)


def describe(path: str) -> dict:
    """Everything ``inspect`` reports about the file at ``path``, as plain data."""
    return _describe(*_read(path))


def _describe(wrp_path: str, modules_dir: str, file_size: int, saved) -> dict:
    recording = saved.recording

    modules = []
    # read as a load reads them: no symlinks, regular files of the recorded size, never blocking
    folder = ModuleFolder.of(modules_dir, saved)
    try:
        for m in saved.modules:
            try:
                image = folder.fetch(m.file)
            except FormatError as error:
                status = f"refused: {error}"
            else:
                if image is None:
                    status = "missing"
                else:
                    status = "ok" if hashlib.sha256(image).hexdigest() == m.sha256 else "checksum mismatch"
            modules.append({"name": m.name, "file": m.file, "size": m.size, "sha256": m.sha256,
                            "native_types": list(m.native_types), "status": status})
    finally:
        folder.close()
    try:
        if saved.device is not None:  # a CUDA graph: needs cuda-python and a GPU that runs its modules
            reason = unavailable_reason()
            if reason:
                raise ApicError(f"cannot replay a CUDA graph here: {reason}")
            through_source = None
        else:
            through_source = _cpu_loads_here(saved, modules_dir)
        loads_here = {"ok": True, "reason": None, "through_source": through_source}
    except ApicError as error:
        loads_here = {"ok": False, "reason": str(error), "through_source": None}

    ops = _distinct_ops(recording.ops, recording.kernels)
    return {
        "file": wrp_path,
        "file_size": file_size,
        "format_version": saved.format_version,
        "writer": saved.writer,
        "target": saved.target,
        "abi": recording.abi,
        "device": saved.device,
        "loads_here": loads_here,
        "modules": modules,
        "kernels": [{"key": k.key, "module": k.module, "symbol": k.symbol, "adjoint": k.adjoint}
                    for k in recording.kernels],
        "regions": [
            {"nbytes": r.nbytes, "owned": r.owned, "saved_bytes": 0 if r.owned else r.nbytes,
             "dtype": r.array.dtype if r.array else None, "shape": list(r.array.shape) if r.array else None}
            for r in recording.regions
        ],
        "handles": [
            {"kind": h.kind, "arrays": {name: {**_ref(a.start), "dtype": a.dtype, "length": a.length}
                                        for name, a in h.arrays},
             "options": dict(h.options), "data_bytes": len(data or b"")}
            for h, data in zip(recording.handles, saved.volume_data)
        ],
        "bindings": [
            {"name": b.name, "kind": b.kind, "dtype": b.dtype, "shape": list(b.shape), "strides": list(b.strides),
             "region": b.region, "offset": b.offset, "nbytes": b.nbytes}
            for b in saved.bindings
        ],
        "scalar_params": _scalar_params(recording),
        "op_count": len(recording.ops),
        "op_counts": dict(sum((collections.Counter({op["kind"]: op["count"]}) for op in ops), collections.Counter())),
        "ops": ops,
    }


def _scalar_params(recording) -> list:
    """Each named scalar parameter: its type, saved value and how many launch arguments hold it."""
    slots: collections.Counter = collections.Counter()
    for op in rec.cpu_launches(recording.ops):
        slots.update(s.name for blob in (op.args, op.adj_args) if blob is not None for s in blob.params)
    found = []
    for p in recording.params:
        value = unpack(p, p.value)
        found.append({"name": p.name, "dtype": p.dtype, "value": value.tolist() if hasattr(value, "tolist") else value,
                      "nbytes": p.nbytes, "slots": slots[p.name]})
    return found


def _picture(args, saved) -> None:
    """``--dot`` / ``--png``: the graph as DOT (``apic.dot``), and through Graphviz as a PNG."""
    text = dot.to_dot(saved.recording, saved.bindings, title=os.path.basename(args.path))
    if args.dot:
        write_output(f"--dot {args.dot}", args.dot, text.encode("utf-8"))
    if args.png:
        with naming(f"--png {args.png}"):
            dot.render_png(text, args.png)


def _safe(value):
    """``value`` (inspect's plain data) with every string, dict keys included, passed through ``_escape``."""
    if isinstance(value, str):
        return _escape(value)
    if isinstance(value, dict):
        return {_safe(k): _safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_safe(v) for v in value]
    return value


def _where(ref: dict) -> str:
    return f"r{ref['region']}+{ref['offset']}"


def _launch_line(op: dict) -> str:
    adj = " (backward)" if "adj_args" in op else ""
    return (f"launch {op['name']}{adj} dim={tuple(op['dim'])} args={op['args']['bytes']} B "
            f"pointers={len(op['args']['relocs'])}")


def _handle_call_line(op: dict) -> str:
    radius = [] if op["radius"] is None else [f"radius={op['radius']}", "points"]
    return f"wp_{op['fn']}(handle {op['handle']}{''.join(', ' + str(a) for a in [*op['ints'], *radius])})"


def _fields_line(op: dict) -> str:
    """The line of a kind with no line of its own below: its name and fields."""
    fields = (f"{k}={_escape(str(v))}" for k, v in op.items() if k not in ("kind", "count", "first"))
    return " ".join([op["kind"], *fields])


_LINES = {  # op kind name -> (what _op made of an op) -> its line in the text view (else _fields_line)
    "launch": _launch_line,
    "cuda_launch": lambda op: (f"cuda_launch {op['name']} dim={tuple(op['dim'])} grid={tuple(op['grid'])} "
                               f"block={tuple(op['block'])} smem={op['smem']} params={op['params']['bytes']} B "
                               f"pointers={len(op['params']['relocs'])}"),
    "memcpy": lambda op: f"memcpy {_where(op['dst'])} <- {_where(op['src'])} {op['nbytes']} B",
    "memset": lambda op: f"memset {_where(op['dst'])} = {op['value']:#04x} x {op['nbytes']} B",
    "memtile": lambda op: f"memtile {_where(op['dst'])} {op['value_bytes']} B x {op['count']}",
    "array_copy": lambda op: f"array_copy elem {op['elem_size']} B (types {op['src_type']} -> {op['dst_type']})",
    "array_fill": lambda op: f"array_fill value {op['value_bytes']} B (type {op['array_type']})",
    "branch": lambda op: f"branch to {op['target']} if int32 at {_where(op['cond'])} is 0",
    "jump": lambda op: f"jump to {op['target']}",
    "native_call": lambda op: (
        f"wp_{op['fn']}({', '.join(_where(a) if isinstance(a, dict) else str(a) for a in op['args'])})"
    ),
    "handle_call": _handle_call_line,
    "alloc": lambda op: f"alloc {_where(op['dst'])} {op['nbytes']} B",
}


def _loads_here_line(loads_here: dict) -> str:
    if not loads_here["ok"]:
        return f"no: {loads_here['reason']}"
    if loads_here["through_source"]:
        return f"yes, from the modules' saved source, compiled here (the saved objects cannot run here: " \
               f"{loads_here['through_source']})"
    return "yes"


def _text(info: dict) -> str:
    """The text view; every string from the file is escaped first (a file cannot forge output lines)."""
    info = _safe(info)
    w, t = info["writer"], info["target"]
    lines = [
        f"{info['file']} ({info['file_size']:,} bytes)",
        f"  format: apic .wrp version {info['format_version']}",
        f"  written by: apic {w.get('apic')}, warp-lang {w.get('warp')}",
        f"  target: {t.get('system')} {t.get('machine')}, CPU {t.get('cpu')} ({len(t.get('features', []))} features)",
        f"  kernel ABI: {info['abi']}",
        *([f"  device: {info['device']['kind']} sm_{info['device']['arch']} ({info['device']['name']})"]
          if info.get("device") else []),
        "  loads here: " + _loads_here_line(info["loads_here"]),
        f"modules ({len(info['modules'])}):",
    ]
    for i, m in enumerate(info["modules"]):
        native = f" reads native {'/'.join(m['native_types'])}" if m["native_types"] else ""
        lines.append(f"  [{i}] {m['name']}: {m['file']} {m['size']:,} B "
                     f"sha256 {m['sha256'][:16]}... {m['status']}{native}")
    lines.append(f"kernels ({len(info['kernels'])}):")
    for i, k in enumerate(info["kernels"]):
        direction = "backward" if k["adjoint"] else "forward"
        lines.append(f"  [{i}] {k['key']} ({direction}, module {k['module']}) {k['symbol']}")
    total = sum(r["nbytes"] for r in info["regions"])
    saved = sum(r["saved_bytes"] for r in info["regions"])
    lines.append(f"regions ({len(info['regions'])}, {total:,} bytes, {saved:,} saved):")
    for i, r in enumerate(info["regions"]):
        what = f" {r['dtype']} {tuple(r['shape'])}" if r["dtype"] else ""
        lines.append(f"  [{i}] {r['nbytes']:,} B {'graph-owned' if r['owned'] else 'saved'}{what}")
    if info["handles"]:
        lines.append(f"handles ({len(info['handles'])}, rebuilt on load):")
        for i, h in enumerate(info["handles"]):
            arrays = ", ".join(f"{n} {a['dtype']}[{a['length']}] at {_where(a)}" for n, a in h["arrays"].items())
            options = ", ".join(f"{k}={v}" for k, v in h["options"].items())
            data = f" NanoVDB buffer {h['data_bytes']:,} B" if h["data_bytes"] else ""
            lines.append(f"  [{i}] {h['kind']}: {'; '.join(p for p in (arrays, options) if p)}{data}")
    lines.append(f"bindings ({len(info['bindings'])}):")
    for b in info["bindings"]:
        lines.append(f"  {b['name']}: {b['kind']} {b['dtype']} {tuple(b['shape'])} "
                     f"at r{b['region']}+{b['offset']} ({b['nbytes']:,} B)")
    if info["scalar_params"]:
        lines.append(f"scalar parameters ({len(info['scalar_params'])}, set with --set NAME=VALUE):")
        for p in info["scalar_params"]:
            lines.append(
                f"  {p['name']}: {p['dtype']} = {p['value']} (in {p['slots']} distinct launch argument blocks)"
            )
    counts = ", ".join(f"{k} {n}" for k, n in sorted(info["op_counts"].items()))
    lines.append(f"ops ({info['op_count']}{': ' + counts if counts else ''}; {len(info['ops'])} distinct):")
    for i, op in enumerate(info["ops"]):
        lines.append(f"  [{i}] x{op['count']} from position {op['first']}: {_LINES.get(op['kind'], _fields_line)(op)}")
    return "\n".join(lines)


def to_json(info: dict) -> str:
    """The JSON view: strict JSON (RFC 8259), ASCII only. A float JSON has no number for (a scalar
    parameter's NaN or infinity) is the string "nan", "inf" or "-inf"; integers are exact, whatever their
    size; every control and non-ASCII character is a JSON escape (``apic._text.json_text``)."""
    return json_text(info, indent=2)


def run(args) -> int:
    # Warp prints a banner to stdout when it initializes (a kept source compiled for "loads here" does):
    # quiet, so that stdout is the report alone (--json: one JSON document)
    _compat.quiet_warp()
    check_graph_path(args.path)
    for option, path in (("--dot", args.dot), ("--png", args.png)):
        if path is not None:
            check_output_path(f"{option} {path}", path)
    try:
        wrp_path, modules_dir, file_size, saved = _read(args.path)
    except OSError as error:  # FormatError is apic's: its message says what is wrong with the contents
        raise UserError(f"cannot read {error.filename or args.path}: {error.strerror or error}") from None
    info = _describe(wrp_path, modules_dir, file_size, saved)
    if args.dot or args.png:
        _picture(args, saved)
    print(to_json(info) if args.json else _text(info))
    return 0
