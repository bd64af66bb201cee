"""scikit-learn compatible estimators over the functional core (one module per model family)."""

from ._isbor import ISBOR, SBOR
from ._npsvor import NPSVOR
from ._perceptron import CuSumRank, PRank
from ._probit import OrdinalProbit
from ._rankpairs import SwappedPairsSVM
from ._tor import RedSVM, TransductiveOrdinalRegression

__all__ = [
    "CuSumRank",
    "ISBOR",
    "NPSVOR",
    "OrdinalProbit",
    "PRank",
    "RedSVM",
    "SBOR",
    "SwappedPairsSVM",
    "TransductiveOrdinalRegression",
]
