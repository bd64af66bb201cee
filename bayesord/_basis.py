"""Kernels and basis functions: the one home of every kernel in the package.

Every model with a kernel evaluates it here, with one parameter convention:
``kernel_matrix(X, C, gamma, kernel, degree, coef0, center)``, ``gamma`` the width
(scale) of the kernel:

* ``"rbf"``: ``k(x, c) = exp(-gamma ||x - c||^2)`` (ISBOR paper, Eq. 2);
* ``"linear"``: ``k(x, c) = x . c``;
* ``"poly"``: ``k(x, c) = (gamma x . c + coef0) ** degree``;
* ``"perceptron"``: ``k(x, c) = |x - z0| + |c - z0| - |x - c|``, the positive definite form
  of the perceptron kernel ``-|x - c|`` (Lin & Li, RED-SVM paper, Section V-B) about a
  centre ``z0``;
* ``"precomputed"`` (ISBOR/SBOR): the user supplies the basis matrix itself; candidate
  ``j`` is column ``j`` of that matrix (training matrix of shape (N, N_cols), test matrix
  (n, N_cols)).

The public parameter names of the models are kept where they are the papers' notation:
ISBOR's ``theta`` is this ``gamma``; the perceptrons, RED-SVM/TOR and the swapped-pairs
SVM call it ``gamma``.  :data:`KERNELS` are the bases ISBOR/SBOR accept; the margin models
check their own lists.

A sparse Bayesian kernel model (ISBOR paper, Eq. 1) scores a point by
``f(x) = sum_i phi_i(x) w_i`` with basis functions centred on training points.
``gamma`` is a traced scalar, so a grid of kernel widths can be ``vmap``-ed.  The fitting
code asks for columns of the candidate basis in blocks of ``B`` candidates
(:func:`candidate_columns`), so its memory is ``O(N * B)`` for that step.
:func:`kmeanspp_indices` picks a spread-out subset of rows to use as candidate centres when
N is so large that scoring every training point as a centre is too slow.
"""

from __future__ import annotations

import numbers
from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import scipy.sparse as sp

from ._precision import jit

__all__ = [
    "KERNELS",
    "check_kernel",
    "check_gamma",
    "resolve_gamma",
    "sq_dists",
    "exact_sq_dists",
    "MARGIN_KERNELS",
    "kernel_matrix",
    "candidate_columns",
    "candidate_rows",
    "kmeanspp_indices",
    "KernelMap",
    "blocked_kernel_matrix",
    "fit_kernel_map",
    "transform_kernel_map",
]

KERNELS = ("rbf", "linear", "poly", "precomputed")


def check_kernel(kernel: str) -> None:
    """Raise ``ValueError`` for an unknown kernel name."""
    if kernel not in KERNELS:
        raise ValueError(f"kernel must be one of {KERNELS}, got {kernel!r}")


def check_gamma(gamma) -> None:
    """Raise ``ValueError`` unless ``gamma`` is a positive finite number, ``"scale"`` or None."""
    if gamma is None or (isinstance(gamma, str) and gamma == "scale"):
        return
    if isinstance(gamma, (str, bool)) or not isinstance(gamma, numbers.Real) \
            or not np.isfinite(gamma) or gamma <= 0:
        raise ValueError(f"gamma must be a positive number, 'scale' or None, got {gamma!r}")


def resolve_gamma(gamma, X) -> float:
    """The width ``g`` of the RBF kernel ``exp(-g ||x - x'||^2)`` fitted on inputs ``X``.

    ``"scale"``: ``g = 1 / (d Var(X))``, the variance taken over every entry of ``X``
    (dense or sparse), as scikit-learn's ``SVC(gamma="scale")``; 1 when that variance is 0.
    Two rows whose columns are independent with a common variance ``v`` lie a squared
    distance of about ``2 d v`` apart, so this puts the kernel between typical rows near
    ``e^-2`` whatever the dimension and the units; an absolute width does not (on
    standardised columns a width of 1 makes the kernel matrix nearly the identity once d is
    about 10).  None: ``1 / d`` (the same on standardised columns).  A number is used as
    given.  Host-side: call it once at fit and keep the value for prediction.
    """
    check_gamma(gamma)
    d = X.shape[1]
    if gamma is None:
        return 1.0 / d
    if gamma == "scale":
        if sp.issparse(X):
            mean = X.sum() / (X.shape[0] * d)
            var = X.multiply(X).sum() / (X.shape[0] * d) - mean**2
        else:
            var = np.var(np.asarray(X, dtype=np.float64))
        return float(1.0 / (d * var)) if var > 0 else 1.0
    return float(gamma)


def sq_dists(X, C):
    """Squared Euclidean distances, shape (n, m), clipped at zero against rounding.

    Expanded as ``|x|^2 + |c|^2 - 2 x.c`` (one matrix product): cheap, but it loses the
    small distances to cancellation; :func:`exact_sq_dists` does not.
    """
    xx = jnp.sum(X * X, axis=1)[:, None]
    cc = jnp.sum(C * C, axis=1)[None, :]
    return jnp.maximum(xx + cc - 2.0 * (X @ C.T), 0.0)


def exact_sq_dists(X, C):
    """Squared Euclidean distances from the differences themselves, shape (n, m).

    Exact near zero (the perceptron kernel's ``|x - c|`` needs that, and so do columns far
    from the origin), at the cost of an (n, m, d) temporary: evaluate it in row blocks.
    """
    return jnp.sum((X[:, None, :] - C[None, :, :]) ** 2, axis=-1)


MARGIN_KERNELS = ("linear", "rbf", "poly", "perceptron")
"""The kernels :func:`kernel_matrix` evaluates (ISBOR's ``"precomputed"`` is indexed instead)."""


def kernel_matrix(X, C, gamma, kernel: str = "rbf", degree=2, coef0=1.0, center=None, exact: bool = False):
    """The kernel between the rows of ``X`` and the centres ``C`` (see the module docstring).

    Args:
        X: points, shape (n, d).
        C: centres, shape (m, d).
        gamma: kernel width (RBF) or scale (poly); ignored by ``"linear"`` and
            ``"perceptron"``.  Traced.
        kernel: ``"rbf"``, ``"linear"``, ``"poly"`` or ``"perceptron"`` (static).
        degree: polynomial degree (a static int, or a traced float).
        coef0: the polynomial kernel's offset.
        center: ``z0`` of the perceptron kernel, shape (d,) (default: the origin).
        exact: distances from the differences (:func:`exact_sq_dists`, an (n, m, d)
            temporary) rather than the expansion (:func:`sq_dists`); the perceptron kernel
            always takes them so.

    Returns:
        Array of shape (n, m).

    Example:
        >>> import jax.numpy as jnp
        >>> round(float(kernel_matrix(jnp.zeros((1, 2)), jnp.ones((1, 2)), 0.5)[0, 0]), 4)
        0.3679
    """
    if kernel == "rbf":
        return jnp.exp(-gamma * (exact_sq_dists(X, C) if exact else sq_dists(X, C)))
    if kernel == "linear":
        return X @ C.T
    if kernel == "poly":
        return (gamma * (X @ C.T) + coef0) ** degree
    if kernel == "perceptron":
        z0 = jnp.zeros(X.shape[1], X.dtype) if center is None else center
        norm = lambda A: jnp.sqrt(jnp.sum((A - z0) ** 2, axis=1))  # noqa: E731
        return norm(X)[:, None] + norm(C)[None, :] - jnp.sqrt(exact_sq_dists(X, C))
    if kernel == "precomputed":
        raise ValueError("kernel_matrix needs a kernel; a precomputed basis is indexed, not evaluated")
    raise ValueError(f"kernel must be one of {MARGIN_KERNELS}, got {kernel!r}")


def candidate_columns(X, idx, gamma, kernel: str = "rbf", degree: int = 2):
    """Columns ``idx`` of the candidate basis over the training rows, shape (N, len(idx)).

    For a kernel basis the candidates are the training points ``X[idx]``; for
    ``"precomputed"`` ``X`` is the basis matrix and the columns are gathered.
    """
    if kernel == "precomputed":
        return jnp.take(X, idx, axis=1)
    return kernel_matrix(X, jnp.take(X, idx, axis=0), gamma, kernel, degree)


def candidate_rows(X, idx, gamma, kernel: str = "rbf", degree: int = 2):
    """The same basis as :func:`candidate_columns`, transposed: shape (len(idx), N).

    Row ``j`` is candidate ``idx[j]``'s basis function over the training rows; a block of
    rows is contiguous, which is the layout the candidate scoring multiplies with.
    """
    if kernel == "precomputed":
        return jnp.take(X, idx, axis=1).T
    return kernel_matrix(jnp.take(X, idx, axis=0), X, gamma, kernel, degree)


@partial(jit, static_argnames=("m",))
def kmeanspp_indices(X, key, m: int):
    """``m`` distinct row indices of ``X`` chosen by k-means++ seeding (D^2 sampling).

    Each new centre is drawn with probability proportional to its squared distance to the
    nearest centre chosen so far; cost ``O(N m d)``, memory ``O(N)``.

    Args:
        X: points, shape (N, d).
        key: a ``jax.random`` key.
        m: number of centres (static), at most N.

    Returns:
        int32 array of shape (m,).
    """
    n = X.shape[0]
    k0, key = jax.random.split(key)
    first = jax.random.randint(k0, (), 0, n, dtype=jnp.int32)

    def body(i, carry):
        idx, d2, key = carry
        key, sub = jax.random.split(key)
        logits = jnp.where(d2 > 0, jnp.log(jnp.where(d2 > 0, d2, 1.0)), -jnp.inf)
        # All remaining points coincide with chosen centres: fall back to uniform over them.
        logits = jnp.where(jnp.all(d2 <= 0), jnp.where(d2 < 0, -jnp.inf, 0.0), logits)
        j = jax.random.categorical(sub, logits).astype(jnp.int32)
        d_new = jnp.sum((X - X[j]) ** 2, axis=1)
        d2 = jnp.where(d2 < 0, d2, jnp.minimum(d2, d_new)).at[j].set(-1.0)
        return idx.at[i].set(j), d2, key

    d2 = jnp.sum((X - X[first]) ** 2, axis=1).at[first].set(-1.0)
    idx = jnp.zeros((m,), jnp.int32).at[0].set(first)
    idx, _, _ = jax.lax.fori_loop(1, m, body, (idx, d2, key))
    return idx


# --------------------------------------------------------------------------- Nystrom feature maps


class KernelMap(NamedTuple):
    """Empirical (Nystrom) feature map ``z(x) = k(x, L) U Lambda^{-1/2}``.

    With every training row a landmark, ``z(x_i) . z(x_j) = k(x_i, x_j)`` on the training
    rows (up to the eigenvalues dropped as negligible), so a linear model on ``z`` is the
    kernel model; with fewer landmarks it is the Nystrom approximation of rank m.
    """

    landmarks: jax.Array
    """(m, d) landmark rows L."""
    center: jax.Array
    """(d,) point z0 that makes the perceptron kernel positive definite."""
    projection: jax.Array
    """(m, m) ``U Lambda^{-1/2}`` with the columns of negligible eigenvalues zeroed."""
    gamma: jax.Array
    """RBF width (unused by the perceptron kernel)."""


def blocked_kernel_matrix(A, B, kind: str, gamma=1.0, center=None, block: int = 256):
    """:func:`kernel_matrix` between the rows of A (n, d) and B (m, d), in row blocks of A.

    Distances are taken from the differences (``exact=True``), so each block's temporary
    is (rows, m, d): the block holds at most ``block`` rows and at most 2^22 numbers.
    ``kind`` is ``"perceptron"`` (the positive definite form of ``-|a - b|`` about ``center``)
    or ``"rbf"``.
    """
    if kind not in ("perceptron", "rbf"):
        raise ValueError(f"unknown kernel {kind!r}; choose 'perceptron' or 'rbf'")
    A = jnp.asarray(A)
    B = jnp.asarray(B)
    n = A.shape[0]
    block = max(1, min(block, 2**22 // max(B.shape[0] * A.shape[1], 1)))
    nb = -(-n // block)
    Ap = jnp.concatenate([A, jnp.zeros((nb * block - n, A.shape[1]), A.dtype)]).reshape(nb, block, -1)
    one = lambda Ablk: kernel_matrix(Ablk, B, gamma, kind, center=center, exact=True)  # noqa: E731
    return jax.lax.map(one, Ap).reshape(nb * block, -1)[:n]


@partial(jit, static_argnames=("kind",))
def fit_kernel_map(landmarks, kind: str, gamma=1.0):
    """Build the empirical feature map on the landmark rows (eigendecomposition of K_LL).

    Eigenvalues below ``10 m eps max(lambda)`` are dropped (their columns of the projection
    are zero), so a rank-deficient or numerically indefinite K_LL gives a map of lower rank
    rather than a failure.  The perceptron kernel is centred at the landmarks' mean.
    """
    landmarks = jnp.asarray(landmarks)
    center = jnp.mean(landmarks, axis=0)
    K = blocked_kernel_matrix(landmarks, landmarks, kind, gamma, center)
    K = 0.5 * (K + K.T)
    lam, U = jnp.linalg.eigh(K)
    eps = jnp.finfo(K.dtype).eps * K.shape[0] * jnp.maximum(jnp.max(lam), 1e-300) * 10.0
    keep = lam > eps
    proj = jnp.where(keep[None, :], U / jnp.sqrt(jnp.where(keep, lam, 1.0))[None, :], 0.0)
    return KernelMap(landmarks, center, proj, jnp.asarray(gamma, K.dtype))


@partial(jit, static_argnames=("kind",))
def transform_kernel_map(kmap: KernelMap, X, kind: str):
    """Feature rows ``z(x)`` (n, m) for new points: ``k(X, L) U Lambda^{-1/2}``."""
    return blocked_kernel_matrix(X, kmap.landmarks, kind, kmap.gamma, kmap.center) @ kmap.projection
