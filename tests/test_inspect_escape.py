"""``python -m apic inspect`` output cannot be forged (issue 11, item 9).

A file whose strings (writer, target, kernel keys and symbols, module names, binding names) hold
ESC sequences, CR, LF, NUL or bidi overrides prints them escaped in the text view; the JSON view
round-trips through ``json.loads`` and holds no raw control character.
"""

from __future__ import annotations

import json
import subprocess
import sys

import msgpack
import numpy as np
import pytest
import warp as wp

from apic.format import schema, writer
from persist_helpers import child_env

HOSTILE = "A\x1b[31mRED\x1b[0m\rFORGED\nline 2\x00nul\u202eevil\u2028sep\\x1b"
RAW = ("\x1b", "\r", "\x00", "\u202e", "\u2028")


@wp.kernel
def _scale(x: wp.array(dtype=float)):
    i = wp.tid()
    x[i] = x[i] * 2.0


def hostile_file(tmp_path):
    """A saved graph whose strings are rewritten to ``HOSTILE`` variants, with a valid header and SHA-256."""
    x = wp.array(np.arange(4, dtype=np.float32), device="cpu")
    with wp.ScopedCapture(device="cpu", apic=True) as cap:
        wp.launch(_scale, dim=4, inputs=[x], device="cpu")
    path = writer.save(cap.graph, str(tmp_path / "g"), inputs={"x": x})
    data = open(path, "rb").read()
    doc = msgpack.unpackb(data[schema.HEADER.size:], raw=False, strict_map_key=False)
    doc["writer"] = {k: HOSTILE if isinstance(v, str) else v for k, v in doc["writer"].items()}
    for key in ("system", "machine", "cpu"):
        if isinstance(doc["target"].get(key), str):
            doc["target"][key] = HOSTILE
    for kernel in doc["kernels"]:
        kernel["key"] = "k" + HOSTILE
    for module in doc["modules"]:
        module["name"] = "m" + HOSTILE
    for binding in doc["bindings"]:
        binding["name"] = "b" + HOSTILE
    with open(path, "wb") as f:
        f.write(writer.encode(doc))
    return path


def inspect(path, *flags):
    result = subprocess.run([sys.executable, "-m", "apic", "inspect", str(path), *flags], env=child_env(),
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout


def test_text_output_escapes_file_strings(tmp_path):
    out = inspect(hostile_file(tmp_path))
    for char in RAW:
        assert char not in out, f"raw {char!r} in the text output"
    assert "\\x1b[31mRED" in out and "\\x0d" in out and "\\x0a" in out and "\\x00" in out and "\\u202e" in out
    assert "\\\\x1b" in out, "a literal backslash in the file is itself escaped"
    # no line starts with the forged text: every line of the output comes from inspect itself
    assert not any(line.startswith(("FORGED", "line 2")) for line in out.splitlines())


def test_json_output_round_trips(tmp_path):
    out = inspect(hostile_file(tmp_path), "--json")
    for char in (*RAW, "\x0b", "\x7f"):
        assert char not in out
    info = json.loads(out)
    assert info["bindings"][0]["name"] == "b" + HOSTILE
    assert info["kernels"][0]["key"] == "k" + HOSTILE


def test_escape_covers_each_category():
    from apic.cli.inspect_wrp import _escape

    assert _escape("plain é ü") == "plain é ü"
    assert _escape("\x1b\r\n\x00\x7f\u202e\u2066\u2028\u2029\ud800") == (
        "\\x1b\\x0d\\x0a\\x00\\x7f\\u202e\\u2066\\u2028\\u2029\\ud800")
    assert _escape("\\") == "\\\\"
