"""bayesord: ordinal regression in JAX that says how sure it is.

Functional core (jitted pure functions returning NamedTuples) and scikit-learn style
estimators on top.  The library never enables JAX's float64 mode itself; call
``jax.config.update("jax_enable_x64", True)`` for the precision-sensitive Bayesian paths.
"""

from ._probit import (
    ProbitConfig,
    ProbitPrediction,
    ProbitResult,
    class_prob_bands,
    fit_probit,
    predict_probit,
    sample_class_probs,
)
from ._status import Status
from .estimators import OrdinalProbit

__version__ = "0.1.0"

__all__ = [
    "OrdinalProbit",
    "ProbitConfig",
    "ProbitPrediction",
    "ProbitResult",
    "Status",
    "class_prob_bands",
    "fit_probit",
    "predict_probit",
    "sample_class_probs",
    "__version__",
]
