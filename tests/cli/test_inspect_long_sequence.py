"""``inspect`` summarises by distinct op with counts, never expanding the sequence (issue 11, item 3).

A file whose op sequence repeats one op millions of times (4 bytes an entry) is described with one
entry and its count; inspect's own working set stays far below one entry per position.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import msgpack
import numpy as np
import pytest
import warp as wp

from apic.format import schema, writer
from persist_helpers import child_env

pytestmark = [pytest.mark.warp_version, pytest.mark.serial]

REPEATS = 2_000_000


def long_file(tmp_path) -> str:
    x = wp.zeros(16, dtype=float, device="cpu")
    with wp.ScopedCapture(device="cpu", apic=True) as cap:
        x.zero_()
    path = writer.save(cap.graph, str(tmp_path / "g"), outputs={"x": x})
    data = open(path, "rb").read()
    doc = msgpack.unpackb(data[schema.HEADER.size:], raw=False, strict_map_key=False)
    assert len(doc["ops"]) == 1
    doc["sequence"] = np.zeros(REPEATS, dtype="<u4").tobytes()
    with open(path, "wb") as f:
        f.write(writer.encode(doc))
    return path


CHILD = textwrap.dedent("""
    import json, resource, sys
    import warp as wp
    import apic
    from apic.format import reader
    from apic.cli import inspect_wrp
    wp.config.quiet = True
    reader.read(open(sys.argv[1], "rb").read())  # the reader's own working set, measured apart
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    info = inspect_wrp.describe(sys.argv[1])
    text = inspect_wrp._text(info)
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(json.dumps({"grew_kib": after - before, "ops": info["ops"], "op_count": info["op_count"],
                      "op_counts": info["op_counts"], "lines": len(text.splitlines())}))
""")


def test_long_sequence_is_summarised(tmp_path):
    path = long_file(tmp_path)
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    done = subprocess.run([sys.executable, str(script), path], env=child_env(), capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["op_count"] == REPEATS and report["op_counts"] == {"memset": REPEATS}
    assert len(report["ops"]) == 1 and report["ops"][0]["count"] == REPEATS and report["ops"][0]["first"] == 0
    assert report["lines"] < 100
    # one entry per position would be hundreds of bytes each (GBs here); the reader already holds the
    # sequence, so describing it must add far less than that
    assert report["grew_kib"] < 200 * 1024, report["grew_kib"]
