"""ArviZ export and PSIS-LOO model comparison for the Bayesian models.

The Bayesian fits of this library (the ordinal probit, ISBOR and SBOR) end in a
Gaussian (Laplace) posterior over their weights and thresholds, with hyperparameters
(the noise scale, the prior precisions) set by type-II maximum likelihood.
:func:`to_inference_data` draws from that Gaussian and writes an
:class:`arviz.InferenceData` with

* ``posterior``: the drawn parameters (``coef`` over ``feature`` for the probit,
  ``weights`` over ``relevance_vector`` for ISBOR/SBOR, ``thresholds`` over ``cut``);
* ``constant_data``: the type-II ML point estimates (``sigma``, ``alpha``);
* ``log_likelihood``: ``y`` with ``log P(y_i | draw)`` for every draw and row, which is
  what :func:`arviz.loo` and :func:`arviz.compare` need;
* ``posterior_predictive``: ``y`` drawn from each draw's class probabilities;
* ``observed_data``: ``y``.

Draws are independent, so ``r_hat`` is 1 and the effective sample size is the number of
draws up to Monte Carlo noise; they describe the Laplace approximation, not the exact
posterior.  PSIS-LOO from these draws estimates the leave-one-out predictive density
without refitting; ArviZ's Pareto-k warning (k above ``min(1 - 1/log10 S, 0.7)`` for
S draws) says where that estimate is not to be trusted, and :func:`loo` repeats it with
the count of such rows.

**Adding a model.**  A model takes part by registering a :class:`LaplacePosterior`
factory with :func:`laplace_posterior` (``@laplace_posterior.register(TheResultType)``):
the flat Gaussian's mean and covariance, a function from flat draws to named parameters,
the point-estimated hyperparameters, ArviZ dims and coords, and a JAX-traceable function
giving one draw's log class probabilities for inputs X.  Everything else (sampling,
chunking over draws, the groups, LOO) is shared.
"""

from __future__ import annotations

import warnings
from functools import lru_cache, partial, singledispatch
from typing import Any, Callable, Mapping, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from ._basis import kernel_matrix
from ._clm import CLMResult, _columns_of, _natural as _clm_natural
from ._isbor import Action, ISBORResult, weight_cov
from ._laplace import gap_space_gaussian
from ._likelihood import LINKS, log_class_probs
from ._precision import jit
from ._probit import ProbitResult
from ._results import check_settings
from ._status import warn_user
from ._thresholds import thresholds_from_params

__all__ = [
    "LaplacePosterior",
    "laplace_posterior",
    "to_inference_data",
    "loo",
    "compare",
    "relevance_table",
    "plot_evidence_trace",
    "plot_relevance_vectors",
    "ACTION_NAMES",
]

class LaplacePosterior(NamedTuple):
    """What :func:`to_inference_data` needs from a fitted Bayesian model."""

    model: str
    """Name of the model (stored in the InferenceData's attributes)."""
    mean: np.ndarray
    """Mean of the Gaussian posterior in its sampling space, shape (p,)."""
    cov: np.ndarray
    """Covariance of the Gaussian posterior, shape (p, p); may be singular (a zero block
    for a parameter held at a point estimate)."""
    unpack: Callable[[jax.Array], dict]
    """Maps flat draws (S, p) to named parameters, each of shape (S, ...)."""
    fixed: dict
    """Point-estimated hyperparameters (name -> array), repeated across draws."""
    dims: dict
    """ArviZ dims: parameter name -> tuple of dimension names (draw dims excluded)."""
    coords: dict
    """ArviZ coords: dimension name -> labels."""
    log_class_probs: Callable[[dict, jax.Array], jax.Array]
    """JAX-traceable: (one draw's parameters, drawn and fixed together; X (n, d)) -> log
    class probabilities (n, K).  A function created once (module level), so that repeated
    exports of same-shaped data reuse the compiled code."""
    classes: np.ndarray
    """Class labels, lowest first (K,)."""
    data: Any = None
    """Arrays ``log_class_probs`` needs besides the parameters (name -> array; e.g. the
    relevance vectors and kernel width of ISBOR), passed to it with each draw but not
    written to the InferenceData.  Keeping them out of the function lets one compiled
    function serve every fit of the same kernel."""


@singledispatch
def laplace_posterior(model, **kwargs) -> LaplacePosterior:
    """The :class:`LaplacePosterior` of a fitted Bayesian model.

    Dispatches on the functional result: registered for :class:`bayesord.ProbitResult`,
    :class:`bayesord.ISBORResult` (weights over the relevance vectors and thresholds;
    sigma and alpha as type-II ML point estimates) and :class:`bayesord._clm.CLMResult`
    (the maximum-likelihood fit under a flat prior); the link, kernel and degree are read
    from the result's ``config``; ``classes=`` and ``feature_names=`` label the output.  A
    fitted estimator (:class:`bayesord.OrdinalProbit`, :class:`bayesord.ISBOR`,
    :class:`bayesord.SBOR`, :class:`bayesord.CumulativeLinkModel`) is read through its
    ``posterior_result()``, which returns its result and those settings.

    Raises:
        TypeError: the model has no posterior (margin models: SVMs, perceptrons).
    """
    read = getattr(model, "posterior_result", None)
    if callable(read):
        result, settings = read()
        if type(result) in laplace_posterior.registry:
            return laplace_posterior(result, **settings, **kwargs)
    names = sorted({getattr(t, "__name__", str(t)) for t in laplace_posterior.registry
                    if t is not object})
    raise TypeError(
        f"{type(model).__name__} has no posterior to export; to_inference_data, loo and "
        f"compare work with the models that have one: OrdinalProbit, ISBOR, SBOR, "
        f"CumulativeLinkModel (a flat prior), OrdinalMixed (its own method) and the "
        f"functional results {', '.join(names)}"
    )


def _make_probit_log_probs(link):
    def log_probs(params, X):
        f = X @ params["coef"]
        scale = jnp.broadcast_to(params["sigma"], f.shape)
        return log_class_probs(f, scale, params["thresholds"], link)

    return log_probs


_PROBIT_LOG_PROBS = {link: _make_probit_log_probs(link) for link in LINKS}


def _probit_posterior(result: ProbitResult, link, classes, feature_names,
                      model_name) -> LaplacePosterior:
    res = jax.tree_util.tree_map(np.asarray, result)
    d = res.coef.shape[0]
    k1 = res.thresholds.shape[0]
    # The joint Gaussian of (w, b) is drawn in the centred model's coordinates, thresholds
    # in (b_1, log-gap) space so every draw is ordered; each draw's thresholds are then
    # moved to x = 0 (b + center^T w), the scale of the coefficients.
    mean, cov = (np.asarray(a) for a in gap_space_gaussian(res.coef, res.coef_cov, res.cross_cov,
                                                          res.thresholds, res.thresholds_cov))
    center = jnp.asarray(res.center)

    def unpack(flat):
        coef = flat[:, :d]
        centred = jax.vmap(thresholds_from_params)(flat[:, d:])
        return {"coef": coef, "thresholds": centred + (coef @ center)[:, None]}

    cls = [str(c) for c in classes]
    coords = {"feature": list(feature_names),
              "cut": [f"{cls[k]}|{cls[k + 1]}" for k in range(k1)]}
    dims = {"coef": ("feature",), "thresholds": ("cut",), "alpha": ("feature",), "sigma": ()}
    fixed = {"sigma": np.asarray(res.sigma, dtype=np.float64),
             "alpha": np.asarray(res.alpha, dtype=np.float64)}
    return LaplacePosterior(model_name, mean, cov, unpack, fixed, dims, coords,
                            _PROBIT_LOG_PROBS[link], np.asarray(classes))


@laplace_posterior.register(ProbitResult)
def _(result, *, link=None, classes=None, feature_names=None, model_name="ordinal probit", **kwargs):
    check_settings(result.config, link=link)
    k = result.thresholds.shape[0] + 1
    d = result.coef.shape[0]
    classes = np.arange(k) if classes is None else np.asarray(classes)
    names = [f"x{j}" for j in range(d)] if feature_names is None else list(feature_names)
    return _probit_posterior(result, result.config.link, classes, names, model_name)


@lru_cache(maxsize=None)
def _clm_log_probs(link):
    """One draw's log class probabilities of a cumulative link model from its parameters on
    the user's columns (model (1) of :mod:`bayesord._clm`: thresholds ``b_k + a_nom^T
    gamma_k``, latent mean ``a_loc^T beta``, scale ``exp(a_sca^T zeta)``); one function
    object per link, so ``_pointwise`` reuses its compiled program."""

    def log_probs(params, A):
        f = A[:, params["location"]] @ params["coef"]
        B = params["thresholds"] + (A[:, params["nominal"]] @ params["nominal_coef"] if "nominal_coef" in params
                                    else 0.0)
        sigma = jnp.exp(A[:, params["scale_columns"]] @ params["scale_coef"]) if "scale_coef" in params else 1.0
        a = (B - f[:, None]) / jnp.broadcast_to(sigma, f.shape)[:, None]
        return log_class_probs(jnp.zeros_like(f), jnp.ones_like(f), a, link)

    return log_probs


@laplace_posterior.register(CLMResult)
def _(result, *, link=None, classes=None, feature_names=None, nominal_names=None, scale_names=None,
      model_name="cumulative link model", **kwargs):
    """The maximum-likelihood fit read as the Laplace posterior under a flat prior (as its
    bands are): drawn in the fit's own parameters (thresholds as the first and log-gaps,
    so every draw's are ordered) and mapped to the user's columns as the fit maps its
    estimate."""
    check_settings(result.config, link=link)
    res = jax.tree_util.tree_map(np.asarray, result)
    if not np.all(np.isfinite(res.eta_cov)):
        raise ValueError("the fit's covariance is not finite: its Laplace posterior has nothing to draw from")
    cols = _columns_of(res)
    d, k1, p, r = res.coef.shape[0], res.thresholds.shape[0], res.nominal.shape[0], res.scale_columns.shape[0]
    classes = np.arange(k1 + 1) if classes is None else np.asarray(classes)
    cls = [str(c) for c in classes]
    coords = {"feature": [f"x{j}" for j in res.location] if feature_names is None else list(feature_names),
              "cut": [f"{cls[k]}|{cls[k + 1]}" for k in range(k1)]}
    dims = {"coef": ("feature",), "thresholds": ("cut",)}
    if p:
        coords["nominal_feature"] = [f"x{j}" for j in res.nominal] if nominal_names is None else list(nominal_names)
        dims["nominal_coef"] = ("nominal_feature", "cut")
    if r:
        coords["scale_feature"] = [f"x{j}" for j in res.scale_columns] if scale_names is None else list(scale_names)
        dims["scale_coef"] = ("scale_feature",)
    center, scale = jnp.asarray(res.center), jnp.asarray(res.scale)

    def unpack(flat):
        nat = jax.vmap(lambda e: _clm_natural(e, center, scale, cols, k1))(flat)
        out = {"coef": nat[:, :d], "thresholds": nat[:, d:d + k1]}
        if p:
            out["nominal_coef"] = nat[:, d + k1:d + k1 + p * k1].reshape(-1, p, k1)
        if r:
            out["scale_coef"] = nat[:, d + k1 + p * k1:]
        return out

    data = {"location": res.location, "nominal": res.nominal, "scale_columns": res.scale_columns}
    return LaplacePosterior(model_name, res.eta, res.eta_cov, unpack, {}, dims, coords,
                            _clm_log_probs(result.config.link), classes, data)


@lru_cache(maxsize=None)
def _sparse_log_probs(kernel, degree, link):
    """One draw's log class probabilities of an ISBOR/SBOR fit: one function object per
    (kernel, degree, link), so ``_pointwise`` (static in it) reuses its compiled program."""

    def log_probs(params, X):
        if kernel == "precomputed":
            Phi = jnp.take(X, params["columns"], axis=1)
        else:
            Z = (X - params["center"]) / params["scale"]
            Phi = kernel_matrix(Z, params["centres"], params["theta"], kernel, degree)
        f = Phi @ params["weights"]
        return log_class_probs(f, jnp.broadcast_to(params["sigma"], f.shape),
                               params["thresholds"], link)

    return log_probs


def _sparse_posterior(result, kernel, degree, link, classes, model_name,
                      feature_names=None) -> LaplacePosterior:
    """The joint Gaussian over the active relevance-vector weights and the thresholds of an
    ISBOR/SBOR result (thresholds drawn in (b_1, log-gap) space, so every draw is ordered).

    Besides the held values (sigma, alpha), the constants hold ``location``:
    each relevance vector's training row in the user's feature units, (relevance_vector,
    feature), so the vectors can be read in feature space (not for a precomputed kernel).
    """
    res = jax.tree_util.tree_map(np.asarray, result)
    mask = res.mask.astype(bool)
    rows = res.relevance_index[mask].astype(np.int64)
    mean, cov = (np.asarray(a, dtype=np.float64) for a in gap_space_gaussian(
        res.w[mask], np.asarray(weight_cov(result))[np.ix_(mask, mask)], res.cross_cov[mask],
        res.b, res.thresholds_cov))
    m = int(mask.sum())
    k = res.b.shape[0] + 1
    classes = np.arange(k) if classes is None else np.asarray(classes)
    if classes.shape != (k,):
        raise ValueError(f"classes must list the fit's {k} classes, got {classes.shape[0]}")
    cls = [str(c) for c in classes]
    coords = {"relevance_vector": [int(i) for i in rows],
              "cut": [f"{cls[j]}|{cls[j + 1]}" for j in range(k - 1)]}
    dims = {"weights": ("relevance_vector",), "alpha": ("relevance_vector",),
            "thresholds": ("cut",), "sigma": ()}
    fixed = {"sigma": np.asarray(res.sigma, dtype=np.float64),
             "alpha": np.asarray(res.alpha, dtype=np.float64)[mask]}
    if kernel != "precomputed":
        d = res.centres.shape[1]
        coords["feature"] = [f"x{j}" for j in range(d)] if feature_names is None else [str(f) for f in feature_names]
        dims["location"] = ("relevance_vector", "feature")
        fixed["location"] = (np.asarray(res.centres, dtype=np.float64)[mask] * res.scale + res.center)
    data = {"centres": np.asarray(res.centres, dtype=np.float64)[mask],
            "theta": np.asarray(res.theta, dtype=np.float64),
            "center": np.asarray(res.center, dtype=np.float64),
            "scale": np.asarray(res.scale, dtype=np.float64),
            "columns": rows.astype(np.int32)}

    def unpack(flat):
        return {"weights": flat[:, :m], "thresholds": jax.vmap(thresholds_from_params)(flat[:, m:])}

    return LaplacePosterior(model_name, mean, cov, unpack, fixed, dims, coords,
                            _sparse_log_probs(kernel, int(degree), link), classes, data)


@laplace_posterior.register(ISBORResult)
def _(result, *, kernel=None, degree=None, link=None, classes=None, feature_names=None,
      model_name="ISBORResult", **kwargs):
    check_settings(result.config, kernel=kernel, degree=degree, link=link)
    c = result.config
    return _sparse_posterior(result, c.kernel, c.degree, c.link, classes, model_name, feature_names)


def _as_key(key):
    if key is None:
        return jax.random.key(0)
    if isinstance(key, (int, np.integer)) and not isinstance(key, bool):
        return jax.random.key(int(key))
    return key


def _gaussian_draws(mean, cov, key, n):
    # Symmetric square root by eigh: works for the singular covariances of held parameters.
    evals, evecs = np.linalg.eigh(0.5 * (cov + cov.T))
    root = evecs * np.sqrt(np.clip(evals, 0.0, None))
    z = np.asarray(jax.random.normal(key, (n, mean.shape[0]), dtype=jnp.float64
                                     if jax.config.read("jax_enable_x64") else jnp.float32))
    return mean + z @ root.T


def _check_draws(name, value):
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return int(value)


def _observed_codes(y, classes):
    y = np.asarray(y)
    if y.ndim != 1:
        raise ValueError(f"y must be one-dimensional, got shape {y.shape}")
    codes = np.full(y.shape, -1, dtype=np.int64)
    for k, c in enumerate(classes):
        codes[y == c] = k
    if np.any(codes < 0):
        unknown = sorted({str(v) for v in y[codes < 0]})[:5]
        raise ValueError(f"y has labels not among the model's classes {list(classes)}: {unknown}")
    return codes


@partial(jit, static_argnums=(0, 1))
def _pointwise(log_probs, block, draws, fixed, X, y, keys):
    """Pointwise log-likelihood (S, n) and posterior-predictive classes (S, n)."""

    def one(args):
        p, k = args
        logp = log_probs({**p, **fixed}, X)
        loglik = jnp.take_along_axis(logp, y[:, None], axis=1)[:, 0]
        return loglik, jax.random.categorical(k, logp, axis=1)

    return jax.lax.map(one, (draws, keys), batch_size=block)


def to_inference_data(model, X, y, *, draws: int = 500, chains: int = 4, key=None,
                      block: int = 256, **kwargs):
    """An :class:`arviz.InferenceData` of a fitted Bayesian model's Laplace posterior.

    Args:
        model: a fitted :class:`bayesord.OrdinalProbit`, :class:`bayesord.ISBOR`,
            :class:`bayesord.SBOR` or :class:`bayesord.CumulativeLinkModel`; or a
            :class:`bayesord.ProbitResult` or :class:`bayesord.ISBORResult` (its link,
            kernel and degree are in its ``config``; optionally pass ``classes=`` and
            ``feature_names=``).
        X: inputs whose observed labels are ``y`` (usually the training data), (n, d).
        y: observed labels, shape (n,), in the model's classes.
        draws: draws per chain.
        chains: independent chains (the draws are independent; chains let ArviZ's
            r_hat and ESS be computed as usual).
        key: a ``jax.random`` key or an int seed (default 0).
        block: draws evaluated at a time (memory O(block * n * K)).

    Returns:
        InferenceData with groups posterior (the drawn parameters), constant_data (those
        held at their estimate: ``sigma`` and ``alpha``; for
        ISBOR/SBOR also ``location``, each relevance vector's training row in the user's
        feature units, dims (relevance_vector, feature)),
        log_likelihood, posterior_predictive, observed_data; dims ``chain``, ``draw``,
        ``obs_id`` and the model's parameter dims.

    Raises:
        TypeError: the model has no posterior (SVMs, perceptrons).
        ValueError: X and y disagree in length, y has unknown labels, bad draw counts.

    Example:
        >>> import arviz as az
        >>> from bayesord import OrdinalProbit
        >>> from bayesord.datasets import make_ordinal_probit
        >>> X, y, _ = make_ordinal_probit(200, 2, 3, seed=0)
        >>> idata = to_inference_data(OrdinalProbit().fit(X, y), X, y, draws=100)
        >>> sorted(idata.groups())
        ['constant_data', 'log_likelihood', 'observed_data', 'posterior', 'posterior_predictive']
    """
    import arviz as az

    post = laplace_posterior(model, **kwargs)
    draws = _check_draws("draws", draws)
    chains = _check_draws("chains", chains)
    block = _check_draws("block", block)
    # An estimator checks X against what it was fitted on and applies the input transform a
    # model made by `bayesord fit` carries; a functional result takes X as it is.
    validate = getattr(model, "_validate_predict", None)
    X = np.asarray(X if validate is None else validate(X), dtype=np.float64)
    if X.ndim != 2:
        raise ValueError(f"X must be two-dimensional, got shape {X.shape}")
    codes = _observed_codes(y, post.classes)
    if X.shape[0] != codes.shape[0]:
        raise ValueError(f"X has {X.shape[0]} rows but y has {codes.shape[0]}")
    if not np.all(np.isfinite(X)):
        raise ValueError("X contains NaN or inf")
    n_total = draws * chains
    key_draw, key_pred = jax.random.split(_as_key(key))
    flat = _gaussian_draws(post.mean, post.cov, key_draw, n_total)
    params = {k: np.asarray(v) for k, v in post.unpack(jnp.asarray(flat)).items()}
    Xj = jnp.asarray(X, dtype=flat.dtype)
    yj = jnp.asarray(codes, dtype=jnp.int32)

    keys = jax.random.split(key_pred, n_total)
    fixed = {k: jnp.asarray(v, dtype=flat.dtype) for k, v in post.fixed.items()}
    for k, v in (post.data or {}).items():
        v = np.asarray(v)
        fixed[k] = jnp.asarray(v, dtype=flat.dtype if v.dtype.kind == "f" else v.dtype)
    loglik, pred = _pointwise(post.log_class_probs, block,
                              jax.tree_util.tree_map(jnp.asarray, params), fixed, Xj, yj, keys)
    loglik = np.asarray(loglik, dtype=np.float64)
    pred = np.asarray(pred)

    # Numeric labels are kept as such; other labels become positions 0..K-1.
    numeric = post.classes.dtype.kind in "biuf"
    values = post.classes if numeric else np.arange(len(post.classes))

    def per_chain(a):
        return a.reshape((chains, draws) + a.shape[1:])

    posterior = {k: per_chain(v) for k, v in params.items()}
    # Values held at their estimate (the noise, the prior precisions) are
    # constants, not draws: in the posterior group they would get NaN r_hat and warnings.
    constants = {name: np.asarray(value) for name, value in post.fixed.items()}
    dims = {k: list(v) for k, v in post.dims.items()}
    dims["y"] = ["obs_id"]
    coords = dict(post.coords)
    coords["obs_id"] = np.arange(X.shape[0])
    attrs = {"model": post.model, "inference": "Laplace approximation (independent draws)",
             "classes": [str(c) for c in post.classes], "library": "bayesord"}
    return az.from_dict(
        posterior=posterior,
        log_likelihood={"y": per_chain(loglik)},
        posterior_predictive={"y": per_chain(values[pred])},
        observed_data={"y": values[codes]},
        constant_data=constants,
        coords=coords, dims=dims, attrs=attrs,
    )


FLAT_SPREAD = 1e-3
"""Rows whose pointwise log-likelihood varies by less than this across draws get the plain
importance-sampling LOO value and Pareto k = 0 (see :func:`loo`): their importance ratios
lie within a factor exp(1e-3) of each other, so plain importance sampling is exact to
O(1e-6) and the ratios, being bounded, have a Pareto shape k <= 0."""


def _psis_loo(idata):
    """``az.loo(pointwise=True)``, repaired where ArviZ's Pareto fit breaks down.

    A row predicted with probability ~1 by every draw has log-likelihood ~0 in all of
    them, and a sharp fit often gives exactly 0 in many draws: the largest importance
    ratios are then tied, the Pareto tail fit divides 0 by 0, and ArviZ returns a NaN
    ``loo_i`` (so a NaN ``elpd_loo``).  Ratios bounded like that need no smoothing:

    * rows with a log-likelihood spread across draws below :data:`FLAT_SPREAD` get the
      plain importance-sampling value ``-log mean_s exp(-loglik_s)`` (exact to
      O(spread^2)) and k = 0 (bounded ratios have a Pareto shape k <= 0);
    * other rows ArviZ leaves non-finite get truncated importance sampling (ratios capped
      at sqrt(S) times their mean; Ionides 2008); their k is 0 when the tail ArviZ fits
      (its largest ``min(0.2 S, 3 sqrt(S))`` ratios) is tied at the maximum, else ArviZ's
      value (inf stays inf, and is flagged by :func:`loo`).
    """
    import arviz as az
    from scipy.special import logsumexp

    ll = idata.log_likelihood["y"]
    ll = ll.values.reshape(ll.shape[0] * ll.shape[1], -1)  # (draws, rows)
    s = ll.shape[0]
    with warnings.catch_warnings():
        # ArviZ's own warning is repeated by loo() with the count of affected rows; the
        # divide-by-zero warnings come from the rows repaired below.
        warnings.filterwarnings("ignore", message="Estimated shape parameter of Pareto")
        warnings.filterwarnings("ignore", category=RuntimeWarning, module="arviz")
        res = az.loo(idata, pointwise=True)
    loo_i = res.loo_i.copy()
    k = np.array(res.pareto_k, copy=True)
    flat = (ll.max(0) - ll.min(0)) < FLAT_SPREAD
    broken = ~flat & (~np.isfinite(loo_i.values) | ~np.isfinite(k)) & np.all(np.isfinite(ll), axis=0)
    if not np.any(flat | broken):
        return res
    # -log mean_s exp(-ll_s), written around the row mean so nothing cancels.
    mid = ll[:, flat].mean(0)
    loo_i.values[flat] = mid - np.log1p(np.mean(np.expm1(mid - ll[:, flat]), axis=0))
    k[flat] = 0.0
    if np.any(broken):
        lr = -ll[:, broken]
        lr = lr - lr.max(0)
        cap = np.log(np.sqrt(s)) + logsumexp(lr, axis=0) - np.log(s)
        lw = np.minimum(lr, cap)
        loo_i.values[broken] = logsumexp(lw + ll[:, broken], axis=0) - logsumexp(lw, axis=0)
        m_tail = int(np.ceil(min(0.2 * s, 3 * np.sqrt(s))))
        tied = np.sort(lr, axis=0)[-m_tail] == 0.0
        k[np.flatnonzero(broken)[tied]] = 0.0
    lppd = float(np.sum(logsumexp(ll, axis=0) - np.log(s)))
    elpd = float(np.sum(loo_i.values))
    res = res.copy()
    res["loo_i"], res["pareto_k"] = loo_i, res.pareto_k.copy(data=k)
    res["elpd_loo"] = elpd
    res["se"] = float(np.sqrt(loo_i.size * np.var(loo_i.values)))
    res["p_loo"] = lppd - elpd
    res["warning"] = bool(np.any(k > res.get("good_k", 0.7)))
    return res


def loo(model_or_idata, X=None, y=None, **kwargs):
    """PSIS-LOO of a fitted Bayesian model (or of an InferenceData from
    :func:`to_inference_data`), with the Pareto-k diagnostic surfaced.

    Rows whose log-likelihood is flat across draws, or whose largest importance ratios
    are tied (predicted with probability ~1 by many draws, common for a sharp ISBOR fit),
    break ArviZ's Pareto fit (NaN); they get plain or truncated importance sampling
    instead (see ``_psis_loo`` in the source) and k = 0.

    Args:
        model_or_idata: a fitted Bayesian model (then give X, y) or an InferenceData.
        X: the inputs the model was fitted on, (n, d).
        y: the labels the model was fitted on, (n,).
        **kwargs: passed to :func:`to_inference_data` (draws, chains, key, ...).

    Returns:
        ArviZ's ``ELPDData`` (pointwise), with ``elpd_loo``, ``p_loo``, ``pareto_k``,
        ``good_k`` (ArviZ's threshold ``min(1 - 1/log10(S), 0.7)`` for S draws).

    Warns:
        UserWarning: naming how many rows have Pareto k above ``good_k`` (their LOO
            estimate is unreliable; refit without them or use K-fold CV for those rows).
    """
    import arviz as az

    idata = model_or_idata
    if not isinstance(idata, az.InferenceData):
        if X is None or y is None:
            raise ValueError("give X and y to compute LOO from a fitted model")
        idata = to_inference_data(model_or_idata, X, y, **kwargs)
    res = _psis_loo(idata)
    k = np.asarray(res.pareto_k)
    good = float(res.get("good_k", 0.7))
    bad = int(np.sum(k > good))
    if bad:
        warn_user(f"PSIS-LOO: {bad} of {k.size} rows have Pareto k > {good:.2f} (max {k.max():.2f}); "
                  "their leave-one-out estimates are unreliable")
    return res


def compare(models: Mapping[str, Any], X=None, y=None, **kwargs):
    """Rank fitted Bayesian models (or InferenceData objects) by PSIS-LOO.

    Args:
        models: name -> fitted model or InferenceData; all on the same rows.
        X: the inputs (needed for fitted models), (n, d).
        y: the labels (needed for fitted models), (n,).
        **kwargs: passed to :func:`to_inference_data`.

    Returns:
        :func:`arviz.compare`'s DataFrame (rank 0 is the best expected log predictive
        density) of the :func:`loo` results, each of which warns about its rows with a
        high Pareto k; the table's ``warning`` column flags those models.
    """
    import arviz as az

    if len(models) < 2:
        raise ValueError("compare needs at least two models")
    elpds = {}
    for name, m in models.items():
        idata = m if isinstance(m, az.InferenceData) else to_inference_data(m, X, y, **kwargs)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            elpds[name] = loo(idata)
        for w in caught:
            warn_user(f"{name}: {w.message}", w.category)
    return az.compare(elpds, ic="loo")



# ------------------------------------------------------------ relevance-vector diagnostics
# For the sparse Bayesian kernel models (ISBOR/SBOR).  Each helper takes a fitted
# estimator (bayesord.ISBOR / bayesord.SBOR) or an ISBORResult, or the arrays themselves.


def _isbor_result(obj):
    """``obj`` itself when it is an :class:`bayesord.ISBORResult`; the result of a fitted
    ISBOR/SBOR estimator (read through its ``posterior_result()``); else None."""
    if isinstance(obj, ISBORResult):
        return obj
    read = getattr(obj, "posterior_result", None)
    if callable(read):
        result = read()[0]
        if isinstance(result, ISBORResult):
            return result
    return None


def _sparse_fit(obj):
    """(indices, alpha, weights, weights_sd, evidence trace, action names) of a fit, or None."""
    res = _isbor_result(obj)
    if res is None:
        return None
    res = jax.tree_util.tree_map(np.asarray, res)
    if res.mask.ndim != 1:
        raise ValueError("a batched (vmapped) ISBORResult holds several fits; pass one of them")
    mask = res.mask.astype(bool)
    sd = np.sqrt(np.diag(np.asarray(weight_cov(jax.tree_util.tree_map(jnp.asarray, res))))[mask])
    n_it = int(res.n_iter)
    actions = [_action_name(Action(int(a))) for a in res.action_trace[:n_it]]
    return (res.relevance_index[mask].astype(np.int64), res.alpha[mask], res.w[mask], sd,
            res.evidence_trace[: n_it + 1], actions)


def _action_name(action) -> str:
    return {"REESTIMATE": "re-estimate", "REESTIMATE_ALL": "re-estimate all"}.get(action.name,
                                                                                action.name.lower())


ACTION_NAMES = ("add", "re-estimate", "re-estimate all", "delete", "prune", "rejected", "none")
"""The actions an ISBOR/SBOR iteration reports (:class:`bayesord._isbor.Action`), as
plotted by :func:`plot_evidence_trace`."""


def _action_names(actions) -> list:
    out = []
    for a in np.asarray(actions).tolist():
        if isinstance(a, str):  # a plotted name, or an Action's name ("reestimate_all")
            name = _action_name(Action[a.upper()]) if a.upper() in Action.__members__ else a.lower()
        elif isinstance(a, int) and not isinstance(a, bool) and a in set(Action):
            name = _action_name(Action(a))
        else:
            name = None
        if name not in ACTION_NAMES:
            raise ValueError(f"unknown action {a!r}: give names {ACTION_NAMES} or Action codes "
                             f"{[int(c) for c in Action]}")
        out.append(name)
    return out


def relevance_table(indices, alpha=None, weights=None, weights_sd=None):
    """One row per relevance vector: its training row (0-based position, ``X.iloc[row]``
    whatever a DataFrame's index), precision and weight; for an estimator fitted on a
    DataFrame whose index is not the positions, the row's index ``label`` as well.

    Call it with a fitted :class:`bayesord.ISBOR` / :class:`bayesord.SBOR` (or an
    :class:`bayesord.ISBORResult`), ``relevance_table(model)``, or with the arrays.

    Args:
        indices: a fitted ISBOR/SBOR estimator or result; or the training-row indices of
            the relevance vectors, shape (M,).
        alpha: their prior precisions, shape (M,) (arrays form only).
        weights: their posterior mean weights, shape (M,) (arrays form only).
        weights_sd: posterior standard deviations of the weights, shape (M,) (optional).

    Returns:
        pandas DataFrame indexed by ``row`` with ``alpha``, ``weight`` (and ``weight_sd``,
        ``label``), sorted by decreasing ``|weight|``.
    """
    import pandas as pd

    labels = getattr(indices, "relevance_labels_", None)
    fit = _sparse_fit(indices)
    if fit is not None:
        if alpha is not None or weights is not None or weights_sd is not None:
            raise TypeError("give either a fitted model or the arrays, not both")
        indices, alpha, weights, weights_sd = fit[:4]
    elif alpha is None or weights is None:
        raise TypeError("relevance_table needs a fitted ISBOR/SBOR, or indices, alpha and weights")
    cols = {"row": np.asarray(indices, dtype=np.int64), "alpha": np.asarray(alpha, float),
            "weight": np.asarray(weights, float)}
    if weights_sd is not None:
        cols["weight_sd"] = np.asarray(weights_sd, float)
    if labels is not None and not np.array_equal(labels, cols["row"]):
        cols["label"] = np.asarray(labels)
    m = cols["row"].shape
    if any(np.shape(v) != m for v in cols.values()) or len(m) != 1:
        raise ValueError(f"indices, alpha, weights (and weights_sd) must be 1-D of one length, "
                         f"got {[np.shape(v) for v in cols.values()]}")
    frame = pd.DataFrame(cols).set_index("row")
    return frame.iloc[np.argsort(-np.abs(frame["weight"].to_numpy()), kind="stable")]


def plot_evidence_trace(log_evidence, actions=None, ax=None):
    """Log evidence against iteration, marked by the action taken at each iteration.

    ``plot_evidence_trace(model)`` for a fitted :class:`bayesord.ISBOR` /
    :class:`bayesord.SBOR` (or an :class:`bayesord.ISBORResult`): iteration 0 is the
    initial active set, iteration t the state after the t-th action.

    Args:
        log_evidence: a fitted ISBOR/SBOR estimator or result; or the log evidence, shape
            (T,), either after each iteration or with the initial value first (T = number
            of actions + 1).
        actions: per iteration (arrays form only), length T or T - 1: names from
            :data:`ACTION_NAMES`, the names of :class:`bayesord._isbor.Action` (as an
            estimator's ``actions_``: ``"reestimate"``, ``"reestimate_all"``) or its codes;
            optional.
        ax: a matplotlib Axes (default: a new figure).

    Returns:
        The matplotlib Axes.
    """
    import matplotlib.pyplot as plt

    fit = _sparse_fit(log_evidence)
    if fit is not None:
        if actions is not None:
            raise TypeError("give either a fitted model or the arrays, not both")
        log_evidence, actions = fit[4], fit[5]
    ev = np.asarray(log_evidence, dtype=np.float64)
    if ev.ndim != 1:
        raise ValueError(f"log_evidence must be 1-D, got shape {ev.shape}")
    first = 1
    if actions is not None:
        names = _action_names(actions)
        if len(names) not in (ev.shape[0], ev.shape[0] - 1):
            raise ValueError(f"actions must have length {ev.shape[0]} or {ev.shape[0] - 1} "
                             f"(log_evidence has {ev.shape[0]}), got {len(names)}")
        first = ev.shape[0] - len(names)  # 1: the trace starts with the initial state
    it = np.arange(ev.shape[0]) + (1 - first)
    if ax is None:
        _, ax = plt.subplots(figsize=(6, 3.5))
    ax.plot(it, ev, color="0.5", linewidth=1)
    if actions is not None:
        names = np.asarray(names)
        markers = {"add": "o", "re-estimate": "s", "re-estimate all": "D", "delete": "v", "prune": "x",
                   "rejected": ".", "none": "."}
        for name in ACTION_NAMES:
            sel = names == name
            if np.any(sel):
                ax.scatter(it[first:][sel], ev[first:][sel], s=14, marker=markers[name],
                           label=f"{name} ({int(sel.sum())})", zorder=3)
        ax.legend(fontsize=8)
    ax.set_xlabel("iteration")
    ax.set_ylabel("log evidence")
    return ax


def plot_relevance_vectors(X, y, indices, ax=None, regions=True, resolution=150):
    """Training data in 2-D coloured by class, relevance vectors circled.

    ``plot_relevance_vectors(X, y, model)`` for a fitted :class:`bayesord.ISBOR` /
    :class:`bayesord.SBOR` also shades the class the model predicts over the plane.

    Args:
        X: training inputs, shape (n, 2).
        y: training labels, shape (n,).
        indices: a fitted ISBOR/SBOR estimator (or an ISBORResult), or the training-row
            indices of the relevance vectors.
        ax: a matplotlib Axes (default: a new figure).
        regions: with a fitted estimator, shade its predicted classes.
        resolution: grid points per axis for the shading.

    Returns:
        The matplotlib Axes.
    """
    import matplotlib.pyplot as plt

    X = np.asarray(X, dtype=np.float64)
    if X.ndim != 2 or X.shape[1] != 2:
        raise ValueError(f"plot_relevance_vectors draws 2-D inputs, got X of shape {X.shape}")
    y = np.asarray(y)
    if y.shape != (X.shape[0],):
        raise ValueError(f"y must have shape ({X.shape[0]},), got {y.shape}")
    res = _isbor_result(indices)
    model = indices if res is not None and res is not indices else None  # a fitted estimator
    fit = _sparse_fit(indices)
    idx = fit[0] if fit is not None else np.asarray(indices, dtype=np.int64)
    if idx.size and (idx.min() < 0 or idx.max() >= X.shape[0]):
        raise ValueError("relevance indices must be rows of X")
    if ax is None:
        _, ax = plt.subplots(figsize=(5, 5))
    classes = np.unique(y) if model is None else np.asarray(model.classes_)
    colours = plt.get_cmap("viridis")(np.linspace(0, 1, len(classes)))
    if model is not None and regions:
        lo, hi = X.min(0), X.max(0)
        pad = 0.02 * (hi - lo)
        g0, g1 = np.meshgrid(np.linspace(lo[0] - pad[0], hi[0] + pad[0], resolution),
                             np.linspace(lo[1] - pad[1], hi[1] + pad[1], resolution))
        codes = model._encode_y(model.predict(np.column_stack([g0.ravel(), g1.ravel()])), g0.size)
        ax.contourf(g0, g1, codes.reshape(g0.shape), levels=np.arange(len(classes) + 1) - 0.5,
                    colors=colours, alpha=0.2)
    for colour, c in zip(colours, classes):
        sel = y == c
        if np.any(sel):
            ax.scatter(X[sel, 0], X[sel, 1], s=8, color=colour, label=f"y = {c}")
    ax.scatter(X[idx, 0], X[idx, 1], s=80, facecolors="none", edgecolors="k",
               label=f"relevance vectors ({idx.size})")
    ax.legend(fontsize=8)
    return ax
