"""Result status codes shared by every solver, and their messages.

Solvers never raise inside ``jit``; they return an ``int32`` status code in their
result NamedTuple.  The estimator layer reads the code on the host with
:func:`check_status`, which raises or warns with the message below.
"""

from __future__ import annotations

import contextlib
import contextvars
import enum
import os
import sys
import warnings

__all__ = ["OneClassWarning", "Status", "check_status", "convergence_warning", "status_message", "warn_user",
           "warned_once", "warnings_at_caller"]


def convergence_warning():
    """scikit-learn's ``ConvergenceWarning``, the category of every "did not converge"
    warning here (so one filter silences the library's and scikit-learn's alike).

    Imported when a warning is issued, not with the library: importing any part of
    scikit-learn loads all of ``sklearn.base`` and the ``scipy.stats`` it imports, 0.6-0.7 s
    that the command line and a script's first fit would otherwise wait for.
    """
    from sklearn.exceptions import ConvergenceWarning

    return ConvergenceWarning


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
    INVALID_CODES = 7


_MESSAGES = {
    Status.SUCCESS: "converged",
    Status.MAX_ITER: "stopped at the iteration cap before meeting the tolerance",
    Status.NONFINITE: "a non-finite value (NaN or inf) appeared in the objective or its derivatives",
    Status.NOT_POSITIVE_DEFINITE: "a matrix that must be positive definite failed its Cholesky factorisation",
    Status.LINESEARCH_FAILED: "the line search could not find a step that improves the objective",
    Status.CAPACITY_REACHED: "a fixed-capacity buffer (active set or working set) is full",
    Status.DIVERGED: "the iterates diverged",
    Status.INVALID_CODES: ("a class code lies outside 0..K-1 or is not a whole number: the functional fits take "
                           "codes, not labels (codes = np.searchsorted(classes, labels))"),
}

# Codes after which the returned model is still usable (a warning, not an error).
_SOFT = {Status.MAX_ITER, Status.LINESEARCH_FAILED, Status.CAPACITY_REACHED}


_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep


# The user's line a library thread works for (see warnings_at_caller), or None.
_CALLER = contextvars.ContextVar("bayesord_caller", default=None)
# The list that warn_user adds to instead of warning, inside warned_once (and its copies of
# the context on threads), or None.
_COLLECTED = contextvars.ContextVar("bayesord_collected_warnings", default=None)


def _user_frame(frame):
    """The first frame from ``frame`` outward that is neither in the bayesord package nor in
    ``contextlib`` (whose ``__enter__`` runs :func:`warnings_at_caller`)."""
    while frame is not None and (frame.f_code.co_filename.startswith(_PACKAGE_DIR)
                                 or frame.f_code.co_filename == contextlib.__file__):
        frame = frame.f_back
    return frame


def _site(frame):
    """(file name, line, module globals) of ``frame``, or None."""
    return None if frame is None else (frame.f_code.co_filename, frame.f_lineno, frame.f_globals)


def warn_user(message, category=UserWarning) -> None:
    """``warnings.warn`` attributed to the first calling line outside the bayesord package
    (the user's), however deep inside the library the warning arises; on a thread the
    library started, to the line :func:`warnings_at_caller` recorded.  Inside
    :func:`warned_once` it is kept for that block's summary instead."""
    collected = _COLLECTED.get()
    if collected is not None:
        collected.append((str(message), category))
        return
    caller = _CALLER.get() or _site(_user_frame(sys._getframe(1)))
    if caller is None:  # no frame outside the package (the library called from itself)
        warnings.warn(message, category, stacklevel=2)
        return
    filename, lineno, module_globals = caller
    # No module_globals: with them Python asks the module's loader for its source, and the
    # loader of a `python -c` or stdin script's __main__ raises ImportError instead of a
    # warning.  The line is still shown, from linecache, where the file has one.
    warnings.warn_explicit(message, category, filename, lineno, module=module_globals.get("__name__"),
                           registry=module_globals.setdefault("__warningregistry__", {}))


@contextlib.contextmanager
def warnings_at_caller():
    """Record the user's line that called into the library, so that warnings raised in a
    copy of this context (:func:`contextvars.copy_context`), such as work handed to threads
    whose stacks hold no user frame, point at it."""
    token = _CALLER.set(_site(_user_frame(sys._getframe(1))))
    try:
        yield
    finally:
        _CALLER.reset(token)


@contextlib.contextmanager
def warned_once(fits: str):
    """Show the warnings that :func:`warn_user` gives inside the block (on threads too, in
    copies of this context) once each, with how many times they came: for the library's own
    refits of one model (``fits`` names them, e.g. "calibrate's 5 cross-fitted copies"),
    whose warnings differ at most in their numbers.  A warning is counted by its text up to
    the first "; " (what happened); the rest (what to do) is the first one's.  They are
    shown when the block ends, also when it raises."""
    collected = []
    token = _COLLECTED.set(collected)
    try:
        yield
    finally:
        _COLLECTED.reset(token)
        counts = {}
        for message, category in collected:
            head, _, tail = message.partition("; ")
            counts.setdefault((head, category), [0, tail])[0] += 1
        for (head, category), (count, tail) in counts.items():
            warn_user(f"{head}, in {count} of {fits}" + (f"; {tail}" if tail else ""), category)


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


def check_status(code, where: str, hints=None) -> None:
    """Turn a solver status into a warning or an error on the host.

    Args:
        code: integer status (scalar, or an array whose worst entry is used).
        where: name of the solver, used in the message.
        hints: optional ``{Status: text}``, what the user can do about a status; appended
            to its message.

    Raises:
        FloatingPointError: for ``NONFINITE``, ``NOT_POSITIVE_DEFINITE`` and ``DIVERGED``:
            the result cannot be trusted.
        ValueError: for ``INVALID_CODES``: the labels were not class codes.

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
    if hints and worst in hints:
        msg += f"; {hints[worst]}"
    if worst in _SOFT:
        warn_user(msg, convergence_warning())
    elif worst == Status.INVALID_CODES:
        raise ValueError(msg)
    else:
        raise FloatingPointError(msg)
