"""Train/test splits and cross-validation folds (host-side NumPy).

The core layer's one home for folds, used by the solvers' own cross-validation
(:func:`bayesord.cv_npsvor`), the estimators' calibration and :mod:`bayesord.datasets`,
which re-exports the public functions.  All randomness goes through
``numpy.random.default_rng(seed)``.
"""

from __future__ import annotations

import numpy as np

from ._status import warn_user

__all__ = ["stratified_split", "random_split", "kfold_indices", "kfold_masks"]


def _check_labels_1d(y) -> np.ndarray:
    arr = np.asarray(y)
    if arr.ndim != 1:
        raise ValueError(f"y must be 1-D, got shape {arr.shape}")
    if arr.shape[0] == 0:
        raise ValueError("y is empty")
    if arr.dtype.kind == "f" and not np.all(np.isfinite(arr)):
        raise ValueError("y contains NaN or infinite values")
    if arr.dtype == object and any(v is None or (isinstance(v, float) and np.isnan(v)) for v in arr):
        raise ValueError("y contains missing labels (None/NaN)")
    return arr


def _check_n_train(n_train, n: int) -> int:
    if isinstance(n_train, bool) or not isinstance(n_train, (int, np.integer)):
        raise TypeError(f"n_train must be an integer, got {type(n_train).__name__}")
    if not 0 < n_train < n:
        raise ValueError(f"n_train must be between 1 and n - 1 = {n - 1}, got {n_train}")
    return int(n_train)


def _class_codes(y: np.ndarray) -> np.ndarray:
    try:
        _, codes = np.unique(y, return_inverse=True)
    except TypeError as err:
        raise TypeError("labels of mixed types cannot be grouped into classes") from err
    return codes.ravel()


def _random_within_class_order(codes: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Indices grouped by class (classes in order), in random order within each class."""
    perm = rng.permutation(codes.shape[0])
    return perm[np.argsort(codes[perm], kind="stable")]


def stratified_split(y, n_train: int, seed=None):
    """Random train/test split that keeps the class proportions, with exactly n_train.

    Class c gets round(n_train · n_c / n) training rows by largest remainders, then every
    class gets at least one training row when n_train >= K (taken from the classes that
    are most over their share), and at least one test row when n - n_train >= K and the
    class has two or more rows.

    Args:
        y: labels, shape (n,), any sortable values.
        n_train: exact size of the training part, 1 <= n_train <= n - 1.
        seed: seed for ``numpy.random.default_rng``.

    Returns:
        (train_idx, test_idx): sorted int64 index arrays, disjoint, covering 0..n-1.

    Raises:
        ValueError: empty or non-finite y, n_train out of range.

    Example:
        >>> tr, te = stratified_split([1, 1, 1, 1, 2, 2, 2, 2], 4, seed=0)
        >>> len(tr), len(te)
        (4, 4)
    """
    arr = _check_labels_1d(y)
    n = arr.shape[0]
    n_train = _check_n_train(n_train, n)
    codes = _class_codes(arr)
    counts = np.bincount(codes)
    n_classes = counts.shape[0]
    quota = counts * n_train / n
    take = np.floor(quota).astype(np.int64)
    lower = np.zeros(n_classes, dtype=np.int64)
    upper = counts.copy()
    if n_train >= n_classes:
        lower[:] = 1
    if n - n_train >= n_classes:
        upper = np.where(counts >= 2, counts - 1, counts)
    take = np.clip(take, lower, upper)
    # Fix the total one row at a time, choosing the class whose share is most off.
    while take.sum() < n_train:
        room = np.where(take < upper, quota - take, -np.inf)
        if not np.isfinite(room.max()):
            room = np.where(take < counts, quota - take, -np.inf)
        take[int(np.argmax(room))] += 1
    while take.sum() > n_train:
        excess = np.where(take > lower, take - quota, -np.inf)
        take[int(np.argmax(excess))] -= 1
    rng = np.random.default_rng(seed)
    order = _random_within_class_order(codes, rng)
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    rank_in_class = np.arange(n) - starts[codes[order]]
    in_train = rank_in_class < take[codes[order]]
    return np.sort(order[in_train]).astype(np.int64), np.sort(order[~in_train]).astype(np.int64)


def random_split(n: int, n_train: int, seed=None):
    """Uniformly random train/test split of n rows (for continuous targets).

    Args:
        n: number of rows.
        n_train: exact size of the training part, 1 <= n_train <= n - 1.
        seed: seed for ``numpy.random.default_rng``.

    Returns:
        (train_idx, test_idx): sorted int64 index arrays, disjoint, covering 0..n-1.

    Example:
        >>> tr, te = random_split(10, 7, seed=0)
        >>> len(tr), len(te)
        (7, 3)
    """
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)):
        raise TypeError(f"n must be an integer, got {type(n).__name__}")
    if n < 2:
        raise ValueError(f"n must be at least 2 to split, got {n}")
    n_train = _check_n_train(n_train, int(n))
    perm = np.random.default_rng(seed).permutation(int(n))
    return np.sort(perm[:n_train]).astype(np.int64), np.sort(perm[n_train:]).astype(np.int64)


def _fold_ids(y_or_n, k, seed, stratify: bool) -> np.ndarray:
    """Fold number 0..k-1 of every row."""
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)):
        raise TypeError(f"k must be an integer, got {type(k).__name__}")
    if isinstance(y_or_n, (int, np.integer)) and not isinstance(y_or_n, bool):
        n = int(y_or_n)
        codes = None
    else:
        arr = _check_labels_1d(y_or_n)
        n = arr.shape[0]
        codes = _class_codes(arr) if stratify else None
    if k < 2:
        raise ValueError(f"k must be at least 2, got {k}")
    if k > n:
        raise ValueError(f"k = {k} folds need at least {k} rows, got {n}")
    rng = np.random.default_rng(seed)
    if codes is None:
        order = rng.permutation(n)
    else:
        smallest = int(np.bincount(codes).min())
        if smallest < k:
            warn_user(f"the smallest class has {smallest} member(s), fewer than k = {k}: some "
                      "folds have no test row of that class")
        # Dealing the rows round-robin, class after class, puts n_c / k (+-1) rows of
        # every class and n / k (+-1) rows in total into each fold.
        order = _random_within_class_order(codes, rng)
    fold = np.empty(n, dtype=np.int64)
    fold[order] = rng.permutation(k)[np.arange(n) % k]
    return fold


def kfold_indices(y_or_n, k: int = 5, seed=None, stratify: bool = True):
    """K-fold cross-validation indices, stratified by class when labels are given.

    Args:
        y_or_n: labels of shape (n,) (stratified folds when ``stratify``), or the number
            of rows n (plain random folds; use this for continuous targets).
        k: number of folds, 2 <= k <= n.
        seed: seed for ``numpy.random.default_rng``.
        stratify: keep the class proportions in every fold (each fold gets n_c / k
            rows of class c, up to one).  Warns when a class has fewer than k rows.

    Returns:
        A list of k pairs (train_idx, test_idx) of sorted int64 arrays; the test parts
        partition 0..n-1 and their sizes differ by at most one.

    Examples:
        >>> folds = kfold_indices(10, k=5, seed=0)
        >>> [len(te) for _, te in folds]
        [2, 2, 2, 2, 2]
    """
    fold = _fold_ids(y_or_n, k, seed, stratify)
    return [(np.flatnonzero(fold != f), np.flatnonzero(fold == f)) for f in range(int(k))]


def kfold_masks(y_or_n, k: int = 5, seed=None, stratify: bool = True) -> np.ndarray:
    """The folds of :func:`kfold_indices` (same arguments, same seed, same folds) as masks.

    Returns:
        bool array of shape (k, n): row f is True on the training rows of fold f and
        False on its test rows.  ``masks.astype(float)`` are 0/1 sample weights, so all
        folds can be fitted in one ``jax.vmap`` over the weights; ``~masks`` selects the
        test rows.

    Example:
        >>> kfold_masks(6, k=3, seed=0).sum(axis=1)
        array([4, 4, 4])
    """
    fold = _fold_ids(y_or_n, k, seed, stratify)
    return fold[None, :] != np.arange(int(k))[:, None]
