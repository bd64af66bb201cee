"""scikit-learn estimators for ISBOR and its batch baseline SBOR (numerics in ``_isbor``)."""

from __future__ import annotations

import dataclasses
import numbers
import warnings
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np

from .. import diagnostics, metrics
from .._basis import KERNELS, kmeanspp_indices
from .._columns import center_and_scale
from .._compile_cache import stored_fit_program
from .._isbor import (
    Action,
    ISBORConfig,
    ISBORResult,
    done_line,
    fit_isbor,
    fit_sbor,
    predict_isbor,
    sample_class_probs_isbor,
    weight_cov,
)
from .._precision import jit
from .._progress import check_verbose, host_progress, prefix, show, solver_progress
from .._shapes import bucket_rows, pad_rows
from .._status import Status, check_status, warn_user
from ._base import (
    BAYES_ONE_CLASS_HINT,
    OrdinalEstimator,
    SavableMixin,
    bands_from_draws,
    check_is_fitted,
    check_level,
    check_positive_ints,
    draws_key,
    fit_key,
    fit_rng,
    fresh_fit,
    posterior_table,
    proba_from_log,
    threshold_names,
)
from ._uncertainty import UncertaintyMixin

__all__ = ["ISBOR", "SBOR"]

# theta_grid="scale": the candidate widths as multiples of 1 / d', d' the number of
# non-constant columns (scikit-learn's gamma="scale" on the standardised columns the fit uses).
SCALE_GRID = (0.1, 0.3, 1.0, 3.0)
# theta_selection="cv" tries the widths from the widest kernel on and stops after this many
# in a row score below the best.  Measured on 800 rows of winequality_red (warm, 2 cores):
# the four "scale" widths' CV took 50 (with compiling), 4.5, 9.7 and 46.5 s, the last
# (narrowest kernel, fits at the iteration cap) scoring -inf.
CV_PATIENCE = 2
# The CV fold fits stop at min_delta or at this many nats per selection row, whichever is
# looser: they only have to rank the widths.  On 4,000 rows of cpu_small (1,000 selection
# rows) the search took 10.3 s at min_delta=0.01 and 1.1-1.3 s at 1.0, choosing the same width.
CV_MIN_DELTA_PER_ROW = 1e-3
# calibrate_sigma: the factors on sigma tried on the chosen width's held-out predictions.
SIGMA_FACTORS = tuple(np.round(2.0 ** (np.arange(13) / 6), 4))
_SELECTIONS = ("evidence", "loo", "cv")
_CV_SCORINGS = ("mae", "log_loss")
_LOO_DRAWS, _LOO_CHAINS = 250, 4


def _check_positive(value, name):
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not np.isfinite(value) or value <= 0:
        raise ValueError(f"{name} must be a positive finite number, got {value!r}")
    return float(value)


# The solvers, one signature for both, as programs to store (``_SparseBayesOrdinal._solve``):
# the tolerance is an input, so the CV fold fits and the final fit share one program.
@partial(jit, static_argnames=("config",))
def _isbor_solve(X, y, sw, cand, key, theta, min_delta, *, config):
    return fit_isbor(X, y, sw, cand, jnp.ones(cand.shape[0], bool), key, theta, config=config,
                     min_delta=min_delta)


@partial(jit, static_argnames=("config",))
def _sbor_solve(X, y, sw, cand, key, theta, min_delta, *, config):
    return fit_sbor(X, y, sw, cand, jnp.ones(cand.shape[0], bool), theta, config=config,
                    min_delta=min_delta)


def selection_rows(n, max_samples, rng, above=1.0):
    """The sorted rows of the width selection's random subset of ``max_samples`` rows, or
    None (select on every row) when there are at most ``above * max_samples``."""
    if n <= above * max_samples:
        return None
    return np.sort(rng.choice(n, max_samples, replace=False))


# The evidence's width grid runs in sequence with ``lax.map``, as one compiled call (the CV
# folds in sequence too, as calls of the solver: :func:`_fold_predictions`).  ``vmap``
# is the wrong tool here: batched, the solver's tier switch runs every tier, and the loop
# runs until the slowest width (often one that fills the buffer) is done: a 4-width grid on
# 500 rows of bank8fm did not finish in 10 minutes batched, and takes 3.3 s in sequence.
# Module-level and jitted on (solver, config), so later fits reuse the compiled program.

@partial(jit, static_argnames=("solver", "config"))
def _fit_widths(thetas, X, y, sw, cand, key, min_delta, *, solver, config):
    """``solver`` at every width of ``thetas`` (stacked results)."""
    return jax.lax.map(lambda t: solver(X, y, sw, cand, key, t, min_delta, config=config), thetas)


def _fold_predictions(theta, fold_weights, X, y, cand, key, min_delta, *, solver, config):
    """Labels (folds, n) and class probabilities (folds, n, K) on every row, from one fit
    per row of ``fold_weights``, and the fits themselves.

    The folds run one after another through the solver's own compiled program, the one the
    final fit calls: a fit whose selection uses every row (at most 1.5 times
    ``selection_max_samples``; the same shapes and config for both) compiles the solver once
    instead of twice (7.5 s of a 19.5 s first fit on 1,000 rows of a wine CSV, 2 cores)."""
    fits = [solver(X, y, w, cand, key, theta, min_delta, config=config) for w in fold_weights]
    preds = [predict_isbor(res, X) for res in fits]
    # NumPy arrays: the calls finish here, so their progress lines are written while the
    # caller's progress prefix (the width being tried) still holds.
    return np.stack([np.asarray(p.labels) for p in preds]), np.stack([np.asarray(p.proba) for p in preds]), fits


def fixed_thresholds(res):
    """``res`` with the thresholds' posterior taken as a point mass at their estimate (the
    ISBOR paper's predictive: the weights' posterior given the thresholds).  The threshold
    covariance becomes the dtype's smallest normal number times I, so that the prediction's
    Cholesky factor of it still exists; with no cross covariance it adds nothing else."""
    cov = np.asarray(res.thresholds_cov)
    return res._replace(thresholds_cov=np.eye(cov.shape[0], dtype=cov.dtype) * np.finfo(cov.dtype).tiny,
                        cross_cov=np.zeros_like(np.asarray(res.cross_cov)))


def _predictive_spread(fits, X, y_held, fold_of, rows, sw_held):
    """The predictive's spread chosen on the held-out rows of the chosen width's fold fits:
    the factor of :data:`SIGMA_FACTORS` on the noise scale, and whether the predictions
    integrate the thresholds' posterior.

    Each way (thresholds integrated or at their estimate) takes its factor of lowest pooled
    held-out log-loss (the first, 1, on a tie).  The thresholds stay integrated unless the
    other way's log-loss is lower by more than twice the standard error of the per-row
    difference: when the noise scale is tiny against the thresholds' posterior sds (a nearly
    deterministic rule, as in balance_scale), their Gaussian posterior spreads a row over
    classes the data rule out, while on a few dozen rows integrating them is what keeps the
    probabilities from being over-confident (``docs/isbor.md``).

    Returns:
        (factor, integrate_thresholds).
    """
    y_held, w = np.asarray(y_held), np.asarray(sw_held, dtype=np.float64)
    best = {}
    for integrate in (True, False):
        for factor in SIGMA_FACTORS:
            variants = [res._replace(sigma=res.sigma * factor) for res in fits]
            if not integrate:
                variants = [fixed_thresholds(res) for res in variants]
            log_p = np.stack([np.asarray(predict_isbor(res, X).log_proba, dtype=np.float64) for res in variants])
            loss = -log_p[fold_of, rows][np.arange(y_held.size), y_held]
            mean = np.average(loss, weights=w)
            if integrate not in best or mean < best[integrate][0]:
                best[integrate] = (mean, factor, loss)
    diff = best[False][2] - best[True][2]
    mean = np.average(diff, weights=w)
    se = np.sqrt(np.average((diff - mean) ** 2, weights=w) / np.count_nonzero(w))
    integrate = not (mean + 2.0 * se < 0.0)
    return float(best[integrate][1]), integrate


def _row_index(X):
    """A DataFrame's row index, or None for other inputs."""
    import pandas as pd

    return X.index if isinstance(X, pd.DataFrame) else None


def _labels_of(index, rows):
    """The index labels at positions ``rows``, as an array the model file can hold: numbers
    and text as they are, anything else (mixed types, timestamps) as text."""
    labels = np.asarray(index)[rows]
    return labels if labels.dtype.kind in "iufbU" else labels.astype(str)


class _SparseBayesOrdinal(UncertaintyMixin, SavableMixin, OrdinalEstimator):
    """Shared fit/predict plumbing; subclasses choose the solver."""

    _scale_sensitive = False  # the fit standardises the columns itself
    _one_class_hint = BAYES_ONE_CLASS_HINT
    # docs/isbor.md, "Precision": 2 splits of six data sets, ISBOR's defaults.
    _float32_warning = ("the greedy evidence search then ends lower (by 3-28 nats on 11 of 12 fits of "
                        "six data sets, with more relevance vectors) and its test log-loss was worse by "
                        "up to 0.10")
    _serial_fits = True  # the width selection records its fits' warnings
    # The width selection subsamples only above this many times selection_max_samples rows.
    _subsample_above = 1.0

    _solver_name = ""

    def _check_params(self, n, n_classes):
        if self.kernel not in KERNELS:
            raise ValueError(f"kernel must be one of {KERNELS}, got {self.kernel!r}")
        if self.theta_selection not in _SELECTIONS:
            raise ValueError(f"theta_selection must be one of {_SELECTIONS}, got {self.theta_selection!r}")
        if self.cv_scoring not in _CV_SCORINGS:
            raise ValueError(f"cv_scoring must be one of {_CV_SCORINGS}, got {self.cv_scoring!r}")
        if isinstance(self.theta, str):
            if self.theta != "auto":
                raise ValueError(f"theta must be a positive number or 'auto', got {self.theta!r}")
            if not (isinstance(self.theta_grid, str) and self.theta_grid == "scale"):
                if isinstance(self.theta_grid, str):
                    raise ValueError(f"theta_grid must be 'scale' or a sequence of positive widths, "
                                     f"got {self.theta_grid!r}")
                grid = [_check_positive(t, "every value in theta_grid") for t in self.theta_grid]
                if not grid:
                    raise ValueError("theta_grid is empty")
        else:
            _check_positive(self.theta, "theta (kernel width)")
        cv_ok = (self.cv >= 2 if isinstance(self.cv, numbers.Integral)
                 else hasattr(self.cv, "split") or hasattr(self.cv, "__iter__"))
        if isinstance(self.cv, (bool, str, bytes)) or not cv_ok:
            raise ValueError(f"cv must be a number of folds (>= 2), a CV splitter or an iterable of "
                             f"(train, test) index arrays, got {self.cv!r}")
        check_positive_ints(self, "max_iter", "block_size", "selection_max_samples", "n_draws")
        _check_positive(self.min_delta, "min_delta")
        if not isinstance(self.calibrate_sigma, (bool, np.bool_)):
            raise TypeError(f"calibrate_sigma must be True or False, got {self.calibrate_sigma!r}")
        if n < n_classes:
            raise ValueError(f"fewer samples ({n}) than classes ({n_classes})")
        if self.n_centres not in (None, "auto"):
            if isinstance(self.n_centres, bool) or not isinstance(self.n_centres, numbers.Integral) \
                    or not n_classes <= self.n_centres:
                raise ValueError(f"n_centres must be 'auto', None or an integer >= the number of classes "
                                 f"({n_classes}), got {self.n_centres!r}")
            if self.kernel == "precomputed":
                raise ValueError("n_centres cannot be used with kernel='precomputed'; pass the columns you want")
        if self.centre_selection not in ("random", "kmeans++"):
            raise ValueError(f"centre_selection must be 'random' or 'kmeans++', got {self.centre_selection!r}")

    def _config(self, n, n_cand, n_classes, dtype):
        cache = n * n_cand * np.dtype(dtype).itemsize <= self.cache_bytes
        return ISBORConfig(
            n_classes=n_classes, kernel=self.kernel, degree=self.degree,
            capacity=self._capacity(n_cand), max_iter=self.max_iter,
            block_size=min(self.block_size, n_cand), cache_basis=bool(cache), link=self.link,
            learn_noise=self.learn_noise, progress=solver_progress(self.verbose),
        )

    @fresh_fit
    def fit(self, X, y, sample_weight=None, classes=None):
        """Fit the model; ``theta="auto"`` selects the kernel width first (see class doc).

        Args:
            X: (n, d) inputs, or the (n, n) basis matrix for ``kernel="precomputed"``.
            y: ordered labels.
            sample_weight: optional non-negative weights.  A weight multiplies the row's
                likelihood term (0 removes the row, also as a candidate centre).  It is not
                the same as repeating the row: a repeated row is also a second candidate
                basis function with its own prior.
            classes: explicit class order (needed for strings).
        """
        row_index = _row_index(X)
        X, codes, sw = self._validate_fit(X, y, sample_weight, classes)
        n = X.shape[0]
        n_classes = len(self.classes_)
        self._check_params(n, n_classes)
        if self.kernel == "precomputed" and X.shape[1] != n:
            raise ValueError(f"a precomputed basis must be square (n, n) with column j centred on "
                             f"training row j; got shape {X.shape}")
        rng = fit_rng(self.random_state)
        key = fit_key(rng)
        if self.kernel != "precomputed":
            # Standardised here in float64, so raw and already standardised columns reach
            # the float32 fit as the same numbers: the greedy selection would otherwise
            # amplify their rounding differences into different relevance vectors.
            center, scale = center_and_scale(X, sw)
            X = (X - center) / scale
        Xj, yj, swj = jnp.asarray(X), jnp.asarray(codes, jnp.int32), jnp.asarray(sw)
        key, k_centres, k_sel = jax.random.split(key, 3)
        cand = self._candidates(Xj, swj, k_centres)
        sigma_factor, integrate = 1.0, True
        if isinstance(self.theta, str) and self.kernel == "precomputed":
            theta = 1.0  # the basis is given: no width to choose, and none that the fit reads
        elif isinstance(self.theta, str):
            theta, scores, sigma_factor, integrate = self._select_theta(Xj, yj, swj, n_classes, k_sel, rng)
            self.theta_grid_scores_ = scores
        else:
            theta = float(self.theta)
        config = self._config(n, cand.shape[0], n_classes, Xj.dtype)
        res = self._solve(Xj, yj, swj, cand, key, theta, self.min_delta, config=config)
        if self.kernel != "precomputed":
            # The fit's own standardisation follows this one: compose the two, in float64
            # (predictions standardise on the host too: _predict_raw).
            res = res._replace(center=center + scale * np.asarray(res.center, np.float64),
                               scale=scale * np.asarray(res.scale, np.float64))
        check_status(int(res.status), self._solver_name, hints={Status.CAPACITY_REACHED: (
            f"it holds capacity={config.capacity} relevance vectors and would add more: pass a "
            f"larger capacity (e.g. ISBOR(capacity={2 * config.capacity})) or a wider kernel (a smaller theta)")})
        self._store(res)
        if row_index is not None:
            self.relevance_labels_ = _labels_of(row_index, self.relevance_indices_)
        self.sigma_factor_ = sigma_factor
        self.integrate_thresholds_ = integrate
        return self

    def _copy_params(self):
        """``calibrate(cv=...)``'s copies fit at this model's width: a width search in each
        copy, on CV scores that were nearly flat over the grid, chose other widths for three
        of five copies on 2,400 marketing rows (two of them filled the 128-vector capacity
        and did not converge), so the calibration read models unlike the one it calibrates."""
        return {"theta": self.theta_} if isinstance(self.theta, str) else {}

    def _fit_copy(self, X, labels, sample_weight):
        """A copy at this model's width (:meth:`_copy_params`) that predicts with this model's
        spread (``sigma_factor_``, ``integrate_thresholds_``: a fixed width chooses none)."""
        copy = super()._fit_copy(X, labels, sample_weight)
        copy.sigma_factor_, copy.integrate_thresholds_ = self.sigma_factor_, self.integrate_thresholds_
        return copy

    def _solve(self, X, y, sw, cand, key, theta, min_delta, *, config):
        """One fit at one width, called from the host: through the solver's stored program
        (:func:`bayesord._compile_cache.stored_fit_program`, optimised at every size), so a
        later process reads it instead of tracing it (a first fit with the cache warm on
        1,200 rows: 4.3 s before, 3.4 s after), or the jitted solver where the fit reports
        every iteration (``verbose=2``: a host callback cannot be stored).  At ``verbose=1``
        the fit's final line is written here, from its result."""
        if config.progress:
            return self._solver(X, y, sw, cand, key, theta, min_delta, config=config)
        program = stored_fit_program(self._solver, X.shape[0], ("config",), ISBORResult, compile="optimised")
        res = program(*(np.asarray(a) for a in (X, y, sw, cand, key)), theta, min_delta, config=config)
        if host_progress(self.verbose):
            show(done_line(self._solver_name, res), final=True)
        return res

    def _centre_count(self, n, dtype):
        """How many of the ``n`` rows are candidate centres: ``n_centres``, or for ``"auto"``
        every row while the ``n x n`` candidate basis fits in ``cache_bytes``, else as many
        rows as fit there (at least ``block_size``)."""
        if self.n_centres is None or self.kernel == "precomputed":
            return n
        if isinstance(self.n_centres, str):
            return int(min(n, max(self.cache_bytes // (n * np.dtype(dtype).itemsize), self.block_size)))
        return min(int(self.n_centres), n)

    def _candidates(self, X, sw, key):
        n = X.shape[0]
        m = self._centre_count(n, X.dtype)
        if m >= n:
            return jnp.arange(n, dtype=jnp.int32)
        if self.centre_selection == "kmeans++":
            # On the standardised columns the fit works with (k-means++ compares distances).
            center, scale = center_and_scale(X, sw)
            return kmeanspp_indices((X - center) / scale, key, m)
        return jnp.sort(jax.random.permutation(key, n)[:m]).astype(jnp.int32)

    def _width_grid(self, X, sw):
        """The candidate widths: ``theta_grid`` as given, or for ``"scale"`` the multiples
        :data:`SCALE_GRID` of ``1 / d'``, ``d'`` the number of non-constant columns.

        The fit standardises its columns, so two rows lie a squared distance of about
        ``2 d'`` apart and ``1 / d'`` (scikit-learn's ``gamma="scale"`` on those columns)
        puts the kernel between typical rows near ``e^-2`` in any dimension.  The linear kernel
        has no width: one entry, so a CV selection fits its folds once (for
        ``calibrate_sigma``) instead of once per width to the same fits."""
        if self.kernel == "linear":
            return np.ones(1)
        if not isinstance(self.theta_grid, str):
            return np.asarray(self.theta_grid, dtype=float)
        center, scale = center_and_scale(X, sw)
        # Each standardised column has mean square 1, or 0 when constant: the sum counts them.
        varying = round(float(jnp.sum(sw @ jnp.square((X - center) / scale) / jnp.sum(sw))))
        return np.asarray(SCALE_GRID) / max(varying, 1)

    def _select_theta(self, X, y, sw, n_classes, key, rng):
        """Kernel width by the evidence over the grid (:func:`_fit_widths`), by PSIS-LOO of
        each width's Laplace posterior, or by k-fold CV (:func:`_fold_predictions` per width).

        CV scores pool the held-out predictions (every row is held out once), weighted by
        ``sw``: the negative MAE, or the mean held-out log predictive probability
        ``mean log p(y_i | rest)`` (``cv_scoring="log_loss"``), the exact k-fold
        counterpart of PSIS-LOO's elpd per row.  Keeps the widths tried in ``theta_grid_values_``.

        Returns:
            (width, score of each width, factor on sigma, whether predictions integrate the
            thresholds' posterior): 1 and True unless the selection is by CV and
            ``calibrate_sigma`` holds (:func:`_predictive_spread` on the chosen width's fold
            fits)."""
        grid = self.theta_grid_values_ = self._width_grid(X, sw)
        n = X.shape[0]
        rows = selection_rows(n, self.selection_max_samples, rng, self._subsample_above)
        subsampled = rows is not None
        if subsampled:
            X, y, sw = X[rows], y[rows], sw[rows]
            n = rows.size
        cand = self._candidates(X, sw, key)
        config = self._config(n, cand.shape[0], n_classes, X.dtype)
        thetas = jnp.asarray(grid, X.dtype)
        if self.theta_selection == "evidence":
            with prefix(f"theta grid by evidence ({grid.size} widths)"):
                fits = _fit_widths(thetas, X, y, sw, cand, key, self.min_delta, solver=self._solver, config=config)
                if host_progress(self.verbose):
                    for i in range(grid.size):
                        show(done_line(self._solver_name, jax.tree_util.tree_map(lambda a, i=i: a[i], fits)),
                             final=True)
            scores = np.asarray(fits.log_evidence)
            scores = np.where(np.isfinite(scores), scores, -np.inf)
            return float(grid[int(np.argmax(scores))]), scores, 1.0, True
        if self.theta_selection == "loo":
            scores = self._loo_scores(grid, thetas, X, y, sw, cand, key, config)
            return float(grid[int(np.argmax(scores))]), scores, 1.0, True
        train_masks, fold_of, rows = self._cv_splits(n, np.asarray(y), rng, subsampled)
        weights = jnp.where(jnp.asarray(train_masks), sw[None, :], 0.0)
        y_np, sw_np = np.asarray(y)[rows], np.asarray(sw)[rows]
        scores, fold_fits = np.full(grid.size, np.nan), {}
        # Widest kernel first: each narrower one fits more relevance vectors, and costs more.
        # Held-out scores rise and then fall along that order, so the search stops once
        # CV_PATIENCE widths in a row score below the best (the rest keep NaN scores).
        behind = 0
        min_delta = max(self.min_delta, CV_MIN_DELTA_PER_ROW * n)
        verbose = check_verbose(self.verbose)
        for step, i in enumerate(np.argsort(grid, kind="stable")):
            with prefix(f"theta {grid[i]:g} ({step + 1}/{grid.size}), {len(train_masks)}-fold CV"):
                labels, proba, fits = _fold_predictions(float(grid[i]), weights, X, y, cand, key, min_delta,
                                                        solver=self._solve, config=config)
            if self.cv_scoring == "mae":
                score = -metrics.mae(y_np, labels[fold_of, rows], sample_weight=sw_np)
            else:
                score = -metrics.ordinal_log_loss(y_np, proba[fold_of, rows], sample_weight=sw_np)
            score = score if np.isfinite(score) else -np.inf
            behind = behind + 1 if step and score <= np.nanmax(scores) else 0
            scores[i], fold_fits[i] = score, fits
            if verbose:
                what = "MAE" if self.cv_scoring == "mae" else "log-loss"
                show(f"theta {grid[i]:g} ({step + 1}/{grid.size}): {len(train_masks)}-fold CV {what} {-score:.4f}")
            if behind == CV_PATIENCE:
                break
        chosen = int(np.nanargmax(scores))
        best = float(grid[chosen])
        factor, integrate = (_predictive_spread(fold_fits[chosen], X, y_np, fold_of, rows, sw_np)
                             if self.calibrate_sigma else (1.0, True))
        if verbose:
            left = int(np.sum(np.isnan(scores)))
            show(f"width search: theta {best:g} chosen" + (f" ({left} narrower width(s) not tried: "
                                                            f"{CV_PATIENCE} in a row scored below it)" if left else "")
                 + (f"; sigma x {factor:g} in predictions" if factor != 1.0 else "")
                 + ("; thresholds at their estimate in predictions" if not integrate else ""))
        return best, scores, factor, integrate

    def _cv_splits(self, n, y, rng, subsampled):
        """The CV folds as (train masks (folds, n), fold of each held-out pair, its row).

        ``cv`` an integer: a random partition into ``cv`` folds.  A scikit-learn splitter
        (``KFold``, ``StratifiedKFold``, ...) is asked for its splits of these rows; an
        iterable of (train, test) index arrays is used as given.  A row held out by several
        folds is scored once per fold; a row no fold holds out is not scored."""
        if isinstance(self.cv, numbers.Integral):
            fold_of = rng.permutation(n) % self.cv
            return np.arange(self.cv)[:, None] != fold_of[None, :], fold_of, np.arange(n)
        if hasattr(self.cv, "split"):
            splits = list(self.cv.split(np.zeros((n, 1)), y))
        else:
            if subsampled:
                raise ValueError(
                    f"cv given as (train, test) indices needs the selection to use every row, but "
                    f"{n} of them were drawn (selection_max_samples={self.selection_max_samples}); "
                    "raise selection_max_samples or pass a CV splitter")
            splits = list(self.cv)
        if len(splits) < 2:
            raise ValueError(f"cv gave {len(splits)} split(s); at least 2 are needed")
        masks, fold_of, rows = np.zeros((len(splits), n), bool), [], []
        for k, split in enumerate(splits):
            try:
                train, test = (np.asarray(part) for part in split)
            except (TypeError, ValueError) as err:
                raise ValueError("every cv split must be a pair (train, test) of index arrays") from err
            for part in (train, test):
                if part.size and (part.dtype.kind not in "iu" or part.min() < 0 or part.max() >= n):
                    raise ValueError(f"cv split {k} holds indices that are not rows 0..{n - 1}")
            if train.size == 0 or test.size == 0:
                raise ValueError(f"cv split {k} has an empty train or test part")
            masks[k, train] = True
            fold_of.append(np.full(test.size, k))
            rows.append(test)
        return masks, np.concatenate(fold_of), np.concatenate(rows)

    def _loo_scores(self, grid, thetas, X, y, sw, cand, key, config):
        """elpd_loo of each width's fit (PSIS over 4 x 250 Laplace draws, one draw key for
        all widths); Pareto-k warnings are passed on with the width they concern."""
        if not np.all(np.asarray(sw) == 1.0):
            raise ValueError("theta_selection='loo' leaves out whole rows and needs unit sample "
                             "weights; use 'evidence' or 'cv' with sample_weight")
        draw_key = jax.random.fold_in(key, 1)
        scores = []
        for i, t in enumerate(thetas):
            with prefix(f"theta {grid[i]:g} ({i + 1}/{grid.size}), PSIS-LOO"):  # done inside it
                res = jax.block_until_ready(self._solve(X, y, sw, cand, key, t, self.min_delta, config=config))
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                elpd = float(diagnostics.loo(res, X, y, draws=_LOO_DRAWS, chains=_LOO_CHAINS,
                                             key=draw_key).elpd_loo)
            for w in caught:
                warn_user(f"theta={grid[i]:g}: {w.message}", w.category)
            scores.append(elpd if np.isfinite(elpd) else -np.inf)
        return np.asarray(scores)

    def _store(self, res):
        self.result_ = jax.tree_util.tree_map(np.asarray, res)
        config = res.config
        mask = np.asarray(res.mask)
        idx = np.asarray(res.relevance_index)[mask]
        self.relevance_indices_ = idx
        self.relevance_labels_ = idx  # a DataFrame's fit names them by its index instead
        self.relevance_vectors_ = (np.asarray(res.centres)[mask] * np.asarray(res.scale)
                                   + np.asarray(res.center) if config.kernel != "precomputed" else None)
        self.coef_ = np.asarray(res.w)[mask]
        self.coef_cov_ = np.asarray(weight_cov(res))[np.ix_(mask, mask)]
        self.alpha_ = np.asarray(res.alpha)[mask]
        self.thresholds_ = np.asarray(res.b)
        self.thresholds_cov_ = np.asarray(res.thresholds_cov)
        self.sigma_ = float(res.sigma)
        self.theta_ = float(res.theta)
        self.log_evidence_ = float(res.log_evidence)
        n_it = int(res.n_iter)
        self.evidence_trace_ = np.asarray(res.evidence_trace)[: n_it + 1]
        self.actions_ = [Action(int(a)).name.lower() for a in np.asarray(res.action_trace)[:n_it]]
        self.n_iter_ = n_it
        self.converged_ = bool(res.converged)
        self.n_pruned_ = int(res.n_pruned)

    def summary(self, level=0.95):
        """Posterior of the relevance-vector weights, and the thresholds, as a table.

        One row per relevance vector (``rv <label>``: its training row's index label when X
        was a DataFrame, else its 0-based position; posterior mean, sd and central
        ``level`` interval of its weight, and its prior precision alpha), then one row per
        threshold (its type-II maximum-likelihood estimate, with the sd of the joint Laplace
        posterior of weights and thresholds there; alpha is NaN).

        Returns:
            pandas DataFrame indexed by parameter name.
        """
        check_is_fitted(self, "result_")
        thr = threshold_names(self.classes_)
        nan = np.full(len(thr), np.nan)
        return posterior_table([f"rv {i}" for i in self.relevance_labels_] + thr,
                               np.concatenate([self.coef_, self.thresholds_]),
                               np.sqrt(np.concatenate([np.diag(self.coef_cov_),
                                                       np.diag(self.thresholds_cov_)])), level,
                               alpha=np.concatenate([self.alpha_, nan]))

    def _saved_state(self):
        scores = getattr(self, "theta_grid_scores_", None)
        values = getattr(self, "theta_grid_values_", None)
        return ({f"result.{k}": v for k, v in self.result_._asdict().items()},
                {"config": dataclasses.asdict(self.result_.config),
                 "theta_grid_scores": None if scores is None else np.asarray(scores).tolist(),
                 "theta_grid_values": None if values is None else np.asarray(values).tolist(),
                 "sigma_factor": self.sigma_factor_, "integrate_thresholds": self.integrate_thresholds_,
                 "relevance_labels": self.relevance_labels_.tolist()})

    def _restore(self, arrays, meta):
        config = ISBORConfig(**meta["config"])
        res = ISBORResult(config=config, **{k: arrays[f"result.{k}"] for k in ISBORResult._fields})
        m, k1, d = np.shape(res.mask)[0], len(self.classes_) - 1, int(self.n_features_in_)
        self._check_shapes(("result.center", res.center, (d,)), ("result.scale", res.scale, (d,)),
                           ("result.chol", res.chol, (m, m)), ("result.cross_cov", res.cross_cov, (m, k1)),
                           ("result.thresholds_cov", res.thresholds_cov, (k1, k1)))
        self._store(res)
        if meta.get("relevance_labels") is not None:  # None: files from before the labels
            self.relevance_labels_ = np.asarray(meta["relevance_labels"])
        self.sigma_factor_ = float(meta.get("sigma_factor", 1.0))  # 1: files from before the factor
        self.integrate_thresholds_ = bool(meta.get("integrate_thresholds", True))  # and before this choice
        if meta["theta_grid_scores"] is not None:
            self.theta_grid_scores_ = np.asarray(meta["theta_grid_scores"], dtype=float)
            if meta.get("theta_grid_values") is not None:  # files written before it was kept
                self.theta_grid_values_ = np.asarray(meta["theta_grid_values"], dtype=float)

    def posterior_result(self):
        """The functional :class:`bayesord.ISBORResult` of the fit (kernel, degree and link
        in its ``config``) and the settings that label it (``classes``, ``feature_names``,
        ``model_name``): what :mod:`bayesord.diagnostics` dispatches on."""
        check_is_fitted(self, "result_")
        return self.result_, dict(classes=self.classes_, feature_names=getattr(self, "feature_names_in_", None),
                                  model_name=type(self).__name__)

    def to_inference_data(self, X, y, **kwargs):
        """ArviZ ``InferenceData`` over the relevance-vector weights.

        See :func:`bayesord.diagnostics.to_inference_data`.
        """
        return diagnostics.to_inference_data(self, X, y, **kwargs)

    def _inputs(self, X):
        """(result, rows) to predict with: the noise scale times ``sigma_factor_``, the
        thresholds at their estimate unless ``integrate_thresholds_``
        (:func:`fixed_thresholds`), and the rows standardised here in float64, as in fit
        (float32 rows of a column with a large mean would lose the digits that vary)."""
        check_is_fitted(self, "result_")
        X = self._validate_predict(X)
        res = self.result_._replace(sigma=self.result_.sigma * self.sigma_factor_)
        if not self.integrate_thresholds_:
            res = fixed_thresholds(res)
        if res.config.kernel != "precomputed":
            X = (X - res.center) / res.scale
            res = res._replace(center=np.zeros_like(res.center), scale=np.ones_like(res.scale))
        return res, X

    def _predict_raw(self, X):
        """The predictive distribution of every row, through a program compiled for the
        rows' bucket size (nearby row counts share it; the padding rows are dropped)."""
        res, X = self._inputs(X)
        n = X.shape[0]
        (X,) = pad_rows(bucket_rows(n), X)
        return jax.tree_util.tree_map(lambda a: a[:n], predict_isbor(res, jnp.asarray(X)))

    def predict(self, X):
        """Labels: the class whose threshold interval holds the latent mean (predictive median)."""
        return self._decode(np.asarray(self._predict_raw(X).labels))

    def predict_proba(self, X):
        """Predictive class probabilities, (n, K), columns in ``classes_`` order, in float64
        from the log-probabilities (:func:`~bayesord.estimators._base.proba_from_log`)."""
        return proba_from_log(self._predict_raw(X).log_proba)

    def _probability_draws(self, X):
        """Class probabilities under ``n_draws`` joint posterior draws, (n_draws, n, K)."""
        check_positive_ints(self, "n_draws")
        res, X = self._inputs(X)
        seed = self.random_state if isinstance(self.random_state, numbers.Integral) else None
        n = X.shape[0]
        (X,) = pad_rows(bucket_rows(n), X)
        draws = sample_class_probs_isbor(res, jnp.asarray(X), draws_key(seed), n_draws=int(self.n_draws))
        return np.asarray(draws)[:, :n]

    def predict_proba_std(self, X):
        """Posterior standard deviation of each class probability ``P(y = k | x, w, b)`` over
        ``n_draws`` draws of the weights and thresholds from their joint posterior, (n, K)."""
        return np.asarray(self._probability_draws(X), np.float64).std(axis=0)

    def predict_proba_interval(self, X, level=0.95):
        """Central credible band of each class probability ``P(y = k | x, w, b)`` over
        ``n_draws`` draws of the weights and thresholds from their joint posterior (the
        thresholds drawn in (b_1, log-gap) space so each draw's are ordered; the noise at its
        type-II estimate).

        Returns:
            (lower, upper, sd), each (n, K), with 0 <= lower <= upper <= 1; ``sd`` is
            ``predict_proba_std``.

        Raises:
            ValueError: ``level`` outside (0, 1).
        """
        check_level(level)
        return bands_from_draws(self._probability_draws(X), level)

    def predict_latent(self, X):
        """Posterior mean and variance of the latent score f(x): two arrays of shape (n,)."""
        p = self._predict_raw(X)
        return np.asarray(p.latent_mean), np.asarray(p.latent_var)

    def decision_function(self, X):
        """Latent mean ``phi(x)^T w*`` (compare with ``thresholds_``)."""
        return np.asarray(self._predict_raw(X).latent_mean)


class ISBOR(_SparseBayesOrdinal):
    """Incremental sparse Bayesian ordinal regression (Li & de Rijke), scikit-learn style.

    A kernel ordinal probit model ``f(x) = sum_i w_i phi(x, x_i)`` whose relevance vectors
    are chosen one at a time by fast marginal-likelihood (Tipping-Faul) selection; the
    posterior over ``w`` is the Laplace approximation, thresholds and noise are learned by
    evidence ascent.  See ``docs/isbor.md``.

    Args:
        kernel: ``"rbf"`` (default), ``"linear"``, ``"poly"`` or ``"precomputed"`` (then ``X``
            is the square basis matrix at fit time and ``(n, n_train)`` at predict time).
        theta: kernel width, or ``"auto"`` to select it from ``theta_grid`` (the linear
            kernel has none: ``"auto"`` gives 1 and ``theta_grid`` is not read; a
            precomputed basis has none either, and is fitted as given).
        theta_grid: candidate widths for ``theta="auto"``: ``"scale"`` (default) for
            ``(0.1, 0.3, 1, 3) / d'``, ``d'`` the number of non-constant columns (the fit
            standardises its columns, so ``1 / d'`` is scikit-learn's ``gamma="scale"`` on
            them and keeps the kernel between typical rows near ``e^-2`` in any dimension),
            or a sequence of widths used as given.
        theta_selection: ``"cv"`` (default: ``cv``-fold cross-validation scored by
            ``cv_scoring``, widths tried from the widest kernel (smallest ``theta``) on,
            stopping once two in a row score below the best: narrower kernels fit more
            relevance vectors and cost more; the fold fits stop at ``min_delta`` or at
            ``1e-3`` nats per selection row, whichever is looser), ``"evidence"`` (the paper's criterion: the grid is fitted in one
            call, the width with the highest Laplace evidence wins; about ``cv`` times
            cheaper) or ``"loo"`` (one fit per width, the highest PSIS-LOO elpd of its
            Laplace posterior wins, see :func:`bayesord.diagnostics.loo`; unit sample
            weights only).  The evidence can favour narrow widths whose fits keep adding
            relevance vectors to the iteration cap or the capacity and are over-confident on
            new rows; CV and LOO judge held-out rows (``docs/isbor.md``).
        cv: for ``theta_selection="cv"``: the number of folds (a random partition), a
            scikit-learn CV splitter (``StratifiedKFold(5)``, ``GroupKFold`` through
            pre-computed splits, ...) or an iterable of (train, test) index arrays.
        cv_scoring: what CV maximises: ``"log_loss"`` (default: the mean held-out log
            probability of the true class, a proper scoring rule and the exact counterpart
            of LOO) or ``"mae"`` (minus the held-out MAE, the paper's protocol, for when only
            the labels matter).
        selection_max_samples: width selection runs on a random subset of this many rows
            when there are more than 1.5 times as many, else on every row (the final fit
            always uses all rows).  Each fold fit costs about the square of its rows, so
            1,000 (the default) keeps the selection to seconds; up to 1,500 rows, selecting
            on all of them shares one compiled program with the final fit
            (``docs/isbor.md``).  SBOR subsamples above ``selection_max_samples`` rows: its
            fold fits cost the cube of their rows.
        degree: polynomial degree for ``"poly"``.
        capacity: maximum number of relevance vectors (active-set buffer size).  Reaching it
            stops the fit with a ``ConvergenceWarning`` that says what to pass instead.
        max_iter: cap on Algorithm 1 iterations.
        min_delta: stopping tolerance on the log evidence (nats).  On thousands of rows
            ``1e-3 * n`` gives models of the paper's size in a fraction of the time
            (``docs/isbor.md``, Benchmarks).
        patience: the fit also stops, as converged, after this many iterations in a row
            that each changed the log evidence by less than ``min_delta`` (rejected
            proposals, in practice; Algorithm 1 stops after one such iteration).
        n_centres: restrict candidate centres to this many training rows (``None``: all).
            Cost per iteration is proportional to the number of candidates.  ``"auto"``
            (ISBOR's default): every row while the candidate basis of all rows fits in
            ``cache_bytes`` (11,585 rows in float64, 16,384 in float32 at the default 1 GiB),
            else as many rows as fit there (8,388 of 16,000 in float64), so that no
            iteration recomputes kernel rows.
        centre_selection: ``"random"`` or ``"kmeans++"`` for ``n_centres``.
        block_size: candidates scored per block (memory ``O(n * block_size)``).
        cache_bytes: keep the whole candidate basis in memory when it fits in this many bytes.
        link: ``"logit"`` (ISBOR's default: test log-loss no worse than the paper's
            ``"probit"`` on 15 of the 22 dense shared sets, ``docs/isbor.md``), ``"probit"``
            (the paper's, and SBOR's default), ``"cloglog"``, ``"loglog"`` or ``"cauchit"``.
        learn_noise: learn sigma (else fixed at 1).
        calibrate_sigma: with the width chosen by CV (the default), also choose the
            predictive's spread on the held-out rows of the chosen width's fold fits: a factor
            ``>= 1`` on sigma for every prediction, the one of ``1, 1.12, ..., 4`` (13 steps,
            even on a log scale) of lowest held-out log-loss, kept in ``sigma_factor_``; and
            whether predictions integrate the thresholds' posterior or take them at their
            estimate, kept in ``integrate_thresholds_`` (integrated unless the other way's
            held-out log-loss is lower by more than twice its standard error).  The fitted
            posterior (``sigma_``, ``summary()``, the ArviZ export) is unchanged; the labels
            are too (the latent mean's interval).  On a few dozen rows the evidence-fitted
            model is over-confident and the factor widens its predictive probabilities; on a
            nearly deterministic rule the thresholds' Gaussian posterior spreads them over
            classes the data rule out (``docs/isbor.md``).  False, another
            ``theta_selection`` or a fixed ``theta``: factor 1, thresholds integrated.
        joint_reestimate: each iteration also tries re-estimating every active alpha at once
            and keeps the better of that and the single action (default); False runs
            Algorithm 1 as published, one action per iteration (``docs/isbor.md``).
        classes: the labels in increasing order (needed for string labels; ``fit(classes=...)``
            does the same, and the two must agree when both are given).
        n_draws: posterior draws of (weights, thresholds) behind ``predict_proba_std`` and
            ``predict_proba_interval``.
        random_state: seed for the initial one-per-class draw and the subsets (None: 0); an int also
            seeds the posterior draws (else they use seed 0, so they repeat).
        calibration_cv: None (default), or a number of folds: ``fit`` then ends with
            ``calibrate(X, y, cv=calibration_cv)`` (folds seeded from ``random_state``), so
            the fitted model has conformal prediction sets wherever it is fitted (a
            ``Pipeline``, a grid search).  Not with ``sample_weight`` (the copies are unweighted).
        verbose: report progress on stderr (0, the default: silent).  1: a line as each fit
            ends (``ISBOR theta 0.1 done: 61 iterations  log-evidence -1230.2  RVs 24``), each
            labelled with its width and fold during the width search; 2: also an updating line
            at every iteration (``ISBOR theta 0.1 iter 37/500  log-evidence -1234.5  RVs 22``),
            from a solver that is then compiled again in every process (a program that calls
            back into Python is not cached).  The results do not change.

    Attributes:
        relevance_indices_: the relevance vectors' 0-based positions among the training rows
            (``X.iloc[i]`` of a DataFrame, not its index label ``X.loc[i]``).
        relevance_labels_: their training rows' index labels when X was a DataFrame
            (labels of mixed or other types as text), else the positions again;
            ``summary()`` and ``diagnostics.relevance_table`` name the rows by them.
        relevance_vectors_: the relevance vectors (rows of X).
        coef_: posterior mean of their weights.
        coef_cov_: posterior covariance of their weights.
        alpha_: their prior precisions.
        thresholds_: the ordered thresholds.
        sigma_: the noise scale.
        sigma_factor_: the factor on ``sigma_`` in predictions (``calibrate_sigma``; else 1).
        integrate_thresholds_: whether predictions integrate the thresholds' posterior
            (``calibrate_sigma``; else True).
        theta_: the kernel width used.
        log_evidence_: Laplace log evidence at the end.
        evidence_trace_: log evidence after each iteration.
        actions_: the action taken each iteration (add, re-estimate, delete, ...).
        n_iter_: iterations of Algorithm 1.
        converged_: whether the stopping rule was met (``min_delta``, ``patience``).
        status_: the solver's status code.
        n_pruned_: relevance vectors pruned for a numerically huge alpha.
        classes_: the ordered labels.
        theta_grid_values_: the candidate widths (when ``theta="auto"``).
        theta_grid_scores_: score of each of them (when ``theta="auto"``): its log
            evidence, its elpd_loo, its negative CV MAE or its mean held-out log
            probability (``cv_scoring``); the highest wins.  With CV, NaN for the widths
            the search stopped before (see ``theta_selection``).
        result_: the functional :class:`bayesord._isbor.ISBORResult`.
    """

    _solver_name = "ISBOR"
    _format = "bayesord.ISBOR/2"
    _solver = staticmethod(_isbor_solve)
    # Up to 1.5 x selection_max_samples rows, selecting on every row costs less run time than
    # the second compilation a subset's shape needs (on 1,279 rows, 2 cores: +0.85 s of a
    # compiled fit against about 9 s of compiling; on 2,000 rows +6.5 s).  SBOR keeps 1: its
    # fold fits cost the cube of their rows.
    _subsample_above = 1.5

    def __init__(self, kernel="rbf", theta="auto", theta_grid="scale", theta_selection="cv",
                 cv=5, cv_scoring="log_loss", selection_max_samples=1000, degree=2, capacity=128, max_iter=500,
                 min_delta=1e-2, patience=30, n_centres="auto", centre_selection="random", block_size=256,
                 cache_bytes=2**30, link="logit", learn_noise=True, calibrate_sigma=True, joint_reestimate=True,
                 classes=None, n_draws=200, random_state=None, verbose=0, calibration_cv=None):
        self.kernel = kernel
        self.theta = theta
        self.theta_grid = theta_grid
        self.theta_selection = theta_selection
        self.cv = cv
        self.cv_scoring = cv_scoring
        self.selection_max_samples = selection_max_samples
        self.degree = degree
        self.capacity = capacity
        self.max_iter = max_iter
        self.min_delta = min_delta
        self.patience = patience
        self.n_centres = n_centres
        self.centre_selection = centre_selection
        self.block_size = block_size
        self.cache_bytes = cache_bytes
        self.link = link
        self.learn_noise = learn_noise
        self.calibrate_sigma = calibrate_sigma
        self.joint_reestimate = joint_reestimate
        self.classes = classes
        self.n_draws = n_draws
        self.random_state = random_state
        self.verbose = verbose
        self.calibration_cv = calibration_cv

    def _config(self, n, n_cand, n_classes, dtype):
        return dataclasses.replace(super()._config(n, n_cand, n_classes, dtype),
                                   joint_reestimate=bool(self.joint_reestimate), patience=int(self.patience))

    def _check_params(self, n, n_classes):
        super()._check_params(n, n_classes)
        check_positive_ints(self, "patience")
        if isinstance(self.capacity, bool) or not isinstance(self.capacity, numbers.Integral) \
                or self.capacity < n_classes:
            raise ValueError(f"capacity ({self.capacity!r}) must be an integer at least the number of "
                             f"classes ({n_classes})")

    def _capacity(self, n_cand):
        return int(min(self.capacity, max(n_cand, 1)))


class SBOR(_SparseBayesOrdinal):
    """Batch sparse Bayesian ordinal regression (all basis functions start active; baseline).

    Same model, posterior, thresholds and predictions as :class:`ISBOR`; the alphas of all
    candidates are re-estimated together (Tipping 2001) and pruned.  Memory ``O(n^2)`` and
    time ``O(n^3)`` per iteration: for small data or as a reference.  Parameters as
    :class:`ISBOR` (``capacity``, ``joint_reestimate`` and ``patience`` do not apply; ``verbose`` reports SBOR's
    fits and iterations),
    except ``max_iter=1000``: the last irrelevant basis functions reach ``alpha_max`` slowly
    (MacKay's update grows such an alpha by a near-constant factor per iteration), and 300
    stopped 3 of 65 default fits on the small shared sets short of it (they converged by 350).
    """

    _solver_name = "SBOR"
    _format = "bayesord.SBOR/2"
    _solver = staticmethod(_sbor_solve)

    def __init__(self, kernel="rbf", theta="auto", theta_grid="scale", theta_selection="cv",
                 cv=5, cv_scoring="log_loss", selection_max_samples=1000, degree=2, max_iter=1000,
                 min_delta=1e-2, n_centres=None, centre_selection="random", block_size=256, cache_bytes=2**30,
                 link="probit", learn_noise=True, calibrate_sigma=True, classes=None, n_draws=200,
                 random_state=None, verbose=0, calibration_cv=None):
        self.kernel = kernel
        self.theta = theta
        self.theta_grid = theta_grid
        self.theta_selection = theta_selection
        self.cv = cv
        self.cv_scoring = cv_scoring
        self.selection_max_samples = selection_max_samples
        self.degree = degree
        self.max_iter = max_iter
        self.min_delta = min_delta
        self.n_centres = n_centres
        self.centre_selection = centre_selection
        self.block_size = block_size
        self.cache_bytes = cache_bytes
        self.link = link
        self.learn_noise = learn_noise
        self.calibrate_sigma = calibrate_sigma
        self.classes = classes
        self.n_draws = n_draws
        self.random_state = random_state
        self.verbose = verbose
        self.calibration_cv = calibration_cv

    def _capacity(self, n_cand):
        return int(n_cand)
