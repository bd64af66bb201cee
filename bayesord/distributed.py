"""Fits spread over devices and processes, on JAX's own multi-device runtime.

Two ways to use more than one device (``docs/scaleout.md`` has the guide):

* **Rows over devices.**  :func:`fit_ordinal_probit` fits :class:`~bayesord.OrdinalProbit`
  (and :func:`fit_ordinal_mixed` the mixed model :class:`~bayesord.OrdinalMixed`)
  with its rows sharded over a 1-D mesh: each device holds ``n / devices`` rows, and per
  Newton or evidence step the devices exchange sums of size O(d^2) (the compiled programs'
  collectives are all-reduces of the Hessian, the gradient and a few scalars).  On the same
  rows the sharded fit equals the single-device fit to rounding.  With several processes (hosts), each process passes
  the rows it loaded; after :func:`initialize` the same call fits all of them together, and
  every process returns the same model.
* **Problems over devices.**  :func:`map_sharded` runs a batch of independent fits (a grid
  of prior precisions or C values, bootstrap weights, cross-validation folds as 0/1 weights)
  with the batch axis spread over the devices: each device fits its share, with no data
  exchanged but the loops' stopping flags.

A single process sees its CPU cores as one device; ``JAX_NUM_CPU_DEVICES=4`` (set before
JAX starts) makes four, which is how the tests run this module on a 2-core machine.
"""

from __future__ import annotations

import functools
import hashlib
import math
import re
import warnings

import jax
import numpy as np
from jax.experimental import multihost_utils
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from ._columns import host_offsets, restore_offsets
from ._compile_cache import program_for_rows
from ._mixed import fit_mixed, mixed_parameters_at
from ._probit import fit_probit
from ._shapes import bucket_rows
from ._status import check_status
from ._validation import check_sample_weight, check_X, encode_labels, float_dtype
from .estimators import OrdinalMixed, OrdinalProbit
from .estimators._base import binary_columns, solver_tol
from .estimators._mixed import _labels_of_groups

__all__ = ["initialize", "row_mesh", "shard_rows", "fit_ordinal_probit", "fit_ordinal_mixed", "map_sharded",
           "collectives"]

COLLECTIVE_OPS = ("all-reduce", "all-gather", "all-to-all", "collective-permute", "reduce-scatter")
_BYTES = {"pred": 1, "s8": 1, "u8": 1, "s16": 2, "u16": 2, "f16": 2, "bf16": 2, "s32": 4, "u32": 4,
          "f32": 4, "s64": 8, "u64": 8, "f64": 8, "c64": 8, "c128": 16}


def initialize(coordinator_address: str | None = None, num_processes: int | None = None,
               process_id: int | None = None, **kwargs) -> None:
    """Join a multi-process run: ``jax.distributed.initialize`` with CPU collectives.

    Call it once in every process, before any other JAX computation.  On CPU it selects the
    gloo collectives, without which processes cannot exchange sums; on GPU and TPU JAX's own
    defaults apply.  Without arguments, JAX reads the three values from the cluster manager
    it detects (Slurm, Open MPI, Kubernetes with JobSet, Cloud TPU).

    Args:
        coordinator_address: ``"host:port"`` of process 0, reachable from every process.
        num_processes: how many processes take part.
        process_id: this process's index, 0 .. num_processes - 1.
        **kwargs: passed to ``jax.distributed.initialize`` (e.g. ``initialization_timeout``).
    """
    if num_processes is not None and process_id is not None and not 0 <= process_id < num_processes:
        raise ValueError(f"process_id must be in 0..{num_processes - 1}, got {process_id}")
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(coordinator_address=coordinator_address, num_processes=num_processes,
                               process_id=process_id, **kwargs)


def row_mesh(devices=None, *, axis: str = "rows") -> Mesh:
    """A 1-D mesh named ``axis`` over ``devices`` (default: every device of every process).

    Its axis is ``Auto``; fits also accept meshes made with ``jax.make_mesh`` whose axes are
    ``Explicit`` (see :mod:`bayesord._mesh`)."""
    devices = jax.devices() if devices is None else list(devices)
    if not devices:
        raise ValueError("devices is empty")
    return Mesh(np.asarray(devices), (axis,), axis_types=(jax.sharding.AxisType.Auto,))


def _row_axis(mesh: Mesh, axis: str) -> str:
    if axis not in mesh.axis_names:
        raise ValueError(f"the mesh has axes {tuple(mesh.axis_names)}, not {axis!r}; pass axis= "
                         "with the name of the axis to shard rows over")
    return axis


def _gather(values) -> np.ndarray:
    """One row per process: ``values`` (a small NumPy array) from every process."""
    values = np.asarray(values)
    if jax.process_count() == 1:
        return values[None]
    return np.asarray(multihost_utils.process_allgather(values))


def shard_rows(mesh: Mesh, X, y, weights=None, *, axis: str = "rows"):
    """This process's rows, labels and weights, placed on ``mesh`` with the rows sharded.

    Every process calls it with its own rows (a single process: all of them).  The rows
    are padded, per process, to one count for all processes that is a multiple of the
    process's shards of ``axis``, with copies of its first row of weight zero: they leave
    every sum the models form unchanged, and the fit equals the fit of the rows given.

    Args:
        mesh: a mesh with the axis ``axis``.
        X: (n_local, d) rows; y: (n_local,) integer labels; weights: (n_local,) or None
            (ones).

    Returns:
        (X, y, weights) as global ``jax.Array``s of ``n_processes * n_padded`` rows.

    Raises:
        ValueError: arrays of different lengths, a process with no rows, or a mesh without
            ``axis``.
    """
    axis = _row_axis(mesh, axis)
    X, y = np.asarray(X), np.asarray(y)
    dtype = X.dtype if X.dtype.kind == "f" else np.float64
    weights = np.ones(X.shape[0], dtype) if weights is None else np.asarray(weights, dtype)
    n = X.shape[0]
    if y.shape[0] != n or weights.shape[0] != n:
        raise ValueError(f"X, y and weights have different numbers of rows: {n}, {y.shape[0]}, "
                         f"{weights.shape[0]}")
    return _place_rows(mesh, axis, (X, y), weights)


def _place_rows(mesh: Mesh, axis: str, arrays, weights):
    """:func:`shard_rows` for any per-row ``arrays`` (padded with copies of their first row)
    and ``weights`` (padded with zeros), all of this process's length: the global arrays,
    ``arrays`` first and ``weights`` last."""
    n = weights.shape[0]
    counts = _gather(np.array([n]))[:, 0]
    if np.any(counts == 0):
        raise ValueError(f"processes {np.flatnonzero(counts == 0).tolist()} have no rows; every "
                         "process needs at least one")
    # This process's shards of the row axis (other mesh axes, if any, hold copies).
    dim = mesh.axis_names.index(axis)
    shards = {np.unravel_index(i, mesh.devices.shape)[dim] for i, d in enumerate(mesh.devices.flat)
              if d.process_index == jax.process_index()}
    rows = math.ceil(int(counts.max()) / len(shards)) * len(shards)
    pad = rows - n
    parts = [np.concatenate([a, np.repeat(a[:1], pad, axis=0)]) for a in arrays]
    parts.append(np.concatenate([weights, np.zeros(pad, weights.dtype)]))
    out = []
    for a in parts:
        spec = PartitionSpec(axis, *([None] * (a.ndim - 1)))
        shape = (rows * jax.process_count(), *a.shape[1:])
        out.append(jax.make_array_from_process_local_data(NamedSharding(mesh, spec), a, shape))
    return tuple(out)


def _digest(value) -> np.ndarray:
    """A short fingerprint of ``value``'s text, as int32s (equal on every process iff equal)."""
    return np.frombuffer(hashlib.sha256(repr(value).encode()).digest()[:16], dtype=np.int32)


def _replicated(tree):
    """NumPy copies of a result whose arrays every device holds whole."""
    return jax.tree_util.tree_map(lambda a: np.asarray(a.addressable_data(0)), tree)


def _local_rows(name, X, y, classes, sample_weight, params, agree=(), min_features=1):
    """This process's checked rows, ``(X, names, codes, classes_, weights)``, after checking
    that every process passed the same ``classes``, parameters, ``agree`` and number of
    columns and that every class has a row of positive weight somewhere."""
    if params.get("class_weight") is not None:
        raise ValueError(f"class_weight is not supported by {name}: its class totals span "
                         "processes; pass sample_weight instead")
    X, names = check_X(X, min_features=min_features)
    codes, classes_ = encode_labels(y, classes, n=X.shape[0])
    sw = check_sample_weight(sample_weight, X.shape[0])
    agreed = _gather(np.concatenate([_digest((classes_.tolist(), sorted(params.items()), agree)),
                                     [X.shape[1]]]))
    if np.any(agreed != agreed[0]):
        raise ValueError("processes disagree on classes, parameters or the number of columns; "
                         "pass the same classes= and parameters, and rows with the same columns, "
                         "on every process")
    present = _gather(np.bincount(codes[sw > 0], minlength=len(classes_))).sum(axis=0)
    if np.any(present == 0):
        missing = np.asarray(classes_)[present == 0].tolist()
        raise ValueError(f"classes {missing} have no rows of positive weight on any process")
    return X, names, codes, classes_, sw


def _agreed_offsets(X, dtype):
    """:func:`~bayesord._columns.host_offsets` that every process applies alike: process
    0's (an offset need only lie near the data, and rows shifted differently on different
    processes would make another model); None when it has none.  In float64 whatever the
    gathering rounded them to, so that the fit's centre plus the offsets keeps its digits."""
    local = host_offsets(X, dtype)
    offsets = np.asarray(_gather(np.zeros(X.shape[1]) if local is None else local)[0], np.float64)
    return offsets if offsets.any() else None


def _adopt(model, status, name, classes_, X, names):
    """Report a sharded fit's status (once, from process 0) and give ``model`` the labels and
    columns of the rows; returns which columns are 0/1 on every process."""
    with warnings.catch_warnings():
        if jax.process_index() != 0:
            warnings.simplefilter("ignore")  # one process reports for all
        check_status(status, name)
    model.classes_ = classes_
    model.n_features_in_ = X.shape[1]
    if names is not None:
        model.feature_names_in_ = names
    return _gather(binary_columns(X)).all(axis=0)


def fit_ordinal_probit(X, y, *, classes, sample_weight=None, mesh: Mesh | None = None,
                       axis: str = "rows", **params) -> OrdinalProbit:
    """Fit :class:`~bayesord.OrdinalProbit` with its rows sharded over ``mesh``.

    Every process passes the rows it holds; all of them must call this together, with the
    same ``classes`` and parameters.  The returned estimator is the same on every process
    (its arrays are NumPy copies of the replicated result) and predicts, saves and
    summarises like one fitted by ``OrdinalProbit(**params).fit`` on all the rows, and its
    fit equals that one to the solver's tolerance (the estimator pads rows differently, so
    the sums run in another order).  The one-class check of ``OrdinalProbit.fit`` is not
    made.

    Args:
        X: this process's rows, (n_local, d): an array or a DataFrame.
        y: their labels.
        classes: every label in increasing order (required: a process need not hold every
            class, and labels must be coded alike everywhere).
        sample_weight: optional non-negative weights of this process's rows.
        mesh: a mesh with axis ``axis`` (default: :func:`row_mesh` over all devices); its
            axes may be ``Auto`` or ``Explicit``.
        axis: the mesh axis the rows are split over.
        **params: ``OrdinalProbit``'s parameters (``class_weight`` excepted).

    Raises:
        ValueError: bad rows or labels (as ``OrdinalProbit.fit``), a class with no row of
            positive weight on any process, processes that disagree on ``classes``, the
            number of columns or the parameters, or ``class_weight``.
    """
    model = OrdinalProbit(classes=classes, **params)
    config = model._config()
    mesh = row_mesh(axis=axis) if mesh is None else mesh
    X, names, codes, classes_, sw = _local_rows("fit_ordinal_probit", X, y, classes, sample_weight, params)
    alpha = model._alpha(X.shape[1])
    dtype = float_dtype()
    offsets = _agreed_offsets(X, dtype)
    Xs, ys, ws = shard_rows(mesh, (X if offsets is None else X - offsets).astype(dtype), codes, sw.astype(dtype),
                            axis=axis)
    # Compiled for speed of compilation when each device holds few rows, as the estimator's.
    program = program_for_rows(fit_probit, Xs.shape[0] // mesh.shape[axis], ("config", "n_classes"))
    res = program(Xs, ys, ws, alpha.astype(dtype), solver_tol(model.tol, dtype), config=config,
                  n_classes=len(classes_))
    res = restore_offsets(_replicated(res), offsets)
    model.binary_columns_ = _adopt(model, res.status, "distributed.fit_ordinal_probit", classes_, X, names)
    model._spec = None
    model._set_result(res)
    model.log_evidence_ = float(res.log_evidence)
    model.n_iter_ = int(res.n_iter)
    model.converged_ = bool(res.converged)
    return model


def fit_ordinal_mixed(X, y, groups, *, classes, group_levels, sample_weight=None,
                      mesh: Mesh | None = None, axis: str = "rows", **params) -> OrdinalMixed:
    """Fit :class:`~bayesord.OrdinalMixed` (random intercepts, and slopes, for one grouping
    factor or several) with its rows sharded over ``mesh``.

    As :func:`fit_ordinal_probit`: every process passes the rows it holds, and all call it
    together.  A group's rows may lie on several processes.  Per Newton step of the
    conditional modes the devices exchange sums of size O(q p^2) (p group terms per group;
    with several factors, O(q_b (Q - q_b) p^2) for the levels of the largest factor against
    the others'), per outer step O(m^2) for the m fixed parameters.  The returned estimator
    predicts, saves and summarises like ``OrdinalMixed(**params).fit`` on all the rows, and
    its fit equals that one to the solver's tolerance.

    Args:
        X: this process's fixed-effect columns, (n_local, d) (d may be 0).
        y: their labels.
        groups: their group labels, (n_local,); with several grouping factors (n_local, R),
            one column per factor in ``group_levels``' order (a DataFrame's columns are
            taken by the factors' names).
        classes: every label in increasing order.
        group_levels: every group label, on every process the same list (it fixes each
            group's position; a process need not hold every group); with several factors a
            dict of factor name -> its labels (``random_slopes`` then names the factors as
            in ``OrdinalMixed``).
        sample_weight: optional non-negative weights of this process's rows.
        mesh: as :func:`fit_ordinal_probit`.
        axis: as :func:`fit_ordinal_probit`.
        **params: ``OrdinalMixed``'s parameters (``class_weight`` excepted).

    Raises:
        ValueError: as :func:`fit_ordinal_probit`; a group label not in ``group_levels``,
            repeated levels, groups without one column per factor, or fewer than two groups
            of a factor with rows of positive weight.
    """
    model = OrdinalMixed(classes=classes, **params)
    mesh = row_mesh(axis=axis) if mesh is None else mesh
    several = isinstance(group_levels, dict)
    factors = [str(f) for f in group_levels] if several else ["group"]
    levels = [np.asarray(list(lv), dtype=object) for lv in (group_levels.values() if several else [group_levels])]
    if any(lv.ndim != 1 or len(set(lv.tolist())) != lv.size for lv in levels):
        raise ValueError("group_levels must list each group label once (per factor)")
    X, names, codes, classes_, sw = _local_rows("fit_ordinal_mixed", X, y, classes, sample_weight, params,
                                                agree=[factors, [lv.tolist() for lv in levels]], min_features=0)
    if several and hasattr(groups, "columns") and all(f in map(str, groups.columns) for f in factors):
        groups = groups[[c for f in factors for c in groups.columns if str(c) == f]]
    labels = _labels_of_groups(groups, X.shape[0], factors=several)
    if several and (labels.ndim != 2 or labels.shape[1] != len(factors)):
        raise ValueError(f"groups needs one column per grouping factor ({factors}), got shape {labels.shape}")
    g = []
    for r, (lv, column) in enumerate(zip(levels, labels.T if several else [labels])):
        index = {level: j for j, level in enumerate(lv.tolist())}
        unknown = sorted({str(label) for label in column.tolist() if label not in index})
        if unknown:
            raise ValueError(f"groups{f' column {factors[r]!r}' if several else ''} holds labels not in "
                             f"group_levels: {unknown[:5]}")
        g.append(np.fromiter((index[label] for label in column.tolist()), np.int32, column.size))
        used = _gather(np.bincount(g[-1][sw > 0], minlength=lv.size)).sum(axis=0)
        if np.count_nonzero(used) < 2:
            raise ValueError(f"fewer than two groups{f' of {factors[r]!r}' if several else ''} have rows of "
                             "positive weight; a group effect needs at least two (fit OrdinalProbit for one)")
    n_groups = tuple(lv.size for lv in levels) if several else bucket_rows(levels[0].size)
    config = model._config(len(classes_), n_groups, X.shape[1], names, factors)
    dtype = float_dtype()
    g = np.column_stack(g) if several else g[0]
    offsets = _agreed_offsets(X, dtype)
    Xs, ys, gs, ws = _place_rows(mesh, _row_axis(mesh, axis), ((X if offsets is None else X - offsets).astype(dtype),
                                                               codes, g), sw.astype(dtype))
    program = program_for_rows(fit_mixed, Xs.shape[0] // mesh.shape[axis], ("config",))
    res = restore_offsets(_replicated(program(Xs, ys, gs, ws, solver_tol(model.tol, dtype), config=config)), offsets,
                          mixed_parameters_at)
    binary = _adopt(model, res.status, "distributed.fit_ordinal_mixed", classes_, X, names)
    model._finish_fit(res, levels if several else levels[0], binary, factors)
    if jax.process_index() == 0:  # one process reports for all
        model._warn_if_singular()
    return model


def map_sharded(fn, *batched, mesh: Mesh | None = None, axis: str = "rows", vmap: bool = True):
    """``jax.vmap(fn)(*batched)`` with the batch spread over the devices of ``mesh``.

    The batch (the first axis of every array in ``batched``) is padded to a multiple of the
    devices by repeating its last entry, placed with that axis sharded, and run as one
    compiled program (compiled once per ``fn`` and shapes); the padding is cut from the
    outputs.  Each device runs its share of the batch: under ``vmap`` no data cross devices,
    only the flags of vmapped loops (a batch of ``while_loop``s runs until every member has
    stopped); a fit that batches itself may share state across its batch (NPSVOR's grid
    shares its active-row mask, one byte per training row per pass).

    Args:
        fn: a function of one batch member's arrays, e.g.
            ``lambda w: fit_probit(X, y, w, alpha, tol, config=..., n_classes=K)``
            for bootstrap or cross-validation weights ``w``.
        *batched: arrays (or pytrees of arrays) with the batch as their first axis.
        mesh: a 1-D mesh over this process's devices (default: :func:`row_mesh` over
            all of them).
        axis: the mesh axis the batch is split over.
        vmap: False when ``fn`` takes the whole batch itself, as the fits that solve grids
            of settings do (``fit_npsvor`` with a vector of C values and a matrix of fold
            weights): it then runs on the sharded batch as it is.  Wrapping such a fit in
            ``vmap`` makes its batched loops run every branch of their conditionals
            (30x slower for the NPSVOR grid of ``benchmarks/scaleout_bench.py``).

    Returns:
        ``fn``'s outputs for the batch (first axis), as NumPy arrays.
    """
    mesh = row_mesh(jax.local_devices(), axis=axis) if mesh is None else mesh
    axis = _row_axis(mesh, axis)
    leaves, tree = jax.tree_util.tree_flatten(batched)
    if not leaves:
        raise ValueError("map_sharded needs at least one batched array")
    leaves = [np.asarray(a) for a in leaves]
    size = leaves[0].shape[0] if leaves[0].ndim else 0
    if size == 0 or any(a.ndim == 0 or a.shape[0] != size for a in leaves):
        raise ValueError(f"batched arrays need one shared, non-empty first axis; got shapes "
                         f"{[a.shape for a in leaves]}")
    devices = mesh.shape[axis]
    padded = math.ceil(size / devices) * devices
    placed = [jax.device_put(np.concatenate([a, np.repeat(a[-1:], padded - size, axis=0)]),
                             NamedSharding(mesh, PartitionSpec(axis, *([None] * (a.ndim - 1)))))
              for a in leaves]
    out = _program(fn, vmap)(*jax.tree_util.tree_unflatten(tree, placed))
    return jax.tree_util.tree_map(lambda a: np.asarray(a)[:size], out)


@functools.lru_cache(maxsize=8)
def _program(fn, vmap):
    """The jitted batch of ``fn``, kept so that a second call with the same ``fn`` reuses
    its compiled program (the last few only: ``fn`` often holds the data in its closure)."""
    return jax.jit(jax.vmap(fn) if vmap else fn)


def collectives(compiled) -> list[tuple[str, int, bool]]:
    """The collectives of a compiled program and the bytes each moves.

    Returns ``(op, bytes, in_loop)`` for every all-reduce, all-gather, all-to-all,
    collective permute and reduce-scatter in the program's text
    (``jax.jit(f).lower(...).compile()``), each counted once; ``in_loop`` when the op comes
    from the body of a ``while_loop`` (it runs once per iteration), read from the op's
    source metadata.  The bytes are those of the op's result on one device."""
    found = []
    for line in compiled.as_text().splitlines():
        for op in COLLECTIVE_OPS:
            match = re.search(rf"= (.*?) {op}(?:-start)?\(", line)
            if match:
                size = sum(_BYTES[dtype] * math.prod(int(v) for v in dims.split(",") if v)
                           for dtype, dims in re.findall(r"\b([a-z]+\d*)\[([\d,]*)\]", match.group(1)))
                source = re.search(r'op_name="([^"]*)"', line)
                found.append((op, size, bool(source) and "while/body" in source.group(1)))
    return found
