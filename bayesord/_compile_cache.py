"""JAX's persistent compilation cache, on by default for the library and the command.

A first fit in a fresh process spends most of its time compiling.  With the cache on, the
compiled programs are written to disk and a later process with the same shapes, the same
JAX version and the same ``XLA_FLAGS`` loads them instead of compiling again.

Where: ``$BAYESORD_COMPILE_CACHE`` when set (``off`` turns the cache off), else
``$XDG_CACHE_HOME/bayesord/jax``, else ``~/.cache/bayesord/jax``.  A cache folder that JAX
was already given (``JAX_COMPILATION_CACHE_DIR`` or ``jax.config``) is left in charge.
The setting is read by JAX when it compiles its first program, so it applies to processes
that import bayesord's models before compiling anything of their own.

Only the standard library is imported here until :func:`enable` runs, so the command can
answer ``--help`` without starting JAX.

**Quick compilation for small problems.**  Most of a first fit on a few thousand rows is
XLA:CPU compiling, and most of that is LLVM generating optimised code.  Without LLVM
optimisation and with XLA's older loop emitters (:data:`QUICK_OPTIONS`), the evidence-mode
probit fit on 4,096 x 11 rows compiles in 3.9 s instead of 7.7 s and then runs in 76 ms
instead of 22 ms (at 10^5 rows: 4.4 s instead of 9.2 s, runs in 0.84 s instead of 0.27 s;
results equal to rounding).  :func:`quick_variant` gives such a program where the backend
accepts the options, and :func:`program_for_rows` picks it up to :data:`QUICK_MAX_ROWS`
rows, where a fit's run time stays far below the compile time it saves.

**Stored programs.**  With the cache warm, a process still traces and lowers each program
before the cache can answer, and for the probit fit that is most of the wait (on 4,096 x 11
rows, 0.9 s of a 1.0 s warm first fit).  :func:`stored_fit_program` keeps the lowered
program itself, serialised by :mod:`jax.export`, in ``<cache>/exported``; a later process
reads it back (a millisecond) instead of tracing, and its compilation comes from the cache
as before: the warm first fit above took 0.37 s instead of 0.92 s (the cold one 0.17 s
more, to write it).  Each stored program is keyed by the function, its static settings,
the shapes and dtypes of its inputs, the JAX version and backend, ``XLA_FLAGS`` and a digest
of bayesord's own source files, so an edited library never runs an older program.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import threading
import warnings
import weakref
from pathlib import Path

__all__ = ["cache_dir", "compile_seconds", "enable", "LIGHT_OPTIONS", "QUICK_MAX_ROWS", "QUICK_OPTIONS",
           "compiled_with", "quick_variant", "program_for_rows", "release_programs_if_crowded",
           "stored_fit_program"]

QUICK_MAX_ROWS = 16384
QUICK_OPTIONS = {"xla_backend_optimization_level": 0, "xla_cpu_use_fusion_emitters": False}
# XLA's older loop emitters alone, LLVM still optimising: for many small fits side by side
# (the probability layer's six probit fits, bayesord._probit.fit_probit_weights) the first
# calibrate of a process took about 2 s instead of 3.0 s, and the compiled program 2.6 ms
# instead of 1.3 ms (11 ms quick-compiled).
LIGHT_OPTIONS = {"xla_cpu_use_fusion_emitters": False}
# stored_fit_program's choices of compiler options.
COMPILE_MODES = ("quick", "light", "optimised")


def cache_dir(environ=None):
    """The folder for compiled programs, or None when ``BAYESORD_COMPILE_CACHE=off``."""
    environ = os.environ if environ is None else environ
    chosen = environ.get("BAYESORD_COMPILE_CACHE", "").strip()
    if chosen.lower() == "off":
        return None
    if chosen:
        return Path(chosen).expanduser()
    base = environ.get("XDG_CACHE_HOME", "").strip() or Path("~/.cache").expanduser()
    return Path(base) / "bayesord" / "jax"


def enable():
    """Point JAX's persistent compilation cache at :func:`cache_dir` (once per process), and
    start counting the programs the process makes (:func:`release_programs_if_crowded`).

    Every program is cached, however short its compilation (the many small ones of a fit
    add up).  Does nothing when the cache is off or JAX already has a cache folder; a folder
    that cannot be created gives one :class:`RuntimeWarning` and compilation without the
    cache.

    Returns:
        The folder in use, or None.
    """
    import jax

    _listen()
    if jax.config.jax_compilation_cache_dir is not None:
        return Path(jax.config.jax_compilation_cache_dir)
    folder = cache_dir()
    if folder is None:
        return None
    try:
        # Private to the user: JAX treats the cache's contents as trusted code.
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as err:
        warnings.warn(f"compiling without the on-disk cache ({err}); set BAYESORD_COMPILE_CACHE "
                      "to a writable folder, or to 'off'", RuntimeWarning, stacklevel=2)
        return None
    jax.config.update("jax_compilation_cache_dir", str(folder))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    return folder


# JAX's monitoring events for the three stages of making a program (reported per program;
# the last includes reading it from the on-disk cache) and for that reading alone.
_PROGRAM_EVENT = "/jax/core/compile/backend_compile_duration"  # one per executable, loaded or compiled
_MAKING_EVENTS = frozenset({"/jax/core/compile/jaxpr_trace_duration",
                            "/jax/core/compile/jaxpr_to_mlir_module_duration", _PROGRAM_EVENT})
_LOADING_EVENT = "/jax/compilation_cache/cache_retrieval_time_sec"
_COUNTERS = []  # the dicts compile_seconds() is filling
# Executables made since the memory maps were last counted (release_programs_if_crowded).
_NEW_PROGRAMS = [0]


def _count_compile_time(event, duration, **_):
    if event == _PROGRAM_EVENT:
        _NEW_PROGRAMS[0] += 1
    key = "loading" if event == _LOADING_EVENT else "compiling" if event in _MAKING_EVENTS else None
    if key is not None:
        for counter in _COUNTERS:
            counter[key] += duration


@functools.cache
def _listen():
    import jax

    jax.monitoring.register_event_duration_secs_listener(_count_compile_time)


@contextlib.contextmanager
def compile_seconds():
    """Seconds JAX spends making programs inside the block, from its monitoring events:
    yields a dict that the block fills, ``"compiling"`` (tracing, lowering and compiling,
    reading a compiled program from the on-disk cache included) and ``"loading"`` (that
    reading alone)."""
    _listen()
    counter = {"compiling": 0.0, "loading": 0.0}
    _COUNTERS.append(counter)
    try:
        yield counter
    finally:
        _COUNTERS.remove(counter)


# XLA:CPU maps the machine code of each compiled program into memory regions of its own, a few
# for every kernel (the quick-compiled evidence-mode probit fit takes 385, the optimised one
# 1,120), and Linux gives a process at most vm.max_map_count regions (65,530 by default).
# Past that LLVM cannot place another program ("LLVM compilation error: Cannot allocate
# memory") and the process crashes: fitting the five margin models with calibrate(cv=5) on
# 15 data sets of other widths in one process did.  Every _CHECK_EVERY new programs a fit
# counts the regions, and above _MAP_SHARE of the limit drops every compiled program.
_CHECK_EVERY = 16
_MAP_SHARE = 0.5
_STORED_PROGRAMS = weakref.WeakSet()  # every _StoredFitProgram (each holds the programs it loaded)


@functools.cache
def _map_limit():
    """The kernel's limit on a process's memory map regions, or None where there is none to read."""
    try:
        return int(Path("/proc/sys/vm/max_map_count").read_text())
    except (OSError, ValueError):
        return None


def _map_count():
    with open("/proc/self/maps", "rb") as maps:
        return sum(1 for _ in maps)


def release_programs_if_crowded():
    """Drop every compiled program of the process (bayesord's stored programs and JAX's own
    caches, :func:`jax.clear_caches`) when its memory map regions fill more than
    :data:`_MAP_SHARE` of the kernel's limit, so that their memory is unmapped; later calls
    load their programs again from the on-disk cache (or compile them).  Counts the regions
    only when :data:`_CHECK_EVERY` programs were made since the last count.

    Returns:
        Whether the programs were dropped.
    """
    if _NEW_PROGRAMS[0] < _CHECK_EVERY or _map_limit() is None:
        return False
    _NEW_PROGRAMS[0] = 0
    try:
        crowded = _map_count() > _MAP_SHARE * _map_limit()
    except OSError:
        return False
    if crowded:
        import jax

        for program in _STORED_PROGRAMS:
            program.loaded.clear()
        jax.clear_caches()
    return crowded


def _write_in_cache(path, data):
    """Write ``data`` (bytes) to ``path`` in the cache folder, whole or not at all (a temporary
    file renamed, so another process never reads half of it); a cache that cannot be written
    is left as it is."""
    with contextlib.suppress(OSError):
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.{threading.get_ident()}.tmp")
        tmp.write_bytes(data)
        os.replace(tmp, path)


def _probe_marker(options):
    """The file in the on-disk cache that keeps :func:`_options_accepted`'s answer for this
    jax, jaxlib and ``options``, or None without the cache."""
    import jax
    import jaxlib

    if jax.config.jax_compilation_cache_dir is None:
        return None
    key = hashlib.sha256(repr((jax.__version__, jaxlib.__version__, options)).encode()).hexdigest()
    return Path(jax.config.jax_compilation_cache_dir) / "options" / key


@functools.cache
def _options_accepted(options):
    """Whether the default backend is XLA:CPU and compiles with ``options`` (a tuple of
    (name, value) pairs; an XLA version that renamed them refuses them, and the models then
    compile as usual).

    Found by compiling a one-line program with them, about 0.1 s of a process's first fit (a
    sixth of a warm first probit fit), so the answer is kept in the on-disk cache
    (:func:`_probe_marker`) and read back by later processes.
    """
    import jax

    if jax.default_backend() != "cpu":
        return False
    marker = _probe_marker(options)
    if marker is not None:
        with contextlib.suppress(OSError):
            return marker.read_text() == "accepted"
    try:
        jax.jit(lambda x: x + 1, compiler_options=dict(options)).lower(0.0).compile()
        accepted = True
    except (TypeError, RuntimeError):  # jax.jit without compiler_options; an unknown option
        accepted = False
    if marker is not None:
        _write_in_cache(marker, b"accepted" if accepted else b"refused")  # read-only: probed again
    return accepted


@functools.cache
def compiled_with(jitted, options, static_argnames=()):
    """The function behind ``jitted`` (a ``jax.jit`` function), jitted again with compiler
    ``options`` (a tuple of (name, value) pairs), or ``jitted`` itself where the backend
    does not take them."""
    import jax

    if not _options_accepted(options):
        return jitted
    return jax.jit(jitted.__wrapped__, static_argnames=static_argnames, compiler_options=dict(options))


def quick_variant(jitted, static_argnames=()):
    """``jitted`` compiled with :data:`QUICK_OPTIONS` where the backend takes them."""
    return compiled_with(jitted, tuple(QUICK_OPTIONS.items()), tuple(static_argnames))


def program_for_rows(jitted, n_rows, static_argnames=()):
    """``jitted`` for a problem of ``n_rows`` rows: its :func:`quick_variant` up to
    :data:`QUICK_MAX_ROWS` rows (a first call there is mostly compiling), itself above."""
    return jitted if n_rows > QUICK_MAX_ROWS else quick_variant(jitted, tuple(static_argnames))


@functools.cache
def _source_digest():
    """A digest of bayesord's source files (a stored program is only valid for the code that
    made it)."""
    digest = hashlib.sha256()
    for path in sorted(Path(__file__).resolve().parent.rglob("*.py")):
        digest.update(path.name.encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


@functools.cache
def _export_ready():
    """Whether :mod:`jax.export` can serialise here (it needs the ``flatbuffers`` package)."""
    import importlib.util

    return importlib.util.find_spec("flatbuffers") is not None


def _as_array(a):
    """An input as an array: Python numbers become arrays of JAX's default dtype for them."""
    import jax
    import numpy as np

    if isinstance(a, (bool, int, float)):
        return np.asarray(a, dtype=jax.dtypes.canonicalize_dtype(np.asarray(a).dtype))
    return a


class _StoredFitProgram:
    """``jitted(*arrays, **static)`` through a stored :mod:`jax.export` program where it can
    (see the module docstring), else the jitted program itself or its variant compiled with
    ``options``."""

    def __init__(self, jitted, fallback, result_type, options):
        self.jitted = jitted
        self.fallback = fallback  # jitted, or jitted compiled with the options
        self.options = options if fallback is not jitted else None  # (name, value) pairs
        self.result_type = result_type
        self.loaded = {}
        _STORED_PROGRAMS.add(self)

    def _key(self, leaves, treedef, static):
        import jax

        parts = ["bayesord-stored-fit/1", f"{self.jitted.__module__}.{self.jitted.__qualname__}",
                 repr(sorted(static.items())), str(treedef), repr([(tuple(a.shape), str(a.dtype)) for a in leaves]),
                 jax.__version__, jax.default_backend(), str(jax.config.jax_enable_x64),
                 os.environ.get("XLA_FLAGS", ""), repr(self.options), _source_digest()]
        return hashlib.sha256("\n".join(parts).encode()).hexdigest()

    def _program(self, leaves, treedef, static):
        """The stored program's call for these inputs (the leaves of the arguments' pytree),
        or None where none can be used."""
        import jax
        import numpy as np
        from jax import export

        if (cache_dir() is None or jax.config.jax_compilation_cache_dir is None or not _export_ready()
                or jax.device_count() != 1 or not all(isinstance(a, (np.ndarray, np.generic)) for a in leaves)):
            return None
        key = self._key(leaves, treedef, static)
        if key in self.loaded:
            return self.loaded[key]
        path = Path(jax.config.jax_compilation_cache_dir) / "exported" / f"{key}.bin"
        try:
            exported = export.deserialize(bytearray(path.read_bytes()))
        except FileNotFoundError:
            fields = self.result_type._fields  # the array fields (a result's config is static)
            jitted = self.jitted

            def as_fields(*flat):
                result = jitted(*jax.tree_util.tree_unflatten(treedef, flat), **static)
                return {name: getattr(result, name) for name in fields}

            exported = export.export(jax.jit(as_fields))(*leaves)
            _write_in_cache(path, exported.serialize())  # a read-only cache: the program runs, unstored
        call = jax.jit(exported.call, compiler_options=dict(self.options) if self.options else None)
        self.loaded[key] = call
        return call

    def _cache_size(self):
        """Programs made in this process: the stored ones loaded plus the jitted ones traced."""
        return len(self.loaded) + self.fallback._cache_size()

    def __call__(self, *args, **static):
        import jax

        leaves, treedef = jax.tree_util.tree_flatten(args)
        leaves = [_as_array(a) for a in leaves]
        call = self._program(leaves, treedef, static)
        if call is None:
            return self.fallback(*jax.tree_util.tree_unflatten(treedef, leaves), **static)
        fields = call(*leaves)
        return self.result_type(config=static["config"], **fields) if "config" in static else self.result_type(**fields)


@functools.cache
def _stored_fit_program(jitted, fallback, result_type, options):
    return _StoredFitProgram(jitted, fallback, result_type, options)


def stored_fit_program(jitted, n_rows, static_argnames, result_type, *, compile="quick"):
    """A fit whose inputs are arrays (or pytrees of them) and whose result is a
    ``result_type`` (:func:`bayesord._results.result_type`) with ``config`` among the static
    arguments, through a stored program where it can (module docstring).  A prediction
    works the same way: its inputs a result (whose ``config`` is part of the program's key)
    and arrays, no static arguments, and a NamedTuple of arrays as ``result_type``.

    Used where nothing else runs: one device, NumPy inputs, the on-disk cache on.  Anything
    else calls the jitted program as compiled for ``compile``:

    * ``"quick"``: :func:`program_for_rows` (:data:`QUICK_OPTIONS` up to
      :data:`QUICK_MAX_ROWS` rows);
    * ``"light"``: :data:`LIGHT_OPTIONS` at every size, for many small fits side by side;
    * ``"optimised"``: the optimised program at every size, for a fit whose run time
      outweighs its compilation even on few rows (ISBOR's solver runs up to 21 times in a
      default fit, and runs 2.7-4.6x slower quick-compiled).
    """
    static_argnames = tuple(static_argnames)
    if compile == "quick":
        options = tuple(QUICK_OPTIONS.items())
        fallback = program_for_rows(jitted, n_rows, static_argnames)
    elif compile == "light":
        options = tuple(LIGHT_OPTIONS.items())
        fallback = compiled_with(jitted, options, static_argnames)
    elif compile == "optimised":
        options, fallback = None, jitted
    else:
        raise ValueError(f"compile must be one of {COMPILE_MODES}, got {compile!r}")
    return _stored_fit_program(jitted, fallback, result_type, options)
