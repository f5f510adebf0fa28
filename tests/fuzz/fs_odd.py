"""Odd filesystem entries in a saved graph's ``<stem>_modules/`` folder.

Each mutation copies a seed (its ``.wrp`` and its modules folder) into a fresh folder and changes one
thing on disk: a module file replaced by a symlink (to another module, to ``/dev/zero``, dangling),
a FIFO (a blocking open or read is a hang), a directory, a file longer or shorter than recorded, or
the whole modules folder replaced by a symlink. The loader must refuse each with an ``ApicError``
(or load, where the entry is harmless) and never block, crash or allocate without bound.
"""

from __future__ import annotations

import os
import random
import shutil

STRATEGIES = ("fs-symlink-other", "fs-symlink-devzero", "fs-symlink-dangling", "fs-fifo", "fs-directory",
              "fs-grow", "fs-shrink", "fs-folder-symlink", "fs-missing")


def make(rng: random.Random, seed_wrp: str, dest: str, n: int, strategy: str | None = None) -> tuple[str, str]:
    """Write one odd copy of ``seed_wrp`` under ``dest``; returns (strategy, path of the copied ``.wrp``).
    ``strategy`` (default: drawn from ``rng``) replays a corpus entry."""
    strategy = strategy or rng.choice(STRATEGIES)
    folder = os.path.join(dest, f"odd-{n}")
    shutil.rmtree(folder, ignore_errors=True)
    os.makedirs(folder)
    wrp = os.path.join(folder, "g.wrp")
    shutil.copyfile(seed_wrp, wrp)
    source_modules = seed_wrp[: -len(".wrp")] + "_modules"
    modules = os.path.join(folder, "g_modules")
    if strategy == "fs-folder-symlink":
        os.symlink(os.path.realpath(source_modules), modules)
        return strategy, wrp
    shutil.copytree(source_modules, modules, symlinks=False)
    names = sorted(os.listdir(modules))
    if not names:
        return strategy, wrp
    victim = os.path.join(modules, rng.choice(names))
    other = os.path.join(modules, rng.choice(names))
    if strategy == "fs-grow":
        with open(victim, "ab") as f:
            f.write(os.urandom(rng.choice([1, 7, 4096])))
        return strategy, wrp
    if strategy == "fs-shrink":
        size = os.path.getsize(victim)
        with open(victim, "r+b") as f:
            f.truncate(rng.randrange(0, max(size, 1)))
        return strategy, wrp
    os.unlink(victim)
    if strategy == "fs-symlink-other":
        os.symlink(other if other != victim else seed_wrp, victim)
    elif strategy == "fs-symlink-devzero":
        os.symlink("/dev/zero", victim)
    elif strategy == "fs-symlink-dangling":
        os.symlink(os.path.join(folder, "nowhere"), victim)
    elif strategy == "fs-fifo":
        os.mkfifo(victim)
    elif strategy == "fs-directory":
        os.mkdir(victim)
    return strategy, wrp
