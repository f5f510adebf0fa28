"""Reading the ``ops`` of a ``.wrp`` from their msgpack bytes (``apic.format.reader`` delimits the entries
without unpacking them): a launch whose entry bytes are those of one read and checked before, but for its
argument bytes, is read alike it without being unpacked; every other entry is unpacked with every check and
read by ``apic.format.read_ops``."""

from __future__ import annotations

import msgpack

from apic.format.read_context import Context
from apic.format.read_ops import launch_alike, launch_template, read_ops
from apic.record import ops as rec

_RAW_TRIAL = 64  # entries read_raw_ops reads before it unpacks the rest at once if most were not alike


def read_raw_ops(buf: bytes, bounds: list, unpack, ctx: Context, kernels, target, abi: str) -> list:
    """The ops of the file's ``ops`` array, each entry ``buf[bounds[i]:bounds[i + 1]]`` (msgpack bytes not yet
    unpacked; ``unpack(data, count=None)`` unpacks one, or the list of the ``count`` in ``data``, as the whole
    body is, with every check of ``apic.format.reader``), as ``read_ops`` reads them.

    A forward launch read (or read alike) from unpacked bytes leaves a raw template: its bytes before and
    after its argument bytes (those of the msgpack ``bin`` in ``args.data``). A later entry of the same
    length whose bytes are those but for the argument bytes is that launch with other arguments: the same
    map (same keys once each, same values of the same types), so read as ``read_ops`` reads a launch alike
    (its descriptor bytes compared, its parameters checked), without unpacking it. Any other entry, or one
    whose descriptors differ, is unpacked and read by ``read_ops``."""
    ops = []
    append = ops.append
    # (entry length, where its argument bytes start) -> {the bytes before them: (the argument bytes' length,
    # {the bytes after them: (the entry's checked_launches value, its args map)})}
    templates: dict = {}
    starts: dict = {}  # entry length -> where the argument bytes start in the templates of that length
    misses = 0
    for i in range(len(bounds) - 1):
        begin, end = bounds[i], bounds[i + 1]
        for at in starts.get(end - begin, ()):
            found = templates[(end - begin, at)].get(buf[begin : begin + at])
            if found is not None:  # (the bytes before the argument bytes hold their length)
                size, after = found
                found = after.get(buf[begin + at + size : end])
            if found is not None:
                known, args = found
                op = launch_alike(known, args, buf[begin + at : begin + at + size], ctx, i)
                if op is not None:
                    append(op)
                    break
        else:  # no template matched (or its descriptors differ): unpacked and read in full
            misses += 1
            if i >= _RAW_TRIAL and 2 * misses > i:  # few launches alike: the rest unpacked at once, read by read_ops
                ops += read_ops(unpack(buf[begin : bounds[-1]], len(bounds) - 1 - i), ctx, kernels, target, abi, i)
                break
            entry = unpack(buf[begin:end])
            op = read_ops([entry], ctx, kernels, target, abi, i)[0]
            append(op)
            if rec.is_cpu_launch(op) and op.adj_args is None:
                _add_raw_template(templates, starts, buf[begin:end], entry, ctx)
    return ops


def _add_raw_template(templates: dict, starts: dict, raw: bytes, entry: dict, ctx: Context) -> None:
    """Keep what ``read_raw_ops`` compares a later entry with, of a launch ``entry`` (``raw``, its bytes) read
    valid; nothing where ``raw`` is not ``entry``'s canonical msgpack or its argument bytes are not found
    once in it as msgpack ``bin`` (the shortest header)."""
    template = launch_template(entry)
    known = None if template is None else ctx.checked_launches.get(template)
    if known is None:
        return
    # Byte equality must mean map equality. msgpack parses left to right, so a later entry equal to ``raw``
    # but for ``raw[at:at + size]`` is ``entry`` with other argument bytes exactly when those bytes are the
    # payload of ``args.data``. In the canonical encoding (shortest headers, as apic writes) that payload
    # follows its shortest bin header, and where ``packed`` occurs once in ``raw`` (overlaps counted) that
    # occurrence is it. A non-canonical entry (a longer header, an unknown key holding a copy of the bytes,
    # a float32) could place those bytes elsewhere: it gets no template, and its likes are read in full.
    if msgpack.packb(entry, use_bin_type=True) != raw:
        return
    data = entry["args"]["data"]
    size = len(data)
    packed = msgpack.packb(data, use_bin_type=True)  # the shortest bin header, then the bytes
    first = raw.find(packed)
    if first < 0 or raw.find(packed, first + 1) >= 0:
        return
    at = first + len(packed) - size
    after = templates.setdefault((len(raw), at), {}).setdefault(raw[:at], (size, {}))[1]
    after.setdefault(raw[at + size :], (known, entry["args"]))
    if at not in starts.setdefault(len(raw), []):
        starts[len(raw)].append(at)
