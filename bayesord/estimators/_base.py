"""Shared plumbing for the scikit-learn estimators: validation, label mapping, status.

Estimators hold no numerics.  Each one validates input here, calls a functional
``fit_*`` from a private module, reads the result's status on the host
(:func:`bayesord._status.check_status`) and maps integer codes back to the user's labels.
"""

from __future__ import annotations

import numpy as np
from sklearn.base import BaseEstimator
from sklearn.utils.validation import check_is_fitted

from .._validation import check_sample_weight, check_X, encode_known_labels, encode_labels

__all__ = ["OrdinalEstimator", "reset_fitted"]


class OrdinalEstimator(BaseEstimator):
    """Base class: label encoding, feature checks and decoding shared by all estimators.

    Subclasses set ``_accept_sparse`` and implement ``fit``/``predict`` using
    :meth:`_validate_fit` and :meth:`_validate_predict`.
    """

    _accept_sparse = False

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        # Models with a kernel take sparse input with their linear kernel only.
        tags.input_tags.sparse = self._accept_sparse and getattr(self, "kernel", "linear") == "linear"
        return tags

    def _validate_fit(self, X, y, sample_weight=None, classes=None, min_classes=2,
                      require_all_classes=True):
        """Check (X, y, weights); set ``classes_``, ``n_features_in_``, ``feature_names_in_``.

        Returns:
            (X, codes, sample_weight) with codes in 0..K-1.
        """
        X, names = check_X(X, accept_sparse=self._accept_sparse)
        codes, classes_ = encode_labels(y, classes, n=X.shape[0])
        sw = check_sample_weight(sample_weight, X.shape[0])
        present = np.unique(codes[sw > 0])
        if present.size < min_classes:
            raise ValueError(
                f"y has {present.size} {'class' if present.size == 1 else 'classes'} with "
                f"positive weight; at least {min_classes} are needed to fit an ordinal model"
            )
        if require_all_classes and present.size < len(classes_):
            missing = [classes_[k] for k in range(len(classes_)) if k not in set(present.tolist())]
            raise ValueError(
                f"classes {missing} have no training samples; every declared class needs at least "
                "one sample to place its thresholds"
            )
        self.classes_ = classes_
        self.n_features_in_ = X.shape[1]
        if names is not None:
            self.feature_names_in_ = names
        elif hasattr(self, "feature_names_in_"):
            del self.feature_names_in_
        return X, codes, sw

    def _validate_predict(self, X):
        check_is_fitted(self, "classes_")
        X, names = check_X(X, accept_sparse=self._accept_sparse, n_features=self.n_features_in_,
                           model=type(self).__name__)
        fitted_names = getattr(self, "feature_names_in_", None)
        if fitted_names is not None and names is not None and list(names) != list(fitted_names):
            raise ValueError("X has different feature names (or order) than the data the model was fitted on")
        return X

    def _encode_y(self, y, n):
        """Encode labels at scoring time against the fitted classes (unknown labels raise)."""
        check_is_fitted(self, "classes_")
        codes, _ = encode_known_labels(_labels_1d(y, n), self.classes_, what="y")
        return codes

    def _decode(self, codes):
        return np.asarray(self.classes_)[np.asarray(codes)]


def _labels_1d(y, n):
    arr = np.asarray(y.astype(object) if hasattr(y, "cat") else y, dtype=object)
    if arr.ndim != 1:
        raise ValueError(f"y must be 1-D, got shape {arr.shape}")
    if arr.shape[0] != n:
        raise ValueError(f"X and y have different lengths: {n} rows in X, {arr.shape[0]} labels in y")
    return arr


def reset_fitted(est) -> None:
    """Remove every fitted attribute (trailing underscore) so a failed fit leaves no half state."""
    for name in [k for k in vars(est) if k.endswith("_") and not k.startswith("__")]:
        delattr(est, name)
