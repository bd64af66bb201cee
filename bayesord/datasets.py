"""Data for ordinal regression: loaders, binning, splits and synthetic generators.

Host-side NumPy/SciPy.  Loaders never drop, fill or coerce values silently: a missing
target column, a non-numeric feature or a missing value is an error naming the column.
All randomness goes through ``numpy.random.default_rng(seed)``, so a seed gives the same
result on every machine.

Real benchmark data lives beside the repository in ``../shared/datasets`` (see its
MANIFEST.md); :func:`load_shared` finds it, nothing is copied into the package.
Embedded defaults use the synthetic generators: :func:`make_isbor_synthetic` (the 2-D
problem of the ISBOR paper, Sec. 5.1) and :func:`make_ordinal_probit` (a linear latent
model with known weights, thresholds and noise).
"""

from __future__ import annotations

import gzip
import os
import re
import warnings
from pathlib import Path
from typing import NamedTuple

import numpy as np
import scipy.sparse as sp
from scipy.special import ndtri

from ._splits import kfold_indices, kfold_masks, random_split, stratified_split
from ._validation import missing_cells_message, non_numeric_columns

__all__ = [
    "SHARED_DATASETS",
    "Dataset",
    "OrdinalTruth",
    "load_csv",
    "warn_if_unnamed_columns",
    "load_libsvm",
    "load_shared",
    "equal_width_bins",
    "equal_frequency_bins",
    "stratified_split",
    "random_split",
    "kfold_indices",
    "kfold_masks",
    "make_isbor_synthetic",
    "make_ordinal_probit",
    "make_tor_synthetic",
]

# name -> kind, as listed in ../shared/datasets/MANIFEST.md.  "ordinal": y is 1..K;
# "continuous": y is a raw target to bin; "libsvm": sparse train/test pair.
SHARED_DATASETS = {
    "balance_scale": "ordinal",
    "swd": "ordinal",
    "era": "ordinal",
    "esl": "ordinal",
    "tae": "ordinal",
    "pasture": "ordinal",
    "pyrim10": "ordinal",
    "toy": "ordinal",
    "winequality_red": "ordinal",
    "marketing": "ordinal",
    "machine_cpu": "continuous",
    "auto_mpg": "continuous",
    "boston_housing": "continuous",
    "pyrimidines": "continuous",
    "triazines": "continuous",
    "wpbc": "continuous",
    "stock": "continuous",
    "abalone": "continuous",
    "diabetes": "continuous",
    "bank8fm": "continuous",
    "cpu_small": "continuous",
    "california_housing": "continuous",
    "treebank": "libsvm",
}


# ------------------------------------------------------------------------------ loaders


def _open_maybe_gzip(path: Path):
    """Binary file object, decompressing when the file starts with the gzip magic bytes."""
    with open(path, "rb") as fh:
        magic = fh.read(2)
    return gzip.open(path, "rb") if magic == b"\x1f\x8b" else open(path, "rb")


def _whole_to_int(y: np.ndarray) -> np.ndarray:
    """float labels that are all whole numbers as int64 (lossless), else unchanged."""
    if y.dtype.kind == "f" and np.all(y == np.round(y)) and np.all(np.abs(y) < 2**53):
        return y.astype(np.int64)
    return y


def _separator_hint(columns) -> str:
    """A hint for a header read as one column that holds another separator (a file written
    with ``;``, tab or ``|`` between fields), else ""."""
    if len(columns) != 1:
        return ""
    for sep, name in ((";", "semicolon"), ("\t", "tab"), ("|", "'|'")):
        if sep in str(columns[0]):
            return (f" (the header looks {name}-separated; CSV files here are comma-separated: "
                    f"convert it, e.g. pandas.read_csv(path, sep={sep!r}).to_csv(new_path, index=False))")
    return ""


def warn_if_unnamed_columns(columns, source) -> None:
    """Warn when feature ``columns`` include one without a name in the file's header, which
    pandas reads as ``"Unnamed: 0"``: most often a DataFrame's index saved by ``to_csv``
    without ``index=False``, a row number that a model would take as a feature (and one
    that leaks the labels when the rows were sorted by them)."""
    unnamed = [str(c) for c in columns if re.fullmatch(r"Unnamed: \d+", str(c))]
    if unnamed:
        warnings.warn(f"{source}: column(s) {unnamed} have no name in the header, as a saved DataFrame index "
                      "has (to_csv without index=False); they are used as features. Drop them, or save the file "
                      "with index=False", UserWarning, stacklevel=3)


def load_csv(path, target: str = "y", dtype=np.float64):
    """Load a CSV file (plain or gzip-compressed) with one header row.

    Args:
        path: file name; gzip is detected from the content, not the extension.
        target: name of the target column (any position; the others are features).
        dtype: float dtype of the feature matrix.

    Returns:
        (X, y, feature_names): X of shape (n, d) and ``dtype``; y of shape (n,), int64
        when the column holds whole numbers only, float64 when it holds other numbers,
        and an object array of strings when it is not numeric (ordinal string labels
        then need an explicit ``classes=`` order); feature_names, a list of d strings.

    Raises:
        FileNotFoundError: no such file.
        ValueError: an empty file, no column named ``target``, no feature column, no rows, a missing
            (empty/NaN) or infinite value anywhere.

    Warns:
        UserWarning: a feature column without a name in the header (a saved DataFrame
            index, :func:`warn_if_unnamed_columns`).
        TypeError: a feature column that is not numeric (its name is given), or a
            non-float ``dtype``.

    Example:
        >>> X, y, names = load_csv("../shared/datasets/toy.csv.gz")  # doctest: +SKIP
    """
    import pandas as pd

    if np.dtype(dtype).kind != "f":
        raise TypeError(f"dtype must be a floating dtype (features are never truncated), got {dtype}")
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"CSV file not found: {path}")
    with _open_maybe_gzip(path) as fh:
        try:
            frame = pd.read_csv(fh, keep_default_na=True)
        except pd.errors.EmptyDataError:
            raise ValueError(f"{path.name} is empty (no header row)") from None
    columns = [str(c) for c in frame.columns]
    if target not in columns:
        raise ValueError(f"{path.name} has no target column {target!r}; columns are {columns}"
                         + _separator_hint(columns))
    if frame.shape[0] == 0:
        raise ValueError(f"{path.name} has a header but no rows")
    features = [c for c in frame.columns if str(c) != target]
    if not features:
        raise ValueError(f"{path.name} has no feature columns besides {target!r}")
    warn_if_unnamed_columns(features, path.name)
    missing = frame.isna().to_numpy()
    if missing.any():
        raise ValueError(missing_cells_message(missing, columns, path.name))
    non_numeric = non_numeric_columns(frame[features])
    if non_numeric:
        raise TypeError(
            f"{path.name}: feature column(s) {non_numeric} are not numeric; encode them "
            "(e.g. one-hot) before loading"
        )
    X = frame[features].to_numpy(dtype=dtype)
    if not np.all(np.isfinite(X)):
        bad = [str(c) for c in features if not np.all(np.isfinite(frame[c].to_numpy(dtype=float)))]
        raise ValueError(f"{path.name} has infinite values in column(s) {bad}")
    ycol = frame[target]
    if pd.api.types.is_bool_dtype(ycol) or not pd.api.types.is_numeric_dtype(ycol):
        y = ycol.astype(str).to_numpy(dtype=object)
    else:
        y = ycol.to_numpy()
        if y.dtype.kind == "f" and not np.all(np.isfinite(y)):
            raise ValueError(f"{path.name} has infinite values in the target column {target!r}")
        y = _whole_to_int(y.astype(np.float64)) if y.dtype.kind == "f" else y.astype(np.int64)
    return X, y, [str(c) for c in features]


def load_libsvm(path, n_features: int | None = None):
    """Load LIBSVM / SVMlight text (1-based feature indices) as scipy CSR.

    Each line is ``label index:value index:value ...``; ``#`` starts a comment.  Parsed
    by ``sklearn.datasets.load_svmlight_file`` with ``zero_based=False``.

    Args:
        path: file name, plain or gzip-compressed (detected from the content).
        n_features: width of X.  Default: the largest index in the file.  Give it to
            load a train and a test file with the same width (it must be at least the
            largest index present).

    Returns:
        (X, y): X a ``scipy.sparse.csr_matrix`` of float64, shape (n, n_features), with
        sorted indices and no duplicates; y of shape (n,), int64 when all labels are
        whole numbers, else float64.

    Raises:
        FileNotFoundError: no such file.
        ValueError: malformed lines, index 0 (not 1-based), an index larger than
            ``n_features``, NaN/inf values or labels, an empty file.

    Example:
        >>> X, y = load_libsvm("../shared/datasets/treebank/treebank.train")  # doctest: +SKIP
    """
    from sklearn.datasets import load_svmlight_file

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"LIBSVM file not found: {path}")
    if n_features is not None and (
        isinstance(n_features, bool) or not isinstance(n_features, (int, np.integer)) or n_features < 1
    ):
        raise ValueError(f"n_features must be a positive integer, got {n_features!r}")
    with _open_maybe_gzip(path) as fh:
        try:
            X, y = load_svmlight_file(
                fh, n_features=None, dtype=np.float64, zero_based=False, multilabel=False
            )
        except ValueError as err:
            raise ValueError(f"{path.name} is not valid 1-based LIBSVM text: {err}") from err
    if X.shape[0] == 0:
        raise ValueError(f"{path.name} holds no samples")
    if n_features is not None:
        if X.shape[1] > n_features:
            raise ValueError(
                f"{path.name} uses feature index {X.shape[1]}, more than n_features={n_features}"
            )
        X = sp.csr_matrix((X.data, X.indices, X.indptr), shape=(X.shape[0], int(n_features)))
    X = sp.csr_matrix(X)
    X.sum_duplicates()
    X.sort_indices()
    if not np.all(np.isfinite(X.data)):
        raise ValueError(f"{path.name} contains NaN or infinite feature values")
    y = np.asarray(y, dtype=np.float64)
    if not np.all(np.isfinite(y)):
        raise ValueError(f"{path.name} contains NaN or infinite labels")
    return X, _whole_to_int(y)


class Dataset(NamedTuple):
    """One shared benchmark dataset, as returned by :func:`load_shared`."""

    name: str
    """Dataset name (a key of ``SHARED_DATASETS``)."""
    kind: str
    """'ordinal' (y in 1..K), 'continuous' (raw target, bin it) or 'libsvm' (sparse)."""
    X: np.ndarray | sp.csr_matrix
    """Features, dense (n, d) float64, or CSR for LIBSVM data (the train file)."""
    y: np.ndarray
    """Targets, shape (n,)."""
    feature_names: list | None
    """Column names of a CSV dataset; None for LIBSVM data."""
    X_test: sp.csr_matrix | None
    """Test features of a dataset that ships a fixed test file (same width as X), else None."""
    y_test: np.ndarray | None
    """Test targets matching ``X_test``, else None."""


def _default_roots() -> list[Path]:
    roots = []
    env = os.environ.get("BAYESORD_DATASETS")
    if env:
        roots.append(Path(env))
    roots.append(Path.cwd().parent / "shared" / "datasets")
    roots.append(Path(__file__).resolve().parents[2] / "shared" / "datasets")
    return roots


def load_shared(name: str, root=None) -> Dataset:
    """Load one dataset of ``../shared/datasets`` (MANIFEST.md) by name.

    Args:
        name: a key of ``SHARED_DATASETS`` (e.g. ``"toy"``, ``"abalone"``,
            ``"treebank"``).
        root: the datasets folder.  Default: ``$BAYESORD_DATASETS`` if set, else
            ``../shared/datasets`` relative to the current directory, else relative to
            the repository this package was imported from.

    Returns:
        A :class:`Dataset`.  Dense sets come from ``NAME.csv.gz`` via :func:`load_csv`
        (target ``y``); ``treebank`` is the LIBSVM train file in ``X, y`` and the test
        file in ``X_test, y_test``, both 8,569 columns wide.

    Raises:
        ValueError: unknown name.
        FileNotFoundError: the folder or the dataset's file is absent (the message says
            where it looked).

    Example:
        >>> ds = load_shared("toy")  # doctest: +SKIP
        >>> ds.X.shape, ds.kind  # doctest: +SKIP
        ((300, 2), 'ordinal')
    """
    if name not in SHARED_DATASETS:
        raise ValueError(f"unknown shared dataset {name!r}; known: {sorted(SHARED_DATASETS)}")
    kind = SHARED_DATASETS[name]
    roots = [Path(root)] if root is not None else _default_roots()
    if kind == "libsvm":
        wanted = [Path(name) / f"{name}.train", Path(name) / f"{name}.test"]
    else:
        wanted = [Path(f"{name}.csv.gz")]
    for base in roots:
        files = [base / w for w in wanted]
        if all(f.is_file() for f in files):
            break
    else:
        looked = ", ".join(str(r / wanted[0]) for r in roots)
        raise FileNotFoundError(
            f"shared dataset {name!r} not found (looked for {looked}); the shared data sits "
            "beside the repository in ../shared/datasets, or pass root= / set BAYESORD_DATASETS"
        )
    if kind == "libsvm":
        X_tr, y_tr = load_libsvm(files[0])
        X_te, y_te = load_libsvm(files[1])
        width = max(X_tr.shape[1], X_te.shape[1])
        X_tr = sp.csr_matrix((X_tr.data, X_tr.indices, X_tr.indptr), shape=(X_tr.shape[0], width))
        X_te = sp.csr_matrix((X_te.data, X_te.indices, X_te.indptr), shape=(X_te.shape[0], width))
        return Dataset(name, kind, X_tr, y_tr, None, X_te, y_te)
    X, y, names = load_csv(files[0], target="y")
    return Dataset(name, kind, X, y, names, None, None)


# ------------------------------------------------------------------------------ binning


def _check_continuous(y, n_bins) -> np.ndarray:
    if isinstance(n_bins, bool) or not isinstance(n_bins, (int, np.integer)):
        raise TypeError(f"n_bins must be an integer, got {type(n_bins).__name__}")
    if n_bins < 2:
        raise ValueError(f"n_bins must be at least 2, got {n_bins}")
    arr = np.asarray(y)
    if arr.dtype.kind not in "biuf":
        raise TypeError(f"y must be numeric to be binned, got dtype {arr.dtype}")
    if arr.ndim != 1:
        raise ValueError(f"y must be 1-D, got shape {arr.shape}")
    if arr.shape[0] == 0:
        raise ValueError("y is empty")
    arr = arr.astype(np.float64)
    if not np.all(np.isfinite(arr)):
        raise ValueError("y contains NaN or infinite values; binning needs finite targets")
    return arr


def equal_width_bins(y, n_bins: int) -> np.ndarray:
    """Cut a continuous target into ``n_bins`` intervals of equal width: classes 1..K.

    Edges e_k = min + k (max - min) / K.  Bins are closed on the left, [e_k, e_{k+1}),
    and the last one also holds the maximum, so a value on an interior edge goes to the
    upper class and equal values always share a class.  Bins can be empty (outliers
    stretch the range); such classes are simply absent from the result.

    Args:
        y: continuous targets, shape (n,), finite.
        n_bins: number of classes K >= 2.

    Returns:
        int64 classes in 1..K, shape (n,), non-decreasing in y.

    Raises:
        ValueError: n_bins < 2, non-finite or empty y, or y constant (no width to cut).
        TypeError: non-numeric y or non-integer n_bins.

    Example:
        >>> equal_width_bins([0.0, 1.0, 2.0, 3.0, 4.0], 2)
        array([1, 1, 2, 2, 2])
    """
    arr = _check_continuous(y, n_bins)
    lo, hi = arr.min(), arr.max()
    if lo == hi:
        raise ValueError(f"y is constant ({lo}); it cannot be cut into {n_bins} bins")
    inner = lo + (hi - lo) * np.arange(1, n_bins) / n_bins
    return (np.searchsorted(inner, arr, side="right") + 1).astype(np.int64)


def equal_frequency_bins(y, n_bins: int) -> np.ndarray:
    """Cut a continuous target into ``n_bins`` classes of (nearly) equal size: 1..K.

    Ties are never split: all copies of a value share one class, so classes are ordered
    (y_i < y_j implies class_i <= class_j).  The K-1 cuts are placed between distinct
    values: each at the boundary nearest to its ideal position j·n/K in the sorted data,
    then moved as little as needed to keep the cuts distinct, so every class 1..K is
    non-empty.  Without ties the class sizes differ by at most one; heavy ties make them
    as equal as the ties allow.

    Args:
        y: continuous targets, shape (n,), finite.
        n_bins: number of classes K >= 2.

    Returns:
        int64 classes in 1..K, shape (n,), each class present.

    Raises:
        ValueError: n_bins < 2, non-finite or empty y, or fewer than K distinct values.
        TypeError: non-numeric y or non-integer n_bins.

    Example:
        >>> equal_frequency_bins([5.0, 1.0, 1.0, 1.0, 2.0, 3.0], 3)
        array([3, 1, 1, 1, 2, 3])
    """
    arr = _check_continuous(y, n_bins)
    values, counts = np.unique(arr, return_counts=True)
    m = values.shape[0]
    if m < n_bins:
        raise ValueError(
            f"y has {m} distinct value(s); it cannot be cut into {n_bins} ordered classes "
            "without splitting ties"
        )
    n = arr.shape[0]
    # boundaries[i] = number of samples with value <= values[i], for the m-1 places
    # where a cut can go (between values[i] and values[i+1]).
    boundaries = np.cumsum(counts)[:-1]
    ideal = np.arange(1, n_bins) * n / n_bins
    right = np.clip(np.searchsorted(boundaries, ideal), 0, m - 2)
    left = np.clip(right - 1, 0, m - 2)
    cut = np.where(np.abs(boundaries[left] - ideal) <= np.abs(boundaries[right] - ideal), left, right)
    for j in range(1, n_bins - 1):  # strictly increasing cut places...
        cut[j] = max(cut[j], cut[j - 1] + 1)
    cut[-1] = min(cut[-1], m - 2)
    for j in range(n_bins - 3, -1, -1):  # ...that still fit below the last place
        cut[j] = min(cut[j], cut[j + 1] - 1)
    class_of_value = np.searchsorted(cut, np.arange(m), side="left") + 1
    return class_of_value[np.searchsorted(values, arr)].astype(np.int64)


# ---------------------------------------------------------------------------- synthetic


def make_isbor_synthetic(n: int = 21000, seed=None, noise_sd: float = 0.5):
    """The 2-D synthetic ordinal problem of the ISBOR paper (Sec. 5.1).

    x ~ Uniform([0, 10]²), score = 10 (x₁ - 5)(x₂ - 5) + ε with ε ~ N(0, noise_sd²),
    class k when b_{k-1} < score <= b_k with thresholds (-60, -9, 15, 60): five classes.
    The paper prints (x - 0.5), which cannot produce its reported class counts
    4431/4535/3949/3780/4305 of 21,000; (x - 5) does, so that is what is generated.

    Args:
        n: number of points.
        seed: seed for ``numpy.random.default_rng``.
        noise_sd: standard deviation of the latent noise (>= 0).

    Returns:
        (X, y): X of shape (n, 2) float64, y int64 classes in 1..5.

    Example:
        >>> X, y = make_isbor_synthetic(n=100, seed=0)
        >>> X.shape, sorted(set(y.tolist())) == [1, 2, 3, 4, 5]
        ((100, 2), True)
    """
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise ValueError(f"n must be a positive integer, got {n!r}")
    if not np.isfinite(noise_sd) or noise_sd < 0:
        raise ValueError(f"noise_sd must be finite and >= 0, got {noise_sd!r}")
    rng = np.random.default_rng(seed)
    X = rng.uniform(0.0, 10.0, size=(int(n), 2))
    score = 10.0 * (X[:, 0] - 5.0) * (X[:, 1] - 5.0) + rng.normal(0.0, noise_sd, size=int(n))
    thresholds = np.array([-60.0, -9.0, 15.0, 60.0])
    y = np.searchsorted(thresholds, score, side="left") + 1
    return X, y.astype(np.int64)


class OrdinalTruth(NamedTuple):
    """The parameters that generated a :func:`make_ordinal_probit` sample."""

    w: np.ndarray
    """True weights, shape (d,)."""
    thresholds: np.ndarray
    """True thresholds b_1 < ... < b_{K-1}, shape (K-1,)."""
    sigma: float
    """Noise scale: sd of the Gaussian noise (probit), scale of the logistic noise (logit)."""
    link: str
    """The link's name (:data:`bayesord._links.LINKS`)."""


def make_ordinal_probit(
    n: int,
    d: int,
    n_classes: int,
    seed=None,
    w=None,
    thresholds=None,
    sigma: float = 1.0,
    link: str = "probit",
):
    """Sample from a linear ordinal probit (or other link) model with known parameters.

    x ~ N(0, I_d), f = xᵀw + ε with ε = σ e, e the link's standard noise (normal for the
    probit, logistic for the logit, Gumbel-minimum for the complementary log-log, Gumbel
    for the log-log, Cauchy for the Cauchit), and y = k when b_{k-1} < f <= b_k (b_0 = -∞,
    b_K = +∞); so P(y = k | x) = G((b_k - xᵀw)/σ) - G((b_{k-1} - xᵀw)/σ) with G the
    noise's CDF (the ISBOR paper's Eq. 4 for the probit).

    Args:
        n: number of samples.
        d: number of features.
        n_classes: K >= 2.
        seed: seed for ``numpy.random.default_rng`` (draws w first when it is not given,
            then X, then the noise).
        w: true weights, shape (d,); default standard normal draws.
        thresholds: strictly increasing, shape (K-1,); default the k/K quantiles of
            N(0, |w|² + s²) with s² = σ² ``Link.normal_var`` (σ² for the probit,
            σ²π²/3 for the logit): equiprobable classes for the probit, roughly so for
            the others.
        sigma: noise scale σ > 0.
        link: a name in :data:`bayesord._links.LINKS`.

    Returns:
        (X, y, truth): X (n, d) float64, y int64 classes in 1..K, truth an
        :class:`OrdinalTruth`.

    Example:
        >>> X, y, truth = make_ordinal_probit(200, 3, 4, seed=0)
        >>> X.shape, truth.thresholds.shape
        ((200, 3), (3,))
    """
    from ._links import get_link  # JAX: imported here so that reading a CSV does not load it

    for name, value, least in (("n", n, 1), ("d", d, 1), ("n_classes", n_classes, 2)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < least:
            raise ValueError(f"{name} must be an integer >= {least}, got {value!r}")
    spec = get_link(link)
    if not np.isfinite(sigma) or sigma <= 0:
        raise ValueError(f"sigma must be finite and > 0, got {sigma!r}")
    rng = np.random.default_rng(seed)
    if w is None:
        w = rng.standard_normal(int(d))
    w = np.asarray(w, dtype=np.float64)
    if w.shape != (d,) or not np.all(np.isfinite(w)):
        raise ValueError(f"w must be a finite array of shape ({d},), got shape {w.shape}")
    noise_var = sigma**2 * spec.normal_var
    if thresholds is None:
        scale = np.sqrt(w @ w + noise_var)
        thresholds = scale * ndtri(np.arange(1, n_classes) / n_classes)
    thresholds = np.asarray(thresholds, dtype=np.float64)
    if thresholds.shape != (n_classes - 1,):
        raise ValueError(
            f"thresholds must have shape ({n_classes - 1},) for {n_classes} classes, "
            f"got {thresholds.shape}"
        )
    if not np.all(np.isfinite(thresholds)) or np.any(np.diff(thresholds) <= 0):
        raise ValueError("thresholds must be finite and strictly increasing")
    X = rng.standard_normal((int(n), int(d)))
    noise = sigma * spec.sample(rng, int(n))
    f = X @ w + noise
    y = np.searchsorted(thresholds, f, side="left") + 1
    return X, y.astype(np.int64), OrdinalTruth(w.copy(), thresholds.copy(), float(sigma), link)


def make_tor_synthetic(n_samples: int = 2500, p: float = 0.1, *, n_classes: int = 5,
                       block: int = 2000, density: float = 0.01, random_state=None):
    """The TOR paper's Algorithm 3 (Section V-C): sparse data whose classes own overlapping feature blocks.

    Class ``y`` (1..K, drawn uniformly) owns features ``d`` in ``[block (y-1), block (y+2)]``
    (1-based, inclusive: three blocks, so adjacent classes share two); each owned feature is
    nonzero with probability ``density`` (0.01), every other feature with probability
    ``density * p``; nonzeros are uniform on (0, 1).  Rows are scaled to unit length.
    Larger ``p`` means more overlap, i.e. a weaker cluster assumption.

    Args:
        n_samples: number of rows.
        p: overlap parameter in [0, 1].
        n_classes: K (5 in the paper).
        block: block width (2000 in the paper); the dimension is ``block (K + 2)``.
        density: in-block probability of a nonzero (0.01 in the paper).
        random_state: seed or ``numpy.random.Generator``.

    Returns:
        (X, y): a CSR matrix (n_samples, block (K+2)) and int labels 1..K.
    """
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"p must lie in [0, 1], got {p}")
    if n_samples < 1 or n_classes < 2 or block < 1:
        raise ValueError("n_samples >= 1, n_classes >= 2 and block >= 1 are required")
    rng = np.random.default_rng(random_state)
    D = block * (n_classes + 2)
    y = rng.integers(1, n_classes + 1, size=n_samples)
    d = np.arange(1, D + 1)
    rows, cols, vals = [], [], []
    for start in range(0, n_samples, 256):
        yb = y[start:start + 256]
        own = (d[None, :] >= block * (yb[:, None] - 1)) & (d[None, :] <= block * (yb[:, None] + 2))
        prob = np.where(own, density, density * p)
        r, cidx = np.nonzero(rng.random(prob.shape) < prob)
        rows.append(r + start)
        cols.append(cidx)
        vals.append(rng.random(r.size))
    X = sp.csr_matrix((np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))),
                      shape=(n_samples, D))
    norms = np.sqrt(np.asarray(X.multiply(X).sum(axis=1)).ravel())
    X = sp.diags(1.0 / np.where(norms > 0, norms, 1.0)) @ X
    return X.tocsr(), y
