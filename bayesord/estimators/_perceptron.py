"""scikit-learn estimators for CuSum Rank and PRank (structured perceptrons).

The numerics live in :mod:`bayesord._perceptron`; these classes validate input, build
the static config and traced hyperparameters, call the jitted fit and map rank codes
back to the user's labels.  Margin models: they give cumulative scores, never
probabilities.
"""

from __future__ import annotations

import numbers

import jax
import numpy as np
import scipy.sparse as sp

from .. import _perceptron as core
from .._basis import check_gamma, resolve_gamma
from .._sparse import as_rows
from .._status import check_status
from .._validation import check_sample_weight, float_dtype
from ._base import (
    OrdinalEstimator,
    SnapshotSavableMixin,
    check_is_fitted,
    clone,
    copies_of_batch,
    fit_key,
    fit_rng,
    fresh_fit,
    same_order,
)
from ._proba_layer import ProbaLayerMixin

__all__ = ["CuSumRank", "PRank"]


class _StructuredPerceptron(ProbaLayerMixin, SnapshotSavableMixin, OrdinalEstimator):
    """Shared fit / partial_fit / predict plumbing; subclasses fix the model variant."""

    _accept_sparse = True
    _offset_sensitive = True
    _extra_thresholds = 1
    _why_every_class = ("fit needs a row of every declared class; a stream (partial_fit) may "
                        "declare classes it has not shown yet")
    _state_types = (core.PerceptronHyper, core.PerceptronState, core.PerceptronResult,
                    core.KernelPerceptronState, core.KernelPerceptronResult)
    _model = "cusum"
    _zero_weight_drops_row = True  # a row of weight 0 is skipped (bayesord._perceptron)

    # -- parameters ---------------------------------------------------------------------

    def _kernel(self):
        return "linear"

    def _algorithm(self):
        return "perceptron"

    def _check_params(self):
        if not isinstance(self.max_epochs, numbers.Integral) or self.max_epochs < 1:
            raise ValueError(f"max_epochs must be a positive integer, got {self.max_epochs!r}")
        if not np.isfinite(self.margin) or self.margin < 0:
            raise ValueError(f"margin must be a finite number >= 0, got {self.margin!r}")

    def _hyper(self, dtype, X):
        return core.make_hyper(dtype, margin=self.margin)

    def _config(self, n_classes, *, n_epochs=None, shuffle=None, stop=None):
        return core.PerceptronConfig(
            n_classes=n_classes, model=self._model, algorithm=self._algorithm(),
            averaged=bool(self.averaged), fit_intercept=self._fit_intercept(),
            n_epochs=int(self.max_epochs if n_epochs is None else n_epochs),
            shuffle=bool(self.shuffle if shuffle is None else shuffle),
            stop_if_separated=bool(self.stop_if_separated if stop is None else stop),
            kernel=self._kernel(),
        )

    def _fit_intercept(self):
        return True

    def _key(self):
        return fit_key(fit_rng(self.random_state))

    # -- fitting ------------------------------------------------------------------------

    @fresh_fit
    def fit(self, X, y, sample_weight=None, classes=None):
        """Train for up to ``max_epochs`` passes over (X, y), starting from zero weights.

        Args:
            X: (n, d) array or scipy.sparse matrix (linear kernel only).
            y: (n,) ordered labels.
            sample_weight: optional non-negative weights; a weight scales that row's
                update step (0 skips it); it is not the same as repeating the row.
            classes: labels in increasing order (needed for strings), as the constructor's
                ``classes``.  Every declared rank needs a training row (``partial_fit``
                may declare ranks the stream has not shown yet).

        Returns:
            self.
        """
        self._check_params()
        X, codes, sw = self._validate_fit(X, y, sample_weight, classes)
        if sp.issparse(X) and self._kernel() != "linear":
            raise TypeError(f"kernel={self._kernel()!r} needs dense X; sparse input works with kernel='linear'")
        dtype = float_dtype()
        cfg = self._config(len(self.classes_))
        hyper = self._hyper(dtype, X)
        key = self._key()
        if self._kernel() == "linear":
            res = core.fit_perceptron(as_rows(X, dtype), codes, cfg, sample_weight=sw, key=key, hyper=hyper,
                                      state=core.init_state(cfg, X.shape[1], dtype))
        else:
            res = core.fit_kernel_perceptron(np.asarray(X, dtype), codes, cfg, sample_weight=sw,
                                             key=key, hyper=hyper)
        self._store(res, hyper)
        check_status(res.status, type(self).__name__)
        return self

    def _batched_copies(self):
        return self._kernel() == "linear"

    def _fit_copies(self, X, labels, weights, classes):
        """The cross-fitting copies of the linear model in one program
        (:func:`bayesord._perceptron.fit_perceptron_weights`): a row of weight 0 is skipped."""
        template = clone(self)
        X, codes, _ = template._validate_fit(X, labels, None, classes)
        dtype = float_dtype()
        cfg = template._config(len(classes))
        hyper = template._hyper(dtype, X)
        res = core.fit_perceptron_weights(as_rows(X, dtype), codes, cfg, weights, key=template._key(), hyper=hyper,
                                          state=core.init_state(cfg, X.shape[1], dtype))

        def adopt(fitted, result, _):
            fitted._store(result, hyper)
            check_status(result.status, type(self).__name__)

        return copies_of_batch(template, res, weights.shape[0], adopt)

    def partial_fit(self, X, y, classes=None, sample_weight=None):
        """One online pass over (X, y) in the given order, continuing from the current weights.

        The update discards a calibration of the model before it (``calibrate``), with a
        warning.

        Args:
            X: inputs of a batch of the stream.
            y: its labels.
            classes: all labels in increasing order; required on the first call unless the
                constructor has them (the stream may not show every rank early), and must
                not change afterwards.
            sample_weight: optional non-negative weights of the batch's rows.

        Returns:
            self.

        Raises:
            ValueError: first call without ``classes``, a label outside ``classes``,
                a different ``classes`` than before, or a kernel model.
        """
        self._check_params()
        if self._kernel() != "linear":
            raise ValueError("partial_fit needs the linear (primal) model; the kernel model's "
                             "expansion grows with the data: use fit")
        dtype = float_dtype()
        first = not hasattr(self, "_state_") or self._state_ is None
        if first:
            if classes is None and self.classes is None:
                raise ValueError("the first call to partial_fit needs classes=[...] (here or in the "
                                 "constructor) listing every label in increasing order")
            X, codes, sw = self._validate_fit(X, y, sample_weight, classes, min_classes=1,
                                              require_all_classes=False)
            state = core.init_state(self._config(len(self.classes_)), X.shape[1], dtype)
        else:
            if classes is not None and not same_order(classes, self.classes_):
                raise ValueError(f"classes={list(classes)!r} differs from the classes of the first "
                                 f"partial_fit call {list(self.classes_)!r}")
            X = self._validate_predict(X)
            codes = self._encode_y(y, X.shape[0])
            sw = check_sample_weight(sample_weight, X.shape[0])
            state = self._state_
        cfg = self._config(len(self.classes_), n_epochs=1, shuffle=False, stop=False)
        hyper = self._hyper(dtype, X)
        res = core.fit_perceptron(as_rows(X, dtype), codes, cfg, sample_weight=sw,
                                  key=jax.random.PRNGKey(0), hyper=hyper, state=state)
        self._store(res, hyper)
        self._discard_calibration()
        check_status(res.status, type(self).__name__)
        return self

    def _store(self, res, hyper):
        self.result_ = res
        # the online state partial_fit continues from (the kernel model has none to continue)
        self._state_ = res.state if isinstance(res, core.PerceptronResult) else None
        self._hyper_ = hyper
        self.n_iter_ = int(res.n_iter)
        self.converged_ = bool(res.converged)
        self.mistakes_ = np.asarray(res.mistakes[: self.n_iter_])
        self.abs_error_ = np.asarray(res.abs_error[: self.n_iter_])
        self.n_updates_ = np.asarray(res.updates[: self.n_iter_])
        self.n_steps_ = int(res.state.n_steps)
        self._set_coef(res)

    # -- prediction ---------------------------------------------------------------------

    def decision_function(self, X):
        """Cumulative scores s(x, k) = sum_{j<=k} w_j . x (Eq. 8/10), shape (n, n_classes).

        Column k belongs to ``classes_[k]``; the first column is 0.  Not probabilities.
        """
        return np.asarray(self._predict(X).scores)

    def _predict(self, X):
        check_is_fitted(self, "n_iter_")
        X = self._validate_predict(X)
        dtype = float_dtype()
        kernel = isinstance(self.result_, core.KernelPerceptronResult)
        return core.predict_perceptron(self.result_, np.asarray(X, dtype) if kernel else as_rows(X, dtype))

    def predict(self, X):
        """Labels by the CuSum argmax (Eq. 8; ties to the higher rank)."""
        return self._decode(np.asarray(self._predict(X).labels))


class CuSumRank(_StructuredPerceptron):
    """CuSum Rank: ordinal regression as a structured perceptron (Milidiú & Rocha).

    One weight vector per rank; rank k scores s(x, k) = sum_{j<=k} w_j . x (Eq. 5/8) and
    the prediction is the best-scoring rank.  Trained online (Fig. 1), or
    passive-aggressively with a known margin (Fig. 2), optionally averaged (Collins 2002),
    loss-augmented (``margin``) and kernelised (dual, Fig. 5).

    Args:
        algorithm: "perceptron" (Fig. 1) or "pa" (passive-aggressive, Fig. 2).
        averaged: predict with the average of the weights over all online steps.
        margin: loss-augmented training, y_hat = argmax_k s(x, k) + margin |y - k| (0: off).
        delta: the passive-aggressive target margin (> 0); ignored by the perceptron.
        kernel: "linear" (primal, dense or sparse X), "rbf" or "poly" (dual, dense X).
        gamma: kernel scale: ``"scale"`` (default) is ``1 / (n_features Var(X))`` on the
            training inputs, as scikit-learn's SVC; None is ``1 / n_features``; or a number.
        degree: degree of the polynomial kernel (gamma x.x' + coef0)^degree.
        coef0: constant of the polynomial kernel.
        fit_intercept: add the constant attribute x_d = -1 (learned thresholds).
        max_epochs: passes over the data in ``fit``.
        shuffle: new random order each epoch (from ``random_state``).
        stop_if_separated: stop after an epoch without updates; if that never happens a
            ConvergenceWarning is issued.
        classes: the labels in increasing order (needed for string labels; ``fit(classes=...)``
            does the same, and the two must agree when both are given).
        random_state: seed for the epoch shuffles (None: 0; a ``RandomState`` or
            ``Generator`` is drawn from).
        calibration_cv: None (default), or a number of folds: ``fit`` then ends with
            ``calibrate(X, y, cv=calibration_cv)`` (folds seeded from ``random_state``), so
            the fitted model has conformal prediction sets, and a margin model
            ``predict_proba``, wherever it is fitted: in a ``Pipeline``, a grid search or
            ``cross_val_predict``.  Not with ``sample_weight`` (the copies are unweighted).

    Attributes:
        coef_: (n_classes, n_features) rank weight vectors (row 0 is the sentinel w_1 = 0);
            linear kernel only.
        thresholds_: (n_classes,) thresholds b_k (w_k . x_aug = coef_[k] . x - b_k).
        dual_coef_: kernel expansion a_k(x) = sum_i dual_coef_[i, k] K(support_[i], x) - b_k.
        support_: the training rows of the kernel expansion.
        mistakes_: online mistakes per epoch.
        abs_error_: online sum |y - y_hat| per epoch.
        n_updates_: updates per epoch.
        n_iter_: epochs run.
        converged_: whether an epoch ended without updates (when that was asked for).
        n_steps_: online steps taken in total (rows of positive weight seen).
        classes_: labels in increasing order.
        n_features_in_: number of features seen in ``fit``.

    Example:
        >>> import numpy as np
        >>> X = np.array([[0., 0.], [0., 1.], [1., 1.], [1., 0.]])
        >>> CuSumRank(max_epochs=50, shuffle=False, averaged=False).fit(X, [1, 2, 2, 3]).predict(X)
        array([1, 2, 2, 3])
    """

    _format = "bayesord.CuSumRank/2"

    def __init__(self, algorithm="perceptron", averaged=True, margin=0.0, delta=1.0,
                 kernel="linear", gamma="scale", degree=3, coef0=1.0, fit_intercept=True,
                 max_epochs=10, shuffle=True, stop_if_separated=False, classes=None, random_state=None,
                 calibration_cv=None):
        self.algorithm = algorithm
        self.averaged = averaged
        self.margin = margin
        self.delta = delta
        self.kernel = kernel
        self.gamma = gamma
        self.degree = degree
        self.coef0 = coef0
        self.fit_intercept = fit_intercept
        self.max_epochs = max_epochs
        self.shuffle = shuffle
        self.stop_if_separated = stop_if_separated
        self.classes = classes
        self.random_state = random_state
        self.calibration_cv = calibration_cv

    def _kernel(self):
        return self.kernel

    def _algorithm(self):
        return self.algorithm

    def _fit_intercept(self):
        return bool(self.fit_intercept)

    def _check_params(self):
        super()._check_params()
        if self.algorithm not in ("perceptron", "pa"):
            raise ValueError(f"algorithm must be 'perceptron' or 'pa', got {self.algorithm!r}")
        if self.kernel not in ("linear", "rbf", "poly"):
            raise ValueError(f"kernel must be 'linear', 'rbf' or 'poly', got {self.kernel!r}")
        if self.algorithm == "pa" and not (np.isfinite(self.delta) and self.delta > 0):
            raise ValueError(f"delta must be > 0 for the passive-aggressive algorithm, got {self.delta!r}")
        check_gamma(self.gamma)
        if self.kernel == "poly" and not (np.isfinite(self.degree) and self.degree > 0):
            raise ValueError(f"degree must be > 0, got {self.degree!r}")

    def _hyper(self, dtype, X):
        gamma = resolve_gamma(self.gamma, X) if self._kernel() != "linear" else 1.0
        return core.make_hyper(dtype, delta=self.delta, margin=self.margin, gamma=gamma,
                               coef0=self.coef0, degree=float(self.degree))

    def _set_coef(self, res):
        if isinstance(res, core.KernelPerceptronResult):
            self.dual_coef_ = np.asarray(res.dual_coef)
            self.support_ = np.asarray(res.support)
            for name in ("coef_",):
                if hasattr(self, name):
                    delattr(self, name)
        else:
            self.coef_ = np.asarray(res.coef)
        self.thresholds_ = np.asarray(res.thresholds)

    def predict_counting(self, X):
        """Labels by the counting rule (Eq. 2): 1 + #{k >= 2 : w_k . x >= 0}, for comparison."""
        return self._decode(np.asarray(core.predict_counting(self.decision_function(X))))


class PRank(_StructuredPerceptron):
    """PRank (Crammer & Singer) trained as a structured perceptron (Section 6, Eq. 11-14).

    One shared direction u and thresholds b_2 <= ... <= b_r (b_1 = -inf); the prediction is
    max{y : u . x >= b_y}.  A mistake updates u += (y - y_hat) x and b_k -= sign(y - y_hat)
    for k = min(y, y_hat)+1 .. max(y, y_hat).

    Args:
        averaged: predict with averaged weights (Collins 2002; the default, as for
            :class:`CuSumRank`).  ``False`` predicts with the last weights, PRank as first
            published; its test MAE was higher on each of the 13 shared data sets compared (0.18
            against 0.08 on balance_scale, 1.22 against 1.01 on toy, which is worse than
            always predicting the commonest class: docs/benchmarks.md, "defaults").
        margin: loss-augmented training (0: off).
        max_epochs: passes over the data in ``fit``.
        shuffle: new random order each epoch.
        stop_if_separated: stop after an epoch without updates.
        classes: the labels in increasing order (needed for string labels; ``fit(classes=...)``
            does the same, and the two must agree when both are given).
        random_state: seed for the epoch shuffles (None: 0; a ``RandomState`` or
            ``Generator`` is drawn from).
        calibration_cv: None (default), or a number of folds: ``fit`` then ends with
            ``calibrate(X, y, cv=calibration_cv)`` (folds seeded from ``random_state``), so
            the fitted model has conformal prediction sets, and a margin model
            ``predict_proba``, wherever it is fitted: in a ``Pipeline``, a grid search or
            ``cross_val_predict``.  Not with ``sample_weight`` (the copies are unweighted).

    Attributes:
        coef_: (n_features,) the direction u.
        thresholds_: (n_classes,) b with thresholds_[0] = -inf.
        mistakes_: online mistakes per epoch (also ``abs_error_``, ``n_updates_``, ``n_iter_``,
            ``converged_``, ``n_steps_``, ``classes_`` as in :class:`CuSumRank`).

    Example:
        >>> import numpy as np
        >>> X = np.array([[0.], [1.], [2.], [3.]])
        >>> m = PRank(averaged=False, max_epochs=20, shuffle=False, stop_if_separated=True)
        >>> m.fit(X, ["lo", "mid", "mid", "hi"], classes=["lo", "mid", "hi"]).predict(X)
        array(['lo', 'mid', 'mid', 'hi'], dtype='<U3')
    """

    _format = "bayesord.PRank/2"
    _model = "prank"

    def __init__(self, averaged=True, margin=0.0, max_epochs=10, shuffle=True,
                 stop_if_separated=False, classes=None, random_state=None, calibration_cv=None):
        self.averaged = averaged
        self.margin = margin
        self.max_epochs = max_epochs
        self.shuffle = shuffle
        self.stop_if_separated = stop_if_separated
        self.classes = classes
        self.random_state = random_state
        self.calibration_cv = calibration_cv

    def _set_coef(self, res):
        self.coef_ = np.asarray(res.coef)[0]
        thr = np.asarray(res.thresholds).copy()
        thr[0] = -np.inf
        self.thresholds_ = thr
