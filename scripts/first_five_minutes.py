"""A new user's first five minutes with an installed apic: the README's "First five minutes", run as written.

Usage: PYTHON scripts/first_five_minutes.py [--keep DIR]

PYTHON is the interpreter of an environment where apic is installed (scripts/test_wheel.sh installs the
wheel); its folder goes first on PATH, so `python` in the README's commands is that interpreter, as in an
activated venv. The walk runs in an empty folder (DIR with --keep, else a temporary one), away from any
checkout, so `import apic` finds the install; the script checks that it does.

From README.md's section between the first-five-minutes markers, the one Python block is saved as step.py
and every line of the shell blocks runs in order; each must exit 0 and show what the README says it shows
(EXPECT below). Graphviz's `dot` renders the picture: without it, that command runs without `--png`, saying so.
Exit status 0 when every step passed, 1 otherwise.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile

README = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "README.md")
BEGIN, END = "<!-- first-five-minutes", "<!-- /first-five-minutes -->"

# What each README command must print (a substring of stdout) and write (files, non-empty), by the
# command's first words: the README's claims, checked.
EXPECT = {
    "python -m apic demo": (["final state identical (bit for bit): yes"], []),
    "python step.py": (["saved step.wrp: 8 ops per step"], ["step.wrp"]),
    "python -m apic inspect step.wrp --dot": ([], ["step.dot", "step.png"]),
    "python -m apic inspect step.wrp": (["loads here: yes", "dt: float32"], []),
    "python -m apic replay step.wrp --iters 100 --time": (["replayed 100 iteration(s) of 8 ops"], ["x.npy"]),
    "python -m apic replay step.wrp --iters 100 --profile": (["launch       fall", "launch       bounce"],
                                                             ["profile.png"]),
}


def readme_walk() -> tuple[str, list[str]]:
    """The section's Python block and its shell commands (comments and blank lines dropped), in order."""
    text = open(README, encoding="utf-8").read()
    start, end = text.find(BEGIN), text.find(END)
    if start < 0 or end < start:
        raise SystemExit(f"{README}: no first-five-minutes section (markers {BEGIN!r} ... {END!r})")
    blocks = re.findall(r"```(\w+)\n(.*?)```", text[start:end], flags=re.S)
    python = [body for lang, body in blocks if lang == "python"]
    if len(python) != 1:
        raise SystemExit(f"{README}: the first-five-minutes section has {len(python)} Python blocks, expected 1")
    commands = []
    for lang, body in blocks:
        if lang == "bash":
            commands += [line.split("  #")[0].strip() for line in body.splitlines() if line.strip()]
    return python[0], commands


def expectation(command: str) -> tuple[list[str], list[str]]:
    for prefix in sorted(EXPECT, key=len, reverse=True):  # the longest prefix: inspect --dot before inspect
        if command.startswith(prefix):
            return EXPECT[prefix]
    raise SystemExit(f"README command {command!r} has no expectation in {__file__} (EXPECT): add one")


def main(argv: list[str]) -> int:
    folder = argv[argv.index("--keep") + 1] if "--keep" in argv else tempfile.mkdtemp(prefix="apic-first-five-")
    os.makedirs(folder, exist_ok=True)
    env = dict(os.environ, PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""))
    env.pop("PYTHONPATH", None)  # the install, not a checkout
    failures = []

    def run(command: str) -> subprocess.CompletedProcess:
        done = subprocess.run(["bash", "-c", command], cwd=folder, env=env, capture_output=True, text=True)
        print(f"$ {command}\n{done.stdout}", end="" if done.stdout.endswith("\n") or not done.stdout else "\n")
        return done

    # 0. the install is what runs: apic from site-packages (not a checkout), and its version
    site = os.path.realpath(sysconfig.get_paths()["purelib"])
    done = run('python -c "import apic; print(apic.__file__)"')
    where = os.path.realpath(done.stdout.strip() or "?")
    if done.returncode != 0 or os.path.commonpath([where, site]) != site:
        failures.append(f"apic imported from {where}, not from this environment's site-packages {site}\n{done.stderr}")
    done = run("python -m apic --version")
    if done.returncode != 0 or not done.stdout.startswith("apic "):
        failures.append(f"python -m apic --version: {done.stdout}{done.stderr}")

    python, commands = readme_walk()
    with open(os.path.join(folder, "step.py"), "w", encoding="utf-8") as f:
        f.write(python)
    for command in commands:
        shows, writes = expectation(command)
        if "--png" in command and shutil.which("dot") is None:
            print(f"SKIPPED --png of `{command}`: Graphviz's 'dot' is not installed (apt-get install graphviz); "
                  "the picture is not checked, the DOT text is")
            command = re.sub(r"\s--png\s+\S+", "", command)
            writes = [name for name in writes if not name.endswith(".png")]
        done = run(command)
        problems = [f"exit status {done.returncode}"] if done.returncode != 0 else []
        problems += [f"stdout lacks {s!r}" for s in shows if s not in done.stdout]
        for name in writes:
            path = os.path.join(folder, name)
            if not os.path.exists(path) or os.path.getsize(path) == 0:
                problems.append(f"{name} not written")
            elif name.endswith(".png") and open(path, "rb").read(8) != b"\x89PNG\r\n\x1a\n":
                problems.append(f"{name} is not a PNG image")
        if "Traceback" in done.stderr:
            problems.append("a traceback on stderr")
        if problems:
            failures.append(f"{command}: {'; '.join(problems)}\nstderr:\n{done.stderr}")

    print(f"walked in {folder}")
    for failure in failures:
        print(f"FAILED: {failure}", file=sys.stderr)
    print("first five minutes: " + ("ok" if not failures else f"{len(failures)} step(s) failed"))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
