"""Saved module files: the names apic writes into ``<stem>_modules/`` and those a reader accepts there,
for every target (the one place that spells the naming rule; ``tests/test_facts_once.py`` keeps it so).

A module's binary, generated source and kernel manifest are named ``<stem>.<digest><suffix>``: the
stem is the module's name with every character outside ``NAME_CHARS`` made ``_``, dots stripped at
both ends, cut to ``WRITTEN_STEM_MAX`` characters (a CUDA source's to its own limit); ``digest`` is the
first ``DIGEST_DIGITS`` hex digits of the file's SHA-256 (a manifest's name carries its module file's
digest, then its own). A reader accepts a stem of up to a limit the format names, not starting with a
dot or a dash; what may clean a folder (``apic.format.ownership``) accepts only what was written.
"""

from __future__ import annotations

import re

NAME_CHARS = "A-Za-z0-9_.-"  # a regular-expression class body: the characters a saved file's name keeps
DIGEST_DIGITS = 16
DIGEST = rf"[0-9a-f]{{{DIGEST_DIGITS}}}"  # the SHA-256 prefix in a file name, as a pattern
SHA256 = re.compile(r"[0-9a-f]{64}")  # a whole SHA-256, as the .wrp and the manifests write it
WRITTEN_STEM_MAX = 96
READ_STEM_MAX = 200  # the longest stem a reader accepts (apic.format.schema.MAX_FILE_STEM)
WRITTEN_STEM = rf"[A-Za-z0-9_-][{NAME_CHARS}]{{0,{WRITTEN_STEM_MAX - 1}}}"  # a stem file_name writes


def file_name(name: str, sha256: str, suffix: str, stem_max: int = WRITTEN_STEM_MAX) -> str:
    """The content-addressed name of a saved file of module ``name`` whose contents hash to ``sha256``."""
    stem = re.sub(f"[^{NAME_CHARS}]", "_", name).strip(".")[:stem_max] or "module"
    return f"{stem}.{sha256[:DIGEST_DIGITS]}{suffix}"


def read_rule(suffix: str, stem_max: int) -> re.Pattern:
    """The names a reader accepts for a file ending in ``suffix`` (a pattern) with a stem of at most
    ``stem_max`` characters."""
    return re.compile(rf"[A-Za-z0-9_][{NAME_CHARS}]{{0,{stem_max - 1}}}{suffix}")
