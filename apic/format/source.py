"""``capture_save(..., source_fallback=True)`` on the CPU: each module's generated C++ travels with
the graph, and a load where the saved object cannot be used compiles it with this machine's Warp.

Save: for every module, the ``.cpp`` Warp generated for it (next to its ``.o`` in the kernel cache,
or kept by a loaded graph) is written to ``<stem>_modules/<name>.<sha16>.cpp`` and the module's
entry in the ``.wrp`` gets an optional ``source`` map: the file, its size and SHA-256, and the
build options Warp compiled the module with (docs/FORMAT.md). The format version is unchanged: a
reader that does not know the field ignores it and loads the saved objects exactly as before.

Load: the saved objects are used where they can be. The source is compiled instead, for every
module, when the graph is refused only for reasons a local build fixes (the saving CPU had
instruction-set features this one lacks; native struct layouts of another warp-lang); and, for
one module, when its object is missing, fails its SHA-256 check or is rejected by Warp's loader.
The compiled object replaces the
saved one for this load; everything else (symbols, regions, handles) is checked as usual.
"""

from __future__ import annotations

import dataclasses
import hashlib
import platform
import re

from apic import _compat
from apic.errors import CaptureError, FormatError, IncompatibleGraphError
from apic.format import manifest as kernel_manifest
from apic.format import module_folder, schema, sealed_claims, source_cache
from apic.record.recording import module_source as recorded_source
from apic.targets import files
from apic.targets.cpu import cpu_family
from apic.targets.cpu import module_file_name

SOURCE_FILE = files.read_rule(r"\.cpp", schema.MAX_FILE_STEM)
# What build options a file may ask for: Warp's own values only. Compiler flags are the ones Warp's default
# (``wp.config.cpu_compiler_flags``) holds, token by token: a file's string never reaches the compiler as
# written (``-Xclang -load`` would load a library into this process).
MODES = ("release", "debug")
_FLAG_TOKEN = re.compile(r"-march=native|-mllvm=-(?:inline-threshold|inline-cold-callsite-threshold|"
                         r"slp-recursion-max-depth)=[0-9]{1,6}")
_BOOL_OPTIONS = ("fast_math", "fuse_fp", "verify_fp", "enable_tiles_in_stack_memory")


@dataclasses.dataclass(frozen=True)
class SourceEntry:
    """A module's saved generated C++ (``file`` in ``<stem>_modules/``) and its build options."""

    file: str
    sha256: str
    size: int
    options: dict


# --- save ---------------------------------------------------------------------------------------------
def module_source(info, why: str = "capture_save(source_fallback=True)") -> tuple[bytes, dict]:
    """The generated C++ of one recorded module and the options it was built with; ``why`` names the
    caller in the error raised when it is not there."""
    try:
        data, options = recorded_source(info.name, info.module_exec)
    except FileNotFoundError as error:
        raise CaptureError(f"{why}: {error}") from None
    if getattr(info.module_exec, "apic_source", None) is not None:
        return data, options  # a loaded graph's: its flags were checked when it was read
    try:
        options["extra_flags"] = checked_flags(options["extra_flags"])
    except ValueError as error:
        raise CaptureError(f"{why}: Warp module '{info.name}' was compiled with CPU compiler flags a graph file "
                           f"cannot carry: {error}") from None
    return data, options


def add_sources(graph, doc: dict, images: dict[str, bytes]) -> None:
    """Give every module entry of ``doc`` its ``source`` map and put each source file in ``images``."""
    for info, entry in zip(graph.recording.modules, doc["modules"]):
        data, options = module_source(info)
        digest = hashlib.sha256(data).hexdigest()
        file = module_file_name(info.name, digest, ".cpp")
        images[file] = data
        entry["source"] = {"file": file, "sha256": digest, "size": len(data), "options": dict(options)}


# --- read ---------------------------------------------------------------------------------------------
def fail(where: str, message: str):
    raise FormatError(f"invalid apic graph file: {where}: {message}")


def read_entry(value, where: str) -> SourceEntry | None:
    """The checked ``source`` map of a CPU module entry (None where there is none)."""
    return read_fields(value, where, SOURCE_FILE, _cpu_options)


def read_fields(value, where: str, file_name: re.Pattern, read_options) -> SourceEntry | None:
    """A ``source`` map whose file matches ``file_name`` and whose options ``read_options(options, where)``
    checks (None where there is none): the fields CPU and CUDA sources share."""
    if value is None:
        return None
    if not isinstance(value, dict):
        fail(where, f"expected a map, found {type(value).__name__}")
    missing = [k for k in ("file", "sha256", "size", "options") if k not in value]
    if missing:
        fail(where, f"missing field(s) {', '.join(missing)}")
    file, digest, size, options = value["file"], value["sha256"], value["size"], value["options"]
    if not isinstance(file, str) or not file_name.fullmatch(file) or file.startswith("."):
        fail(f"{where}.file", f"{file!r} is not a valid source file name")
    if not isinstance(digest, str) or not files.SHA256.fullmatch(digest):
        fail(f"{where}.sha256", "expected 64 lowercase hex digits")
    if not isinstance(size, int) or isinstance(size, bool) or not 0 <= size <= schema.MAX_SOURCE_BYTES:
        fail(f"{where}.size", f"{size!r} is not a size in bytes")
    if not isinstance(options, dict):
        fail(f"{where}.options", f"expected a map, found {type(options).__name__}")
    return SourceEntry(file, digest, size, read_options(options, f"{where}.options"))


def _cpu_options(options: dict, where: str) -> dict:
    """The checked build options of a CPU module's source: Warp's own values only."""
    checked = {}
    if options.get("mode") not in MODES:
        fail(f"{where}.mode", f"expected one of {MODES}")
    checked["mode"] = options["mode"]
    for key in _BOOL_OPTIONS:
        if not isinstance(options.get(key), bool):
            fail(f"{where}.{key}", "expected a boolean")
        checked[key] = options[key]
    for key, low, high in (("optimization_level", 0, schema.MAX_OPTIMIZATION_LEVEL),
                            ("block_dim", 1, schema.MAX_BLOCK_DIM)):
        number = options.get(key)
        if not isinstance(number, int) or isinstance(number, bool) or not low <= number <= high:
            fail(f"{where}.{key}", f"expected an integer in [{low}, {high}]")
        checked[key] = number
    flags = options.get("extra_flags", "")
    try:
        checked["extra_flags"] = checked_flags(flags)
    except ValueError as error:
        fail(f"{where}.extra_flags", str(error))
    return checked


def checked_flags(flags) -> str:
    """``flags`` rebuilt from the compiler flags a saved module may carry (Warp's default ones), or ValueError."""
    if not isinstance(flags, str):
        raise ValueError(f"expected a string of compiler flags, found {type(flags).__name__}")
    tokens = flags.split()
    unknown = [token for token in tokens if not _FLAG_TOKEN.fullmatch(token)]
    if unknown or len(tokens) > schema.MAX_SOURCE_FLAGS:
        shown = repr(unknown[0][:64]) if unknown else f"more than {schema.MAX_SOURCE_FLAGS} flags"
        raise ValueError(f"{shown} is not a compiler flag apic carries in a graph file (it accepts Warp's default "
                         "CPU flags only: -march=native and its -mllvm= inlining and vectorizer limits)")
    return " ".join(tokens)


# --- load ---------------------------------------------------------------------------------------------
def checked_source(module, fetch, origin: str, why: str) -> bytes:
    """``module``'s saved source, checked against its recorded size and SHA-256; ``why`` says why it is needed."""
    entry = module.source
    if entry is None:
        raise FormatError(f"{why}, and module '{module.name}' was saved without its source (source_fallback=True)")
    data = fetch(entry.file)
    if data is None:
        raise FormatError(f"{why}, and the generated source '{entry.file}' of module '{module.name}' was not found "
                          f"in {origin}")
    data = bytes(data)
    if len(data) != entry.size or hashlib.sha256(data).hexdigest() != entry.sha256:
        raise FormatError(f"{why}, and the generated source '{entry.file}' of module '{module.name}' in {origin} "
                          "does not match the SHA-256 recorded in the graph file")
    return data


def compile_saved(module, data: bytes, why: str, written_by: str) -> bytes:
    """``module``'s checked saved source ``data`` compiled here for this host; ``why`` says why it is needed
    and ``written_by`` is the warp-lang that generated the source (named when the compile fails)."""
    try:
        return source_cache.compiled(data, module.source.options)
    except Exception as error:  # Warp's compiler: any failure is this module's, reported with it
        family = cpu_family(platform.machine())
        portable = (f", or save it again with capture_save(..., cpu_target='{family.PORTABLE_LEVEL}'), whose "
                    f"{family.PORTABLE_HINT}" if family is not None else "")
        other = (f" The source was generated by warp-lang {written_by}, and Warp's generated C++ compiles only "
                 f"against the native headers of the warp-lang that generated it (these are {_compat.WARP_VERSION}'s): "
                 f"a graph's saved source is promised to compile under the warp-lang that saved it. Load the graph "
                 f"there{portable}." if written_by != _compat.WARP_VERSION else "")
        raise IncompatibleGraphError(
            f"{why}; compiling the saved source of module '{module.name}' with warp-lang "
            f"{_compat.WARP_VERSION} failed: {error}.{other}"
        ) from error


@dataclasses.dataclass
class LoadFiles:
    """What a load runs: ``images`` (module file -> bare object, or source file -> bare source), the
    module files whose object was compiled here (``compiled``), and the kernel manifest carried by the
    file each module's code came from (``manifests``: ``apic.format.manifest_check.load``'s ``carried_by``)."""

    images: dict
    compiled: set
    manifests: dict
    kernels: tuple = ()  # the graph's kernels with the split claims the manifests seal (sealed_claims.bind)


def images(saved, fetch, origin: str, refused: IncompatibleGraphError | None) -> LoadFiles:
    """The module objects to load, the saved ones or compiled from source where they cannot be used, and
    the kernel manifest each carries.

    ``refused`` is the reason the graph as saved cannot run here (None if it can): every module is
    then compiled from its source. Otherwise a module whose object is missing or corrupt is. Each
    compiled module's source is kept under its source file name, for a later save of the graph. The
    files are bare: a manifest carried in a file is taken off it.
    """
    found: dict[str, bytes] = {}
    manifests: dict[int, tuple] = {}
    compiled: set[str] = set()
    for index, module in enumerate(saved.modules):
        if module.file in found:
            continue
        why = None
        if refused is not None:
            why = str(refused).rstrip(".")
        else:
            try:
                saved_object = module_folder.verified_images(
                    dataclasses.replace(saved, modules=(module,)), fetch, origin
                )[module.file]
            except FormatError as error:
                if module.source is None:
                    raise
                why = f"the packaged binary: {error}"
            else:
                bare, manifest = kernel_manifest.carried(saved_object, f"module file '{module.file}'")
                # the CPU the object needs, sealed where its own SHA-256 covers it (not the .wrp's target)
                why = kernel_manifest.cpu_refusal(manifest, f"module file '{module.file}'")
                if why is None:
                    found[module.file] = bare
                    bound = None
                    if manifest is not None:
                        manifests[index] = (manifest, {"module_sha256": hashlib.sha256(bare).hexdigest()})
                        bound = sealed_claims.sealed(manifest, f"module file '{module.file}'")[0]
                    _keep_if_bound(module, fetch, found, bound)
                    continue
                if module.source is None:
                    raise IncompatibleGraphError(why)
        data, manifest = kernel_manifest.carried(checked_source(module, fetch, origin, why),
                                                 f"source file '{module.source.file}'")
        if not _utf8(data):  # Warp generates UTF-8 C++; range entries are made from the text
            raise FormatError(f"invalid apic graph file: the generated source '{module.source.file}' of module "
                              f"'{module.name}' is not UTF-8 text")
        if manifest is not None:
            manifests[index] = (manifest, {"source_sha256": hashlib.sha256(data).hexdigest()})
        found[module.file] = compile_saved(module, data, why, saved.writer.get("warp"))
        found[module.source.file] = data
        compiled.add(module.file)
    return LoadFiles(found, compiled, manifests)


def _keep_if_bound(module, fetch, found: dict[str, bytes], bound: str | None) -> None:
    """Keep a module's saved source, if it is there, intact and the one its object's kernel manifest names
    (``bound``: that bare source's SHA-256), for a threaded replay's range entries and a later save (not
    needed to load). The ``.wrp`` names the source file and its SHA-256, but it is data: the source a
    threaded replay compiles must be the one saved with the object, not one a ``.wrp`` points at."""
    if module.source is None or bound is None:
        return
    data = fetch(module.source.file)
    if data is not None and hashlib.sha256(bytes(data)).hexdigest() == module.source.sha256:
        bare = kernel_manifest.carried(bytes(data), module.source.file)[0]
        if hashlib.sha256(bare).hexdigest() == bound and _utf8(bare):
            found[module.source.file] = bare


def _utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def rebuilt_after_rejection(module, images: dict[str, bytes], error: Exception, written_by: str) -> bytes:
    """The object compiled from ``module``'s saved source after Warp's loader rejected the saved one.

    Re-raises ``error`` where the module has no intact saved source.
    """
    data = images.get(module.source.file) if module.source is not None else None
    if data is None:
        raise error
    return compile_saved(module, data, str(error), written_by)


def kept_source(module, images: dict[str, bytes]):
    """What a loaded module keeps for a later ``source_fallback`` save: ``(source, options)`` or None."""
    if module.source is None:
        return None
    data = images.get(module.source.file)
    return None if data is None else (data, dict(module.source.options))
