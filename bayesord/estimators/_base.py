"""Shared plumbing for the scikit-learn estimators: validation, label mapping, status.

Estimators hold no numerics.  Each one validates input here, calls a functional
``fit_*`` from a private module, reads the result's status on the host
(:func:`bayesord._status.check_status`) and maps integer codes back to the user's labels.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import contextvars
import copy
import functools
import inspect
import json
import numbers
import os
import sys
import types
import zipfile
import zlib
from statistics import NormalDist

import jax
import numpy as np
import scipy.sparse as sp

from .._compile_cache import release_programs_if_crowded
from .._results import decode_state, encode_state, state_types
from .._status import OneClassWarning, Status, convergence_warning, warn_user, warnings_at_caller
from .._validation import (
    ColumnScaleWarning,
    check_sample_weight,
    class_weights,
    check_X,
    column_moments,
    column_scale_problems,
    dependent_columns,
    encode_known_labels,
    encode_labels,
    float_dtype,
)
from ._formula import (
    SavedCoding,
    check_formula_data,
    coding_state,
    design_matrix,
    formula_response,
    formula_rows,
    predictors,
    split_formula,
)

__all__ = ["BAYES_ONE_CLASS_HINT", "OrdinalEstimator", "ParamsMixin", "SavableMixin", "SnapshotSavableMixin",
           "binary_columns", "check_is_fitted", "class_from_proba", "clone", "fit_key", "fit_rng", "fresh_fit",
           "internal_fits", "marginal_effects_table", "posterior_table", "proba_from_log", "read_model_file",
           "reset_fitted", "run_folds", "set_input_transform", "solver_tol", "threshold_names", "warn_if_one_class"]


# The methods whose metadata scikit-learn's routing can pass (ParamsMixin).
_ROUTED_METHODS = ("fit", "partial_fit", "predict", "predict_proba", "decision_function", "score")


class ParamsMixin:
    """scikit-learn's estimator protocol without importing scikit-learn.

    Importing any part of scikit-learn loads ``sklearn.base`` and, through it, ``scipy.stats``
    and more: 0.6-0.7 s, a third of a warm ``bayesord fit`` and most of a script's first
    import (measured in ``docs/benchmarks.md``, "latency").  What pipelines, ``clone``,
    ``GridSearchCV`` and ``cross_val_score`` need of an estimator is this: the constructor's
    arguments as parameters (``get_params``/``set_params``, ``a__b`` for a nested estimator),
    a ``repr`` of the parameters that differ from their defaults, and, for its opt-in
    metadata routing (``sklearn.set_config(enable_metadata_routing=True)``),
    ``set_fit_request(sample_weight=True)`` and the like for every method that takes more
    than ``X`` and ``y``, and ``get_metadata_routing``.  The tags
    (``OrdinalEstimator.__sklearn_tags__``) and the routing request import scikit-learn when
    it asks for them.  Its own estimator checks run on every estimator
    (``tests/test_sklearn_checks.py``).
    """

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        for method in _ROUTED_METHODS:
            if cls._metadata_params(method):
                setter = functools.partialmethod(ParamsMixin._set_request, method)
                setter.__doc__ = (f"Which metadata scikit-learn's routing passes to ``{method}``: "
                                  "``name=True`` (pass it), ``False`` (do not), or another name to pass "
                                  "under this one; returns self.")
                setattr(cls, f"set_{method}_request", setter)

    @classmethod
    def _metadata_params(cls, method):
        """The parameters of ``method`` besides ``X`` and ``y``: the metadata routing may pass."""
        fn = inspect.getattr_static(cls, method, None)
        fn = getattr(fn, "fn", fn)  # only_when
        if not callable(fn):
            return []
        return [p.name for p in inspect.signature(fn).parameters.values()
                if p.name not in ("self", "X", "y") and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]

    def _set_request(self, method, **requests):
        unknown = sorted(set(requests) - set(self._metadata_params(method)))
        if unknown:
            raise TypeError(f"Unexpected args: {unknown} in {method}. Accepted arguments are: "
                            f"{self._metadata_params(method)}")
        request = self.get_metadata_routing()
        for param, alias in requests.items():
            getattr(request, method).add_request(param=param, alias=alias)
        self._metadata_request = request  # the attribute scikit-learn's clone carries over
        return self

    def get_metadata_routing(self):
        """scikit-learn's ``MetadataRequest`` of this estimator (a copy): for each method,
        its metadata as ``set_<method>_request`` chose (None, the default: an error if
        passed)."""
        if hasattr(self, "_metadata_request"):
            return copy.deepcopy(self._metadata_request)
        from sklearn.utils.metadata_routing import MetadataRequest  # only scikit-learn's routing calls this

        request = MetadataRequest(owner=type(self).__name__)
        for method in _ROUTED_METHODS:
            for param in self._metadata_params(method):
                getattr(request, method).add_request(param=param, alias=None)
        return request

    @classmethod
    def _get_param_names(cls):
        """The constructor's parameter names, sorted (no ``*args``: every parameter is named)."""
        init = cls.__init__
        if init is object.__init__:
            return []
        params = [p for p in inspect.signature(init).parameters.values() if p.name != "self"]
        for p in params:
            if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
                raise TypeError(f"{cls.__name__}.__init__ takes *{p.name}: estimators name every parameter")
        return sorted(p.name for p in params)

    def get_params(self, deep=True):
        """The constructor's parameters and their values (and, with ``deep``, those of any
        estimator among them as ``name__param``)."""
        out = {}
        for name in self._get_param_names():
            value = getattr(self, name)
            if deep and hasattr(value, "get_params") and not isinstance(value, type):
                out.update((f"{name}__{k}", v) for k, v in value.get_params().items())
            out[name] = value
        return out

    def set_params(self, **params):
        """Set parameters (``name__param`` for a parameter of a nested estimator); returns self."""
        valid = self.get_params(deep=True)
        nested = {}
        for key, value in params.items():
            name, sep, sub = key.partition("__")
            if name not in valid:
                raise ValueError(f"Invalid parameter {name!r} for estimator {self}. Valid parameters are: "
                                 f"{self._get_param_names()!r}.")
            if sep:
                nested.setdefault(name, {})[sub] = value
            else:
                setattr(self, name, value)
                valid[name] = value
        for name, sub_params in nested.items():
            valid[name].set_params(**sub_params)
        return self

    def __sklearn_clone__(self):
        """scikit-learn's ``clone`` calls this: :func:`clone`."""
        return clone(self)

    def __repr__(self):
        defaults = {name: p.default for name, p in inspect.signature(type(self).__init__).parameters.items()}
        changed = [f"{name}={value!r}" for name, value in self.get_params(deep=False).items()
                   if repr(value) != repr(defaults.get(name))]
        return f"{type(self).__name__}({', '.join(changed)})"


# What a clone keeps besides the parameters: the metadata requests (as scikit-learn's clone),
# the output format (set_output) and the formula of a model from_formula made (its refits in a
# cross-validation code their frames the same way).
_CLONED_SETTINGS = ("_metadata_request", "_output", "_formula_call")


def clone(est):
    """A new, unfitted estimator with ``est``'s parameters (copies of them; a nested estimator
    cloned in turn), its metadata requests and output format, as scikit-learn's ``clone``
    makes it, and the formula of a model made by ``from_formula``."""
    params = {name: clone(value) if isinstance(value, ParamsMixin) else copy.deepcopy(value)
              for name, value in est.get_params(deep=False).items()}
    new = type(est)(**params)
    for name in _CLONED_SETTINGS:
        if name in vars(est):
            setattr(new, name, copy.deepcopy(vars(est)[name]))
    return new


def check_is_fitted(est, attributes=None):
    """Raise scikit-learn's ``NotFittedError`` (a ValueError and an AttributeError) unless
    ``est`` has every attribute named in ``attributes`` (a name or a list) or, without
    ``attributes``, any fitted attribute (a name ending in ``_``)."""
    names = [attributes] if isinstance(attributes, str) else attributes
    if names is not None:
        fitted = all(hasattr(est, name) for name in names)
    else:
        fitted = any(name.endswith("_") and not name.startswith("__") for name in vars(est))
    if not fitted:
        from sklearn.exceptions import NotFittedError  # the type callers catch; imported on this path only

        raise NotFittedError(f"This {type(est).__name__} instance is not fitted yet. Call 'fit' with appropriate "
                             "arguments before using this estimator.")


class _OnlyWhen:
    """The descriptor of :func:`only_when`."""

    def __init__(self, fn, check):
        self.fn, self.check = fn, check
        functools.update_wrapper(self, fn)

    def __get__(self, obj, owner=None):
        if obj is None:
            return self.fn
        if not self.check(obj):
            raise AttributeError(f"{type(obj).__name__} has no attribute {self.fn.__name__!r} now")
        return types.MethodType(self.fn, obj)


def only_when(check):
    """Decorate a method that exists only while ``check(estimator)`` holds, as
    scikit-learn's ``available_if`` (``hasattr`` is False otherwise), except that the
    AttributeError a user sees is the one ``check`` raises, which says what to do
    ("call calibrate(...) first"), not a bare "has no attribute"."""
    return lambda fn: _OnlyWhen(fn, check)


class OrdinalEstimator(ParamsMixin):
    """Base class: label encoding, feature checks and decoding shared by all estimators.

    Subclasses set ``_accept_sparse`` and implement ``fit``/``predict`` using
    :meth:`_validate_fit` and :meth:`_validate_predict`.

    Rules every estimator keeps here:

    * ``fit`` needs a training row of every declared class (``classes=``): a model cannot
      place a class it has never seen.  Only a stream (``partial_fit``) may declare
      classes it has not shown yet.
    * ``fit`` warns (:class:`bayesord.ColumnScaleWarning`, naming the columns) when the
      columns' standard deviations differ by more than 10^3, and, for models whose fit
      depends on column offsets (``_offset_sensitive``), when a column's |mean|/sd
      exceeds 10^3.  Constant columns are left out of both checks, and models that
      standardise their columns themselves (``_scale_sensitive = False``: the Bayesian
      models) are not checked.  A kernel matrix has no feature columns to check.  The
      library's own refits (:func:`internal_fits`: cross-fitted copies, bootstrap draws)
      leave the warning to the user's fit.
    * A fit that predicts one class for every training row whose labels hold several warns
      (:class:`bayesord.OneClassWarning`, with ``_one_class_hint``): no silent degenerate
      model.
    * A model made by ``bayesord fit`` carries the standardisation the command applied,
      ``input_center_`` and ``input_scale_`` (d,), and :meth:`_validate_predict` applies it
      to raw rows.  An estimator fitted in Python never has them.
    """

    _accept_sparse = False
    # Why every declared class needs a training row (the end of the error message otherwise).
    _why_every_class = "every declared class needs at least one sample to place its thresholds"
    # Whether the fit depends on the columns' offsets (the model does not centre them) and
    # on their scales (the model does not standardise them).
    _offset_sensitive = False
    _scale_sensitive = True
    # Why a fit in float32 (JAX's default) is worse than in float64, for the models whose user
    # fits then warn (None: no warning).
    _float32_warning = None
    # The fewest feature columns a fit takes (0 where the thresholds and group effects alone
    # make a model).
    _min_features = 1
    # How many thresholds_ a fitted model has beyond K - 1 (one per class: K).
    _extra_thresholds = 0
    # Whether a target with as many values as rows is a use of the model (a ranking SVM's
    # order relations) rather than a regression target passed by mistake
    # (warn_if_continuous_target).
    _ranks_any_target = False
    # fit's arguments that take rows besides X (TransductiveOrdinalRegression's
    # X_unlabeled): from_formula codes a DataFrame given for one as it codes the training rows.
    _formula_fit_rows = ()
    # Constructor parameters that from_formula sets from the formula (the columns of a
    # cumulative link model's parts, a mixed model's random slopes): a refit from the formula
    # sets them again.
    _formula_set_params = ()
    # What to try when a fit predicts one class for every training row (warn_if_one_class).
    _one_class_hint = ("Standardise the columns, and try a weaker penalty (a larger C) or, for a "
                       "kernel, a width on the data's scale (gamma='scale'); a fit that stopped early "
                       "(converged_ False) can do this too.")

    @classmethod
    def from_formula(cls, formula, data, sample_weight=None, standardize=None, **params):
        """Fit ``formula`` (``"rating ~ temp + contact"``, ``"y ~ ."``) to the DataFrame ``data``.

        Terms in formulaic's (R-like) syntax; text columns coded as treatment contrasts
        against their first level (``temp[T.warm]``); no intercept column (the thresholds, or
        the model's own offsets, hold it).  The fitted model then takes DataFrames with the
        formula's columns in every prediction method, codes them as the fit did, and saves
        that coding with itself.  Its ``fit`` on a DataFrame, and its clones' (scikit-learn's
        ``cross_val_score``, ``GridSearchCV``), fit the formula to that frame, the response
        from ``y`` when given; a ``fit`` on arrays makes a model of arrays, with a warning.

        Args:
            formula: ``"response ~ terms"``; ``.`` is every other column.
            data: a DataFrame holding the response and the columns the terms name.
            sample_weight: optional (n,) non-negative weights.
            standardize: centre and scale the coded columns to sd 1 before the fit, keeping
                the transform (``input_center_``, ``input_scale_``) for new rows, as
                ``bayesord fit`` does.  None (default): for the models whose fit depends on
                the columns' scales (the margin models; coefficients are then per sd of
                each coded column), not for those that standardise inside the fit.
            **params: constructor parameters, and for a model whose ``fit`` takes more rows
                (``TransductiveOrdinalRegression``'s ``X_unlabeled``) a DataFrame of them, with
                the formula's columns (a response column there is ignored), coded and
                standardised as ``data``.

        Returns:
            The fitted estimator.
        """
        response, terms, _, _ = split_formula(formula, group_term=False)
        check_formula_data(formula, data, response)
        X, spec = design_matrix(terms, predictors(data, response))
        if X.shape[1] < cls._min_features:
            raise ValueError(f"formula {formula!r} has no terms to fit, and {cls.__name__} needs a column; "
                             "CumulativeLinkModel fits the thresholds alone (the class shares)")
        rows = {name: formula_rows(spec, params.pop(name)) for name in cls._formula_fit_rows
                if params.get(name) is not None}
        model = cls(**params)
        if cls._scale_sensitive if standardize is None else standardize:
            center, scale, constant = column_moments(X.to_numpy(dtype=np.float64))
            scale = np.where(constant, 1.0, scale)
            model.fit((X - center) / scale, data[response], sample_weight=sample_weight,
                      **{name: (A - center) / scale for name, A in rows.items()})
            set_input_transform(model, center, scale)
        else:
            model.fit(X, data[response], sample_weight=sample_weight, **rows)
        model.formula_ = formula
        model._spec = spec
        model._formula_call = {"formula": formula, "standardize": standardize}
        return model

    def _refit_from_formula(self, data, y=None, *more, sample_weight=None, **rows):
        """``fit(data, y)`` of a model ``from_formula`` made, or of its clone: the formula again
        on the DataFrame ``data`` (its text columns coded anew), the response from ``y`` when
        given (as scikit-learn's cross-validation passes it) or else from ``data``.  So
        ``cross_val_score``, ``GridSearchCV`` and a refit on new rows work on formula models."""
        call = self._formula_call
        unknown = sorted(set(rows) - set(self._formula_fit_rows))
        if more or unknown:
            given = f"not with {unknown[0]}=" if unknown else "its other arguments by name"
            raise TypeError(f"{type(self).__name__} was made by from_formula, whose formula names its columns: "
                            f"it refits with fit(data, y=None, sample_weight=None), {given}")
        if y is not None:
            if len(y) != len(data):
                raise ValueError(f"y has {len(y)} rows and the DataFrame {len(data)}")
            data = data.assign(**{formula_response(call["formula"]): getattr(y, "array", y)})
        params = {name: value for name, value in self.get_params(deep=False).items()
                  if name not in self._formula_set_params}
        fitted = type(self).from_formula(data=data, sample_weight=sample_weight, **call, **rows, **params)
        vars(self).update(vars(fitted))
        return self

    @property
    def status_(self):
        """The fit's :class:`bayesord.Status` code, read from the functional result
        ``result_`` every estimator keeps (an array for a fit of several problems, such as
        NPSVOR's one per rank)."""
        status = np.asarray(self.result_.status)
        return Status(int(status)) if status.ndim == 0 else status

    @property
    def noise_(self):
        """The latent noise scale sigma, for the models that have one (``result_.sigma``)."""
        sigma = getattr(self.result_, "sigma", None)
        if sigma is None:
            raise AttributeError(f"{type(self).__name__} has no latent noise scale")
        return float(np.asarray(sigma))

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        for name, kind in _LABELLED_OUTPUTS.items():
            method = inspect.getattr_static(cls, name, None)
            check = getattr(method, "check", None)  # only_when: wrap what it guards
            inner = getattr(method, "fn", method) if check is not None else method
            if inner is None or getattr(inner, "_labelled_output", False):
                continue
            wrapped = _labelled_output(inner, kind)
            setattr(cls, name, only_when(check)(wrapped) if check is not None else wrapped)

    def set_output(self, *, transform=None):
        """Choose what the prediction methods return: NumPy arrays (``"default"``) or pandas
        objects labelled by class and indexed as ``X`` (``"pandas"``).

        With ``"pandas"``: ``predict`` gives a Series; ``predict_proba`` a DataFrame with
        columns ``P(y=<class>)``; ``predict_cumproba`` columns ``P(y<=<class>)``;
        ``predict_proba_interval`` three such DataFrames (lower, upper, sd);
        ``predict_expected`` a Series; ``predict_set`` a DataFrame with columns ``lower`` and
        ``upper`` (for several alphas, columns ``(alpha, "lower")``, ``(alpha, "upper")``).
        The index is ``X``'s when ``X`` is a DataFrame, else 0..n-1.  ``clone`` keeps the
        setting (as scikit-learn's keeps its transformers'); a saved model file does not.
        (The name and argument are scikit-learn's, as on its transformers.)

        Args:
            transform: ``"pandas"``, ``"default"`` (NumPy), or None (unchanged).

        Returns:
            self.
        """
        if transform not in (None, "default", "pandas"):
            raise ValueError(f"set_output takes transform='pandas' or 'default', got {transform!r}")
        if transform is not None:
            self._output = transform
        return self

    def __sklearn_tags__(self):
        from sklearn.utils import ClassifierTags, InputTags, Tags, TargetTags  # only scikit-learn calls this

        # Models with a kernel take sparse input with their linear kernel only.
        sparse = self._accept_sparse and getattr(self, "kernel", "linear") == "linear"
        return Tags(estimator_type="classifier", target_tags=TargetTags(required=False),
                    classifier_tags=ClassifierTags(), input_tags=InputTags(sparse=sparse))

    def _validate_fit(self, X, y, sample_weight=None, classes=None, min_classes=2,
                      require_all_classes=True):
        """Check (X, y, weights); set ``classes_``, ``n_features_in_``, ``feature_names_in_``.

        ``classes`` is the label order passed to ``fit``; the estimator's own ``classes``
        parameter is used when ``fit`` gets none, and the two must agree when both are given.

        Returns:
            (X, codes, sample_weight) with codes in 0..K-1.

        Raises:
            ValueError: bad X, y or weights; fewer than ``min_classes`` classes with positive
                weight; with ``require_all_classes`` (all but ``partial_fit``), a declared class
                without a row of positive weight.

        Warns:
            ColumnScaleWarning: column scales or (``_offset_sensitive``) offsets far apart.
        """
        own = self.classes
        if classes is None:
            classes = own
        elif own is not None and not same_order(own, classes):
            raise ValueError(f"classes={list(classes)!r} passed to fit differs from the estimator's "
                             f"classes={list(own)!r}; give one of them")
        X, names = check_X(X, accept_sparse=self._accept_sparse, min_features=self._min_features)
        if self._scale_sensitive and getattr(self, "kernel", None) != "precomputed" and not _INTERNAL_FIT.get():
            problem = column_scale_problems(X, names, offsets=self._offset_sensitive)
            if problem:
                warn_user(f"{type(self).__name__}: {problem}. One penalty or kernel width for all "
                          "columns treats such columns unequally, and solvers converge slowly on them: "
                          "standardise the columns (e.g. a Pipeline with "
                          "sklearn.preprocessing.StandardScaler); `bayesord fit` does it by default",
                          ColumnScaleWarning)
        if self._float32_warning and float_dtype() == np.float32 and not _INTERNAL_FIT.get():
            warn_user(f"{type(self).__name__} fits in float32, JAX's default: {self._float32_warning}; "
                      'call jax.config.update("jax_enable_x64", True) before fitting (the command line does)')
        codes, classes_ = encode_labels(y, classes, n=X.shape[0])
        sw = check_sample_weight(sample_weight, X.shape[0])
        if sample_weight is not None and not _INTERNAL_FIT.get():
            warn_if_survey_weights(type(self).__name__, sw)
        if getattr(self, "class_weight", None) is not None:
            sw = sw * class_weights(self.class_weight, codes, sw, classes_)[codes]
        present = np.flatnonzero(np.bincount(codes[sw > 0], minlength=len(classes_)))
        if present.size < min_classes:
            raise ValueError(
                f"y has {present.size} {'class' if present.size == 1 else 'classes'} with "
                f"positive weight; at least {min_classes} are needed to fit an ordinal model"
            )
        if require_all_classes and present.size < len(classes_):
            missing = np.delete(np.asarray(classes_), present).tolist()
            unused = ("; they are categories of y that no row holds (as after subsetting a "
                      "Categorical): y.cat.remove_unused_categories() drops them"
                      if classes is None and (hasattr(y, "cat") or type(y).__name__ == "Categorical") else "")
            raise ValueError(f"classes {missing} have no training samples{unused}; {self._why_every_class}")
        # Not a stream's batch, which may be small, nor the library's own refits.
        if require_all_classes and not _INTERNAL_FIT.get() and not self._ranks_any_target:
            warn_if_continuous_target(type(self).__name__, codes[sw > 0], len(classes_))
        self.classes_ = classes_
        self.n_features_in_ = X.shape[1]
        if names is not None:
            self.feature_names_in_ = names
        elif hasattr(self, "feature_names_in_"):
            del self.feature_names_in_
        return X, codes, sw

    def _validate_predict(self, X):
        """Check X against the fitted features; apply ``input_center_``/``input_scale_`` if set.

        A model fitted from a formula (``_spec``, set by ``from_formula``) takes DataFrames
        and codes them as the fit did.
        """
        check_is_fitted(self, "classes_")
        spec = getattr(self, "_spec", None)
        if spec is not None:
            X = formula_rows(spec, X)
        fitted_names = getattr(self, "feature_names_in_", None)
        if fitted_names is not None and getattr(X, "columns", None) is not None:
            _check_feature_names([str(c) for c in X.columns], [str(c) for c in fitted_names])
        elif fitted_names is not None and spec is None:
            # scikit-learn's wording: its users know it, and filter it by this message
            warn_user(f"X does not have valid feature names, but {type(self).__name__} was fitted with "
                      f"feature names; its columns are taken to be {list(fitted_names)} in that order")
        X, _ = check_X(X, accept_sparse=self._accept_sparse, n_features=self.n_features_in_,
                       min_features=self._min_features, model=type(self).__name__)
        center = getattr(self, "input_center_", None)
        if center is None:
            return X
        if sp.issparse(X):
            raise TypeError(f"this {type(self).__name__} standardises its input (centring makes rows "
                            "dense), so X must be dense: pass X.toarray()")
        return (X - center) / self.input_scale_

    def _check_restored(self):
        """Check that a loaded model's arrays fit its features and classes.

        The weights over the features are the rows the model stores (``relevance_vectors_``,
        ``support_``, ``basis_``) when it has them, else ``coef_`` ((d,) or one row per class,
        (K, d)); ``thresholds_`` has K - 1 entries (plus ``_extra_thresholds``).

        A model whose fitted state holds other such arrays extends this check.

        Raises:
            ValueError: naming the first array that does not fit.
        """
        d, K = int(self.n_features_in_), len(self.classes_)
        stored_rows = [name for name in _ROW_ATTRIBUTES if hasattr(self, name)]
        for name in stored_rows or ["coef_"]:
            value = getattr(self, name, None)
            if value is None:
                continue
            shape = np.shape(value)
            if not shape or shape[-1] != d or (name == "coef_" and len(shape) == 2 and shape[0] != K):
                want = f"(..., {d})" if stored_rows else f"({d},) or ({K}, {d})"
                raise ValueError(f"{name} has shape {shape}, but the model has {d} features and {K} "
                                 f"classes, so it must be {want}")
        thresholds = getattr(self, "thresholds_", None)
        n_thr = K - 1 + self._extra_thresholds
        if thresholds is not None and np.shape(thresholds) != (n_thr,):
            raise ValueError(f"thresholds_ has shape {np.shape(thresholds)}, but the model has {K} "
                             f"classes, so it must be ({n_thr},)")

    def _check_shapes(self, *named):
        """Raise naming the first ``(name, array, shape)`` whose array does not have that shape
        (for an estimator's ``_restore``, before it computes anything from those arrays)."""
        for name, value, shape in named:
            if np.shape(value) != shape:
                raise ValueError(f"{name} has shape {np.shape(value)}, but the model has "
                                 f"{self.n_features_in_} features and {len(self.classes_)} classes, "
                                 f"so it must be {shape}")

    def _encode_y(self, y, n):
        """Encode labels at scoring time against the fitted classes (unknown labels raise)."""
        check_is_fitted(self, "classes_")
        codes, _ = encode_known_labels(_labels_1d(y, n), self.classes_, what="y")
        return codes

    def _decode(self, codes):
        return np.asarray(self.classes_)[np.asarray(codes)]

    def score(self, X, y, sample_weight=None):
        """Negative mean absolute error of ``predict`` in class positions, weighted by
        ``sample_weight`` (higher is better; scikit-learn's model selection maximises it)."""
        codes = self._encode_y(y, np.shape(X)[0])
        pred = self._encode_y(self.predict(X), codes.shape[0])
        sw = check_sample_weight(sample_weight, codes.shape[0])
        return -float(np.average(np.abs(pred - codes), weights=sw))


# Fitted attributes that hold training rows (relevance or support vectors, kernel basis
# rows): a model that has one is an expansion over them, linear in the features otherwise.
_ROW_ATTRIBUTES = ("relevance_vectors_", "support_", "basis_")


def set_input_transform(est, center, scale) -> None:
    """Give a fitted estimator the standardisation ``x -> (x - center) / scale`` of its input.

    ``bayesord fit`` fits on standardised columns and stores the transform this way (and in
    the model file), so that ``predict`` takes raw rows.

    Raises:
        ValueError: ``center`` or ``scale`` is not finite, not of shape (n_features_in_,),
            or ``scale`` is not positive.
    """
    center = np.asarray(center, dtype=np.float64)
    scale = np.asarray(scale, dtype=np.float64)
    d = int(est.n_features_in_)
    for name, value in (("input_center", center), ("input_scale", scale)):
        if value.shape != (d,) or not np.all(np.isfinite(value)):
            raise ValueError(f"{name} must be {d} finite numbers (one per feature), got shape {value.shape}")
    if np.any(scale <= 0):
        raise ValueError("input_scale must be positive")
    est.input_center_ = center
    est.input_scale_ = scale


def same_order(a, b):
    """Whether two label sequences are the same labels in the same order."""
    return len(a) == len(b) and all(x == y for x, y in zip(a, b))


def _labels_1d(y, n):
    """``y`` as a 1-D array of ``n`` labels: an array of numbers as it is, anything else as
    objects (a list of numbers and strings must not become strings)."""
    if isinstance(getattr(y, "dtype", None), np.dtype) and y.dtype.kind in "iuf":
        arr = np.asarray(y)
    else:
        arr = np.asarray(y.astype(object) if hasattr(y, "cat") else y, dtype=object)
    if arr.ndim != 1:
        raise ValueError(f"y must be 1-D, got shape {arr.shape}")
    if arr.shape[0] != n:
        raise ValueError(f"X and y have different lengths: {n} rows in X, {arr.shape[0]} labels in y")
    return arr


# A target with at least this many classes, more than half as many as its rows, reads as a
# continuous one (see warn_if_continuous_target).
_MANY_CLASSES = 30


def warn_if_continuous_target(name, codes, n_classes):
    """Warn when the labels look like a continuous target: at least ``_MANY_CLASSES``
    classes and more than one for every two rows.  An ordinal model then fits a threshold
    between every pair of neighbouring values, slowly and to no purpose (300 raw values of a
    regression target made a 300-class probit in 6 s)."""
    n = codes.shape[0]
    if n_classes < _MANY_CLASSES or 2 * n_classes <= n:
        return
    single = int(np.sum(np.bincount(codes, minlength=n_classes) == 1))
    warn_user(f"{name}: y has {n_classes} classes among {n} rows, {single} of them with a "
              "single row: is it a continuous target?  An ordinal model fits a threshold between "
              "every two neighbouring classes; cut the target into a few ordered classes first "
              "(in Python, bayesord.datasets.equal_frequency_bins(y, 5))")


# Fractional sample weights whose total is this many times the row count (or less than its
# inverse) get a warning: survey weights summed to a population size (a user's trial: the same
# relative weights summed to 2,000, 2*10^6 and 3*10^8 over 2,000 rows gave a coefficient's sd
# as 0.0129, 0.00041 and 0.000034).
_WEIGHT_TOTAL_RATIO = 10.0


def warn_if_survey_weights(name, sw):
    """Warn when ``sw`` looks like survey (probability) weights rather than counts: some are
    fractional and they sum to more than :data:`_WEIGHT_TOTAL_RATIO` times the row count, or
    to less than its inverse.  A fit counts a row of weight ``w`` ``w`` times, so its posterior
    (and a margin model's balance of penalty and data) is that of ``sum(w)`` rows.  Integer
    weights are counts (a table of cell counts sums to far more than its rows) and pass."""
    n, total = sw.shape[0], float(np.sum(sw))
    if np.all(sw == np.round(sw)) or 1.0 / _WEIGHT_TOTAL_RATIO <= total / n <= _WEIGHT_TOTAL_RATIO:
        return
    warn_user(f"{name}: sample_weight sums to {total:.4g} over {n} rows, with fractional weights.  A fit "
              "counts a row of weight w w times (2 is a duplicated row), so it is as sure as "
              f"{total:.4g} rows would make it.  For survey (probability) weights, rescale them to sum "
              "to the row count, w * n / w.sum(): the relative weights stay, and the intervals are "
              "those of n rows")


def solver_tol(tol, dtype):
    """A solver's relative tolerance: ``tol``, or 1e-10 in float64 and 1e-5 in float32."""
    if tol is None:
        return 1e-10 if dtype == np.float64 else 1e-5
    if not (np.isfinite(tol) and tol > 0):
        raise ValueError(f"tol must be a positive number, got {tol!r}")
    return float(tol)


def proba_from_log(log_proba):
    """Class probabilities (n, K) in float64 from a prediction's log-probabilities,
    normalised again on the host: a class far in a tail keeps its positive probability where
    exponentiating in float32 gives it 0 (below about 1e-38), an infinite log-loss for a
    row of that class."""
    log_p = np.asarray(log_proba, dtype=np.float64)
    p = np.exp(log_p - np.max(log_p, axis=1, keepdims=True))
    return p / np.sum(p, axis=1, keepdims=True)


def class_from_proba(proba, rule):
    """Class codes from probabilities, (n, K): the most probable class (``"mode"``) or the
    smallest whose cumulative probability reaches 1/2 (``"median"``, which minimises the
    expected absolute error in class positions)."""
    if rule == "mode":
        return np.argmax(proba, axis=1)
    if rule == "median":
        return np.argmax(np.cumsum(proba, axis=1) >= 0.5, axis=1)
    raise ValueError(f"rule must be 'mode' or 'median', got {rule!r}")


def column_positions(what, chosen, d, names):
    """A constructor's choice of columns (``nominal=``, ``random_slopes=``, ...) as a tuple of
    positions among the ``d`` columns named ``names`` (None: unnamed); None chooses none.

    Raises:
        TypeError: a single column instead of a list, or an entry that is neither a name nor
            a position.
        ValueError: a position out of range, or a name X does not have.
    """
    if chosen is None:
        return ()
    if isinstance(chosen, (str, int, np.integer)):
        raise TypeError(f"{what} must be a list of columns, got {chosen!r} (write [{chosen!r}])")
    index = {str(n): j for j, n in enumerate(names)} if names is not None else {}
    out = []
    for c in chosen:
        if isinstance(c, (int, np.integer)) and not isinstance(c, bool):
            if not 0 <= c < d:
                raise ValueError(f"{what} names column {c}, but X has {d} columns")
            out.append(int(c))
        elif isinstance(c, str):
            if c not in index:
                known = f"its columns are {list(index)}" if index else "X has no column names"
                raise ValueError(f"{what} names column {c!r}, which X does not have ({known})")
            out.append(index[c])
        else:
            raise TypeError(f"{what} takes column names or positions, got {c!r}")
    return tuple(out)


def check_positive_ints(est, *names):
    """Each named parameter of ``est`` is a positive integer (not a bool), else ValueError."""
    for name in names:
        val = getattr(est, name)
        if isinstance(val, bool) or not isinstance(val, numbers.Integral) or val < 1:
            raise ValueError(f"{name} must be a positive integer, got {val!r}")


def fit_rng(random_state) -> np.random.RandomState:
    """The one reading of an estimator's ``random_state`` for the randomness of its fit
    (coordinate orders, shuffles, landmarks, subsets, folds).

    An int is a seed and None is the seed 0, so a model fitted twice on the same data is the
    same model, as its posterior draws are (:func:`draws_key`); a ``RandomState`` is drawn
    from and a ``Generator`` seeds one, for a caller who wants fits to differ.
    """
    if isinstance(random_state, np.random.Generator):
        return np.random.RandomState(int(random_state.integers(2**31 - 1)))
    if isinstance(random_state, np.random.RandomState):
        return random_state
    if random_state is None:
        return np.random.RandomState(0)
    if isinstance(random_state, bool) or not isinstance(random_state, numbers.Integral):
        raise ValueError(f"random_state must be None, an int, a RandomState or a Generator, got {random_state!r}")
    return np.random.RandomState(int(random_state))


def fit_key(rng: np.random.RandomState):
    """A JAX key drawn from :func:`fit_rng`'s generator."""
    return jax.random.PRNGKey(rng.randint(2**31 - 1))


def draws_key(random_state):
    """The JAX key of an estimator's posterior draws: its ``random_state`` (an int), 0 for None."""
    seed = 0 if random_state is None else random_state
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
        raise TypeError("random_state must be an int or None")
    return jax.random.key(int(seed))


def singular_hessian(cov) -> str | None:
    """Why a maximum-likelihood fit's Hessian is numerically singular (a phrase for a
    warning), or None when it is not.

    R's ``clm`` check (``conv.check``: "Hessian is numerically singular: parameters are not
    uniquely determined"), on ``cov``, the inverse Hessian in parameters that shifting or
    rescaling a column leaves alone (coefficients of standardised columns).  Singular means
    a variance above ``1/sqrt(eps)`` of float64 (an sd over 8e3 on standardised columns: all
    directions undetermined, as under complete separation, where the likelihood flattens
    everywhere), or correlations whose eigenvalue ratio is above that bound (above
    ``0.01/eps`` in float32) or which have an eigenvalue that is not positive (one direction
    undetermined: dependent columns, too many parameters for the rows, or quasi-complete
    separation).  On the 22 shared data sets (standardised, 5 splits) it fires for
    ``CumulativeLinkModel`` on tae, marketing, auto_mpg and abalone (one-hot columns that
    keep every level), on pasture, pyrim10, pyrimidines and triazines (ratios 6e8 to 3e15),
    and on none of the other 14 (ratios at most 2.3e4).
    """
    cov = np.asarray(cov, dtype=np.float64)
    sd = np.sqrt(np.abs(np.diag(cov)))
    if cov.size == 0 or not np.all(sd > 0):
        return None
    bound = 1.0 / np.sqrt(np.finfo(np.float64).eps)
    if sd.max() ** 2 > bound:
        return f"a parameter's sd is {sd.max():.1e} on standardised columns"
    ev = np.linalg.eigvalsh(cov / np.outer(sd, sd))
    if ev[0] > 0 and ev[-1] <= min(bound, 0.01 / np.finfo(float_dtype()).eps) * ev[0]:
        return None
    ratio = f"{ev[-1] / ev[0]:.1e}" if ev[0] > 0 else "infinite"
    return f"its parameters' correlations have an eigenvalue ratio of {ratio}"


def warn_if_undetermined(est, cov, X, sw, remedy, prior_remedy="give alpha > 0") -> None:
    """After a maximum-likelihood fit of ``est`` on rows ``X`` with weights ``sw``: warn
    (``ConvergenceWarning``) when :func:`singular_hessian` finds its Hessian singular, naming
    the dependent columns when there are any and otherwise saying that the classes are
    separated and the estimate does not exist.  ``remedy`` ends the message (what to give
    instead, after "give alpha > 0, or ..."; ``prior_remedy=None`` for a model without a
    penalty)."""
    singular = singular_hessian(cov)
    if singular is None:
        return
    dependent = dependent_columns(X, sw, getattr(est, "feature_names_in_", None)) if X.shape[1] else None
    if dependent:
        problem = (f"{dependent}. Their coefficients are not determined by the data (the Hessian is "
                   f"numerically singular: {singular}), so their estimates, sds and p-values mean nothing; "
                   "predictions are nearly unaffected")
    else:
        problem = (f"the Hessian is numerically singular ({singular}) although no columns are linearly "
                   "dependent: most likely a combination of columns separates the classes, so the likelihood "
                   "rises without bound along it and the maximum-likelihood estimate does not exist (or the "
                   f"{np.shape(cov)[0]} parameters are too many for the {int(np.count_nonzero(sw))} rows). "
                   "The estimates along it, their sds and p-values mean nothing, and probabilities near 0 or "
                   "1 are overconfident")
    steps = ["drop one column of each group"] if dependent else []
    steps += [step for step in (prior_remedy, remedy) if step]
    advice = ", or ".join([", ".join(steps[:-1]), steps[-1]]) if len(steps) > 1 else steps[0]
    warn_user(f"{type(est).__name__}.fit: {problem}. {advice[0].upper()}{advice[1:]}", convergence_warning())


def classes_separated(X, codes, sw, n_classes) -> bool:
    """Whether the columns separate the classes completely: some score ``x'w`` and ordered
    thresholds put every row of positive weight inside its class's interval with a margin.
    Then every cumulative-link likelihood rises without bound along ``w`` and the maximum
    likelihood estimate does not exist (Albert & Anderson 1984 for the logistic model; the
    same geometry for ordered classes).

    Decided exactly by the feasibility of a linear program in ``(w, b)`` on the
    standardised rows (SciPy's HiGHS): ``x_i'w <= b_k - 1`` for a row of class ``k`` below
    the top class, ``x_i'w >= b_{k-1} + 1`` above the bottom one, ``b_k <= b_{k+1}``
    (scaling turns any strict separation into one of margin 1).
    """
    import scipy.sparse as sparse
    from scipy.optimize import linprog

    keep = np.asarray(sw) > 0
    Z, k = np.asarray(X, dtype=np.float64)[keep], np.asarray(codes)[keep]
    center, scale, constant = column_moments(Z)
    Z = (Z - center) / np.where(constant, 1.0, scale)
    d, n_b = Z.shape[1], n_classes - 1
    below, above = np.flatnonzero(k < n_b), np.flatnonzero(k > 0)

    def threshold_part(rows, column, sign):
        return sparse.csr_array((np.full(rows.size, sign), (np.arange(rows.size), column)), shape=(rows.size, n_b))

    order = sparse.csr_array(sparse.eye(n_b - 1, n_b) - sparse.eye(n_b - 1, n_b, k=1))
    A = sparse.vstack([
        sparse.hstack([sparse.csr_array(Z[below]), threshold_part(below, k[below], -1.0)]),
        sparse.hstack([sparse.csr_array(-Z[above]), threshold_part(above, k[above] - 1, 1.0)]),
        sparse.hstack([sparse.csr_array((n_b - 1, d)), order]),
    ], format="csr")
    rhs = np.r_[-np.ones(below.size + above.size), np.zeros(n_b - 1)]
    return linprog(np.zeros(d + n_b), A_ub=A, b_ub=rhs, bounds=(None, None), method="highs").status == 0


# What every warning of complete separation says (the command line recognises it by this).
SEPARATED = ("the columns separate the classes completely (a linear score puts every training row inside "
             "its class's interval)")
# A maximum-likelihood fit whose log-likelihood per unit of weight is above this gives its
# training rows their own classes with probability above 0.95 on average, as it does where the
# columns separate the classes; only such fits (and fits at their cap) are checked for it.
_SATURATED_LOGLIK = -0.05


def warn_if_separated(est, X, codes, sw, loglik, capped, remedy) -> bool:
    """After a maximum-likelihood fit of ``est`` (log-likelihood ``loglik``; ``capped``: it
    stopped at its iteration cap): when the columns ``X`` separate the classes completely
    (:func:`classes_separated`), warn (``ConvergenceWarning``) that the estimate does not
    exist, ending with ``remedy``; returns whether it warned.

    Checked only for a fit at its cap or one whose training rows are near certain
    (:data:`_SATURATED_LOGLIK`): a separated fit either runs to its cap or stops where its
    steps become small, often before its Hessian is singular to :func:`warn_if_undetermined`
    (300 rows cut at values of one raw column reached the cap; 30 to 60 rows converged
    without a word)."""
    if X.shape[1] == 0 or not (capped or loglik > _SATURATED_LOGLIK * np.sum(sw)):
        return False
    if not classes_separated(X, codes, sw, len(est.classes_)):
        return False
    why = f"stopped at the iteration cap (status MAX_ITER) because {SEPARATED}" if capped else SEPARATED
    warn_user(f"{type(est).__name__}.fit: {why}: the likelihood rises without bound along it and the "
              "maximum-likelihood estimate does not exist, so the estimates, their sds and p-values mean "
              f"nothing and probabilities near 0 or 1 are overconfident. {remedy}", convergence_warning())
    return True


def check_level(level):
    """A credible level in (0, 1)."""
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must be in (0, 1), got {level}")


def bands_from_draws(draws, level):
    """``(lower, upper, sd)`` of class probabilities, each (n, K), from posterior draws of
    shape (n_draws, n, K): the central ``level`` band and the draws' sd."""
    draws = np.asarray(draws, dtype=np.float64)
    lo, hi = np.quantile(draws, [(1 - level) / 2, (1 + level) / 2], axis=0)
    return np.clip(lo, 0.0, 1.0), np.clip(hi, 0.0, 1.0), draws.std(axis=0)


def threshold_names(classes):
    """Row names of the thresholds in a summary table: ``threshold low|mid``, ..."""
    cls = [str(c) for c in classes]
    return [f"threshold {cls[k]}|{cls[k + 1]}" for k in range(len(cls) - 1)]


def posterior_table(index, mean, sd, level, **columns):
    """A summary table: mean, sd and the central ``level`` normal interval, then ``columns``.

    A NaN sd (a point estimate) gives NaN interval ends."""
    import pandas as pd

    z = NormalDist().inv_cdf(0.5 + level / 2)  # the standard library's: scipy.stats costs 0.6 s to import
    lo, hi = f"{100 * (1 - level) / 2:g}%", f"{100 * (1 + level) / 2:g}%"
    return pd.DataFrame({"mean": mean, "sd": sd, lo: mean - z * sd, hi: mean + z * sd, **columns},
                        index=index)


def _check_feature_names(given, fitted):
    """ValueError unless a frame's columns are the fitted ones in the fitted order, naming
    the columns missing, the ones not fitted on, or the order wanted."""
    if given == fitted:
        return
    missing = [c for c in fitted if c not in given]
    unknown = [c for c in given if c not in fitted]
    repeated = sorted({c for c in given if given.count(c) > 1})
    if missing or unknown or repeated:
        parts = [f"{what} {names}" for what, names in
                 (("missing", missing), ("not fitted on", unknown), ("repeated", repeated)) if names]
        raise ValueError(f"X has different feature names than the data the model was fitted on: "
                         f"{'; '.join(parts)}")
    raise ValueError(f"X has the fitted feature names in another order; select them in the fitted "
                     f"order, X[model.feature_names_in_] ({fitted})")


# Rows binary_columns looks at first.
_BINARY_HEAD = 32


def binary_columns(X) -> np.ndarray:
    """Which columns of the training rows hold only 0 and 1 (dummies such as
    ``temp[T.warm]``): their marginal effect is the change from 0 to 1, not a slope.

    The first rows rule out most other columns, so only the columns still in doubt are
    read in full (on 10^5 x 20 continuous columns: 2 ms for all rows, 0.02 ms this way)."""
    head = X[:_BINARY_HEAD]
    doubt = np.flatnonzero(np.all((head == 0) | (head == 1), axis=0))
    binary = np.zeros(X.shape[1], dtype=bool)
    if doubt.size:
        rest = X[_BINARY_HEAD:, doubt]
        binary[doubt] = np.all((rest == 0) | (rest == 1), axis=0)
    return binary


def marginal_effects_table(effect, sd, terms, classes, binary, level):
    """The table of ``marginal_effects``: rows (term, outcome) with outcome ``P(y=<class>)``
    or ``E[class]``; columns ``kind`` ("change 0->1" or "slope"), then :func:`posterior_table`'s."""
    import pandas as pd

    outcomes = [f"P(y={c})" for c in classes] + ["E[class]"]
    index = pd.MultiIndex.from_product([list(terms), outcomes], names=["term", "outcome"])
    table = posterior_table(index, np.asarray(effect, np.float64).ravel(), np.asarray(sd, np.float64).ravel(),
                            level)
    table.insert(0, "kind", np.repeat(np.where(binary, "change 0->1", "slope"), len(outcomes)))
    return table


# Column scales further apart than this (or, for a model that reads offsets, a |mean|/sd above
# it) are named when a margin model stops at its iteration cap: its coordinate descent is slow
# on them long before ColumnScaleWarning's factor of COLUMN_SCALE_LIMIT.
SCALE_HINT_FACTOR = 10.0


def iteration_cap_hints(est, X, status):
    """:func:`~bayesord._status.check_status`'s ``hints`` for a margin model fitted on the
    columns ``X`` as given, or None when ``status`` (any shape) has no ``MAX_ITER``.

    What to try: standardised columns first when :func:`column_scale_problems` finds their
    scales (or, for an offset-reading model, their offsets) more than
    :data:`SCALE_HINT_FACTOR` apart, naming the columns; then a larger ``max_iter``.  A raw
    income beside an age (sds 1.5e4 and 17.8) left ``RedSVM()`` at its cap with near-uniform
    calibrated probabilities, where the sd ratio, 840, is below ColumnScaleWarning's.
    """
    if int(Status.MAX_ITER) not in np.asarray(status).astype(int).ravel():
        return None
    problem = column_scale_problems(X, getattr(est, "feature_names_in_", None), offsets=est._offset_sensitive,
                                    limit=SCALE_HINT_FACTOR)
    if problem is None:
        return {Status.MAX_ITER: "try a larger max_iter"}
    return {Status.MAX_ITER: f"{problem}: standardise the columns (a Pipeline with "
                             "sklearn.preprocessing.StandardScaler, or from_formula, which does it), "
                             "then if need be a larger max_iter"}


def reset_fitted(est) -> None:
    """Remove every fitted attribute (trailing underscore) and a formula's coding
    (``_spec``, which belongs to the fit ``from_formula`` made) so a failed fit leaves no
    half state and a plain refit takes arrays again."""
    for name in [k for k in vars(est) if k.endswith("_") and not k.startswith("__")]:
        delattr(est, name)
    vars(est).pop("_spec", None)


def fresh_fit(fit):
    """Decorate a ``fit`` method: it starts from an unfitted estimator (nothing of an earlier
    fit survives, such as ``cv_results_`` after a refit with a fixed C) and, when it raises,
    leaves the estimator unfitted rather than holding a new ``classes_`` beside an old model.
    A fit that succeeds is checked by :func:`warn_if_one_class`.  A user's fit (not the
    library's own copies) first lets :func:`~bayesord._compile_cache.release_programs_if_crowded`
    drop the compiled programs when they crowd the process's memory maps, and ends with
    ``calibrate(X, y, cv=calibration_cv)`` when the constructor asks for it (a failed
    calibration fails the fit)."""
    signature = inspect.signature(fit)

    @functools.wraps(fit)
    def wrapper(self, *args, **kwargs):
        user_fit = not _INTERNAL_FIT.get()
        if user_fit and "_formula_call" in vars(self):
            X = args[0] if args else kwargs.get("X")
            if type(X).__name__ == "DataFrame":
                return self._refit_from_formula(X, *args[1:], **{k: v for k, v in kwargs.items() if k != "X"})
            warn_user(f"{type(self).__name__} was made by from_formula({self._formula_call['formula']!r}); fitted "
                      f"on {type(X).__name__} rather than a DataFrame it becomes a model of those columns as "
                      "they are, without the formula: pass the DataFrame to fit the formula again")
            del self._formula_call  # a fit on arrays makes a model of arrays
        reset_fitted(self)
        arguments = signature.bind(self, *args, **kwargs).arguments
        folds = self._calibration_folds(arguments) if user_fit else 0
        if user_fit:
            release_programs_if_crowded()
        try:
            out = fit(self, *args, **kwargs)
        except BaseException:
            reset_fitted(self)
            raise
        if user_fit:
            warn_if_one_class(self, arguments)
        if folds:
            try:
                self._calibrate_on_fit_rows(arguments, folds)
            except ValueError as err:
                reset_fitted(self)
                raise ValueError(f"calibration_cv={folds}: {err}") from err
            except BaseException:
                reset_fitted(self)
                raise
        return out

    return wrapper


# The prediction methods whose results set_output(transform="pandas") labels, and how.
_LABELLED_OUTPUTS = {"predict": "labels", "predict_proba": "proba", "predict_cumproba": "cumproba",
                     "predict_proba_interval": "interval", "predict_expected": "expected",
                     "predict_set": "set"}


def _labelled_output(method, kind):
    """``method`` returning pandas objects (:meth:`OrdinalEstimator.set_output`) when the
    estimator asks for them and the caller is not the library itself (its own calls, e.g.
    ``predict`` reading ``predict_proba``, always get arrays)."""

    @functools.wraps(method)
    def wrapper(self, X, *args, **kwargs):
        out = method(self, X, *args, **kwargs)
        frame = sys._getframe(1)
        if kind == "proba":
            _warn_if_scored_in_sorted_order(self, frame)
        if getattr(self, "_output", "default") != "pandas":
            return out
        caller = frame.f_globals.get("__name__", "")
        if caller == "bayesord" or caller.startswith("bayesord."):
            return out
        alpha = kwargs.get("alpha", args[0] if args else 0.1)
        return _as_pandas(self, kind, out, X, alpha)

    wrapper._labelled_output = True
    return wrapper


def _warn_if_scored_in_sorted_order(est, frame, depth=4):
    """Warn when scikit-learn's scorer reads ``predict_proba`` of a model whose classes are
    not in sorted order.

    Its probability scores (``"neg_log_loss"``, ``"roc_auc_ovr"``, ...) take the columns to
    be the labels in sorted order, as scikit-learn's own classifiers keep ``classes_``; these
    models keep their ordinal order (``["low", "mid", "high"]``), so such a score is computed
    on the wrong columns.  ``frame`` is predict_proba's caller; the scorer is looked for in
    it and the ``depth - 1`` frames above it while they are scikit-learn's (a scorer of the
    user's or of the library, :func:`bayesord.metrics.neg_log_loss_scorer`, reads
    ``classes_`` itself).
    """
    for _ in range(depth):
        module = "" if frame is None else frame.f_globals.get("__name__", "")
        if not module.startswith("sklearn."):
            return  # the user's own code, or the library's scorers, between: they read classes_
        if module == "sklearn.metrics._scorer":
            break
        frame = frame.f_back
    else:
        return
    classes = np.asarray(est.classes_)
    try:
        if np.array_equal(np.unique(classes), classes):
            return
    except TypeError:  # labels that cannot be sorted together: any order is misread
        pass
    warn_user(f"scikit-learn's scorer reads {type(est).__name__}.predict_proba's columns as the classes in "
              f"sorted order, but they are in the model's order, classes_ = {classes.tolist()}: a probability "
              "score such as 'neg_log_loss' is computed on the wrong columns.  Pass "
              "scoring=bayesord.metrics.neg_log_loss_scorer (or neg_rps_scorer), which reads classes_, or labels "
              "whose sorted order is their order")


def _as_pandas(est, kind, out, X, alpha):
    import pandas as pd

    index = X.index if isinstance(getattr(X, "index", None), pd.Index) else None
    classes = list(est.classes_)
    proba_columns = [f"P(y={c})" for c in classes]
    if kind == "labels":
        return pd.Series(out, index=index, name="prediction")
    if kind == "expected":
        return pd.Series(out, index=index, name="E[y]")
    if kind == "proba":
        return pd.DataFrame(out, index=index, columns=proba_columns)
    if kind == "cumproba":
        return pd.DataFrame(out, index=index, columns=[f"P(y<={c})" for c in classes[:-1]])
    if kind == "interval":
        return tuple(pd.DataFrame(part, index=index, columns=proba_columns) for part in out)
    lower, upper = (np.asarray(part) for part in out)
    if lower.ndim == 1:
        return pd.DataFrame({"lower": lower, "upper": upper}, index=index)
    alphas = np.atleast_1d(np.asarray(alpha, float)).tolist()
    columns = pd.MultiIndex.from_tuples([(a, side) for a in alphas for side in ("lower", "upper")],
                                        names=["alpha", "bound"])
    return pd.DataFrame(np.stack([lower, upper], axis=2).reshape(lower.shape[0], -1).tolist(),
                        index=index, columns=columns)


# True inside internal_fits(): the library's own refits (cross-fitting, bootstrap draws).
_INTERNAL_FIT = contextvars.ContextVar("bayesord_internal_fit", default=False)


@contextlib.contextmanager
def internal_fits():
    """Fits made inside are the library's own refits of a model the user already fitted
    (cross-fitted copies, probability layers, bootstrap draws): the one-class check of
    :func:`fresh_fit`, which costs a prediction program per fit, and the column-scale
    warning, which would repeat the user's fit's once per copy, are left to the user's fit."""
    token = _INTERNAL_FIT.set(True)
    try:
        yield
    finally:
        _INTERNAL_FIT.reset(token)


def copies_of_batch(template, result, n_fits, adopt):
    """``n_fits`` fitted estimators from one batched fit: shallow copies of ``template`` (a
    clone whose ``_validate_fit`` has run: ``classes_``, ``n_features_in_``, ...), copy j
    given its slice of ``result`` (a pytree of arrays with a leading axis of ``n_fits``) by
    ``adopt(copy, slice, j)``."""
    result = jax.tree_util.tree_map(np.asarray, result)  # one transfer, then NumPy slices
    copies = []
    for j in range(n_fits):
        fitted = copy.copy(template)
        adopt(fitted, jax.tree_util.tree_map(lambda a: a[j], result), j)
        copies.append(fitted)
    return copies


def run_folds(fn, folds, workers):
    """``[fn(train, test) for train, test in folds]``, on up to ``workers`` threads.

    The first fold runs alone, so the programs every fold shares are compiled once, not
    once per thread; the others then run on the threads, each in its own copy of the
    caller's context (so :func:`internal_fits` holds there, and warnings point at the
    user's line, :func:`bayesord._status.warnings_at_caller`).  The results come back in
    the folds' order.
    """
    folds = list(folds)
    if workers <= 1 or len(folds) <= 2:
        return [fn(*f) for f in folds]
    first = fn(*folds[0])
    with warnings_at_caller():
        contexts = [contextvars.copy_context() for _ in folds[1:]]
    with concurrent.futures.ThreadPoolExecutor(workers) as pool:
        return [first] + list(pool.map(lambda cf: cf[0].run(fn, *cf[1]), zip(contexts, folds[1:])))


# warn_if_one_class predicts at most this many training rows unless they all land in one class.
_ONE_CLASS_SAMPLE = 256

# The hint of the Bayesian models, whose prior shrinks effects the evidence does not support.
BAYES_ONE_CLASS_HINT = ("Either the columns carry no signal this model can use (its predict_proba "
                        "still spreads over the classes and says how unsure it is), or a signal that "
                        "is not monotone in them: a kernel model (ISBOR) can use that.")


def rows_in_turn(codes, n_classes, m):
    """Positions of ``m`` rows (all of them when there are fewer), sorted, taken from the
    classes in turn: the first row of every class, then the second of every class that has
    one, and so on (ties in that order broken by position).  ``O(n_classes * n)``, no sort of
    the ``n`` rows."""
    n = codes.size
    if n <= m:
        return np.arange(n)
    rank = np.empty(n, dtype=np.int64)  # the row's position among its class's rows
    for k in range(n_classes):
        members = np.flatnonzero(codes == k)
        rank[members] = np.arange(members.size)
    key = rank * n + np.arange(n)
    return np.sort(np.argpartition(key, m - 1)[:m])


def warn_if_one_class(est, fit_args) -> None:
    """Warn (:class:`~bayesord._status.OneClassWarning`) when the fitted ``est`` predicts one
    class for every labelled training row of positive weight although their labels hold
    several: a model that found no ordinal signal at its settings, which would otherwise
    pass silently for a fit (its test accuracy is the share of that class).

    ``fit_args`` are the arguments ``fit`` was called with (``X``, ``y`` and, where the
    estimator has them, ``sample_weight``, ``groups``, ``unlabeled_mask``).

    Its looks predict :data:`_ONE_CLASS_SAMPLE` rows (all of them when there are fewer), so
    that their program is small and of one size for every data set.  The first takes rows
    evenly spaced through the data and needs no labels: two predicted classes there end the
    check (the usual case: 0.6 ms after a fit on 10^5 rows).  Only when they hold one class
    are the labels read, rows taken from the classes in turn, and then, if those too land in
    one class, every row predicted.
    """
    if getattr(est, "n_features_in_", None) == 0 and "groups" not in fit_args:
        return  # the thresholds alone: one class for every row by construction
    X, y = fit_args["X"], fit_args["y"]
    # Rows as fit took them: a frame stays a frame (a formula model reads its columns), any
    # sparse format becomes CSR (row indexing), anything else an array (lists, array-likes).
    X = X.tocsr() if sp.issparse(X) else X if hasattr(X, "iloc") else np.asarray(X)
    n = X.shape[0]
    keep = np.ones(n, dtype=bool)
    if fit_args.get("sample_weight") is not None:
        keep &= np.asarray(fit_args["sample_weight"], dtype=float) > 0
    if fit_args.get("unlabeled_mask") is not None:
        keep &= ~np.asarray(fit_args["unlabeled_mask"], dtype=bool)
    rows = np.flatnonzero(keep)

    def predicted(idx, method="predict"):
        part = X.iloc[idx] if hasattr(X, "iloc") else X[idx]
        if "groups" in fit_args:
            return np.asarray(getattr(est, method)(part, np.asarray(fit_args["groups"])[idx]))
        return np.asarray(getattr(est, method)(part))

    if rows.size > _ONE_CLASS_SAMPLE:
        spaced = np.unique(np.linspace(0, rows.size - 1, _ONE_CLASS_SAMPLE).round().astype(np.int64))
        if np.unique(predicted(rows[spaced])).size > 1:
            return
    codes = encode_known_labels(_labels_1d(y, n)[rows], est.classes_)[0]
    n_present = np.count_nonzero(np.bincount(codes, minlength=len(est.classes_)))
    if n_present < 2:
        return
    first = rows_in_turn(codes, len(est.classes_), _ONE_CLASS_SAMPLE)
    pred = predicted(rows[first])
    if np.unique(pred).size == 1 and first.size < rows.size:
        pred = predicted(rows)
    if np.unique(pred).size == 1:
        label = pred[0].item() if isinstance(pred[0], np.generic) else pred[0]
        head = (f"{type(est).__name__} predicts {label!r} for every one of its {pred.size} training "
                f"rows, whose labels hold {n_present} classes")
        moved = _probabilities_moved(est, lambda: predicted(rows[first], "predict_proba"))
        if moved is None:
            warn_user(f"{head}: at these settings it found no ordinal signal. {est._one_class_hint}",
                      OneClassWarning)
        else:
            k, low, high = moved
            cls = est.classes_[k].item() if isinstance(est.classes_[k], np.generic) else est.classes_[k]
            warn_user(f"{head}, though its probabilities move with the columns (P({cls!r}) from {low:.2f} to "
                      f"{high:.2f} over {first.size} of the rows): the columns shift the odds without making "
                      f"another class the most probable anywhere.  predict_proba tells the rows apart",
                      OneClassWarning)


# A class probability that moves by at least this much over the training rows is signal the
# one-class warning names (a real slope 12.6 sds from zero with the top class of 56% of the
# rows: 0.34 to 0.77, a user's trial); a model that found none moves them by rounding.
_MOVED_PROBABILITY = 0.1


def _probabilities_moved(est, proba):
    """(class, lowest, highest) of the class probability of ``proba()`` that moves most
    over the rows, when it moves by :data:`_MOVED_PROBABILITY` or more; None when it moves
    less or ``est`` has no probabilities (a margin model before ``calibrate``)."""
    if not hasattr(est, "predict_proba"):
        return None
    P = proba()
    spread = P.max(axis=0) - P.min(axis=0)
    k = int(np.argmax(spread))
    return (k, float(P[:, k].min()), float(P[:, k].max())) if spread[k] >= _MOVED_PROBABILITY else None


# ---------------------------------------------------------------- persistence
# A saved model is one .npz file: named float/int arrays plus a "meta" entry holding JSON
# (format tag, constructor parameters, classes, feature names, scalars).  No pickle, so a
# file cannot run code when loaded, and floats round-trip bit for bit.

class SavableMixin:
    """``save``/``load`` for an estimator that sets ``_format`` (a versioned tag such as
    ``"bayesord.ISBOR/1"``) and implements ``_saved_state`` and ``_restore``.

    A model fitted from a formula (``_spec``) is saved with its coding
    (:func:`bayesord.estimators._formula.coding_state`) and the attributes named in
    ``_formula_attrs``, so the loaded model takes DataFrames as the fitted one does.
    """

    _format = ""
    _formula_attrs = ("formula_",)

    def _saved_state(self):
        """(arrays, meta): the fitted state as named arrays and JSON-ready metadata."""
        raise NotImplementedError

    def _restore(self, arrays, meta):
        """Set the fitted attributes from what :meth:`_saved_state` wrote."""
        raise NotImplementedError

    def save(self, path):
        """Save the fitted model to ``path`` (.npz of arrays plus JSON metadata; no pickle).

        Floats are stored in binary, so :meth:`load` (or :func:`bayesord.load_model`)
        restores the model exactly, without the training data.  Parameters that JSON
        cannot hold (a CV splitter, a ``RandomState``) are recorded by their ``repr`` and
        fall back to their defaults on loading, with a warning.
        """
        check_is_fitted(self)
        formula = _formula_state(self)
        arrays, meta = self._saved_state()
        if formula is not None:
            meta = dict(meta, formula=formula)
        _write_model_file(self, path, arrays, meta)

    @classmethod
    def load(cls, path):
        """Load a model written by :meth:`save`."""
        return read_model_file(path, {cls._format: cls})


class SnapshotSavableMixin(SavableMixin):
    """``save``/``load`` that store every fitted attribute as it is.

    For estimators whose fitted state is plain: arrays (NumPy or JAX; they load as NumPy),
    numbers, strings, None, and dicts, lists and tuples of them, plus the NamedTuple types
    and results listed in ``_state_types`` (:func:`bayesord._results.encode_state`).
    Anything else is a ``TypeError`` at saving time, so a new attribute of an unsupported
    kind cannot be dropped silently.
    """

    _state_types = ()

    @property
    def _types(self):
        return state_types(*self._state_types)

    def _saved_state(self):
        arrays = {}
        state = {name: encode_state(value, f"state.{name}", arrays, self._types)
                 for name, value in vars(self).items()
                 if name.endswith("_") and not name.startswith("__") and name not in _FILE_ATTRIBUTES}
        return arrays, {"state": state}

    def _restore(self, arrays, meta):
        for name, value in meta["state"].items():
            setattr(self, name, decode_state(value, arrays, self._types))


# Written by _write_model_file itself (the last four through the estimator's
# ``_uncertainty_state``: see bayesord.estimators._uncertainty).
_FILE_ATTRIBUTES = ("classes_", "n_features_in_", "feature_names_in_", "input_center_", "input_scale_",
                    "conformal_", "proba_layer_", "proba_layer_columns_", "bootstrap_draws_")


def _write_model_file(est, path, arrays, meta):
    """Write ``est``'s parameters, classes and feature names, ``meta`` and ``arrays`` to ``path``.

    Parameters that JSON cannot hold (a CV splitter, a ``RandomState``) are recorded by their
    ``repr``; :func:`read_model_file` warns that they fall back to their defaults.  An input
    standardisation (:func:`set_input_transform`) is stored as the arrays ``input_center``
    and ``input_scale``.
    """
    params, tuples, unsaved = {}, [], {}
    for name, value in est.get_params(deep=False).items():
        if isinstance(value, tuple):
            tuples.append(name)
        try:
            decoded = json.loads(json.dumps(value, default=_numpy_to_json))
        except TypeError:
            unsaved[name] = repr(value)
            continue
        if isinstance(value, dict) and decoded != value:  # JSON turns keys such as 1 into "1"
            unsaved[name] = repr(value)
        else:
            params[name] = decoded
    classes = np.asarray(est.classes_)
    names = getattr(est, "feature_names_in_", None)
    standardized = getattr(est, "input_center_", None) is not None
    meta = dict(meta, format=est._format, params=params, tuple_params=tuples, unsaved_params=unsaved,
                classes=classes.tolist(), classes_kind=classes.dtype.kind,
                n_features_in=int(est.n_features_in_),
                feature_names=None if names is None else [str(c) for c in names],
                input_standardized=standardized)
    if standardized:
        arrays = dict(arrays, input_center=est.input_center_, input_scale=est.input_scale_)
    extra_arrays, extra_meta = est._uncertainty_state()
    arrays = dict(arrays, **extra_arrays)
    meta["uncertainty"] = extra_meta
    with open(path, "wb") as fh:
        np.savez(fh, meta=np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8),
                 **{k: np.asarray(v) for k, v in arrays.items()})


def _formula_state(est):
    """JSON of a formula-fitted model's coding and formula attributes, or None."""
    spec = getattr(est, "_spec", None)
    if spec is None:
        return None
    specs = spec if isinstance(spec, tuple) else (spec,)
    return {"codings": [coding_state(s) for s in specs],
            "several": isinstance(spec, tuple),
            "attrs": {name: getattr(est, name) for name in est._formula_attrs}}


def _restore_formula(model, state):
    codings = tuple(SavedCoding(s) for s in state["codings"])
    model._spec = codings if state["several"] else codings[0]
    for name, value in state["attrs"].items():
        setattr(model, name, value)


def _numpy_to_json(value):
    if isinstance(value, (np.ndarray, np.generic)):
        return value.tolist()
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")


def read_model_file(path, formats):
    """Read a file written by :func:`_write_model_file` whose format is one of ``formats``.

    Returns:
        A new estimator of the saved class (``formats`` maps each format tag to its class)
        with the saved parameters and fitted state.

    Raises:
        FileNotFoundError: there is no file at ``path``.
        ValueError: naming ``path`` and the problem: not a model file, a format not in
            ``formats``, a damaged file (bad archive, truncated or altered entries), or
            metadata that disagrees with the arrays (:meth:`OrdinalEstimator._check_restored`).
    """
    if not os.path.isfile(path):
        raise FileNotFoundError(f"no model file {path}")
    if not zipfile.is_zipfile(path):
        raise ValueError(f"{path} is not a model saved by bayesord (not an .npz archive, or one cut short)")
    try:
        with np.load(path, allow_pickle=False) as data:
            files = data.files
            meta = json.loads(bytes(data["meta"]).decode()) if "meta" in files else None
            arrays = {k: data[k] for k in files if k != "meta"}
    except PermissionError:
        raise
    except (zipfile.BadZipFile, zlib.error, EOFError, NotImplementedError, OSError, ValueError) as err:
        # What a damaged archive raises: bad CRCs and headers, cut entries, offsets past the end.
        raise ValueError(f"{path} is damaged ({_describe(err)}); it cannot be read as a model "
                         "file") from None
    if meta is None:
        raise ValueError(f"{path} is an .npz archive but not a model saved by bayesord (no 'meta' entry)")
    fmt = meta.get("format") if isinstance(meta, dict) else None
    if fmt not in formats:
        same = [f for f in formats if isinstance(fmt, str) and f.split("/")[0] == fmt.split("/")[0]]
        if same:
            raise ValueError(f"{path} holds format {fmt!r}, written by another version of bayesord; this "
                             f"version reads {same[0]!r}: fit the model again and save it")
        raise ValueError(f"{path} holds format {fmt!r}; expected one of {sorted(formats)}")
    try:
        return _restore_model(formats[fmt], arrays, meta, path)
    except (KeyError, TypeError, ValueError, AttributeError, IndexError) as err:
        raise ValueError(f"{path} does not hold a consistent {formats[fmt].__name__} ({_describe(err)}); "
                         "it was damaged or edited after saving") from None


def _describe(err):
    """An exception as a short phrase for a message about a damaged file."""
    if isinstance(err, KeyError):
        return f"no entry {err}"
    if type(err) is ValueError:
        return str(err)
    return f"{type(err).__name__}: {err}"


def _restore_model(cls, arrays, meta, path):
    """A fitted ``cls`` from a model file's ``arrays`` and ``meta``, checked for consistency."""
    params = {k: tuple(v) if k in meta["tuple_params"] else v for k, v in meta["params"].items()}
    unsaved = meta["unsaved_params"]
    if unsaved:
        listed = ", ".join(f"{k}={v}" for k, v in unsaved.items())
        warn_user(f"{path}: parameters that cannot be saved without pickle keep their defaults "
                  f"({listed}); they matter only when the model is fitted again")
    model = cls(**params)
    kind = meta["classes_kind"]
    model.classes_ = np.asarray(meta["classes"]).astype(kind if kind in "biuf" else str)
    model.n_features_in_ = int(meta["n_features_in"])
    if meta["feature_names"] is not None:
        names = np.asarray(meta["feature_names"], dtype=object)
        if names.shape != (model.n_features_in_,):
            raise ValueError(f"{names.size} feature names but n_features_in={model.n_features_in_}")
        model.feature_names_in_ = names
    model._restore(arrays, meta)
    if meta.get("formula") is not None:
        _restore_formula(model, meta["formula"])
    model._check_restored()
    model._restore_uncertainty(arrays, meta.get("uncertainty", {}))
    if meta.get("input_standardized", False):
        set_input_transform(model, arrays["input_center"], arrays["input_scale"])
    return model
