"""Where the issue time of a loaded CUDA graph goes: three more methods for ``benchmarks/cuda_replay.py``.

On an H200 (2026-11-28), a loaded graph of 1,000 launches took 6.0 us to issue with apic and 5.5 us with Warp's
native APIC, against 3.5 us for Warp's own captured graph. Warp's APIC and Warp's own graph both issue through
``wp_cuda_graph_launch``, so most of that gap is not in the Python of either. These three methods measure the
rest on the same card, in the same run:

* ``apic exec, ctypes``: apic's instantiated graph launched with one ctypes call of ``cuGraphLaunch`` on the
  graph's stream (no apic Python; set against ``apic loaded, graph`` it gives apic's own share);
* ``apic exec, ctypes, Warp's stream``: the same on the stream Warp's own graph is launched on;
* ``apic plan, captured exec``: the same plan built by stream capture (the loaded graph replayed op by op into a
  capture on a stream of its own, as a replay inside a caller's capture does), instantiated, launched the same
  way (set against the above it says whether a graph built node by node issues slower than a captured one).
"""

from __future__ import annotations

import ctypes

from apic.targets.cuda import DRIVER_LIBRARY
from benchmarks.cuda_methods import Method, read_counter


def issue_path_methods(stem: str, device: str, like) -> list[Method]:
    """The three methods, each on a graph loaded from ``stem`` (its own memory); ``like``: the counter's array."""
    import warp as wp

    lib = ctypes.CDLL(DRIVER_LIBRARY)
    lib.cuGraphLaunch.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
    found = []

    loaded = wp.capture_load(stem, device=device)
    exec_, stream = int(loaded._resources.exec), int(loaded._resources.stream)
    loaded._cu("cuCtxSetCurrent", loaded._resources.context)  # the calls below need it current, as the rows do
    found.append(Method("apic exec, ctypes", lambda: _check(lib.cuGraphLaunch(exec_, stream)),
                        lambda g=loaded: read_counter(g, "x", like)))
    on_warps = wp.capture_load(stem, device=device)
    warp_stream = int(wp.get_device(device).stream.cuda_stream)
    other_exec = int(on_warps._resources.exec)
    found.append(Method("apic exec, ctypes, Warp's stream", lambda: _check(lib.cuGraphLaunch(other_exec, warp_stream)),
                        lambda g=on_warps: read_counter(g, "x", like)))

    captured = wp.capture_load(stem, device=device)
    cu, driver = captured._cu, captured._cu.cu
    own = cu("cuStreamCreate", 1)  # CU_STREAM_NON_BLOCKING
    cu("cuStreamBeginCapture", own, driver.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
    captured.launch(stream=own, mode="launch")  # the plan's nodes join the capture
    graph = cu("cuStreamEndCapture", own)
    from apic import _compat

    name, args = _compat.cuda_graph_instantiate_call(driver, graph)
    built = cu(name, *args)
    built_exec, built_stream = int(built), int(own)
    captured._issue_paths_keep = (graph, built, own)  # alive as long as the graph (and its memory)
    found.append(Method("apic plan, captured exec", lambda: _check(lib.cuGraphLaunch(built_exec, built_stream)),
                        lambda g=captured: read_counter(g, "x", like)))
    return found


def _check(status: int) -> None:
    if status:
        raise RuntimeError(f"cuGraphLaunch failed with CUresult {status}")
