"""The fuzzer's reach into CPU levels and kernel-manifest trailers (tests/fuzz/levels_trailers.py), briefly.

Every input is a seed whose ``target.cpu`` / ``target.features`` or a module file's manifest trailer was
changed, with the ``.wrp`` re-sealed so that every checksum passes. Each must end in an ``apic.ApicError``
or a correct load (a child process: a crash or hang fails the test), and the two attacks of issue 33 must
be refused every time: a level above its features, and a manifest cut off.
"""

from __future__ import annotations

import random

import pytest

import fuzz_wrp
from fuzz import levels_trailers

pytestmark = [pytest.mark.warp_version]


@pytest.fixture(scope="module")
def seeds(tmp_path_factory):
    return fuzz_wrp.make_seeds(str(tmp_path_factory.mktemp("edge_seeds")))


def test_fuzz_levels_and_trailers(seeds, tmp_path):
    stats = fuzz_wrp.fuzz(str(tmp_path), inputs=80, seed=33, seeds=seeds, edge_every=1, timeout=30.0)
    print(stats.summary())
    assert not stats.findings, stats.summary()
    assert set(stats.by_strategy) == set(levels_trailers.STRATEGIES), stats.by_strategy
    assert stats.outcomes.get("refused", 0) >= 30, stats.outcomes


@pytest.mark.parametrize("strategy, refusal", [
    ("level-above-features", r"target\.cpu: objects built for x86-64-v[34] use .* which target\.features"),
    ("trailer-stripped", r"carries no kernel manifest"),
])
def test_the_two_attacks_are_refused_on_every_seed_with_kernels(seeds, tmp_path, strategy, refusal):
    import re

    import warp as wp

    import apic

    for i, (name, path) in enumerate(sorted(seeds.items())):
        _, forged = levels_trailers.make(random.Random(i), path, str(tmp_path), i, strategy)
        if name in ("memory",) and strategy.startswith("trailer"):
            continue  # no kernels: nothing carries a manifest
        with pytest.raises(apic.ApicError) as caught:
            wp.capture_load(forged)
        assert re.search(refusal, str(caught.value)), (name, str(caught.value))
