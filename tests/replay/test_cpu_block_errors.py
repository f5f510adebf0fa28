"""A cooperative-block kernel that Warp cannot run stops a replay with ``apic.ReplayError`` (issue 33, leftovers).

Warp 1.19 runs a ``block_dim > 1`` CPU launch (``wp.config.enable_cpu_blocks``) as cooperative lanes on
fibers, each with a 1 MiB stack from a per-thread pool; where the pool cannot grow, the kernel returns
early and Warp leaves the reason in ``wp_take_cpu_block_error``, which eager ``wp.launch`` raises. A replay
reads it after the run (``Graph.launch``, ``apic.profile``). Here a fresh process loads a saved block graph
and replays it under an address-space limit too small for the lanes' stacks (a real allocation failure,
no stand-in): the replay raises ``ReplayError`` with Warp's reason, as eager Warp raises it under the same
limit; with the limit lifted, a fresh load replays as eager did, bit for bit.
"""

from __future__ import annotations

import json
import sys
import textwrap

import numpy as np
import pytest
import warp as wp

from apic import _compat
import fork_server
from persist_helpers import child_env

HAS_CPU_BLOCKS = hasattr(wp.config, "enable_cpu_blocks") and _compat.invoke_cpu_blocks is not None
pytestmark = pytest.mark.skipif(not HAS_CPU_BLOCKS, reason="this warp-lang runs CPU kernels one lane per block")
pytestmark = [pytestmark, pytest.mark.warp_version, pytest.mark.interpreter]

BLOCK = 256  # lanes per block: 256 MiB of fiber stacks, far more than the limit leaves
N = 4 * BLOCK
HEADROOM = 96 << 20  # bytes of address space the child may still map once the graph is loaded

CHILD = textwrap.dedent(
    """
    import json, os, resource, sys
    import warp as wp
    wp.config.quiet = True
    import apic
    from apic.replay import program
    path, how = sys.argv[1], sys.argv[2]
    graph = wp.capture_load(path)
    program.native_replay()  # the interpreter is loaded before the limit (it maps its own code)
    if how == "profile":
        apic.profile(graph, replays=0)  # likewise the profiled one (Numba compiles it): no op runs
    def mapped():
        with open("/proc/self/status") as f:
            return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmSize:"))
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    resource.setrlimit(resource.RLIMIT_AS, (mapped() + int(sys.argv[3]), hard))
    try:
        if how == "profile":
            apic.profile(graph, replays=1)
        else:
            wp.capture_launch(graph)
        outcome = {"raised": None}
    except Exception as error:
        outcome = {"raised": type(error).__name__, "message": str(error)}
    resource.setrlimit(resource.RLIMIT_AS, (hard, hard))
    fresh = wp.capture_load(path)
    wp.capture_launch(fresh)
    outcome["y"] = fresh.param_numpy("y").tobytes().hex()
    print(json.dumps(outcome))
    """
)


@wp.kernel
def _lanes(x: wp.array(dtype=float), y: wp.array(dtype=float)):
    i = wp.tid()
    v = x[i] + 0.0  # a value, not a reference into x
    s = wp.tile_sum(wp.tile(v))
    y[i] = y[i] + wp.tile_extract(s, 0) * 0.125 + v


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    folder = tmp_path_factory.mktemp("cpu_blocks")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(wp.config, "enable_cpu_blocks", True)
        x = wp.array(np.linspace(-1, 1, N, dtype=np.float32), dtype=float, device="cpu")
        y = wp.zeros(N, dtype=float, device="cpu")
        with wp.ScopedCapture(device="cpu", apic=True) as capture:
            wp.launch(_lanes, dim=N, inputs=[x, y], block_dim=BLOCK, device="cpu")
        path = str(folder / "g")
        wp.capture_save(capture.graph, path, outputs={"y": y})
        wp.launch(_lanes, dim=N, inputs=[x, y], block_dim=BLOCK, device="cpu")
    return path, y.numpy()


@pytest.mark.parametrize("replay, how", [("numba", "launch"), ("reference", "launch"), ("numba", "profile")])
def test_a_block_launch_warp_cannot_run_raises_replay_error(saved, tmp_path, replay, how):
    path, eager = saved
    env = {**child_env(), "APIC_REPLAY": replay}
    done = fork_server.run([sys.executable, "-c", CHILD, path, how, str(HEADROOM)], env=env, capture_output=True,
                           text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    outcome = json.loads(done.stdout.strip().splitlines()[-1])
    assert outcome["raised"] == "ReplayError", outcome
    assert outcome["message"].startswith("Error replaying a CPU graph with cooperative-block kernels: Warp failed to "
                                         "allocate"), outcome["message"]
    assert bytes.fromhex(outcome["y"]) == eager.tobytes()


def test_eager_warp_fails_the_same_way_under_the_limit(tmp_path):
    """The premise: the limit makes Warp's own block launch fail, so the replay's error is Warp's."""
    code = textwrap.dedent(
        f"""
        import resource, sys
        import numpy as np
        import warp as wp
        wp.config.quiet = True
        wp.config.enable_cpu_blocks = True
        @wp.kernel
        def lanes(x: wp.array(dtype=float)):
            i = wp.tid()
            v = x[i] + 0.0
            s = wp.tile_sum(wp.tile(v))
            x[i] = wp.tile_extract(s, 0)
        x = wp.ones({N}, dtype=float, device="cpu")
        wp.load_module(device="cpu")
        with open("/proc/self/status") as f:
            mapped = next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmSize:"))
        _, hard = resource.getrlimit(resource.RLIMIT_AS)
        resource.setrlimit(resource.RLIMIT_AS, (mapped + {HEADROOM}, hard))
        try:
            wp.launch(lanes, dim={N}, inputs=[x], block_dim={BLOCK}, device="cpu")
            print("ran")
        except Exception as error:
            print(type(error).__name__, error)
        """
    )
    script = tmp_path / "eager_blocks.py"  # Warp reads a kernel's source from its file
    script.write_text(code)
    done = fork_server.run([sys.executable, str(script)], env=child_env(), capture_output=True, text=True,
                           timeout=600)
    assert "failed to allocate" in done.stdout, (done.stdout, done.stderr[-2000:])
