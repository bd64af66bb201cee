"""scikit-learn estimators for RED-SVM and transductive ordinal regression (TOR).

Numerics live in :mod:`bayesord._redsvm` and :mod:`bayesord._tor`; this module validates
input, builds the feature representation (dense, padded sparse rows, or a kernel feature
map), calls the functional core and maps codes back to the user's labels.
"""

from __future__ import annotations

import numbers

import jax
import jax.numpy as jnp
import numpy as np
import scipy.sparse as sp

from .._basis import KernelMap, check_gamma, fit_kernel_map, resolve_gamma, transform_kernel_map
from .._redsvm import KERNELS, LOSSES, RedSVMConfig, RedSVMResult, fit_redsvm, threshold_prediction
from .._progress import check_verbose, host_progress, show, solver_progress
from .._sparse import as_rows
from .._status import check_status, warn_user
from .._tor import TORConfig, TORResult, done_line, fit_tor
from .._validation import check_X, float_dtype
from ._base import OrdinalEstimator, SnapshotSavableMixin, fit_key, fit_rng, fresh_fit, iteration_cap_hints
from ._proba_layer import ProbaLayerMixin

__all__ = ["RedSVM", "TransductiveOrdinalRegression"]


def _check_positive(value, name):
    if not isinstance(value, numbers.Real) or isinstance(value, bool) or not np.isfinite(value) or value <= 0:
        raise ValueError(f"{name} must be a positive finite number, got {value!r}")


class _RedSVMBase(ProbaLayerMixin, SnapshotSavableMixin, OrdinalEstimator):
    _accept_sparse = True
    _threshold_scores = True  # calibrate(score="distance")
    _state_types = (KernelMap, RedSVMResult, TORResult)

    @property
    def _one_class_hint(self):
        if self.loss not in ("hinge", "laplacian"):
            return OrdinalEstimator._one_class_hint
        return (f"With a piecewise-linear loss (loss={self.loss!r}), weights of zero (w_ all 0 up "
                "to rounding) can be the exact optimum at every C where the classes overlap much "
                "(for the hinge, a degenerate SVM solution: Rifkin, Pontil & Verri, 1999), and a "
                "larger C then changes nothing: loss='logistic' or 'squared_hinge' finds the "
                f"signal.  Where the weights are not zero: {OrdinalEstimator._one_class_hint}")

    def _check_params(self):
        _check_positive(self.C, "C")
        _check_positive(self.tol, "tol")
        if self.loss not in LOSSES:
            raise ValueError(f"loss must be one of {LOSSES}, got {self.loss!r}")
        if self.kernel not in KERNELS:
            raise ValueError(f"kernel must be one of {KERNELS}, got {self.kernel!r}")
        check_gamma(self.gamma)
        if self.n_components is not None and (
                not isinstance(self.n_components, numbers.Integral) or self.n_components < 1):
            raise ValueError(f"n_components must be a positive integer or None, got {self.n_components!r}")
        if not isinstance(self.max_iter, numbers.Integral) or self.max_iter < 1:
            raise ValueError(f"max_iter must be a positive integer, got {self.max_iter!r}")

    @property
    def _offset_sensitive(self):
        # With the unregularised intercept a column's offset c moves only b
        # (w.(x - c) - theta_k - b = w.x - theta_k - (b + w.c)), and the solver centres the
        # columns; the kernels (RBF, the perceptron kernel) do not see offsets at all.
        return self.kernel == "linear" and not self.fit_intercept

    def _key(self):
        return fit_key(fit_rng(self.random_state))

    def _features_fit(self, X, key):
        """Representation used by the solver; builds the kernel map on ``X`` when needed."""
        dtype = float_dtype()
        if self.kernel == "linear":
            self.kernel_map_ = None
            return as_rows(X, dtype)
        if sp.issparse(X):
            raise TypeError(f"kernel={self.kernel!r} needs dense X; sparse input works with kernel='linear'")
        n = X.shape[0]
        m = n if self.n_components is None else min(self.n_components, n)
        idx = np.sort(np.asarray(jax.random.choice(key, n, (m,), replace=False))) if m < n else np.arange(n)
        self.kernel_map_ = fit_kernel_map(jnp.asarray(X[idx], dtype), self.kernel, resolve_gamma(self.gamma, X))
        return transform_kernel_map(self.kernel_map_, jnp.asarray(X, dtype), self.kernel)

    def _features_predict(self, X):
        dtype = float_dtype()
        if self.kernel_map_ is None:
            return as_rows(X, dtype)
        if sp.issparse(X):
            raise TypeError(f"kernel={self.kernel!r} needs dense X")
        return transform_kernel_map(self.kernel_map_, jnp.asarray(X, dtype), self.kernel)

    def _set_model(self, w, theta, b):
        self.w_ = np.asarray(w)
        self.intercept_ = float(b)
        self.thresholds_ = np.asarray(theta) + float(b)
        self.coef_ = self.w_ if self.kernel == "linear" else None

    def _predict(self, X):
        X = self._validate_predict(X)
        return threshold_prediction(jnp.asarray(self.w_), jnp.asarray(self.thresholds_), 0.0,
                                    self._features_predict(X))

    def decision_function(self, X):
        """Latent score ``h(x) = w.z(x)``; class k+1 is predicted above ``thresholds_[k]``."""
        return np.asarray(self._predict(X).scores)

    def predict(self, X):
        """Eq. (3): the number of thresholds below the score, mapped back to the labels."""
        return self._decode(np.asarray(self._predict(X).labels))


class RedSVM(_RedSVMBase):
    """RED-SVM: ordinal regression by one extended binary SVM (Eq. 1-3, 9; Li & Lin).

    Args:
        C: loss weight (C1 of Eq. 9).
        loss: one of "hinge", "squared_hinge", "logistic", "square", "laplacian" (Table II).
        kernel: "linear" (dense or CSR input), "perceptron" (``-|x - x'|``, Delta_p = 0) or
            "rbf" (``exp(-gamma |x - x'|^2)``); kernels need dense input.
        gamma: RBF width: ``"scale"`` (default) is ``1 / (n_features Var(X))`` on the training
            inputs, as scikit-learn's SVC; None is ``1 / n_features``; or a number.  The
            width used is ``kernel_map_.gamma``.
        n_components: number of Nystrom landmarks for kernels (None: every training row,
            exact; memory O(n^2)).
        fit_intercept: include the unregularised intercept ``b`` of Eq. (9).
        tol: relative duality-gap tolerance.  The default 1e-4 puts the objective within
            0.01% of its optimum (measurements in the docs' RED-SVM page).
        max_iter: coordinate-descent epoch cap per intercept value (10,000: a fold of
            ``tae``, 96 one-hot rows that are nearly separable, needed about 2,000 in one
            solve, and 1,000 stopped it short; a converging solve stops at its tolerance).
        classes: the labels in increasing order (needed for string labels; ``fit(classes=...)``
            does the same, and the two must agree when both are given).
        random_state: seed for the coordinate order and landmark choice (None: 0; a
            ``RandomState`` or ``Generator`` is drawn from).
        calibration_cv: None (default), or a number of folds: ``fit`` then ends with
            ``calibrate(X, y, cv=calibration_cv)`` (folds seeded from ``random_state``), so
            the fitted model has conformal prediction sets, and a margin model
            ``predict_proba``, wherever it is fitted: in a ``Pipeline``, a grid search or
            ``cross_val_predict``.  Not with ``sample_weight`` (the copies are unweighted).

    Attributes:
        classes_: the ordered labels.
        n_features_in_: number of input features.
        w_: weights in the feature or kernel-map space.
        coef_: the weights (linear kernel only).
        thresholds_: the K-1 effective thresholds ``theta + b``.
        intercept_: the intercept ``b``.
        n_iter_: coordinate-descent epochs.
        converged_: whether the duality-gap tolerance was met.
        objective_: the objective of Eq. (9) at the solution.
        kernel_map_: the Nystrom feature map (kernels only).
    """

    _format = "bayesord.RedSVM/2"

    # Exact sample weights (a weight multiplies the row's C): a weighted refit is a draw.
    _bootstrap_params = ("coef_", "thresholds_")

    def __init__(self, C=1.0, loss="hinge", kernel="linear", gamma="scale", n_components=None,
                 fit_intercept=True, tol=1e-4, max_iter=10000, classes=None, random_state=None,
                 calibration_cv=None):
        self.C = C
        self.loss = loss
        self.kernel = kernel
        self.gamma = gamma
        self.n_components = n_components
        self.fit_intercept = fit_intercept
        self.tol = tol
        self.max_iter = max_iter
        self.classes = classes
        self.random_state = random_state
        self.calibration_cv = calibration_cv

    @fresh_fit
    def fit(self, X, y, sample_weight=None, classes=None):
        """Fit on labeled data.  ``classes`` gives the label order (needed for strings)."""
        self._check_params()
        X, codes, sw = self._validate_fit(X, y, sample_weight, classes)
        key = self._key()
        k_map, k_fit = jax.random.split(key)
        Z = self._features_fit(X, k_map)
        config = RedSVMConfig(len(self.classes_), self.loss, bool(self.fit_intercept), int(self.max_iter))
        res = fit_redsvm(Z, codes, self.C * sw, config, tol=self.tol, key=k_fit)
        check_status(res.status, "RedSVM", iteration_cap_hints(self, X, res.status))
        self.result_ = res
        self._set_model(res.w, res.theta, res.b)
        self.objective_ = float(res.objective)
        self.n_iter_ = int(res.n_iter)
        self.converged_ = bool(res.converged)
        return self


class TransductiveOrdinalRegression(_RedSVMBase):
    """Transductive ordinal regression (TOR, Algorithm 1) over RED-SVM.

    The unlabeled rows are given either as ``X_unlabeled`` or by ``unlabeled_mask`` over
    the rows of ``X`` (labels at masked rows are ignored and may be anything, e.g. NaN);
    never by a sentinel label.

    Args:
        C: C1, the loss weight of the labeled rows.
        loss: as in :class:`RedSVM`.
        kernel: as in :class:`RedSVM` (the kernel map is built on labeled and unlabeled
            rows together).
        gamma: RBF width, as in :class:`RedSVM`.
        n_components: Nystrom landmarks, as in :class:`RedSVM`.
        fit_intercept: as in :class:`RedSVM`.
        tol: relative duality-gap tolerance of each retraining.
        max_iter: epoch cap per retraining.
        classes: the labels in increasing order (needed for string labels; ``fit(classes=...)``
            does the same, and the two must agree when both are given).
        random_state: seed for the coordinate order and landmark choice (None: 0; a
            ``RandomState`` or ``Generator`` is drawn from).
        calibration_cv: None (default), or a number of folds: ``fit`` then ends with
            ``calibrate(X, y, cv=calibration_cv)`` (folds seeded from ``random_state``), so
            the fitted model has conformal prediction sets, and a margin model
            ``predict_proba``, wherever it is fitted: in a ``Pipeline``, a grid search or
            ``cross_val_predict``.  Not with ``sample_weight`` (the copies are unweighted).
        c2_init: first C2 of the annealing (1e-5 in the paper); must be in (0, C).
        c2_growth: factor applied to C2 after each stage (2 in the paper); must exceed 1.
        max_retrains: cap on retrainings (the objective trace's capacity).
        swap_rule: "eq5" (the paper's Eq. 5: both rows predicted beyond their label) or
            "descent" (any adjacent pair whose swap lowers the loss, Joachims' TSVM rule).
        class_ratios: the proportion of each class (in the order of ``classes_``) among the
            unlabeled rows, when it is known better than from a small labeled sample, e.g.
            classes defined as quantiles.  Algorithm 2 hands out its pseudo-labels in these
            proportions and the swaps keep them (like the positive fraction ``-p`` of
            Joachims' TSVM in SVMlight).  None (default, the paper): the labeled rows'
            proportions.  Non-negative, one per class, summing to 1.
        verbose: report progress on stderr (0, the default: silent).  1: a line when the
            fit ends (``TOR done: 17 stages  retrainings 40  swaps 98  objective ...``); 2: also
            an updating line per retraining (``TOR stage 3/17  C2 4e-05  retrainings 57  swaps
            120  objective ...``), from a solver that is then compiled again in every process (a
            program that calls back into Python is not cached).  The results do not change.

    Attributes:
        transduction_: labels of the unlabeled rows, in their given order.
        init_transduction_: the pseudo-labels of Algorithm 2.
        w_: weights of the final inductive model (``predict`` uses it; also ``coef_``,
            ``thresholds_``, ``intercept_`` as in :class:`RedSVM`).
        objective_trace_: Eq. (10) at the kept model after each retraining (also
            ``swapped_trace_``: after that retraining's swaps; ``trace_stage_``,
            ``trace_c2_``, ``trace_swaps_``: its annealing stage, C2 and swapped pairs).
        swaps_per_stage_: swaps per annealing stage (also ``retrains_per_stage_``).
        n_retrains_: retrainings in total (also ``n_swaps_``, ``n_rejected_``).
        n_iter_: coordinate-descent epochs over all retrainings.
        converged_: whether every stage ended with no admissible swap and every solve
            converged.
    """

    _formula_fit_rows = ("X_unlabeled",)
    _format = "bayesord.TransductiveOrdinalRegression/2"
    _no_bootstrap = ("its fit labels the unlabeled rows it was given, so a refit on the labeled rows "
                     "alone is not a draw of it")
    _why_every_class = ("the labeled rows must show every declared class: TOR's pseudo-label "
                        "initialisation (Algorithm 2) hands out classes in the labeled class ratios")

    def __init__(self, C=1.0, loss="hinge", kernel="linear", gamma="scale", n_components=None,
                 fit_intercept=True, tol=1e-4, max_iter=10000, c2_init=1e-5, c2_growth=2.0,
                 max_retrains=5000, swap_rule="eq5", class_ratios=None, classes=None, random_state=None,
                 verbose=0, calibration_cv=None):
        self.C = C
        self.loss = loss
        self.kernel = kernel
        self.gamma = gamma
        self.n_components = n_components
        self.fit_intercept = fit_intercept
        self.tol = tol
        self.max_iter = max_iter
        self.classes = classes
        self.c2_init = c2_init
        self.c2_growth = c2_growth
        self.max_retrains = max_retrains
        self.swap_rule = swap_rule
        self.class_ratios = class_ratios
        self.random_state = random_state
        self.verbose = verbose
        self.calibration_cv = calibration_cv

    def _check_schedule(self):
        _check_positive(self.c2_init, "c2_init")
        _check_positive(self.c2_growth, "c2_growth")
        if self.c2_init >= self.C:
            raise ValueError(
                f"c2_init ({self.c2_init}) must be smaller than C ({self.C}): the annealing runs "
                "while C2 < C1 (Algorithm 1), so no transductive stage would run")
        if self.c2_growth <= 1.0:
            raise ValueError(f"c2_growth must exceed 1 so that C2 reaches C, got {self.c2_growth}")
        if self.swap_rule not in ("eq5", "descent"):
            raise ValueError(f"swap_rule must be 'eq5' or 'descent', got {self.swap_rule!r}")
        if not isinstance(self.max_retrains, numbers.Integral) or self.max_retrains < 1:
            raise ValueError(f"max_retrains must be a positive integer, got {self.max_retrains!r}")
        check_verbose(self.verbose)

    def _check_ratios(self, n_classes):
        """``class_ratios`` as a float array of length K, or None; ValueError if malformed."""
        if self.class_ratios is None:
            return None
        try:
            r = np.asarray(self.class_ratios, dtype=float)
        except (TypeError, ValueError):
            raise TypeError(f"class_ratios must be a sequence of numbers, got {self.class_ratios!r}") from None
        if r.shape != (n_classes,):
            raise ValueError(f"class_ratios must have one entry per class ({n_classes}), got shape {r.shape}")
        if not np.all(np.isfinite(r)) or np.any(r < 0):
            raise ValueError(f"class_ratios must be finite and non-negative, got {r.tolist()}")
        if abs(r.sum() - 1.0) > 1e-6:
            raise ValueError(f"class_ratios must sum to 1, got {r.tolist()} (sum {r.sum():.6g})")
        return r

    def calibrate(self, X, y, *, cv=None, score="aps", random_state=None):
        """As :meth:`RedSVM.calibrate`, except that a model fitted with unlabeled rows takes
        held-out rows only (``cv=None``).

        Cross-fitted copies would be fitted on the labeled folds alone, without the
        unlabeled rows that made this model, and their scores do not calibrate it: on 100
        labeled and 400 unlabeled rows of the probit generator, sets at 90% covered 0.71 of
        the unlabeled rows with ``cv=5`` and 0.94 with 200 held-out rows.

        Raises:
            ValueError: ``cv`` given for a model fitted with unlabeled rows.
        """
        if cv is not None and len(getattr(self, "transduction_", ())):
            raise ValueError("TransductiveOrdinalRegression fitted with unlabeled rows is calibrated on held-out "
                             "labeled rows only (calibrate(X_cal, y_cal), or --calibrate-on on the command line): "
                             "cross-fitted copies would be fitted without the unlabeled rows and do not calibrate "
                             "it (90% sets covered 0.71 of the rows in a trial)")
        return super().calibrate(X, y, cv=cv, score=score, random_state=random_state)

    @fresh_fit
    def fit(self, X, y, X_unlabeled=None, unlabeled_mask=None, classes=None, sample_weight=None):
        """Fit on labeled rows plus unlabeled rows and label the latter.

        Args:
            X: labeled rows (or all rows when ``unlabeled_mask`` is given).
            y: labels of the rows of ``X`` (ignored where ``unlabeled_mask`` is True).
            X_unlabeled: unlabeled rows, same features as ``X``.
            unlabeled_mask: (n,) bool, True for the unlabeled rows of ``X``.
            classes: the label order; every class must occur among the labeled rows
                (Algorithm 2 takes the class ratios from them).
            sample_weight: weights of the labeled rows (the unlabeled rows weigh 1).

        Raises:
            ValueError: both or malformed unlabeled specifications, a feature-count mismatch,
                a declared class missing from the labeled rows, bad schedule parameters,
                ``class_ratios`` of the wrong length, negative, or not summing to 1.
        """
        self._check_params()
        self._check_schedule()
        if X_unlabeled is not None and unlabeled_mask is not None:
            raise ValueError("give the unlabeled rows either as X_unlabeled or by unlabeled_mask, not both")
        if unlabeled_mask is not None:
            mask = np.asarray(unlabeled_mask)
            if mask.dtype != bool:
                raise TypeError(f"unlabeled_mask must be boolean, got dtype {mask.dtype}")
            X_all, _ = check_X(X, accept_sparse=True)
            if mask.shape != (X_all.shape[0],):
                raise ValueError(f"unlabeled_mask must have shape ({X_all.shape[0]},), got {mask.shape}")
            if len(y) != X_all.shape[0]:
                raise ValueError(f"y must have one entry per row of X ({X_all.shape[0]}), got {len(y)}")
            X_lab = X_all[np.flatnonzero(~mask)]
            X_unl = X_all[np.flatnonzero(mask)]
            is_cat = hasattr(y, "cat") or type(y).__name__ == "Categorical"
            y_lab = y[~mask] if is_cat else np.asarray(y)[~mask]
            if X_lab.shape[0] == 0:
                raise ValueError("unlabeled_mask marks every row as unlabeled; labeled rows are needed")
        else:
            X_lab, y_lab = X, y
            X_unl = None
        X_lab, codes, sw = self._validate_fit(X_lab, y_lab, sample_weight, classes)
        ratios = self._check_ratios(len(self.classes_))
        if X_unl is None and X_unlabeled is not None:
            X_unl, _ = check_X(X_unlabeled, name="X_unlabeled", accept_sparse=True)
            if X_unl.shape[1] != X_lab.shape[1]:
                raise ValueError(
                    f"X_unlabeled has {X_unl.shape[1]} features but the labeled X has {X_lab.shape[1]}")
        n_lab = X_lab.shape[0]
        n_unl = 0 if X_unl is None else X_unl.shape[0]
        if n_unl == 0:
            warn_user("no unlabeled rows: TransductiveOrdinalRegression reduces to RedSVM "
                      "(no transduction is done)")
        if n_unl and sp.issparse(X_lab) != sp.issparse(X_unl):
            X_lab = sp.csr_matrix(X_lab) if not sp.issparse(X_lab) else X_lab
            X_unl = sp.csr_matrix(X_unl) if not sp.issparse(X_unl) else X_unl
        if n_unl:
            X_all = sp.vstack([X_lab, X_unl]).tocsr() if sp.issparse(X_lab) else np.vstack([X_lab, X_unl])
        else:
            X_all = X_lab
        unl = np.concatenate([np.zeros(n_lab, bool), np.ones(n_unl, bool)])
        codes_all = np.concatenate([codes, np.zeros(n_unl, np.int32)])
        weight = np.concatenate([sw, np.ones(n_unl)])

        key = self._key()
        k_map, k_fit = jax.random.split(key)
        Z = self._features_fit(X_all, k_map)
        config = TORConfig(len(self.classes_), self.loss, bool(self.fit_intercept), int(self.max_iter),
                           max_retrains=int(self.max_retrains), swap_rule=self.swap_rule,
                           progress=solver_progress(self.verbose))
        if n_unl == 0:
            res = fit_redsvm(Z, codes, self.C * sw, config.redsvm, tol=self.tol, key=k_fit)
            check_status(res.status, "TransductiveOrdinalRegression", iteration_cap_hints(self, X_all, res.status))
            self.result_ = res
            self._set_model(res.w, res.theta, res.b)
            self.transduction_ = self._decode(np.zeros(0, np.int32))
            self.init_transduction_ = self.transduction_
            for name in ("objective_trace_", "swapped_trace_", "trace_c2_"):
                setattr(self, name, np.zeros(0))
            for name in ("trace_stage_", "trace_swaps_", "swaps_per_stage_", "retrains_per_stage_"):
                setattr(self, name, np.zeros(0, np.int64))
            self.n_retrains_ = self.n_swaps_ = self.n_rejected_ = 0
            self.n_iter_ = int(res.n_iter)
            self.converged_ = bool(res.converged)
            return self

        res = fit_tor(Z, codes_all, unl, config, C1=self.C, c2_init=self.c2_init,
                      c2_growth=self.c2_growth, weight=weight, tol=self.tol, key=k_fit,
                      class_ratios=ratios)
        if host_progress(self.verbose):
            show(done_line(res), final=True)
        check_status(res.status, "TransductiveOrdinalRegression", iteration_cap_hints(self, X_all, res.status))
        self.result_ = res
        self._set_model(res.w, res.theta, res.b)
        labels = np.asarray(res.labels)
        self.transduction_ = self._decode(labels[n_lab:])
        self.init_transduction_ = self._decode(np.asarray(res.init_labels)[n_lab:])
        n_ret = int(res.n_retrains)
        self.n_retrains_ = n_ret
        self.objective_trace_ = np.asarray(res.objective_trace)[:n_ret]
        self.swapped_trace_ = np.asarray(res.swapped_trace)[:n_ret]
        self.trace_stage_ = np.asarray(res.trace_stage)[:n_ret]
        self.trace_c2_ = np.asarray(res.trace_c2)[:n_ret]
        self.trace_swaps_ = np.asarray(res.trace_swaps)[:n_ret]
        n_st = int(self.trace_stage_.max()) + 1 if n_ret else 0
        self.swaps_per_stage_ = np.bincount(self.trace_stage_, weights=self.trace_swaps_,
                                            minlength=n_st).astype(np.int64)
        self.retrains_per_stage_ = np.bincount(self.trace_stage_, minlength=n_st).astype(np.int64)
        self.n_swaps_ = int(res.n_swaps)
        self.n_rejected_ = int(res.n_rejected)
        self.n_iter_ = int(res.n_iter)
        self.converged_ = bool(res.converged)
        return self
