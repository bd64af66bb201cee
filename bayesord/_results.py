"""The one shape of a fitted model's result: arrays plus the static configuration.

A model family's ``Result`` is a frozen dataclass whose first field ``config`` holds the
static choices the fit was made with (link, kernel, degree, ...) and whose other fields
are arrays.  :func:`result_type` registers it as a JAX pytree with ``config`` as static
metadata, so a result passes through ``jit`` and ``vmap`` like a NamedTuple of arrays, and
its prediction function reads every setting from it: nothing is passed again, and a fit
cannot be predicted with another link by mistake.

For code written against the earlier NamedTuple results, ``_fields`` (the array fields),
``_asdict()`` (those arrays by name) and ``_replace(**changes)`` keep working.

:class:`Prediction` is what the margin models' ``predict_<family>`` return; the Bayesian
families' prediction types carry the same ``labels``, ``scores`` and ``proba``.
:func:`encode_state` / :func:`decode_state` turn a result (or an estimator's fitted state)
into named arrays plus JSON and back, without pickle: the one persistence format.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import sys
import warnings
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from ._precision import jit
from ._status import Status

__all__ = ["result_type", "check_settings", "checks_codes", "flag_invalid_codes", "Prediction", "is_result",
           "encode_state", "decode_state", "state_types", "mode_labels"]


class Prediction(NamedTuple):
    """Predictions of new rows: the type every margin model's ``predict_<family>`` returns.

    The Bayesian families return types of their own with more fields (latent moments,
    cumulative probabilities); they have ``labels``, ``scores`` and ``proba`` too.
    """

    labels: jax.Array
    """(n,) int32 class codes 0..K-1."""
    scores: jax.Array
    """The model's decision values: (n,) latent scores, or (n, m) per-rank values."""
    proba: jax.Array | None = None
    """(n, K) class probabilities where the model has them; None for the margin models
    (their estimators add a calibrated probability layer on the host)."""


def result_type(cls):
    """Class decorator: ``cls`` as a frozen dataclass and a pytree with static ``config``."""
    cls = dataclasses.dataclass(frozen=True)(cls)
    names = [f.name for f in dataclasses.fields(cls)]
    if names[:1] != ["config"]:
        raise TypeError(f"{cls.__name__}: the first field of a result must be 'config'")
    arrays = tuple(names[1:])
    cls._fields = arrays
    cls._asdict = lambda self: {name: getattr(self, name) for name in arrays}
    cls._replace = lambda self, **changes: dataclasses.replace(self, **changes)
    cls._is_result = True
    return jax.tree_util.register_dataclass(cls, data_fields=list(arrays), meta_fields=["config"])


def check_settings(config, **given):
    """Settings passed again to a prediction function, checked against the fit's ``config``.

    ``None`` (not passed) is the usual case.  A value equal to the fit's is accepted with a
    ``DeprecationWarning`` (the prediction reads it from the result); a different value is a
    ``ValueError``, since predicting with another link or kernel than the fit's is wrong.
    """
    for name, value in given.items():
        if value is None:
            continue
        fitted = getattr(config, name)
        if value != fitted:
            raise ValueError(f"{name}={value!r} was passed, but the result was fitted with {name}={fitted!r}; "
                             f"the prediction reads {name} from the result, so leave it out")
        warnings.warn(f"passing {name}= is no longer needed: the prediction reads it from the result",
                      DeprecationWarning, stacklevel=3)


def mode_labels(proba):
    """(n,) int32 codes of the most probable class of each row of ``proba`` (n, K): the
    ``labels`` of the Bayesian families' prediction types."""
    return jax.numpy.argmax(proba, axis=-1).astype(jax.numpy.int32)


def is_result(value) -> bool:
    """Whether ``value`` is a result made by a :func:`result_type` class."""
    return getattr(type(value), "_is_result", False) is True


def state_types(*classes):
    """``{name: class}`` for :func:`decode_state`: the classes given, plus, for each result
    type among them, the types of its module (its config, nested NamedTuples)."""
    types = {}
    for cls in classes:
        types[cls.__name__] = cls
        if getattr(cls, "_is_result", False):
            for name, value in vars(sys.modules[cls.__module__]).items():
                if isinstance(value, type) and (dataclasses.is_dataclass(value) or hasattr(value, "_fields")):
                    types.setdefault(name, value)
    return types


def _json_value(value, key):
    if isinstance(value, np.generic):  # a NumPy integer or float given for a setting
        value = value.item()
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (tuple, list)):
        return {"tuple": [_json_value(v, key) for v in value]}
    raise TypeError(f"{key}: a {type(value).__name__} in a configuration cannot be saved")


def _from_json(value):
    if isinstance(value, dict):
        return tuple(_from_json(v) for v in value["tuple"])
    return value


def encode_state(value, key, arrays, types):
    """JSON-ready description of ``value``; its arrays go into ``arrays`` under ``key...``.

    ``value`` may be None, a number, a string, an array, a dict with string keys, a list or
    tuple of these, a NamedTuple whose type is in ``types``, or a result (its static
    ``config`` is stored as JSON).  Anything else is a ``TypeError``, so nothing is dropped
    silently.
    """
    if value is None or isinstance(value, (bool, int, float, str)):
        return {"json": value}
    if isinstance(value, (np.ndarray, np.generic, jax.Array)):
        arr = np.asarray(value)
        if arr.dtype == object:
            if not all(isinstance(v, (bool, int, float, str)) for v in arr.ravel().tolist()):
                raise TypeError(f"{key}: an object array of non-scalar values cannot be saved without pickle")
            return {"objects": arr.tolist()}
        arrays[key] = arr
        return {"array": key}
    if is_result(value) or (isinstance(value, tuple) and hasattr(type(value), "_fields")):
        name = type(value).__name__
        if types.get(name) is not type(value):
            raise TypeError(f"{key}: {name} is not among the saved state types")
        fields = {f: encode_state(getattr(value, f), f"{key}.{f}", arrays, types) for f in value._fields}
        if not is_result(value):
            return {"namedtuple": {"type": name, "fields": fields}}
        config = value.config
        if types.get(type(config).__name__) is not type(config):
            raise TypeError(f"{key}: {type(config).__name__} is not among the saved state types")
        return {"result": {"type": name, "config_type": type(config).__name__, "fields": fields,
                           "config": {f.name: _json_value(getattr(config, f.name), f"{key}.config.{f.name}")
                                      for f in dataclasses.fields(config)}}}
    if isinstance(value, dict) and all(isinstance(k, str) for k in value):
        return {"dict": {k: encode_state(v, f"{key}.{k}", arrays, types) for k, v in value.items()}}
    if isinstance(value, (list, tuple)):
        return {"tuple" if isinstance(value, tuple) else "list":
                [encode_state(v, f"{key}.{i}", arrays, types) for i, v in enumerate(value)]}
    raise TypeError(f"{key}: a {type(value).__name__} cannot be saved without pickle")


def decode_state(desc, arrays, types):
    """The value :func:`encode_state` described (arrays come back as NumPy arrays)."""
    (kind, value), = desc.items()
    if kind == "json":
        return value
    if kind == "array":
        return arrays[value]
    if kind == "objects":
        return np.asarray(value, dtype=object)
    if kind in ("namedtuple", "result"):
        fields = {f: decode_state(v, arrays, types) for f, v in value["fields"].items()}
        if kind == "namedtuple":
            return types[value["type"]](**fields)
        config = types[value["config_type"]](**{k: _from_json(v) for k, v in value["config"].items()})
        return types[value["type"]](config=config, **fields)
    if kind == "dict":
        return {k: decode_state(v, arrays, types) for k, v in value.items()}
    items = [decode_state(v, arrays, types) for v in value]
    return tuple(items) if kind == "tuple" else items


def flag_invalid_codes(result, codes, n_classes: int, unlabeled=None):
    """``result`` with status ``INVALID_CODES`` and ``converged`` False unless every class
    code (but those of the rows where ``unlabeled`` is True, when given) is a whole number
    in 0..n_classes-1.

    The functional fits take codes: labels 1..K passed as they are would index one class
    past the end, where JAX's scatters and segment sums drop them without a word.  Jitted
    (``n_classes`` static): inside a fit's trace it joins the fit's program, and after a
    fit that runs on the host (NPSVOR, the perceptrons, RED-SVM, TOR) it is one small
    compiled call, not one dispatch per operation.
    """
    converged, status = _flagged(result.converged, result.status, codes, n_classes, unlabeled)
    return result._replace(converged=converged, status=status)


@functools.partial(jit, static_argnames="n_classes")
def _flagged(converged, status, codes, n_classes, unlabeled):
    codes = jnp.asarray(codes)
    ok = (codes >= 0) & (codes < n_classes)
    if jnp.issubdtype(codes.dtype, jnp.floating):
        ok = ok & (codes == jnp.round(codes))
    if unlabeled is not None:
        ok = ok | jnp.asarray(unlabeled, bool)
    ok = jnp.all(ok)
    return converged & ok, jnp.where(ok, status, Status.INVALID_CODES).astype(jnp.int32)


def checks_codes(codes: str = "y", unlabeled: str | None = None):
    """Decorate a fit function so that its result goes through :func:`flag_invalid_codes`.

    ``codes`` names the argument holding the class codes and ``unlabeled`` the one (if any)
    masking rows whose code is ignored; K is the ``n_classes`` argument where the function
    has one, else ``config.n_classes``.  Under ``jit`` the check joins the fit's program;
    on a fit that runs on the host it is one small compiled call after the fit.
    """

    def decorate(fit):
        signature = inspect.signature(fit)

        @functools.wraps(fit)
        def wrapper(*args, **kwargs):
            given = signature.bind(*args, **kwargs).arguments
            n_classes = given["n_classes"] if "n_classes" in given else given["config"].n_classes
            return flag_invalid_codes(fit(*args, **kwargs), given[codes], n_classes,
                                      given.get(unlabeled) if unlabeled else None)

        return wrapper

    return decorate
