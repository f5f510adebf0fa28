"""A graph that repeats its steps stores each distinct op once, and still replays exactly."""

import msgpack
import numpy as np
import pytest
import warp as wp

from apic.demo import Chain
from apic.format import schema

pytestmark = [pytest.mark.warp_version, pytest.mark.interpreter]

FRAMES = 5


def test_repeated_steps_are_stored_once_and_replay_exactly(tmp_path):
    eager, captured = Chain(16, 2), Chain(16, 2)
    with wp.ScopedCapture(device="cpu", apic=True) as capture:
        for _ in range(FRAMES):
            captured.step()
    wp.capture_save(capture.graph, str(tmp_path / "chain"), outputs={"x": captured.x, "v": captured.v})

    body = (tmp_path / "chain.wrp").read_bytes()[schema.HEADER.size :]
    doc = msgpack.unpackb(body, raw=False)
    sequence = np.frombuffer(doc["sequence"], dtype="<u4")
    assert len(sequence) == FRAMES * captured.ops_per_step()
    assert len(doc["ops"]) <= captured.ops_per_step()  # later frames repeat the first one's ops

    loaded = wp.capture_load(str(tmp_path / "chain"), device="cpu")
    for _ in range(2):
        for _ in range(FRAMES):
            eager.step()
        wp.capture_launch(loaded)
        for name in ("x", "v"):
            out = wp.empty_like(getattr(eager, name))
            loaded.get_param(name, out)
            assert np.array_equal(out.numpy().view(np.uint32), getattr(eager, name).numpy().view(np.uint32))
