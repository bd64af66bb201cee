"""``OrdinalMixed``: the ordinal mixed model (R's ``clmm``) as an estimator, with formulas."""

from __future__ import annotations

import dataclasses
from functools import lru_cache

import jax
import jax.numpy as jnp
import numpy as np

from .._columns import host_offsets, offset_rows, restore_offsets
from .._compile_cache import program_for_rows, stored_fit_program
from .._likelihood import log_class_probs
from .._mixed import (
    MixedConfig,
    MixedResult,
    effects_on_user_scale,
    fit_mixed,
    marginal_effects_mixed,
    mixed_parameters_at,
    predict_mixed,
    sample_class_probs_mixed,
    sample_posterior_mixed,
)
from .._shapes import bucket_rows, pad_rows
from .._status import Status, check_status, warn_user
from .._validation import float_dtype
from ..diagnostics import _check_draws, _pointwise
from ._base import (
    BAYES_ONE_CLASS_HINT,
    OrdinalEstimator,
    SavableMixin,
    bands_from_draws,
    binary_columns,
    check_is_fitted,
    check_level,
    check_positive_ints,
    class_from_proba,
    clone,
    column_positions,
    draws_key,
    fresh_fit,
    marginal_effects_table,
    posterior_table,
    proba_from_log,
    solver_tol,
    threshold_names,
    warn_if_separated,
    warn_if_undetermined,
)
from ._formula import check_formula_data, design_matrix, group_columns, predictors, slope_columns, split_formula
from ._uncertainty import UncertaintyMixin

__all__ = ["OrdinalMixed"]


def _fit_program(n_rows):
    """``fit_mixed`` for ``n_rows`` (padded) rows, through a stored program where it can
    (see ``stored_fit_program``)."""
    return stored_fit_program(fit_mixed, n_rows, ("config",), MixedResult)



def _group_codes(fitted, labels):
    """Each label's position among the ``fitted`` group levels (-1: a new group), and the
    labels matched only across types: text that reads as a fitted number (``"1"``, ``"1.0"``
    for 1) or a number whose text is a fitted text level (1 for ``"1"``).  A CSV's group
    column read as text because one new label is text held every known group as new."""
    index = {level: j for j, level in enumerate(fitted)}
    numeric = not isinstance(fitted[0], str) if fitted else True
    as_text = {str(level): j for j, level in enumerate(fitted)}
    codes, retyped = np.full(len(labels), -1, np.int32), []
    for i, label in enumerate(labels):
        j = index.get(label)
        if j is None and numeric and isinstance(label, str):
            try:
                j = index.get(float(label))
            except ValueError:
                j = None
        elif j is None and not numeric and isinstance(label, (int, float, np.integer, np.floating)):
            text = str(int(label)) if float(label).is_integer() else str(label)
            j = as_text.get(text)
        if j is not None:
            codes[i] = j
            if isinstance(label, str) == numeric:
                retyped.append(label)
    return codes, retyped


def _labels_of_groups(groups, n, what="groups", factors=False):
    """An object array of group labels, checked for length and missing values: 1-D, or with
    ``factors`` also 2-D (one column per grouping factor)."""
    arr = np.asarray(getattr(groups, "to_numpy", lambda: groups)(), dtype=object)
    if arr.ndim != 1 and not (factors and arr.ndim == 2 and arr.shape[1] >= 1):
        shape = "1-D (one label per row)" + (", or 2-D (one column per grouping factor)" if factors else "")
        raise ValueError(f"{what} must be {shape}, got shape {arr.shape}")
    if arr.shape[0] != n:
        raise ValueError(f"X and {what} have different lengths: {n} rows in X, {arr.shape[0]} in {what}")
    import pandas as pd

    missing = np.flatnonzero(pd.isna(arr).reshape(n, -1).any(axis=1))
    if missing.size:
        raise ValueError(f"{what} has missing values at rows {missing[:5].tolist()}"
                         f"{' ...' if missing.size > 5 else ''}: every row needs a group")
    return arr


def _factor_names(groups, n_factors):
    """The grouping factors' names: a DataFrame's columns, a named Series' name, else
    ``"group"`` for one factor and ``"group0"``, ``"group1"``, ... for several."""
    if hasattr(groups, "columns"):
        return [str(c) for c in groups.columns]
    if n_factors == 1 and getattr(groups, "name", None) is not None:
        return [str(groups.name)]
    return ["group"] if n_factors == 1 else [f"group{r}" for r in range(n_factors)]


class _GroupedRows:
    """Rows of ``X`` with their group labels (None: a formula model's group column), carried
    as one object through :class:`UncertaintyMixin`'s calibration and prediction sets."""

    def __init__(self, X, groups):
        self.X = X
        self.groups = None if groups is None else _labels_of_groups(groups, np.shape(X)[0], factors=True)
        self.factor_names = list(map(str, groups.columns)) if hasattr(groups, "columns") else None

    @property
    def shape(self):
        return np.shape(self.X)

    def __getitem__(self, rows):
        X = self.X.iloc[rows] if hasattr(self.X, "iloc") else self.X[rows]
        part = _GroupedRows(X, None if self.groups is None else self.groups[rows])
        part.factor_names = self.factor_names
        return part


@lru_cache(maxsize=None)
def _row_log_probs(link, factor_slopes):
    """One draw's log class probabilities of rows ``X`` (user's columns) at that draw's
    ``coef``, ``thresholds`` and group ``effects`` (Q, p, user's scale); ``codes`` (n, R) are
    each row's levels as rows of ``effects``.  One function object per (link, slopes), so
    :func:`bayesord.diagnostics._pointwise` reuses its compiled program."""

    def log_probs(params, X):
        latent = X @ params["coef"]
        for r, slopes in enumerate(factor_slopes):
            u = params["effects"][params["codes"][:, r]]  # (n, p): the intercept, then the slopes
            latent = latent + u[:, 0] + jnp.sum(u[:, 1:1 + len(slopes)] * X[:, list(slopes)], axis=1)
        return log_class_probs(latent, jnp.ones_like(latent), params["thresholds"], link)

    return log_probs


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
    judge)``).  Several grouping factors, crossed or nested, each with a random intercept
    and, if asked, random slopes of its own, come as a 2-D ``groups`` (one column per factor)
    or as several terms, ``(1 + temp | judge) + (1 | bottle)``.
    Conformal prediction sets (:meth:`calibrate`, :meth:`predict_set`) take each row's group
    as the predictions do.
    A group with one row is allowed: its effect is then mostly the prior's (shrunk to 0).

    Args:
        link: "probit" (default), "logit", "cloglog", "loglog" or "cauchit".
        random_slopes: the columns whose slopes vary by group, besides the random
            intercept: indices, or names of a DataFrame's columns (default: none).  With
            several grouping factors, a dict of factor name -> its columns (a factor left
            out has a random intercept only).  :meth:`from_formula` sets it from
            ``(1 + x | group)``.
        tol: relative tolerance of the Newton solves (default 1e-10 in float64, 1e-5 in
            float32).
        max_iter: cap on Newton iterations over ``(beta, b, tau)``.
        max_inner: cap on Newton iterations of each conditional-mode solve.
        classes: the labels in increasing order (required for string labels).
        n_draws: posterior draws used for probability bands.
        random_state: seed (int) for the posterior draws.
        calibration_cv: None (default), or a number of folds: ``fit`` then ends with
            ``calibrate(X, y, groups, cv=calibration_cv)`` (folds seeded from ``random_state``), so
            the fitted model has conformal prediction sets wherever it is fitted (a
            ``Pipeline``, a grid search).  Not with ``sample_weight`` (the copies are unweighted).
        class_weight: None, ``"balanced"`` (every class carries the same total weight:
            class k's rows are weighted by ``W / (K W_k)``, ``W_k`` its total sample
            weight), or a dict of label -> weight; multiplies ``sample_weight``.

    Attributes:
        classes_: labels in increasing order.
        groups_: the group labels seen in fitting, in the order of ``group_effects_`` (with
            several factors, a list of them, one array per factor).
        group_factors_: the grouping factors' names (the formula's or the DataFrame's
            columns, else ``"group"``, or ``"group0"``, ``"group1"``, ...).
        coef_: fixed effects, shape (d,).
        thresholds_: thresholds at ``x = 0``, shape (K-1,).
        group_terms_: names of the group effects: ``["(Intercept)"]`` and the slope columns;
            with several factors a dict of factor name -> its terms.
        group_cov_: covariance ``Sigma`` of the group effects (the intercept at ``x = 0``),
            shape (p, p) for p group terms; with several factors block diagonal, one block
            per factor in their order.
        group_sd_: standard deviation of the random intercept (a float) for a random-intercept
            model; of every group term, shape (p,), with random slopes; with several factors,
            of every factor's terms, one factor after the other.
        cov_: Laplace covariance of ``(coef_, thresholds_, sds, correlations)``: the rows of
            :meth:`summary`.
        group_effects_: conditional modes of the group effects on the user's scale (as
            ``clmm``'s ``ranef``), shape (q,), or (q, p) with random slopes; with several
            factors a dict of factor name -> its levels' effects, shaped in the same way.
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
    _formula_set_params = ("random_slopes",)
    _scale_sensitive = False  # the fit standardises the columns itself
    _one_class_hint = BAYES_ONE_CLASS_HINT
    _zero_weight_drops_row = True
    _min_features = 0  # "rating ~ (1 | judge)": thresholds and group effects only

    def __init__(self, link="probit", random_slopes=(), tol=None, max_iter=100, max_inner=50, classes=None,
                 n_draws=200, random_state=None, class_weight=None, calibration_cv=None):
        self.link = link
        self.random_slopes = random_slopes
        self.tol = tol
        self.max_iter = max_iter
        self.max_inner = max_inner
        self.classes = classes
        self.n_draws = n_draws
        self.random_state = random_state
        self.class_weight = class_weight
        self.calibration_cv = calibration_cv

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
        factors = [group] if isinstance(group, str) else list(group)
        check_formula_data(formula, data, response, *{c for f in factors for c in f.split(":")})
        X, spec = design_matrix(fixed, predictors(data, response))
        if "random_slopes" in params:
            raise TypeError("from_formula takes the random slopes from the formula's '(1 + x | group)', "
                            "not from random_slopes=")
        if isinstance(group, str):
            slopes = slope_columns(formula, slope_terms, data, list(X.columns))
        else:
            slopes = {f: slope_columns(formula, t, data, list(X.columns)) for f, t in zip(factors, slope_terms) if t}
        model = cls(random_slopes=slopes, **params)
        groups = group_columns(data, factors)
        model.fit(X, data[response], groups[group] if isinstance(group, str) else groups,
                  sample_weight=sample_weight)
        model.formula_ = formula
        model.group_name_ = group if isinstance(group, str) else factors
        model.group_factors_ = factors
        model._spec = spec
        model._formula_call = {"formula": formula}
        return model

    def _config(self, n_classes, n_groups, d, names, factors=("group",)):
        """The static configuration for ``d`` columns named ``names`` (None: unnamed) and the
        grouping factors named ``factors``."""
        check_positive_ints(self, "max_iter", "max_inner", "n_draws")
        return MixedConfig(n_classes=n_classes, n_groups=n_groups, link=self.link,
                           slopes=self._slope_indices(d, names, list(factors)), max_newton=int(self.max_iter),
                           max_inner=int(self.max_inner))

    def _slope_indices(self, d, names, factors):
        """``random_slopes`` as positions of the ``d`` columns named ``names``: a tuple for one
        grouping factor, one tuple per factor (in ``factors``' order) for several."""
        chosen = self.random_slopes
        if isinstance(chosen, dict):
            unknown = [f for f in chosen if f not in factors]
            if unknown:
                raise ValueError(f"random_slopes names grouping factor {unknown[0]!r}; the factors are {factors}")
            per_factor = [(f"random_slopes[{f!r}]", chosen.get(f)) for f in factors]
        else:
            per_factor = [("random_slopes", chosen)]
        out = []
        for what, columns in per_factor:
            positions = column_positions(what, columns, d, names)
            if len(set(positions)) != len(positions):
                raise ValueError(f"{what} names a column twice: {list(columns)!r}")
            out.append(positions)
        if len(factors) == 1:
            return out[0]
        if not isinstance(chosen, dict):
            if out[0]:
                raise ValueError(f"with several grouping factors, random_slopes must say whose slopes they are: "
                                 f"a dict of factor -> columns, e.g. {{{factors[0]!r}: {list(chosen)!r}}}")
            return ()
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
        labels = _labels_of_groups(groups, X.shape[0], factors=True)
        factors = _factor_names(groups, 1 if labels.ndim == 1 else labels.shape[1])
        levels, g = [], []
        for r, column in enumerate(labels.T if labels.ndim == 2 else [labels]):
            what = "groups" if labels.ndim == 1 else f"groups column {factors[r]!r}"
            try:
                lv, gr = np.unique(column, return_inverse=True)
            except TypeError:
                raise TypeError(f"{what} mixes labels that cannot be ordered (e.g. numbers and text): "
                                "give one kind") from None
            used = np.unique(gr[sw > 0])
            if used.size < 2:
                raise ValueError(f"{what} has {used.size} level with positive weight; a group effect needs "
                                 "at least two groups (fit OrdinalProbit for one)")
            if used.size == np.count_nonzero(sw > 0):
                # lme4's rule: with one row per group, each group effect is that row's own noise, and
                # the Laplace likelihood is not bounded by the fit without groups (on wine, by row:
                # log-likelihood -64.05 against the no-group maximum -85.76, coefficients 6x too large).
                raise ValueError(f"{what} has as many levels as rows ({used.size}): one row per group leaves the "
                                 "group effects undetermined apart from the noise; group by a column that "
                                 "repeats (a row identifier is no group)")
            levels.append(lv)
            g.append(gr.astype(np.int32))
        several = len(levels) > 1
        dtype = float_dtype()
        # One factor's levels are padded to a bucket (fewer programs); several factors' are not.
        n_groups = tuple(len(lv) for lv in levels) if several else bucket_rows(len(levels[0]))
        config = self._config(len(self.classes_), n_groups, X.shape[1], getattr(self, "feature_names_in_", None),
                              factors)
        n = X.shape[0]
        g = np.column_stack(g) if several else g[0]
        offsets = host_offsets(X, dtype)
        rows = pad_rows(bucket_rows(n), X if offsets is None else X - offsets, codes, g, sw, dtype=dtype)
        res = _fit_program(rows[0].shape[0])(*rows, solver_tol(self.tol, dtype), config=config)
        res = restore_offsets(jax.tree_util.tree_map(np.asarray, res), offsets, mixed_parameters_at)
        # Fixed-effect columns that separate the classes do so with every group effect at 0.
        if not (int(res.status) in (Status.SUCCESS, Status.MAX_ITER) and warn_if_separated(
                self, X, codes, sw, float(res.loglik), int(res.status) == Status.MAX_ITER,
                "Drop or merge the columns or levels that separate the classes")):
            check_status(res.status, "OrdinalMixed.fit")
            fixed = X.shape[1] + len(self.classes_) - 1  # beta_z and the thresholds lead eta
            warn_if_undetermined(self, res.eta_cov[:fixed, :fixed], X, sw,
                                 "fit fewer fixed-effect columns (a column of group labels among them, as "
                                 "'y ~ .' brings in, repeats the group effects)", prior_remedy=None)
        self._finish_fit(res, levels if several else levels[0], binary_columns(X), factors)
        self._warn_if_singular()
        return self

    def _warn_if_singular(self):
        """Warn when the fit is singular (:meth:`_singular_terms`), naming the terms."""
        boundary = self._singular_terms()
        if boundary:
            warn_user(f"OrdinalMixed: a singular fit, at the boundary of the group effects' covariance "
                      f"(lme4's 'boundary (singular) fit'): {'; '.join(boundary)}.  The data do not tell "
                      "these group effects apart from none; a simpler group term (without the slope, or "
                      "without the factor) fits about as well, and the intervals of the sds and correlations "
                      "at the boundary do not hold.")

    def _singular_terms(self, tol=1e-4):
        """The group effects at the boundary of their covariance, described, or [].

        As lme4's ``isSingular``: a diagonal entry of the factor ``Lambda`` of the standardised
        random design (``Sigma = Lambda Lambda^T``, in latent sds) below ``tol``.  Entry i is
        the sd of effect i beyond what the earlier effects of its factor explain: 0 means an
        sd of 0, or a correlation of +-1 with them.
        """
        lam = np.asarray(self.result_.eta)[-self.result_.config.n_cov_params:]
        sd_labels, _, _, _ = self._group_cov_labels()
        sds, cov = np.asarray(self.result_.group_sd), np.asarray(self.result_.group_cov)
        out, at, first = [], 0, 0
        for terms in self._terms_by_factor().values():
            p = len(terms)
            for i in range(p):
                if abs(lam[at + i * (i + 1) // 2 + i]) >= tol:
                    continue
                j = first + i
                if i == 0 or sds[j] < tol * max(sds[first:first + p].max(), 1.0):
                    out.append(f"sd({sd_labels[j]}) = {sds[j]:.2g}")
                else:
                    corr = cov[first:j, j] / (sds[first:j] * sds[j])
                    k = first + int(np.argmax(np.abs(corr)))
                    out.append(f"{sd_labels[j]} moves with {sd_labels[k]} (correlation "
                               f"{corr[k - first]:+.4f})")
            at, first = at + p * (p + 1) // 2, first + p
        return out

    def _finish_fit(self, res, levels, binary, factors=None):
        """Set the fitted attributes from a result whose group arrays are padded past
        ``len(levels)`` (the compiled program's bucket of groups; one factor), or, for several
        factors, from ``levels`` a list of each factor's levels."""
        if isinstance(levels, list):
            self.groups_ = [np.asarray(lv.tolist()) for lv in levels]
        else:
            q = len(levels)
            res = dataclasses.replace(res, effects=res.effects[:q], effects_cond_cov=res.effects_cond_cov[:q],
                                      effects_cov=res.effects_cov[:q], effects_cross=res.effects_cross[:q],
                                      factor_cross_cov=res.factor_cross_cov[:q])
            self.groups_ = np.asarray(levels.tolist())  # numbers or text, as an ordinary dtype
        self.group_factors_ = factors or ["group"]
        self.binary_columns_ = binary
        self._set_result(res)
        self.formula_ = None
        self.group_name_ = None
        self._spec = None
        return self

    def _set_result(self, res):
        self.result_ = res
        config = res.config
        d, k1, p = res.coef.shape[0], res.thresholds.shape[0], config.n_effects
        self.coef_ = res.coef
        names = self._coef_names()
        terms = [["(Intercept)"] + [names[j] for j in s] for s in config.factor_slopes]
        self.thresholds_ = res.thresholds
        several = len(config.levels) > 1
        self.group_terms_ = dict(zip(self.group_factors_, terms)) if several else terms[0]
        self.group_cov_ = res.group_cov
        self.group_sd_ = res.group_sd if several or p > 1 else float(res.group_sd[0])
        self.cov_ = res.cov
        effects = np.asarray(effects_on_user_scale(res)[0])
        if several:
            starts = np.cumsum([0, *config.levels])
            self.group_effects_ = {name: effects[a:b, 0] if p_r == 1 else effects[a:b, :p_r] for name, a, b, p_r in
                                   zip(self.group_factors_, starts[:-1], starts[1:], config.factor_effects)}
        else:
            self.group_effects_ = effects[:, 0] if p == 1 else effects
        self.loglik_ = float(res.loglik)
        self.n_iter_ = int(res.n_iter)
        self.converged_ = bool(res.converged)
        self.coef_cov_ = res.cov[:d, :d]
        self.thresholds_cov_ = res.cov[d:d + k1, d:d + k1]

    # --------------------------------------------------------------- prediction
    def _group_labels(self, X, groups):
        """``groups``, or for a formula model given None, the formula's group column(s) of ``X``."""
        if isinstance(X, _GroupedRows):
            if groups is None and X.groups is not None and X.factor_names is not None:
                import pandas as pd

                groups = pd.DataFrame(X.groups, columns=X.factor_names)
            X, groups = X.X, X.groups if groups is None else groups
        if groups is None:
            if getattr(self, "_spec", None) is None:
                raise TypeError("predictions need each row's group: pass groups= (a label the fit has "
                                "not seen predicts for a new group)")
            if hasattr(X, "columns"):  # anything else is refused by _validate_predict
                names = [self.group_name_] if isinstance(self.group_name_, str) else self.group_name_
                missing = [c for name in names for c in name.split(":") if c not in X.columns]
                if missing:
                    raise ValueError(f"the data have no column {missing[0]!r} (the formula's "
                                     "group); add it, or pass groups=")
                groups = group_columns(X, names)
                groups = groups[self.group_name_] if isinstance(self.group_name_, str) else groups
        return X, groups

    def _inputs(self, X, groups):
        """(X, group codes) for prediction: codes -1 for levels not seen in fitting; shape (n,)
        for one grouping factor, (n, R) for several."""
        X, groups = self._group_labels(X, groups)
        X = self._validate_predict(X)
        levels = self.groups_ if isinstance(self.groups_, list) else [self.groups_]
        if hasattr(groups, "columns") and len(levels) > 1:
            by_name = {str(c): c for c in groups.columns}
            if all(f in by_name for f in self.group_factors_):  # the factors' columns by name, in the fit's order
                groups = groups[[by_name[f] for f in self.group_factors_]]
        labels = _labels_of_groups(groups, X.shape[0], factors=len(levels) > 1)
        if len(levels) > 1 and (labels.ndim != 2 or labels.shape[1] != len(levels)):
            raise ValueError(f"groups needs one column per grouping factor ({len(levels)}: "
                             f"{self.group_factors_}), got shape {labels.shape}")
        columns = labels.T if labels.ndim == 2 else [labels]
        codes, retyped = [], []
        for lv, column in zip(levels, columns):
            factor_codes, factor_retyped = _group_codes(lv.tolist(), column.tolist())
            codes.append(factor_codes)
            retyped += factor_retyped
        if retyped:
            shown = ", ".join(repr(label) for label in list(dict.fromkeys(retyped))[:5])
            warn_user(f"OrdinalMixed: group label(s) {shown} are the fitted groups of the same value written as "
                      f"another type (text for numbers or numbers for text, as a CSV column with one text label "
                      f"reads every label as text); they are predicted as those groups, not as new ones")
        return X, np.column_stack(codes) if len(levels) > 1 else codes[0]

    def _device_inputs(self, X, groups):
        """As :meth:`_inputs`, with the rows and the result in the working float type for a
        program; columns far from zero are centred here, in float64
        (:func:`~bayesord._columns.host_offsets`)."""
        X, codes = self._inputs(X, groups)
        X, res = offset_rows(X, self.result_, float_dtype())
        return X.astype(float_dtype()), codes, jax.tree_util.tree_map(lambda a: np.asarray(a, float_dtype()), res)

    def _predict_all(self, X, groups):
        X, codes, res = self._device_inputs(X, groups)
        n = X.shape[0]
        X, codes = pad_rows(bucket_rows(n), X, codes)
        pred = predict_mixed(res, X, codes)
        return jax.tree_util.tree_map(lambda a: np.asarray(a[:n], dtype=np.float64), pred)

    def predict_proba(self, X, groups=None):
        """Class probabilities, shape (n, K): each row's group effect (its posterior for a
        group seen in fitting, ``N(0, tau^2)`` for any other label) and the posterior of
        ``(beta, b, tau)`` integrated (exactly for the probit, the probit approximation for
        the logit, by quadrature for the other links); in float64 from the log-probabilities
        (:func:`~bayesord.estimators._base.proba_from_log`)."""
        return proba_from_log(self._predict_all(X, groups).log_proba)

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
        X, codes, res = self._device_inputs(X, groups)
        n = X.shape[0]
        X, codes = pad_rows(bucket_rows(n), X, codes)
        draws = sample_class_probs_mixed(res, X, codes, draws_key(self.random_state),
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

    def predict_set(self, X, alpha=0.1, groups=None, *, method="conformal", mondrian=False, risk="coverage"):
        """Contiguous prediction sets ``[lower, upper]`` of labels for rows of known or new
        groups; see :meth:`bayesord.OrdinalProbit.predict_set`."""
        return super().predict_set(_GroupedRows(X, groups), alpha, method=method, mondrian=mondrian, risk=risk)

    def _copy_rows(self, X):
        X, groups = self._group_labels(X, None)
        return _GroupedRows(super()._copy_rows(X), groups)

    def _fit_copy(self, X, labels, sample_weight):
        groups = X.groups
        if groups.ndim == 2:  # the factors keep their names (random_slopes may name them)
            import pandas as pd

            groups = pd.DataFrame(groups, columns=self.group_factors_)
        return clone(self).fit(X.X, labels, groups, sample_weight=sample_weight, classes=self.classes_)

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
        log-likelihoods with and without the term instead.  An sd fitted at 0 gets the
        interval ``[0, z sd]``.  With several grouping factors, each factor's rows follow one
        another (``sd(judge)``, ``sd(bottle)``, ...), then each factor's correlations.
        """
        from scipy.special import ndtr, ndtri

        check_is_fitted(self, "coef_")
        sd_labels, corr_labels, rows, cols = self._group_cov_labels()
        sd_names = [f"sd({label})" for label in sd_labels]
        corr_names = [f"corr({label})" for label in corr_labels]
        res = self.result_
        sd_group = np.asarray(res.group_sd)
        p = sd_group.size
        corr = np.asarray(res.group_cov)[rows, cols] / (sd_group[rows] * sd_group[cols])
        names = self._coef_names() + threshold_names(self.classes_) + sd_names + corr_names
        mean = np.concatenate([self.coef_, self.thresholds_, sd_group, corr])
        sd = np.sqrt(np.diag(self.cov_))
        n_fixed = len(mean) - p - len(corr)
        z = mean / sd
        z[n_fixed:] = np.nan
        table = posterior_table(names, mean, sd, level, z=z, p=2 * ndtr(-np.abs(z)))
        half = ndtri(0.5 + level / 2) * sd
        # Each sd's interval by the delta method on the log scale, each correlation's on atanh.
        # An sd fitted at 0 (the edge of its range; within 1e-8 of it relative to its sd) has
        # no log scale: its interval is [0, z * sd].
        sds = slice(n_fixed, n_fixed + p)
        m, h = mean[sds], half[sds]
        edge = m <= 1e-8 * np.maximum(h, 1.0)
        ratio = np.where(edge, 0.0, h / np.where(edge, 1.0, m))
        table.iloc[sds, 2] = np.where(edge, 0.0, m * np.exp(-ratio))
        table.iloc[sds, 3] = np.where(edge, m + h, m * np.exp(np.minimum(ratio, 700.0)))
        cs = slice(n_fixed + p, None)
        table.iloc[cs, 2] = np.tanh(np.arctanh(mean[cs]) - half[cs] / (1 - mean[cs] ** 2))
        table.iloc[cs, 3] = np.tanh(np.arctanh(mean[cs]) + half[cs] / (1 - mean[cs] ** 2))
        return table

    def _group_cov_labels(self):
        """Labels of the group sds (``judge``, or ``judge: temp[T.warm]`` for a slope) and of
        the correlations between one factor's terms (``judge: (Intercept), temp[T.warm]``),
        with each correlation's (row, col) in the sds' order: the order of ``result_.cov``."""
        sd_labels, corr_labels, rows, cols = [], [], [], []
        at = 0
        for factor, terms in self._terms_by_factor().items():
            sd_labels += [factor] if len(terms) == 1 else [f"{factor}: {t}" for t in terms]
            # Correlations between the terms of one factor (the factors are independent).
            i, j = np.tril_indices(len(terms), -1)
            corr_labels += [f"{factor}: {terms[b]}, {terms[a]}" for a, b in zip(i, j)]
            rows, cols, at = rows + list(i + at), cols + list(j + at), at + len(terms)
        return sd_labels, corr_labels, np.asarray(rows, int), np.asarray(cols, int)

    def to_inference_data(self, X=None, y=None, groups=None, *, draws=500, chains=4, random_state=None):
        """ArviZ ``InferenceData`` of the Laplace posterior: draws of every parameter and group effect.

        Group ``posterior``: ``coef`` (dim ``feature``), ``thresholds`` (``cut``), ``sd``
        (``group_sd``: one per factor and term, as :meth:`summary` names them), ``corr``
        (``group_corr``, with random slopes) and, per grouping factor, ``effects_<factor>``
        (dims the factor's levels and, with slopes, ``<factor>_term``), on the user's scale as
        :meth:`summary` and :meth:`group_effects` report them.  The draws are independent
        (:func:`bayesord._mixed.sample_posterior_mixed`): ``eta = (beta, b, Lambda)`` from its
        Laplace Gaussian, mapped as the fit maps its estimate (an sd is never negative), and
        the group effects from their joint Gaussian given that draw (the levels of crossed
        factors are correlated).

        With labelled rows (``X``, ``y`` and their ``groups``, as for :meth:`predict`; usually
        the training rows) it adds ``log_likelihood`` (``log P(y_i | draw)``, each row's latent
        value taken at its groups' drawn effects: the conditional likelihood that multilevel
        models' PSIS-LOO usually reads), ``posterior_predictive`` and ``observed_data``, so
        ``arviz.loo`` and :func:`bayesord.diagnostics.compare` take it.

        Args:
            X: optional labelled rows (features, as for :meth:`predict`).
            y: their labels (with ``X``).
            groups: their groups, every one a group the model was fitted on (a formula
                model reads them from ``X``).
            draws: draws per chain.
            chains: independent chains (for ArviZ's r_hat and ESS as usual).
            random_state: seed (int) of the draws (None: 0).

        Returns:
            arviz.InferenceData.

        Raises:
            ValueError: ``X`` without ``y`` or the reverse, a row of a group the fit has not
                seen, a label not in ``classes_``, or a draw count that is not a positive
                integer.
        """
        import arviz as az

        check_is_fitted(self, "coef_")
        draws, chains = _check_draws("draws", draws), _check_draws("chains", chains)
        if (X is None) != (y is None):
            raise ValueError("the log-likelihood needs labelled rows: pass X and y together (and their groups)")
        natural, effects = (np.asarray(a) for a in sample_posterior_mixed(
            self.result_, draws_key(random_state), n_draws=draws * chains))
        d, k1 = len(self.coef_), len(self.thresholds_)
        sd_labels, corr_labels, _, _ = self._group_cov_labels()
        n_sd = len(sd_labels)
        posterior = {"coef": natural[:, :d], "thresholds": natural[:, d:d + k1],
                     "sd": natural[:, d + k1:d + k1 + n_sd]}
        dims = {"coef": ["feature"], "thresholds": ["cut"], "sd": ["group_sd"]}
        coords = {"feature": self._coef_names(), "cut": threshold_names(self.classes_), "group_sd": sd_labels}
        if corr_labels:
            posterior["corr"], dims["corr"], coords["group_corr"] = natural[:, d + k1 + n_sd:], ["group_corr"], corr_labels
        terms = self._terms_by_factor()
        levels = self.groups_ if len(terms) > 1 else [self.groups_]
        start = 0
        for (factor, names), lv in zip(terms.items(), levels):
            name = f"effects_{factor}"
            block = effects[:, start:start + len(lv), :len(names)]
            start += len(lv)
            coords[factor] = np.asarray(lv).tolist()
            if len(names) == 1:
                posterior[name], dims[name] = block[:, :, 0], [factor]
            else:
                posterior[name], dims[name] = block, [factor, f"{factor}_term"]
                coords[f"{factor}_term"] = list(names)

        def per_chain(a):
            return a.reshape((chains, draws) + a.shape[1:])

        groups_data = {}
        if X is not None:
            loglik, predicted, observed = self._draws_loglik(X, y, groups, natural[:, :d], natural[:, d:d + k1],
                                                             effects, random_state)
            values = self.classes_ if self.classes_.dtype.kind in "biuf" else np.arange(len(self.classes_))
            groups_data = {"log_likelihood": {"y": per_chain(loglik)},
                           "posterior_predictive": {"y": per_chain(values[predicted])},
                           "observed_data": {"y": values[observed]}}
            dims["y"], coords["obs_id"] = ["obs_id"], np.arange(observed.size)
        attrs = {"model": "ordinal mixed model", "inference": "Laplace approximation (independent draws)",
                 "classes": [str(c) for c in self.classes_], "library": "bayesord"}
        return az.from_dict(posterior={k: per_chain(v) for k, v in posterior.items()}, **groups_data,
                            coords=coords, dims=dims, attrs=attrs)

    def _draws_loglik(self, X, y, groups, coef, thresholds, effects, random_state):
        """``log P(y_i | draw)`` (S, n) at each draw's coefficients, thresholds and the drawn
        effects of each row's groups (all on the user's scale), one label drawn per draw and
        row (S, n), and the observed class codes (n,): through
        :func:`bayesord.diagnostics._pointwise`, as the other models' exports."""
        X, codes = self._inputs(X, groups)
        observed = self._encode_y(y, X.shape[0])
        codes = codes.reshape(X.shape[0], -1)
        if np.any(codes < 0):
            rows = np.flatnonzero((codes < 0).any(axis=1))
            raise ValueError(f"the log-likelihood takes each row's latent value at its group's effect: every row "
                             f"must be in a group the model was fitted on, and {rows.size} row(s) are not (first "
                             f"rows, 0-based: {rows[:5].tolist()}); leave them out of the export")
        levels = self.groups_ if codes.shape[1] > 1 else [self.groups_]
        first = np.cumsum([0] + [len(lv) for lv in levels])[:-1]  # each factor's first row of effects
        dtype = float_dtype()
        draws = {"coef": jnp.asarray(coef, dtype), "thresholds": jnp.asarray(thresholds, dtype),
                 "effects": jnp.asarray(effects, dtype)}
        keys = jax.random.split(jax.random.fold_in(draws_key(random_state), 1), coef.shape[0])
        loglik, predicted = _pointwise(_row_log_probs(self.link, self.result_.config.factor_slopes), 256, draws,
                                       {"codes": jnp.asarray(codes + first, jnp.int32)}, jnp.asarray(X, dtype),
                                       jnp.asarray(observed, jnp.int32), keys)
        return np.asarray(loglik, np.float64), np.asarray(predicted), observed

    def group_effects(self, level=0.95):
        """Each group's effect: conditional mode, posterior sd and central interval.

        The table behind a caterpillar plot, on the user's scale (as ``clmm``'s ``ranef``).
        ``cond_sd`` is the sd given the estimated ``(beta, b, Sigma)`` (``clmm``'s
        ``condVar``); ``sd`` adds their uncertainty.  Indexed by group, or by (group, term)
        with random slopes.
        """
        import pandas as pd

        check_is_fitted(self, "group_effects_")
        mode, cov, cond_cov = (np.asarray(a) for a in effects_on_user_scale(self.result_))
        terms = self._terms_by_factor()
        several = len(terms) > 1
        levels = self.groups_ if several else [self.groups_]
        with_terms = any(len(t) > 1 for t in terms.values())
        keys, at, start = [], [], 0
        for (factor, names), lv in zip(terms.items(), levels):
            for j, group in enumerate(lv.tolist()):
                for k, term in enumerate(names):
                    keys.append(((factor,) if several else ()) + (group,) + ((term,) if with_terms else ()))
                    at.append((start + j, k))
            start += len(lv)
        q, k = np.asarray(at).T
        names = (["factor"] if several else []) + ["group"] + (["term"] if with_terms else [])
        index = pd.MultiIndex.from_tuples(keys, names=names) if len(names) > 1 else [key[0] for key in keys]
        return posterior_table(index, mode[q, k], np.sqrt(cov[q, k, k]), level, cond_sd=np.sqrt(cond_cov[q, k, k]))

    def _terms_by_factor(self):
        """Each grouping factor's name -> the names of its group terms."""
        terms = self.group_terms_
        return terms if isinstance(terms, dict) else {self.group_factors_[0]: terms}

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
        X, codes, res = self._device_inputs(X, groups)
        if X.shape[1] == 0:
            raise ValueError("the model has no columns, so no marginal effects")
        effect, sd = program_for_rows(marginal_effects_mixed, X.shape[0])(res, X, codes, self.binary_columns_,
                                                                        self._expected_values())
        return marginal_effects_table(effect, sd, self._coef_names(), self.classes_, self.binary_columns_, level)

    # ------------------------------------------------------------ persistence
    def _saved_state(self):
        fields = {k: getattr(self.result_, k) for k in _RESULT_ARRAYS}
        arrays = {f"result.{k}": np.asarray(v) for k, v in fields.items()}
        levels = self.groups_ if isinstance(self.groups_, list) else [self.groups_]
        for r, lv in enumerate(levels):
            arrays[f"groups_.{r}"] = np.asarray(lv)
            if lv.dtype.kind not in "iufUb":
                raise ValueError(f"group labels of dtype {lv.dtype} cannot be saved: use numbers or text")
        arrays["binary_columns_"] = np.asarray(self.binary_columns_)
        config = self.result_.config
        n_groups = list(config.n_groups) if isinstance(config.n_groups, tuple) else config.n_groups
        return arrays, {"config": {"n_groups": n_groups, "slopes": [list(s) if isinstance(s, tuple) else s
                                                                    for s in config.slopes],
                                   "max_newton": config.max_newton, "max_inner": config.max_inner},
                        "group_factors": list(self.group_factors_)}

    def _restore(self, arrays, meta):
        d, k = int(self.n_features_in_), len(self.classes_)
        factors = list(meta["group_factors"])
        levels = [arrays[f"groups_.{r}"] for r in range(len(factors))]
        settings = dict(meta["config"])
        if isinstance(settings["n_groups"], list):
            settings["n_groups"] = tuple(settings["n_groups"])
        settings["slopes"] = tuple(tuple(s) if isinstance(s, list) else s for s in settings["slopes"])
        config = MixedConfig(n_classes=k, link=self.link, **settings)
        q, p, n_fac = sum(len(lv) for lv in levels), config.n_effects, len(levels)
        if n_fac != len(config.levels):
            raise ValueError(f"{n_fac} grouping factors' levels for a model of {len(config.levels)}")
        m = d + k - 1 + config.n_cov_params
        n_sd = sum(config.factor_effects)
        n_nat = d + k - 1 + n_sd + sum(p_r * (p_r - 1) // 2 for p_r in config.factor_effects)
        qb = max(config.levels)  # the factor of most levels; factor_*_cov tile its effects against the rest's
        big, rest = (q, 0) if n_fac == 1 else (qb * p, (q - qb) * p)
        res = MixedResult(config=config, **{name: arrays[f"result.{name}"] for name in _RESULT_ARRAYS})
        self._check_shapes(("result.coef", res.coef, (d,)), ("result.thresholds", res.thresholds, (k - 1,)),
                           ("result.group_cov", res.group_cov, (n_sd, n_sd)),
                           ("result.group_sd", res.group_sd, (n_sd,)),
                           ("result.cov", res.cov, (n_nat, n_nat)), ("result.eta", res.eta, (m,)),
                           ("result.eta_cov", res.eta_cov, (m, m)), ("result.effects", res.effects, (q, p)),
                           ("result.effects_cond_cov", res.effects_cond_cov, (q, p, p)),
                           ("result.effects_cov", res.effects_cov, (q, p, p)),
                           ("result.effects_cross", res.effects_cross, (q, p, m)),
                           ("result.factor_cross_cov", res.factor_cross_cov, (big, rest)),
                           ("result.factor_rest_cov", res.factor_rest_cov, (rest, rest)))
        self.groups_ = levels if n_fac > 1 else levels[0]
        self.group_factors_ = factors
        self.binary_columns_ = np.asarray(arrays["binary_columns_"], bool)
        self._check_shapes(("binary_columns_", self.binary_columns_, (d,)))
        self._set_result(res)
        self.formula_ = None
        self.group_name_ = None
        self._spec = None


_RESULT_ARRAYS = ("coef", "thresholds", "group_cov", "group_sd", "cov", "center", "scale", "eta", "eta_cov",
                  "effects", "effects_cond_cov", "effects_cov", "effects_cross", "factor_cross_cov",
                  "factor_rest_cov", "loglik", "n_iter", "converged", "status")

