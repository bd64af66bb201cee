"""Prediction sets for every estimator: conformal calibration and credible windows.

:class:`UncertaintyMixin` gives each estimator ``calibrate`` (conformity scores of labelled
rows the model did not train on) and ``predict_set`` (contiguous class intervals, see
:mod:`bayesord.uncertainty`).  It asks the estimator for two things only: class
probabilities (:meth:`predict_proba`; the margin models get theirs from the probability
layer of :mod:`bayesord.estimators._proba_layer`) and point predictions (:meth:`predict`).
"""

from __future__ import annotations

import contextlib
import os
from typing import NamedTuple

import numpy as np
import scipy.sparse as sp

from ..uncertainty import (
    SCORES,
    check_alpha,
    conformal_quantile,
    conformity_scores,
    credible_windows,
    distance_scores,
    risk_threshold,
    sets_from_scores,
)
from .._progress import prefix
from .._splits import kfold_indices
from .._status import warn_user, warned_once
from ._base import check_is_fitted, clone, fit_rng, internal_fits, run_folds
from ._formula import formula_rows

__all__ = ["ConformalCalibration", "UncertaintyMixin", "check_cv", "fold_indices", "never_held_out",
           "training_weights"]


class ConformalCalibration(NamedTuple):
    """What :meth:`UncertaintyMixin.calibrate` keeps of the calibration rows."""

    scores: np.ndarray
    """Conformity score of each calibration row's true label, (n_cal,)."""
    labels: np.ndarray
    """Class code of each calibration row, (n_cal,) (for Mondrian sets)."""
    score: str
    """Which conformity score: ``"aps"``, ``"cdf"`` or ``"distance"``."""
    cv: int
    """0 for split conformal (held-out rows), else the number of cross-fitting folds."""
    matrix: np.ndarray
    """Conformity scores of every class for each calibration row, (n_cal, K) (for risk
    control)."""
    anchors: np.ndarray
    """The class each calibration row's sets hold (its prediction), (n_cal,)."""


def check_cv(cv):
    """``cv`` as 0 (split conformal on held-out rows) or a fold count of at least 2."""
    if cv is None:
        return 0
    if isinstance(cv, bool) or not isinstance(cv, (int, np.integer)) or cv < 2:
        raise ValueError(f"cv must be None (the rows are held out from the fit) or a number of "
                         f"folds >= 2, got {cv!r}")
    return int(cv)


def fold_indices(codes, cv, random_state):
    """Stratified folds of labelled rows for cross-fitting: (train, test) index pairs.

    Every class stays in every training part.  The row of a class that has only one is
    never held out: it is scored by a model that saw it (rather than by one that cannot
    place its class).  The number of folds is at most the smallest count of the other
    classes.

    Raises:
        ValueError: no class has two rows.
    """
    counts = np.bincount(codes)
    multi = np.flatnonzero(counts[codes] >= 2)
    if multi.size == 0:
        raise ValueError("cross-fitting needs a class with at least 2 rows")
    k = fold_count(codes, cv)
    seed = 0 if random_state is None else random_state
    folds = kfold_indices(codes[multi], k=k, seed=seed)
    n = codes.shape[0]
    return [(np.setdiff1d(np.arange(n), multi[test]), multi[test]) for _, test in folds]


def fold_count(codes, cv):
    """The folds :func:`fold_indices` makes of ``codes`` when ``cv`` are asked for: at most the
    smallest count of a class with two rows or more."""
    counts = np.bincount(codes)
    return min(cv, int(counts[counts >= 2].min())) if np.any(counts >= 2) else cv


def training_weights(train_sets, n):
    """0/1 sample weights, (len(train_sets), n): row j is 1 on the rows of ``train_sets[j]``
    (a copy fitted on all n rows with them leaves the other rows out, where the model's rows
    at weight zero are left out: ``_zero_weight_drops_row``)."""
    weights = np.zeros((len(train_sets), n))
    for j, train in enumerate(train_sets):
        weights[j, train] = 1.0
    return weights


def never_held_out(folds, n):
    """The rows that no fold of :func:`fold_indices` holds out (single rows of a class)."""
    held = np.zeros(n, dtype=bool)
    for _, test in folds:
        held[test] = True
    return np.flatnonzero(~held)


# What calibrate (conformity scores, a margin model's probability layer) and bootstrap learn
# of one fitted model.
_LEARNT_OF_THE_FIT = ("conformal_", "proba_layer_", "proba_layer_columns_", "bootstrap_draws_")


class UncertaintyMixin:
    """``calibrate``, ``predict_set`` and the calibration's persistence, for every estimator."""

    # Whether a fit with a row at weight zero is the fit without that row (exactly, or for an
    # online fit, the others visited in the order a fit of all rows visits them): then the
    # cross-fitting copies keep every row (at weight zero off their fold), so all of them
    # have the shape of the calibration rows and compile once.
    _zero_weight_drops_row = False
    # The fit records warnings (warnings.catch_warnings), which is not thread-safe: its
    # cross-fitted copies run one after another.
    _serial_fits = False
    # Whether the model predicts by thresholds_ on one decision_function score, so that
    # calibrate(score="distance") applies.
    _threshold_scores = False

    def _discard_calibration(self):
        """Drop what :meth:`calibrate` and ``bootstrap`` learnt of the model as it was, before
        an update that changes it (``partial_fit``), and say so when there was any."""
        learnt = [name for name in _LEARNT_OF_THE_FIT if hasattr(self, name)]
        for name in learnt:
            delattr(self, name)
        if learnt:
            warn_user(f"{type(self).__name__}.partial_fit changed the model, so its calibration "
                      f"({', '.join(learnt)}) no longer describes it and was discarded: call "
                      "calibrate() again on rows the updated model has not seen")

    def _calibration_folds(self, fit_args):
        """The constructor's ``calibration_cv`` as a fold count (0: none), checked before a
        user's fit (``fit_args``: the arguments ``fit`` was called with) spends its time."""
        try:
            folds = check_cv(self.calibration_cv)
        except ValueError:
            raise ValueError(f"calibration_cv must be None or a number of folds >= 2, got "
                             f"{self.calibration_cv!r}") from None
        if folds and fit_args.get("sample_weight") is not None:
            raise ValueError("calibration_cv cross-fits its copies on unweighted rows, so it cannot "
                             "follow a fit with sample_weight: leave calibration_cv=None and call "
                             "calibrate(X_cal, y_cal) on held-out rows after the fit")
        return folds

    def _calibrate_on_fit_rows(self, fit_args, cv):
        """``calibrate(X, y, cv=cv)`` on the labelled rows a user's fit was given (the fit's
        ``groups`` with them), the folds seeded from ``random_state``."""
        X, y = fit_args["X"], fit_args["y"]
        mask = fit_args.get("unlabeled_mask")
        if mask is not None:
            labelled = np.flatnonzero(~np.asarray(mask, dtype=bool))
            X = _rows(X.tocsr() if sp.issparse(X) else X if hasattr(X, "iloc") else np.asarray(X), labelled)
            y = y.iloc[labelled] if hasattr(y, "iloc") else np.asarray(y)[labelled]
        groups = {"groups": fit_args["groups"]} if "groups" in fit_args else {}
        seed = int(fit_rng(self.random_state).randint(2**31 - 1))
        self.calibrate(X, y, **groups, cv=cv, random_state=seed)

    def predict_cumproba(self, X):
        """Cumulative probabilities ``P(y <= classes_[k])`` for k < K-1, shape (n, K-1)
        (a margin model's need :meth:`calibrate` first)."""
        return np.cumsum(self.predict_proba(X), axis=1)[:, :-1]

    def predict_expected(self, X):
        """Expected label: ``sum_k P(y=k) c_k`` over the class values ``c_k`` when the classes
        are numeric, else over class positions 1..K (a margin model's needs :meth:`calibrate`)."""
        return self.predict_proba(X) @ self._expected_values()

    def _expected_values(self):
        """The value of each class in the expected label: the class values when they are
        numbers, else positions 1..K (float64, (K,))."""
        values = np.asarray(self.classes_)
        if values.dtype.kind not in "biuf":
            values = np.arange(1, len(values) + 1)
        return values.astype(np.float64)

    def _predicted_codes(self, X):
        """Class codes of the point predictions (the anchor of every set)."""
        return self._encode_y(self.predict(X), np.shape(X)[0])

    def _calibration_values(self, X):
        """What calibration reads off a fitted model: its class probabilities, (n, K)."""
        return self.predict_proba(X)

    def _calibration_proba(self, X, values, codes, cv, random_state):
        """Class probabilities of the calibration rows ``X`` from their :meth:`_calibration_values`
        (from the cross-fitted copies where ``cv``)."""
        return values

    def _distance_matrix(self, X):
        """``"distance"`` scores of every class, (n, K) (:func:`bayesord.uncertainty.distance_scores`)."""
        return distance_scores(self.decision_function(X), self.thresholds_)

    def _held_out_values(self, X, codes, cv, random_state, score="aps"):
        """(values, anchor) of the calibration rows from models that did not train on them:
        :meth:`_calibration_values`, or the score matrix for ``score="distance"`` (each
        model's own thresholds).

        Split (``cv == 0``): the fitted model itself.  Cross-fitting: one clone per fold,
        fitted on the other folds, predicts its held-out fold; a class's only row, which no
        fold holds out (:func:`fold_indices`), is scored by the fitted model.
        """
        def values_of(model, rows):
            return model._distance_matrix(rows) if score == "distance" else model._calibration_values(rows)

        if cv == 0:
            return values_of(self, X), self._predicted_codes(X)
        n = codes.shape[0]
        labels = np.asarray(self.classes_)[codes]
        folds = fold_indices(codes, cv, random_state)
        kept = never_held_out(folds, n)
        parts = [(kept, values_of(self, _rows(X, kept)), self._predicted_codes(_rows(X, kept)))
                 ] if kept.size else []
        X = self._copy_rows(X)

        def scored(model, test):
            return test, values_of(model, _rows(X, test)), model._predicted_codes(_rows(X, test))

        with warned_once(f"calibrate's {len(folds)} cross-fitted copies"):
            if self._batched_copies():
                weights = training_weights([train for train, _ in folds], n)
                with internal_fits():
                    models = clone(self).set_params(**self._copy_params())._fit_copies(X, labels, weights,
                                                                                       self.classes_)
                parts += [scored(model, test) for model, (_, test) in zip(models, folds)]
            else:
                workers = self._fold_workers(len(folds))

                def fold(j, train, test):
                    # One after another (a verbose model), each copy's progress lines name its fold.
                    label = (prefix(f"calibration fold {j + 1}/{len(folds)}") if workers == 1
                             else contextlib.nullcontext())
                    with internal_fits(), label:
                        if self._zero_weight_drops_row:
                            model = self._fit_copy(X, labels, training_weights([train], n)[0])
                        else:
                            model = self._fit_copy(_rows(X, train), labels[train], None)
                    return scored(model, test)

                parts += run_folds(fold, [(j, *f) for j, f in enumerate(folds)], workers)
        values = np.empty((n,) + parts[-1][1].shape[1:])
        anchor = np.empty(n, dtype=np.int64)
        for rows, part_values, part_anchor in parts:
            values[rows] = part_values
            anchor[rows] = part_anchor
        return values, anchor

    def _fold_workers(self, n_folds):
        """Threads for the cross-fitted copies: one per core, up to one per fold.

        Each copy is an independent fit (the same numbers in any order), and XLA runs a
        program on one core here, so on 2 cores five folds take about 0.65 of their time one
        after another (:func:`run_folds` fits the first alone).  One thread for a verbose
        model (its progress lines would interleave) and for the models whose fit records
        warnings itself (``_serial_fits``: the warnings filter is one per process)."""
        if getattr(self, "verbose", 0) or self._serial_fits:
            return 1
        return max(1, min(n_folds, os.cpu_count() or 1))

    def _copy_rows(self, X):
        """The rows as the cross-fitting copies take them: the columns this model was fitted
        on (a formula's coded columns, the command line's standardised ones)."""
        if getattr(self, "_spec", None) is not None:
            X = formula_rows(self._spec, X)
        if getattr(self, "input_center_", None) is not None:
            X = (np.asarray(X, dtype=np.float64) - self.input_center_) / self.input_scale_
        return X

    def _copy_params(self):
        """Parameters a cross-fitting copy changes from this estimator's (none by default)."""
        return {}

    def _batched_copies(self):
        """Whether the model fits its cross-fitting copies in one compiled program: then it
        has ``_fit_copies(X, labels, weights, classes)``, which returns clones of the
        estimator, one fitted per row of sample ``weights`` (m, n) (else the copies are
        fitted one by one, :meth:`_fit_copy`)."""
        return False

    def _fit_copy(self, X, labels, sample_weight):
        """A clone of this estimator, with :meth:`_copy_params`, fitted on rows of
        :meth:`_copy_rows`."""
        copy = clone(self).set_params(**self._copy_params())
        return copy.fit(X, labels, sample_weight=sample_weight, classes=self.classes_)

    def calibrate(self, X, y, *, cv=None, score="aps", random_state=None):
        """Calibrate the conformal prediction sets of :meth:`predict_set` on labelled rows.

        Two ways, both giving contiguous sets (see :mod:`bayesord.uncertainty`):

        * ``cv=None`` (split conformal): ``X, y`` are rows the model was **not** fitted on.
          Under exchangeability a set at miscoverage ``alpha`` then holds the true label
          with probability between ``1 - alpha`` and ``1 - alpha + 1/(n_cal + 1)``.
        * ``cv=k`` (cross-conformal): ``X, y`` are the training rows; ``k`` copies of the
          estimator, each fitted on all folds but one, score the fold they did not see
          (``k`` extra fits).  No row is held out from the final model; the guarantee is
          the weaker one of cross-conformal prediction (at least ``1 - 2 alpha`` in the
          worst case, close to ``1 - alpha`` in practice: ``docs/uncertainty.md``).

        Margin models (no probabilities of their own) fit their probability layer here as
        well (see ``predict_proba``), except with ``score="distance"``, which needs none.  A
        later ``fit`` or ``partial_fit`` discards the calibration.

        Args:
            X: (n_cal, d) features, as for ``predict``.
            y: (n_cal,) labels from ``classes_``.
            cv: None (held-out rows) or the number of folds: at most the row count of the
                rarest class (of those with two rows or more); fewer are made with a warning,
                and ``conformal_.cv`` says how many.
            score: ``"aps"`` (ordinal adaptive prediction sets, the default), ``"cdf"``
                (two-sided cumulative score) or, for a model that predicts by thresholds on
                one score (RedSVM, TransductiveOrdinalRegression, SwappedPairsSVM),
                ``"distance"`` (from the score to each class's threshold interval).
            random_state: seed (int) of the folds and of the probability layer's draws.

        Returns:
            self.

        Raises:
            TypeError: ``random_state`` is not an int or None.
            ValueError: fewer calibration rows than classes, a label not in ``classes_``,
                an unknown ``score`` or a bad ``cv``.
        """
        check_is_fitted(self, "classes_")
        if random_state is not None and (isinstance(random_state, bool)
                                         or not isinstance(random_state, (int, np.integer))):
            raise TypeError(f"random_state must be an int or None, got {type(random_state).__name__}")
        if score not in SCORES:
            raise ValueError(f"score must be one of {SCORES}, got {score!r}")
        if score == "distance" and not self._threshold_scores:
            raise ValueError(f"score='distance' needs a model that predicts by thresholds on one "
                             f"score (RedSVM, TransductiveOrdinalRegression, SwappedPairsSVM); "
                             f"{type(self).__name__} is not one: use 'aps' or 'cdf'")
        cv = check_cv(cv)
        codes = self._encode_y(y, np.shape(X)[0])
        K = len(self.classes_)
        if codes.shape[0] < K:
            raise ValueError(f"{codes.shape[0]} calibration rows for {K} classes: calibrate on at "
                             "least one row per class (a few hundred for alpha = 0.1 sets that are "
                             "not needlessly wide)")
        if cv:
            cv = self._folds_to_make(codes, cv)
        values, anchor = self._held_out_values(X, codes, cv, random_state, score)
        if score != "distance":
            values = conformity_scores(self._calibration_proba(X, values, codes, cv, random_state), anchor,
                                       score)
        true_scores = values[np.arange(codes.shape[0]), codes]
        self.conformal_ = ConformalCalibration(scores=true_scores, labels=codes, score=score, cv=cv,
                                               matrix=values, anchors=anchor)
        return self

    def _folds_to_make(self, codes, cv):
        """The fold count cross-fitting makes of ``cv`` asked for, with a warning when it is
        fewer (a fold holds a row of every class that has as many) or when a class has one
        row (no fold holds it out)."""
        made = fold_count(codes, cv)
        counts = np.bincount(codes, minlength=len(self.classes_))
        notes = []
        if made < cv:
            rarest = np.asarray(self.classes_)[np.flatnonzero(counts == made)[0]].tolist()
            notes.append(f"{made} folds, not {cv}: the folds are stratified, each holding out rows of every "
                         f"class, and class {rarest!r} has {made} rows")
        single = np.asarray(self.classes_)[counts == 1]
        if single.size:
            notes.append(f"the row of class(es) {single.tolist()} (one row each) is held out by no fold, so a "
                         "model that saw it scores it")
        if notes:
            warn_user(f"calibrate(cv={cv}): {'; '.join(notes)}")
        return made

    def predict_set(self, X, alpha=0.1, *, method="conformal", mondrian=False, risk="coverage"):
        """Contiguous prediction sets ``[lower, upper]`` of labels, one per row and alpha.

        Every set contains the point prediction (``predict``) and never skips a class.

        Args:
            X: (n, d) features.
            alpha: the miscoverage rate, a number in (0, 1) or a 1-D sequence of them.
            method: ``"conformal"`` (needs :meth:`calibrate`: coverage at least
                ``1 - alpha`` on exchangeable rows) or ``"credible"`` (the shortest
                interval holding ``1 - alpha`` of the predicted probability: the model's
                own claim, no calibration).
            mondrian: with ``"conformal"``, one threshold per class from the calibration
                rows of that class, so every class is covered at ``1 - alpha`` (wider
                sets; each class needs ``1/alpha - 1`` calibration rows).
            risk: with ``"conformal"``, what ``alpha`` bounds in expectation over new rows
                (conformal risk control, :func:`bayesord.uncertainty.risk_threshold`):
                ``"coverage"`` (the miss, ``P(y not in set) <= alpha``: ordinary conformal
                sets), ``"distance"`` (the distance from the label to the set over
                ``K - 1`` classes: a near miss costs little) or class weights, a dict of
                label -> weight (a class it does not name weighs 1, as in
                ``class_weight``) or a sequence in ``classes_`` order (a miss of class ``y``
                costs ``w_y``; ``alpha`` is then in those units).

        Returns:
            (lower, upper): labels from ``classes_``, each (n,) for a scalar ``alpha``,
            (n, m) for m alphas.

        Raises:
            ValueError: alpha outside (0, 1); ``"conformal"`` without :meth:`calibrate` or
                with too few calibration rows (of a class, with ``mondrian``) for alpha.
        """
        alphas = check_alpha(alpha)
        if method == "conformal":
            cal = getattr(self, "conformal_", None)
            if cal is None:
                check_is_fitted(self, "classes_")
                raise ValueError(f"{type(self).__name__} is not calibrated: call calibrate(X_cal, y_cal) "
                                 "on held-out rows (or calibrate(X_train, y_train, cv=5)) first, or use "
                                 "method='credible'")
        elif method != "credible":
            raise ValueError(f"method must be 'conformal' or 'credible', got {method!r}")
        anchor = self._predicted_codes(X)
        if method == "credible":
            lower, upper = credible_windows(self.predict_proba(X), anchor, alphas)
        else:
            coverage = isinstance(risk, str) and risk == "coverage"  # risk may be an array of weights
            if mondrian:
                if not coverage:
                    raise ValueError("mondrian sets control coverage per class; risk= goes with "
                                     "mondrian=False")
                q = np.empty((alphas.size, len(self.classes_)))
                for k, label in enumerate(self.classes_):
                    if not np.any(cal.labels == k):
                        raise ValueError(f"mondrian sets need calibration rows of every class; class "
                                         f"{label!r} has none")
                    q[:, k] = conformal_quantile(cal.scores[cal.labels == k], alphas)
            elif not coverage:
                q = risk_threshold(cal.matrix, cal.labels, cal.anchors, alphas, self._risk_loss(risk))
            else:
                q = conformal_quantile(cal.scores, alphas)
            scores = (self._distance_matrix(X) if cal.score == "distance"
                      else conformity_scores(self.predict_proba(X), anchor, cal.score))
            lower, upper = sets_from_scores(scores, q, anchor)
        lower, upper = self._decode(lower), self._decode(upper)
        if np.ndim(alpha) == 0:
            return lower[:, 0], upper[:, 0]
        return lower, upper

    def _risk_loss(self, risk):
        """``risk`` of :meth:`predict_set` as a loss of :func:`bayesord.uncertainty.set_losses`."""
        if isinstance(risk, str):
            if risk not in ("coverage", "distance"):
                raise ValueError(f"risk must be 'coverage', 'distance' or class weights, got {risk!r}")
            return risk
        if isinstance(risk, dict):
            unknown = [label for label in risk if label not in list(self.classes_)]
            if unknown:
                raise ValueError(f"risk weights name labels not in classes_: {unknown}")
            return np.array([float(risk.get(label, 1.0)) for label in self.classes_])
        return np.asarray(risk, dtype=np.float64)

    # ------------------------------------------------------------ persistence
    def _uncertainty_state(self):
        """(arrays, meta) of the calibration, for the model file."""
        cal = getattr(self, "conformal_", None)
        if cal is None:
            return {}, {}
        return ({"conformal.scores": cal.scores, "conformal.labels": cal.labels, "conformal.matrix": cal.matrix,
                 "conformal.anchors": cal.anchors},
                {"conformal": {"score": cal.score, "cv": cal.cv}})

    def _restore_uncertainty(self, arrays, meta):
        if "conformal" not in meta:
            return
        scores, labels = arrays["conformal.scores"], arrays["conformal.labels"]
        matrix, anchors = arrays["conformal.matrix"], arrays["conformal.anchors"]
        if scores.ndim != 1 or labels.shape != scores.shape or labels.dtype.kind not in "iu":
            raise ValueError("conformal.scores and conformal.labels must be two 1-D arrays of one "
                             "length (labels as class codes)")
        if matrix.shape != (scores.size, len(self.classes_)) or anchors.shape != scores.shape:
            raise ValueError("conformal.matrix must be (n_cal, K) and conformal.anchors (n_cal,)")
        if labels.size and (labels.min() < 0 or labels.max() >= len(self.classes_)):
            raise ValueError("conformal.labels holds a class code outside the model's classes")
        if meta["conformal"]["score"] not in SCORES:
            raise ValueError(f"conformal score {meta['conformal']['score']!r} is not one of {SCORES}")
        self.conformal_ = ConformalCalibration(scores=scores, labels=labels.astype(np.int64),
                                               score=meta["conformal"]["score"],
                                               cv=int(meta["conformal"]["cv"]), matrix=matrix,
                                               anchors=anchors.astype(np.int64))


def _rows(X, idx):
    return X.iloc[idx] if hasattr(X, "iloc") else X[idx]
