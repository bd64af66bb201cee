"""scikit-learn compatible estimators over the functional core (one module per model family)."""

from ._probit import OrdinalProbit

__all__ = ["OrdinalProbit"]
