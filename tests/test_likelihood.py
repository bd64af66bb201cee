"""Ordinal likelihood: accuracy in the tails (vs mpmath), derivatives (vs autodiff and the
paper's Eq. 8-9), and probability rows."""

import jax
import jax.numpy as jnp
import mpmath
import numpy as np
import pytest
from jax.test_util import check_grads

from bayesord._likelihood import (
    log_class_probs,
    log_cumulative_probs,
    log_interval,
    ordinal_loglik,
    ordinal_ratios,
    ordinal_terms,
)

mpmath.mp.dps = 60


def _mp_logp(u, v):
    """log(Phi(u) - Phi(v)) in 60-digit arithmetic (u may be +inf, v may be -inf)."""
    u, v = mpmath.mpf(u), mpmath.mpf(v)
    outside = mpmath.ncdf(v) + mpmath.ncdf(-u)  # 1 - P, both terms small or exact
    if outside < 0.5:
        return mpmath.log1p(-outside)
    if v > 0:  # exact identity; keeps the 60-digit reference away from cancellation
        u, v = -v, -u
    return mpmath.log(mpmath.ncdf(u) - mpmath.ncdf(v))


def _mp_dlogp_df(u, v):
    """d/df log(Phi(b_hi - f) - Phi(b_lo - f)) = -(phi(u) - phi(v)) / P (sigma = 1)."""
    p = mpmath.exp(_mp_logp(u, v))
    return -(mpmath.npdf(mpmath.mpf(u)) - mpmath.npdf(mpmath.mpf(v))) / p


def _mp_d2logp_df2(u, v):
    # d/df of -(phi(u)-phi(v))/P with du/df = dv/df = -1, by 60-digit central difference.
    h = mpmath.mpf("1e-20")
    return (_mp_dlogp_df(u - h, v - h) - _mp_dlogp_df(u + h, v + h)) / (2 * h)


# (f, class) pairs covering both tails, the middle, and the outer classes; b = (-1, 0.5, 2).
B = np.array([-1.0, 0.5, 2.0])
CASES = [(f, k) for f in (-40.0, -38.5, -12.0, -3.0, 0.0, 0.2, 3.0, 12.0, 38.0, 41.0) for k in range(4)]


def _uv(f, k):
    b_full = np.concatenate([[-np.inf], B, [np.inf]])
    return b_full[k + 1] - f, b_full[k] - f


def test_value_gradient_hessian_match_mpmath_in_the_tails():
    f = jnp.asarray([c[0] for c in CASES])
    y = jnp.asarray([c[1] for c in CASES])
    t = ordinal_terms(f, y, jnp.asarray(B), 1.0)
    for i, (fi, k) in enumerate(CASES):
        u, v = _uv(fi, k)
        assert np.isfinite(float(t.logp[i])) and np.isfinite(float(t.d_ff[i]))
        assert float(t.logp[i]) == pytest.approx(float(_mp_logp(u, v)), rel=1e-12, abs=1e-300)
        assert float(t.d_f[i]) == pytest.approx(float(_mp_dlogp_df(u, v)), rel=1e-9, abs=1e-280)
        assert float(t.d_ff[i]) == pytest.approx(float(_mp_d2logp_df2(u, v)), rel=1e-6, abs=1e-12)


def test_paper_eq9_hessian_formula():
    """H_nn = [(N1 - N2)^2 / P^2 + (z1 N1 - z2 N2) / P] / sigma^2 (Eq. 9, '+' restored)."""
    rng = np.random.default_rng(1)
    sigma = 1.7
    f = rng.normal(scale=3, size=50)
    y = rng.integers(1, 3, size=50)  # inner classes: both thresholds finite
    t = ordinal_terms(jnp.asarray(f), jnp.asarray(y), jnp.asarray(B), sigma)
    from scipy.stats import norm

    z1 = (B[y] - f) / sigma
    z2 = (B[y - 1] - f) / sigma
    P = norm.cdf(z1) - norm.cdf(z2)
    N1, N2 = norm.pdf(z1), norm.pdf(z2)
    delta = (N1 - N2) / P / sigma  # the paper's delta_n; d logP / df = -delta_n
    H = (((N1 - N2) / P) ** 2 + (z1 * N1 - z2 * N2) / P) / sigma**2
    np.testing.assert_allclose(np.asarray(t.d_f), -delta, rtol=1e-9)
    np.testing.assert_allclose(np.asarray(-t.d_ff), H, rtol=1e-8)
    assert np.all(H > 0)  # log-concave


@pytest.mark.parametrize("link", ["probit", "logit"])
def test_analytic_derivatives_equal_autodiff(link):
    rng = np.random.default_rng(2)
    f = jnp.asarray(rng.normal(scale=4, size=40))
    y = jnp.asarray(rng.integers(0, 4, size=40))
    b = jnp.asarray(B)
    t = ordinal_terms(f, y, b, 1.3, link)

    def single(x, yi):
        # x = (f, b_lo, b_hi); thresholds outside 0..2 are the infinite ends (unused).
        bb = b.at[jnp.clip(yi - 1, 0, 2)].set(jnp.where(yi >= 1, x[1], b[jnp.clip(yi - 1, 0, 2)]))
        bb = bb.at[jnp.clip(yi, 0, 2)].set(jnp.where(yi <= 2, x[2], bb[jnp.clip(yi, 0, 2)]))
        return ordinal_loglik(x[:1], yi[None], bb, 1.3, link)

    yl = np.asarray(y)
    blo = np.where(yl >= 1, np.asarray(b)[np.clip(yl - 1, 0, 2)], 0.0)
    bhi = np.where(yl <= 2, np.asarray(b)[np.clip(yl, 0, 2)], 0.0)
    x = jnp.stack([f, jnp.asarray(blo), jnp.asarray(bhi)], axis=1)
    g = np.asarray(jax.vmap(jax.grad(single))(x, y))
    h = np.asarray(jax.vmap(jax.hessian(single))(x, y))
    lo, hi = yl >= 1, yl <= 2
    tol = dict(rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(t.d_f, g[:, 0], **tol)
    np.testing.assert_allclose(t.d_ff, h[:, 0, 0], **tol)
    np.testing.assert_allclose(np.asarray(t.d_lo)[lo], g[lo, 1], **tol)
    np.testing.assert_allclose(np.asarray(t.d_flo)[lo], h[lo, 0, 1], **tol)
    np.testing.assert_allclose(np.asarray(t.d_lolo)[lo], h[lo, 1, 1], **tol)
    np.testing.assert_allclose(np.asarray(t.d_hi)[hi], g[hi, 2], **tol)
    np.testing.assert_allclose(np.asarray(t.d_fhi)[hi], h[hi, 0, 2], **tol)
    np.testing.assert_allclose(np.asarray(t.d_hihi)[hi], h[hi, 2, 2], **tol)
    both = lo & hi
    np.testing.assert_allclose(np.asarray(t.d_lohi)[both], h[both, 1, 2], **tol)


def test_gradients_finite_and_checked_by_finite_differences():
    y = jnp.array([0, 1, 2, 3, 0, 3])
    f = jnp.array([-39.0, 0.1, 39.5, -40.0, 40.0, 2.5])
    fn = lambda f, b, s: ordinal_loglik(f, y, b, s)
    grads = jax.grad(fn, argnums=(0, 1, 2))(f, jnp.asarray(B), 1.0)
    assert all(bool(jnp.all(jnp.isfinite(g))) for g in grads)
    check_grads(fn, (jnp.array([-3.0, 0.1, 1.5, 0.0, 4.0, 2.5]), jnp.asarray(B), 1.2), order=2,
                modes=["rev"], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("link", ["probit", "logit"])
def test_custom_jvp_of_the_ratios_matches_finite_differences(link):
    # Autodiff of (logp, lam_u, lam_v) uses d logP = lam_u du - lam_v dv and
    # d log lam = g dz - d logP instead of differentiating erfc; the evidence gradient
    # differentiates the Hessian terms (third derivatives), so check up to order 3.
    y = jnp.array([0, 1, 2, 3, 1, 2])
    f = jnp.array([-3.0, 0.1, 1.5, 0.0, -6.0, 8.0])

    def fn(f, b, s):
        return ordinal_ratios(f, y, b, s, link)

    check_grads(fn, (f, jnp.asarray(B), 1.2), order=3, modes=["fwd", "rev"], atol=1e-5, rtol=1e-5)
    d_ff = lambda f, b: ordinal_terms(f, y, b, 0.9, link).d_ff
    check_grads(d_ff, (f, jnp.asarray(B)), order=1, modes=["fwd", "rev"], atol=1e-6, rtol=1e-6)


def test_log_interval_never_subtracts_probabilities():
    # Both arguments deep in the upper tail: naive Phi(u) - Phi(v) is exactly 0.
    u, v = 12.0, 11.0
    ref = float(_mp_logp(u, v))
    assert float(log_interval(jnp.array(u), jnp.array(v))) == pytest.approx(ref, rel=1e-12)


@pytest.mark.parametrize("link", ["probit", "logit"])
def test_class_probability_rows(link):
    rng = np.random.default_rng(3)
    mean = jnp.asarray(rng.normal(scale=10, size=500))
    scale = jnp.asarray(rng.uniform(0.3, 3, size=500))
    p = np.exp(np.asarray(log_class_probs(mean, scale, jnp.asarray(B), link)))
    assert np.all(p >= 0)
    np.testing.assert_allclose(p.sum(axis=1), 1.0, atol=1e-12)
    cum = np.exp(np.asarray(log_cumulative_probs(mean, scale, jnp.asarray(B), link)))
    np.testing.assert_allclose(cum, np.cumsum(p, axis=1)[:, :-1], atol=1e-12)
