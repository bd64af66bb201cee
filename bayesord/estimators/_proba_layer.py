"""Class probabilities for the margin models: a Bayesian ordinal probit on their decision values.

The large-margin models (NPSVOR, RED-SVM and TOR, the swapped-pairs SVM, CuSum Rank and
PRank) score rows; they have no probabilities.  :meth:`ProbaLayerMixin.calibrate` fits the
library's own :class:`~bayesord.OrdinalProbit` with the model's decision values as its
features, on rows the margin model did not train on (held-out rows, or out-of-fold values
from ``cv`` copies of the model):

    P(y <= k | x) = Phi(b_k - u^T g(x))      g(x) = decision values of x, (p,)

with a weak prior ``u ~ N(0, 10^2)`` on the standardised decision values, the thresholds
fitted jointly with ``u`` (Newton MAP), and the joint Laplace posterior of ``(u, b)``.
This is ordinal Platt scaling with a posterior: one cumulative model for all classes, so
the cumulative probabilities never cross and every row is a distribution (per-threshold
Platt scaling can cross), and the probit's Laplace posterior gives each probability a
band.  The conformity scores of the calibration rows come from probit layers that did not
see those rows either (cross-fitted over the same folds), so the sets keep their coverage.

With cross-fitting (``cv=k``) the layer learns from the copies' decision values and is applied
to the final model's, so it reads only the columns that keep their scale from one fit to the
next (:func:`stable_columns`); the others it reads as zeros (``proba_layer_columns_``).  A
margin model that found no signal has decision values that are solver noise around a
constant: a hinge-loss RED-SVM whose optimum is ``w = 0`` scores with weights of 1e-4 on one
fold and 1e-7 on another, and a layer that learned the scale of the copies' noise gave the
final model's confident nonsense (on statsmodels' ``fair`` data a test log-loss 0.41 above the
class shares').  With no column left, the probabilities are the class shares.
"""

from __future__ import annotations

import numpy as np

from .._status import warn_user, warned_once
from ._base import internal_fits, only_when
from ._bootstrap import BootstrapMixin
from ._probit import OrdinalProbit
from ._uncertainty import fold_indices, never_held_out, training_weights

__all__ = ["ProbaLayerMixin", "stable_columns"]

# Folds of the probability layer's own cross-fitting when the margin model's values come
# from held-out rows (cv=None).
_LAYER_FOLDS = 5
# The layer's prior precision on its (standardised) decision values: weak, a prior sd of 10.
_LAYER_ALPHA = 0.01
# The most, as a factor either way, by which the spread of a cross-fitted copy's decision
# values may differ from the final model's on the same rows for the layer to read them
# (the 22 dense shared data sets, 2026-11-27: the RED-SVM, swapped-pairs and perceptron
# scores within 3.9, NPSVOR's per-class columns within 7.4 but for 9 of 121 at 22 to 10^5;
# a RED-SVM at its degenerate optimum 860-1,200, and 20 to 10^5 on statsmodels' fair data).
_SPREAD_AGREEMENT = 10.0
# Fewer calibration rows per parameter of the layer than this get a warning (a user's trial,
# 4 classes and one decision value: 6 rows gave a test log-loss 0.5 above the class shares',
# 20 rows the class shares' own).
_ROWS_PER_PARAMETER = 5


def _layer(n_classes, random_state):
    # The layer has p + K - 1 parameters, fitted on hundreds of rows: tuning its prior by the
    # evidence would change little and compile the evidence search (about 3x the joint
    # Newton fit's compile time).
    return OrdinalProbit(thresholds="joint", alpha=_LAYER_ALPHA, classes=list(range(n_classes)),
                         random_state=random_state)


def stable_columns(copies, final, folds):
    """The columns of decision values whose spread a refit keeps, (p,) bool.

    A column is kept when, on the rows each fold held out, the standard deviation of the
    fold copy's values (``copies``, the out-of-fold values, (n, p)) and of the final model's
    (``final``, (n, p)) differ by at most a factor of :data:`_SPREAD_AGREEMENT` either way
    (two constant columns agree).
    """
    keep = np.ones(copies.shape[1], dtype=bool)
    for _, test in folds:
        a, b = copies[test].std(axis=0), final[test].std(axis=0)
        keep &= ((a == 0) & (b == 0)) | ((a <= _SPREAD_AGREEMENT * b) & (b <= _SPREAD_AGREEMENT * a))
    return keep


def _calibrated(est):
    """:func:`~bayesord.estimators._base.only_when` check: the margin model has a probability
    layer, else say how to get one."""
    if getattr(est, "proba_layer_", None) is None:
        raise AttributeError(f"{type(est).__name__} has no probabilities of its own until it is "
                             "calibrated: call calibrate(X_cal, y_cal) on held-out rows (or "
                             "calibrate(X_train, y_train, cv=5)) to fit its probability layer")
    return True


class ProbaLayerMixin(BootstrapMixin):
    """``predict_proba``, ``predict_proba_interval`` and prediction sets for a margin model
    (and its bootstrap, :class:`~bayesord.estimators._bootstrap.BootstrapMixin`)."""

    def _calibration_values(self, X):
        """Decision values as a matrix, (n, p) (p = 1 for a single score)."""
        values = np.asarray(self.decision_function(X), dtype=np.float64)
        return values.reshape(values.shape[0], -1)

    def _layer_inputs(self, X):
        """What the fitted probability layer reads: the decision values, with zeros in the
        columns it leaves out (:func:`stable_columns`)."""
        return self._calibration_values(X) * self.proba_layer_columns_

    def _calibration_proba(self, X, values, codes, cv, random_state):
        K = len(self.classes_)
        missing = np.setdiff1d(np.arange(K), codes)
        if missing.size:
            raise ValueError(f"the calibration rows have no row of class(es) "
                             f"{np.asarray(self.classes_)[missing].tolist()}, and the probability "
                             f"layer of {type(self).__name__} must place every class: calibrate on "
                             "more rows, or by cross-fitting on the training rows (cv=5)")
        n_params = values.shape[1] + K - 1
        if codes.shape[0] < _ROWS_PER_PARAMETER * n_params:
            warn_user(f"{type(self).__name__}: its probability layer ({n_params} parameters: a weight per decision "
                      f"value and {K - 1} thresholds) is calibrated on {codes.shape[0]} rows, fewer than "
                      f"{_ROWS_PER_PARAMETER} per parameter; its probabilities then overfit those rows and are "
                      "over-confident (a TOR layer on 6 rows: test log-loss 1.89 against the class shares' 1.36, "
                      "on 20 rows 1.35).  Calibrate on more rows, or by cross-fitting on the training rows (cv=5)")
        proba = np.empty((codes.shape[0], K))
        # Each fold's layer is the full problem with the held-out rows at weight zero, which
        # is exact for the probit (weighted sums throughout); the folds' layers and the final
        # one (every row at weight one) are fitted side by side in one program.
        folds = fold_indices(codes, cv or _LAYER_FOLDS, random_state)
        n = codes.shape[0]
        weights = training_weights([train for train, _ in folds] + [np.arange(n)], n)
        self.proba_layer_columns_ = (stable_columns(values, self._calibration_values(X), folds) if cv
                                     else np.ones(values.shape[1], dtype=bool))
        if not self.proba_layer_columns_.any():
            warn_user(f"{type(self).__name__}'s decision values change their spread by more than a factor "
                      f"of {_SPREAD_AGREEMENT:g} between a cross-fitted copy and the final model on the "
                      "same rows, so they hold no signal that a refit keeps: its probabilities are the "
                      "class shares of the calibration rows")
        values = values * self.proba_layer_columns_
        with internal_fits(), warned_once(f"the probability layer's {len(folds) + 1} fits"):
            *layers, self.proba_layer_ = _layer(K, random_state)._fit_copies(values, codes, weights,
                                                                             np.arange(K))
        for layer, (_, test) in zip(layers, folds):
            proba[test] = layer.predict_proba(values[test])
        kept = never_held_out(folds, n)  # a class's only row: every layer saw it
        if kept.size:
            proba[kept] = self.proba_layer_.predict_proba(values[kept])
        return proba

    @only_when(_calibrated)
    def predict_proba(self, X):
        """Calibrated class probabilities, (n, K), columns in ``classes_`` order.

        From the Bayesian probit layer on the decision values (fitted by :meth:`calibrate`);
        rows are non-negative and sum to 1, cumulative probabilities never cross.

        Only a calibrated model has this method (``hasattr`` tells).
        """
        return self.proba_layer_.predict_proba(self._layer_inputs(X))

    @only_when(_calibrated)
    def predict_proba_interval(self, X, level=0.95):
        """Central band of each calibrated class probability under the layer's posterior.

        The spread is that of the probability layer (its weights and thresholds); the margin
        model's own decision values are taken as given.

        Returns:
            (lower, upper, sd), each (n, K), with 0 <= lower <= upper <= 1.

        Only a calibrated model has this method.
        """
        return self.proba_layer_.predict_proba_interval(self._layer_inputs(X), level=level)

    # ------------------------------------------------------------ persistence
    def _uncertainty_state(self):
        arrays, meta = super()._uncertainty_state()
        layer = getattr(self, "proba_layer_", None)
        if layer is None:
            return arrays, meta
        layer_arrays, layer_meta = layer._saved_state()
        arrays = dict(arrays, **{f"proba_layer.{k}": v for k, v in layer_arrays.items()})
        params = layer.get_params()
        return arrays, dict(meta, proba_layer={"params": params, "n_features": int(layer.n_features_in_),
                                               "columns": self.proba_layer_columns_.tolist(),
                                               "state": layer_meta})

    def _restore_uncertainty(self, arrays, meta):
        super()._restore_uncertainty(arrays, meta)
        if "proba_layer" not in meta:
            return
        info = meta["proba_layer"]
        layer = OrdinalProbit(**info["params"])
        layer.classes_ = np.arange(len(self.classes_))
        layer.n_features_in_ = int(info["n_features"])
        prefix = "proba_layer."
        layer._restore({k[len(prefix):]: v for k, v in arrays.items() if k.startswith(prefix)},
                       info["state"])
        layer._check_restored()
        self.proba_layer_ = layer
        self.proba_layer_columns_ = np.asarray(info.get("columns", [True] * layer.n_features_in_), dtype=bool)
