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
    "COLUMN_SCALE_LIMIT",
    "ColumnScaleWarning",
    "MAX_IMPLICIT_CLASSES",
    "check_X",
    "check_lengths",
    "column_moments",
    "column_scale_problems",
    "dependent_columns",
    "check_sample_weight",
    "encode_labels",
    "encode_known_labels",
    "float_dtype",
    "missing_cells_message",
    "non_numeric_columns",
]

MAX_IMPLICIT_CLASSES = 1000
# Column scales (standard deviations) that differ by more than this factor, or a column whose
# |mean| exceeds this many standard deviations, get a ColumnScaleWarning.
COLUMN_SCALE_LIMIT = 1e3
# The largest |x| a feature may hold: the models' variances hold squares of the inputs, and
# (1e160)^2 overflows float64 (a user's predict_proba returned [0.5, 0, 0, 0.5] and NaN bands).
MAX_ABS_VALUE = 1e150


class ColumnScaleWarning(UserWarning):
    """The feature columns' offsets or scales are far apart: standardise them before fitting."""


def float_dtype():
    """The floating dtype JAX will use: float64 when ``jax_enable_x64`` is on, else float32."""
    import jax

    return np.float64 if jax.config.read("jax_enable_x64") else np.float32


def floating_dtype(dtype):
    """The dtype a fit computes in for inputs of ``dtype``: ``dtype`` itself when it is a
    floating type, else the default float (:func:`float_dtype`)."""
    import jax.numpy as jnp

    return dtype if jnp.issubdtype(dtype, jnp.floating) else np.dtype(float_dtype())


def _feature_names(X) -> np.ndarray | None:
    cols = getattr(X, "columns", None)
    if cols is None:
        return None
    return np.asarray([str(c) for c in cols], dtype=object)


def check_X(X, *, name: str = "X", accept_sparse: bool = False, n_features: int | None = None,
            model: str = "the model", min_features: int = 1):
    """Validate a feature matrix.

    Args:
        X: array-like of shape (n, d), a pandas DataFrame, or (when ``accept_sparse``)
            a scipy.sparse matrix (converted to CSR with sorted, summed indices).
        name: the argument name used in error messages.
        accept_sparse: whether scipy.sparse input is allowed.
        n_features: when given, the number of columns X must have.
        model: who expects ``n_features`` (the estimator's name), for the message.
        min_features: the fewest columns allowed (0 for a model whose thresholds and group
            effects alone make a model).

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
        _check_not_empty(X.shape, name, min_features)
        if not np.all(np.abs(X.data) <= MAX_ABS_VALUE):  # one pass: False for NaN and inf too
            if not np.all(np.isfinite(X.data)):
                raise ValueError(f"{name} contains NaN or infinite values")
            raise ValueError(f"{name} holds values above {MAX_ABS_VALUE:g} in size: rescale its columns (the square "
                             "of such a value, which the models' variances hold, overflows float64)")
    else:
        arr = np.asarray(X)
        if arr.dtype == object:
            try:
                arr = arr.astype(np.float64)
            except (TypeError, ValueError) as err:
                missing = X.isna().to_numpy() if hasattr(X, "isna") else None  # pd.NA in a nullable column
                if missing is not None and missing.any():
                    raise ValueError(missing_cells_message(missing, names, name)) from None
                raise TypeError(_non_numeric_message(X, name, err)) from err
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
        _check_not_empty(arr.shape, name, min_features)
        X = arr.astype(np.float64, copy=False)
        within = np.abs(X) <= MAX_ABS_VALUE  # one pass: False for NaN and inf too
        if not within.all():
            finite = np.isfinite(X)
            if not finite.all():
                raise ValueError(missing_cells_message(~finite, names, name, "NaN or infinite"))
            raise ValueError(missing_cells_message(~within, names, name, f"huge (|x| > {MAX_ABS_VALUE:g})")
                             + ", or rescale the columns: the square of such a value, which the models' variances "
                             "hold, overflows float64")
    if n_features is not None and X.shape[1] != n_features:
        raise ValueError(
            f"{name} has {X.shape[1]} features, but {model} is expecting {n_features} features "
            "as input (the number it was fitted with)"
        )
    return X, names


def missing_cells_message(bad, names, name, what="missing"):
    """What a table ``name`` with ``bad`` cells (a boolean (n, d) mask) is told: how many, in
    which columns (``names``, or positions when None), and the first rows.  One wording for
    arrays, DataFrames, a CSV and a formula's columns."""
    cols = np.flatnonzero(bad.any(axis=0))
    shown = [str(names[j]) if names is not None else int(j) for j in cols[:5]]
    rows = np.flatnonzero(bad.any(axis=1))[:5].tolist()
    more = f" and {cols.size - 5} more" if cols.size > 5 else ""
    return (f"{name} contains {int(bad.sum())} {what} value(s), in column(s) {shown}{more} (first rows, "
            f"0-based: {rows}); drop or impute them explicitly")


def non_numeric_columns(frame) -> list[str]:
    """The names of a DataFrame's columns that do not hold numbers (bool counts as a
    number): text, categories, dates."""
    return [str(col) for col, dtype in frame.dtypes.items() if getattr(dtype, "kind", "O") not in "biuf"]


def _non_numeric_message(X, name, err):
    """What a table with text or date columns is told: which columns, and how to code them."""
    if getattr(X, "dtypes", None) is None:  # not a pandas DataFrame
        return f"{name} must be numeric; found non-numeric entries ({err})"

    def listed(cols):
        return ", ".join(repr(col) for col in cols[:5]) + (f" and {len(cols) - 5} more" if len(cols) > 5 else "")

    dates = [str(col) for col, dtype in X.dtypes.items() if getattr(dtype, "kind", "O") in "mM"]
    text = [col for col in non_numeric_columns(X) if col not in dates]
    parts = []
    if text:
        parts.append(f"column(s) {listed(text)} hold text or categories: code them, e.g. "
                     "pd.get_dummies(X, drop_first=True, dtype=float), or fit from a formula, e.g. "
                     "OrdinalProbit.from_formula('y ~ ...', data), which codes them and applies the "
                     "same coding in predict")
    if dates:
        parts.append(f"column(s) {listed(dates)} hold dates or durations: turn them into numbers, "
                     "e.g. days since a fixed date, (X[col] - pd.Timestamp('2020-01-01')).dt.days")
    return f"{name} must be numeric ({err}); " + "; ".join(parts)


def _check_not_empty(shape, name, min_features=1):
    if shape[0] == 0:
        raise ValueError(f"{name} has 0 sample(s) (shape={shape}) while a minimum of 1 is required.")
    if shape[1] < min_features:
        raise ValueError(f"{name} has {shape[1]} feature(s) (shape={shape}) while a minimum of "
                         f"{min_features} is required.")


def column_moments(X):
    """Mean, standard deviation and constancy of every column, without densifying.

    Args:
        X: (n, d) float ndarray or scipy.sparse CSR matrix (as :func:`check_X` returns).

    Returns:
        (mean, sd, constant): float arrays of shape (d,) (the population sd, ddof 0) and a
        bool array, True where every entry of the column is the same.  Constancy is
        decided on the values, not on ``sd == 0``, which rounding can miss.
    """
    n = X.shape[0]
    if sp.issparse(X):
        X = sp.csr_matrix(X)
        mean = np.asarray(X.sum(axis=0)).ravel() / n
        # Squared deviations of the stored entries, plus those of the implicit zeros.
        stored = np.bincount(X.indices, minlength=X.shape[1])
        dev2 = np.bincount(X.indices, weights=(X.data - mean[X.indices]) ** 2, minlength=X.shape[1])
        var = (dev2 + (n - stored) * mean**2) / n
        constant = np.asarray(X.max(axis=0).todense()).ravel() == np.asarray(X.min(axis=0).todense()).ravel()
    else:
        mean = X.mean(axis=0)
        var = np.mean((X - mean) ** 2, axis=0)
        constant = np.all(X == X[:1], axis=0)
    return mean, np.sqrt(var), constant


def column_scale_problems(X, names=None, offsets=True, limit=COLUMN_SCALE_LIMIT) -> str | None:
    """What is wrong with the offsets and scales of the columns of ``X``, or None.

    Two problems are reported, naming the columns (``names``, else ``x0``, ``x1``, ...):
    standard deviations that differ by more than ``limit`` between columns, and (when
    ``offsets``; never for sparse ``X``, which is not centred on purpose) a column whose
    |mean| / sd exceeds it.  Constant columns are left out of both (they have no scale to
    compare).

    Args:
        X: (n, d) float ndarray or scipy.sparse CSR matrix.
        names: the d column names, or None.
        offsets: whether to check the offsets as well as the scales.
        limit: the factor (:data:`COLUMN_SCALE_LIMIT` for ColumnScaleWarning).

    Returns:
        A sentence naming the problem columns, or None when there is none.
    """
    mean, sd, constant = column_moments(X)
    varying = np.flatnonzero(~constant)
    if varying.size == 0:
        return None
    label = [f"x{j}" for j in range(X.shape[1])] if names is None else [str(c) for c in names]
    problems = []
    small, large = varying[np.argmin(sd[varying])], varying[np.argmax(sd[varying])]
    if sd[large] > limit * sd[small]:
        problems.append(f"column standard deviations differ by a factor of {sd[large] / sd[small]:.2g} "
                        f"(from {sd[small]:.3g} for {label[small]!r} to {sd[large]:.3g} for "
                        f"{label[large]!r}; more than {limit:g})")
    if offsets and not sp.issparse(X):
        ratio = np.abs(mean[varying]) / sd[varying]
        far = varying[ratio > limit]
        if far.size:
            shown = ", ".join(f"{label[j]!r} ({abs(mean[j]) / sd[j]:.2g})" for j in far[:10])
            more = f" and {far.size - 10} more" if far.size > 10 else ""
            problems.append(f"columns whose mean is more than {limit:g} standard "
                            f"deviations from zero (|mean|/sd): {shown}{more}")
    return "; ".join(problems) or None


def dependent_columns(X, weights, names=None) -> str | None:
    """Groups of dense columns that are linearly dependent once centred, or None.

    A column combination that is constant over the rows with positive weight (a constant
    column; one-hot columns that keep every level, which sum to one) is absorbed by the
    thresholds of an ordinal model, so without a prior its coefficients are not
    identified.  Found from the singular values of the weighted, centred and scaled
    columns: a direction whose singular value is below ``1e-9`` of the largest.

    Args:
        X: (n, d) float ndarray.
        weights: (n,) non-negative sample weights.
        names: the d column names, or None.

    Returns:
        A sentence naming the columns of each dependent group, or None.
    """
    w = np.asarray(weights, dtype=np.float64)
    keep = w > 0
    Xk, wk = X[keep], w[keep] / np.sum(w[keep])
    centred = Xk - wk @ Xk
    sd = np.sqrt(wk @ centred**2)
    # A constant column's centred values are rounding residue (an sd near 1e-16 of its
    # values, 0 only when they are 0): scaled up, they would pass for a column of its own.
    constant = sd <= 1e-12 * np.max(np.abs(Xk), axis=0, initial=0.0)
    Z = np.sqrt(wk)[:, None] * np.where(constant, 0.0, centred) / np.where(sd > 0, sd, 1.0)
    _, sv, vt = np.linalg.svd(Z, full_matrices=True)
    sv = np.concatenate([sv, np.zeros(vt.shape[0] - sv.size)])
    null = vt[sv <= 1e-9 * max(sv.max(), np.finfo(float).tiny)]
    if null.size == 0:
        return None
    label = [f"x{j}" for j in range(X.shape[1])] if names is None else [str(c) for c in names]
    groups = []
    for v in null:
        members = np.flatnonzero(np.abs(v) > 1e-6 * np.abs(v).max())
        group = ", ".join(repr(label[j]) for j in members[:8]) + (" ..." if members.size > 8 else "")
        if group not in groups:
            groups.append(group)
    return ("columns that are linearly dependent once centred (a constant combination, such as "
            "a constant column or one-hot columns that keep every level): "
            + "; ".join(f"[{g}]" for g in groups))


def check_lengths(n: int, **arrays) -> None:
    """Raise ValueError unless every named array has shape (n,), one entry per row of X.

    Shapes only, so it also takes traced arrays (the functional fits' inputs).
    """
    for name, a in arrays.items():
        if np.shape(a) != (n,):
            raise ValueError(f"{name} must have shape ({n},), one entry per row of X; got shape {np.shape(a)}")


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


def class_weights(class_weight, codes, sample_weight, classes) -> np.ndarray:
    """Per-class multipliers of the sample weights, shape (K,).

    ``"balanced"`` gives class k the multiplier ``W / (K W_k)``, with ``W_k`` the total sample
    weight of class k and ``W`` that of all rows, so that every class carries the same total
    weight and the total stays ``W`` (scikit-learn's rule, with sample weights); a dict maps
    labels to multipliers, and classes it does not name keep 1.

    Raises:
        ValueError: an unknown string, a label that is not a class, a negative or non-finite
            multiplier, or multipliers that leave every row at weight zero.
        TypeError: neither None, "balanced" nor a dict.
    """
    k = len(classes)
    if isinstance(class_weight, str):
        if class_weight != "balanced":
            raise ValueError(f"class_weight must be None, 'balanced' or a dict of label -> weight, "
                             f"got {class_weight!r}")
        totals = np.bincount(codes, weights=sample_weight, minlength=k)
        with np.errstate(divide="ignore"):
            return np.where(totals > 0, totals.sum() / (k * totals), 0.0)
    if not isinstance(class_weight, dict):
        raise TypeError(f"class_weight must be None, 'balanced' or a dict of label -> weight, "
                        f"got {type(class_weight).__name__}")
    listed = np.asarray(classes).tolist()  # Python labels, so the message shows 'low', not np.str_('low')
    unknown = [label for label in class_weight if label not in listed]
    if unknown:
        raise ValueError(f"class_weight names {unknown}, which are not classes; the classes are {listed}")
    out = np.ones(k)
    for label, value in class_weight.items():
        if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)) \
                or not np.isfinite(value) or value < 0:
            raise ValueError(f"class_weight[{label!r}] must be a finite number >= 0, got {value!r}")
        out[listed.index(label)] = float(value)
    if not np.any(out[codes] * sample_weight > 0):
        raise ValueError("class_weight leaves every row at weight zero")
    return out


def _as_1d_labels(y, n: int | None):
    if hasattr(y, "dtype") and str(getattr(y, "dtype", "")) == "category":
        return y  # pandas Series / Categorical handled by the caller
    arr = np.asarray(y)
    if arr.ndim == 2 and arr.shape[1] == 1:
        if hasattr(y, "columns"):
            raise ValueError(f"y must be 1-D; got a one-column DataFrame: pass the column itself, "
                             f"frame[{y.columns[0]!r}] (not frame[[{y.columns[0]!r}]])")
        raise ValueError("y must be 1-D; got a column vector of shape (n, 1): use y.ravel()")
    if arr.ndim != 1:
        raise ValueError(f"y must be 1-D, got shape {arr.shape}")
    if n is not None and arr.shape[0] != n:
        raise ValueError(f"X and y have different lengths: {n} rows in X, {arr.shape[0]} labels in y")
    if arr.shape[0] == 0:
        raise ValueError("y is empty")
    return arr


def _encode_numbers(arr):
    """The sorted distinct values of a numeric label array and each label's position among
    them (int32).  Integers of a narrow range (the usual class labels) are counted into a
    table instead of sorted: on 10^5 labels 0.2 ms instead of 1.9 ms."""
    if arr.dtype.kind in "iu" and arr.size:
        lo = int(arr.min())
        span = int(arr.max()) - lo
        if span < 2 * arr.size + 1024:
            # In the unsigned dtype itself (no value below lo), else in int64 (narrow types
            # would wrap): the offsets are at most span either way.
            base = arr if arr.dtype.kind == "u" else arr.astype(np.int64)
            offset = (base - base.dtype.type(lo)).astype(np.intp)
            present = np.bincount(offset, minlength=span + 1) > 0
            uniq = (np.flatnonzero(present) + lo).astype(arr.dtype)
            return uniq, (np.cumsum(present) - 1).astype(np.int32)[offset]
    uniq = np.unique(arr)
    return uniq, np.searchsorted(uniq, arr).astype(np.int32)


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
        _refuse_missing_labels(values)
        if classes is None:
            if not cat.ordered:
                raise ValueError(
                    "y is an unordered pandas Categorical; make it ordered or pass classes=[...] "
                    "in increasing order"
                )
            classes = list(cat.categories)
        elif cat.ordered:
            given_keys, own_keys = {_label_key(k) for k in classes}, {_label_key(c) for c in cat.categories}
            own = [c for c in cat.categories if _label_key(c) in given_keys]
            given = [c for c in classes if _label_key(c) in own_keys]
            if [_label_key(c) for c in own] != [_label_key(c) for c in given]:
                raise ValueError(f"y is an ordered Categorical whose order ({' < '.join(map(str, own))}) is not "
                                 f"the order of classes ({' < '.join(map(str, given))}): pass one order")
        return encode_known_labels(values, classes, what="y")

    arr = _as_1d_labels(y, n)
    if classes is not None:
        return encode_known_labels(arr, classes, what="y")
    if arr.dtype.kind in "biuf":
        if arr.dtype.kind == "f" and not np.all(np.isfinite(arr)):
            _refuse_missing_labels(arr)
            raise ValueError(f"y contains {_labels_at(np.isinf(arr), 'infinite')}")
        uniq, codes = _encode_numbers(arr)
        if uniq.size > MAX_IMPLICIT_CLASSES:
            raise ValueError(
                f"y has {uniq.size} distinct values (more than {MAX_IMPLICIT_CLASSES}); this looks "
                "like a continuous target: bin it (bayesord.datasets.equal_frequency_bins) or pass classes="
            )
        return codes, uniq
    if arr.dtype == object:
        _refuse_missing_labels(arr)
        if all(isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool) for v in arr):
            return encode_labels(arr.astype(np.float64), None, n)
    raise ValueError(
        f"labels of dtype {arr.dtype} ({shown_labels(arr)}) have no natural order; pass classes=[...] "
        "listing them from lowest to highest (string labels are never sorted alphabetically)"
    )


def shown_labels(values, limit: int = 10) -> str:
    """The distinct labels of ``values`` for an error message: ``"high, low, mid"``, at most
    ``limit`` of them (then ``", ..."``), sorted as text only to be listed."""
    seen = sorted({str(v) for v in np.asarray(values, dtype=object).ravel().tolist()})
    return ", ".join(seen[:limit]) + (", ..." if len(seen) > limit else "")


def encode_known_labels(values, classes: Sequence[Any], what: str = "y"):
    """Encode labels against a given class order; unknown labels are an error.

    Each distinct value is looked up once (``np.unique`` with its inverse), so the cost is a
    sort of the labels, not a Python step per label; values that do not sort together (mixed
    types in an object array) are looked up one by one.
    """
    classes_arr = np.asarray(list(classes), dtype=object)
    if classes_arr.ndim != 1 or classes_arr.size == 0:
        raise ValueError("classes must be a non-empty 1-D sequence")
    lookup = {}
    for i, c in enumerate(classes_arr):
        key = _label_key(c)
        if key in lookup:
            raise ValueError(f"classes contains {c!r} twice")
        lookup[key] = i
    # Arrays of numbers or strings keep their dtype; anything else (a list may hold numbers and
    # strings, which np.asarray would turn into strings) is compared as Python objects.
    typed = isinstance(getattr(values, "dtype", None), np.dtype) and values.dtype.kind in "iufUS"
    vals = np.asarray(values if typed else np.asarray(values, dtype=object)).ravel()
    try:
        distinct, inverse = np.unique(vals, return_inverse=True)
    except TypeError:
        distinct, inverse = vals, np.arange(vals.size)
    found = np.array([lookup.get(_label_key(v), -1) for v in distinct], dtype=np.int32)
    if np.any(found < 0):
        _refuse_missing_labels(vals, what)
        unknown = distinct[found < 0].tolist()
        shown = ", ".join(sorted({repr(u) for u in unknown})[:10])
        as_text = {str(c) for c in classes_arr.tolist()}
        if all(str(u) in as_text for u in unknown):
            raise ValueError(f"{what} contains labels not in classes: {shown}.  They are classes written "
                             f"as another type ({type(unknown[0]).__name__} labels, "
                             f"{type(classes_arr[0]).__name__} classes): pass classes of the labels' own type")
        raise ValueError(f"{what} contains labels not in classes: {shown}")
    codes = found[inverse.ravel()]
    try:
        classes_out = np.asarray(classes_arr.tolist())
    except ValueError:
        classes_out = classes_arr
    if classes_out.dtype.kind not in "biufUS":
        classes_out = classes_arr
    return codes, classes_out


def _labels_at(mask, what: str) -> str:
    """``"2 missing label(s) (first rows, 0-based: [4, 17])"``, the wording of
    :func:`missing_cells_message` for labels."""
    rows = np.flatnonzero(mask)
    return f"{rows.size} {what} label(s) (first rows, 0-based: {rows[:5].tolist()})"


def _refuse_missing_labels(values, what: str = "y") -> None:
    """A missing label (None, NaN, ``pd.NA``) is refused with the rows that hold one."""
    values = np.asarray(values)
    if values.dtype.kind == "f":
        missing = np.isnan(values)
    elif values.dtype == object:
        import pandas as pd  # pd.isna knows None, NaN and pd.NA, as the group labels' check reads them

        missing = np.asarray(pd.isna(values), dtype=bool)
    else:
        return  # integers, text
    if missing.any():
        raise ValueError(f"{what} contains {_labels_at(missing, 'missing')}, NaN or None; drop those rows or "
                         "fill in their labels")


def _label_key(v):
    if isinstance(v, (np.integer, int)) and not isinstance(v, bool):
        return ("num", float(v))
    if isinstance(v, (np.floating, float)):
        return ("num", float(v))
    if isinstance(v, np.str_):
        return ("str", str(v))
    return (type(v).__name__, v)
