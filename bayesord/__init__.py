"""bayesord: ordinal regression in JAX that says how sure it is.

Functional core (jitted pure functions returning NamedTuples) and scikit-learn style
estimators on top.  The library never enables JAX's float64 mode itself; call
``jax.config.update("jax_enable_x64", True)`` for the precision-sensitive Bayesian paths.
"""

from . import calibration, datasets, diagnostics, metrics
from ._isbor import ISBORConfig, ISBORPrediction, ISBORResult, fit_isbor, fit_sbor, predict_isbor
from ._npsvor import NPSVORConfig, NPSVORResult, cv_npsvor, fit_npsvor, predict_r_new, predict_r_old
from ._perceptron import (
    KernelPerceptronResult,
    PerceptronConfig,
    PerceptronResult,
    fit_kernel_perceptron,
    fit_perceptron,
)
from ._probit import (
    ProbitConfig,
    ProbitPrediction,
    ProbitResult,
    class_prob_bands,
    fit_probit,
    predict_probit,
    sample_class_probs,
)
from ._rankpairs import (
    RankPairsConfig,
    RankPairsResult,
    fit_rankpairs_kernel,
    fit_rankpairs_linear,
    swapped_pairs_rate,
)
from ._redsvm import RedSVMConfig, RedSVMResult, fit_redsvm
from ._status import Status
from ._tor import TORConfig, TORResult, fit_tor
from ._validation import ColumnScaleWarning
from .diagnostics import to_inference_data
from .estimators import (
    ISBOR,
    NPSVOR,
    CuSumRank,
    OrdinalProbit,
    PRank,
    RedSVM,
    SBOR,
    SwappedPairsSVM,
    TransductiveOrdinalRegression,
    load_model,
)

__version__ = "0.1.0"

__all__ = [
    "ColumnScaleWarning",
    "CuSumRank",
    "ISBOR",
    "ISBORConfig",
    "ISBORPrediction",
    "ISBORResult",
    "KernelPerceptronResult",
    "NPSVOR",
    "NPSVORConfig",
    "NPSVORResult",
    "OrdinalProbit",
    "PRank",
    "PerceptronConfig",
    "PerceptronResult",
    "ProbitConfig",
    "ProbitPrediction",
    "ProbitResult",
    "RankPairsConfig",
    "RedSVM",
    "RedSVMConfig",
    "RedSVMResult",
    "SBOR",
    "RankPairsResult",
    "Status",
    "TORConfig",
    "TORResult",
    "SwappedPairsSVM",
    "TransductiveOrdinalRegression",
    "class_prob_bands",
    "cv_npsvor",
    "datasets",
    "fit_isbor",
    "fit_kernel_perceptron",
    "fit_npsvor",
    "fit_perceptron",
    "fit_probit",
    "fit_rankpairs_kernel",
    "fit_sbor",
    "fit_rankpairs_linear",
    "fit_redsvm",
    "fit_tor",
    "load_model",
    "metrics",
    "predict_isbor",
    "predict_probit",
    "predict_r_new",
    "predict_r_old",
    "sample_class_probs",
    "swapped_pairs_rate",
    "to_inference_data",
    "calibration",
    "diagnostics",
    "__version__",
]
