"""One cache store, one pruning rule, for every kind of file apic keeps (``apic._probes.cache_store``): the
native serial interpreter's object and the host's CPU target in apic's cache folder, range objects and
footprint verdicts in Warp's kernel cache folder. Each kind is stored through the module that keeps it, aged,
and pruned by the next store of its kind as the README says: used within 30 days, or a day beyond the 8 most
recently used; temporaries over an hour old go."""

from __future__ import annotations

import os
import time

import pytest
import warp as wp

from apic._probes import cache_store, cpu
from apic.replay.parallel import footprint_cache, range_cache
from apic.replay.cpu import native_interpreter

pytestmark = [pytest.mark.warp_version]

_DAY = 24 * 3600


def _in_cache_folder(stem: str, ext: str, magic: bytes):
    def store(name: str) -> str:
        path = os.path.join(cache_store.cache_folder(), f"{stem}-{int(name):032x}.{ext}")
        cache_store.store_in_cache(path, magic + b"contents", magic)
        return path
    return store


def _kept(kind: str, variable: str, ext: str, store_one):
    def store(name: str) -> str:
        store_one(name)
        return cache_store.kept_path(kind, variable, name, ext)
    return store


KINDS = {
    "serial-interpreter": _in_cache_folder("serial-interpreter", "o", native_interpreter._MAGIC),
    "host-target": _in_cache_folder("host-target", "json", cpu._TARGET_MAGIC),
    "apic-range": _kept("apic-range", range_cache.VARIABLE, "o", lambda name: range_cache.store(name, b"\x7fELF")),
    "apic-footprint": _kept("apic-footprint", footprint_cache.VARIABLE, "json",
                            lambda name: footprint_cache.store(name, None, ["start"])),
}


def _age(path: str, days: float, now: float) -> None:
    os.utime(path, (now - days * _DAY, now - days * _DAY))


@pytest.fixture
def folders(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "home"))
    monkeypatch.setattr(wp.config, "kernel_cache_dir", str(tmp_path / "kernels"))
    for variable in (range_cache.VARIABLE, footprint_cache.VARIABLE):
        monkeypatch.delenv(variable, raising=False)


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_every_kind_is_pruned_by_the_one_rule(folders, kind):
    store, now = KINDS[kind], time.time()
    paths = {name: store(str(name)) for name in range(1, 12)}
    assert all(os.path.isfile(p) and os.path.basename(p).startswith(kind + "-") for p in paths.values())
    ages = {1: 31, **{k: (k - 1) / 24 for k in range(2, 10)}, 10: 0.9, 11: 2}  # days since last use
    for name, days in ages.items():
        _age(paths[name], days, now)
    folder = os.path.dirname(paths[1])
    abandoned = os.path.join(folder, f".{os.path.basename(paths[1])}.x1y2z3.partial")
    being_written = os.path.join(folder, f".{os.path.basename(paths[2])}.a1b2c3.partial")
    for temporary, hours in ((abandoned, 2), (being_written, 0.1)):
        with open(temporary, "wb") as f:
            f.write(open(paths[2], "rb").read()[:4])
        _age(temporary, hours / 24, now)
    foreign = os.path.join(folder, f"{kind}-{'f' * 32}.{paths[1].rsplit('.', 1)[1]}")
    with open(foreign, "wb") as f:
        f.write(b"someone else's file, named as apic names its own")
    _age(foreign, 400, now)

    newest = store("12")  # storing one prunes its kind
    left = set(os.listdir(folder))
    assert os.path.basename(newest) in left
    assert os.path.basename(paths[1]) not in left, "unused for 31 days"
    assert os.path.basename(paths[11]) not in left, "a day beyond the 8 most recently used"
    assert {os.path.basename(paths[k]) for k in range(2, 11)} <= left, "the 8 most recent, and one used today"
    assert os.path.basename(abandoned) not in left and os.path.basename(being_written) in left
    assert os.path.basename(foreign) in left, "not apic's: never removed"


def test_a_kept_file_reads_back_and_a_damaged_one_reads_as_absent(folders):
    cache_store.keep("apic-range", range_cache.VARIABLE, "k", "o", b"object bytes")
    assert cache_store.load_kept("apic-range", range_cache.VARIABLE, "k", "o") == b"object bytes"
    path = cache_store.kept_path("apic-range", range_cache.VARIABLE, "k", "o")
    data = open(path, "rb").read()
    for damaged in (data[:-1], data[:3], b"", data[:-40] + bytes([data[-40] ^ 1]) + data[-39:],
                    cache_store.kept_bytes("apic-footprint", b"object bytes")):  # another kind's file
        with open(path, "wb") as f:
            f.write(damaged)
        assert cache_store.load_kept("apic-range", range_cache.VARIABLE, "k", "o") is None


def test_a_kind_switched_off_keeps_nothing(folders, monkeypatch):
    monkeypatch.setenv(range_cache.VARIABLE, "0")
    assert cache_store.kept_path("apic-range", range_cache.VARIABLE, "k", "o") is None
    range_cache.store("k", b"object")
    assert range_cache.load("k") is None
    assert not os.path.exists(os.path.join(wp.config.kernel_cache_dir, "apic-range"))
