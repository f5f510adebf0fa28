"""``capture_save(..., source_fallback=True)`` on CUDA: each module's generated ``.cu`` travels with the
graph, and a load where the saved CUBIN / PTX cannot be used compiles it for the local GPU.

Save: for every module, the ``.cu`` Warp generated for it (next to its ``.cubin`` / ``.ptx`` in the
kernel cache, or kept by a loaded graph) is written to ``<stem>_modules/<warp name>.<sha16>.cu`` (Warp's
own file name, under which the loader compiles it, with the source's SHA-256 added) and the
module's entry gets the optional ``source`` map of CPU graphs (``apic.format.source``; docs/FORMAT.md
2.5.1), with the options Warp's ``build_cuda`` takes. A module whose binary the source alone cannot
rebuild (``strip_hash``, the LLVM CUDA backend, extra include folders, linked LTO-IR / fatbin inputs
(MathDx), a quoted include that is not one of Warp's headers) is refused at save, every such module
named at once.

Load: a module is compiled from its source, with the local Warp's NVRTC, when the GPU cannot run its
saved code (``apic.targets.cuda.arch_problem``), when its object is missing or fails its size /
SHA-256 check, or when the driver rejects it (``cuModuleLoadData``). It is compiled to a CUBIN for the
GPU's own architecture where NVRTC supports it (and ``wp.config.cuda_output`` does not ask for PTX),
else to PTX for the newest architecture NVRTC supports up to the GPU's, which the driver compiles
further. The compiled module replaces the saved one for this load (its entry says the new
architecture, so a later save records what runs); kernels, parameter layouts and everything else are
checked as usual.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import re

import warp as wp

from apic import _compat
from apic.errors import CaptureError, FormatError, IncompatibleGraphError
from apic.format import module_folder, schema
from apic.format import source as source_format
from apic.targets import files

SOURCE_FILE = files.read_rule(r"\.cu", schema.MAX_FILE_STEM)
_BINARY_SUFFIX = re.compile(r"\.sm\d+[a-z]?\.(cubin|ptx)$")
_DIGEST_SUFFIX = re.compile(rf"\.{files.DIGEST}\.cu$")
# what marks a module whose binary links LTO-IR or fatbin inputs: Warp 1.19's marker, or (earlier
# releases) the MathDx forward declarations Warp writes into the source
_LINK_INPUTS = re.compile(
    rb"^[ \t]*#[ \t]*define[ \t]+WP_LTO_LINK_INPUTS\b"
    rb'|\bextern\s*"C"\s*\{[^{}]*?\bvoid\s+(?:dot|fft|getrf|potrf|potrs|trsm)_\w+\s*\([^{};]*\)\s*;',
    re.M,
)
_QUOTED_INCLUDE = re.compile(rb'^[ \t]*#[ \t]*include[ \t]*"([^"\r\n]+)"', re.M)
# the build options a CUDA source entry holds: the arguments of Warp's build_cuda (bools after the first two)
_OPTIONS = ("mode", "optimization_level", "verify_fp", "fast_math", "fuse_fp", "lineinfo")


# --- save ---------------------------------------------------------------------------------------------
def _blockers(source: bytes, options: dict) -> list[str]:
    """Why the source alone cannot rebuild a module's binary (empty where it can)."""
    reasons = []
    if options["strip_hash"]:
        reasons.append("the module uses strip_hash=True, so its binary cannot be matched to its source")
    if options["llvm_cuda"]:
        reasons.append("the module was compiled by the LLVM CUDA backend")
    if options["extra_cuda_include_dirs"]:
        reasons.append("the module needs extra CUDA include folders")
    if _LINK_INPUTS.search(source):
        reasons.append("its binary links LTO-IR or fatbin inputs (MathDx), which the source does not hold")
    native = _compat.warp_native_dir()
    for header in sorted(set(_QUOTED_INCLUDE.findall(source))):
        name = header.decode("utf-8", "replace")
        if name.startswith("/") or ".." in name.split("/") or not os.path.isfile(os.path.join(native, name)):
            reasons.append(f"it includes {name!r}, which is not one of Warp's headers")
    return reasons


def program_name(file: str) -> str:
    """The name a saved source ``<stem>.<sha16>.cu`` is compiled under: ``<stem>.cu``, the name Warp
    compiled it under (NVRTC records it in the binary)."""
    return _DIGEST_SUFFIX.sub(".cu", file)


def _module_source(graph, index: int, info) -> tuple[bytes, dict, str]:
    """The generated ``.cu`` of module ``index`` of a CUDA graph, the options it was built with and the
    name Warp compiled it under."""
    kept = getattr(graph, "module_source", None)  # a loaded graph keeps what it was loaded with
    if kept is not None:
        found = kept(index)
        if found is None:
            raise CaptureError("this loaded graph has no saved source for it (the file it was loaded from was "
                               "saved without source_fallback=True)")
        return found
    binary = info.module_exec.binary_path()
    path = _BINARY_SUFFIX.sub(".cu", binary)
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError:
        raise CaptureError(f"its generated source is not in the kernel cache next to its binary ({binary}); "
                           "was the cache cleared after the capture?") from None
    options = _compat.cuda_build_options(info.module_exec.module)
    blockers = _blockers(data, options)
    if blockers:
        raise CaptureError("; ".join(blockers))
    return data, {key: options[key] for key in _OPTIONS}, os.path.basename(path)


def add_sources(graph, doc: dict, images: dict[str, bytes]) -> None:
    """Give every module entry of a CUDA ``doc`` its ``source`` map and put each ``.cu`` in ``images``.

    Every module that cannot have one is named in one ``CaptureError``; nothing is added then.
    """
    found, problems = [], []
    for index, info in enumerate(graph.recording.modules):
        try:
            found.append(_module_source(graph, index, info))
        except CaptureError as error:
            problems.append(f"Warp module '{info.name}': {error}")
    if problems:
        raise CaptureError("capture_save(source_fallback=True) of a CUDA graph: no source that rebuilds the binary "
                           "of " + "; ".join(problems))
    for (data, options, name), entry in zip(found, doc["modules"]):
        digest = hashlib.sha256(data).hexdigest()
        file = files.file_name(name[: -len(".cu")], digest, ".cu", stem_max=160)
        images[file] = data
        entry["source"] = {"file": file, "sha256": digest, "size": len(data), "options": dict(options)}


# --- read ---------------------------------------------------------------------------------------------
def _options(options: dict, where: str) -> dict:
    """The checked build options of a CUDA module's source: the arguments of Warp's ``build_cuda``."""
    if options.get("mode") not in source_format.MODES:
        source_format.fail(f"{where}.mode", f"expected one of {source_format.MODES}")
    level = options.get("optimization_level")
    if not isinstance(level, int) or isinstance(level, bool) or not 0 <= level <= 3:
        source_format.fail(f"{where}.optimization_level", "expected an integer in [0, 3]")
    for key in _OPTIONS[2:]:
        if not isinstance(options.get(key), bool):
            source_format.fail(f"{where}.{key}", "expected a boolean")
    return {key: options[key] for key in _OPTIONS}


def read_entry(value, where: str):
    """The checked ``source`` map of a CUDA module entry (a ``.cu``; None where there is none)."""
    return source_format.read_fields(value, where, SOURCE_FILE, _options)


# --- load ---------------------------------------------------------------------------------------------
class Images(dict):
    """The module files of a CUDA load (file name -> bytes), and what a compile from source needs:
    ``unusable`` (file -> why its saved object was not read), ``sources`` (source file -> the bytes
    found, unchecked), ``origin`` (where they came from) and ``compiled`` (files compiled here)."""

    def __init__(self, *args, origin: str = "the modules", **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.origin = origin
        self.unusable: dict[str, str] = {}
        self.sources: dict[str, bytes | None] = {}
        self.compiled: set[str] = set()


def images(saved, fetch, origin: str) -> Images:
    """The saved module objects, checked; a module with a source whose object is missing or corrupt is
    left out (noted in ``unusable``) for :func:`for_device` to compile. Sources are read as they are."""
    found = Images(origin=origin)
    for module in saved.modules:
        if module.source is not None:
            data = fetch(module.source.file)
            found.sources[module.source.file] = None if data is None else bytes(data)
            if found.sources[module.source.file] is not None and \
                    hashlib.sha256(found.sources[module.source.file]).hexdigest() == module.source.sha256:
                found[module.source.file] = found.sources[module.source.file]  # kept for a later save
        if module.file in found or module.file in found.unusable:
            continue
        try:
            found.update(module_folder.verified_images(dataclasses.replace(saved, modules=(module,)), fetch, origin))
        except FormatError as error:
            if module.source is None:
                raise
            found.unusable[module.file] = f"the packaged binary: {error}"
    return found


def compile_target(gpu_arch: int, suffix: str) -> tuple[int, str, str]:
    """``(arch, suffix, kind)`` to compile a module for an ``sm_<gpu_arch>`` GPU, as Warp would for it."""
    archs = _compat.nvrtc_archs()
    if gpu_arch in archs and wp.config.cuda_output != "ptx":
        arch, kind = gpu_arch, "cubin"
    else:
        older = [a for a in archs if a <= gpu_arch]
        if not older:
            raise IncompatibleGraphError(
                f"warp-lang {_compat.WARP_VERSION} cannot compile CUDA code for sm_{gpu_arch} "
                f"(its NVRTC compiles for {', '.join(f'sm_{a}' for a in archs) or 'no architecture'})"
            )
        arch, kind = max(older), "ptx"
    # an arch- or family-specific build ("a" / "f") only where it is valid for this very GPU
    keep = arch == gpu_arch and ((suffix == "a" and arch >= 90) or (suffix == "f" and arch >= 100))
    return arch, suffix if keep else "", kind


def _compile(module, found: Images, gpu_arch: int, why: str):
    """The entry of ``module`` compiled here from its saved source; its bytes go into ``found``."""
    data = source_format.checked_source(module, found.sources.get, found.origin, why)
    arch, suffix, kind = compile_target(gpu_arch, module.arch_suffix)
    try:
        image = _compat.compile_cuda_source(data, module.source.options, arch, suffix, kind,
                                            program_name(module.source.file))
    except Exception as error:  # Warp's compiler: any failure is this module's, reported with it
        raise IncompatibleGraphError(
            f"{why}; compiling the saved source of module '{module.name}' for sm_{arch}{suffix} with warp-lang "
            f"{_compat.WARP_VERSION} failed: {error}"
        ) from error
    file = f"{module.source.file[: -len('.cu')]}.sm{arch}{suffix}.{kind}"
    found[file] = image
    found.compiled.add(file)
    return dataclasses.replace(module, file=file, sha256=hashlib.sha256(image).hexdigest(), size=len(image),
                               arch=arch, arch_suffix=suffix)


def for_device(saved, found, gpu_arch: int, check_arch):
    """``(saved, images)`` for an ``sm_<gpu_arch>`` GPU: every module whose saved object cannot be used
    here and that has a source compiled from it; then ``check_arch`` refuses the rest as before."""
    if not isinstance(found, Images):
        found = Images(found)
    modules = list(saved.modules)
    for index, module in enumerate(modules):
        if module.source is None:
            continue
        why = found.unusable.get(module.file)
        if why is None:
            try:
                check_arch(dataclasses.replace(saved, modules=(module,)), gpu_arch)
                continue
            except IncompatibleGraphError as error:
                why = str(error).rstrip(".")
        modules[index] = _compile(module, found, gpu_arch, why)
    saved = dataclasses.replace(saved, modules=tuple(modules))
    check_arch(saved, gpu_arch)
    return saved, found


def rebuilt_after_rejection(saved, index: int, found, gpu_arch: int, error: Exception):
    """``saved`` with module ``index`` compiled here from its source after the driver rejected its object.

    Re-raises ``error`` where the module has no source, or was compiled here already.
    """
    module = saved.modules[index]
    if module.source is None or module.file in found.compiled:
        raise error
    modules = list(saved.modules)
    modules[index] = _compile(module, found, gpu_arch, str(error).rstrip("."))
    return dataclasses.replace(saved, modules=tuple(modules))


def kept_source(module, found):
    """What a loaded module keeps for a later ``source_fallback`` save: ``(source, options, name)`` or None."""
    kept = source_format.kept_source(module, found)
    return None if kept is None else (*kept, program_name(module.source.file))
