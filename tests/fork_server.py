"""Fresh Python children for the suite, forked from a parent that has already imported NumPy and Warp.

A child ``python -c ...`` that imports NumPy, Warp and apic takes about 1 s here before it does anything, and one
run of the suite starts some 300 children. ``run`` is ``subprocess.run`` for the calls a fork can serve
faithfully: fork servers started by the test process import NumPy and Warp once and fork one child per call, which then
sets the call's argv, environment, working folder, ``sys.path`` and standard streams and runs the code as
``python`` would, to a normal interpreter exit (threads joined, ``atexit`` run, streams flushed).

The server never imports apic and never initialises Warp: children set Warp's cache folder and config, and
apic's switches, before ``import apic`` (which initialises Warp), as a fresh process would. Every other call,
and every call while ``APIC_TEST_FORK=0``, goes to ``subprocess.run`` unchanged: another interpreter, flags
(``-X``, ``-W``, ``-I``...), options such as ``preexec_fn`` or ``start_new_session``, or an environment that
differs from the server's in a variable read at start-up or at ``import numpy, warp`` (``PYTHON*``, thread
counts, locale, ``WARP_*`` other than ``WARP_CACHE_PATH``). What a fork shares with its siblings and a fresh
process would not: the modules NumPy and Warp import, and the hash seed with every other child of its server.
There are two servers, taken in turn, so two children in a row have different seeds. A test of what a fresh
process imports, or in which order, keeps calling ``subprocess`` itself.
"""

from __future__ import annotations

import atexit
import json
import locale
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading

# environment variables a child may set differently from the server: read after ``import numpy, warp``
_MAY_DIFFER = re.compile(r"(APIC_\w*|NUMBA_\w*|PYTEST_\w*|WARP_CACHE_PATH|PYTHONPATH|TMPDIR|HOME|XDG_CACHE_HOME"
                         r"|CUDA_VISIBLE_DEVICES)\Z")
_SERVED = {"cwd", "env", "capture_output", "stdout", "stderr", "stdin", "input", "text", "timeout", "check",
           "encoding", "errors"}
_LENGTH = struct.Struct("!Q")

# The server: python -c SERVER SOCKET_PATH. Its fd 0 is a pipe from the test process; end of file there ends it.
SERVER = r'''
import json, os, selectors, socket, struct, sys
import gc, numpy, warp
gc.freeze()  # children collect only what they make: a collection would touch, and so copy, the whole heap
LENGTH = struct.Struct("!Q")
BASE_PATH = sys.path[1:]  # less '' for -c; the test process's PYTHONPATH entries are dropped per request below
OWN_PYTHONPATH = [os.path.abspath(p) for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
BASE_PATH = [p for p in BASE_PATH if p not in OWN_PYTHONPATH]

def receive(conn):
    head, fds, _, _ = socket.recv_fds(conn, LENGTH.size, 3)
    while len(head) < LENGTH.size:
        head += conn.recv(LENGTH.size - len(head))
    size, body = LENGTH.unpack(head)[0], b""
    while len(body) < size:
        body += conn.recv(size - len(body))
    return json.loads(body), fds

def serve():
    """Fork a child per request; return (in the child only) what it must run."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(sys.argv[1])
    listener.listen(64)
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ)
    selector.register(0, selectors.EVENT_READ)
    waiting = {}  # pidfd -> (pid, connection)
    try:
        os.close(os.pidfd_open(os.getpid()))
    except (AttributeError, OSError):  # a kernel before Linux 5.3: the test process starts its children itself
        os.write(1, b"no pidfd\n")
        sys.exit(0)
    os.write(1, b"ready\n")
    while True:
        for key, _ in selector.select():
            if key.fileobj == 0:
                if not os.read(0, 64):
                    sys.exit(0)
            elif key.fileobj is listener:
                conn, _ = listener.accept()
                request, fds = receive(conn)
                pid = os.fork()
                if pid == 0:
                    selector.close()
                    for _, other in waiting.values():
                        other.close()
                    for pidfd in waiting:
                        os.close(pidfd)
                    listener.close()
                    conn.close()
                    return request, fds
                for fd in fds:
                    os.close(fd)
                conn.sendall(b"%d\n" % pid)
                pidfd = os.pidfd_open(pid)
                waiting[pidfd] = pid, conn
                selector.register(pidfd, selectors.EVENT_READ)
            else:
                pid, conn = waiting.pop(key.fileobj)
                selector.unregister(key.fileobj)
                os.close(key.fileobj)
                _, status = os.waitpid(pid, 0)
                try:
                    conn.sendall(b"%d\n" % os.waitstatus_to_exitcode(status))
                except OSError:
                    pass  # the test process stopped waiting
                conn.close()

def become(request, fds):
    """Be the process ``python ARGV`` would start, then run it to a normal interpreter exit."""
    import builtins, runpy, tempfile, types
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
    for fd in set(fds):
        if fd > 2:
            os.close(fd)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    tempfile.tempdir = None
    if "numpy.random" in sys.modules:
        numpy.random.seed()  # a fresh process seeds NumPy's global generator from the OS
    argv = request["argv"]
    pythonpath = [os.path.abspath(p) for p in request["env"].get("PYTHONPATH", "").split(os.pathsep) if p]
    first = {"-c": "", "-m": os.getcwd()}.get(argv[0], os.path.dirname(os.path.abspath(argv[0])))
    sys.path[:] = [first, *dict.fromkeys([*pythonpath, *BASE_PATH])]  # as site.py dedupes, before path[0]
    main = types.ModuleType("__main__")
    main.__builtins__ = builtins
    try:
        if argv[0] == "-m":
            sys.argv = ["-m", *argv[2:]]
            runpy._run_module_as_main(argv[1])  # as python -m does
        else:
            if argv[0] == "-c":
                sys.argv, source, filename = ["-c", *argv[2:]], argv[1], "<string>"
            else:
                sys.argv, filename = list(argv), os.path.abspath(argv[0])
                with open(filename, "rb") as script:
                    source = script.read()
                main.__file__, main.__cached__ = filename, None
            sys.modules["__main__"] = main
            exec(compile(source, filename, "exec"), main.__dict__)
    except SystemExit:
        raise
    except BaseException as error:
        error = error.with_traceback(error.__traceback__.tb_next)  # from the child's own code on, as python has it
        sys.excepthook(type(error), error, error.__traceback__)
        sys.exit(1)
    sys.exit(0)

become(*serve())
'''


def may_differ(name: str) -> bool:
    """Whether a child may set the environment variable ``name`` otherwise than the server had it."""
    return _MAY_DIFFER.match(name) is not None


class _Server:
    """This process's fork server, started at the first call it can serve."""

    def __init__(self) -> None:
        self.owner = os.getpid()
        self.folder = tempfile.mkdtemp(prefix="apic-fork-")
        self.path = os.path.join(self.folder, "socket")
        self.env = dict(os.environ)
        self.process = subprocess.Popen([sys.executable, "-c", SERVER, self.path], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, cwd=self.folder, env=self.env)
        ready = self.process.stdout.readline()
        self.process.stdout.close()
        self.running = ready == b"ready\n"
        if not self.running and ready != b"no pidfd\n":
            raise RuntimeError(f"the fork server did not start (exit status {self.process.wait()})")
        atexit.register(self.stop)

    def stop(self) -> None:
        if os.getpid() == self.owner:
            self.process.stdin.close()
            self.process.wait()
            shutil.rmtree(self.folder, ignore_errors=True)

    def serves(self, env: dict) -> bool:
        """Whether a child with ``env`` starts as one of this server's forks would."""
        if not self.running:
            return False
        differing = {name for name in env.keys() | self.env.keys() if env.get(name) != self.env.get(name)}
        if not all(may_differ(name) for name in differing):
            return False
        for entry in env.get("PYTHONPATH", "").split(os.pathsep):  # NumPy and Warp must be the server's own
            if entry and any(os.path.exists(os.path.join(entry, name)) for name in ("numpy", "warp", "warp.py")):
                return False
        return True


# Two servers, taken in turn: each has a hash seed of its own (drawn at its start, as every process's is), so two
# children in a row never share one, and a test of "a later process finds what an earlier one made" still fails
# for a key that depends on the seed, as it would with fresh processes.
_servers: list[_Server] = []
_turn = 0
_starting = threading.Lock()


def _the_servers() -> list[_Server]:
    global _servers
    with _starting:
        if not _servers or _servers[0].owner != os.getpid():
            _servers = [_Server(), _Server()]
        for k, server in enumerate(_servers):
            if server.running and server.process.poll() is not None:  # killed (by the OOM killer, a test): anew
                server.stop()
                _servers[k] = _Server()
        return _servers


def _next_server() -> _Server:
    global _turn
    servers = _the_servers()
    with _starting:
        _turn += 1
        return servers[_turn % len(servers)]


def _python_argv(args) -> list[str] | None:
    """``args`` less the interpreter when a fork can run it (``-c CODE``, ``-m MODULE`` or a script), else None."""
    if isinstance(args, (str, bytes)) or len(args) < 2 or os.fspath(args[0]) != sys.executable:
        return None
    argv = [os.fspath(arg) for arg in args[1:]]
    if argv[0] in ("-c", "-m"):
        return argv if len(argv) >= 2 else None
    return None if argv[0].startswith("-") else argv


def _plan(args, options: dict):
    """What a fork of ``args`` with ``options`` runs, ``(argv less the interpreter, environment)``, or None where a
    fork would not start the child a fresh process would."""
    argv = _python_argv(args)
    env = dict(options.get("env") if options.get("env") is not None else os.environ)
    unserved = [name for name, value in options.items() if name not in _SERVED and value not in (None, False)]
    if argv is None or unserved or os.environ.get("APIC_TEST_FORK") == "0" or not _the_servers()[0].serves(env):
        return None
    return argv, env


def forkable(args, **options) -> bool:
    """Whether ``run(args, **options)`` forks the child from this process's server."""
    return _plan(args, options) is not None


def run(args, **options) -> subprocess.CompletedProcess:
    """``subprocess.run(args, **options)``, in a fork of this process's server where that starts the same child."""
    plan = _plan(args, options)
    if plan is None:
        return subprocess.run(args, **options)
    served = {name: value for name, value in options.items() if name in _SERVED and name != "env"}
    return _forked(list(args), *plan, **served)


def _stream(option, default: int, opened: list):
    """The file descriptor a child's stream gets, and the file that catches it (or None)."""
    if option is None:
        return default, None
    if option == subprocess.PIPE:
        catch = tempfile.TemporaryFile()
        opened.append(catch)
        return catch.fileno(), catch
    if option == subprocess.DEVNULL:
        sink = open(os.devnull, "r+b")
        opened.append(sink)
        return sink.fileno(), None
    return (option if isinstance(option, int) else option.fileno()), None


def _forked(args, argv, env, *, cwd=None, capture_output=False, stdout=None, stderr=None, stdin=None, input=None,
            text=False, timeout=None, check=False, encoding=None, errors=None) -> subprocess.CompletedProcess:
    if capture_output:
        stdout = stderr = subprocess.PIPE
    opened: list = []
    try:
        if input is not None:
            feed = tempfile.TemporaryFile()
            opened.append(feed)
            feed.write(input.encode(encoding or locale.getpreferredencoding(False)) if isinstance(input, str)
                       else input)
            feed.seek(0)
            stdin = feed
        in_fd, _ = _stream(stdin, 0, opened)
        out_fd, out_catch = _stream(stdout, 1, opened)
        err_fd, err_catch = (out_fd, None) if stderr == subprocess.STDOUT else _stream(stderr, 2, opened)
        request = json.dumps({"argv": argv, "env": env, "cwd": os.path.abspath(os.fspath(cwd or os.getcwd()))})
        body = request.encode()
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.connect(_next_server().path)
            socket.send_fds(conn, [_LENGTH.pack(len(body))], [in_fd, out_fd, err_fd])
            conn.sendall(body)
            replies = _Lines(conn)
            pid = int(replies.next())
            conn.settimeout(timeout)
            try:
                returncode = int(replies.next())
            except TimeoutError:
                os.kill(pid, signal.SIGKILL)  # as subprocess.run does; the server still reaps it
                conn.settimeout(None)
                replies.next()
                returncode = None
        output, error = (_read(catch, text, encoding, errors) for catch in (out_catch, err_catch))
    finally:
        for file in opened:
            file.close()
    if returncode is None:
        raise subprocess.TimeoutExpired(args, timeout, output, error)
    if check and returncode:
        raise subprocess.CalledProcessError(returncode, args, output, error)
    return subprocess.CompletedProcess(args, returncode, output, error)


class _Lines:
    """The server's replies on one connection: the child's pid, then its exit status, a line each."""

    def __init__(self, conn: socket.socket) -> None:
        self.conn, self.buffer = conn, b""

    def next(self) -> bytes:
        while b"\n" not in self.buffer:
            chunk = self.conn.recv(64)
            if not chunk:
                raise RuntimeError("the fork server closed the connection")
            self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        return line


def _read(catch, text: bool, encoding, errors):
    """What a child wrote to a caught stream, decoded as ``subprocess`` decodes a text-mode pipe."""
    if catch is None:
        return None
    catch.seek(0)
    data = catch.read()
    if not (text or encoding or errors):
        return data
    decoded = data.decode(encoding or locale.getpreferredencoding(False), errors or "strict")
    return decoded.replace("\r\n", "\n").replace("\r", "\n")
