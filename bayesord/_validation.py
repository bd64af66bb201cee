"""Host-side input checks and ordinal label encoding.

Everything here runs in NumPy before data reaches a jitted solver, so that bad input
fails early with a message that names the problem.  Nothing is silently dropped,
coerced or turned into NaN.

Labels can be any ordered values: integers with gaps, ordered pandas Categoricals, or
strings with an explicit ``classes=`` order.  Internally they become 0..K-1.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import scipy.sparse as sp

__all__ = [
    "MAX_IMPLICIT_CLASSES",
    "check_X",
    "check_sample_weight",
    "encode_labels",
    "encode_known_labels",
    "float_dtype",
]

MAX_IMPLICIT_CLASSES = 1000


def float_dtype():
    """The floating dtype JAX will use: float64 when ``jax_enable_x64`` is on, else float32."""
    import jax

    return np.float64 if jax.config.read("jax_enable_x64") else np.float32


def _feature_names(X) -> np.ndarray | None:
    cols = getattr(X, "columns", None)
    if cols is None:
        return None
    return np.asarray([str(c) for c in cols], dtype=object)


def check_X(X, *, name: str = "X", accept_sparse: bool = False, n_features: int | None = None,
            model: str = "the model"):
    """Validate a feature matrix.

    Args:
        X: array-like of shape (n, d), a pandas DataFrame, or (when ``accept_sparse``)
            a scipy.sparse matrix (converted to CSR with sorted, summed indices).
        name: the argument name used in error messages.
        accept_sparse: whether scipy.sparse input is allowed.
        n_features: when given, the number of columns X must have.
        model: who expects ``n_features`` (the estimator's name), for the message.

    Returns:
        (X, feature_names): a float ndarray (or CSR matrix) and the DataFrame column
        names or None.

    Raises:
        TypeError: non-numeric data, or sparse input where it is not supported.
        ValueError: complex data, not 2-D, empty, NaN/inf entries, wrong number of columns
            (the messages use scikit-learn's wording, which its estimator checks look for).
    """
    names = _feature_names(X)
    if sp.issparse(X):
        if not accept_sparse:
            raise TypeError(
                f"{name} is a scipy.sparse matrix, which this model does not accept; "
                "pass a dense array (e.g. X.toarray())"
            )
        X = sp.csr_matrix(X)
        if np.issubdtype(X.dtype, np.complexfloating):
            raise ValueError(f"Complex data not supported: {name} has dtype {X.dtype}")
        if not np.issubdtype(X.dtype, np.number):
            raise TypeError(f"{name} must hold real numbers, got dtype {X.dtype}")
        X = X.astype(np.float64)
        # Duplicates are summed and indices sorted explicitly (never mis-read).
        X.sum_duplicates()
        X.sort_indices()
        if X.ndim != 2:
            raise ValueError(f"{name} must be 2-D, got {X.ndim} dimensions")
        _check_not_empty(X.shape, name)
        if not np.all(np.isfinite(X.data)):
            raise ValueError(f"{name} contains NaN or infinite values")
    else:
        arr = np.asarray(X)
        if arr.dtype == object:
            try:
                arr = arr.astype(np.float64)
            except (TypeError, ValueError) as err:
                raise TypeError(f"{name} must be numeric; found non-numeric entries ({err})") from err
        if arr.dtype.kind == "c":
            raise ValueError(f"Complex data not supported: {name} has dtype {arr.dtype}")
        if arr.dtype.kind not in "biuf":
            raise TypeError(f"{name} must be numeric, got dtype {arr.dtype}")
        if arr.ndim != 2:
            raise ValueError(
                f"{name} must be 2-D (n_samples, n_features), got an array with {arr.ndim} "
                f"dimension(s) and shape {arr.shape}. Reshape your data: X.reshape(-1, 1) if it "
                "holds a single feature, X.reshape(1, -1) if it is a single sample"
            )
        _check_not_empty(arr.shape, name)
        X = arr.astype(np.float64, copy=False)
        if not np.all(np.isfinite(X)):
            bad = int(np.sum(~np.isfinite(X)))
            raise ValueError(f"{name} contains {bad} NaN or infinite value(s)")
    if n_features is not None and X.shape[1] != n_features:
        raise ValueError(
            f"{name} has {X.shape[1]} features, but {model} is expecting {n_features} features "
            "as input (the number it was fitted with)"
        )
    return X, names


def _check_not_empty(shape, name):
    if shape[0] == 0:
        raise ValueError(f"{name} has 0 sample(s) (shape={shape}) while a minimum of 1 is required.")
    if shape[1] == 0:
        raise ValueError(f"{name} has 0 feature(s) (shape={shape}) while a minimum of 1 is required.")


def check_sample_weight(sample_weight, n: int) -> np.ndarray:
    """Validate sample weights (None means all ones).

    A weight of 2 is equivalent to duplicating the row; 0 drops its contribution.

    Raises:
        ValueError: wrong length, NaN/inf, negative weights, or all weights zero.
    """
    if sample_weight is None:
        return np.ones(n, dtype=np.float64)
    sw = np.asarray(sample_weight)
    if sw.dtype.kind not in "biuf":
        raise TypeError(f"sample_weight must be numeric, got dtype {sw.dtype}")
    sw = sw.astype(np.float64)
    if sw.ndim != 1 or sw.shape[0] != n:
        raise ValueError(f"sample_weight must have shape ({n},), got {sw.shape}")
    if not np.all(np.isfinite(sw)):
        raise ValueError("sample_weight contains NaN or infinite values")
    if np.any(sw < 0):
        raise ValueError("sample_weight contains negative values")
    if not np.any(sw > 0):
        raise ValueError("sample_weight is zero for every sample")
    return sw


def _as_1d_labels(y, n: int | None):
    if hasattr(y, "dtype") and str(getattr(y, "dtype", "")) == "category":
        return y  # pandas Series / Categorical handled by the caller
    arr = np.asarray(y)
    if arr.ndim == 2 and arr.shape[1] == 1:
        raise ValueError("y must be 1-D; got a column vector of shape (n, 1): use y.ravel()")
    if arr.ndim != 1:
        raise ValueError(f"y must be 1-D, got shape {arr.shape}")
    if n is not None and arr.shape[0] != n:
        raise ValueError(f"X and y have different lengths: {n} rows in X, {arr.shape[0]} labels in y")
    if arr.shape[0] == 0:
        raise ValueError("y is empty")
    return arr


def encode_labels(y, classes: Sequence[Any] | None = None, n: int | None = None):
    """Map ordered labels to integer codes 0..K-1.

    Args:
        y: 1-D labels: numbers, an ordered pandas Categorical/Series, or strings (which
            need ``classes``).
        classes: the labels in increasing order.  Required for strings and unordered
            categoricals; optional for numbers (default: sorted distinct values).
        n: expected number of labels (the rows of X), checked when given.

    Returns:
        (codes, classes): int32 codes of shape (n,) and an ndarray of the K classes in order.

    Raises:
        ValueError: NaN labels, unknown labels, duplicated ``classes``, string labels
            without an order, more than 1000 distinct numeric labels without ``classes``,
            fewer than two classes.
    """
    if hasattr(y, "cat") or type(y).__name__ == "Categorical":
        cat = y.cat if hasattr(y, "cat") else y
        values = np.asarray(y.astype(object) if hasattr(y, "astype") else y, dtype=object)
        if n is not None and len(values) != n:
            raise ValueError(f"X and y have different lengths: {n} rows in X, {len(values)} labels in y")
        if len(values) == 0:
            raise ValueError("y is empty")
        if any(v is None or (isinstance(v, float) and np.isnan(v)) for v in values):
            raise ValueError("y contains missing labels (NaN)")
        if classes is None:
            if not cat.ordered:
                raise ValueError(
                    "y is an unordered pandas Categorical; make it ordered or pass classes=[...] "
                    "in increasing order"
                )
            classes = list(cat.categories)
        return encode_known_labels(values, classes, what="y")

    arr = _as_1d_labels(y, n)
    if classes is not None:
        return encode_known_labels(arr, classes, what="y")
    if arr.dtype.kind in "biuf":
        if arr.dtype.kind == "f" and not np.all(np.isfinite(arr)):
            raise ValueError("y contains NaN or infinite labels")
        uniq = np.unique(arr)
        if uniq.size > MAX_IMPLICIT_CLASSES:
            raise ValueError(
                f"y has {uniq.size} distinct values (more than {MAX_IMPLICIT_CLASSES}); this looks "
                "like a continuous target: bin it (bayesord.datasets.equal_frequency_bins) or pass classes="
            )
        codes = np.searchsorted(uniq, arr).astype(np.int32)
        return codes, uniq
    if arr.dtype == object:
        if any(v is None or (isinstance(v, float) and np.isnan(v)) for v in arr):
            raise ValueError("y contains missing labels (None/NaN)")
        if all(isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool) for v in arr):
            return encode_labels(arr.astype(np.float64), None, n)
    raise ValueError(
        f"labels of dtype {arr.dtype} have no natural order; pass classes=[...] listing them "
        "from lowest to highest (string labels are never sorted alphabetically)"
    )


def encode_known_labels(values, classes: Sequence[Any], what: str = "y"):
    """Encode labels against a given class order; unknown labels are an error."""
    classes_arr = np.asarray(list(classes), dtype=object)
    if classes_arr.ndim != 1 or classes_arr.size == 0:
        raise ValueError("classes must be a non-empty 1-D sequence")
    lookup = {}
    for i, c in enumerate(classes_arr):
        key = _label_key(c)
        if key in lookup:
            raise ValueError(f"classes contains {c!r} twice")
        lookup[key] = i
    vals = np.asarray(values, dtype=object).ravel()
    codes = np.empty(vals.shape[0], dtype=np.int32)
    unknown = []
    for i, v in enumerate(vals):
        idx = lookup.get(_label_key(v))
        if idx is None:
            unknown.append(v)
            idx = -1
        codes[i] = idx
    if unknown:
        shown = sorted({repr(u) for u in unknown})[:10]
        raise ValueError(f"{what} contains labels not in classes: {', '.join(shown)}")
    try:
        classes_out = np.asarray(classes_arr.tolist())
    except ValueError:
        classes_out = classes_arr
    if classes_out.dtype.kind not in "biufUS":
        classes_out = classes_arr
    return codes, classes_out


def _label_key(v):
    if isinstance(v, (np.integer, int)) and not isinstance(v, bool):
        return ("num", float(v))
    if isinstance(v, (np.floating, float)):
        return ("num", float(v))
    if isinstance(v, np.str_):
        return ("str", str(v))
    return (type(v).__name__, v)
