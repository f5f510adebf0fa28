"""Footprint verdicts sealed at save (docs/PARALLEL.md, "Saved graphs"): a graph saved with its generated source
seals, in each module's kernel manifest, the digest of every launch split by footprint; loaded (in this
process, a fresh one that never defines the kernels, or saved again from a loaded graph), those launches
split, bit for bit as eager, and launches whose arguments or index data differ from the sealed ones
(another ``end`` set through a binding, a refused launch, a save without source) replay serially with
their reason. Malformed ``footprint`` maps are refused as the other sealed claims are.
"""

from __future__ import annotations

import json
import os
import sys
import textwrap

import msgpack
import numpy as np
import pytest
import warp as wp

import fork_server
import footprint_kernels as fk
from apic.errors import FormatError
from apic.format import manifest, sealed_claims
from apic.record.parallel.footprint import SealedFootprint, sealed_digest
from persist_helpers import child_env
from world_kernels import replay, same_bits

pytestmark = [pytest.mark.warp_version]

REPLAYS = 3
SERIAL_WHY = "not proved splittable when captured"


def _saved(tmp_path, name: str, source_fallback: bool = True, seed: int = 3):
    """Case ``name`` captured and saved as ``<tmp_path>/g`` (its written array bound as output ``out``, and
    ``running_sum``'s ``end`` as input ``end``); returns its inputs made again, for eager launches."""
    kernel, tasks, make, layout, _ = fk.CASES[name]
    captured = make(np.random.default_rng(seed), layout)
    with wp.ScopedCapture(device=fk.CPU, apic=True) as capture:
        wp.launch(kernel, dim=tasks, inputs=captured, device=fk.CPU)
    bindings = {"end": captured[1]} if name == "running_sum" else {}
    wp.capture_save(capture.graph, str(tmp_path / "g"), inputs=bindings, outputs={"out": captured[-1]},
                    source_fallback=source_fallback)
    return make(np.random.default_rng(seed), layout)


def _eager(name: str, inputs, replays: int = REPLAYS) -> np.ndarray:
    kernel, tasks, *_ = fk.CASES[name]
    for _ in range(replays):
        wp.launch(kernel, dim=tasks, inputs=inputs, device=fk.CPU)
    return inputs[-1].numpy()


def _replayed(graph, threads: int, interpreter: str, replays: int = REPLAYS) -> np.ndarray:
    for _ in range(replays):
        replay(graph, threads, interpreter)
    out = np.zeros(graph.param_numpy("out").shape, dtype=np.float32)
    graph.get_param("out", out)
    return out


def _loaded(tmp_path):
    graph = wp.capture_load(str(tmp_path / "g.wrp"))
    graph.min_tasks_per_thread = 1
    return graph


@pytest.mark.interpreter
@pytest.mark.parametrize("interpreter", ["numba", "reference"])
@pytest.mark.parametrize("name", ["children", "dense_blocks", "ancestors", "either_branch"])
def test_loaded_graph_splits_sealed_launches_as_eager(tmp_path, name, interpreter):
    eager = _eager(name, _saved(tmp_path, name))
    graph = _loaded(tmp_path)
    (info,) = graph.recording.kernels
    assert isinstance(info.split_footprint, SealedFootprint) and len(info.split_footprint.verdicts) == 1
    (entry,) = graph.parallel_report(2)
    assert entry["chunks"] > 1 and not entry["why"] and "judged by footprint" in entry["basis"], entry
    assert same_bits([eager], [_replayed(graph, 2, interpreter)])


def test_a_loaded_graph_saved_again_keeps_its_verdicts(tmp_path):
    eager = _eager("children", _saved(tmp_path / "first", "children"))
    first = _loaded(tmp_path / "first")
    wp.capture_save(first, str(tmp_path / "g"), source_fallback=True)  # its bindings kept
    again = _loaded(tmp_path)
    assert again.recording.kernels[0].split_footprint == first.recording.kernels[0].split_footprint
    assert again.parallel_report(2)[0]["chunks"] > 1
    assert same_bits([eager], [_replayed(again, 2, "numba")])


_CHILD = textwrap.dedent(
    """
    import json, sys
    import numpy as np
    import warp as wp
    wp.config.quiet = True
    import apic
    graph = wp.capture_load(sys.argv[1])
    graph.min_tasks_per_thread = 1
    for _ in range(int(sys.argv[2])):
        wp.capture_launch(graph, threads=2)
    out = np.zeros(graph.param_numpy("out").shape, dtype=np.float32)
    graph.get_param("out", out)
    np.save(sys.argv[3], out)
    (entry,) = graph.parallel_report(2)
    print(json.dumps({"chunks": entry["chunks"], "kernels": "footprint_kernels" in sys.modules}))
    """
)


def test_a_fresh_process_without_the_kernels_splits_as_eager(tmp_path):
    eager = _eager("ancestors", _saved(tmp_path, "ancestors"))
    done = fork_server.run([sys.executable, "-c", _CHILD, str(tmp_path / "g.wrp"), str(REPLAYS),
                           str(tmp_path / "out.npy")], env=child_env(), capture_output=True, text=True, timeout=600,
                           cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.strip().splitlines()[-1]) == {"chunks": 8, "kernels": False}
    assert same_bits([eager], [np.load(tmp_path / "out.npy")])


@pytest.mark.parametrize("when", ["before the first parallel replay", "after it"])
def test_other_index_data_set_through_a_binding_run_serially(tmp_path, when):
    """``end`` reaching two elements into the next segment: not the data whose digest was sealed (judged at the
    first parallel replay), or changed after that replay split it (its guards)."""
    inputs = _saved(tmp_path, "running_sum")
    graph = _loaded(tmp_path)
    overlapping = np.minimum(inputs[1].numpy() + 2, len(inputs[-1].numpy())).astype(np.int32)
    if when == "after it":
        _eager("running_sum", inputs, 1)
        _replayed(graph, 2, "numba", 1)
        assert graph.parallel_report(2)[0]["chunks"] > 1
    inputs[1].assign(overlapping)
    graph.set_param("end", overlapping)
    eager = _eager("running_sum", inputs)
    assert same_bits([eager], [_replayed(graph, 2, "numba")])
    (entry,) = graph.parallel_report(2)
    if when == "after it":
        assert entry["chunks"] > 1 and entry["basis"].endswith("(they differ now)"), entry
    else:
        assert entry["chunks"] == 0 and "judged splittable when the graph was saved" in entry["why"], entry


@pytest.mark.parametrize(("name", "source_fallback"), [("children_shared", True), ("children", False)])
def test_a_refused_launch_or_a_save_without_source_seals_nothing(tmp_path, name, source_fallback):
    eager = _eager(name, _saved(tmp_path, name, source_fallback))
    graph = _loaded(tmp_path)
    assert graph.recording.kernels[0].split_footprint is None
    carried = [manifest.carried(open(tmp_path / "g_modules" / file, "rb").read(), file)[1]
               for file in os.listdir(tmp_path / "g_modules")]
    carried = [msgpack.unpackb(found) for found in carried if found is not None]
    assert carried and not any(sealed_claims.FOOTPRINT_FIELD in found for found in carried)
    (entry,) = graph.parallel_report(2)
    assert entry["chunks"] == 0, entry
    assert same_bits([eager], [_replayed(graph, 2, "numba")])


def test_a_digest_names_only_plain_arrays_of_the_launch(tmp_path):
    _saved(tmp_path, "children")
    graph = _loaded(tmp_path)
    (op,) = [op for op in graph.recording.ops if type(op).__name__ == "Launch"]
    data = op.args.data
    ((digest, offsets),) = graph.recording.kernels[0].split_footprint.verdicts
    assert sealed_digest(bytes(data), op.args, op.dim, offsets) != digest  # addresses relocated: contents differ
    assert sealed_digest(bytes(data), op.args, op.dim, (offsets[0] + 8,)) is None
    assert sealed_digest(bytes(data), op.args, op.dim, (len(data) + 64,)) is None


def _manifest(footprint) -> bytes:
    return msgpack.packb({"format": "apic.kernels", "version": 1, sealed_claims.FOOTPRINT_FIELD: footprint},
                         use_bin_type=True)


GOOD = "ab" * 32


@pytest.mark.parametrize("footprint", [
    [], {"k": []}, {"k": [[0], "x"]}, {"k": [[-1], []]}, {"k": [[0], [[GOOD]]]}, {"k": [[0], [["AB" * 32, [0]]]]},
    {"k": [[0], [[GOOD, [0.5]]]]}, {"k": [[0], [[GOOD, [0]]] * (sealed_claims.MAX_VERDICTS + 1)]},
    {1: [[0], []]}, {"k": [[0] * 5000, []]},
])
def test_a_malformed_footprint_map_is_refused(footprint):
    with pytest.raises(FormatError, match="invalid apic graph file: the kernel manifest of m"):
        sealed_claims.sealed_footprints(_manifest(footprint), "m")


def test_a_footprint_map_reads_as_sealed_verdicts():
    assert sealed_claims.sealed_footprints(_manifest(None), "m") == {}
    read = sealed_claims.sealed_footprints(_manifest({"k": [[280], [[GOOD, [0, 56]]]]}), "m")
    assert read == {"k": SealedFootprint((280,), ((GOOD, (0, 56)),))}
