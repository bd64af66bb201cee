"""scikit-learn estimator for linear NPSVOR (numerics in :mod:`bayesord._npsvor`)."""

from __future__ import annotations

import dataclasses
import numbers

import jax
import numpy as np

from .._npsvor import SOLVERS, NPSVORConfig, NPSVORResult, cv_npsvor, done_line, fit_npsvor, predict_npsvor
from .._progress import host_progress, prefix, show, solver_progress
from .._sparse import to_padded_rows
from .._status import check_status
from .._validation import float_dtype
from ._base import (
    OrdinalEstimator,
    SnapshotSavableMixin,
    check_is_fitted,
    check_positive_ints,
    clone,
    copies_of_batch,
    fit_key,
    fit_rng,
    fresh_fit,
    iteration_cap_hints,
)
from ._proba_layer import ProbaLayerMixin

__all__ = ["NPSVOR"]

# The tolerance of the bootstrap refits at most (NPSVOR._draw_params).
_DRAW_TOL = 1e-3


def _positive(name, value):
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number, got {value!r}")
    if not np.isfinite(value) or value <= 0:
        raise ValueError(f"{name} must be positive and finite, got {value!r}")
    return float(value)


class NPSVOR(ProbaLayerMixin, SnapshotSavableMixin, OrdinalEstimator):
    """Linear nonparallel support vector ordinal regression (Shi, Wang, Shen, Niu).

    One hyperplane per rank k: close to the rows of rank k (epsilon-insensitive loss,
    weight C1) and with the lower ranks on its negative side and the higher ranks on its
    positive side (hinge loss, weight C2), Eq. (4).  Trained by dual coordinate descent;
    sparse CSR input is never densified.

    Args:
        C: penalty used for both C1 and C2 unless they are given.
        C1: penalty of the epsilon-insensitive loss on rank k's own rows.
        C2: penalty of the hinge loss on the other rows.
        epsilon: half-width of the insensitive zone (>= 0), 0.1 in the paper.
        tol: relative stopping tolerance eps_s of Eq. (31), 0.1 in the paper.
        fit_intercept: append a constant feature (its weight is the intercept; it is
            regularised like the other weights, as in LIBLINEAR).
        intercept_scaling: value of that constant feature.
        solver: ``"dcd2"`` (Algorithm 2, default), ``"dcd1"`` (Algorithm 1) or
            ``"block"`` (blocks of coordinates with an exact line search; faster on
            sparse data without an intercept).
        block_size: coordinates per block for ``solver="block"``.
        shrinking: use the shrinking heuristic of Algorithm 2.
        predictor: ``"new"`` (r_new, Eq. 36, default) or ``"old"`` (nearest hyperplane, Eq. 5).
        max_iter: cap on passes over the data.
        Cs: when given, C is chosen from these values by ``cv``-fold cross-validation on
            MAE (all folds and values fitted in one compiled call), then the model is refit
            on all rows; C1 and C2 must then be None.
        cv: number of folds for ``Cs``.
        classes: the labels in increasing order (needed for string labels).
        random_state: seed for the coordinate order and the folds (None: 0; a ``RandomState``
            or ``Generator`` is drawn from).
        calibration_cv: None (default), or a number of folds: ``fit`` then ends with
            ``calibrate(X, y, cv=calibration_cv)`` (folds seeded from ``random_state``), so
            the fitted model has conformal prediction sets, and a margin model
            ``predict_proba``, wherever it is fitted: in a ``Pipeline``, a grid search or
            ``cross_val_predict``.  Not with ``sample_weight`` (the copies are unweighted).
        verbose: report progress on stderr (0, the default: silent).  1: a line as each
            solve ends (``NPSVOR done: 69 passes  converged 6/6 problems``; with ``Cs``, one per
            C value with its CV MAE); 2: also an updating line at every pass (``NPSVOR pass
            12/1000  converged 37/60 problems``), from a solver that is then compiled again in
            every process (a program that calls back into Python is not cached).  The results
            do not change.

    Attributes:
        coef_: (p, d) hyperplanes w_k.
        intercept_: (p,) biases b_k (only when ``fit_intercept``).
        result_: the functional :class:`bayesord.NPSVORResult`
            (``bayesord.predict_npsvor(result_, X)`` predicts padded rows built as ``_ell``
            builds them).
        dual_coef_: (p, n) dual variables alpha (Eq. 19).
        n_iter_: (p,) passes per rank.
        converged_: (p,) whether each rank met the tolerance.
        duality_gap_: (p,) primal minus dual objective.
        primal_objective_, dual_objective_: (p,) objectives of Eq. (4) and Eq. (20).
        classes_: the ordered labels.
        C_: the C used for the final fit (chosen by CV when ``Cs`` is given).
        cv_results_: dict with ``Cs``, ``mean_mae``, ``fold_mae`` (only with ``Cs``).

    Example:
        >>> import numpy as np
        >>> from bayesord.estimators._npsvor import NPSVOR
        >>> rng = np.random.default_rng(0)
        >>> X = rng.normal(size=(90, 3)); y = np.digitize(X @ [1.0, -1.0, 0.5], [-1, 1])
        >>> model = NPSVOR(C=1.0, random_state=0).fit(X, y)
        >>> model.predict(X[:3]).shape
        (3,)
    """

    _format = "bayesord.NPSVOR/2"
    _state_types = (NPSVORResult,)
    _accept_sparse = True
    _offset_sensitive = True
    _zero_weight_drops_row = True  # a weight multiplies the row's C: weight 0 leaves it out
    # Exact sample weights (a weight multiplies the row's C): a weighted refit is a bootstrap draw.
    _bootstrap_params = ("coef_", "intercept_")

    def __init__(self, C=1.0, *, C1=None, C2=None, epsilon=0.1, tol=0.1, fit_intercept=True,
                 intercept_scaling=1.0, solver="dcd2", block_size=64, shrinking=True,
                 predictor="new", max_iter=1000, Cs=None, cv=5, classes=None,
                 random_state=None, verbose=0, calibration_cv=None):
        self.C = C
        self.C1 = C1
        self.C2 = C2
        self.epsilon = epsilon
        self.tol = tol
        self.fit_intercept = fit_intercept
        self.intercept_scaling = intercept_scaling
        self.solver = solver
        self.block_size = block_size
        self.shrinking = shrinking
        self.predictor = predictor
        self.max_iter = max_iter
        self.Cs = Cs
        self.cv = cv
        self.classes = classes
        self.random_state = random_state
        self.verbose = verbose
        self.calibration_cv = calibration_cv

    def _check_params(self):
        # A bad C is named as the user gave it: C, or the C1/C2 that replaces it.
        C1, C2 = (_positive("C", self.C) if own is None else _positive(name, own)
                  for name, own in (("C1", self.C1), ("C2", self.C2)))
        if isinstance(self.epsilon, bool) or not isinstance(self.epsilon, numbers.Real):
            raise TypeError(f"epsilon must be a real number, got {self.epsilon!r}")
        if not np.isfinite(self.epsilon) or self.epsilon < 0:
            raise ValueError(f"epsilon must be >= 0 and finite, got {self.epsilon!r}")
        tol = _positive("tol", self.tol)
        if self.solver not in SOLVERS:
            raise ValueError(f"solver must be one of {SOLVERS}, got {self.solver!r}")
        if self.predictor not in ("new", "old"):
            raise ValueError(f"predictor must be 'new' or 'old', got {self.predictor!r}")
        if self.fit_intercept:
            _positive("intercept_scaling", self.intercept_scaling)
        check_positive_ints(self, "max_iter", "block_size")
        Cs = None
        if self.Cs is not None:
            if self.C1 is not None or self.C2 is not None:
                raise ValueError("Cs (cross-validated C) cannot be combined with C1 or C2")
            Cs = np.asarray(self.Cs, dtype=np.float64).ravel()
            if Cs.size == 0 or not np.all(np.isfinite(Cs)) or np.any(Cs <= 0):
                raise ValueError(f"Cs must be a non-empty list of positive finite values, got {self.Cs!r}")
            if isinstance(self.cv, bool) or not isinstance(self.cv, numbers.Integral) or self.cv < 2:
                raise ValueError(f"cv must be an integer >= 2, got {self.cv!r}")
        return C1, C2, float(self.epsilon), tol, Cs

    def _ell(self, X):
        bias = float(self.intercept_scaling) if self.fit_intercept else None
        return to_padded_rows(X, bias=bias, dtype=float_dtype())

    @fresh_fit
    def fit(self, X, y, sample_weight=None, classes=None):
        """Fit the p rank hyperplanes.

        Args:
            X: (n, d) array or scipy.sparse matrix (CSR; duplicates are summed).
            y: (n,) ordered labels.
            sample_weight: optional (n,) non-negative weights; a weight multiplies the
                row's C, which is exactly the weighted loss.
            classes: the labels in increasing order, as the constructor's ``classes``
                (either may be given; if both are, they must agree).

        Returns:
            self.

        Raises:
            ValueError / TypeError: bad parameters or data (see :meth:`_check_params` and
                the shared input checks).
        """
        C1, C2, eps, tol, Cs = self._check_params()
        X, codes, sw = self._validate_fit(X, y, sample_weight, classes=classes)
        p = len(self.classes_)
        E = self._ell(X)
        config = self._config(X)
        rs = fit_rng(self.random_state)
        key = fit_key(rs)
        weights = None if np.all(sw == 1.0) else sw
        if Cs is not None:
            with prefix(f"{int(self.cv)}-fold"):
                cvr = cv_npsvor(E, codes, p, Cs, int(self.cv), eps, tol, key, config,
                                sample_weight=weights, predictor=self.predictor,
                                seed=int(rs.randint(2**31 - 1)))
            check_status(np.asarray(cvr.fits.status), "NPSVOR cross-validation",
                         iteration_cap_hints(self, X, cvr.fits.status))
            if host_progress(self.verbose):
                for i, c in enumerate(cvr.Cs):
                    show(f"{int(self.cv)}-fold CV C={c:g} ({i + 1}/{cvr.Cs.size}): MAE {cvr.mean_mae[i]:.4f}  "
                         + done_line(jax.tree_util.tree_map(lambda a, i=i: a[i], cvr.fits)), final=True)
            self.cv_results_ = {"Cs": cvr.Cs, "mean_mae": cvr.mean_mae,
                                "fold_mae": cvr.fold_mae}
            C1 = C2 = cvr.best_C
        res = fit_npsvor(E, codes, p, C1, C2, eps, tol, key, config, sample_weight=weights)
        if host_progress(self.verbose):
            show(done_line(res), final=True)
        self._adopt(res, C1, C2, iteration_cap_hints(self, X, res.status))
        return self

    def _config(self, X):
        return NPSVORConfig(n_features=X.shape[1] + bool(self.fit_intercept),
                            solver=self.solver, block_size=int(self.block_size),
                            shrinking=bool(self.shrinking), max_iter=int(self.max_iter),
                            progress=solver_progress(self.verbose), predictor=self.predictor)

    def _adopt(self, res, C1, C2, hints=None):
        """Take a fit's result as this estimator's, fitted with penalties C1, C2 (``hints``:
        :func:`~bayesord._status.check_status`'s, for a fit on the user's columns)."""
        check_status(np.asarray(res.status), "NPSVOR", hints)
        W = np.asarray(res.coef)
        if self.fit_intercept:
            self.coef_ = W[:, :-1]
            self.intercept_ = W[:, -1] * float(self.intercept_scaling)
        else:
            self.coef_ = W
        self.result_ = res
        self.C_ = C1 if C1 == C2 else (C1, C2)

    def _draw_params(self):
        # At the paper's tol = 0.1 a solve stops so far from its optimum that the draws'
        # spread is mostly the solver's: 1,000 rows of the probit generator (3 columns, 4
        # classes, float64), refits under the same weights in two coordinate orders differ
        # by 1.6 times the draws' sd (rms, worst coefficient) at 0.1, 0.6 at 0.01, 0.3 at 1e-3.
        params = {"tol": min(float(self.tol), _DRAW_TOL), "max_iter": 10 * int(self.max_iter)}
        # A draw keeps the C that cross-validation chose: repeating the search in every draw
        # cost 16 fits each (20 draws on 1,000 rows of winequality_red with three Cs: 189 s).
        return params if self.Cs is None else dict(params, C=self.C_, Cs=None)

    def _batched_copies(self):
        # With a C grid each copy runs its own cross-validation: those go one by one.
        return self.Cs is None

    def _fit_copies(self, X, labels, weights, classes):
        """Copies fitted under each row of ``weights`` as one batch of rank problems of
        :func:`bayesord._npsvor.fit_npsvor` (a weight multiplies the row's C, so a row of
        weight 0 is left out, and a problem's result does not depend on the batch)."""
        template = clone(self)
        C1, C2, eps, tol, _ = template._check_params()
        X, codes, _ = template._validate_fit(X, labels, None, classes=classes)
        E = template._ell(X)
        res = fit_npsvor(E, codes, len(classes), C1, C2, eps, tol, fit_key(fit_rng(template.random_state)),
                         template._config(X), sample_weight=np.asarray(weights, E.values.dtype))
        return copies_of_batch(template, res, weights.shape[0], lambda fitted, r, _: fitted._adopt(r, C1, C2))

    # Read from ``result_``, so a saved model holds them once.
    dual_coef_ = property(lambda self: np.asarray(self.result_.alpha))
    n_iter_ = property(lambda self: np.asarray(self.result_.n_iter))
    converged_ = property(lambda self: np.asarray(self.result_.converged))
    duality_gap_ = property(lambda self: np.asarray(self.result_.gap))
    primal_objective_ = property(lambda self: np.asarray(self.result_.primal))
    dual_objective_ = property(lambda self: np.asarray(self.result_.dual))

    def decision_function(self, X):
        """Decision values f_k(x) = w_k'x + b_k, shape (n, p), columns in class order.

        These are signed distances (times |w_k|) to each rank's hyperplane, not
        probabilities: r_old picks the smallest |f_k|, r_new counts f_k + f_{k+1} > 0.
        """
        return np.asarray(self._predict(X, None).scores)

    def predict(self, X, predictor=None):
        """Predicted labels by r_new (Eq. 36) or r_old (Eq. 5); default ``self.predictor``."""
        return self._decode(np.asarray(self._predict(X, predictor).labels))

    def _predict(self, X, predictor):
        check_is_fitted(self, "result_")
        result = self.result_
        if predictor is not None and predictor != result.config.predictor:
            if predictor not in ("new", "old"):
                raise ValueError(f"predictor must be 'new' or 'old', got {predictor!r}")
            result = result._replace(config=dataclasses.replace(result.config, predictor=predictor))
        return predict_npsvor(result, self._ell(self._validate_predict(X)))

