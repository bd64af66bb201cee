"""``OrdinalProbit``: the Bayesian linear ordinal regression as a scikit-learn estimator."""

from __future__ import annotations

import jax
import numpy as np

from .. import diagnostics
from .._columns import host_offsets, offset_rows, restore_offsets
from .._compile_cache import program_for_rows, stored_fit_program
from .._probit import (
    ProbitConfig,
    ProbitPrediction,
    ProbitResult,
    _predict_probit,
    class_prob_bands,
    fit_probit,
    fit_probit_weights,
    marginal_effects_probit,
    thresholds_at_zero,
)
from .._shapes import bucket_rows, pad_rows
from .._status import Status, check_status, convergence_warning, warn_user
from .._validation import float_dtype
from ._base import (
    BAYES_ONE_CLASS_HINT,
    SEPARATED,
    OrdinalEstimator,
    SavableMixin,
    binary_columns,
    check_is_fitted,
    check_positive_ints,
    class_from_proba,
    classes_separated,
    clone,
    copies_of_batch,
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
from ._uncertainty import UncertaintyMixin

__all__ = ["OrdinalProbit"]


# The relative tolerance of calibrate's cross-fitted copies (see OrdinalProbit._copy_params).
_COPY_TOL = 1e-4
# An evidence fit that ends with a prior precision below this (a prior sd over 7 per sd of a
# column) is checked for complete separation.  On the 22 dense shared data sets the smallest
# is 0.028 (pasture, prior="ard"; with the Gaussian prior 0.26, bank8fm); on separable data the
# search ended at 5e-5 to 0.0103 (n = 40 to 20,000, both priors, float32 and float64).
_SEPARATION_ALPHA = 0.02


def _fit_program(n_rows):
    """``fit_probit`` as compiled for ``n_rows`` (padded) rows, through a stored program where
    it can (see ``stored_fit_program``)."""
    return stored_fit_program(fit_probit, n_rows, ("config", "n_classes"), ProbitResult)


def _predict_program(n_rows):
    """The prediction of ``predict_probit`` as compiled for ``n_rows`` (padded) rows,
    through a stored program where it can: a later process reads it instead of tracing it
    (the one-class check after every fit predicts, so a first fit would trace it too)."""
    return stored_fit_program(_predict_probit, n_rows, (), ProbitPrediction)


class OrdinalProbit(UncertaintyMixin, SavableMixin, OrdinalEstimator):
    """Bayesian linear ordinal regression with a Laplace posterior.

    Latent ``f = x^T w``, ``P(y = k) = F((b_{k+1} - f)/sigma) - F((b_k - f)/sigma)``, prior
    ``w ~ N(0, alpha^{-1} I)`` (or ARD).  ``sigma`` is fixed to 1 (it is not identifiable
    with free thresholds), and there is no intercept (the thresholds absorb it).  The
    columns are centred inside the model, so shifting a column changes no prediction,
    band or coefficient; coefficients and thresholds are reported on the user's scale.
    Every probability integrates the joint posterior of the weights and the thresholds.
    See :mod:`bayesord._probit` for the maths.

    Args:
        thresholds: "evidence" (default): thresholds and ``alpha`` tuned by maximising the
            Laplace evidence (type-II ML); "joint": thresholds estimated with ``w`` for the
            fixed ``alpha`` given (``alpha=0`` is maximum likelihood).
        alpha: prior precision (scalar, or one per feature with ``prior="ard"``): the
            fixed value in "joint" mode; in "evidence" mode the prior of the joint fit that
            starts the search (its MacKay update is the first alpha).
        prior: "gaussian" or "ard".
        link: "probit" (default), "logit", "cloglog", "loglog" or "cauchit" (R's
            ``clm`` links; see :mod:`bayesord._links`).
        tol: relative tolerance of the solvers; default 1e-10 in float64, 1e-5 in float32.
        max_iter: cap on evidence (L-BFGS) iterations.
        max_newton: cap on Newton iterations per MAP solve.
        classes: the labels in increasing order (required for string labels).
        n_draws: posterior draws used for probability bands.
        random_state: seed (int) for the posterior draws.
        calibration_cv: None (default), or a number of folds: ``fit`` then ends with
            ``calibrate(X, y, cv=calibration_cv)`` (folds seeded from ``random_state``), so
            the fitted model has conformal prediction sets wherever it is fitted (a
            ``Pipeline``, a grid search).  Not with ``sample_weight`` (the copies are unweighted).
        class_weight: None, ``"balanced"`` (every class carries the same total weight:
            class k's rows are weighted by ``W / (K W_k)``, ``W_k`` its total sample
            weight), or a dict of label -> weight; multiplies ``sample_weight``.

    Attributes:
        classes_: labels in increasing order.
        coef_: posterior mean of w, shape (d,).
        coef_cov_: posterior covariance of w, shape (d, d).
        thresholds_: ordered thresholds of the latent ``x^T w`` (the cut points at
            ``x = 0``, as statsmodels and R's ``ordinal`` report them), shape (K-1,).
        thresholds_cov_: their covariance under the joint Laplace posterior of (w, b), at
            the joint MAP ("joint") or at the type-II optimum ("evidence").
        latent_thresholds_: the thresholds of the centred latent that
            :meth:`predict_latent` returns, shape (K-1,).
        noise_: the noise scale sigma (1).
        alpha_: prior precisions after fitting, shape (d,).
        log_evidence_: Laplace log evidence (Eq. 12 of the ISBOR paper).
        n_iter_: iterations of the solver (L-BFGS in "evidence" mode, Newton in "joint").
        converged_: whether every solve met its tolerance.
        result_: the functional :class:`bayesord._probit.ProbitResult`.

    Example:
        >>> from bayesord import OrdinalProbit
        >>> from bayesord.datasets import make_ordinal_probit
        >>> X, y, _ = make_ordinal_probit(300, 3, 4, seed=0)
        >>> model = OrdinalProbit().fit(X, y)
        >>> model.predict_proba(X[:2]).shape
        (2, 4)
    """

    _format = "bayesord.OrdinalProbit/2"
    _scale_sensitive = False  # the fit standardises the columns itself
    _one_class_hint = BAYES_ONE_CLASS_HINT
    _zero_weight_drops_row = True  # weighted sums throughout, the column moments included

    def __init__(self, thresholds="evidence", alpha=1.0, prior="gaussian", link="probit",
                 tol=None, max_iter=200, max_newton=100, classes=None, n_draws=200,
                 random_state=None, class_weight=None, calibration_cv=None):
        self.thresholds = thresholds
        self.alpha = alpha
        self.prior = prior
        self.link = link
        self.tol = tol
        self.max_iter = max_iter
        self.max_newton = max_newton
        self.classes = classes
        self.n_draws = n_draws
        self.random_state = random_state
        self.class_weight = class_weight
        self.calibration_cv = calibration_cv

    # ------------------------------------------------------------------ fitting
    def _config(self):
        check_positive_ints(self, "max_iter", "max_newton", "n_draws")
        return ProbitConfig(link=self.link, thresholds=self.thresholds, prior=self.prior,
                            max_newton=int(self.max_newton), max_outer=int(self.max_iter))

    def _alpha(self, d):
        alpha = np.asarray(self.alpha, dtype=np.float64)
        if alpha.ndim == 1 and self.prior != "ard":
            raise ValueError("a vector alpha needs prior='ard'")
        if alpha.ndim > 1 or (alpha.ndim == 1 and alpha.shape[0] != d):
            raise ValueError(f"alpha must be a scalar or have shape ({d},), got {alpha.shape}")
        if not np.all(np.isfinite(alpha)):
            raise ValueError("alpha must be finite")
        floor = 0.0 if self.thresholds == "joint" else np.finfo(float).tiny
        if np.any(alpha < floor):
            need = "non-negative" if self.thresholds == "joint" else "positive"
            raise ValueError(f"alpha must be {need} with thresholds={self.thresholds!r}")
        return alpha

    @fresh_fit
    def fit(self, X, y, sample_weight=None, classes=None):
        """Fit the posterior.  Labels may be any ordered values (see ``classes``).

        Args:
            X: (n, d) features.
            y: (n,) ordered labels.
            sample_weight: optional (n,) non-negative weights.
            classes: the labels in increasing order, as the constructor's ``classes``
                (either may be given; if both are, they must agree).

        Raises:
            ValueError: bad input (NaN/inf, mismatched lengths, one class, ...).
            FloatingPointError: the solver hit a non-finite value or a failed Cholesky.

        Warns:
            ConvergenceWarning: an iteration cap was reached; or, for maximum likelihood
                (``thresholds="joint"``, ``alpha=0``), the data do not determine the fit:
                dependent columns (named), or classes the columns separate.
        """
        X, codes, sw = self._validate_fit(X, y, sample_weight, classes)
        self.binary_columns_ = binary_columns(X)
        alpha = self._alpha(X.shape[1])
        dtype = float_dtype()
        offsets = host_offsets(X, dtype)
        # Rows of weight zero up to a bucket size: fits of nearby sizes share one program.
        rows = pad_rows(bucket_rows(X.shape[0]), X if offsets is None else X - offsets, codes, sw, dtype=dtype)
        res = _fit_program(rows[0].shape[0])(*rows, alpha.astype(dtype), solver_tol(self.tol, dtype),
                                             config=self._config(), n_classes=len(self.classes_))
        self._adopt(restore_offsets(jax.tree_util.tree_map(np.asarray, res), offsets), X, codes, sw, alpha)
        return self

    def _warn_if_no_evidence_optimum(self, res, X, codes, sw):
        """Warn (``ConvergenceWarning``) when an evidence fit's prior has no optimum; returns
        whether it warned.

        Where the columns separate the classes completely, the Laplace evidence keeps
        rising as the prior precision falls toward 0: the search drifts until its tolerance
        or its cap stops it, and the coefficients and sds are where it stopped.  Checked
        (:func:`classes_separated`, a linear program) only when the search ended with some
        ``alpha`` below :data:`_SEPARATION_ALPHA`.
        """
        if np.min(res.alpha) >= _SEPARATION_ALPHA or not classes_separated(X, codes, sw, len(self.classes_)):
            return False
        j = int(np.argmin(res.alpha))
        column = ""
        if self.prior == "ard":
            names = getattr(self, "feature_names_in_", None)
            column = f" for column {names[j]!r}" if names is not None else f" for column {j}"
        warn_user(f"OrdinalProbit.fit: {SEPARATED}, so the evidence keeps rising as the prior "
                  f"weakens. The search ended at alpha = {res.alpha[j]:.1e}{column} (a prior sd of "
                  f"{res.alpha[j] ** -0.5:.0f} per column sd) after {int(res.n_iter)} steps, and the "
                  "coefficients, their sds and the probabilities near 0 or 1 depend on where it stopped, "
                  "not on the data. Fix the prior instead, e.g. OrdinalProbit(thresholds='joint', "
                  "alpha=1.0), or drop the columns that separate the classes", convergence_warning())
        return True

    def _adopt(self, res, X, codes, sw, alpha):
        """Take a fit's result (NumPy arrays) as this estimator's, fitted on ``X`` (codes
        ``codes``) with weights ``sw`` and prior precision ``alpha``, and report its status:
        completely separated classes, where they leave the fit without an optimum, in one
        warning that says so (instead of the bare iteration cap)."""
        ml = self.thresholds == "joint" and np.any(alpha == 0)  # maximum likelihood
        reported = False
        if int(res.status) in (Status.SUCCESS, Status.MAX_ITER):
            if ml:
                reported = warn_if_separated(self, X, codes, sw, float(res.loglik), int(res.status) == Status.MAX_ITER,
                                             "Use thresholds='evidence' (the default) or alpha > 0")
            elif self.thresholds == "evidence":
                reported = self._warn_if_no_evidence_optimum(res, X, codes, sw)
        if not reported:
            hint = (f"the evidence search stopped at max_iter={self.max_iter}: give a larger one (e.g. "
                    f"max_iter={10 * self.max_iter})"
                    + (", as ARD's one prior precision per column often needs, or prior='gaussian'"
                       if self.prior == "ard" else ""))
            check_status(res.status, "OrdinalProbit.fit",
                         hints={Status.MAX_ITER: hint} if self.thresholds == "evidence" else None)
        self._set_result(res)
        self.log_evidence_ = float(res.log_evidence)
        self.n_iter_ = int(res.n_iter)
        self.converged_ = bool(res.converged)
        if ml and not reported:  # R's clm check
            warn_if_undetermined(self, self._standardised_cov(), X, sw, "use thresholds='evidence' (the "
                                 "default), whose tuned prior keeps every coefficient finite")

    def _batched_copies(self):
        # The joint fit is small to compile side by side; the evidence search is not.
        return self.thresholds == "joint"

    def _fit_copies(self, X, labels, weights, classes):
        """The copies of the joint-mode fit in one program
        (:func:`bayesord._probit.fit_probit_weights`), compiled with
        :data:`~bayesord._compile_cache.LIGHT_OPTIONS`: their fits are many and small (the
        probability layer of a margin model fits six)."""
        template = clone(self)
        X, codes, _ = template._validate_fit(X, labels, None, classes)
        template.binary_columns_ = binary_columns(X)
        alpha = template._alpha(X.shape[1])
        dtype = float_dtype()
        n = X.shape[0]
        offsets = host_offsets(X, dtype)
        X_pad, codes_pad = pad_rows(bucket_rows(n), X if offsets is None else X - offsets, codes, dtype=dtype)
        w_pad = np.zeros((weights.shape[0], X_pad.shape[0]), dtype)
        w_pad[:, :n] = weights
        program = stored_fit_program(fit_probit_weights, X_pad.shape[0], ("config", "n_classes"), ProbitResult,
                                     compile="light")
        res = program(X_pad, codes_pad, w_pad, alpha.astype(dtype), solver_tol(template.tol, dtype),
                      config=template._config(), n_classes=len(classes))
        return copies_of_batch(template, res, weights.shape[0], lambda fitted, r, j: fitted._adopt(
            restore_offsets(r, offsets), X, codes, weights[j], alpha))

    def _standardised_cov(self):
        """The joint posterior covariance of the standardised coefficients and the centred
        latent's thresholds: parameters that shifting or rescaling a column leaves alone."""
        res = self.result_
        cross = res.cross_cov * res.scale[:, None]
        return np.block([[res.coef_cov * np.outer(res.scale, res.scale), cross], [cross.T, res.thresholds_cov]])

    def _copy_params(self):
        """The cross-fitted copies of :meth:`calibrate` stop at a relative tolerance of
        :data:`_COPY_TOL` (or the model's own, when looser): they only score their held-out
        fold, and their probabilities then differ from a fit to 1e-10 by at most 3.2e-5 on
        three shared sets, against differences of order ``1/sqrt(n)`` between the folds' fits
        themselves; it saves 20-35% of each copy's time."""
        return {"tol": max(solver_tol(self.tol, float_dtype()), _COPY_TOL)}

    def _set_result(self, res):
        """The fitted attributes that follow from the functional result."""
        self.result_ = res
        self.coef_ = res.coef
        self.coef_cov_ = res.coef_cov
        thresholds, thresholds_cov, _ = thresholds_at_zero(res)
        self.thresholds_ = np.asarray(thresholds)
        self.thresholds_cov_ = np.asarray(thresholds_cov)
        self.latent_thresholds_ = np.asarray(res.thresholds)
        self.alpha_ = res.alpha

    # --------------------------------------------------------------- prediction
    def _device_inputs(self, X):
        """Validated rows ``X`` and the result, in the working float type, for a program;
        columns far from zero are centred here, in float64 (:func:`~bayesord._columns.host_offsets`)."""
        X, res = offset_rows(self._validate_predict(X), self.result_, float_dtype())
        return X, jax.tree_util.tree_map(lambda a: np.asarray(a, float_dtype()), res)

    def _predict_all(self, X, at_estimate=False):
        """The prediction program's outputs for the rows ``X``; with ``at_estimate`` the
        posterior's covariances are zero, so the same program gives the probabilities at
        the estimate of ``(w, b)``."""
        X, res = self._device_inputs(X)
        if at_estimate:
            res = res._replace(coef_cov=np.zeros_like(res.coef_cov), thresholds_cov=np.zeros_like(res.thresholds_cov),
                               cross_cov=np.zeros_like(res.cross_cov))
        n = X.shape[0]
        (X,) = pad_rows(bucket_rows(n), X, dtype=float_dtype())
        return jax.tree_util.tree_map(lambda a: np.asarray(a)[:n], _predict_program(X.shape[0])(res, X))

    def predict_proba(self, X, at_estimate=False):
        """Class probabilities, shape (n, K), columns in ``classes_`` order, rows summing to 1.

        The joint posterior of the weights and the thresholds is integrated exactly (probit;
        the probit approximation for the logit, quadrature for the other links), one
        predictive variance per threshold.  In float64 from the log-probabilities
        (:func:`~bayesord.estimators._base.proba_from_log`).

        ``at_estimate=True`` gives the probabilities at the estimate of ``(w, b)`` (the
        posterior mode) instead, without their uncertainty: with ``thresholds="joint",
        alpha=0`` the fitted probabilities of statsmodels' ``OrderedModel`` and R's
        ``clm``, which the predictive ones differ from by up to a few hundredths on a few
        hundred rows.
        """
        return proba_from_log(self._predict_all(X, at_estimate).log_proba)

    def predict_cumproba(self, X, at_estimate=False):
        """Cumulative probabilities ``P(y <= classes_[k])`` for k < K-1, shape (n, K-1)
        (``at_estimate``: as :meth:`predict_proba`)."""
        return np.asarray(self._predict_all(X, at_estimate).cum_proba, dtype=np.float64)

    def predict_latent(self, X):
        """Mean and posterior variance of the centred latent ``(x - c)^T w``, each (n,).

        ``c`` is the training rows' column means, so a shift of the columns changes neither;
        the class boundaries on this scale are ``latent_thresholds_`` (``thresholds_`` are
        those of ``x^T w``, the cut points at ``x = 0``: ``thresholds_ = latent_thresholds_
        + c^T w``).
        """
        p = self._predict_all(X)
        return np.asarray(p.mean, dtype=np.float64), np.asarray(p.var, dtype=np.float64)

    def predict(self, X, rule="mode", at_estimate=False):
        """Predicted labels: ``rule="mode"`` (most probable class, the default) or
        ``"median"`` (the smallest class whose cumulative probability reaches 1/2, which
        minimises the expected absolute error in class positions), of the predictive
        probabilities or, ``at_estimate=True``, of those at the estimate (statsmodels'
        plug-in mode; :meth:`predict_proba`)."""
        return self._decode(class_from_proba(self.predict_proba(X, at_estimate=at_estimate), rule))

    def predict_proba_interval(self, X, level=0.95):
        """Central credible band of each class probability under the posterior.

        Draws ``n_draws`` samples of (w, thresholds) from the Laplace posterior (thresholds
        in log-gap space so every draw is ordered) and returns per-class quantiles.

        Returns:
            (lower, upper, sd), each (n, K), with 0 <= lower <= upper <= 1.
        """
        X, res = self._device_inputs(X)
        lo, hi, sd = class_prob_bands(res, X.astype(float_dtype()), draws_key(self.random_state),
                                      level=level, n_draws=int(self.n_draws))
        return tuple(np.clip(np.asarray(a, dtype=np.float64), 0.0, 1.0) for a in (lo, hi, sd))

    def posterior_result(self):
        """The functional :class:`bayesord.ProbitResult` of the fit (its link in its
        ``config``) and the settings that label it (``classes``, ``feature_names``,
        ``model_name``): what :mod:`bayesord.diagnostics` dispatches on."""
        check_is_fitted(self, "coef_")
        names = getattr(self, "feature_names_in_", None)
        names = [f"x{j}" for j in range(len(self.coef_))] if names is None else list(names)
        return self.result_, dict(classes=self.classes_, feature_names=names,
                                  model_name=type(self).__name__)

    def to_inference_data(self, X, y, **kwargs):
        """ArviZ ``InferenceData`` with posterior draws, log-likelihood and predictions.

        See :func:`bayesord.diagnostics.to_inference_data` for the groups and arguments.
        """
        return diagnostics.to_inference_data(self, X, y, **kwargs)

    # ------------------------------------------------------------------ summary
    def summary(self, level=0.95):
        """Posterior mean, sd and a central interval for every coefficient and threshold.

        Returns:
            pandas DataFrame indexed by parameter name.
        """
        _, settings = self.posterior_result()
        names = settings["feature_names"]
        thr_names = threshold_names(self.classes_)
        mean = np.concatenate([self.coef_, self.thresholds_])
        sd = np.sqrt(np.concatenate([np.diag(self.coef_cov_), np.diag(self.thresholds_cov_)]))
        return posterior_table(names + thr_names, mean, sd, level)

    def marginal_effects(self, X, level=0.95):
        """Average marginal effects of each column on every class probability and on the
        expected class, with delta-method sds and central intervals.

        A column that was 0/1 in the training data (a dummy, e.g. ``temp[T.warm]``) gets the
        average change from 0 to 1; any other column the average derivative (per unit of
        that column).  Pass the data to average over them, or one row to get the effects at
        those values; a model fitted from a formula takes a DataFrame.  Probabilities are at
        the posterior mode, and the sds propagate the joint posterior of the coefficients and
        thresholds (delta method); the expected class is :meth:`predict_expected`'s.  See
        :func:`bayesord._probit.marginal_effects_probit`.

        Returns:
            pandas DataFrame indexed by (term, outcome): outcome is ``P(y=<class>)`` or
            ``E[class]``; columns ``kind`` ("change 0->1" or "slope"), mean, sd and the
            interval.
        """
        X, res = self._device_inputs(X)
        effects = program_for_rows(marginal_effects_probit, X.shape[0])
        effect, sd = effects(res, X.astype(float_dtype()), self.binary_columns_, self._expected_values())
        names = self.posterior_result()[1]["feature_names"]
        return marginal_effects_table(effect, sd, names, self.classes_, self.binary_columns_, level)

    # ------------------------------------------------------------ persistence
    def _saved_state(self):
        arrays = {f"result.{k}": v for k, v in self.result_._asdict().items()}
        arrays["binary_columns_"] = np.asarray(self.binary_columns_)
        return arrays, {"scalars": {"log_evidence_": self.log_evidence_, "n_iter_": self.n_iter_,
                                    "converged_": self.converged_}}

    def _restore(self, arrays, meta):
        res = ProbitResult(config=self._config(), **{k: arrays[f"result.{k}"] for k in ProbitResult._fields})
        d, k1 = int(self.n_features_in_), len(self.classes_) - 1
        self._check_shapes(("result.center", res.center, (d,)), ("result.scale", res.scale, (d,)),
                           ("result.coef_cov", res.coef_cov, (d, d)),
                           ("result.cross_cov", res.cross_cov, (d, k1)),
                           ("result.thresholds_cov", res.thresholds_cov, (k1, k1)))
        self._set_result(res)
        # Files written before marginal effects existed do not record which columns were
        # 0/1; such a model takes the derivative for every column.
        binary = arrays.get("binary_columns_", np.zeros(d, bool))
        self._check_shapes(("binary_columns_", binary, (d,)))
        self.binary_columns_ = np.asarray(binary, bool)
        for k, v in meta["scalars"].items():
            setattr(self, k, v)
