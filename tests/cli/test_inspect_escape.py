"""``python -m apic inspect`` output cannot be forged (issue 11, item 9).

A file whose strings (writer, target, kernel keys and symbols, module names, binding names) hold
ESC sequences, CR, LF, NUL or bidi overrides prints them escaped in the text view; the JSON view
round-trips through ``json.loads`` and holds no raw control character.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys

import msgpack
import numpy as np
import pytest
import warp as wp

from apic.format import schema, writer
import fork_server
from persist_helpers import child_env

pytestmark = [pytest.mark.warp_version]

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
    result = fork_server.run([sys.executable, "-m", "apic", "inspect", str(path), *flags], env=child_env(),
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


# --- every path from a string in the file to the CLI's text output (issue 22) -------------------------
# Every kind of character that can end a line or drive a terminal: ESC sequences, CR, LF, NUL, NEL, VT,
# FF, the Unicode line and paragraph separators, a bidi override; and a literal backslash.
FORGE = "A\x1b[31mRED\x1b[0m\rFORGED\nline 2\x00nul\x85nel\x0bvt\x0cff\x1crs\u2028ls\u2029ps\u202eevil\\x1b"


def _unsafe(text: str) -> list[str]:
    """The characters of ``text``, line ends aside, that a terminal or a line reader could act on."""
    import unicodedata

    return sorted({c for c in text if c != "\n" and unicodedata.category(c) in ("Cc", "Cf", "Zl", "Zp")})


def _hostile_copy(stem: str, fields: set[str]) -> None:
    """Rewrite the strings of the saved graph ``stem`` named by ``fields`` to ``FORGE`` variants."""
    from persist_helpers import rewrite_wrp, wrp_body

    body = wrp_body(stem)
    if "writer" in fields:
        body["writer"] = {key: FORGE for key in body["writer"]}
    if "target" in fields:
        body["target"].update({key: FORGE for key in ("system", "machine", "cpu", "byteorder")})
        body["target"]["features"] = [*body["target"]["features"], FORGE]
    for kernel in body["kernels"] if "kernels" in fields else ():
        kernel["key"] = "k" + FORGE
    for module in body["modules"] if "modules" in fields else ():
        module["name"], module["native_types"] = "m" + FORGE, ["t" + FORGE]
    for binding in body["bindings"] if "bindings" in fields else ():  # arrays and named scalar parameters
        binding["name"] = binding["name"] + FORGE
        binding["dtype"] = binding["dtype"] + FORGE
    for region in body["regions"] if "regions" in fields else ():
        if region.get("array"):
            region["array"]["dtype"] = region["array"]["dtype"] + FORGE
    if "param_value" in fields:  # a value the launch does not hold: the reader's refusal quotes the name
        scalar = next(b for b in body["bindings"] if b["kind"] == "scalar")
        scalar["value"] = bytes(len(scalar["value"]))
    rewrite_wrp(stem, body)


def _cli(*args) -> subprocess.CompletedProcess:
    return fork_server.run([sys.executable, "-m", "apic", *map(str, args)], env=child_env(), capture_output=True,
                           text=True, timeout=300)


def _lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if not line.startswith("Warp CUDA")]  # Warp's own, no GPU


def test_file_strings_cannot_forge_any_line_of_the_cli(tmp_path):
    """Every string of the file (writer, target, kernel keys, module names and native types, binding and
    scalar parameter names and dtypes, region dtypes), in every text the CLI prints: inspect's report
    (including "loads here: no: <reason>", which quotes the file's target), replay's error lines (which
    list the file's parameter names), replay --profile's table (kernel keys), and the error line of a file
    the reader refuses, quoting a parameter name."""
    import cli_kernels as ck

    everything = {"writer", "target", "kernels", "modules", "bindings", "regions"}
    stems = {name: str(tmp_path / name) for name in ("clean", "all", "loads", "refused")}
    for stem in stems.values():
        ck.save(stem)
    clean = _cli("inspect", stems["clean"] + ".wrp")
    _hostile_copy(stems["all"], everything)
    _hostile_copy(stems["loads"], {"kernels", "modules", "bindings"})
    _hostile_copy(stems["refused"], {"bindings", "param_value"})

    report = _cli("inspect", stems["all"] + ".wrp")
    assert report.returncode == 0, report.stderr
    out = report.stdout
    # as many lines as the honest file's report, each from inspect itself, and nothing raw
    assert len(out.split("\n")) == len(out.splitlines()) + 1 == len(clean.stdout.split("\n"))
    assert _unsafe(out) == []
    assert "  loads here: no: " in out and "different operating system (A\\x1b[31mRED" in out
    assert out.count("\\x0aline 2") >= 20, "each hostile string shows, escaped"
    assert "\\x85nel\\x0bvt\\x0cff\\x1crs\\u2028ls\\u2029ps\\u202eevil\\\\x1b" in out

    profile = _cli("replay", stems["loads"] + ".wrp", "--profile")
    assert profile.returncode == 0, profile.stderr
    assert len(profile.stdout.splitlines()) == 4 == len(profile.stdout.split("\n")) - 1  # head, rule, row, total
    assert _unsafe(profile.stdout) == [] and "launch       kA\\x1b[31mRED" in profile.stdout

    for args in (["replay", stems["loads"] + ".wrp", "--input", f"nope={tmp_path}/x.npy"],
                 ["replay", stems["loads"] + ".wrp", "--set", "nope=1"],
                 ["replay", stems["refused"] + ".wrp"],
                 ["inspect", stems["refused"] + ".wrp"]):
        done = _cli(*args)
        lines = _lines(done.stderr)
        assert done.returncode == 2 and len(lines) == 1 and lines[0].startswith("error: "), (args, done.stderr)
        # the name shows, escaped (by repr where the message quotes a name, else by the CLI's error line)
        assert re.search(r"FORGED\\(x0a|n)line 2", lines[0]) and _unsafe(done.stderr) == [], (args, done.stderr)
