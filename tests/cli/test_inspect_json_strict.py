"""``python -m apic inspect --json`` is strict JSON (RFC 8259) whatever the graph holds.

A float JSON has no number for (NaN, +inf, -inf in a named scalar parameter, in a vector's components)
is written as the string "nan", "inf" or "-inf"; integers stay exact at any size (uint64 max, int64
min); bytes become a hex string; and nothing but the document reaches stdout, even when ``inspect``
compiles a kept source and Warp initializes (its banner went to stdout).
"""

from __future__ import annotations

import json
import math
import sys

import numpy as np
import pytest

import fork_server
import cli_kernels as ck
from apic._text import json_text, plain
from persist_helpers import child_env, rewrite_wrp, wrp_body

pytestmark = [pytest.mark.once]

INF, NAN = math.inf, math.nan


def strict(text: str):
    """``json.loads`` that refuses what RFC 8259 does not allow (NaN, Infinity, -Infinity)."""

    def refuse(name):
        raise ValueError(f"not strict JSON: {name}")

    return json.loads(text, parse_constant=refuse)


def inspect(path, *flags) -> str:
    done = fork_server.run([sys.executable, "-m", "apic", "inspect", str(path), *flags], env=child_env(),
                           capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_inspect_json_is_strict_for_every_value(tmp_path):
    plain_file = ck.save(str(tmp_path / "g"), dt=NAN, d=-INF, h=INF, small=-(2**63), big=2**64 - 1,
                         g=(NAN, INF, -INF), m=((1.0, -0.0), (NAN, 3.0e38)))
    info = strict(inspect(plain_file, "--json"))
    values = {p["name"]: p["value"] for p in info["scalar_params"]}
    assert values["dt"] == "nan" and values["d"] == "-inf" and values["h"] == "inf"
    assert values["g"] == ["nan", "inf", "-inf"] and values["m"] == [[1.0, -0.0], ["nan", float(np.float32(3.0e38))]]
    assert values["big"] == 2**64 - 1 and values["small"] == -(2**63)  # exact, not rounded through a float
    assert values["n"] == 3 and values["flag"] is True
    text = inspect(plain_file)
    assert "  dt: float32 = nan " in text and "  g: vec3f = [nan, inf, -inf] " in text

    # saved objects this CPU "lacks" (a feature added to the file): inspect compiles the kept source to say
    # whether it loads here, which initializes Warp; stdout must still be the JSON document alone
    stem = str(tmp_path / "src")
    ck.save(stem, source_fallback=True, dt=INF)
    body = wrp_body(stem)
    body["target"]["features"] = [*body["target"]["features"], "amx-tile"]
    rewrite_wrp(stem, body)
    info = strict(inspect(stem + ".wrp", "--json"))
    assert info["loads_here"]["ok"] and "amx-tile" in info["loads_here"]["through_source"]
    assert {p["name"]: p["value"] for p in info["scalar_params"]}["dt"] == "inf"

    # every other kind of value the JSON view may meet
    value = {"f": [NAN, INF, -INF, np.float32(NAN), np.float16(-INF), 1e308],
             "i": [2**200, -(2**64), np.uint64(2**64 - 1)],
             "b": b"\x00\xff", "t": (1, (2,)), "a": np.array([[NAN, 1.0]]), 3: "int key", NAN: "nan key",
             b"\x01": "bytes key", None: None, True: False}
    assert strict(json_text(value)) == {
        "f": ["nan", "inf", "-inf", "nan", "-inf", 1e308], "i": [2**200, -(2**64), 2**64 - 1], "b": "00ff",
        "t": [1, [2]], "a": [["nan", 1.0]], "3": "int key", "nan": "nan key", "01": "bytes key", "null": None,
        "true": False}
    assert plain("x\x1b") == "x\x1b" and "\x1b" not in json_text("x\x1b")  # JSON escapes, never a raw ESC
