"""bayesord: ordinal regression in JAX that says how sure it is.

Functional core (jitted pure functions returning NamedTuples) and scikit-learn style
estimators on top.  The library never enables JAX's float64 mode itself; call
``jax.config.update("jax_enable_x64", True)`` for the precision-sensitive Bayesian paths.

``import bayesord`` is cheap: each name below is imported from its module on first use
(PEP 562), so the command line answers ``--help`` without starting JAX, and a script that
uses one model does not import the others.  That first use also turns on JAX's persistent
compilation cache in ``~/.cache/bayesord/jax`` (``BAYESORD_COMPILE_CACHE`` names another
folder, ``off`` disables it; see :mod:`bayesord._compile_cache`), so a second process
skips most of the compilation.

``import bayesord`` also adds ``--xla_cpu_multi_thread_eigen=false`` to ``XLA_FLAGS`` unless
that option is set already: XLA:CPU's multi-threaded Eigen kernels can deadlock the batched
(``vmap``-ed) solver loops with jax 0.10.  XLA reads the variable when its CPU backend
starts, so this applies when bayesord is imported before the first JAX computation; the
command line, the tests and Python sessions then compile the same programs (and share the
on-disk cache).  Set the option yourself, before importing bayesord, to choose otherwise.
"""

from __future__ import annotations

import importlib
import os
from typing import TYPE_CHECKING

from . import _compile_cache
from ._registry import ESTIMATORS

_EIGEN_OPTION = "--xla_cpu_multi_thread_eigen=false"
if "xla_cpu_multi_thread_eigen" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} {_EIGEN_OPTION}".strip()

__version__ = "0.1.0"

_SUBMODULES = ("calibration", "datasets", "diagnostics", "distributed", "io", "metrics", "uncertainty")
_EXPORTS = {
    "._basis": ("KernelMap", "fit_kernel_map", "transform_kernel_map"),
    "._clm": ("CLMColumns", "CLMConfig", "CLMPrediction", "CLMResult", "ThresholdCrossingWarning", "clm_columns",
              "fit_clm", "predict_clm", "sample_class_probs_clm"),
    "._isbor": ("ISBORConfig", "ISBORPrediction", "ISBORResult", "fit_isbor", "fit_sbor", "predict_isbor",
                "sample_class_probs_isbor"),
    "._mixed": ("MixedConfig", "MixedPrediction", "MixedResult", "effects_on_user_scale", "fit_mixed",
                "predict_mixed", "sample_class_probs_mixed"),
    "._npsvor": ("NPSVORConfig", "NPSVORResult", "cv_npsvor", "fit_npsvor", "predict_npsvor", "predict_r_new",
                 "predict_r_old"),
    "._perceptron": ("KernelPerceptronResult", "PerceptronConfig", "PerceptronHyper", "PerceptronResult",
                     "fit_kernel_perceptron", "fit_perceptron", "make_hyper", "predict_perceptron"),
    "._probit": ("ProbitConfig", "ProbitPrediction", "ProbitResult", "class_prob_bands", "fit_probit",
                 "predict_probit", "sample_class_probs"),
    "._rankpairs": ("RankPairsConfig", "RankPairsResult", "fit_rankpairs_gram", "fit_rankpairs_kernel",
                    "fit_rankpairs_linear", "fit_rankpairs_nystroem", "predict_rankpairs", "swapped_pairs_rate"),
    "._redsvm": ("RedSVMConfig", "RedSVMResult", "fit_redsvm", "predict_redsvm"),
    "._results": ("Prediction",),
    "._status": ("OneClassWarning", "Status"),
    "._tor": ("TORConfig", "TORResult", "fit_tor", "predict_tor"),
    ".io": ("load_result", "save_result"),
    "._validation": ("ColumnScaleWarning",),
    ".diagnostics": ("to_inference_data",),
    ".estimators": tuple(entry.name for entry in ESTIMATORS) + ("load_model",),
}
_MODULE_OF = {name: module for module, names in _EXPORTS.items() for name in names}

__all__ = sorted(_MODULE_OF) + list(_SUBMODULES) + ["__version__"]


def __getattr__(name):
    if name in _MODULE_OF or name in _SUBMODULES:
        _compile_cache.enable()
    if name in _MODULE_OF:
        value = getattr(importlib.import_module(_MODULE_OF[name], __name__), name)
    elif name in _SUBMODULES:
        value = importlib.import_module(f".{name}", __name__)
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(__all__))


if TYPE_CHECKING:
    from . import calibration, datasets, diagnostics, distributed, io, metrics, uncertainty
    from ._basis import KernelMap, fit_kernel_map, transform_kernel_map
    from ._clm import (
        CLMColumns,
        CLMConfig,
        CLMPrediction,
        CLMResult,
        ThresholdCrossingWarning,
        clm_columns,
        fit_clm,
        predict_clm,
        sample_class_probs_clm,
    )
    from ._isbor import (
        ISBORConfig,
        ISBORPrediction,
        ISBORResult,
        fit_isbor,
        fit_sbor,
        predict_isbor,
        sample_class_probs_isbor,
    )
    from ._mixed import (
        MixedConfig,
        MixedPrediction,
        MixedResult,
        effects_on_user_scale,
        fit_mixed,
        predict_mixed,
        sample_class_probs_mixed,
    )
    from ._npsvor import (
        NPSVORConfig,
        NPSVORResult,
        cv_npsvor,
        fit_npsvor,
        predict_npsvor,
        predict_r_new,
        predict_r_old,
    )
    from ._perceptron import (
        KernelPerceptronResult,
        PerceptronConfig,
        PerceptronHyper,
        PerceptronResult,
        fit_kernel_perceptron,
        fit_perceptron,
        make_hyper,
        predict_perceptron,
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
        fit_rankpairs_gram,
        fit_rankpairs_kernel,
        fit_rankpairs_linear,
        fit_rankpairs_nystroem,
        predict_rankpairs,
        swapped_pairs_rate,
    )
    from ._redsvm import RedSVMConfig, RedSVMResult, fit_redsvm, predict_redsvm
    from ._results import Prediction
    from ._status import OneClassWarning, Status
    from ._tor import TORConfig, TORResult, fit_tor, predict_tor
    from ._validation import ColumnScaleWarning
    from .diagnostics import to_inference_data
    from .estimators import (
        ISBOR,
        NPSVOR,
        CuSumRank,
        CumulativeLinkModel,
        OrdinalMixed,
        OrdinalProbit,
        PRank,
        RedSVM,
        SBOR,
        SwappedPairsSVM,
        TransductiveOrdinalRegression,
        load_model,
    )
    from .io import load_result, save_result
