import jax
import jax.numpy as jnp
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from bayesord._thresholds import params_from_thresholds, thresholds_from_params, thresholds_jacobian


@settings(max_examples=50, deadline=None)
@given(st.lists(st.floats(-5, 5), min_size=1, max_size=8))
def test_thresholds_are_ordered_and_round_trip(theta):
    theta = jnp.asarray(theta)
    b = thresholds_from_params(theta)
    assert bool(jnp.all(jnp.diff(b) > 0))
    np.testing.assert_allclose(params_from_thresholds(b), theta, atol=1e-9)


def test_jacobian_matches_autodiff():
    theta = jnp.array([0.3, -1.0, 0.5, 2.0])
    np.testing.assert_allclose(thresholds_jacobian(theta), jax.jacfwd(thresholds_from_params)(theta),
                               rtol=1e-12)
