"""The fuzzer's reach into the fast reading of launches alike (``apic.format.read_raw``) and into the
parallel-safety claims a load takes from the module files (``apic.format.sealed_claims``).

* ``save_alike``: a seed of many launches of one splittable kernel that differ in a scalar, so that the
  reader's raw templates and the kernel manifest's sealed claims are in play;
* ``raw_alike``: the seed's ``ops`` re-encoded entry by entry in ways msgpack reads as the same or another
  map (longer length headers for ``args.data``, maps and integers, unknown keys holding a copy of a
  launch's argument bytes, later entries that differ only inside that copy), header re-sealed;
* ``claim_edit``: a kernel's ``split_writes`` / ``split_world`` / ``tiles`` forged, cleared or swapped;
* ``one_reading``: the oracle run on every input in the parent: apic's reader with its fast path and with
  every op entry unpacked must give the same graph, or both refuse the file;
* ``claim_problem``: the oracle on what the worker loaded: every claim a loaded kernel keeps is the one
  its seed sealed.
"""

from __future__ import annotations

import os
import random
import struct

import msgpack
import numpy as np
import warp as wp

import apic  # noqa: F401  (installs the capture shims)

LAUNCHES = 24


@wp.kernel
def _blend(src: wp.array(dtype=float), dst: wp.array(dtype=float), s: float):
    i = wp.tid()
    dst[i] = src[i] * 0.5 + dst[i] * 0.25 + s


def save_alike(folder: str) -> str:
    """Capture and save the seed ``alike``: LAUNCHES launches of one kernel, each with its own scalar."""
    cpu = "cpu"
    src = wp.array(np.arange(64, dtype=np.float32), device=cpu)
    dst = wp.zeros(64, dtype=float, device=cpu)
    wp.launch(_blend, dim=64, inputs=[src, dst, 0.0], device=cpu)  # compiled outside the capture
    with wp.ScopedCapture(device=cpu, apic=True) as cap:
        for i in range(LAUNCHES):
            wp.launch(_blend, dim=64, inputs=[src, dst, 0.125 * i], device=cpu)
    # without its source: an edit that refuses the object would compile the source (seconds: a "hang")
    wp.capture_save(cap.graph, os.path.join(folder, "alike"), inputs={"src": src}, outputs={"dst": dst})
    return os.path.join(folder, "alike.wrp")


# --- hand-written msgpack ---------------------------------------------------------------------------------
def _map_head(n: int, wide: bool) -> bytes:
    """A msgpack map header for ``n`` pairs: the shortest, or (``wide``) a 16- or 32-bit one."""
    if n < 16 and not wide:
        return bytes([0x80 | n])
    return b"\xde" + struct.pack(">H", n) if n < 1 << 16 else b"\xdf" + struct.pack(">I", n)


def _bin(data: bytes, width: int) -> bytes:
    """``data`` as msgpack bin with a header of ``width`` (8, 16 or 32) bits, shortest or not."""
    if width == 8 and len(data) < 256:
        return b"\xc4" + bytes([len(data)]) + data
    if width <= 16 and len(data) < 1 << 16:
        return b"\xc5" + struct.pack(">H", len(data)) + data
    return b"\xc6" + struct.pack(">I", len(data)) + data


def _int(value: int, rng) -> bytes:
    """``value`` (non-negative) in the shortest encoding or a longer one."""
    if value >= 0 and rng.random() < 0.5:
        return rng.choice((b"\xcd" + struct.pack(">H", value) if value < 1 << 16 else None,
                           b"\xce" + struct.pack(">I", value) if value < 1 << 32 else None,
                           b"\xcf" + struct.pack(">Q", value))) or msgpack.packb(value)
    return msgpack.packb(value)


def _pack(value, rng, odd: float) -> bytes:
    """``value`` packed, each node in a longer encoding with probability ``odd``."""
    if isinstance(value, dict):
        head = _map_head(len(value), rng.random() < odd)
        return head + b"".join(msgpack.packb(k) + _pack(v, rng, odd) for k, v in value.items())
    if isinstance(value, bytes):
        return _bin(value, rng.choice((16, 32)) if rng.random() < odd else 8)
    if type(value) is int and value >= 0 and rng.random() < odd:
        return _int(value, rng)
    return msgpack.packb(value, use_bin_type=True)


def _entry(op: dict, rng, odd: float, extra: bytes | None, data: bytes | None = None) -> bytes:
    """Launch ``op`` packed by hand: nodes longer with probability ``odd``, an unknown key ``zz`` holding
    ``extra`` (shortest bin) if given, ``args.data`` replaced by ``data`` if given."""
    if data is not None:
        op = {**op, "args": {**op["args"], "data": data}}
    items = [(k, _pack(v, rng, odd)) for k, v in op.items()]
    if extra is not None:
        items.insert(rng.randrange(len(items) + 1), ("zz", msgpack.packb(extra, use_bin_type=True)))
    return _map_head(len(items), rng.random() < odd) + b"".join(msgpack.packb(k) + v for k, v in items)


def _body(doc: dict, entries: list[bytes]) -> bytes:
    """The body of ``doc`` with its ``ops`` array written as ``entries`` (raw msgpack)."""
    out = [_map_head(len(doc), False)]
    for key, value in doc.items():
        out.append(msgpack.packb(key))
        if key == "ops":
            n = len(entries)
            out.append((bytes([0x90 | n]) if n < 16 else b"\xdc" + struct.pack(">H", n)) + b"".join(entries))
        else:
            out.append(msgpack.packb(value, use_bin_type=True))
    return b"".join(out)


def raw_alike(rng, doc: dict, seal) -> bytes:
    """One input: ``doc``'s launches re-encoded (see the module docstring), sealed by ``seal(body)``."""
    launches = [i for i, op in enumerate(doc["ops"]) if isinstance(op, dict) and isinstance(op.get("args"), dict)
                and isinstance(op["args"].get("data"), bytes)]
    if not launches:
        raise ValueError("no launch to re-encode")
    odd = rng.choice((0.0, 0.1, 0.5, 1.0))
    form = rng.randrange(4)
    # every launch encoded alike (the same draws for each), so that later entries match a raw template
    encoding = rng.randrange(1 << 30)
    if rng.random() < 0.75:
        rng = random.Random(encoding)
        reset = lambda: rng.seed(encoding)  # noqa: E731
    else:
        reset = lambda: None  # noqa: E731
    first = doc["ops"][launches[0]]["args"]["data"]
    entries = []
    for i, op in enumerate(doc["ops"]):
        reset()
        if i not in launches:
            entries.append(msgpack.packb(op, use_bin_type=True))
        elif form == 0:  # longer headers only
            entries.append(_entry(op, rng, odd, None))
        elif form == 1:  # each launch shows the first's argument bytes and hides its own in an unknown key
            entries.append(_entry(op, rng, odd, op["args"]["data"], first))
        elif form == 2:  # an unknown key with a copy of its own argument bytes
            entries.append(_entry(op, rng, odd, op["args"]["data"]))
        else:  # canonical, but an unknown key with the first launch's bytes on some
            entries.append(_entry(op, rng, 0.0, first if rng.random() < 0.5 else None))
    return seal(_body(doc, entries))


# --- split claims ---------------------------------------------------------------------------------------------
def claim_edit(rng, doc: dict) -> list[dict]:
    """Recipe edits that forge, clear or swap a kernel's parallel-replay claim."""
    kernels = doc.get("kernels") or []
    if not kernels:
        raise ValueError("no kernel")
    k = rng.randrange(len(kernels))
    offsets = sorted({slot[0] for op in doc["ops"] if isinstance(op, dict) and op.get("kernel") == k
                      and isinstance(op.get("args"), dict) for slot in op["args"].get("arrays", [])
                      if isinstance(slot, list) and slot and type(slot[0]) is int})
    pick = sorted(rng.sample(offsets, rng.randint(1, len(offsets)))) if offsets else [0]
    form = rng.randrange(5)
    path = ["kernels", k]
    cleared = [{"op": "del", "path": path + [key]} for key in ("split_writes", "split_world") if key in kernels[k]]
    if form == 0:
        return [{"op": "set", "path": path + ["split_writes"], "value": pick}]
    if form == 1:
        world = {"writes": pick[-1:], "rows": offsets or pick, "tiles": rng.random() < 0.5}
        return cleared + [{"op": "set", "path": path + ["split_world"], "value": world}]
    if form == 2:
        if not cleared:
            raise ValueError("no claim to clear")
        return cleared
    if form == 3:
        return [{"op": "set", "path": path + ["split_writes"], "value": pick[:-1] or [pick[0] + 8]}]
    other = rng.randrange(len(kernels))  # another kernel's claim (or none)
    return [{"op": "set", "path": path + [key], "value": kernels[other][key]}
            for key in ("split_writes", "split_world") if key in kernels[other]] or \
        [{"op": "set", "path": path + ["split_writes"], "value": pick}]


def sealed_claims_of(paths: dict) -> dict:
    """symbol -> claim ``[writes, world rows or None, tiles]`` of every kernel of the (honest) seeds."""
    from apic.format import reader

    claims = {}
    for path in paths.values():
        with open(path, "rb") as f:
            saved = reader.read(f.read())
        for k in saved.recording.kernels:
            if k.split_writes is not None:
                claims[k.symbol] = claim_of(k)
    return claims


def claim_of(kernel) -> list:
    return [list(kernel.split_writes), None if kernel.split_world is None else list(kernel.split_world),
            bool(kernel.split_tiles)]


def claim_problem(loaded: list, sealed: dict) -> str | None:
    """What is wrong with the claims the worker's loaded graph keeps (``[symbol, claim or None]`` each)."""
    for symbol, claim in loaded or ():
        if claim is not None and sealed.get(symbol) != claim:
            return f"a loaded kernel {symbol} keeps the split claim {claim}, not the sealed {sealed.get(symbol)}"
    return None


# --- one reading ---------------------------------------------------------------------------------------------
def one_reading(data: bytes) -> str | None:
    """None where apic's reader gives one graph for ``data``: its fast path (raw templates) and a reading
    that unpacks every op entry agree, or both refuse; else what differs."""
    from apic.errors import ApicError
    from apic.format import reader

    def read(split: bool):
        saved_split = reader._split
        if not split:
            reader._split = lambda body, options: None  # the whole body unpacked: no raw templates
        try:
            return reader.read(data).recording
        except ApicError as error:
            return type(error).__name__
        except Exception as error:  # noqa: BLE001 - the worker reports it as a bug
            return f"{type(error).__name__} (not apic's)"
        finally:
            reader._split = saved_split

    fast, full = read(True), read(False)
    if isinstance(fast, str) or isinstance(full, str):
        if isinstance(fast, str) and isinstance(full, str):
            return None
        return f"fast: {_short(fast)}; full: {_short(full)}"
    if fast.ops != full.ops or fast.kernels != full.kernels:
        differ = [i for i, (a, b) in enumerate(zip(fast.ops, full.ops)) if a != b]
        return f"the fast and the full reading differ in {len(differ)} op(s), first at {differ[:1]}"
    return None


def _short(value) -> str:
    return value if isinstance(value, str) else "a graph"
