"""The one shape of a fitted model's result: arrays plus the static configuration.

A model family's ``Result`` is a frozen dataclass whose first field ``config`` holds the
static choices the fit was made with (link, kernel, degree, ...) and whose other fields
are arrays.  :func:`result_type` registers it as a JAX pytree with ``config`` as static
metadata, so a result passes through ``jit`` and ``vmap`` like a NamedTuple of arrays, and
its prediction function reads every setting from it: nothing is passed again, and a fit
cannot be predicted with another link by mistake.

For code written against the earlier NamedTuple results, ``_fields`` (the array fields),
``_asdict()`` (those arrays by name) and ``_replace(**changes)`` keep working.
"""

from __future__ import annotations

import dataclasses
import warnings

import jax

__all__ = ["result_type", "check_settings"]


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
