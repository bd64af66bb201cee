"""Save and load the functional results of every model family: one ``.npz`` file, no pickle.

A research script that calls the jitted ``fit_<family>`` functions keeps its fits with
:func:`save_result` and predicts from them later with ``predict_<family>(load_result(path), X)``.
The file holds the result's arrays bit for bit and its static ``config`` as JSON, so the
loaded result predicts exactly as the saved one, and nothing in the file can run code.

Example:
    >>> import numpy as np, jax, tempfile, os
    >>> from bayesord import RedSVMConfig, fit_redsvm, predict_redsvm
    >>> X = np.random.default_rng(0).normal(size=(30, 2)); y = np.digitize(X[:, 0], [-0.5, 0.5])
    >>> res = fit_redsvm(X, y, np.ones(30), RedSVMConfig(n_classes=3))
    >>> path = os.path.join(tempfile.mkdtemp(), "fit.npz")
    >>> save_result(path, res)
    >>> bool((predict_redsvm(load_result(path), X).labels == predict_redsvm(res, X).labels).all())
    True
"""

from __future__ import annotations

import json
import os
import zipfile

import numpy as np

from ._clm import CLMResult
from ._isbor import ISBORResult
from ._mixed import MixedResult
from ._npsvor import NPSVORResult
from ._perceptron import KernelPerceptronResult, PerceptronResult
from ._probit import ProbitResult
from ._rankpairs import RankPairsResult
from ._redsvm import RedSVMResult
from ._results import decode_state, encode_state, is_result, state_types
from ._tor import TORResult

__all__ = ["save_result", "load_result", "RESULT_TYPES"]

FORMAT = "bayesord.result/1"

RESULT_TYPES = {cls.__name__: cls for cls in (
    ProbitResult, ISBORResult, MixedResult, CLMResult, NPSVORResult, PerceptronResult,
    KernelPerceptronResult, RankPairsResult, RedSVMResult, TORResult)}
"""The result types :func:`load_result` reads, by name."""


def save_result(path, result) -> None:
    """Write a ``fit_<family>`` result to ``path`` (an ``.npz`` archive).

    Raises:
        TypeError: ``result`` is not one of :data:`RESULT_TYPES`.
    """
    if not is_result(result) or RESULT_TYPES.get(type(result).__name__) is not type(result):
        raise TypeError(f"save_result takes the result of a fit_<family> function, got {type(result).__name__}")
    arrays = {}
    state = encode_state(result, "result", arrays, state_types(type(result)))
    meta = json.dumps({"format": FORMAT, "state": state}).encode()
    with open(path, "wb") as fh:
        np.savez(fh, meta=np.frombuffer(meta, dtype=np.uint8), **arrays)


def load_result(path):
    """Read a result written by :func:`save_result` (its arrays come back as NumPy arrays).

    Raises:
        FileNotFoundError: no file at ``path``.
        ValueError: naming ``path``: not a saved result, or one of an unknown type.
    """
    if not os.path.isfile(path):
        raise FileNotFoundError(f"no result file {path}")
    if not zipfile.is_zipfile(path):
        raise ValueError(f"{path} is not a result saved by bayesord.save_result (not an .npz archive)")
    with np.load(path, allow_pickle=False) as data:
        if "meta" not in data.files:
            raise ValueError(f"{path} is an .npz archive but not a saved result (no 'meta' entry)")
        meta = json.loads(bytes(data["meta"]).decode())
        arrays = {k: data[k] for k in data.files if k != "meta"}
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise ValueError(f"{path} holds format {meta.get('format') if isinstance(meta, dict) else None!r}; "
                         f"expected {FORMAT!r} (an estimator's file is read by bayesord.load_model)")
    name = meta["state"]["result"]["type"]
    if name not in RESULT_TYPES:
        raise ValueError(f"{path} holds a {name}, which is not among {sorted(RESULT_TYPES)}")
    return decode_state(meta["state"], arrays, state_types(RESULT_TYPES[name]))
