"""apic/targets/: each ABI tag, layout constant and handle-call name is defined once, there, and the
modules that use them read them from there; the probes of the installed Warp agree with the targets."""

from __future__ import annotations

import ast
import ctypes
import hashlib
import os

import pytest

from apic import _compat
from apic.format import read_ops, reader, schema
from apic.record import handles
from apic.replay import lowering
from apic.targets import cpu, cuda
from apic.targets.target import CPU, CUDA, TARGETS, of_abi, of_device_kind
from persist_helpers import REPO

pytestmark = [pytest.mark.warp_version]

APIC = os.path.join(REPO, "apic")
TARGETS_DIR = os.path.join(APIC, "targets")

# Strings only a target module may spell (a docstring may still name them).
SPELLED_ONCE = ("bounds-by-pointer-v1", "bounds-by-value-v1", "cuda-params-v1", "_cpu_forward", "_cpu_backward",
                "_cuda_kernel_forward", "_cuda_kernel_backward")


def _string_constants(path: str) -> list[tuple[int, str]]:
    tree = ast.parse(open(path, encoding="utf-8").read(), path)
    docstrings = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = getattr(node, "body", [])
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                docstrings.add(id(body[0].value))
    return [(n.lineno, n.value) for n in ast.walk(tree)
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docstrings]


def test_abi_tags_and_entry_suffixes_are_spelled_only_in_targets():
    found = []
    for folder, _, files in os.walk(APIC):
        if os.path.abspath(folder) == os.path.abspath(TARGETS_DIR):
            continue
        for name in files:
            if name.endswith(".py"):
                path = os.path.join(folder, name)
                found += [f"{os.path.relpath(path, APIC)}:{line}: {value!r}" for line, value in _string_constants(path)
                          if value in SPELLED_ONCE]
    assert found == []


def test_the_users_read_the_targets_constants():
    assert reader.KERNEL_ABIS is cpu.KERNEL_ABIS
    assert lowering.SUPPORTED_ABIS == cpu.KERNEL_ABIS
    assert _compat.KERNEL_ABI in cpu.KERNEL_ABIS
    assert schema.ARRAY_T_SIZE is cpu.ARRAY_T_SIZE
    assert schema.INDEXEDARRAY_T_POINTER_SLOTS is cpu.INDEXEDARRAY_T_POINTER_SLOTS
    assert handles.NATIVE_CALLS is cpu.HANDLE_CALLS
    assert set(read_ops._HANDLE_CALLS) == set(cpu.HANDLE_CALLS)  # the reader's argument ranges cover exactly them


def test_the_installed_warp_has_the_descriptor_layout_the_cpu_target_says():
    assert _compat.ARRAY_T_SIZE == cpu.ARRAY_T_SIZE == ctypes.sizeof(_compat.wp_types.array_t)
    assert _compat.INDEXEDARRAY_T_SIZE == cpu.INDEXEDARRAY_T_SIZE
    assert cpu.ARRAY_T_SIZE + cpu.INDEXED_TAIL.size == cpu.INDEXEDARRAY_T_SIZE


def test_module_file_names_are_what_a_reader_accepts():
    digest = hashlib.sha256(b"x").hexdigest()
    for name in ("kernels", "a b/c", "..", "x" * 300):
        file = cpu.module_file_name(name, digest)
        assert cpu.MODULE_FILE.fullmatch(file), file
        cuda_file = file[: -len(cpu.MODULE_EXTENSION)] + ".ptx"
        assert cuda.MODULE_FILE.fullmatch(cuda_file), cuda_file


def test_one_target_per_abi_and_device_kind():
    assert of_abi(_compat.KERNEL_ABI) is CPU and of_abi(cuda.ABI) is CUDA and of_abi("other-v1") is None
    assert of_device_kind(None) is CPU and of_device_kind("cuda") is CUDA and of_device_kind("tpu") is None
    assert CPU.kernel_suffix(False) == cpu.KERNEL_SUFFIX[False] and CUDA.kernel_suffix(True) == cuda.KERNEL_SUFFIX[True]
    assert len({t.name for t in TARGETS}) == len(TARGETS)
    with pytest.raises(AttributeError):
        CPU.name = "gpu"  # frozen


@pytest.mark.parametrize("kind, arch, suffix, gpu, runs", [
    ("cubin", 80, "", 80, True), ("cubin", 80, "", 86, True), ("cubin", 80, "", 89, True),
    ("cubin", 86, "", 80, False), ("cubin", 80, "", 90, False), ("cubin", 90, "", 80, False),
    ("cubin", 90, "a", 90, True), ("cubin", 90, "a", 91, False), ("cubin", 100, "f", 103, True),
    ("cubin", 100, "f", 120, False),
    ("ptx", 80, "", 80, True), ("ptx", 80, "", 120, True), ("ptx", 86, "", 80, False),
    ("ptx", 90, "a", 90, True), ("ptx", 90, "a", 100, False),
])
def test_which_gpus_a_module_runs_on(kind, arch, suffix, gpu, runs):
    assert (cuda.arch_problem(kind, arch, suffix, gpu) is None) == runs
