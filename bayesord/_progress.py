"""Progress lines on stderr for long fits, without breaking ``jit``.

Two ways in, one display:

* Inside a jitted solver loop, :func:`emit` sends the loop's counters to the host through
  ``jax.debug.callback``.  Solvers call it only when their static config asks for progress
  (``config.progress``), so the default compiled program holds no callback and pays nothing.
  Under ``vmap`` (a grid of kernel widths, CV folds) the values arrive as one batched call per
  loop step, not one call per grid point (``jax.custom_batching.custom_vmap``), so a grid
  shows one line.
* Host-side loops (a CV grid driven from Python, the CLI's list of models) call
  :func:`show` directly, and :func:`prefix` labels whatever a nested solver reports.  A
  solver's final line can be written from its result too (``done_line`` in the solver
  modules), which is what an estimator at ``verbose=1`` does (:func:`check_verbose`).

The display is one updating line on ``sys.stderr`` (looked up at each write, so pytest's
``capsys`` sees it): rewritten in place with ``\\r`` on a terminal; elsewhere (logs, CI,
notebooks' captured stderr) each update is its own line.  Updates are throttled to one per
:data:`MIN_INTERVAL` seconds; a final update (end of a fit) is always written and ends the
line.  No dependency beyond the standard library and JAX.
"""

from __future__ import annotations

import contextlib
import functools
import numbers
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
from jax import custom_batching

__all__ = ["MIN_INTERVAL", "SOLVER_LEVEL", "batch_label", "check_verbose", "emit", "finish", "prefix", "show",
           "host_progress", "solver_progress"]

MIN_INTERVAL = 0.2
"""Seconds between two non-final updates (0 writes every update; tests use 0)."""

_state = {"open": False, "width": 0, "last": -np.inf, "prefix": ""}


def _write(text: str, final: bool, throttle: bool = True) -> None:
    stream = sys.stderr
    now = time.monotonic()
    if throttle and not final and now - _state["last"] < MIN_INTERVAL:
        return
    # after a final line or a host stage line, the next update (a new fit) is always shown
    _state["last"] = -np.inf if final or not throttle else now
    if _state["prefix"]:
        text = f"{_state['prefix']}  {text}"
    tty = bool(getattr(stream, "isatty", lambda: False)())
    if tty:
        pad = " " * max(_state["width"] - len(text), 0)
        stream.write("\r" + text + pad + ("\n" if final else ""))
        _state["width"] = 0 if final else len(text)
        _state["open"] = not final
    else:
        stream.write(text + "\n")
    stream.flush()


def show(text: str, *, final: bool = False) -> None:
    """Write (or, on a terminal, overwrite) the progress line; ``final`` ends it.

    For host-side stages (one call per model or grid value): never throttled.
    """
    _write(text, final, throttle=False)


def finish() -> None:
    """End an open terminal line (after an error, or before printing something else)."""
    if _state["open"]:
        sys.stderr.write("\n")
        sys.stderr.flush()
        _state.update(open=False, width=0)


@contextlib.contextmanager
def prefix(text: str):
    """Prepend ``text`` to every progress line written inside the block (host loops)."""
    old = _state["prefix"]
    _state["prefix"] = f"{old}  {text}" if old else text
    try:
        yield
    finally:
        _state["prefix"] = old


def _deliver(fmt, keys, final, *values):
    values = {k: np.asarray(v) for k, v in zip(keys, values)}
    _write(fmt(values), final)


@functools.lru_cache(maxsize=None)
def _emitter(fmt, keys, final):
    callback = functools.partial(_deliver, fmt, keys, final)

    @custom_batching.custom_vmap
    def send(*values):
        jax.debug.callback(callback, *values)
        return values[0]

    @send.def_vmap
    def send_batched(axis_size, in_batched, *values):
        # Give every value the batch axis and re-emit: an enclosing vmap batches this call
        # again, so nested grids (kernel widths x folds) still make one host call per step.
        values = [v if b else jnp.broadcast_to(v, (axis_size,) + jnp.shape(v))
                  for v, b in zip(values, in_batched)]
        return send(*values), True

    return send


def emit(fmt, *, final: bool = False, **values) -> None:
    """Inside jit: hand ``values`` to ``fmt`` on the host and show the line it returns.

    Args:
        fmt: a module-level function (hashable) ``dict[str, np.ndarray] -> str``.  Under
            ``vmap`` every value carries the leading batch axes, so ``fmt`` should reduce
            (``max``, ``min``, ``sum``) rather than index.
        final: end the line after this update (the solver's last report).
        **values: scalars or arrays (counters, objective, set sizes) from the loop state.
    """
    keys = tuple(sorted(values))
    _emitter(fmt, keys, final)(*[jnp.asarray(values[k]) for k in keys])


def batch_label(values: dict) -> str:
    """``" [G fits]"`` when the values carry a batch axis (a vmapped grid), else ``""``."""
    size = max((v.size for v in values.values()), default=1)
    return f" [{size} fits]" if size > 1 else ""


def check_verbose(value) -> int:
    """An estimator's ``verbose`` (bool or int >= 0, scikit-learn style) as its level:

    * 0: silent;
    * 1: a line per stage, written from the host (each fit's result, each width or C
      value of a search, each fold): the compiled programs are those of a silent fit, so
      they come from the stored programs and the on-disk cache like any other;
    * 2 and up: also the solver's own line at every iteration, through a host callback
      compiled into its loop (:func:`emit`).  A program that calls back into Python is
      neither stored nor cached on disk, so such a fit compiles its solver again in every
      process (see :data:`SOLVER_LEVEL`).
    """
    if not isinstance(value, numbers.Integral) or value < 0:
        raise ValueError(f"verbose must be a bool or a non-negative integer, got {value!r}")
    return int(value)


SOLVER_LEVEL = 2
"""The ``verbose`` level from which a solver reports every iteration from inside its
compiled loop.  At level 1 a warm ``bayesord fit --model isbor`` on 1,200 rows of a wine CSV
took 4.1 s, at this level 11.3 s (2 cores, 2026-11-27): most of it compiling the solver
again."""


def solver_progress(value) -> bool:
    """Whether a fit at ``verbose=value`` compiles its solver's per-iteration line
    (``config.progress``): level :data:`SOLVER_LEVEL` and up."""
    return check_verbose(value) >= SOLVER_LEVEL


def host_progress(value) -> bool:
    """Whether a fit at ``verbose=value`` writes its solves' final lines from their results
    (level 1; from :data:`SOLVER_LEVEL` on the solver writes them itself)."""
    return 0 < check_verbose(value) < SOLVER_LEVEL
