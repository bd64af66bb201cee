"""Fits on arrays spread over several devices: the compiler partitions them.

A fit whose rows are sharded over a mesh (``NamedSharding(mesh, P("rows", None))``) runs
unchanged: the row sums the models form (``X^T D X``, gradients, class counts) become
per-device partial sums and one all-reduce of their small result, so what crosses devices
is O(d^2) per step, never O(n).  That is checked on the compiled programs' text by
``tests/test_distributed.py``.

JAX meshes have two kinds of axes.  On an ``Auto`` axis the compiler chooses how every
intermediate is laid out.  On an ``Explicit`` axis (the default of ``jax.make_mesh`` since
jax 0.9) the layout is part of each array's type, and a product that sums over a sharded
axis (``X.T @ r`` with rows sharded) must be told where its result lives, which the models'
code does not say.  :func:`partitioned` runs a fit with the explicit axes of its inputs'
mesh switched to automatic for the duration of the fit (``jax.sharding.auto_axes``) and
returns its outputs replicated, so both kinds of mesh give the same program.
"""

from __future__ import annotations

import functools
import inspect

import jax
from jax.sharding import PartitionSpec

__all__ = ["explicit_mesh", "partitioned"]

# The arguments of a fit that are static (its jit's static arguments), never arrays.
_STATIC = ("config", "n_classes")


def explicit_mesh(*trees):
    """The abstract mesh with ``Explicit`` axes that an array in ``trees`` is typed over, or
    None (unsharded inputs, automatic axes only).

    Raises:
        ValueError: arrays typed over two different explicit meshes.
    """
    found = None
    for leaf in jax.tree_util.tree_leaves(trees):
        if not isinstance(leaf, jax.Array):
            continue
        mesh = jax.typeof(leaf).sharding.mesh
        if mesh.empty or not mesh.explicit_axes:
            continue
        if found is not None and mesh != found:
            raise ValueError(f"inputs are sharded over two different meshes: {found} and {mesh}; "
                             "put every input on one mesh")
        found = mesh
    return found


def partitioned(fn):
    """Decorate a function that is traced under ``jit``: when one of its positional
    arguments is typed over a mesh with ``Explicit`` axes, it runs with those axes made
    ``Auto`` and its outputs replicated; otherwise it runs as it is.  Keyword arguments,
    and the static ``config`` and ``n_classes`` however they are passed, go to it
    unchanged."""
    signature = inspect.signature(fn)

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        mesh = explicit_mesh(args)
        if mesh is None:
            return fn(*args, **kwargs)
        given = signature.bind(*args, **kwargs).arguments
        static = {name: given.pop(name) for name in _STATIC if name in given}
        auto = jax.sharding.auto_axes(lambda arrays: fn(**arrays, **static), axes=mesh.explicit_axes,
                                      out_sharding=PartitionSpec())
        with jax.sharding.use_abstract_mesh(mesh):
            return auto(given)

    return wrapper
