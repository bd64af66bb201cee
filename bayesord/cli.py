"""The ``bayesord`` command: ``demo``, ``fit``, ``predict`` and ``bench``.

``fit`` fits any of the nine estimators (``--model``; ``OrdinalProbit`` by default) on a CSV
file and saves it, with constructor parameters from dedicated options or ``--param
NAME=VALUE``; ``predict`` reads any saved model (:func:`bayesord.load_model`) and writes
labels, and on request class probabilities with their posterior spread, the latent mean and
sd (Bayesian models) and conformal prediction sets (``--set ALPHA``).  The sets, and the
margin models' probabilities, need a model calibrated by ``fit --calibrate K`` (K-fold
cross-fitting on the training rows) or ``fit --calibrate-on CSV`` (held-out rows).

``fit`` standardises the feature columns by default, for every model: it centres each
column on its mean over the training rows and divides by its standard deviation (a
constant column by 1), says so in one line, and stores the transform in the model file
(arrays ``input_center`` and ``input_scale``).  The loaded model applies it to raw rows
(``input_center_`` and ``input_scale_``), in ``bayesord predict`` and in Python alike, so
predictions take the columns as they arrive.  Coefficients, relevance vectors and kernel
widths then refer to the standardised columns.  ``--no-standardize`` fits the raw columns.

The command never loses data.  An ``--out`` that is one of the inputs is refused, an
existing ``--out`` is replaced only with ``--force``, and the output folder is checked
before any work; the file is written beside its destination under a temporary name and
renamed into place, so an interrupted run leaves the old file (or none) rather than half of
a new one.  Bad input, a damaged model file and a refused output end with one line on
stderr, ``bayesord <command>: error: ...``, and exit status 2; warnings (a fit that did not
converge, with which sub-problems failed and what to try) are one line each as well.

The command is an application, not a library import, so it turns on JAX's float64 mode
(recommended for the Bayesian paths) before doing any work.  ``demo`` and ``fit`` report
progress on stderr (which model is being fitted, a line as each of its solves ends for
estimators with a ``verbose`` parameter, which they run at ``verbose=1``, and at the end of a
``fit`` how much of its time JAX spent compiling programs or reading them from the cache);
``--quiet`` (alias ``--no-progress``) turns it off.  ``--param verbose=2`` adds the solver's
line at every iteration, at the price of compiling the solver again in every run (a program
that calls back into Python is not cached on disk).
Tables and results go to stdout either way.

Compiled programs are kept on disk between runs (JAX's persistent compilation cache, the
same folder the library uses, see :mod:`bayesord._compile_cache`), so a second ``bayesord
fit`` of the same shapes skips most of the compilation.  ``--help``, argument errors and
the errors in the files named (a missing CSV or model file, an ``--out`` that exists or is an
input) are answered before JAX is imported: in about a second rather than two.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import importlib
import os
import re
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np

from ._compile_cache import cache_dir, compile_seconds
from ._registry import COMMANDS

__all__ = ["main"]


def _configure_jax():
    """Float64 and the compilation cache.  Each command calls this where it first needs JAX,
    after the checks that need only the arguments and the files, so that their errors come
    without the second that importing JAX takes.

    In the installed command (:func:`run`, which turns the garbage collector off at its
    start) the estimators are imported here too, and then the objects that the imports made
    are frozen out of the collector's sight (``gc.freeze``) and the collector is turned back
    on: collections during the imports and over their objects took 0.24 s of a warm
    ``bayesord fit`` (1,200-row wine CSV, 2 cores), 0.003 s this way, and the command took
    1.62 s instead of 1.86 s.  Code that calls :func:`main` itself (the tests) keeps its
    collector as it is."""
    # XLA_FLAGS (single-threaded Eigen) is set by importing the package: bayesord/__init__.py.
    import jax

    from . import _compile_cache

    jax.config.update("jax_enable_x64", True)
    _compile_cache.enable()
    if not gc.isenabled():
        importlib.import_module(f"{__package__}.estimators")  # every command that needs JAX uses them
        gc.freeze()
        gc.enable()


def _demo(args) -> int:
    import pandas as pd

    _configure_jax()
    from . import _progress, metrics
    from .datasets import make_ordinal_probit, stratified_split

    n_classes = 5
    # Weights of scale 1.5 give a clear but noisy signal (about 60% accuracy at K = 5).
    w = 1.5 * np.random.default_rng(args.seed).standard_normal(args.n_features)
    X, y, truth = make_ordinal_probit(args.n_train + args.n_test, args.n_features, n_classes,
                                      seed=args.seed, w=w)
    train, test = stratified_split(y, args.n_train, seed=args.seed)
    print(f"bayesord demo: synthetic ordinal probit, {args.n_features} features, {n_classes} classes, "
          f"{len(train)} training and {len(test)} test rows (seed {args.seed})\n")
    rows = []
    fitted = {}
    models = list(_demo_models(args.seed))
    for i, (name, model) in enumerate(models):
        if args.progress:
            _progress.show(f"demo: fitting {name} ({i + 1}/{len(models)})")
            if "verbose" in model.get_params():
                model.set_params(verbose=1)
        t0 = time.perf_counter()
        model.fit(X[train], y[train])
        fit_time = time.perf_counter() - t0
        pred = model.predict(X[test])
        row = {"model": name, "test MAE": metrics.mae(y[test], pred),
               "accuracy": 1.0 - metrics.zero_one(y[test], pred), "log-loss": np.nan,
               "fit time (s)": fit_time}  # includes JIT compilation
        if hasattr(model, "predict_proba"):
            row["log-loss"] = metrics.ordinal_log_loss(y[test], model.predict_proba(X[test]),
                                                       classes=model.classes_)
        rows.append(row)
        fitted[name] = model
    if args.progress:
        _progress.show(f"demo: fitted {len(models)} models", final=True)
    table = pd.DataFrame(rows).set_index("model")
    print(table.to_string(float_format=lambda v: f"{v:.3f}", na_rep="-"))
    print("(fit time includes the one-off JIT compilation of each model)")
    probit = fitted["OrdinalProbit"]
    print("\nOrdinalProbit posterior summary (true w = "
          + ", ".join(f"{v:.2f}" for v in truth.w) + "; true thresholds = "
          + ", ".join(f"{v:.2f}" for v in truth.thresholds) + ")")
    print(_summary_text(probit, digits=3))
    out = Path(args.out)
    _plot_demo(probit, X[test], y[test], out)
    print(f"\nwrote {out}")
    return 0


def _relevance_line(model, n_rows):
    """What ``fit`` prints under an ISBOR/SBOR summary."""
    return (f"\n{len(model.relevance_indices_)} relevance vectors of {n_rows} rows; kernel {model.kernel}, "
            f"width {model.theta_:g}; noise sigma {model.sigma_:.4f}"
            + (f" (x {model.sigma_factor_:g} in predictions, by CV)" if model.sigma_factor_ != 1 else ""))


def _summary_text(model, digits=4):
    """A Bayesian model's ``summary()`` as printed: ``digits`` decimals, and ``digits``
    significant figures for a number below 0.01 in size (a coefficient per unit of a raw
    column such as an income, -8e-7 with sd 2e-6, printed as zeros in fixed decimals); ``-``
    where a row has no entry (the thresholds' prior precision)."""
    def number(v):
        return f"{v:.{digits - 1}e}" if 0 < abs(v) < 0.01 else f"{v:.{digits}f}"

    return model.summary().to_string(float_format=number, na_rep="-")


def _demo_models(seed):
    from .estimators import NPSVOR, CuSumRank, OrdinalProbit, PRank, RedSVM, SwappedPairsSVM

    yield "OrdinalProbit", OrdinalProbit(random_state=seed)
    yield "OrdinalProbit (joint, ML)", OrdinalProbit(thresholds="joint", alpha=0.0, random_state=seed)
    yield "NPSVOR (C=1)", NPSVOR(C=1.0, random_state=seed)
    yield "SwappedPairsSVM (linear)", SwappedPairsSVM(random_state=seed)
    yield "CuSumRank (averaged, margin)", CuSumRank(averaged=True, margin=True, random_state=seed)
    yield "PRank", PRank(random_state=seed)
    yield "RedSVM (hinge)", RedSVM(random_state=seed)


def _plot_demo(model, X, y, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    mean, _ = model.predict_latent(X)
    order = np.argsort(mean)
    proba = model.predict_proba(X)[order]
    lo, hi, _ = model.predict_proba_interval(X[order])
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for k, label in enumerate(model.classes_):
        line, = ax.plot(mean[order], proba[:, k], label=f"P(y = {label})")
        ax.fill_between(mean[order], lo[:, k], hi[:, k], color=line.get_color(), alpha=0.25)
    ax.set_xlabel("latent mean  x^T w")
    ax.set_ylabel("predicted class probability")
    ax.set_title("OrdinalProbit: class probabilities with 95% posterior bands (test set)")
    ax.legend(loc="center right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _read_table(path, target, argument="DATA"):
    """(X, y, feature names) of a labelled CSV; its errors name the argument."""
    from .datasets import load_csv

    try:
        return load_csv(path, target=target)
    except TypeError as err:  # text feature columns
        hint = f', or fit with --formula "{target} ~ ." (text columns become indicator columns)'
        raise ValueError(f"argument {argument}: {err}{hint if argument == 'DATA' else ''}") from None
    except (ValueError, FileNotFoundError) as err:
        raise ValueError(f"argument {argument}: {err}") from None


def _checked_weights(column, name):
    """The ``--weights`` column ``name`` as float64 weights: numbers, none missing or negative."""
    values = np.asarray(column)
    if values.dtype.kind not in "iufb":
        raise ValueError(f"argument --weights: column {name!r} is not numeric")
    values = values.astype(np.float64)
    bad = ~np.isfinite(values) | (values < 0)
    if bad.any():
        rows = np.flatnonzero(bad)[:5].tolist()
        raise ValueError(f"argument --weights: column {name!r} has {int(bad.sum())} missing, infinite or "
                         f"negative weight(s) (first rows, 0-based: {rows})")
    return values


def _weight_column(X, names, args):
    """``(X, names, weights)`` with the ``--weights`` column taken out of the features (None
    without the option)."""
    if args.weights is None:
        return X, names, None
    if args.weights == args.target:
        raise ValueError(f"argument --weights: {args.weights!r} is the target column, not a weight column")
    if args.weights not in names:
        raise ValueError(f"argument --weights: {args.data} has no column {args.weights!r}; columns are "
                         f"{[args.target, *names]}")
    j = list(names).index(args.weights)
    weights = _checked_weights(X[:, j], args.weights)
    return np.delete(X, j, axis=1), [c for c in names if c != args.weights], weights


def _parse_classes(text, y, target):
    """``--classes`` as labels of the kind the target column holds (numbers stay numbers);
    text labels without ``--classes`` are an error that lists them (their order is the
    user's to give: labels are never sorted alphabetically)."""
    y = np.asarray(y)
    if text is None:
        if y.dtype.kind not in "iufb":
            from ._validation import shown_labels

            raise ValueError(f"the labels in column {target!r} are text ({shown_labels(y)}), which have no "
                             "order of their own: list them with --classes, comma-separated from lowest to highest")
        return None
    classes = [c.strip() for c in text.split(",")]
    if y.dtype.kind not in "iuf":
        return classes
    number = int if y.dtype.kind in "iu" else float
    for c in classes:
        try:
            number(c)
        except ValueError:
            seen = ", ".join(str(v) for v in np.unique(y)[:10])
            raise ValueError(
                f"argument --classes: {c!r} is not {'an integer' if number is int else 'a number'}, but "
                f"the labels in column {target!r} are ({seen}); list those labels, lowest first, "
                f"e.g. --classes {','.join(str(v) for v in np.unique(y)[:3])}") from None
    return [number(c) for c in classes]


# Dedicated options of `fit` (argparse dest) and the constructor parameter each one sets.
_OPTIONS = {"thresholds": "thresholds", "alpha": "alpha", "prior": "prior", "kernel": "kernel",
            "theta": "theta", "theta_selection": "theta_selection", "link": "link",
            "seed": "random_state"}


def _parse_param(text):
    """``NAME=VALUE`` of ``--param``: VALUE as a Python literal (number, tuple, None, True),
    else as the string itself (``kernel=rbf``)."""
    import ast

    name, sep, value = text.partition("=")
    if not sep or not name.strip():
        raise ValueError(f"--param expects NAME=VALUE, got {text!r}")
    try:
        value = ast.literal_eval(value.strip())
    except (ValueError, SyntaxError):
        value = value.strip()
    return name.strip(), value


def _make_model(args):
    """The estimator that ``--model`` names, with the options and ``--param`` values given."""
    _configure_jax()
    from . import estimators

    cls = getattr(estimators, COMMANDS[args.model].name)
    return cls(**_model_params(args, cls))


def _model_params(args, cls):
    """The constructor parameters of ``cls`` that the options and ``--param`` values give."""
    known = cls().get_params()
    flag = f"--model {args.model}" if cls.__name__ == COMMANDS[args.model].name else f"--formula ({cls.__name__})"
    params = {}
    for dest, name in _OPTIONS.items():
        value = getattr(args, dest)
        if value is None:
            continue
        if name not in known:
            raise ValueError(f"--{dest.replace('_', '-')} does not apply to {flag} "
                             f"({cls.__name__} has no parameter {name!r})")
        if name == "theta" and value != "auto":
            try:
                value = float(value)
            except ValueError:
                raise ValueError(f"--theta must be a positive number or 'auto', got {value!r}") from None
        params[name] = value
    for text in args.param:
        name, value = _parse_param(text)
        if name not in known:
            raise ValueError(f"--param {name}: {cls.__name__} has no parameter {name!r}; its "
                             f"parameters are {', '.join(sorted(known))}")
        if name in params:
            raise ValueError(f"--param {name} is given twice (or also by its own option)")
        params[name] = value
    if params.get("calibration_cv") is not None and (args.calibrate, args.calibrate_on) != (None, None):
        raise ValueError("--param calibration_cv calibrates at the end of the fit, as --calibrate does: "
                         "give one of them")
    if "random_state" in known:
        params.setdefault("random_state", 0)  # the command is reproducible by default
    if "verbose" in known:
        params.setdefault("verbose", int(args.progress))
    return params


def _feature_frame(path, target, names, argument):
    """Rows of a CSV file as a DataFrame of the named feature columns (target dropped);
    errors name ``argument``, the option or argument that gave ``path``."""
    import pandas as pd

    try:
        frame = pd.read_csv(path)
    except pd.errors.EmptyDataError:
        raise ValueError(f"argument {argument}: {path} is empty (no header row)") from None
    except FileNotFoundError:
        raise ValueError(f"argument {argument}: CSV file not found: {path}") from None
    if frame.shape[0] == 0:
        raise ValueError(f"argument {argument}: {path} has a header but no rows")
    if target and target in frame.columns:
        frame = frame.drop(columns=[target])
    return _feature_columns(frame, names, path, argument)


def _feature_columns(frame, names, path, argument):
    """The columns ``names`` of ``frame`` in that order (all of them for ``names=None``)."""
    if names is None:
        return frame
    missing = [c for c in names if c not in frame.columns]
    if missing:
        from .datasets import _separator_hint

        raise ValueError(f"argument {argument}: {path} lacks feature columns {missing}"
                         + _separator_hint(list(frame.columns)))
    return frame[list(names)]


def _output_path(text, flag, inputs, force):
    """``text`` as the path to write, checked before any work is done.

    Args:
        text: the path given to ``flag``.
        flag: the option (``--out``), for the messages.
        inputs: argument name -> path of every file the command reads.
        force: whether an existing file may be replaced.

    Raises:
        ValueError: the path is one of the inputs (whatever ``force`` says), a folder, an
            existing file without ``force``, or in a folder that is missing or not writable.
    """
    path = Path(text)
    for argument, source in inputs.items():
        if source is not None and _same_file(path, source):
            raise ValueError(f"argument {flag}: {text} is the {argument} file; writing there would "
                             "destroy it, choose another name")
    if path.is_dir():
        raise ValueError(f"argument {flag}: {text} is a folder; give a file name")
    if path.exists() and not force:
        raise ValueError(f"argument {flag}: {text} exists; pass --force to replace it")
    folder = path.parent
    if not folder.is_dir():
        raise ValueError(f"argument {flag}: folder {folder} does not exist")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise ValueError(f"argument {flag}: folder {folder} is not writable")
    return path


def _same_file(a, b):
    try:
        return os.path.samefile(a, b)
    except OSError:  # one of them does not exist
        return False


@contextlib.contextmanager
def _replacing(path):
    """A temporary file name beside ``path``, renamed onto ``path`` when the block ends
    normally and removed when it raises: ``path`` is never left half written."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # the permissions of a file opened for writing
        yield tmp
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def _standardization(X):
    """Centre (training mean) and scale (training sd; 1 for a constant column) of each column,
    and the indices of the constant columns."""
    from ._validation import column_moments

    mean, sd, constant = column_moments(X)
    return mean, np.where(constant, 1.0, sd), np.flatnonzero(constant)


def _formula_class(args):
    """The estimator a ``--formula`` fit makes: OrdinalMixed for a group term, the cumulative
    link model with ``--nominal``/``--scale``, else OrdinalProbit (``--model probit``) or the
    ``--model`` named (its text columns coded by the formula, standardised as without one)."""
    from .estimators._formula import has_group_term

    grouped = has_group_term(args.formula)
    if args.model != "probit" and (grouped or args.nominal or args.scale):
        raise ValueError(f"group terms, --nominal and --scale belong to the probit family (OrdinalMixed, "
                         f"CumulativeLinkModel), not --model {args.model}")
    if grouped and (args.nominal or args.scale):
        raise ValueError("--nominal and --scale do not combine with a group term (the mixed model has "
                         "neither)")
    _configure_jax()
    from . import estimators

    if args.model != "probit":
        return getattr(estimators, COMMANDS[args.model].name)
    if grouped:
        return estimators.OrdinalMixed
    return estimators.CumulativeLinkModel if (args.nominal or args.scale) else estimators.OrdinalProbit


def _fit_formula(args) -> int:
    """``fit --formula``: the raw CSV through the formula (text columns coded by it); held-out
    calibration rows (``--calibrate-on``) and TOR's unlabeled rows go through the same coding."""
    if args.unlabeled is not None and args.model != "tor":
        raise ValueError(f"--unlabeled applies to --model tor, not {args.model}")
    frame = _feature_frame(args.data, None, None, "DATA")
    if re.search(r"~.*(^|[\s+~])\.($|[\s+-])", args.formula):  # "y ~ ." takes every column
        from .datasets import warn_if_unnamed_columns

        warn_if_unnamed_columns(frame.columns, Path(args.data).name)
    calibration = _calibration_rows(args, None)
    unlabeled = None if args.unlabeled is None else _feature_frame(args.unlabeled, None, None, "--unlabeled")
    out = _output_path(args.out, "--out", {"DATA": args.data, "--unlabeled": args.unlabeled,
                                           "--calibrate-on": args.calibrate_on}, args.force)
    cls = _formula_class(args)
    if (args.calibrate is not None or calibration is not None) and not hasattr(cls, "calibrate"):
        raise ValueError(f"--calibrate: {cls.__name__} has no conformal calibration yet")
    params = _model_params(args, cls)
    if unlabeled is not None:
        params["X_unlabeled"] = unlabeled
    extra = {name: getattr(args, name) for name in ("nominal", "scale") if getattr(args, name)}
    # The models without a formula of their own standardise their coded columns as fit does.
    standardize = {} if args.model == "probit" else {"standardize": args.standardize and cls._scale_sensitive}
    from .estimators._formula import has_group_term, split_formula

    response = split_formula(args.formula, group_term=has_group_term(args.formula))[0]
    weights = None
    if args.weights is not None:
        if args.weights == response:
            raise ValueError(f"argument --weights: {args.weights!r} is the formula's response, not a weight column")
        if args.weights not in frame.columns:
            raise ValueError(f"argument --weights: {args.data} has no column {args.weights!r}; columns are "
                             f"{[str(c) for c in frame.columns]}")
        weights = _checked_weights(frame.pop(args.weights), args.weights)
    if args.target is not None and args.target != response:
        raise ValueError(f"--target {args.target!r} is not the formula's response {response!r}: with "
                         "--formula the response is the formula's (leave --target out)")
    if calibration is not None and response not in calibration[0].columns:
        raise ValueError(f"argument --calibrate-on: {args.calibrate_on} has no column {response!r} (the "
                         "formula's response), which calibration needs")
    if response in frame.columns:
        classes = _parse_classes(args.classes, frame[response], response)
        if classes is not None:
            params["classes"] = classes
    name = cls.__name__
    from . import _progress  # with JAX, after the checks above

    if args.progress:
        _progress.show(f"fit: {name} from {args.formula!r} on {frame.shape[0]} rows ...")
    t0 = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught, compile_seconds() as compiling:
        warnings.simplefilter("always")
        model = cls.from_formula(args.formula, frame, sample_weight=weights, **extra, **standardize, **params)
    if args.progress:
        _progress.show(_fitted_line(name, time.perf_counter() - t0, compiling, _solver_lines(model)), final=True)
    for w in dict.fromkeys(str(w.message) for w in caught):
        _warning_line("fit", w)
    if calibration is not None:
        _calibrate(model, frame, None, (calibration[0], calibration[0][response]), args)
    elif args.calibrate is not None:
        _calibrate(model, frame, frame[response], None, args)
    with _replacing(out) as tmp:
        model.save(tmp)
    if standardize.get("standardize"):
        print(f"standardised the {model.n_features_in_} coded columns (mean 0, sd 1 over the {frame.shape[0]} "
              "training rows); the model file keeps the coding and the transform, and predict applies "
              "both to raw rows")
    if not COMMANDS[args.model].bayesian:
        _print_fit(model, frame, frame[response], args)
        return 0
    print(_summary_text(model))
    if args.model != "probit":
        print(_relevance_line(model, frame.shape[0]))
    print(f"\n{name} from {args.formula!r}"
          + "".join(f", {k} {v!r}" for k, v in extra.items())
          + f"; converged {model.converged_}; saved to {args.out} (predict reads raw rows of the same columns)")
    return 0


def _fit(args) -> int:
    import pandas as pd

    if args.formula is not None:
        return _fit_formula(args)
    if args.nominal or args.scale:
        raise ValueError("--nominal and --scale go with --formula")
    if args.target is None:
        args.target = "y"
    X, y, names = _read_table(args.data, args.target)
    X, names, weights = _weight_column(X, names, args)
    classes = _parse_classes(args.classes, y, args.target)
    if args.unlabeled is not None and args.model != "tor":
        raise ValueError(f"--unlabeled applies to --model tor, not {args.model}")
    unlabeled = None if args.unlabeled is None else _feature_frame(args.unlabeled, args.target, names,
                                                                   "--unlabeled")
    calibration = _calibration_rows(args, names)
    out = _output_path(args.out, "--out", {"DATA": args.data, "--unlabeled": args.unlabeled,
                                           "--calibrate-on": args.calibrate_on}, args.force)
    model = _make_model(args)
    if args.standardize and getattr(model, "kernel", None) == "precomputed":
        raise ValueError("--kernel precomputed reads a kernel matrix, whose columns must not be "
                         "standardised: add --no-standardize")
    raw = pd.DataFrame(X, columns=names)
    frame = raw
    if args.standardize:
        center, scale, constant = _standardization(X)
        frame = (raw - center) / scale
        if unlabeled is not None:
            unlabeled = (unlabeled - center) / scale
        kept = f"; constant column(s) {[names[j] for j in constant]} only centred" if constant.size else ""
        print(f"standardised the {X.shape[1]} feature columns (mean 0, sd 1 over the {X.shape[0]} training "
              f"rows{kept}); the model file keeps the transform and predict applies it to raw rows; "
              "coefficients and kernel widths refer to the standardised columns (--no-standardize "
              "fits the raw columns)")
    _fit_reporting(model, frame, y, classes, unlabeled, args, weights)
    if args.standardize:
        from .estimators._base import set_input_transform

        set_input_transform(model, center, scale)
    if calibration is not None or args.calibrate is not None:
        _calibrate(model, raw, y, calibration, args)
    with _replacing(out) as tmp:
        model.save(tmp)
    if COMMANDS[args.model].bayesian:
        print(_summary_text(model))
        if args.model != "probit":
            print(_relevance_line(model, X.shape[0]))
        print(f"\nlog evidence {model.log_evidence_:.4f}; converged {model.converged_}; saved to {args.out}")
        return 0
    _print_fit(model, raw, y, args)
    return 0


def _calibration_rows(args, names):
    """The held-out rows of ``--calibrate-on`` as (raw feature frame, labels), or None; for a
    formula fit (``names`` None), (its frame, None): the formula names the columns it reads."""
    if args.calibrate_on is None:
        return None
    if args.calibrate is not None:
        raise ValueError("give --calibrate K (cross-fitting on the training rows) or --calibrate-on "
                         "CSV (held-out rows), not both")
    if _same_file(args.calibrate_on, args.data):
        raise ValueError("argument --calibrate-on: that is the DATA file, but split conformal needs "
                         "rows the model was not fitted on; use --calibrate K to calibrate on the "
                         "training rows by cross-fitting")
    if names is None:
        return _feature_frame(args.calibrate_on, None, None, "--calibrate-on"), None
    X, y, cal_names = _read_table(args.calibrate_on, args.target, "--calibrate-on")
    if args.weights in cal_names:  # calibration rows are exchangeable rows, unweighted
        X, cal_names = np.delete(X, cal_names.index(args.weights), axis=1), [c for c in cal_names
                                                                            if c != args.weights]
    if list(cal_names) != list(names):
        raise ValueError(f"argument --calibrate-on: {args.calibrate_on} has feature columns "
                         f"{list(cal_names)}, but DATA has {list(names)}")
    return X, y


def _calibrate(model, raw, y, calibration, args):
    """Conformal calibration (and the margin models' probability layer) on held-out rows
    (``--calibrate-on``) or by cross-fitting over the training rows (``--calibrate K``)."""
    import pandas as pd

    from . import _progress

    name = type(model).__name__
    if calibration is None:
        how = f"{args.calibrate}-fold cross-fitting on the {len(y)} training rows"
        X_cal, y_cal, cv = raw, y, args.calibrate
    else:
        how = f"the {len(calibration[1])} held-out rows of {args.calibrate_on}"
        X_cal, y_cal, cv = calibration[0], calibration[1], None
        if not isinstance(X_cal, pd.DataFrame):
            X_cal = pd.DataFrame(X_cal, columns=raw.columns)
    if args.progress:
        _progress.show(f"fit: calibrating {name} by {how} ...")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            model.calibrate(X_cal, y_cal, cv=cv, random_state=args.seed)
        except ValueError as err:
            raise ValueError(f"calibration: {err}") from None
    if args.progress:
        _progress.finish()
    for w in dict.fromkeys(str(w.message) for w in caught):
        _warning_line("fit", f"calibration: {w}")
    if cv is not None:  # the folds made, which a class with few rows can make fewer than asked
        how = f"{model.conformal_.cv}-fold cross-fitting on the {len(y)} training rows"
    print(f"calibrated prediction sets{'' if COMMANDS[args.model].bayesian else ' and probabilities'} "
          f"on {how} (predict --set ALPHA)")


def _fitted_line(name, seconds, made, solver_lines=False):
    """The progress line that ends a fit: its time, and how much of it JAX spent compiling
    programs (a first run of these shapes; every run for a solver compiled with its
    per-iteration line, ``solver_lines``) or reading them from the on-disk cache."""
    line = f"fit: {name} fitted in {seconds:.1f} s"
    compiled = made["compiling"] - made["loading"]
    if compiled >= 0.5:
        later = ("the solver with its line at every iteration (verbose=2) is compiled in every run"
                 if solver_lines else "later runs of these shapes read the programs from the cache" if cache_dir()
                 else "the on-disk cache is off: every run compiles")
        return f"{line}, {min(compiled, seconds):.1f} s of it compiling ({later})"
    if made["loading"] >= 0.3:
        return f"{line}, {made['loading']:.1f} s of it reading compiled programs from the cache"
    return line


def _solver_lines(model):
    """Whether ``model`` reports every iteration from inside its compiled solver."""
    from ._progress import solver_progress

    return solver_progress(getattr(model, "verbose", 0))


def _fit_reporting(model, frame, y, classes, unlabeled, args, weights=None):
    """``model.fit`` (with ``weights``, the ``--weights`` column) and a progress line, and
    its warnings as one line each on stderr (a convergence failure with the sub-problems
    that failed and what to try)."""
    from . import _progress, _status

    name = type(model).__name__
    if args.progress:
        _progress.show(f"fit: {name} on {frame.shape[0]} rows x {frame.shape[1]} features ...")
    t0 = time.perf_counter()
    extra = {} if unlabeled is None else {"X_unlabeled": unlabeled}
    if weights is not None:
        extra["sample_weight"] = weights
    with warnings.catch_warnings(record=True) as caught, compile_seconds() as compiling:
        warnings.simplefilter("always")
        model.fit(frame, y, classes=classes, **extra)
    if args.progress:
        _progress.show(_fitted_line(name, time.perf_counter() - t0, compiling, _solver_lines(model)), final=True)
    converging = _status.convergence_warning() if caught else None  # scikit-learn only when there is a warning
    unconverged = [str(w.message) for w in caught if issubclass(w.category, converging)]
    for w in caught:
        if not issubclass(w.category, converging):
            _warning_line("fit", w.message)
    if unconverged:
        _warning_line("fit", _convergence_advice(model, unconverged, args.standardize))


def _on_the_command_line(message):
    """A warning whose advice names a parameter in Python's words, with the option that
    sets it added (RED-SVM's and TOR's one-class warning with a piecewise-linear loss)."""
    if "loss='logistic' or 'squared_hinge'" in message:
        return f"{message}; on the command line: --param loss=logistic (or --param loss=squared_hinge)"
    return message


def _convergence_advice(model, messages, standardized):
    """One line: what did not converge (which sub-problems, for a model of several) and what to try."""
    from .estimators._base import SEPARATED

    text = "; ".join(dict.fromkeys(messages))
    if any(SEPARATED in m for m in messages):
        # More iterations cannot help; the message says what can, in Python's words.
        if getattr(model, "thresholds", None) == "evidence":
            text += "; on the command line: --thresholds joint --alpha 1"
        return text
    converged = np.atleast_1d(np.asarray(model.converged_))
    failed = np.flatnonzero(~converged)
    if converged.size > 1 and failed.size:
        labels = ", ".join(str(model.classes_[k]) for k in failed)
        text += (f"; {failed.size} of {converged.size} sub-problems did not converge (the rank "
                 f"problems of classes {labels})")
    params = model.get_params()
    tries = []
    for name in ("max_iter", "max_epochs"):
        if isinstance(params.get(name), int):
            tries.append(f"more iterations (--param {name}={10 * params[name]})")
            break
    if isinstance(params.get("C"), (int, float)):
        tries.append(f"a smaller C (--param C={params['C'] / 10:g})")
    if isinstance(params.get("capacity"), int):
        tries.append(f"a larger capacity (--param capacity={2 * params['capacity']})")
    if not standardized:
        tries.append("standardised columns (leave out --no-standardize)")
    return f"{text}; try {', '.join(tries)}" if tries else text


def _warning_line(command, message):
    from . import _progress

    _progress.finish()
    text = _on_the_command_line(" ".join(str(message).split()))
    print(f"bayesord {command}: warning: {text}", file=sys.stderr)


def _print_fit(model, frame, y, args):
    """What `fit` prints for the models without a posterior summary (``frame``: raw rows)."""
    from .metrics import mae, zero_one

    pred = model.predict(frame)
    settings = ", ".join(f"{k}={v!r}" for k, v in sorted(model.get_params().items())
                         if k not in ("verbose", "classes"))
    print(f"{type(model).__name__}({settings})")
    print(f"classes (lowest to highest): {', '.join(str(c) for c in model.classes_)}")
    print(f"training rows {len(y)}: MAE {mae(y, pred, classes=model.classes_):.4f} (in class steps), "
          f"zero-one error {zero_one(y, pred, classes=model.classes_):.4f}")
    if args.model == "tor":
        counts = ", ".join(f"{c}: {np.sum(model.transduction_ == c)}" for c in model.classes_)
        print(f"unlabeled rows {len(model.transduction_)}: {counts}; {model.n_swaps_} swaps, "
              f"{model.n_retrains_} retrainings")
    if hasattr(model, "mistakes_"):  # a perceptron: its epochs are all it runs, converged or not
        stop = "; it stopped at an epoch without updates" if model.converged_ else ""
        print(f"epochs {model.n_iter_}; {int(model.mistakes_[-1])} online mistakes in the last epoch{stop}; "
              f"saved to {args.out}")
    else:
        print(f"iterations {np.asarray(model.n_iter_).tolist()}; converged {np.asarray(model.converged_).tolist()}; "
              f"saved to {args.out}")


def _predict(args) -> int:
    import pandas as pd

    alphas = _parse_alphas(args.set)
    if args.risk != "coverage" and alphas is None:
        raise ValueError("--risk goes with --set ALPHA (it says what ALPHA bounds)")
    if not Path(args.model).is_file():
        raise ValueError(f"argument MODEL: no model file {args.model}")
    frame = _feature_frame(args.data, args.target, None, "DATA")
    out_path = None if args.out is None else _output_path(args.out, "--out", {"MODEL": args.model,
                                                                              "DATA": args.data}, args.force)
    _configure_jax()
    from .estimators import load_model

    model = load_model(args.model)
    # A model fitted from a formula codes the raw columns itself (text ones among them).
    names = None if getattr(model, "formula_", None) is not None else getattr(model, "feature_names_in_", None)
    frame = _feature_columns(frame, names, args.data, "DATA")
    if (args.proba or args.uncertainty or alphas is not None) and not hasattr(model, "predict_proba"):
        raise ValueError(f"{args.model} holds a {type(model).__name__} that was fitted without "
                         "calibration, so it gives labels and scores only: fit it with --calibrate K "
                         "or --calibrate-on CSV for probabilities and prediction sets")
    if alphas is not None and getattr(model, "conformal_", None) is None:
        raise ValueError(f"{args.model} was fitted without calibration: fit it with --calibrate K or "
                         "--calibrate-on CSV for conformal prediction sets")
    out = pd.DataFrame({"prediction": model.predict(frame)})
    if args.proba or args.uncertainty:
        proba = model.predict_proba(frame)
        for k, c in enumerate(model.classes_):
            out[f"P(y={c})"] = proba[:, k]
    if args.uncertainty:
        sd = model.predict_proba_interval(frame)[2]
        for k, c in enumerate(model.classes_):
            out[f"sd P(y={c})"] = sd[:, k]
        if hasattr(model, "predict_latent"):
            mean, var = model.predict_latent(frame)
            out["latent mean"] = mean
            out["latent sd"] = np.sqrt(var)
    if alphas is not None:
        lower, upper = model.predict_set(frame, alphas, risk=args.risk)
        for j, a in enumerate(alphas):
            out[f"set lower (alpha={a:g})"] = lower[:, j]
            out[f"set upper (alpha={a:g})"] = upper[:, j]
    if out_path is not None:
        with _replacing(out_path) as tmp:
            out.to_csv(tmp, index=False)
        print(f"wrote {len(out)} predictions to {args.out}")
    else:
        print(out.to_csv(index=False), end="")
    return 0


def _parse_alphas(text):
    """``--set 0.1`` or ``--set 0.05,0.1,0.2`` as a list of floats in (0, 1), or None."""
    if text is None:
        return None
    try:
        alphas = [float(t) for t in text.split(",")]
    except ValueError:
        raise ValueError(f"argument --set: expected miscoverage rates such as 0.1 or 0.05,0.2, got {text!r}") from None
    bad = [a for a in alphas if not 0 < a < 1]
    if bad:
        raise ValueError(f"argument --set: each alpha must lie strictly between 0 and 1, got {bad}")
    return alphas


def _bench(args) -> int:
    from ._bench import available, run_benchmarks

    if args.list:
        for name, path in available().items():
            print(f"{name}: {path}")
        return 0
    return run_benchmarks(args.names, quick=args.quick, data_dir=args.data_dir, out=Path(args.out),
                          docs=Path(args.docs) if args.docs else None, timeout=args.timeout)


def _fold_count(text):
    try:
        k = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of folds, got {text!r}") from None
    if k < 2:
        raise argparse.ArgumentTypeError(f"needs at least 2 folds, got {k}")
    return k


def _add_quiet(parser):
    parser.add_argument("--quiet", "--no-progress", dest="progress", action="store_false",
                        help="no progress lines on stderr (they are on by default)")


def _parser():
    p = argparse.ArgumentParser(prog="bayesord", description="Ordinal regression that says how sure it is.")
    sub = p.add_subparsers(dest="command", required=True)
    d = sub.add_parser("demo", help="fit the models on embedded synthetic data and print a table")
    d.add_argument("--n-train", type=int, default=2000)
    d.add_argument("--n-test", type=int, default=1000)
    d.add_argument("--n-features", type=int, default=5)
    d.add_argument("--seed", type=int, default=0)
    d.add_argument("--out", default="bayesord_demo.png", help="PNG plot of class probabilities")
    _add_quiet(d)
    d.set_defaults(func=_demo)
    f = sub.add_parser("fit", help="fit a model on a CSV file and save it",
                       description="Fit a model on a CSV file and save it (.npz). The feature "
                                   "columns are standardised first (mean 0, sd 1 over the training "
                                   "rows; --no-standardize to opt out) and the model file keeps the "
                                   "transform, which predict applies to raw rows. Options that name "
                                   "a constructor parameter apply to the models that have it; "
                                   "--param NAME=VALUE sets any other.")
    f.add_argument("data", metavar="DATA",
                   help="CSV file with a header row; every column but the target is a numeric feature")
    f.add_argument("--target", help="name of the label column (default: y; with --formula, the "
                                    "formula's response)")
    f.add_argument("--out", required=True,
                   help="where to save the model (.npz); never one of the input files, and an "
                        "existing file only with --force")
    f.add_argument("--weights", metavar="COLUMN",
                   help="a column of sample weights, not a feature: a row of weight w counts w "
                        "times (survey weights: rescale them to sum to the row count)")
    f.add_argument("--force", action="store_true", help="replace an existing --out file")
    f.add_argument("--no-standardize", dest="standardize", action="store_false",
                   help="fit the raw columns; by default every model is fitted on columns centred "
                        "and scaled to sd 1 over the training rows, and the model file keeps that "
                        "transform, which predict applies to raw rows")
    f.add_argument("--model", choices=list(COMMANDS), default="probit",
                   help="probit: linear OrdinalProbit (default); isbor: sparse Bayesian kernel "
                        "model with incremental relevance-vector selection; sbor: its batch "
                        "version (small data); npsvor: linear nonparallel SVM; cusum, prank: "
                        "perceptrons (CuSumRank, PRank); swapped-pairs: SwappedPairsSVM; redsvm: "
                        "RedSVM; tor: TransductiveOrdinalRegression (with --unlabeled)")
    f.add_argument("--thresholds", choices=["evidence", "joint"],
                   help="probit: thresholds and prior precision by type-II maximum likelihood "
                        "(evidence, the default) or thresholds fitted with w for the fixed "
                        "--alpha (joint)")
    f.add_argument("--alpha", type=float,
                   help="probit: prior precision of the standardised coefficients: the fixed "
                        "value with --thresholds joint (0 is maximum likelihood), the starting "
                        "value with evidence (default: 1); a formula model with --nominal or "
                        "--scale (CumulativeLinkModel): the strength of its lasso penalty on them, "
                        "per row of the mean log-likelihood (default: 0, maximum likelihood; "
                        "--param l1_ratio=0 makes it a ridge penalty, the same as a prior "
                        "precision of n times alpha)")
    f.add_argument("--prior", choices=["gaussian", "ard"],
                   help="probit: one precision for all weights (default) or one per feature (ARD)")
    f.add_argument("--kernel",
                   help="models with a kernel: isbor/sbor rbf (default), linear, poly; cusum "
                        "linear (default), rbf, poly; swapped-pairs linear (default), rbf; "
                        "redsvm/tor linear (default), perceptron, rbf. RBF kernels compare the "
                        "standardised columns (see --no-standardize)")
    f.add_argument("--theta", help="isbor/sbor: kernel width, a positive number or 'auto' "
                                   "(default: auto, chosen from (0.1, 0.3, 1, 3) / d, d the number of "
                                   "non-constant columns)")
    f.add_argument("--theta-selection", choices=["evidence", "loo", "cv"],
                   help="isbor/sbor: how --theta auto chooses: 5-fold CV on the held-out log "
                        "probability (default), the Laplace evidence (the paper's rule, about "
                        "4x faster), or PSIS-LOO")
    f.add_argument("--seed", type=int, help="random seed of the models that draw random numbers "
                                            "(default: 0)")
    f.add_argument("--link", metavar="NAME",
                   help="probit/isbor/sbor: latent noise distribution, e.g. probit (default), "
                        "logit, cloglog; an unknown name is refused with the list of links")
    f.add_argument("--classes", help="comma-separated labels from lowest to highest")
    f.add_argument("--unlabeled", metavar="CSV",
                   help="tor: CSV file of unlabeled rows with the same feature columns (a target "
                        "column there is ignored); with --formula, coded by it")
    f.add_argument("--calibrate", type=_fold_count, metavar="K",
                   help="calibrate prediction sets (and the margin models' probabilities) by "
                        "K-fold cross-fitting on the training rows (K more fits)")
    f.add_argument("--calibrate-on", metavar="CSV",
                   help="calibrate them on held-out labelled rows instead (split conformal: "
                        "coverage guaranteed on exchangeable rows); with --formula, coded by it")
    f.add_argument("--formula", metavar="FORMULA",
                   help="fit from a formula on the CSV's columns as they are, e.g. "
                        "'rating ~ temp + contact' or 'y ~ .' (text columns coded as treatment "
                        "contrasts; the response is the left side, --target is not used); a group "
                        "term '(1 | judge)' fits the ordinal mixed model; any --model but tor (the "
                        "margin models' coded columns are standardised, as without a formula)")
    f.add_argument("--nominal", metavar="FORMULA",
                   help="with --formula: terms that shift each threshold separately, e.g. "
                        "'~ contact' (the cumulative link model, as R's clm(nominal =))")
    f.add_argument("--scale", metavar="FORMULA",
                   help="with --formula: terms of the latent scale, e.g. '~ temp' (as R's "
                        "clm(scale =))")
    f.add_argument("--param", action="append", default=[], metavar="NAME=VALUE",
                   help="any other constructor parameter of the model, repeatable; VALUE is read "
                        "as a Python literal (10, 1e-3, (0.1, 1), None) or else as text, e.g. "
                        "--param C=10 --param loss=squared_hinge")
    _add_quiet(f)
    f.set_defaults(func=_fit)
    r = sub.add_parser("predict", help="predict with a saved model")
    r.add_argument("model", metavar="MODEL",
                   help="a model saved by `bayesord fit` or an estimator's save() (.npz)")
    r.add_argument("data", metavar="DATA", help="CSV file with the model's feature columns (by name)")
    r.add_argument("--target", default="y", help="column to drop if present")
    r.add_argument("--proba", action="store_true", help="also write class probabilities")
    r.add_argument("--uncertainty", action="store_true",
                   help="also write class probabilities, their posterior sd, and (Bayesian "
                        "models) the latent mean and sd")
    r.add_argument("--set", metavar="ALPHA",
                   help="also write conformal prediction sets (lowest and highest label) at "
                        "miscoverage ALPHA, or at each of a comma-separated list (needs a model "
                        "fitted with --calibrate or --calibrate-on)")
    r.add_argument("--risk", choices=["coverage", "distance"], default="coverage",
                   help="with --set: what ALPHA bounds on average over new rows: the miss "
                        "(coverage, default) or the distance from the label to the set over K-1 "
                        "classes (distance: a near miss costs little; narrower sets)")
    r.add_argument("--out", help="CSV file to write (default: stdout); never the model or the "
                                 "data file, and an existing file only with --force")
    r.add_argument("--force", action="store_true", help="replace an existing --out file")
    r.set_defaults(func=_predict)
    b = sub.add_parser("bench", help="run benchmark scripts and write JSON, markdown tables and plots")
    b.add_argument("names", nargs="*", default=["all"],
                   help="benchmarks to run (NAME of benchmarks/NAME_bench.py), default all")
    b.add_argument("--quick", action="store_true", help="each script's quick mode (minutes)")
    b.add_argument("--data-dir", help="shared datasets folder (default ../shared/datasets when "
                   "present; synthetic data only otherwise)")
    b.add_argument("--out", default="benchmarks/results/report",
                   help="output folder (default benchmarks/results/report, git-ignored)")
    b.add_argument("--docs", help="also write this markdown page (e.g. docs/benchmarks.md)")
    b.add_argument("--timeout", type=float, help="seconds allowed per script")
    b.add_argument("--list", action="store_true", help="list the benchmarks and exit")
    b.set_defaults(func=_bench)
    return p


class _ReaderMayLeave:
    """``sys.stdout`` of a command whose reader may close the pipe early (``bayesord fit ...
    | head``): from the first write that finds it closed, the rest of the output is dropped
    (file descriptor 1 then points at the null device, so no later flush fails) and the
    command finishes its work, whose product is the files it writes."""

    def __init__(self, stream):
        self._stream = stream

    def _dropping(self, call, *args):
        try:
            return call(*args)
        except BrokenPipeError:
            with contextlib.suppress(OSError, ValueError):
                os.dup2(os.open(os.devnull, os.O_WRONLY), self._stream.fileno())
            self._stream = open(os.devnull, "w")  # the rest of the output, for the process's life
            return None

    def write(self, text):
        self._dropping(self._stream.write, text)
        return len(text)

    def flush(self):
        self._dropping(self._stream.flush)

    def __getattr__(self, name):
        return getattr(self._stream, name)


def main(argv=None) -> int:
    """Entry point of the ``bayesord`` command.

    Returns:
        0, or 2 after one line ``bayesord <command>: error: ...`` on stderr for bad input,
        a damaged model file, an output that cannot or may not be written, or a fit that
        failed numerically (a solver's ``FloatingPointError``).  A reader of
        the output that leaves early (``| head``) is not an error (:class:`_ReaderMayLeave`).
    """
    args = _parser().parse_args(argv)  # --help and argument errors exit here, before JAX loads
    shown = set()

    def show_once(message, *_, **__):  # predict's labels and probabilities may warn alike
        if str(message) not in shown:
            shown.add(str(message))
            _warning_line(args.command, message)

    with warnings.catch_warnings(), contextlib.redirect_stdout(_ReaderMayLeave(sys.stdout)):
        warnings.showwarning = show_once
        try:
            return args.func(args)
        except (ValueError, TypeError, OSError, ArithmeticError) as err:
            progress = sys.modules.get(f"{__package__}._progress")  # loaded with JAX, if at all
            if progress is not None:
                progress.finish()
            text = " ".join(str(err).split())
            print(f"bayesord {args.command}: error: {text}", file=sys.stderr)
            return 2


def run():
    """The installed ``bayesord`` command: :func:`main`, then the process ends at once.

    By then every file the command wrote is closed and its output is flushed here; ending
    with ``os._exit`` skips the interpreter's teardown of JAX, XLA and the loaded modules,
    which took 0.55 s of a 2.6 s ``bayesord fit`` (4,000 rows, warm cache, 2 cores).
    ``--help`` and argument errors exit through ``SystemExit`` as usual, before JAX loads.
    The garbage collector is off until the command has imported what it needs
    (:func:`_configure_jax`).
    """
    gc.disable()
    code = main()
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except OSError:  # a closed pipe (``bayesord ... | head``): nothing more can be written
        pass
    os._exit(code)


if __name__ == "__main__":
    run()
