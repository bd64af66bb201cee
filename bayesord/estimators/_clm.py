"""``CumulativeLinkModel``: the cumulative link model with nominal and scale effects (R's ``clm``)."""

from __future__ import annotations

import jax
import numpy as np

from .. import diagnostics
from .._clm import (
    CLMConfig,
    CLMResult,
    ThresholdCrossingWarning,
    clm_columns,
    clm_parameters_at,
    fit_clm,
    marginal_effects_clm,
    predict_clm,
    sample_class_probs_clm,
)
from .._columns import host_offsets, offset_rows, restore_offsets
from .._compile_cache import program_for_rows, stored_fit_program
from .._shapes import bucket_rows, pad_rows
from .._status import Status, check_status, convergence_warning, warn_user
from .._validation import float_dtype
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
from ._formula import check_formula_data, design_matrix, formula_rows, predictors, split_formula
from ._uncertainty import UncertaintyMixin

__all__ = ["CumulativeLinkModel"]


def _natural_vector(res):
    """``(coef, thresholds, nominal_coef.ravel(), scale_coef)``: the order of ``cov``."""
    return np.concatenate([res.coef, res.thresholds, np.ravel(res.nominal_coef), res.scale_coef])


def _fit_program(n_rows):
    """``fit_clm`` for ``n_rows`` (padded) rows, through a stored program where it can (see
    ``stored_fit_program``)."""
    return stored_fit_program(fit_clm, n_rows, ("config",), CLMResult)



def _one_sided(formula, what):
    """``"~ contact + temp"`` -> ``"contact + temp"``."""
    if not isinstance(formula, str) or not formula.strip().startswith("~") or formula.count("~") != 1:
        raise ValueError(f"{what} must be a one-sided formula such as '~ contact', got {formula!r}")
    rhs = formula.strip()[1:].strip()
    if not rhs:
        raise ValueError(f"{what} formula {formula!r} has no terms")
    return rhs


def _term_columns(X_part, spec):
    """``{term: [column names]}`` of a design matrix without its intercept."""
    names = list(X_part.columns)
    out = {}
    for term, cols in spec.term_slices.items():
        members = [c for c in spec.column_names[cols] if c in names]
        if members:
            out[str(term)] = members
    return out


class CumulativeLinkModel(UncertaintyMixin, SavableMixin, OrdinalEstimator):
    """Cumulative link model with nominal (partial proportional odds) and scale effects.

    ``P(y <= k) = F((b_k + w^T gamma_k - x^T beta) / exp(s^T zeta))``: location columns
    ``x`` move the latent value, nominal columns ``w`` move each threshold by its own amount
    (the proportional-odds assumption dropped for them), and scale columns ``s`` change the
    latent spread.  Fitted by maximum likelihood, the estimates of R's ``ordinal::clm``
    (``clm(y ~ x, nominal = ~ w, scale = ~ s)``); the posterior is the Laplace Gaussian at the
    optimum, and every probability integrates it (see :mod:`bayesord._clm`).  Without
    nominal and scale columns it is the ordinary maximum-likelihood ordinal model
    (statsmodels' ``OrderedModel``, mord's ``LogisticAT`` without its penalty).

    :meth:`nominal_test` and :meth:`scale_test` test the proportional-odds and the equal-scale
    assumption term by term with likelihood ratios (``ordinal::nominal_test``/``scale_test``;
    the question of the Brant test).

    Fit with arrays, choosing columns by name or position with ``location``, ``nominal`` and
    ``scale``, or with formulas (:meth:`from_formula`).  Columns are standardised inside the
    fit, so shifts and rescalings of the columns change no prediction.

    Args:
        link: "probit" (default), "logit", "cloglog", "loglog" or "cauchit".
        location: the columns with one coefficient each (names or positions); default every
            column not in ``nominal``.
        nominal: the columns that shift each threshold separately (default none).  A column
            cannot be in ``location`` too.
        scale: the columns of the log-linear scale model (default none); they may be
            location columns as well.
        alpha: strength of an elastic-net penalty on the location coefficients (default 0:
            none, the maximum-likelihood fit): ``alpha`` times ``l1_ratio |beta_z|_1 +
            (1 - l1_ratio) |beta_z|^2 / 2`` is subtracted from the mean log-likelihood,
            ``beta_z`` the coefficients per standard deviation of their columns.
        l1_ratio: the penalty's share of L1, in [0, 1] (default 1, the lasso: coefficients
            set to exactly zero; 0 is ridge).
        tol: relative tolerance of the Newton solve (default 1e-10 in float64, 1e-5 in float32).
        max_iter: cap on Newton iterations.
        classes: the labels in increasing order (required for string labels).
        n_draws: posterior draws used for probability bands.
        random_state: seed (int) for the posterior draws.
        calibration_cv: None (default), or a number of folds: ``fit`` then ends with
            ``calibrate(X, y, cv=calibration_cv)`` (folds seeded from ``random_state``), so
            the fitted model has conformal prediction sets wherever it is fitted (a
            ``Pipeline``, a grid search).  Not with ``sample_weight`` (the copies are unweighted).
        class_weight: None, ``"balanced"`` or a dict of label -> weight; multiplies
            ``sample_weight``.

    Attributes:
        classes_: labels in increasing order.
        coef_: location effects ``beta``, shape (d,).
        thresholds_: thresholds at all columns 0, shape (K-1,).
        nominal_coef_: threshold shifts ``gamma``, shape (p, K-1).
        scale_coef_: log-scale effects ``zeta``, shape (r,).
        cov_: covariance of ``(coef_, thresholds_, nominal_coef_.ravel(), scale_coef_)``.
        loglik_: the log-likelihood at the optimum (``clm``'s ``logLik``).
        n_iter_, converged_: Newton iterations and whether the solve met its tolerance.
        location_, nominal_, scale_: the columns of each part, by name.
        formula_: the formula, for a model made by :meth:`from_formula` (else None).
        result_: the functional :class:`bayesord._clm.CLMResult`.

    Warns:
        ThresholdCrossingWarning: at the estimate, the thresholds of some training rows
            cross (a nominal effect too strong for the data): those rows' probabilities of
            the classes between crossed thresholds are 0.

    Example:
        >>> import numpy as np
        >>> rng = np.random.default_rng(0)
        >>> X = rng.normal(size=(300, 2))
        >>> latent = X[:, 0] + rng.normal(size=300) * np.exp(0.5 * X[:, 1])
        >>> model = CumulativeLinkModel(scale=[1]).fit(X, np.digitize(latent, [-1.0, 1.0]))
        >>> model.scale_coef_.shape, model.predict_proba(X[:2]).shape
        ((1,), (2, 3))
    """

    _format = "bayesord.CumulativeLinkModel/1"
    _formula_attrs = ("formula_", "nominal_formula_", "scale_formula_", "_terms")
    _formula_set_params = ("location", "nominal", "scale")
    _scale_sensitive = False  # the fit standardises the columns itself
    _one_class_hint = BAYES_ONE_CLASS_HINT
    _zero_weight_drops_row = True
    _min_features = 0

    def __init__(self, link="probit", location=None, nominal=None, scale=None, alpha=0.0, l1_ratio=1.0, tol=None,
                 max_iter=100, classes=None, n_draws=200, random_state=None, class_weight=None,
                 calibration_cv=None):
        self.link = link
        self.location = location
        self.nominal = nominal
        self.scale = scale
        self.alpha = alpha
        self.l1_ratio = l1_ratio
        self.tol = tol
        self.max_iter = max_iter
        self.classes = classes
        self.n_draws = n_draws
        self.random_state = random_state
        self.class_weight = class_weight
        self.calibration_cv = calibration_cv

    # ------------------------------------------------------------------ fitting
    @classmethod
    def from_formula(cls, formula, data, nominal=None, scale=None, sample_weight=None, **params):
        """Fit ``formula`` to the DataFrame ``data``, as ``clm(formula, nominal=, scale=)``.

        ``formula`` is ``"response ~ terms"`` in formulaic's (R-like) syntax; ``nominal`` and
        ``scale`` are one-sided formulas (``"~ contact"``).  Text columns are coded as
        treatment contrasts against their first level and labelled ``name[T.level]``; the
        intercept is left to the thresholds.  A term cannot be in ``formula`` and
        ``nominal`` at once.  Predictions then take DataFrames with the same columns.

        Raises:
            ValueError: a malformed formula, a column the data lack, a term in both the
                location and the nominal part, or bad data.
        """
        for name in ("location", "nominal", "scale"):
            if name in params:
                raise TypeError(f"from_formula takes the columns from its formulas; do not pass {name}=")
        response, fixed, _, _ = split_formula(formula, group_term=False)
        check_formula_data(formula, data, response)
        terms_data = predictors(data, response)
        parts = {"location": design_matrix(fixed, terms_data)}
        for name, extra in (("nominal", nominal), ("scale", scale)):
            if extra is not None:
                parts[name] = design_matrix(_one_sided(extra, name), terms_data)
        if "nominal" in parts:
            both = sorted(set(parts["location"][0].columns) & set(parts["nominal"][0].columns))
            if both:
                raise ValueError(f"{both} are in the formula and in nominal=: a nominal term's location "
                                 "effect is not identified; take it out of the formula")
        specs = tuple(spec for _, spec in parts.values())
        A = formula_rows(specs, data)
        columns = {name: list(parts[name][0].columns) if name in parts else [] for name in
                   ("location", "nominal", "scale")}
        model = cls(**columns, **params)
        model.fit(A, data[response], sample_weight=sample_weight)
        model.formula_ = formula
        model.nominal_formula_ = nominal
        model.scale_formula_ = scale
        model._spec = specs
        model._terms = _term_columns(*parts["location"])
        model._formula_call = {"formula": formula, "nominal": nominal, "scale": scale}
        return model

    def _resolve(self, names, d):
        """The constructor's column choices as index tuples ``(location, nominal, scale)``."""
        nominal = column_positions("nominal", self.nominal, d, names)
        scale = column_positions("scale", self.scale, d, names)
        if self.location is None:
            location = tuple(j for j in range(d) if j not in nominal)
        else:
            location = column_positions("location", self.location, d, names)
        unused = sorted(set(range(d)) - set(location) - set(nominal) - set(scale))
        if unused:
            label = [str(names[j]) for j in unused] if names is not None else unused
            raise ValueError(f"columns {label} are in none of location, nominal and scale: list them, "
                             "or leave them out of X")
        return location, nominal, scale

    def _config(self, n_classes):
        check_positive_ints(self, "max_iter", "n_draws")
        for name in ("alpha", "l1_ratio"):
            val = getattr(self, name)
            if isinstance(val, bool) or not isinstance(val, (int, float, np.integer, np.floating)):
                raise TypeError(f"{name} must be a number, got {val!r}")
        return CLMConfig(n_classes=n_classes, link=self.link, max_newton=int(self.max_iter), alpha=float(self.alpha),
                         l1_ratio=float(self.l1_ratio))

    @fresh_fit
    def fit(self, X, y, sample_weight=None, classes=None):
        """Fit the model.

        Args:
            X: (n, D) columns (numbers; code text columns first, or use :meth:`from_formula`).
                No intercept column: the thresholds hold it.  D may be 0: the thresholds-only
                null model (``clm(y ~ 1)``).
            y: (n,) ordered labels.
            sample_weight: optional (n,) non-negative weights.
            classes: the labels in increasing order (see the constructor).

        Raises:
            ValueError: bad input or column choices.
            FloatingPointError: the solver hit a non-finite value, or the Hessian is not
                negative definite at the end (a column that is constant, or aliased with
                others, leaves a coefficient undetermined).

        Warns:
            ConvergenceWarning: the iteration cap was reached; or (maximum likelihood,
                ``alpha=0``) the Hessian is numerically singular: dependent columns, or
                classes separated by the columns, so that some parameters are not
                determined (R's ``clm`` warns the same).
            ThresholdCrossingWarning: thresholds cross at training rows.
        """
        X, codes, sw = self._validate_fit(X, y, sample_weight, classes)
        names = getattr(self, "feature_names_in_", None)
        config = self._config(len(self.classes_))
        location, nominal, scale = self._resolve(names, X.shape[1])
        columns = clm_columns(location, nominal, scale)
        self._train = (X, codes, sw)  # for nominal_test and scale_test (not saved)
        res = self._fit_columns(columns, config)
        capped = int(res.status) == Status.MAX_ITER
        drift = capped and np.sum(np.sqrt(np.abs(np.diag(res.cov))) > 10 * np.maximum(1.0, np.abs(_natural_vector(res))))
        # Location and nominal columns that separate the classes with one common slope leave
        # no estimate with nominal or scale effects either (one common slope is a special case).
        separated = self.alpha == 0 and int(res.status) in (Status.SUCCESS, Status.MAX_ITER) and warn_if_separated(
            self, X[:, sorted(set(location) | set(nominal))], codes, sw, float(res.loglik), capped,
            "Give alpha > 0, or use OrdinalProbit, whose prior determines every coefficient")
        if drift and not separated:
            warn_user(f"{type(self).__name__}.fit: stopped at the iteration cap with {drift} estimates "
                      "drifting off (sds over 10 times their size): the maximum-likelihood estimate does not "
                      "exist, typically because a class never occurs at a level of a nominal or scale column. "
                      "Merge sparse classes or levels, or take the column out of nominal/scale",
                      convergence_warning())
        elif not separated:
            check_status(res.status, f"{type(self).__name__}.fit")
            if self.alpha == 0:  # maximum likelihood: R's check of the fit's own parameters
                warn_if_undetermined(self, res.eta_cov, X, sw, "use OrdinalProbit, whose prior determines "
                                     "every coefficient")
        if int(res.n_crossed):
            warn_user(f"{type(self).__name__}: the thresholds cross at {int(res.n_crossed)} training rows "
                      "(a nominal effect too strong for those rows); the classes between crossed thresholds "
                      "get probability 0 there. Consider fewer nominal columns or a scale effect instead",
                      ThresholdCrossingWarning)
        self.binary_columns_ = binary_columns(X)
        self._set_result(res)
        self.formula_ = self.nominal_formula_ = self.scale_formula_ = None
        self._spec = None
        self._terms = None
        return self

    def _fit_columns(self, columns, config):
        """The functional fit of the training rows with ``columns`` (host arrays)."""
        X, codes, sw = self._train
        dtype = float_dtype()
        n = X.shape[0]
        offsets = host_offsets(X, dtype)
        A, c, w = pad_rows(bucket_rows(n), X if offsets is None else X - offsets, codes, sw, dtype=dtype)
        res = _fit_program(A.shape[0])(A, c, w, solver_tol(self.tol, dtype), columns, config=config)
        return restore_offsets(jax.tree_util.tree_map(np.asarray, res), offsets, clm_parameters_at)

    def _set_result(self, res):
        self.result_ = res
        label = self._column_names()
        self.location_, self.nominal_, self.scale_ = ([label[j] for j in np.asarray(idx).tolist()] for idx in
                                                      (res.location, res.nominal, res.scale_columns))
        self.coef_ = res.coef
        self.thresholds_ = res.thresholds
        self.nominal_coef_ = res.nominal_coef
        self.scale_coef_ = res.scale_coef
        self.cov_ = res.cov
        self.loglik_ = float(res.loglik)
        self.n_iter_ = int(res.n_iter)
        self.converged_ = bool(res.converged)

    # --------------------------------------------------------------- prediction
    def _device_inputs(self, X):
        """Validated rows ``X`` and the result, in the working float type (the result's
        column indices stay integers), for a program; columns far from zero are centred here,
        in float64 (:func:`~bayesord._columns.host_offsets`)."""
        A, res = offset_rows(self._validate_predict(X), self.result_, float_dtype())

        def cast(a):
            a = np.asarray(a)
            return a.astype(float_dtype()) if a.dtype.kind == "f" else a

        return A.astype(float_dtype()), jax.tree_util.tree_map(cast, res)

    def _predict_all(self, X):
        A, res = self._device_inputs(X)
        n = A.shape[0]
        pred = predict_clm(res, pad_rows(bucket_rows(n), A)[0])
        return jax.tree_util.tree_map(lambda a: np.asarray(a[:n], dtype=np.float64), pred)

    def predict_proba(self, X):
        """Class probabilities, shape (n, K), the Laplace posterior of every parameter
        integrated (exactly for the probit, the probit approximation for the logit, by
        quadrature for the other links); in float64 from the log-probabilities
        (:func:`~bayesord.estimators._base.proba_from_log`)."""
        return proba_from_log(self._predict_all(X).log_proba)

    def predict_cumproba(self, X):
        """Cumulative probabilities ``P(y <= classes_[k])`` for k < K-1, shape (n, K-1)."""
        return self._predict_all(X).cum_proba

    def predict(self, X, rule="mode"):
        """Predicted labels: the most probable class (``rule="mode"``) or the median class."""
        return self._decode(class_from_proba(self.predict_proba(X), rule))

    def predict_proba_interval(self, X, level=0.95):
        """Central credible band and posterior sd of each class probability, each (n, K),
        from ``n_draws`` draws of the parameters from their Laplace posterior."""
        check_level(level)
        A, res = self._device_inputs(X)
        n = A.shape[0]
        draws = sample_class_probs_clm(res, pad_rows(bucket_rows(n), A)[0], draws_key(self.random_state),
                                       n_draws=int(self.n_draws))
        return bands_from_draws(draws[:, :n], level)

    # ------------------------------------------------------------------ posterior
    def posterior_result(self):
        """The functional :class:`bayesord._clm.CLMResult` of the fit and the settings that
        label it (``classes``, the columns' names, ``model_name``): what
        :mod:`bayesord.diagnostics` dispatches on."""
        check_is_fitted(self, "coef_")
        return self.result_, dict(classes=self.classes_, feature_names=list(self.location_),
                                  nominal_names=list(self.nominal_), scale_names=list(self.scale_),
                                  model_name=type(self).__name__)

    def to_inference_data(self, X, y, **kwargs):
        """ArviZ ``InferenceData`` of the fit read as a Laplace posterior under a flat prior
        (the Gaussian its bands integrate): draws of ``coef``, ``thresholds`` and, where the
        model has them, ``nominal_coef`` (dims ``nominal_feature``, ``cut``) and
        ``scale_coef``, with the log-likelihood of the rows ``X``, ``y`` (usually the
        training rows; a formula model reads a DataFrame), so ``arviz.loo`` and
        :func:`bayesord.diagnostics.compare` rank it beside the Bayesian models and
        :class:`~bayesord.OrdinalMixed`.  See :func:`bayesord.diagnostics.to_inference_data`
        for the groups and arguments.

        Raises:
            ValueError: the fit's covariance is not finite, besides the errors of
                :func:`bayesord.diagnostics.to_inference_data`.
        """
        return diagnostics.to_inference_data(self, X, y, **kwargs)

    # ------------------------------------------------------------------ summary
    def summary(self, level=0.95):
        """Estimates, sds, central intervals, z and two-sided p-values (as ``clm`` prints them).

        Rows: the location effects, the thresholds (``threshold 1|2``), the nominal effects
        (``threshold 1|2: contact[T.yes]``, each the shift of that threshold) and the
        log-scale effects (``log-scale: temp[T.warm]``).
        """
        from scipy.special import ndtr

        check_is_fitted(self, "coef_")
        thresholds = threshold_names(self.classes_)
        names = (list(self.location_) + thresholds + [f"{t}: {c}" for c in self.nominal_ for t in thresholds]
                 + [f"log-scale: {c}" for c in self.scale_])
        mean = _natural_vector(self.result_)
        sd = np.sqrt(np.diag(self.cov_))
        z = np.divide(mean, sd, out=np.full_like(mean, np.nan), where=sd > 0)  # an L1 zero has no z
        return posterior_table(names, mean, sd, level, z=z, p=2 * ndtr(-np.abs(z)))

    def marginal_effects(self, X, level=0.95):
        """Average marginal effects of each column on every class probability and on the
        expected class, with delta-method sds and central intervals.

        One row block per column of the design, in its order; a column's effect goes through
        every part it is in (location, thresholds, scale).  A
        column that was 0/1 in the training data gets the average change from 0 to 1, any
        other the average derivative; pass the data to average over them, or one row for the
        effects at those values.  See :func:`bayesord._clm.marginal_effects_clm`.

        Returns:
            pandas DataFrame indexed by (term, outcome), as ``OrdinalProbit.marginal_effects``.
        """
        A, res = self._device_inputs(X)
        if A.shape[1] == 0:
            raise ValueError("the model has no columns, so no marginal effects")
        effect, sd = program_for_rows(marginal_effects_clm, A.shape[0])(res, A, self.binary_columns_,
                                                                         self._expected_values())
        return marginal_effects_table(effect, sd, self._column_names(), self.classes_, self.binary_columns_, level)

    def _column_names(self):
        names = getattr(self, "feature_names_in_", None)
        return [str(n) for n in names] if names is not None else [f"x{j}" for j in range(self.n_features_in_)]

    # ------------------------------------------------------- likelihood-ratio tests
    def _terms_of_location(self):
        terms = getattr(self, "_terms", None)
        if terms is not None:
            return terms
        return {c: [c] for c in self.location_}

    def _lr_table(self, moved):
        """Refit with each location term moved (``moved(location, nominal, scale, columns) ->
        (location, nominal, scale)``, or None to skip the term) and compare log-likelihoods:
        the table of :meth:`nominal_test` and :meth:`scale_test`.  Terms of the same width
        share one compiled program (the columns are data to it)."""
        import pandas as pd
        from scipy.special import chdtrc

        check_is_fitted(self, "result_")
        if self.result_.config.alpha > 0:
            raise ValueError("likelihood-ratio tests compare maximum-likelihood fits; this model is penalised "
                             "(alpha > 0): test with alpha=0")
        if getattr(self, "_train", None) is None:
            raise ValueError("the test refits the model on its training data, which a loaded model does "
                             "not have: fit it again")
        base = self.result_
        parts = [np.asarray(a).tolist() for a in (base.location, base.nominal, base.scale_columns)]
        n_par = base.eta.shape[0]
        index = {c: j for j, c in enumerate(self._column_names())}
        rows = {"<none>": (np.nan, self.loglik_, 2 * (n_par - self.loglik_), np.nan, np.nan, self.converged_)}
        for term, cols in self._terms_of_location().items():
            new = moved(*parts, [index[c] for c in cols])
            if new is None:
                continue
            res = self._fit_columns(clm_columns(*new), base.config)
            df = res.eta.shape[0] - n_par
            usable = Status(int(res.status)) in (Status.SUCCESS, Status.MAX_ITER)
            ll = float(res.loglik) if usable else np.nan
            lr = 2 * (ll - self.loglik_)
            rows[term] = (df, ll, 2 * (res.eta.shape[0] - ll), lr, chdtrc(df, max(lr, 0.0)), bool(res.converged))
        return pd.DataFrame.from_dict(rows, orient="index",
                                      columns=["df", "loglik", "AIC", "LR", "p", "converged"])

    def nominal_test(self):
        """Likelihood-ratio tests of the proportional-odds assumption, one per location term.

        Each term is refitted as a nominal effect (one shift per threshold) and its
        log-likelihood compared with the model's: ``LR = 2 (l_nominal - l)`` on ``(K-2)``
        degrees of freedom per column, as ``ordinal::nominal_test`` (a small p says the
        term's effect differs between thresholds).  A refit whose maximum-likelihood
        estimate does not exist (a class that never occurs at a level of the term: some
        threshold shifts run off to infinity, as ``clm`` finds with a singular Hessian)
        reports the log-likelihood reached at the iteration cap, its supremum to within
        about the tolerance, with ``converged`` False; a refit that fails shows NaN.

        Returns:
            pandas DataFrame indexed by term (``<none>`` the model itself) with columns df,
            loglik, AIC, LR, p and converged.
        """
        def moved(location, nominal, scale, cols):
            return [j for j in location if j not in cols], nominal + cols, scale

        return self._lr_table(moved)

    def scale_test(self):
        """Likelihood-ratio tests of equal latent scale, one per location term.

        Each term not already a scale term is added to the scale model and its
        log-likelihood compared with the model's (one degree of freedom per column), as
        ``ordinal::scale_test``.

        Returns:
            pandas DataFrame indexed by term, as :meth:`nominal_test`.
        """
        def moved(location, nominal, scale, cols):
            return None if set(cols) & set(scale) else (location, nominal, scale + cols)

        return self._lr_table(moved)

    # ------------------------------------------------------------ persistence
    def _saved_state(self):
        arrays = {f"result.{k}": np.asarray(v) for k, v in self.result_._asdict().items()}
        arrays["binary_columns_"] = np.asarray(self.binary_columns_)
        config = self.result_.config
        return arrays, {"config": {"max_newton": config.max_newton, "alpha": config.alpha,
                                   "l1_ratio": config.l1_ratio}}

    def _check_restored(self):
        """Nothing more to check: :meth:`_restore` checks every array against the saved column
        choices (``coef_`` has one entry per location column, not per feature)."""

    def _restore(self, arrays, meta):
        d, k = int(self.n_features_in_), len(self.classes_)
        config = CLMConfig(n_classes=k, link=self.link, **meta["config"])
        res = CLMResult(config=config, **{name: arrays[f"result.{name}"] for name in CLMResult._fields})
        columns = [np.asarray(a) for a in (res.location, res.nominal, res.scale_columns)]
        if any(a.ndim != 1 or a.dtype.kind not in "iu" or np.any((a < 0) | (a >= d)) for a in columns):
            raise ValueError(f"the saved column choices name columns outside the model's {d}")
        clm_columns(*(a.tolist() for a in columns))
        dl, p, r = (a.shape[0] for a in columns)
        k1 = k - 1
        m = dl + k1 * (1 + p) + r
        self._check_shapes(("result.coef", res.coef, (dl,)), ("result.thresholds", res.thresholds, (k1,)),
                           ("result.nominal_coef", res.nominal_coef, (p, k1)),
                           ("result.scale_coef", res.scale_coef, (r,)), ("result.center", res.center, (d,)),
                           ("result.cov", res.cov, (m, m)), ("result.eta", res.eta, (m,)),
                           ("result.eta_cov", res.eta_cov, (m, m)))
        self.binary_columns_ = np.asarray(arrays["binary_columns_"], bool)
        self._check_shapes(("binary_columns_", self.binary_columns_, (d,)))
        self._set_result(res)
        self.formula_ = self.nominal_formula_ = self.scale_formula_ = None
        self._spec = None
        self._terms = None
        self._train = None
