"""``OrdinalMixed``: the random-intercept ordinal model (R's ``clmm``) as an estimator, with formulas."""

from __future__ import annotations

import dataclasses

import jax
import numpy as np
from sklearn.base import clone

from .._compile_cache import program_for_rows
from .._mixed import (
    MixedConfig,
    MixedResult,
    fit_mixed,
    marginal_effects_mixed,
    predict_mixed,
    sample_class_probs_mixed,
)
from .._shapes import bucket_rows, pad_rows
from .._status import check_status
from .._validation import float_dtype
from ._base import (
    BAYES_ONE_CLASS_HINT,
    OrdinalEstimator,
    SavableMixin,
    bands_from_draws,
    binary_columns,
    check_positive_ints,
    check_level,
    class_from_proba,
    draws_key,
    fresh_fit,
    marginal_effects_table,
    posterior_table,
    solver_tol,
    threshold_names,
)
from ._formula import check_formula_data, design_matrix, split_formula
from ._uncertainty import UncertaintyMixin

__all__ = ["OrdinalMixed"]


def _fit_program(n_rows):
    return program_for_rows(fit_mixed, n_rows, ("config",))


def _labels_of_groups(groups, n, what="groups"):
    """A 1-D object array of group labels, checked for length and missing values."""
    arr = np.asarray(getattr(groups, "to_numpy", lambda: groups)(), dtype=object)
    if arr.ndim != 1:
        raise ValueError(f"{what} must be 1-D (one label per row), got shape {arr.shape}")
    if arr.shape[0] != n:
        raise ValueError(f"X and {what} have different lengths: {n} rows in X, {arr.shape[0]} in {what}")
    import pandas as pd

    missing = np.flatnonzero(pd.isna(arr))
    if missing.size:
        raise ValueError(f"{what} has missing values at rows {missing[:5].tolist()}"
                         f"{' ...' if missing.size > 5 else ''}: every row needs a group")
    return arr


class _GroupedRows:
    """Rows of ``X`` with their group labels (None: a formula model's group column), carried
    as one object through :class:`UncertaintyMixin`'s calibration and prediction sets."""

    def __init__(self, X, groups):
        self.X = X
        self.groups = None if groups is None else _labels_of_groups(groups, np.shape(X)[0])

    @property
    def shape(self):
        return np.shape(self.X)

    def __getitem__(self, rows):
        X = self.X.iloc[rows] if hasattr(self.X, "iloc") else self.X[rows]
        return _GroupedRows(X, None if self.groups is None else self.groups[rows])


class OrdinalMixed(UncertaintyMixin, SavableMixin, OrdinalEstimator):
    """Ordinal regression with a random intercept per group (a cumulative link mixed model).

    ``P(y <= k | group j) = F(b_k - x^T beta - u_j)``, ``u_j ~ N(0, tau^2)``, with the
    group effects integrated out by the Laplace approximation and ``(beta, b, tau)``
    maximising it: the method and the estimates of R's ``ordinal::clmm``.  The posterior of
    ``(beta, b, tau)`` is the Laplace Gaussian at that optimum, each group's effect has its
    conditional mode and variance, and every probability integrates both (see
    :mod:`bayesord._mixed`).  Rows of a group the fit has not seen are predicted for a new
    group, integrated over ``N(0, tau^2)``.

    Fit with arrays (``fit(X, y, groups)``) or with a formula
    (:meth:`from_formula`, ``"rating ~ temp + contact + (1 | judge)"``).  One grouping factor
    with a random intercept is supported; random slopes and several factors are not yet.
    Conformal prediction sets (:meth:`calibrate`, :meth:`predict_set`) take each row's group
    as the predictions do.
    A group with one row is allowed: its effect is then mostly the prior's (shrunk to 0).

    Args:
        link: "probit" (default), "logit", "cloglog", "loglog" or "cauchit".
        tol: relative tolerance of the Newton solves (default 1e-10 in float64, 1e-5 in
            float32).
        max_iter: cap on Newton iterations over ``(beta, b, tau)``.
        max_inner: cap on Newton iterations of each conditional-mode solve.
        classes: the labels in increasing order (required for string labels).
        n_draws: posterior draws used for probability bands.
        random_state: seed (int) for the posterior draws.
        class_weight: None, ``"balanced"`` (every class carries the same total weight:
            class k's rows are weighted by ``W / (K W_k)``, ``W_k`` its total sample
            weight), or a dict of label -> weight; multiplies ``sample_weight``.

    Attributes:
        classes_: labels in increasing order.
        groups_: the group labels seen in fitting, in the order of ``group_effects_``.
        coef_: fixed effects, shape (d,).
        thresholds_: thresholds at ``x = 0``, shape (K-1,).
        group_sd_: standard deviation of the group effects.
        cov_: Laplace covariance of ``(coef_, thresholds_, group_sd_)``, shape (d+K, d+K).
        group_effects_: conditional modes of the group effects, shape (q,).
        loglik_: the Laplace approximation of the marginal log-likelihood (``clmm``'s
            ``logLik``).
        n_iter_, converged_: Newton iterations and whether every solve met its tolerance.
        formula_: the formula, for a model made by :meth:`from_formula` (else None).
        result_: the functional :class:`bayesord._mixed.MixedResult`.

    Example:
        >>> import numpy as np
        >>> rng = np.random.default_rng(0)
        >>> g = np.repeat(np.arange(20), 10)
        >>> x = rng.normal(size=(200, 1))
        >>> f = x[:, 0] + rng.normal(size=20)[g] + rng.normal(size=200)
        >>> y = np.digitize(f, [-1.0, 1.0])
        >>> model = OrdinalMixed().fit(x, y, g)
        >>> model.predict_proba(x[:2], g[:2]).shape
        (2, 3)
    """

    _format = "bayesord.OrdinalMixed/1"
    _formula_attrs = ("formula_", "group_name_")
    _scale_sensitive = False  # the fit standardises the columns itself
    _one_class_hint = BAYES_ONE_CLASS_HINT
    _zero_weight_drops_row = True
    _min_features = 0  # "rating ~ (1 | judge)": thresholds and group effects only

    def __init__(self, link="probit", tol=None, max_iter=100, max_inner=50, classes=None,
                 n_draws=200, random_state=None, class_weight=None):
        self.link = link
        self.tol = tol
        self.max_iter = max_iter
        self.max_inner = max_inner
        self.classes = classes
        self.n_draws = n_draws
        self.random_state = random_state
        self.class_weight = class_weight

    # ------------------------------------------------------------------ fitting
    @classmethod
    def from_formula(cls, formula, data, sample_weight=None, **params):
        """Fit ``formula`` to the DataFrame ``data``; returns the fitted estimator.

        ``"response ~ terms + (1 | group)"``: the fixed-effect terms in formulaic's (R-like)
        syntax, text columns coded as treatment contrasts against their first level and
        labelled ``name[T.level]``; the intercept is left to the thresholds.  The response
        may be numbers or an ordered pandas Categorical (text labels need ``classes=``).
        Predictions then take DataFrames with the same columns (the group column among them).

        Raises:
            ValueError: a malformed formula, a column the data lack, or bad data.
        """
        response, fixed, group = split_formula(formula)
        check_formula_data(formula, data, response, group)
        X, spec = design_matrix(fixed, data)
        model = cls(**params)
        model.fit(X, data[response], data[group], sample_weight=sample_weight)
        model.formula_ = formula
        model.group_name_ = group
        model._spec = spec
        return model

    def _config(self, n_classes, n_groups):
        check_positive_ints(self, "max_iter", "max_inner", "n_draws")
        return MixedConfig(n_classes=n_classes, n_groups=n_groups, link=self.link,
                           max_newton=int(self.max_iter), max_inner=int(self.max_inner))

    @fresh_fit
    def fit(self, X, y, groups, sample_weight=None, classes=None):
        """Fit the model.

        Args:
            X: (n, d) fixed-effect columns (numbers; code text columns first, or use
                :meth:`from_formula`).  No intercept column: the thresholds hold it.
            y: (n,) ordered labels.
            groups: (n,) the group of each row (any labels: numbers or text).
            sample_weight: optional (n,) non-negative weights.
            classes: the labels in increasing order (see the constructor).

        Raises:
            ValueError: bad input, including a grouping factor with fewer than two levels
                or with missing values.
            FloatingPointError: the solver hit a non-finite value, or the Hessian of the
                Laplace likelihood is not negative definite at the end.

        Warns:
            ConvergenceWarning: an iteration cap was reached.
        """
        X, codes, sw = self._validate_fit(X, y, sample_weight, classes)
        labels = _labels_of_groups(groups, X.shape[0])
        try:
            levels, g = np.unique(labels, return_inverse=True)
        except TypeError:
            raise TypeError("groups mixes labels that cannot be ordered (e.g. numbers and text): "
                            "give one kind") from None
        used = np.unique(g[sw > 0])
        if used.size < 2:
            raise ValueError(f"groups has {used.size} level with positive weight; a group effect needs "
                             "at least two groups (fit OrdinalProbit for one)")
        dtype = float_dtype()
        config = self._config(len(self.classes_), bucket_rows(len(levels)))
        n = X.shape[0]
        X, codes, g, sw = pad_rows(bucket_rows(n), X.astype(dtype), codes, g.astype(np.int32),
                                   sw.astype(dtype))
        res = _fit_program(X.shape[0])(X, codes, g, sw, solver_tol(self.tol, dtype), config=config)
        check_status(res.status, "OrdinalMixed.fit")
        return self._finish_fit(jax.tree_util.tree_map(np.asarray, res), levels, binary_columns(X[:n]))

    def _finish_fit(self, res, levels, binary):
        """Set the fitted attributes from a result whose group arrays are padded past
        ``len(levels)`` (the compiled program's bucket of groups)."""
        q = len(levels)
        res = dataclasses.replace(res, effects=res.effects[:q], effects_cond_var=res.effects_cond_var[:q],
                                  effects_var=res.effects_var[:q], effects_cross=res.effects_cross[:q])
        self.groups_ = np.asarray(levels.tolist())  # numbers or text, as an ordinary dtype
        self.binary_columns_ = binary
        self._set_result(res)
        self.formula_ = None
        self.group_name_ = None
        self._spec = None
        return self

    def _set_result(self, res):
        self.result_ = res
        d = res.coef.shape[0]
        self.coef_ = res.coef
        self.thresholds_ = res.thresholds
        self.group_sd_ = float(res.group_sd)
        self.cov_ = res.cov
        self.group_effects_ = res.effects
        self.loglik_ = float(res.loglik)
        self.n_iter_ = int(res.n_iter)
        self.converged_ = bool(res.converged)
        self.coef_cov_ = res.cov[:d, :d]
        self.thresholds_cov_ = res.cov[d:-1, d:-1]

    # --------------------------------------------------------------- prediction
    def _group_labels(self, X, groups):
        """``groups``, or for a formula model given None, the formula's group column of ``X``."""
        if isinstance(X, _GroupedRows):
            X, groups = X.X, X.groups if groups is None else groups
        if groups is None:
            if getattr(self, "_spec", None) is None:
                raise TypeError("predictions need each row's group: pass groups= (a label the fit has "
                                "not seen predicts for a new group)")
            if hasattr(X, "columns"):  # anything else is refused by _validate_predict
                if self.group_name_ not in X.columns:
                    raise ValueError(f"the data have no column {self.group_name_!r} (the formula's "
                                     "group); add it, or pass groups=")
                groups = X[self.group_name_]
        return X, groups

    def _inputs(self, X, groups):
        """(X, group codes) for prediction: codes -1 for groups not seen in fitting."""
        X, groups = self._group_labels(X, groups)
        X = self._validate_predict(X)
        labels = _labels_of_groups(groups, X.shape[0])
        index = {level: j for j, level in enumerate(self.groups_.tolist())}
        codes = np.fromiter((index.get(label, -1) for label in labels.tolist()), np.int32, len(labels))
        return X.astype(float_dtype()), codes

    def _result(self):
        return jax.tree_util.tree_map(lambda a: np.asarray(a, float_dtype()), self.result_)

    def _predict_all(self, X, groups):
        X, codes = self._inputs(X, groups)
        n = X.shape[0]
        X, codes = pad_rows(bucket_rows(n), X, codes)
        pred = predict_mixed(self._result(), X, codes)
        return jax.tree_util.tree_map(lambda a: np.asarray(a[:n], dtype=np.float64), pred)

    def predict_proba(self, X, groups=None):
        """Class probabilities, shape (n, K): each row's group effect (its posterior for a
        group seen in fitting, ``N(0, tau^2)`` for any other label) and the posterior of
        ``(beta, b, tau)`` integrated (exactly for the probit, the probit approximation for
        the logit, by quadrature for the other links)."""
        return self._predict_all(X, groups).proba

    def predict_cumproba(self, X, groups=None):
        """Cumulative probabilities ``P(y <= classes_[k])`` for k < K-1, shape (n, K-1)."""
        return self._predict_all(X, groups).cum_proba

    def predict(self, X, groups=None, rule="mode"):
        """Predicted labels: the most probable class (``rule="mode"``) or the median class."""
        return self._decode(class_from_proba(self.predict_proba(X, groups), rule))

    def predict_proba_interval(self, X, groups=None, level=0.95):
        """Central credible band and posterior sd of each class probability, each (n, K).

        From ``n_draws`` draws of ``(beta, b, tau)`` and of each row's group effect given
        them (:func:`bayesord._mixed.sample_class_probs_mixed`).
        """
        check_level(level)
        X, codes = self._inputs(X, groups)
        n = X.shape[0]
        X, codes = pad_rows(bucket_rows(n), X, codes)
        draws = sample_class_probs_mixed(self._result(), X, codes, draws_key(self.random_state),
                                         n_draws=int(self.n_draws))
        return bands_from_draws(draws[:, :n], level)

    def predict_expected(self, X, groups=None):
        """Expected label ``sum_k P(y=k) c_k`` (class values, or positions 1..K for text labels)."""
        return super().predict_expected(_GroupedRows(X, groups))

    # ------------------------------------------------------------ prediction sets
    def calibrate(self, X, y, groups=None, *, cv=None, score="aps", random_state=None):
        """Calibrate the conformal sets of :meth:`predict_set` on labelled rows and their groups.

        As :meth:`bayesord.OrdinalProbit.calibrate` (split conformal with ``cv=None`` on rows
        the model was not fitted on; cross-conformal over ``cv`` folds of the training rows),
        with each row's group as for :meth:`predict_proba` (a formula model reads its group
        column).  The folds split rows, not groups: a held-out row's group keeps the effect
        estimated from its other rows, as a new row of a known group would.

        Returns:
            self.
        """
        return super().calibrate(_GroupedRows(X, groups), y, cv=cv, score=score, random_state=random_state)

    def predict_set(self, X, alpha=0.1, groups=None, *, method="conformal", mondrian=False):
        """Contiguous prediction sets ``[lower, upper]`` of labels for rows of known or new
        groups; see :meth:`bayesord.OrdinalProbit.predict_set`."""
        return super().predict_set(_GroupedRows(X, groups), alpha, method=method, mondrian=mondrian)

    def _copy_rows(self, X):
        X, groups = self._group_labels(X, None)
        return _GroupedRows(super()._copy_rows(X), groups)

    def _fit_copy(self, X, labels, sample_weight):
        return clone(self).fit(X.X, labels, X.groups, sample_weight=sample_weight, classes=self.classes_)

    def score(self, X, y, groups=None, sample_weight=None):
        """Negative mean absolute error in class positions (higher is better)."""
        codes = self._encode_y(y, np.shape(X)[0])
        pred = self._encode_y(self.predict(X, groups), len(codes))
        return -float(np.average(np.abs(pred - codes), weights=sample_weight))

    # ------------------------------------------------------------------ summary
    def _coef_names(self):
        names = getattr(self, "feature_names_in_", None)
        return list(names) if names is not None else [f"x{j}" for j in range(len(self.coef_))]

    def summary(self, level=0.95):
        """Estimates, sds, central intervals, z and two-sided p-values (as ``clmm`` prints them).

        Rows: the fixed effects, the thresholds, and the group sd.  The sd's interval is
        normal on the log scale (so it stays positive), and its z and p are left empty: a
        variance is tested against 0 on the boundary of its range, where the normal reference
        does not hold; compare log-likelihoods with and without the group instead.
        """
        from scipy.stats import norm
        from sklearn.utils.validation import check_is_fitted

        check_is_fitted(self, "coef_")
        group = self.group_name_ or "group"
        names = self._coef_names() + threshold_names(self.classes_) + [f"sd({group})"]
        mean = np.concatenate([self.coef_, self.thresholds_, [self.group_sd_]])
        sd = np.sqrt(np.diag(self.cov_))
        z = mean / sd
        z[-1] = np.nan
        table = posterior_table(names, mean, sd, level, z=z, p=2 * norm.sf(np.abs(z)))
        # The sd's interval on the log scale (delta method there), so it stays positive.
        half = norm.ppf(0.5 + level / 2) * sd[-1] / mean[-1]
        table.iloc[-1, 2:4] = mean[-1] * np.exp([-half, half])
        return table

    def group_effects(self, level=0.95):
        """Each group's effect: conditional mode, posterior sd and central interval.

        The table behind a caterpillar plot.  ``cond_sd`` is the sd given the estimated
        ``(beta, b, tau)`` (``clmm``'s ``condVar``); ``sd`` adds their uncertainty.
        """
        from sklearn.utils.validation import check_is_fitted

        check_is_fitted(self, "group_effects_")
        res = self.result_
        return posterior_table(list(self.groups_), res.effects, np.sqrt(res.effects_var), level,
                               cond_sd=np.sqrt(res.effects_cond_var))

    def marginal_effects(self, X, groups=None, level=0.95):
        """Average marginal effects of each column on every class probability and on the
        expected class, with delta-method sds and central intervals.

        A column that was 0/1 in the training data (a dummy, e.g. ``temp[T.warm]``) gets the
        average change from 0 to 1; any other column the average derivative.  Pass the data
        to average over them, or one row to get the effects at those values.  Probabilities
        are taken at the estimate, each row's group effect at its conditional mode (0 for a
        group the fit has not seen: the effect in a typical group); the expected class
        numbers the classes 0..K-1.  See :func:`bayesord._mixed.marginal_effects_mixed`.

        Returns:
            pandas DataFrame indexed by (term, outcome): outcome is ``P(y=<class>)`` or
            ``E[class]``.
        """
        X, codes = self._inputs(X, groups)
        if X.shape[1] == 0:
            raise ValueError("the model has no columns, so no marginal effects")
        effect, sd = program_for_rows(marginal_effects_mixed, X.shape[0])(self._result(), X, codes,
                                                                        self.binary_columns_)
        return marginal_effects_table(effect, sd, self._coef_names(), self.classes_, self.binary_columns_, level)

    # ------------------------------------------------------------ persistence
    def _saved_state(self):
        fields = {k: getattr(self.result_, k) for k in _RESULT_ARRAYS}
        arrays = {f"result.{k}": np.asarray(v) for k, v in fields.items()}
        arrays["groups_"] = np.asarray(self.groups_)
        arrays["binary_columns_"] = np.asarray(self.binary_columns_)
        if arrays["groups_"].dtype.kind not in "iufUb":
            raise ValueError(f"group labels of dtype {arrays['groups_'].dtype} cannot be saved: use "
                             "numbers or text")
        config = self.result_.config
        return arrays, {"config": {"n_groups": config.n_groups, "max_newton": config.max_newton,
                                   "max_inner": config.max_inner}}

    def _restore(self, arrays, meta):
        d, k = int(self.n_features_in_), len(self.classes_)
        q = len(arrays["groups_"])
        m = d + k
        config = MixedConfig(n_classes=k, link=self.link, **meta["config"])
        res = MixedResult(config=config, **{name: arrays[f"result.{name}"] for name in _RESULT_ARRAYS})
        self._check_shapes(("result.coef", res.coef, (d,)), ("result.thresholds", res.thresholds, (k - 1,)),
                           ("result.cov", res.cov, (m, m)), ("result.eta", res.eta, (m,)),
                           ("result.eta_cov", res.eta_cov, (m, m)), ("result.effects", res.effects, (q,)),
                           ("result.effects_var", res.effects_var, (q,)),
                           ("result.effects_cross", res.effects_cross, (q, m)))
        self.groups_ = arrays["groups_"]
        self.binary_columns_ = np.asarray(arrays["binary_columns_"], bool)
        self._check_shapes(("binary_columns_", self.binary_columns_, (d,)))
        self._set_result(res)
        self.formula_ = None
        self.group_name_ = None
        self._spec = None


_RESULT_ARRAYS = ("coef", "thresholds", "group_sd", "cov", "center", "scale", "eta", "eta_cov",
                  "effects", "effects_cond_var", "effects_var", "effects_cross", "loglik", "n_iter",
                  "converged", "status")

