"""``OrdinalMixed``: the ordinal mixed model (R's ``clmm``) as an estimator, with formulas."""

from __future__ import annotations

import dataclasses

import jax
import numpy as np
from sklearn.base import clone

from .._compile_cache import program_for_rows
from .._mixed import (
    MixedConfig,
    MixedResult,
    effects_on_user_scale,
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
from ._formula import check_formula_data, design_matrix, slope_columns, split_formula
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
    """Ordinal regression with random intercepts (and slopes) per group (a cumulative link mixed model).

    ``P(y <= k | group j) = F(b_k - x^T beta - r^T u_j)``, ``u_j ~ N(0, Sigma)``, with
    ``r = 1`` for a random intercept, or ``r = (1, x_s)`` when the columns ``x_s`` have random
    slopes; the group effects are integrated out by the Laplace approximation and
    ``(beta, b, Sigma)`` maximise it: the method and the estimates of R's ``ordinal::clmm``.
    The posterior of ``(beta, b, Sigma)`` is the Laplace Gaussian at that optimum, each group's
    effect has its conditional mode and covariance, and every probability integrates both
    (see :mod:`bayesord._mixed`).  Rows of a group the fit has not seen are predicted for a
    new group, integrated over ``N(0, Sigma)``.

    Fit with arrays (``fit(X, y, groups)``, slopes by ``random_slopes``) or with a formula
    (:meth:`from_formula`, ``"rating ~ temp + contact + (1 | judge)"`` or ``(1 + temp |
    judge)``).  One grouping factor is supported; several (crossed or nested) are not yet.
    Conformal prediction sets (:meth:`calibrate`, :meth:`predict_set`) take each row's group
    as the predictions do.
    A group with one row is allowed: its effect is then mostly the prior's (shrunk to 0).

    Args:
        link: "probit" (default), "logit", "cloglog", "loglog" or "cauchit".
        random_slopes: the columns whose slopes vary by group, besides the random
            intercept: indices, or names of a DataFrame's columns (default: none).
            :meth:`from_formula` sets it from ``(1 + x | group)``.
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
        group_terms_: names of the group effects: ``["(Intercept)"]`` and the slope columns.
        group_cov_: covariance ``Sigma`` of the group effects (the intercept at ``x = 0``),
            shape (p, p) for p group terms.
        group_sd_: standard deviation of the random intercept (a float) for a random-intercept
            model; of every group term, shape (p,), with random slopes.
        cov_: Laplace covariance of ``(coef_, thresholds_, sds, correlations)``: the rows of
            :meth:`summary`.
        group_effects_: conditional modes of the group effects on the user's scale (as
            ``clmm``'s ``ranef``), shape (q,), or (q, p) with random slopes.
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

    _format = "bayesord.OrdinalMixed/2"
    _formula_attrs = ("formula_", "group_name_")
    _scale_sensitive = False  # the fit standardises the columns itself
    _one_class_hint = BAYES_ONE_CLASS_HINT
    _zero_weight_drops_row = True
    _min_features = 0  # "rating ~ (1 | judge)": thresholds and group effects only

    def __init__(self, link="probit", random_slopes=(), tol=None, max_iter=100, max_inner=50, classes=None,
                 n_draws=200, random_state=None, class_weight=None):
        self.link = link
        self.random_slopes = random_slopes
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
        labelled ``name[T.level]``; the intercept is left to the thresholds.
        ``(1 + x | group)`` adds random slopes for the columns the term ``x`` codes, which
        must also be fixed terms (as in ``rating ~ temp + (1 + temp | judge)``).  The response
        may be numbers or an ordered pandas Categorical (text labels need ``classes=``).
        Predictions then take DataFrames with the same columns (the group column among them).

        Raises:
            ValueError: a malformed formula, a column the data lack, or bad data.
        """
        response, fixed, group, slope_terms = split_formula(formula)
        check_formula_data(formula, data, response, group)
        X, spec = design_matrix(fixed, data)
        if "random_slopes" in params:
            raise TypeError("from_formula takes the random slopes from the formula's '(1 + x | group)', "
                            "not from random_slopes=")
        model = cls(random_slopes=slope_columns(formula, slope_terms, data, list(X.columns)), **params)
        model.fit(X, data[response], data[group], sample_weight=sample_weight)
        model.formula_ = formula
        model.group_name_ = group
        model._spec = spec
        return model

    def _config(self, n_classes, n_groups, d, names):
        """The static configuration for ``d`` columns named ``names`` (None: unnamed)."""
        check_positive_ints(self, "max_iter", "max_inner", "n_draws")
        return MixedConfig(n_classes=n_classes, n_groups=n_groups, link=self.link,
                           slopes=self._slope_indices(d, names), max_newton=int(self.max_iter),
                           max_inner=int(self.max_inner))

    def _slope_indices(self, d, names):
        """``random_slopes`` as indices of the ``d`` columns named ``names``."""
        slopes = self.random_slopes
        if slopes is None or isinstance(slopes, (str, int, np.integer)):
            raise TypeError(f"random_slopes must be a list of columns (indices or names), got {slopes!r}")
        out = []
        for col in slopes:
            if isinstance(col, (int, np.integer)) and not isinstance(col, bool):
                if not 0 <= col < d:
                    raise ValueError(f"random_slopes names column {col}, but X has {d} columns")
                out.append(int(col))
            elif isinstance(col, str):
                if names is None:
                    raise ValueError(f"random_slopes names column {col!r}, but X has no column names "
                                     "(pass a DataFrame, or give indices)")
                if col not in list(names):
                    raise ValueError(f"random_slopes names column {col!r}, which X does not have "
                                     f"(columns: {list(names)})")
                out.append(list(names).index(col))
            else:
                raise TypeError(f"random_slopes holds {col!r}: give column indices or names")
        if len(set(out)) != len(out):
            raise ValueError(f"random_slopes names a column twice: {list(slopes)!r}")
        return tuple(out)

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
        config = self._config(len(self.classes_), bucket_rows(len(levels)), X.shape[1],
                              getattr(self, "feature_names_in_", None))
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
        res = dataclasses.replace(res, effects=res.effects[:q], effects_cond_cov=res.effects_cond_cov[:q],
                                  effects_cov=res.effects_cov[:q], effects_cross=res.effects_cross[:q])
        self.groups_ = np.asarray(levels.tolist())  # numbers or text, as an ordinary dtype
        self.binary_columns_ = binary
        self._set_result(res)
        self.formula_ = None
        self.group_name_ = None
        self._spec = None
        return self

    def _set_result(self, res):
        self.result_ = res
        d, k1, p = res.coef.shape[0], res.thresholds.shape[0], res.config.n_effects
        self.coef_ = res.coef
        names = self._coef_names()
        self.group_terms_ = ["(Intercept)"] + [names[j] for j in res.config.slopes]
        self.thresholds_ = res.thresholds
        self.group_cov_ = res.group_cov
        self.group_sd_ = float(res.group_sd[0]) if p == 1 else res.group_sd
        self.cov_ = res.cov
        effects = np.asarray(effects_on_user_scale(res)[0])
        self.group_effects_ = effects[:, 0] if p == 1 else effects
        self.loglik_ = float(res.loglik)
        self.n_iter_ = int(res.n_iter)
        self.converged_ = bool(res.converged)
        self.coef_cov_ = res.cov[:d, :d]
        self.thresholds_cov_ = res.cov[d:d + k1, d:d + k1]

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

        Rows: the fixed effects, the thresholds, the sd of each group term (``sd(judge)``, or
        ``sd(judge: temp[T.warm])`` for a slope) and, with random slopes, their correlations
        (``corr(judge: (Intercept), temp[T.warm])``).  An sd's interval is normal on the log
        scale (so it stays positive) and a correlation's on Fisher's ``atanh`` scale (so it
        stays in (-1, 1)); their z and p are left empty: a variance is tested against 0 on
        the boundary of its range, where the normal reference does not hold; compare
        log-likelihoods with and without the term instead.
        """
        from scipy.stats import norm
        from sklearn.utils.validation import check_is_fitted

        check_is_fitted(self, "coef_")
        group = self.group_name_ or "group"
        terms = self.group_terms_
        p = len(terms)
        sd_names = [f"sd({group})"] if p == 1 else [f"sd({group}: {t})" for t in terms]
        rows, cols = np.tril_indices(p, -1)
        corr_names = [f"corr({group}: {terms[j]}, {terms[i]})" for i, j in zip(rows, cols)]
        res = self.result_
        sd_group = np.asarray(res.group_sd)
        corr = np.asarray(res.group_cov)[rows, cols] / (sd_group[rows] * sd_group[cols])
        names = self._coef_names() + threshold_names(self.classes_) + sd_names + corr_names
        mean = np.concatenate([self.coef_, self.thresholds_, sd_group, corr])
        sd = np.sqrt(np.diag(self.cov_))
        n_fixed = len(mean) - p - len(corr)
        z = mean / sd
        z[n_fixed:] = np.nan
        table = posterior_table(names, mean, sd, level, z=z, p=2 * norm.sf(np.abs(z)))
        half = norm.ppf(0.5 + level / 2) * sd
        # Each sd's interval by the delta method on the log scale, each correlation's on atanh.
        sds = slice(n_fixed, n_fixed + p)
        table.iloc[sds, 2] = mean[sds] * np.exp(-half[sds] / mean[sds])
        table.iloc[sds, 3] = mean[sds] * np.exp(half[sds] / mean[sds])
        cs = slice(n_fixed + p, None)
        table.iloc[cs, 2] = np.tanh(np.arctanh(mean[cs]) - half[cs] / (1 - mean[cs] ** 2))
        table.iloc[cs, 3] = np.tanh(np.arctanh(mean[cs]) + half[cs] / (1 - mean[cs] ** 2))
        return table

    def group_effects(self, level=0.95):
        """Each group's effect: conditional mode, posterior sd and central interval.

        The table behind a caterpillar plot, on the user's scale (as ``clmm``'s ``ranef``).
        ``cond_sd`` is the sd given the estimated ``(beta, b, Sigma)`` (``clmm``'s
        ``condVar``); ``sd`` adds their uncertainty.  Indexed by group, or by (group, term)
        with random slopes.
        """
        import pandas as pd
        from sklearn.utils.validation import check_is_fitted

        check_is_fitted(self, "group_effects_")
        res = self.result_
        mode, cov = (np.asarray(a) for a in effects_on_user_scale(res))
        T_cond = effects_on_user_scale(dataclasses.replace(res, effects_cov=res.effects_cond_cov))[1]
        sd = np.sqrt(np.diagonal(cov, axis1=1, axis2=2)).ravel()
        cond_sd = np.sqrt(np.diagonal(np.asarray(T_cond), axis1=1, axis2=2)).ravel()
        if len(self.group_terms_) == 1:
            index = list(self.groups_)
        else:
            index = pd.MultiIndex.from_product([list(self.groups_), self.group_terms_], names=["group", "term"])
        return posterior_table(index, mode.ravel(), sd, level, cond_sd=cond_sd)

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
        return arrays, {"config": {"n_groups": config.n_groups, "slopes": list(config.slopes),
                                   "max_newton": config.max_newton, "max_inner": config.max_inner}}

    def _restore(self, arrays, meta):
        d, k = int(self.n_features_in_), len(self.classes_)
        q = len(arrays["groups_"])
        config = MixedConfig(n_classes=k, link=self.link, **meta["config"])
        p = config.n_effects
        m, n_nat = d + k - 1 + p * (p + 1) // 2, d + k - 1 + p + p * (p - 1) // 2
        res = MixedResult(config=config, **{name: arrays[f"result.{name}"] for name in _RESULT_ARRAYS})
        self._check_shapes(("result.coef", res.coef, (d,)), ("result.thresholds", res.thresholds, (k - 1,)),
                           ("result.group_cov", res.group_cov, (p, p)), ("result.group_sd", res.group_sd, (p,)),
                           ("result.cov", res.cov, (n_nat, n_nat)), ("result.eta", res.eta, (m,)),
                           ("result.eta_cov", res.eta_cov, (m, m)), ("result.effects", res.effects, (q, p)),
                           ("result.effects_cond_cov", res.effects_cond_cov, (q, p, p)),
                           ("result.effects_cov", res.effects_cov, (q, p, p)),
                           ("result.effects_cross", res.effects_cross, (q, p, m)))
        self.groups_ = arrays["groups_"]
        self.binary_columns_ = np.asarray(arrays["binary_columns_"], bool)
        self._check_shapes(("binary_columns_", self.binary_columns_, (d,)))
        self._set_result(res)
        self.formula_ = None
        self.group_name_ = None
        self._spec = None


_RESULT_ARRAYS = ("coef", "thresholds", "group_cov", "group_sd", "cov", "center", "scale", "eta", "eta_cov",
                  "effects", "effects_cond_cov", "effects_cov", "effects_cross", "loglik", "n_iter",
                  "converged", "status")

