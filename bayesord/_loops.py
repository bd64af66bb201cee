"""Helpers for the sequential loops (NPSVOR, RED-SVM/TOR, the linear perceptrons) on XLA:CPU.

A dual coordinate descent step is a few hundred nanoseconds of work, so inside a
``lax.fori_loop`` its cost is set by how many kernels XLA launches per step and by
anything XLA adds around them.  Two such additions are avoided here:

* :func:`permutation`: ``jax.random.permutation`` sorts several times to rule out ties;
  one sort of packed (random key, index) words gives the same uniform order for a tenth of
  the time (3.8 ms against 0.4 ms for 9,484 indices), which matters once per pass.
* :func:`jit_serial_cpu`: XLA:CPU's *parallel task assignment* splits ops it deems large
  across its thread pool.  A scatter into a weight vector counts as large (its output is
  the whole vector), and inside a loop of sub-microsecond steps the hand-off to other threads
  and the wait cost more than the work.  The wrapped function is compiled without that
  pass when it runs on CPU (other backends compile it unchanged).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax import lax

from ._precision import full_precision

__all__ = ["permutation", "jit_serial_cpu"]

_SERIAL_CPU = {"xla_disable_hlo_passes": "cpu-parallel-task-assigner"}


def permutation(key, n: int):
    """A uniformly random permutation of ``range(n)`` (int32) by one sort.

    Each index gets a random 32-bit key in the high half of a 64-bit word and itself in the
    low half; sorting the words orders the indices by key, and equal keys (probability
    about n^2 / 2^33) fall back to index order.  Without 64-bit types (``jax_enable_x64``
    off) keys and indices are sorted as two operands instead.
    """
    bits = jax.random.bits(key, (n,), dtype=jnp.uint32)
    if jax.config.jax_enable_x64:
        packed = (bits.astype(jnp.uint64) << 32) | jnp.arange(n, dtype=jnp.uint64)
        return (jnp.sort(packed) & 0xFFFFFFFF).astype(jnp.int32)
    return lax.sort_key_val(bits, jnp.arange(n, dtype=jnp.int32))[1]


def jit_serial_cpu(fun, static_argnames=()):
    """``jax.jit(fun)``, compiled without parallel task assignment when on CPU (and, as
    every compiled function of the library, with full-precision float32 products:
    :mod:`bayesord._precision`).

    The backend is looked up at each call (``jax.default_backend()``), so the same function
    object serves CPU and accelerator runs; each variant has its own compilation cache.
    Called on tracers (inside another jitted function) it is a plain nested ``jax.jit``.
    """
    fun = full_precision(fun)
    serial = jax.jit(fun, static_argnames=static_argnames, compiler_options=_SERIAL_CPU)
    plain = jax.jit(fun, static_argnames=static_argnames)

    @functools.wraps(fun)
    def call(*args, **kwargs):
        # compiler options apply to a top-level compilation only; traced inside another
        # function (TOR retraining RED-SVM), the outer function's options hold
        nested = any(isinstance(x, jax.core.Tracer)
                     for x in jax.tree_util.tree_leaves((args, kwargs)))
        top = jax.default_backend() == "cpu" and not nested
        return (serial if top else plain)(*args, **kwargs)

    # compiled variants held, as jax.jit's ``_cache_size`` (the tests check recompilation)
    call._cache_size = lambda: serial._cache_size() + plain._cache_size()
    return call
