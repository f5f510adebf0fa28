"""apic.ray on a real local Ray cluster: a saved graph shipped once, replayed by actors, nothing lost when one dies.

The cluster (2 CPUs, loopback only, a 200 MB object store, no dashboard) is started by this module and
stopped at its end. Every result is compared bit for bit with the step run eagerly, and with a local
replay of the same bytes. Skipped, saying so, where Ray cannot be imported (``pip install
"apic-warp[ray]"``).
"""

from __future__ import annotations

import os
import signal
import threading
import time

import msgpack
import numpy as np
import pytest
import warp as wp

# Before Ray is imported (it reads them then): the node is this host's loopback address and every Ray
# server listens there only (Ray's single-machine mode), and Ray reports no usage statistics.
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
ray = pytest.importorskip("ray", reason='Ray is not installed (pip install "apic-warp[ray]"): the Ray tests skip')

import apic  # noqa: E402
import apic.ray as apic_ray  # noqa: E402
import ray_kernels as rk  # noqa: E402
from apic.format import schema, writer  # noqa: E402
from persist_helpers import same_bits  # noqa: E402

pytestmark = [pytest.mark.once, pytest.mark.serial]

STEPS = 3
# Each test actor asks Ray for a quarter CPU: the module's pool and a test's own fit the 2-CPU cluster together
SHARE = {"num_cpus": 0.25}


@pytest.fixture(scope="module")
def cluster():
    ray.init(num_cpus=2, include_dashboard=False, object_store_memory=200 * 1024 * 1024, log_to_driver=False,
             configure_logging=False)
    try:
        yield ray
    finally:
        ray.shutdown()


@pytest.fixture(scope="module")
def bundle():
    graph, x, v = rk.capture()
    return apic.capture_save_to_bytes(graph, inputs={"x0": x}, outputs={"x": x, "v": v})


@pytest.fixture(scope="module")
def pool(cluster, bundle):
    with apic_ray.GraphPool(bundle, actors=2, actor_options=SHARE) as made:
        yield made


def _local(bundle, params, steps):
    """A local replay of the same bytes, with apic's public calls only (the pool's oracle besides eager)."""
    graph = wp.capture_load_from_bytes(*bundle)
    for name, value in params.items():
        graph.set_param(name, value)
    for _ in range(steps):
        wp.capture_launch(graph)
    out = {name: np.empty(rk.N, dtype=np.float32) for name in ("x", "v")}
    for name, arr in out.items():
        graph.get_param(name, arr)
    return out


def _items(count: int, inner: int = 1) -> list[dict]:
    return [{"dt": 0.001 * (i + 1), "inner": inner + i % 3} for i in range(count)]


def _descendants(root: int) -> set[int]:
    parents = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    parents[int(entry)] = int(f.read().rsplit(")", 1)[1].split()[1])
            except OSError:
                pass
    found, grew = {root}, True
    while grew:
        more = {pid for pid, parent in parents.items() if parent in found} - found
        found |= more
        grew = bool(more)
    return found


def _listening(pids: set[int]) -> list[str]:
    """The local addresses (hex, as /proc/net/tcp{,6} writes them) of TCP sockets ``pids`` listen on."""
    inodes = set()
    for pid in pids:
        try:
            for fd in os.listdir(f"/proc/{pid}/fd"):
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
                if target.startswith("socket:["):
                    inodes.add(target[8:-1])
        except OSError:
            pass
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            for line in f.readlines()[1:]:
                fields = line.split()
                if fields[3] == "0A" and fields[9] in inodes:  # 0A: LISTEN
                    found.append(fields[1].split(":")[0])
    return found


def test_the_cluster_is_on_loopback_only(cluster):
    assert [node["NodeManagerAddress"] for node in ray.nodes()] == ["127.0.0.1"]
    if not os.path.isdir("/proc/self/fd") or not os.path.exists("/proc/net/tcp"):
        pytest.skip("no /proc to list the sockets Ray's processes listen on")
    # every socket this process and the Ray processes it started listen on: 127.0.0.1 (or ::ffff:127.0.0.1)
    loopback = {"0100007F", "0000000000000000FFFF00000100007F", "00000000000000000000000001000000"}
    addresses = _listening(_descendants(os.getpid()))
    assert addresses, "found none of the Ray processes' listening sockets"
    assert set(addresses) <= loopback, addresses


def test_import_apic_does_not_import_ray():
    import subprocess
    import sys

    code = "import sys, apic; assert 'ray' not in sys.modules, 'import apic imported Ray'"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr


def test_the_actor_options_ask_ray_for_gpus_only_when_told():
    """``num_gpus`` reaches each actor's options (a CUDA graph's actors each get a GPU); no cluster is needed."""
    options = apic_ray.actor_options_for(None, None, 3, 4, None)
    assert options == {"num_cpus": 1, "max_restarts": 3, "max_task_retries": 4}
    assert apic_ray.actor_options_for(2, 1, 0, 0, None)["num_gpus"] == 1
    assert apic_ray.actor_options_for(None, 0.25, 0, 0, {"num_cpus": 0.5}) == {
        "num_cpus": 0.5, "num_gpus": 0.25, "max_restarts": 0, "max_task_retries": 0}
    assert apic_ray.actor_options_for(None, 1, 0, 0, {"num_gpus": 2})["num_gpus"] == 2  # actor_options win
    for bad in (-1, True, "1", [1]):
        with pytest.raises(ValueError, match="num_gpus"):
            apic_ray.actor_options_for(None, bad, 0, 0, None)


def test_a_pool_asking_for_a_gpu_the_cluster_lacks_is_reported_not_waited_for(cluster, bundle):
    if cluster.cluster_resources().get("GPU"):
        pytest.skip("this cluster has a GPU: an actor asking for one starts")
    with pytest.raises(apic_ray.WorkerError, match="did not load the graph within"):
        apic_ray.GraphPool(bundle, actors=1, num_gpus=1, load_timeout=3, actor_options=SHARE)


def test_a_sweep_returns_every_result_in_input_order_bit_for_bit(pool, bundle):
    rng = np.random.default_rng(3)
    items = _items(7)
    items[4]["x0"] = rng.standard_normal(rk.N).astype(np.float32)  # a named array beside the scalars
    results = pool.map(items, steps=STEPS)
    assert len(results) == len(items)
    for item, result in zip(items, results):
        assert sorted(result) == ["v", "x"]
        expected = rk.eager(STEPS, item["dt"], item["inner"], item.get("x0"))
        local = _local(bundle, item, STEPS)
        for name in ("x", "v"):
            assert same_bits(result[name], expected[name]), (item, name)
            assert same_bits(result[name], local[name]), (item, name)
    # in chunks of 3 items per remote call (the last one short): the same results, in the same order
    chunked = pool.map(items, steps=STEPS, chunk=3)
    assert all(same_bits(a["x"], b["x"]) and same_bits(a["v"], b["v"]) for a, b in zip(chunked, results))
    # every item starts from the saved state: the same parameters again give the same bits on either actor
    again = pool.map([items[0]] * 4, steps=STEPS)
    assert all(same_bits(r["x"], results[0]["x"]) for r in again)
    # distinct parameters give distinct results (the comparison above could not pass by accident)
    assert not same_bits(results[0]["x"], results[1]["x"])


def test_one_run_with_threads_and_named_outputs(pool):
    one = pool.run({"dt": 0.002, "inner": 2}, steps=STEPS, outputs=["x", "dt"], threads=2)
    expected = rk.eager(STEPS, 0.002, 2)
    assert sorted(one) == ["dt", "x"] and same_bits(one["x"], expected["x"])
    assert one["dt"] == np.float32(0.002)
    assert pool.run({"dt": 0.002, "inner": 2}, steps=0, outputs=["x"])["x"].shape == (rk.N,)


def test_a_bad_item_raises_apic_error_naming_worker_and_item_and_the_pool_goes_on(pool):
    with pytest.raises(apic.BindingError, match=r"Ray worker \d \(pid \d+ .*item 1: BindingError: .*'nope'"):
        pool.map([{"dt": 0.01}, {"nope": 1.0}], steps=1)
    with pytest.raises(apic.BindingError, match=r"item 4: BindingError: .*'nope'"):
        pool.map([{"dt": 0.01}] * 4 + [{"nope": 1.0}], steps=1, chunk=3)  # the second chunk's second item
    with pytest.raises(ValueError, match="chunk"):
        pool.map([{}], chunk=0)
    with pytest.raises(apic.BindingError, match=r"item 0: BindingError: .*inner"):
        pool.run({"inner": 2**40})  # does not fit its int32
    with pytest.raises(apic.BindingError, match="no parameter named 'w' to return"):
        pool.run({}, outputs=["w"])
    assert same_bits(pool.run({"dt": 0.01}, steps=1)["x"], rk.eager(1, 0.01)["x"])


def test_an_actor_killed_mid_sweep_is_restarted_and_nothing_is_lost(cluster, bundle):
    # an item long enough that the kill lands while the sweep runs: about 0.2 s each
    replayer = apic_ray.Replayer(*bundle)
    inner = 64
    replayer.run({"inner": inner}, steps=20)  # the first replay of a process also readies the replay loop
    start = time.perf_counter()
    replayer.run({"inner": inner}, steps=20)
    inner = max(1, int(inner * 0.2 / max(time.perf_counter() - start, 1e-6)))
    items = _items(10, inner)
    with apic_ray.GraphPool(bundle, actors=2, max_restarts=2, max_task_retries=-1, actor_options=SHARE) as pool:
        victim = pool.workers()[0]["pid"]
        state = {"killed_at": None, "finished": False}

        def kill():
            if not state["finished"]:
                os.kill(victim, signal.SIGKILL)
                state["killed_at"] = time.monotonic()

        timer = threading.Timer(0.5, kill)
        timer.start()
        results = pool.map(items, steps=20)
        state["finished"] = True
        timer.join()
        assert state["killed_at"] is not None, "the sweep ended before the kill: make the items longer"
        after = pool.workers()
    assert after[0]["pid"] != victim, "the killed actor should run in a new process"
    for item, result in zip(items, results):
        local = replayer.run(item, steps=20)
        assert same_bits(result["x"], local["x"]) and same_bits(result["v"], local["v"]), item


def _foreign(bundle) -> tuple[bytes, dict]:
    """The same graph, as if saved on a machine of another architecture: a worker here cannot load it."""
    data, modules = bundle
    body = msgpack.unpackb(data[schema.HEADER.size:], raw=False)
    body["target"]["machine"] = "s390x"
    return writer.encode(body), modules


def test_a_worker_that_cannot_load_the_graph_raises_apic_error_naming_it(cluster, bundle):
    start = time.monotonic()
    with pytest.raises(apic.IncompatibleGraphError,
                       match=r"Ray worker \d \(pid \d+ on .*warp-lang .*cannot load the graph: IncompatibleGraphError: "
                             r".*compiled for another CPU family \(s390x\)"):
        apic_ray.GraphPool(_foreign(bundle), actors=2, load_timeout=60, actor_options=SHARE)
    assert time.monotonic() - start < 60


def test_a_worker_that_does_not_load_in_time_is_reported_not_waited_for(cluster, bundle):
    with pytest.raises(apic_ray.WorkerError, match=r"did not load the graph within 0\.001 s"):
        apic_ray.GraphPool(bundle, actors=1, load_timeout=0.001, actor_options=SHARE)


def test_a_pool_takes_the_graph_itself_or_one_object_store_reference(cluster):
    graph, x, v = rk.capture(dt=0.004)
    ref = apic_ray.put_graph(graph, outputs={"x": x})
    with apic_ray.GraphPool(graph, outputs={"x": x}, actor_options=SHARE) as direct, \
            apic_ray.GraphPool(ref, actor_options=SHARE) as shared:
        assert shared.ref is ref
        a, b = direct.run(steps=2), shared.run(steps=2)
    assert sorted(a) == ["x"] and same_bits(a["x"], b["x"]) and same_bits(a["x"], rk.eager(2, 0.004)["x"])


def test_a_pool_with_threads_ships_the_source_its_replays_split_with(cluster):
    """Above one thread, the graph a pool saves carries its modules' generated source (a loaded graph splits
    only launches whose source it holds, docs/PARALLEL.md); ``save_options`` can say otherwise; results
    equal eager either way."""
    graph, x, v = rk.capture(dt=0.004)
    kinds = {}
    for threads, options in ((2, None), (None, None), (2, {"source_fallback": False})):
        with apic_ray.GraphPool(graph, outputs={"x": x}, threads=threads, actor_options=SHARE,
                                save_options=options) as pool:
            _, modules = ray.get(pool.ref)
            kinds[(threads, bool(options))] = any(name.endswith(".cpp") for name in modules)
            assert same_bits(pool.run(steps=2)["x"], rk.eager(2, 0.004)["x"])
    assert kinds == {(2, False): True, (None, False): False, (2, True): False}


def test_the_example_sweeps_the_demo_scene_on_its_own_cluster(tmp_path):
    import subprocess
    import sys

    from persist_helpers import REPO, child_env

    example = os.path.join(REPO, "examples", "ray_sweep.py")
    done = subprocess.run([sys.executable, example, "--actors", "2", "--frames", "30", "--sweep", "4"],
                          cwd=tmp_path, env=child_env(), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-4000:]
    assert done.stdout.count("substep dt =") == 4, done.stdout
    assert "first item replayed locally: identical (bit for bit): yes" in done.stdout
