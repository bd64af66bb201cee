"""scikit-learn compatible estimators over the functional core (one module per model family).

Importing this module turns on JAX's persistent compilation cache (:mod:`bayesord._compile_cache`).
"""

from .. import _compile_cache
from .._registry import ESTIMATORS
from ._base import read_model_file
from ._clm import CumulativeLinkModel
from ._isbor import ISBOR, SBOR
from ._mixed import OrdinalMixed
from ._npsvor import NPSVOR
from ._perceptron import CuSumRank, PRank
from ._probit import OrdinalProbit
from ._rankpairs import SwappedPairsSVM
from ._tor import RedSVM, TransductiveOrdinalRegression

# The classes of bayesord._registry.ESTIMATORS (tests/test_architecture.py checks the two agree).
__all__ = [
    "CuSumRank",
    "CumulativeLinkModel",
    "ISBOR",
    "NPSVOR",
    "OrdinalMixed",
    "OrdinalProbit",
    "PRank",
    "RedSVM",
    "SBOR",
    "SwappedPairsSVM",
    "TransductiveOrdinalRegression",
    "load_model",
]

_compile_cache.enable()


def load_model(path):
    """Load a model written by the ``save`` method of any bayesord estimator.

    The file says which class it holds; the model comes back fitted, bit for bit.

    Raises:
        FileNotFoundError: there is no file at ``path``.
        ValueError: naming ``path`` and the problem: it is not a model file written by a
            bayesord estimator, it is damaged (cut short, altered bytes), or its metadata
            disagrees with its arrays (e.g. the number of features or classes).
    """
    classes = [globals()[entry.name] for entry in ESTIMATORS]
    return read_model_file(path, {cls._format: cls for cls in classes})
