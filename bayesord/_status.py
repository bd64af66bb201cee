"""Result status codes shared by every solver, and their messages.

Solvers never raise inside ``jit``; they return an ``int32`` status code in their
result NamedTuple.  The estimator layer reads the code on the host with
:func:`check_status`, which raises or warns with the message below.
"""

from __future__ import annotations

import enum
import os
import sys
import warnings

from sklearn.exceptions import ConvergenceWarning

__all__ = ["OneClassWarning", "Status", "status_message", "check_status", "warn_user"]


class OneClassWarning(UserWarning):
    """A fitted model predicts one class for every training row whose labels hold several."""


class Status(enum.IntEnum):
    """How a solver run ended."""

    SUCCESS = 0
    MAX_ITER = 1
    NONFINITE = 2
    NOT_POSITIVE_DEFINITE = 3
    LINESEARCH_FAILED = 4
    CAPACITY_REACHED = 5
    DIVERGED = 6


_MESSAGES = {
    Status.SUCCESS: "converged",
    Status.MAX_ITER: "stopped at the iteration cap before meeting the tolerance",
    Status.NONFINITE: "a non-finite value (NaN or inf) appeared in the objective or its derivatives",
    Status.NOT_POSITIVE_DEFINITE: "a matrix that must be positive definite failed its Cholesky factorisation",
    Status.LINESEARCH_FAILED: "the line search could not find a step that improves the objective",
    Status.CAPACITY_REACHED: "a fixed-capacity buffer (active set or working set) is full",
    Status.DIVERGED: "the iterates diverged",
}

# Codes after which the returned model is still usable (a warning, not an error).
_SOFT = {Status.MAX_ITER, Status.LINESEARCH_FAILED, Status.CAPACITY_REACHED}


_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep


def warn_user(message, category=UserWarning) -> None:
    """``warnings.warn`` attributed to the first calling line outside the bayesord package
    (the user's), however deep inside the library the warning arises."""
    frame, level = sys._getframe(1), 2
    while frame is not None and frame.f_code.co_filename.startswith(_PACKAGE_DIR):
        frame, level = frame.f_back, level + 1
    warnings.warn(message, category, stacklevel=level)


def final_status(converged, *, finite=True, failure=None):
    """The status a fit ends with, the most severe first (traced, int32).

    ``NONFINITE`` where ``finite`` is False; else ``failure`` where it is given and is not
    ``SUCCESS`` (an inner solve's status, ``NOT_POSITIVE_DEFINITE`` from a factorisation,
    ``CAPACITY_REACHED``); else ``SUCCESS`` where ``converged`` and ``MAX_ITER`` where not.
    Arguments may be arrays (one fit per entry).
    """
    import jax.numpy as jnp

    status = jnp.where(converged, Status.SUCCESS, Status.MAX_ITER)
    if failure is not None:
        status = jnp.where(failure != Status.SUCCESS, failure, status)
    return jnp.where(finite, status, Status.NONFINITE).astype(jnp.int32)


def status_message(code) -> str:
    """Return the human-readable message for a status code."""
    return _MESSAGES[Status(int(code))]


def check_status(code, where: str) -> None:
    """Turn a solver status into a warning or an error on the host.

    Args:
        code: integer status (scalar, or an array whose worst entry is used).
        where: name of the solver, used in the message.

    Raises:
        FloatingPointError: for ``NONFINITE``, ``NOT_POSITIVE_DEFINITE`` and ``DIVERGED``:
            the result cannot be trusted.

    Warns:
        ConvergenceWarning: for ``MAX_ITER``, ``LINESEARCH_FAILED`` and ``CAPACITY_REACHED``.
    """
    import numpy as np

    codes = np.atleast_1d(np.asarray(code)).astype(int).ravel()
    bad = [Status(c) for c in codes if c != Status.SUCCESS]
    if not bad:
        return
    worst = max(bad, key=lambda s: (s not in _SOFT, int(s)))
    msg = f"{where}: {status_message(worst)} (status {worst.name})"
    if worst in _SOFT:
        warn_user(msg, ConvergenceWarning)
    else:
        raise FloatingPointError(msg)
