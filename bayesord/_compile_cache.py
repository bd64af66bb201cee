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
"""

from __future__ import annotations

import functools
import os
import warnings
from pathlib import Path

__all__ = ["cache_dir", "enable", "QUICK_MAX_ROWS", "QUICK_OPTIONS", "quick_variant", "program_for_rows"]

QUICK_MAX_ROWS = 16384
QUICK_OPTIONS = {"xla_backend_optimization_level": 0, "xla_cpu_use_fusion_emitters": False}


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
    """Point JAX's persistent compilation cache at :func:`cache_dir` (once per process).

    Every program is cached, however short its compilation (the many small ones of a fit
    add up).  Does nothing when the cache is off or JAX already has a cache folder; a folder
    that cannot be created gives one :class:`RuntimeWarning` and compilation without the
    cache.

    Returns:
        The folder in use, or None.
    """
    import jax

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


@functools.cache
def _quick_options_accepted():
    """Whether the default backend is XLA:CPU and compiles with :data:`QUICK_OPTIONS` (an
    XLA version that renamed them refuses them; the models then compile as usual)."""
    import jax

    if jax.default_backend() != "cpu":
        return False
    try:
        jax.jit(lambda x: x + 1, compiler_options=QUICK_OPTIONS).lower(0.0).compile()
    except (TypeError, RuntimeError):  # jax.jit without compiler_options; an unknown option
        return False
    return True


@functools.cache
def quick_variant(jitted, static_argnames=()):
    """The function behind ``jitted`` (a ``jax.jit`` function), jitted again with
    :data:`QUICK_OPTIONS`, or ``jitted`` itself where the backend does not take them."""
    import jax

    if not _quick_options_accepted():
        return jitted
    return jax.jit(jitted.__wrapped__, static_argnames=static_argnames, compiler_options=QUICK_OPTIONS)


def program_for_rows(jitted, n_rows, static_argnames=()):
    """``jitted`` for a problem of ``n_rows`` rows: its :func:`quick_variant` up to
    :data:`QUICK_MAX_ROWS` rows (a first call there is mostly compiling), itself above."""
    return jitted if n_rows > QUICK_MAX_ROWS else quick_variant(jitted, tuple(static_argnames))
