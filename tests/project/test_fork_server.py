"""The suite's forked children (``fork_server.run``) behave as fresh ``python`` processes would.

Each case runs the same command through ``subprocess.run`` (the oracle) and through ``fork_server.run``, and
the two results must be the same: exit status, standard output and standard error, byte for byte. The
cases cover how a process starts (argv, ``sys.path``, working folder, environment, ``__main__``), how it ends
(exit codes, an exception's traceback, a signal, threads still running, ``atexit``) and its streams.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from concurrent.futures import ThreadPoolExecutor

import fork_server
import pytest
from persist_helpers import TESTS, child_env

pytestmark = [pytest.mark.warp_version]


@pytest.fixture(autouse=True)
def _a_server():
    """A kernel without ``pidfd_open`` (Linux before 5.3) has no server: every call runs as ``subprocess.run``."""
    if not fork_server._the_servers()[0].running:
        pytest.skip("no fork server on this kernel (no pidfd_open): the suite's children are fresh processes")

# What a process sees of how it was started
_WHO = textwrap.dedent("""
    import json, os, sys
    main = sys.modules["__main__"]
    print(json.dumps({"argv": sys.argv, "path0": sys.path[0], "cwd": os.getcwd(), "name": __name__,
                      "file": getattr(main, "__file__", None), "env": os.environ.get("APIC_FORK_PROBE"),
                      "pythonpath": [p for p in sys.path if p.startswith(os.environ["APIC_FORK_ROOT"])],
                      "server": [m for m in sys.modules if "fork_server" in m or m == "persist_helpers"]}))
""")

_ENDINGS = {
    "zero": "print('done')",
    "status": "import sys; print('out'); print('err', file=sys.stderr); sys.exit(7)",
    "message": "import sys; sys.exit('a message')",
    "exception": "def f():\n    raise ValueError('boom')\nf()",
    "signal": "import os, signal; os.kill(os.getpid(), signal.SIGKILL)",
    "thread": "import threading, time\ndef late():\n    time.sleep(0.2)\n    print('thread ran', flush=True)\n"
              "threading.Thread(target=late).start()",
    "atexit": "import atexit, sys\natexit.register(lambda: print('at exit', file=sys.stderr))\nprint('body')",
    # a buffered writer nobody flushes: only the interpreter's exit does (whatever PYTHONUNBUFFERED says)
    "unflushed": "out = open(1, 'w', closefd=False)\nout.write('never flushed by hand')",
    "stdin": "import sys; print(sys.stdin.read()[::-1])",
}


def _both(args, **options):
    """The oracle's result and the fork's, as (status, stdout, stderr)."""
    assert fork_server.forkable(args, **options), "the server would not serve this call: nothing is compared"
    fresh = subprocess.run(args, **options)
    forked = fork_server.run(args, **options)
    return [(done.returncode, done.stdout, done.stderr) for done in (fresh, forked)]


@pytest.mark.parametrize("ending", sorted(_ENDINGS))
def test_a_forked_child_ends_as_a_fresh_process_does(ending, tmp_path):
    fresh, forked = _both([sys.executable, "-c", _ENDINGS[ending]], capture_output=True, cwd=tmp_path,
                          input=b"fed on stdin" if ending == "stdin" else None, env=child_env())
    assert forked == fresh


@pytest.mark.parametrize("how", ["-c", "script", "-m"])
def test_a_forked_child_starts_as_a_fresh_process_does(how, tmp_path):
    (tmp_path / "probe_pkg").mkdir()
    (tmp_path / "probe_pkg" / "__init__.py").write_text("")
    (tmp_path / "probe_pkg" / "who.py").write_text(_WHO)
    script = tmp_path / "who_script.py"
    script.write_text(_WHO)
    command = {"-c": ["-c", _WHO], "script": [str(script)], "-m": ["-m", "probe_pkg.who"]}[how]
    env = child_env()
    env.update(APIC_FORK_PROBE="seen", APIC_FORK_ROOT=str(tmp_path))
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), env["PYTHONPATH"]])
    fresh, forked = _both([sys.executable, *command, "an argument"], capture_output=True, text=True, cwd=tmp_path,
                          env=env)
    assert forked == fresh
    assert '"server": []' in forked[1]


def test_text_mode_timeouts_and_merged_streams_are_as_subprocess_gives_them(tmp_path):
    code = "import sys; sys.stdout.write('a\\r\\nb\\rc'); sys.stdout.flush(); print('e', file=sys.stderr)"
    fresh, forked = _both([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert forked == fresh
    with pytest.raises(subprocess.TimeoutExpired):
        fork_server.run([sys.executable, "-c", "import time; time.sleep(60)"], timeout=1)
    with pytest.raises(subprocess.CalledProcessError):
        fork_server.run([sys.executable, "-c", "raise SystemExit(3)"], check=True, capture_output=True)


def test_a_call_a_fork_cannot_start_faithfully_goes_to_a_fresh_process(tmp_path):
    """Flags, options such as ``preexec_fn``, and variables read at start-up or at ``import numpy, warp`` are
    the interpreter's own: such calls run as they would without the server (its pid would be the server's
    parent otherwise)."""
    code = "import os; print(os.getppid())"
    own = str(os.getpid())
    for args, options in [
        ([sys.executable, "-I", "-c", code], {}),
        ([sys.executable, "-c", code], {"preexec_fn": os.getpid}),
        ([sys.executable, "-c", code], {"env": dict(child_env(), PYTHONHASHSEED="1")}),
        ([sys.executable, "-c", code], {"env": dict(child_env(), OPENBLAS_NUM_THREADS="1")}),
        ([sys.executable, "-c", code], {"env": dict(child_env(), PYTHONPATH=os.path.dirname(os.path.dirname(
            __import__("numpy").__file__)))}),
    ]:
        assert not fork_server.forkable(args, **options), args
        assert fork_server.run(args, capture_output=True, text=True, **options).stdout.strip() == own, args
    served = fork_server.run([sys.executable, "-c", code], capture_output=True, text=True, env=child_env())
    assert served.stdout.strip() != own  # the server's fork: without this the test above would show nothing


def test_the_variables_a_child_may_change_are_not_read_at_import():
    """A variable a fork may set differently must not be one ``import numpy, warp`` reads (the server has read
    it once, for every child). Python-level reads are caught; C-level ones (thread counts) stay outside the
    allowed set by name."""
    probe = textwrap.dedent("""
        import json, os
        seen = set()
        kind = type(os.environ)
        get, has = kind.__getitem__, kind.__contains__
        kind.__getitem__ = lambda self, key: (seen.add(key), get(self, key))[1]
        kind.__contains__ = lambda self, key: (seen.add(key), has(self, key))[1]
        import numpy, warp
        print(json.dumps(sorted(seen)))
    """)
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=child_env(), cwd=TESTS)
    assert done.returncode == 0, done.stderr
    read = __import__("json").loads(done.stdout.strip().splitlines()[-1])
    assert read, "the probe caught no reads: it cannot show anything"
    assert not [name for name in read if fork_server.may_differ(name)], read


def test_children_started_from_several_threads_at_once_each_get_their_own_streams_and_status():
    code = ("import sys, time; time.sleep(0.3); print(sys.argv[1]); print(sys.argv[1], file=sys.stderr); "
            "sys.exit(int(sys.argv[1]))")

    def child(k):
        args = [sys.executable, "-c", code, str(k)]
        assert fork_server.forkable(args, env=child_env())
        return fork_server.run(args, capture_output=True, text=True, env=child_env())

    with ThreadPoolExecutor(6) as pool:
        done = list(pool.map(child, range(6)))
    assert [(d.returncode, d.stdout, d.stderr) for d in done] == [(k, f"{k}\n", f"{k}\n") for k in range(6)]


def test_two_children_in_a_row_have_different_hash_seeds():
    """A later child must not find, by a key that depends on the hash seed, what an earlier one kept."""
    args = [sys.executable, "-c", "print(hash('apic'))"]
    assert fork_server.forkable(args, env=child_env())
    seeds = [fork_server.run(args, capture_output=True, text=True, env=child_env()).stdout for _ in range(3)]
    assert seeds[0] != seeds[1] and seeds[1] != seeds[2], seeds


def test_a_killed_server_is_started_again():
    args = [sys.executable, "-c", "print('after')"]
    assert fork_server.run(args, capture_output=True, text=True, env=child_env()).stdout == "after\n"
    for server in fork_server._the_servers():
        server.process.kill()
        server.process.wait()
    assert fork_server.forkable(args, env=child_env())
    assert [fork_server.run(args, capture_output=True, text=True, env=child_env()).stdout for _ in range(2)] == \
        ["after\n", "after\n"]
