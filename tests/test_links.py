"""Every link in the registry (:mod:`bayesord._links`), checked against independent references.

* 60-digit ``mpmath`` formulas of each noise CDF, survival function and density, written here
  from their textbook definitions (Christensen 2019, the ``ordinal::clm`` article, Table 1);
* ``mpmath`` differentiation of the 60-digit log-likelihood for the derivatives, to |z| = 40;
* SciPy's adaptive quadrature for the predictive probabilities;
* Kolmogorov-Smirnov tests of the noise the data generator draws;
* R's ``ordinal::clm`` and ``clmm`` (ordinal 2022.11.16, R 4.2.2, default settings) on the shared
  ``wine`` data: ``rating ~ temp + contact`` and ``+ (1 | judge)``, numbers printed by R.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import mpmath
import numpy as np
import pandas as pd
import pytest
from scipy import integrate, stats

from bayesord import ISBOR, OrdinalMixed, OrdinalProbit
from bayesord._likelihood import _quadrature_log_probs, log_predictive_probs, ordinal_terms
from bayesord._links import LINKS, check_link, get_link
from bayesord.datasets import make_ordinal_probit

mpmath.mp.dps = 60

# The noise CDF F and survival function S = 1 - F of each link, each accurate in its own
# small tail in 60-digit arithmetic.
MP_CDF = {
    "probit": lambda z: mpmath.ncdf(z),
    "logit": lambda z: 1 / (1 + mpmath.exp(-z)),
    "cloglog": lambda z: -mpmath.expm1(-mpmath.exp(z)),
    "loglog": lambda z: mpmath.exp(-mpmath.exp(-z)),
    "cauchit": lambda z: mpmath.atan2(1, -z) / mpmath.pi,
}
MP_SF = {
    "probit": lambda z: mpmath.ncdf(-z),
    "logit": lambda z: 1 / (1 + mpmath.exp(z)),
    "cloglog": lambda z: mpmath.exp(-mpmath.exp(z)),
    "loglog": lambda z: -mpmath.expm1(-mpmath.exp(-z)),
    "cauchit": lambda z: mpmath.atan2(1, z) / mpmath.pi,
}
Z = [-40.0, -25.0, -8.0, -1.5, -0.3, 0.0, 0.4, 2.0, 9.0, 26.0, 40.0]


def _mp_log(small, other, z):
    """log of the probability ``small(z)``, from ``1 - other(z)`` where that is the smaller."""
    p, q = small(z), other(z)
    return mpmath.log(p) if p < q else mpmath.log1p(-q)


def test_every_link_has_a_reference_here():
    assert set(LINKS) == set(MP_CDF) == set(MP_SF) == set(NP_CDF)
    assert LINKS[:2] == ("probit", "logit")
    with pytest.raises(ValueError, match="cloglog"):
        check_link("gompertz")


@pytest.mark.parametrize("link", LINKS)
def test_log_cdf_and_log_sf_match_mpmath_to_z_40(link):
    spec = get_link(link)
    z = jnp.asarray(Z)
    log_cdf, log_sf = np.asarray(spec.log_cdf(z)), np.asarray(spec.log_sf(z))
    for i, zi in enumerate(Z):
        zi = mpmath.mpf(zi)
        ref_cdf = _mp_log(MP_CDF[link], MP_SF[link], zi)
        ref_sf = _mp_log(MP_SF[link], MP_CDF[link], zi)
        assert log_cdf[i] == pytest.approx(float(ref_cdf), rel=1e-12, abs=1e-300)
        assert log_sf[i] == pytest.approx(float(ref_sf), rel=1e-12, abs=1e-300)


@pytest.mark.parametrize("link", LINKS)
def test_density_its_log_derivative_and_the_quantile(link):
    spec = get_link(link)
    for zi in [-12.0, -2.0, -0.2, 0.0, 0.7, 3.0, 12.0]:
        z = mpmath.mpf(zi)  # differentiate whichever of F and S is the small one
        pdf = mpmath.diff(MP_CDF[link], z) if MP_CDF[link](z) < 0.5 else -mpmath.diff(MP_SF[link], z)
        assert float(spec.log_pdf(jnp.asarray(zi))) == pytest.approx(float(mpmath.log(pdf)), rel=1e-12, abs=1e-14)
        dlog = jax.grad(spec.log_pdf)(jnp.asarray(zi))
        assert float(spec.dlog_pdf(jnp.asarray(zi))) == pytest.approx(float(dlog), rel=1e-10, abs=1e-14)
    p = jnp.asarray([1e-12, 1e-4, 0.2, 0.5, 0.9, 1 - 1e-6])
    q = spec.quantile(p)
    np.testing.assert_allclose(np.exp(np.asarray(spec.log_cdf(q))), np.asarray(p), rtol=1e-9)


# (f, class) pairs over both tails, the middle and the outer classes; b = (-1, 0.5, 2).
B = np.array([-1.0, 0.5, 2.0])
F_VALUES = (-40.0, -12.0, -3.0, 0.0, 0.2, 3.0, 12.0, 38.0)


def _mp_logp(f, k, link):
    """log P(y = k | f), sigma = 1, in 60-digit arithmetic: F(u) - F(v) below the median,
    S(v) - S(u) above it, so neither difference cancels."""
    lo = -mpmath.inf if k == 0 else mpmath.mpf(B[k - 1])
    hi = mpmath.inf if k == 3 else mpmath.mpf(B[k])
    u, v = hi - f, lo - f
    F, S = MP_CDF[link], MP_SF[link]
    if v > 0:
        return mpmath.log(S(v) - (0 if u == mpmath.inf else S(u)))
    return mpmath.log((1 if u == mpmath.inf else F(u)) - (0 if v == -mpmath.inf else F(v)))


@pytest.mark.parametrize("link", [name for name in LINKS if name not in ("probit", "logit")])
def test_likelihood_and_derivatives_match_mpmath_in_the_tails(link):
    """Probit and logit: ``tests/test_likelihood.py``.

    Values and derivatives to |z| = 42, the two Gumbel links' double-exponential tails
    included (there ``log f`` and ``log P`` are both about ``-e^|z|``: the links give the
    hazard ``f/T`` and the curvature factors in closed form)."""
    cases = [(f, k) for f in F_VALUES + (20.0, -21.0) for k in range(4)]
    f = jnp.asarray([c[0] for c in cases])
    y = jnp.asarray([c[1] for c in cases])
    t = ordinal_terms(f, y, jnp.asarray(B), 1.0, link)
    for i, (fi, k) in enumerate(cases):
        logp = lambda x: _mp_logp(x, k, link)
        x = mpmath.mpf(fi)
        assert float(t.logp[i]) == pytest.approx(float(logp(x)), rel=1e-11, abs=1e-300)
        assert float(t.d_f[i]) == pytest.approx(float(mpmath.diff(logp, x)), rel=1e-7, abs=1e-250)
        assert float(t.d_ff[i]) == pytest.approx(float(mpmath.diff(logp, x, 2)), rel=1e-7, abs=1e-12)


# The same CDFs in double precision (SciPy and NumPy), for the quadrature reference.
NP_CDF = {
    "probit": stats.norm.cdf,
    "logit": stats.logistic.cdf,
    "cloglog": lambda z: -np.expm1(-np.exp(z)),
    "loglog": lambda z: np.exp(-np.exp(-z)),
    "cauchit": stats.cauchy.cdf,
}


def _quad_class_probs(mean, var, sigma, b, link):
    """E[F((b_k - f)/sigma)] for f ~ N(mean, var) by adaptive quadrature, differenced."""
    cdf = NP_CDF[link]
    cum = [integrate.quad(lambda e: stats.norm.pdf(e) * cdf((bk - mean - np.sqrt(var) * e) / sigma),
                          -12, 12, epsabs=1e-13, epsrel=1e-12, limit=200)[0] for bk in b]
    return np.diff(np.r_[0.0, cum, 1.0])


@pytest.mark.parametrize("link", LINKS)
def test_gauss_hermite_predictive_probabilities_match_adaptive_quadrature(link):
    b = jnp.asarray(B)
    for mean, var, sigma in [(0.3, 0.01, 1.0), (-1.2, 1.0, 1.0), (2.5, 4.0, 1.3), (0.0, 0.0, 0.8)]:
        log_p, log_cum = _quadrature_log_probs(jnp.asarray([mean]), jnp.asarray([var]), sigma, b, link)
        ref = _quad_class_probs(mean, var, sigma, B, link)
        np.testing.assert_allclose(np.exp(np.asarray(log_p[0])), ref, atol=2e-6)
        np.testing.assert_allclose(np.exp(np.asarray(log_cum[0])), np.cumsum(ref)[:-1], atol=2e-6)
    # The probit's closed form is exact: it equals the quadrature.
    if link == "probit":
        closed = log_predictive_probs(jnp.asarray([0.4]), jnp.asarray([2.0]), 1.1, b, link)[0]
        np.testing.assert_allclose(np.exp(closed[0]), _quad_class_probs(0.4, 2.0, 1.1, B, link), atol=1e-9)


@pytest.mark.parametrize("link", LINKS)
def test_cumulative_probabilities_that_cross_are_rearranged(link):
    # Far in a tail, with one threshold much less certain than the other, the exact
    # E[F((b_k - f)/sigma)] of each threshold (b_k - f ~ N(b_k - mean, var_k)) decrease in
    # k.  The prediction is their monotone rearrangement (sorted), so every class keeps a
    # positive probability (a running maximum gave the middle class exactly 0).
    b = np.array([0.0, 0.5])
    predictive = log_predictive_probs if get_link(link).predictive_scale else _quadrature_log_probs
    for mean, var in [(-4.0, (0.01, 3.0)), (4.5, (3.0, 0.01)), (-2.0, (0.05, 2.0))]:
        cum = np.array([_quad_class_probs(mean, v, 1.0, [bk], link)[0] for bk, v in zip(b, var)])
        assert cum[1] < cum[0]  # the case crosses
        p = np.exp(np.asarray(predictive(jnp.asarray([mean]), jnp.asarray([var]), 1.0, jnp.asarray(b), link)[0][0]))
        assert np.all(p > 0)
        # The rearrangement of the library's own cumulative probabilities, one threshold at
        # a time (nothing to cross there) ...
        alone = [float(np.exp(predictive(jnp.asarray([mean]), jnp.asarray([[v]]), 1.0, jnp.asarray([bk]),
                                         link)[1][0, 0])) for bk, v in zip(b, var)]
        np.testing.assert_allclose(p, np.diff(np.r_[0.0, np.sort(alone), 1.0]), rtol=1e-9, atol=1e-15)
        # ... and of the exact ones by adaptive quadrature: exact for the probit, to
        # Gauss-Hermite's accuracy for the quadrature links (the logit's predictive is
        # MacKay's approximation, compared above only).
        if link != "logit":
            np.testing.assert_allclose(p, np.diff(np.r_[0.0, np.sort(cum), 1.0]),
                                       **(dict(rtol=1e-9, atol=1e-15) if link == "probit" else dict(atol=2e-6)))


@pytest.mark.parametrize("link", LINKS)
def test_generator_draws_the_links_noise(link):
    draws = get_link(link).sample(np.random.default_rng(0), 20000)
    cdf = lambda x: np.exp(np.asarray(get_link(link).log_cdf(jnp.asarray(x))))
    assert stats.kstest(draws, cdf).pvalue > 1e-3
    X, y, truth = make_ordinal_probit(500, 2, 4, seed=1, link=link)
    assert truth.link == link and set(np.unique(y)) == {1, 2, 3, 4}


# ---------------------------------------------------------------- R's ordinal package on wine
CLM = {
    "cloglog": dict(loglik=-86.6340792088,
                    coef=[1.60576009, 0.85971366], thresholds=[-1.74008237, 0.29632910, 1.72885534, 2.59679705],
                    se=[0.32456627, 0.28273191, 0.46284970, 0.24811348, 0.31052310, 0.37939574]),
    "loglog": dict(loglik=-87.7178551430,
                   coef=[1.53301818, 0.90564443], thresholds=[-0.30244146, 1.17860478, 2.60623289, 3.81482287],
                   se=[0.32666288, 0.28144366, 0.25847301, 0.31696166, 0.40765767, 0.51969265]),
    # R reports -92.5158306692 for this fit, 2.8e-4 below the log-likelihood at its own
    # estimates (-92.515554034, evaluated with scipy.stats.cauchy); the latter is used here.
    # The first threshold (se 1.6) then differs by 1.2e-4.
    "cauchit": dict(loglik=-92.515554034, tol=2e-4,
                    coef=[1.96290839, 1.21828872], thresholds=[-2.51102990, 0.88023480, 2.86575558, 4.54115972],
                    se=[0.64395868, 0.52967160, 1.62161683, 0.53059786, 0.77763700, 1.05451403]),
}
# clmm (and clmm2) name the two Gumbel links the other way round from clm: with a grouping
# factor of random labels (group sd estimated at 3e-5) clmm(link = "cloglog") returns
# clm(link = "loglog")'s fit and vice versa.  bayesord follows clm's definitions, F(z) =
# 1 - exp(-exp(z)) for cloglog, in both models; the references below are keyed by that.
CLMM = {
    "cloglog": dict(r_link="loglog", loglik=-81.5413725708, sd=0.79140826,
                    coef=[2.04739562, 1.22461940], thresholds=[-1.78732336, 0.52956343, 2.35701393, 3.49218003]),
    "loglog": dict(r_link="cloglog", loglik=-82.7293624925, sd=0.75612742,
                   coef=[1.97272808, 1.12849293], thresholds=[-0.49661481, 1.43952678, 3.18942549, 4.55083305]),
    # clmm stops 3.3e-4 short of the maximum here (and misreports the log-likelihood as clm
    # does above): ours is higher, the estimates within 2e-3.
    "cauchit": dict(r_link="cauchit", loglik=-86.8349890117, sd=1.19508358, tol=2e-3,
                    coef=[3.15568642, 2.14818074], thresholds=[-1.95576151, 1.65823713, 4.54601081, 6.81843966]),
}


@pytest.fixture(scope="module")
def wine(datasets_dir):
    return pd.read_csv(datasets_dir / "wine.csv.gz")


@pytest.mark.parametrize("link", sorted(CLM))
def test_maximum_likelihood_fit_matches_clm(wine, link):
    ref = CLM[link]
    model = OrdinalProbit.from_formula("rating ~ temp + contact", wine, thresholds="joint", alpha=0.0, link=link)
    table = model.summary()
    tol = ref.get("tol", 1e-5)
    np.testing.assert_allclose(model.coef_, ref["coef"], atol=tol)
    np.testing.assert_allclose(table["mean"].to_numpy()[2:], ref["thresholds"], atol=tol)
    np.testing.assert_allclose(table["sd"].to_numpy(), ref["se"], rtol=1e-4)
    assert float(model.result_.loglik) == pytest.approx(ref["loglik"], abs=1e-7)
    proba = model.predict_proba(wine)
    np.testing.assert_allclose(proba.sum(axis=1), 1.0, atol=1e-12)


@pytest.mark.slow
@pytest.mark.parametrize("link", sorted(CLMM))
def test_mixed_fit_matches_clmm(wine, link):
    ref = CLMM[link]
    model = OrdinalMixed.from_formula("rating ~ temp + contact + (1 | judge)", wine, link=link)
    tol = ref.get("tol", 1e-3)
    np.testing.assert_allclose(model.coef_, ref["coef"], atol=tol)
    np.testing.assert_allclose(model.thresholds_, ref["thresholds"], atol=tol)
    assert model.group_sd_ == pytest.approx(ref["sd"], abs=tol)
    assert ref["loglik"] - 1e-4 <= model.loglik_ <= ref["loglik"] + 1e-3
    # New groups integrate N(0, tau^2) by quadrature: rows still sum to one.
    new = wine.assign(judge=99).iloc[:5]
    np.testing.assert_allclose(model.predict_proba(new).sum(axis=1), 1.0, atol=1e-10)


@pytest.mark.slow
@pytest.mark.parametrize("link", [name for name in LINKS if name not in ("probit", "logit")])
def test_probit_model_recovers_the_generating_link(link):
    """4,000 rows drawn with the link: the weights within 4 posterior sds of the truth, and
    a better log-likelihood under the true link than under the probit."""
    X, y, truth = make_ordinal_probit(4000, 3, 4, seed=2, link=link)
    model = OrdinalProbit(thresholds="joint", alpha=0.0, link=link).fit(X, y)
    sd = np.sqrt(np.diag(model.result_.coef_cov))
    assert np.all(np.abs(model.coef_ - truth.w) < 4 * sd)
    probit = OrdinalProbit(thresholds="joint", alpha=0.0).fit(X, y)
    assert float(model.result_.loglik) > float(probit.result_.loglik)


@pytest.mark.slow
def test_isbor_takes_a_new_link():
    """ISBOR's likelihood, evidence and predictive distribution go through the same link
    functions: a complementary log-log fit to data drawn with that link converges and its
    predictive probabilities (by quadrature) beat the class frequencies on held-out rows."""
    X, y, _ = make_ordinal_probit(300, 2, 4, seed=0, w=[2.0, -1.5], link="cloglog")
    model = ISBOR(link="cloglog", theta=0.5).fit(X[:200], y[:200])
    assert model.converged_
    proba = model.predict_proba(X[200:])
    np.testing.assert_allclose(proba.sum(axis=1), 1.0, atol=1e-10)
    freq = np.bincount(y[:200] - 1, minlength=4) / 200
    held = y[200:] - 1
    assert -np.mean(np.log(proba[np.arange(100), held])) < -np.mean(np.log(freq[held]))
