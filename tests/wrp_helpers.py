"""Helpers for tests that look inside or edit a saved graph: the shared ``.wrp`` document and saved-Sim code.

A ``.wrp`` file is a fixed header (``apic.format.schema.HEADER``) followed by a msgpack body; tests
decode the body to a dict (a *document*), edit it, and either write it back as a file or hand it
straight to the reader (``read_doc``), which validates it as a load would.
"""

from __future__ import annotations

import os

import msgpack
import warp as wp

from apic.format import reader, schema, writer


def unpack_body(data: bytes) -> dict:
    """The document of a whole ``.wrp`` file's bytes (its header skipped, not checked)."""
    return msgpack.unpackb(data[schema.HEADER.size :], raw=False)


def body_of(path) -> dict:
    """The document of the saved graph at ``path``: a ``.wrp`` file, or its stem (``<stem>.wrp``)."""
    path = os.fspath(path)
    if not path.endswith(".wrp"):
        path += ".wrp"
    with open(path, "rb") as f:
        return unpack_body(f.read())


def read_doc(doc: dict):
    """``doc`` encoded as a file and read back by the reader: a ``SavedGraph``, or the reader's error."""
    return reader.read(writer.encode(doc))


def save_sim(folder, name: str = "sim"):
    """Capture ``persist_kernels.Sim(0)`` (never replayed) and save it, inputs and outputs bound, as
    ``folder/<name>``; return that stem (a ``pathlib.Path`` when ``folder`` is one)."""
    import persist_kernels as pk

    sim = pk.Sim(0)
    stem = folder / name if hasattr(folder, "joinpath") else os.path.join(folder, name)
    wp.capture_save(pk.capture(sim), str(stem), inputs=sim.inputs(), outputs=sim.outputs())
    return stem
