"""The fuzzer's threaded check (``tests/fuzz/threaded.py``) splits launches and can fail.

Every loaded input the fuzzer replays is replayed again with ``threads=2`` from the memory it was loaded
with and compared with the serial replay, bit for bit. Here, on the ``split`` seed: the honest graph's
threaded replay splits its launches and matches serial, and a threaded replay that starts from other
memory (a planted difference) is reported, so the check is not vacuous.
"""

from __future__ import annotations

import pytest
import warp as wp

from fuzz import threaded

pytestmark = [pytest.mark.warp_version, pytest.mark.interpreter]


@pytest.fixture(scope="module")
def seed(tmp_path_factory):
    return threaded.save_split(str(tmp_path_factory.mktemp("split")))


def _replayed_serially(path):
    graph = wp.capture_load(path)
    initial = threaded.snapshot(graph)
    assert initial is not None
    wp.capture_launch(graph)
    graph.launch(2)
    return graph, initial


def test_threads_split_the_seed_and_match_serial(seed):
    graph, initial = _replayed_serially(seed)
    assert threaded.threaded_problem(graph, initial, 3) is None
    assert threaded.split_launches(graph) > 0  # the threaded replay really ran on more than one thread


def test_a_difference_is_reported(seed):
    graph, initial = _replayed_serially(seed)
    address, contents = initial[0]
    # the high byte of the region's last float: a change no rounding or flushing to zero can hide
    planted = [(address, contents[:-1] + bytes([contents[-1] ^ 0x40]))] + initial[1:]
    problem = threaded.threaded_problem(graph, planted, 3)
    assert problem is not None and "differs from the serial one" in problem
