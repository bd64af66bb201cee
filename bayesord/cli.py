"""The ``bayesord`` command: ``demo``, ``fit``, ``predict`` and ``bench``.

``fit`` fits any of the nine estimators (``--model``; ``OrdinalProbit`` by default) on a CSV
file and saves it, with constructor parameters from dedicated options or ``--param
NAME=VALUE``; ``predict`` reads any saved model (:func:`bayesord.load_model`) and writes
labels, and for the Bayesian models on request class probabilities with their posterior
spread and the latent mean and sd.

The command is an application, not a library import, so it turns on JAX's float64 mode
(recommended for the Bayesian paths) before doing any work.  ``demo`` and ``fit`` report
progress on stderr (which model is being fitted, and the solver's own progress line for
estimators with a ``verbose`` parameter); ``--quiet`` (alias ``--no-progress``) turns it off.
Tables and results go to stdout either way.

Compiled programs are kept on disk between runs (JAX's persistent compilation cache), so a
second ``bayesord fit`` of the same shapes skips most of the compilation: in
``$BAYESORD_COMPILE_CACHE`` when set (``off`` disables it), else in
``$XDG_CACHE_HOME/bayesord/jax`` (``~/.cache/bayesord/jax``).  A cache directory that JAX
is already given (``JAX_COMPILATION_CACHE_DIR``) is left as it is.  The library itself
never turns the cache on.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

from . import _progress

__all__ = ["main"]


def compile_cache_dir(environ=None):
    """Where the command keeps compiled programs: a path, or None when the cache is off."""
    environ = os.environ if environ is None else environ
    chosen = environ.get("BAYESORD_COMPILE_CACHE", "").strip()
    if chosen.lower() == "off":
        return None
    if chosen:
        return Path(chosen).expanduser()
    base = environ.get("XDG_CACHE_HOME", "").strip() or Path("~/.cache").expanduser()
    return Path(base) / "bayesord" / "jax"


def _configure_jax():
    # Read when XLA's CPU backend starts (first computation), so setting it here is in time.
    # Multi-threaded Eigen kernels can deadlock batched solver loops with jax 0.10 on CPU.
    os.environ.setdefault("XLA_FLAGS", "--xla_cpu_multi_thread_eigen=false")
    import jax

    jax.config.update("jax_enable_x64", True)
    cache = compile_cache_dir()
    if cache is None or jax.config.jax_compilation_cache_dir is not None:
        return
    try:
        # Private to the user: JAX treats the cache's contents as trusted code.
        cache.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as err:
        print(f"bayesord: compiling without the on-disk cache ({err}); set BAYESORD_COMPILE_CACHE "
              "to a writable folder, or to 'off'", file=sys.stderr)
        return
    jax.config.update("jax_compilation_cache_dir", str(cache))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)


def _demo(args) -> int:
    import pandas as pd

    from . import metrics
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
    print(probit.summary().to_string(float_format=lambda v: f"{v:.3f}"))
    out = Path(args.out)
    _plot_demo(probit, X[test], y[test], out)
    print(f"\nwrote {out}")
    return 0


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


def _read_table(path, target):
    from .datasets import load_csv

    X, y, names = load_csv(path, target=target)
    return X, y, names


# --model name: estimator class (all in bayesord.estimators).
_MODELS = {
    "probit": "OrdinalProbit",
    "isbor": "ISBOR",
    "sbor": "SBOR",
    "npsvor": "NPSVOR",
    "cusum": "CuSumRank",
    "prank": "PRank",
    "swapped-pairs": "SwappedPairsSVM",
    "redsvm": "RedSVM",
    "tor": "TransductiveOrdinalRegression",
}
_BAYESIAN = ("probit", "isbor", "sbor")
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
    from . import estimators

    cls = getattr(estimators, _MODELS[args.model])
    known = cls().get_params()
    flag = f"--model {args.model}"
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
    if "random_state" in known:
        params.setdefault("random_state", 0)  # the command is reproducible by default
    if "verbose" in known:
        params.setdefault("verbose", int(args.progress))
    return cls(**params)


def _feature_frame(path, target, names):
    """Rows of a CSV file as a DataFrame of the named feature columns (target dropped)."""
    import pandas as pd

    frame = pd.read_csv(path)
    if target and target in frame.columns:
        frame = frame.drop(columns=[target])
    if names is not None:
        missing = [c for c in names if c not in frame.columns]
        if missing:
            raise ValueError(f"{path} lacks feature columns {missing}")
        frame = frame[list(names)]
    return frame


def _fit(args) -> int:
    import pandas as pd

    X, y, names = _read_table(args.data, args.target)
    classes = args.classes.split(",") if args.classes else None
    if classes is not None and np.asarray(y).dtype.kind in "iuf":
        classes = [type(np.asarray(y).flat[0].item())(c) for c in classes]
    if args.unlabeled is not None and args.model != "tor":
        raise ValueError(f"--unlabeled applies to --model tor, not {args.model}")
    model = _make_model(args)
    name = type(model).__name__
    if args.progress:
        _progress.show(f"fit: {name} on {X.shape[0]} rows x {X.shape[1]} features ...")
    t0 = time.perf_counter()
    frame = pd.DataFrame(X, columns=names)
    extra = {} if args.unlabeled is None else {"X_unlabeled": _feature_frame(args.unlabeled, args.target, names)}
    model.fit(frame, y, classes=classes, **extra)
    if args.progress:
        _progress.show(f"fit: {name} fitted in {time.perf_counter() - t0:.1f} s", final=True)
    model.save(args.out)
    if args.model in _BAYESIAN:
        print(model.summary().to_string(float_format=lambda v: f"{v:.4f}"))
        if args.model != "probit":
            print(f"\n{len(model.relevance_indices_)} relevance vectors of {X.shape[0]} rows; kernel "
                  f"{model.kernel}, width {model.theta_:g}; noise sigma {model.sigma_:.4f}")
        print(f"\nlog evidence {model.log_evidence_:.4f}; converged {model.converged_}; saved to {args.out}")
        return 0
    _print_fit(model, frame, y, args)
    return 0


def _print_fit(model, frame, y, args):
    """What `fit` prints for the models without a posterior summary."""
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
    print(f"iterations {np.asarray(model.n_iter_).tolist()}; converged {np.asarray(model.converged_).tolist()}; "
          f"saved to {args.out}")


def _predict(args) -> int:
    import pandas as pd

    from .estimators import OrdinalProbit, load_model

    model = load_model(args.model)
    frame = _feature_frame(args.data, args.target, getattr(model, "feature_names_in_", None))
    if (args.proba or args.uncertainty) and not hasattr(model, "predict_proba"):
        raise ValueError(f"{args.model} holds a {type(model).__name__}, which gives labels and scores, not "
                         "probabilities; drop --proba/--uncertainty")
    out = pd.DataFrame({"prediction": model.predict(frame)})
    if args.proba or args.uncertainty:
        proba = model.predict_proba(frame)
        for k, c in enumerate(model.classes_):
            out[f"P({c})"] = proba[:, k]
    if args.uncertainty:
        if isinstance(model, OrdinalProbit):
            sd = model.predict_proba_interval(frame)[2]
        else:
            sd = model.predict_proba_std(frame)
        for k, c in enumerate(model.classes_):
            out[f"sd P({c})"] = sd[:, k]
        mean, var = model.predict_latent(frame)
        out["latent mean"] = mean
        out["latent sd"] = np.sqrt(var)
    if args.out:
        out.to_csv(args.out, index=False)
        print(f"wrote {len(out)} predictions to {args.out}")
    else:
        print(out.to_csv(index=False), end="")
    return 0


def _bench(args) -> int:
    from ._bench import available, run_benchmarks

    if args.list:
        for name, path in available().items():
            print(f"{name}: {path}")
        return 0
    return run_benchmarks(args.names, quick=args.quick, data_dir=args.data_dir, out=Path(args.out),
                          docs=Path(args.docs) if args.docs else None, timeout=args.timeout)


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
                       description="Fit a model on a CSV file and save it (.npz). Options that name "
                                   "a constructor parameter apply to the models that have it; "
                                   "--param NAME=VALUE sets any other.")
    f.add_argument("data", help="CSV file with a header row; every column but the target is a "
                                "numeric feature")
    f.add_argument("--target", default="y", help="name of the label column (default: y)")
    f.add_argument("--out", required=True, help="where to save the model (.npz)")
    f.add_argument("--model", choices=list(_MODELS), default="probit",
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
                   help="probit: prior precision of w: the fixed value with --thresholds joint "
                        "(0 is maximum likelihood), the starting value with evidence (default: 1)")
    f.add_argument("--prior", choices=["gaussian", "ard"],
                   help="probit: one precision for all weights (default) or one per feature (ARD)")
    f.add_argument("--kernel",
                   help="models with a kernel: isbor/sbor rbf (default), linear, poly; cusum "
                        "linear (default), rbf, poly; swapped-pairs linear (default), rbf; "
                        "redsvm/tor linear (default), perceptron, rbf. RBF kernels compare raw "
                        "values: put the features on comparable scales")
    f.add_argument("--theta", help="isbor/sbor: kernel width, a positive number or 'auto' "
                                   "(default: chosen from 0.01, 0.1, 1, 10)")
    f.add_argument("--theta-selection", choices=["evidence", "loo", "cv"],
                   help="isbor/sbor: how --theta auto chooses: 5-fold CV on the held-out log "
                        "probability (default), the Laplace evidence (the paper's rule, about "
                        "4x faster), or PSIS-LOO")
    f.add_argument("--seed", type=int, help="random seed of the models that draw random numbers "
                                            "(default: 0)")
    f.add_argument("--link", choices=["probit", "logit"],
                   help="probit/isbor/sbor: latent noise distribution (default: probit)")
    f.add_argument("--classes", help="comma-separated labels from lowest to highest")
    f.add_argument("--unlabeled", metavar="CSV",
                   help="tor: CSV file of unlabeled rows with the same feature columns (a target "
                        "column there is ignored)")
    f.add_argument("--param", action="append", default=[], metavar="NAME=VALUE",
                   help="any other constructor parameter of the model, repeatable; VALUE is read "
                        "as a Python literal (10, 1e-3, (0.1, 1), None) or else as text, e.g. "
                        "--param C=10 --param loss=squared_hinge")
    _add_quiet(f)
    f.set_defaults(func=_fit)
    r = sub.add_parser("predict", help="predict with a saved model")
    r.add_argument("model", help="a model saved by `bayesord fit` or an estimator's save() (.npz)")
    r.add_argument("data", help="CSV file with the model's feature columns (by name)")
    r.add_argument("--target", default="y", help="column to drop if present")
    r.add_argument("--proba", action="store_true", help="also write class probabilities")
    r.add_argument("--uncertainty", action="store_true",
                   help="also write class probabilities, their posterior sd, and the latent "
                        "mean and sd")
    r.add_argument("--out", help="CSV file to write (default: stdout)")
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


def main(argv=None) -> int:
    """Entry point of the ``bayesord`` command."""
    args = _parser().parse_args(argv)
    _configure_jax()
    try:
        return args.func(args)
    except (ValueError, TypeError, FileNotFoundError) as err:
        _progress.finish()
        print(f"bayesord {args.command}: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
