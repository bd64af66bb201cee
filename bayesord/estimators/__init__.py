"""scikit-learn compatible estimators over the functional core (one module per model family)."""
