"""Padded-row ("ELL") sparse matrices for the linear solvers, and the few products they need.

NPSVOR (:mod:`bayesord._npsvor`), the perceptrons (:mod:`bayesord._perceptron`) and
RED-SVM/TOR (:mod:`bayesord._redsvm`, :mod:`bayesord._tor`) take scipy.sparse input
without densifying it.  They share one layout, :class:`PaddedRows`, built on the host by
:func:`to_padded_rows`: row i keeps its non-zeros in ``indices[i]`` (int32 columns) and
``values[i]``, padded to the longest row m with column 0 and value 0, so the padding adds
nothing to any product.  Shapes are static, so a solver gathers and scatters one padded
row per coordinate step inside ``lax`` loops.  Memory is ``n * m * (4 + itemsize)`` bytes
plus n squared row norms; one unusually long row makes every row that wide, so check
:func:`padding_ratio` on skewed data.

The products (:func:`row_dots`, :func:`rmatvec`, :func:`row_sq_norms`, :func:`row_dot`,
:func:`row_axpy`) accept either a :class:`PaddedRows` or a dense (n, d) array, so a solver
is written once and dense input keeps its plain matrix products.
"""

from __future__ import annotations

from typing import NamedTuple, Union

import jax
import jax.numpy as jnp
import numpy as np
import scipy.sparse as sp

from ._precision import full_precision
from ._validation import floating_dtype

__all__ = [
    "PaddedRows",
    "Rows",
    "to_padded_rows",
    "as_rows",
    "padding_ratio",
    "row_dots",
    "rmatvec",
    "row_sq_norms",
    "row_dot",
    "row_axpy",
]


class PaddedRows(NamedTuple):
    """An (n, d) sparse matrix stored row by row, padded to the longest row.

    Row i is ``sum_j values[i, j] * e_{indices[i, j]}``.  A pytree whose leaves are the three
    arrays; ``n_features`` is static (part of the tree structure), so it can size arrays
    inside jit.  Build it with :func:`to_padded_rows`.
    """

    indices: jax.Array
    """(n, m) int32 column indices; padding entries are 0."""
    values: jax.Array
    """(n, m) floating values; padding entries are 0."""
    sq_norms: jax.Array
    """(n,) squared row norms x_i'x_i, computed on the host with the layout."""
    n_features: int
    """Number of columns d (static)."""

    @property
    def shape(self) -> tuple[int, int]:
        """(n, d), as for a dense matrix."""
        return (self.values.shape[0], self.n_features)

    @property
    def dtype(self):
        """Floating dtype of the values."""
        return self.values.dtype


jax.tree_util.register_pytree_node(
    PaddedRows,
    lambda X: ((X.indices, X.values, X.sq_norms), X.n_features),
    lambda n_features, leaves: PaddedRows(*leaves, n_features),
)

Rows = Union[PaddedRows, jax.Array]
"""Rows a linear solver accepts: :class:`PaddedRows` or a dense (n, d) array."""


# --------------------------------------------------------------------------- host side


def _value_dtype(X, data_dtype, dtype):
    """Check that X holds real numbers; the floating dtype to store them in, as JAX holds it."""
    if not (np.issubdtype(data_dtype, np.number) or data_dtype == bool):
        raise TypeError(f"X must be a scipy.sparse matrix or a numeric array-like, got "
                        f"{type(X).__name__} of dtype {data_dtype}")
    if np.issubdtype(data_dtype, np.complexfloating):
        raise TypeError(f"X must hold real numbers, got dtype {data_dtype}")
    dt = np.dtype(data_dtype if dtype is None else dtype)
    if not np.issubdtype(dt, np.floating):
        if dtype is not None:
            raise TypeError(f"dtype must be a floating dtype, got {dt}")
        dt = floating_dtype(dt)  # integer or boolean data
    return np.dtype(jax.dtypes.canonicalize_dtype(dt))  # float64 becomes float32 without x64


def to_padded_rows(X, *, dtype=None, bias: float | None = None, multiple: int = 1) -> PaddedRows:
    """Convert a scipy.sparse matrix (or a dense array) to :class:`PaddedRows` on the host.

    Sparse input is canonicalised on a copy: duplicate entries are summed and indices
    sorted, so duplicates never distort the row norms.  Explicit zeros are kept (they act
    as padding).  Dense input stores every column (m = d); use it for small problems and
    tests, a solver's dense path is faster.  Values are not checked for NaN/inf (the
    estimators do that).

    Args:
        X: (n, d) scipy.sparse matrix of any format, or a dense 2-D numeric array-like.
        dtype: floating dtype of the values; default X's floating dtype (the default JAX
            float for integer or boolean data), as JAX holds it (float32 without x64).
        bias: when given, a constant column with this value is appended (index d), so the
            result has d + 1 columns.
        multiple: round the padded width m up to a multiple of this (e.g. 32), so that
            matrices of similar sparsity share one compiled solver.

    Returns:
        :class:`PaddedRows` with m = max non-zeros per row (+1 with a bias), at least 1.

    Raises:
        TypeError: X is not a sparse matrix or a numeric array-like (strings, objects,
            complex numbers, a :class:`PaddedRows`), or ``dtype`` is not floating.
        ValueError: X is not 2-D, or ``multiple`` is not a positive integer.

    Example:
        >>> import numpy as np, scipy.sparse as sp
        >>> P = to_padded_rows(sp.csr_matrix(np.array([[0., 2.], [3., 4.], [0., 0.]])))
        >>> P.shape, P.indices.tolist(), P.values.tolist()
        ((3, 2), [[1, 0], [0, 1], [0, 0]], [[2.0, 0.0], [3.0, 4.0], [0.0, 0.0]])
    """
    if isinstance(X, PaddedRows):
        raise TypeError("X is already PaddedRows; to_padded_rows converts scipy.sparse or dense input")
    if isinstance(multiple, bool) or not isinstance(multiple, (int, np.integer)) or multiple < 1:
        raise ValueError(f"multiple must be a positive integer, got {multiple!r}")
    if sp.issparse(X):
        if X.ndim != 2:
            raise ValueError(f"X must be 2-D, got a sparse array of shape {X.shape}")
        dt = _value_dtype(X, X.dtype, dtype)
        Xc = sp.csr_matrix(X, copy=True)
        Xc.sum_duplicates()
        Xc.sort_indices()
        n, d = Xc.shape
        lengths = np.diff(Xc.indptr)
        m = max(int(lengths.max(initial=0)), 1)
        idx = np.zeros((n, m), dtype=np.int32)
        val = np.zeros((n, m), dtype=dt)
        mask = np.arange(m)[None, :] < lengths[:, None]
        idx[mask] = Xc.indices
        val[mask] = Xc.data
    else:
        try:
            arr = np.asarray(X)
        except (TypeError, ValueError) as err:
            raise TypeError(f"X must be a scipy.sparse matrix or a numeric array-like, got "
                            f"{type(X).__name__}: {err}") from None
        dt = _value_dtype(X, arr.dtype, dtype)
        if arr.ndim != 2:
            raise ValueError(f"X must be 2-D, got shape {arr.shape}")
        n, d = arr.shape
        m = max(d, 1)
        idx = np.zeros((n, m), dtype=np.int32)
        idx[:, :d] = np.arange(d, dtype=np.int32)
        val = np.zeros((n, m), dtype=dt)
        val[:, :d] = arr
    if bias is not None:
        idx = np.concatenate([idx, np.full((n, 1), d, dtype=np.int32)], axis=1)
        val = np.concatenate([val, np.full((n, 1), bias, dtype=dt)], axis=1)
        d += 1
    width = -(-idx.shape[1] // multiple) * multiple
    if width > idx.shape[1]:
        pad = ((0, 0), (0, width - idx.shape[1]))
        idx, val = np.pad(idx, pad), np.pad(val, pad)
    sq = np.einsum("ij,ij->i", val, val)
    return PaddedRows(jnp.asarray(idx), jnp.asarray(val), jnp.asarray(sq), d)


def as_rows(X, dtype) -> Rows:
    """What the linear solvers take: :class:`PaddedRows` for scipy.sparse input (never
    densified), else a dense JAX array of ``dtype``."""
    if sp.issparse(X):
        return to_padded_rows(X, dtype=dtype)
    return jnp.asarray(X, dtype)


def padding_ratio(X: PaddedRows) -> float:
    """Stored slots per non-zero value, n * m / nnz (1.0 = no padding waste; host side)."""
    nnz = int(np.count_nonzero(np.asarray(X.values)))
    return X.values.size / max(nnz, 1)


# --------------------------------------------------------------------------- products


BLOCK_ENTRIES = 2**22
"""Largest number of gathered weights :func:`row_dots` holds at once for several vectors."""


@full_precision
def row_dots(X: Rows, w: jax.Array) -> jax.Array:
    """Row dot products X w: (n,) for w of shape (d,), (n, q) for W of shape (q, d) (X W').

    For several vectors and padded rows the weights are gathered as (rows, m, q), in blocks
    of rows holding at most :data:`BLOCK_ENTRIES` numbers (``lax.map`` over the blocks).
    """
    if isinstance(X, PaddedRows):
        if w.ndim == 1:
            return jnp.sum(X.values * w[X.indices], axis=1)
        n, m = X.values.shape
        q = w.shape[0]
        W = w.T
        R = max(1, min(n, BLOCK_ENTRIES // max(m * q, 1)))
        if R == n:
            return jnp.einsum("nm,nmq->nq", X.values, W[X.indices])
        nb = -(-n // R)
        blocks = lambda a: jnp.pad(a, ((0, nb * R - n), (0, 0))).reshape(nb, R, m)  # noqa: E731
        out = jax.lax.map(lambda blk: jnp.einsum("rm,rmq->rq", blk[1], W[blk[0]]),
                          (blocks(X.indices), blocks(X.values)))
        return out.reshape(nb * R, q)[:n]
    return X @ w.T


@full_precision
def rmatvec(X: Rows, u: jax.Array) -> jax.Array:
    """X'u of shape (d,) for u of shape (n,): each row's values scattered into its columns."""
    if isinstance(X, PaddedRows):
        contrib = (X.values * u[:, None]).ravel()
        return jax.ops.segment_sum(contrib, X.indices.ravel(), num_segments=X.n_features)
    return X.T @ u


def row_sq_norms(X: Rows) -> jax.Array:
    """(n,) squared row norms x_i'x_i (stored with :class:`PaddedRows`, computed for dense)."""
    if isinstance(X, PaddedRows):
        return X.sq_norms
    return jnp.sum(X * X, axis=1)


@full_precision
def row_dot(X: Rows, i, w: jax.Array) -> jax.Array:
    """w x_i for one row i: a scalar for w of shape (d,), (q,) for W of shape (q, d)."""
    if isinstance(X, PaddedRows):
        return w[..., X.indices[i]] @ X.values[i]
    return w @ X[i]


def row_axpy(X: Rows, i, w: jax.Array, c) -> jax.Array:
    """w + c x_i for one row i (c scalar with w (d,), or (q,) with W (q, d)).

    A sparse row scatters into its columns only; padding adds 0 to column 0.
    """
    c = jnp.asarray(c)[..., None]
    if isinstance(X, PaddedRows):
        return w.at[..., X.indices[i]].add(c * X.values[i])
    return w + c * X[i]
