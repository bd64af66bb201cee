"""Ordinal mixed models: ``OrdinalMixed`` against R's ``ordinal::clmm`` and a NUTS fit.

Part 1, agreement (needs ``../shared/datasets``): the two grouped data sets with both links,
``rating ~ temp + contact + (1 | judge)`` on ``wine`` and ``SURENESS ~ PROD + (1 | RESP)`` on
``soup``, the same with a random slope (``(1 + temp | judge)``, ``(1 + PROD | RESP)``), and
``soup`` with respondents crossed with products (``(1 | RESP) + (1 | PRODID)``, and with
the product effect varying by respondent, ``(1 + PROD | RESP) + (1 | PRODID)``),
fitted by ``OrdinalMixed.from_formula`` and by ``clmm`` (Laplace, default settings)
through ``Rscript`` in the same run: largest difference in the estimates (fixed effects,
thresholds, group sds and correlation), in the fixed effects' standard errors, and in the
log-likelihood.

Part 2, speed: a random-intercept probit with ``--rows`` rows (10^5), ``--groups`` groups
(1,000) and ``--features`` covariates (10), simulated from the model.  bayesord's first fit in
this process (compilation included, the on-disk cache off) and its compiled fit (median of 3);
``clmm`` on the same rows (``system.time`` around the fit inside R, so R's start-up and CSV
reading are excluded; a fit that has not finished after ``--r-timeout`` seconds, 900 by
default, is stopped and the ratio reported as at least that time over bayesord's fit); and
numpyro's NUTS on the same model (one chain, ``--warmup`` and
``--samples`` iterations; weak priors: N(0, 10^2) coefficients and first threshold, log-gaps
N(0, 2^2), group sd half-normal with scale 5), whose posterior mean of the group sd is
compared with bayesord's estimate.

Run: ``python benchmarks/mixed_bench.py`` (``--parts agreement`` or ``--parts speed`` runs one
part; ``--no-r`` or ``--no-nuts`` skip a peer; R with the
``ordinal`` package: ``apt-get install r-base-core r-cran-ordinal``; numpyro:
``pip install numpyro``).  Prints tables and the ratios, writes
``benchmarks/results/mixed.json``.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import machine, print_table, write_json  # noqa: E402

import jax  # noqa: E402

jax.config.update("jax_enable_x64", True)

from bayesord import OrdinalMixed  # noqa: E402
from bayesord.datasets import _default_roots  # noqa: E402

SETS = [("wine", "rating ~ temp + contact + (1 | judge)", "rating", "judge"),
        ("soup", "SURENESS ~ PROD + (1 | RESP)", "SURENESS", "RESP"),
        ("wine", "rating ~ temp + contact + (1 + temp | judge)", "rating", "judge"),
        ("soup", "SURENESS ~ PROD + (1 + PROD | RESP)", "SURENESS", "RESP"),
        ("soup", "SURENESS ~ PROD + (1 | RESP) + (1 | PRODID)", "SURENESS", "RESP,PRODID"),
        ("soup", "SURENESS ~ PROD + (1 + PROD | RESP) + (1 | PRODID)", "SURENESS", "RESP,PRODID")]

R_FIT = r"""
suppressMessages(library(ordinal))
args <- commandArgs(trailingOnly = TRUE)
d <- read.csv(args[1])
d[[args[3]]] <- factor(d[[args[3]]], ordered = TRUE)
for (g in strsplit(args[4], ",")[[1]]) d[[g]] <- factor(d[[g]])
for (col in names(d)) if (is.character(d[[col]])) d[[col]] <- factor(d[[col]])
f <- as.formula(args[2])
secs <- system.time(m <- clmm(f, data = d, link = args[5]))[["elapsed"]]
k <- length(m$alpha)
cat("seconds", secs, "\n")
cat("thresholds", format(m$alpha, digits = 12), "\n")
cat("coef", format(m$beta, digits = 12), "\n")
vcs <- VarCorr(m)
cat("group_sd", format(unlist(lapply(vcs, function(v) attr(v, "stddev"))), digits = 12), "\n")
# Each factor's correlations below the diagonal, row by row (bayesord's order).
crs <- unlist(lapply(vcs, function(v) {
  cr <- attr(v, "correlation")
  if (is.matrix(cr)) t(cr)[upper.tri(cr)] else NULL
}))
cat("group_corr", if (length(crs) == 0) "" else format(crs, digits = 12), "\n")
cat("loglik", format(as.numeric(logLik(m)), digits = 12), "\n")
se <- sqrt(diag(vcov(m)))
cat("thresholds_se", format(se[1:k], digits = 12), "\n")
cat("coef_se", format(se[(k + 1):(k + length(m$beta))], digits = 12), "\n")
"""


def run_clmm(frame, formula, response, group, link, workdir, timeout=None):
    """Fit ``clmm`` in R on ``frame``; dict of its estimates and fit seconds, or None when it
    has not finished after ``timeout`` seconds."""
    csv = Path(workdir) / "data.csv"
    script = Path(workdir) / "fit.R"
    frame.to_csv(csv, index=False)
    script.write_text(R_FIT)
    try:
        out = subprocess.run(["Rscript", str(script), str(csv), formula, response, group, link],
                             capture_output=True, text=True, check=True, timeout=timeout).stdout
    except subprocess.TimeoutExpired:
        return None
    values = {}
    for line in out.splitlines():
        key, *rest = line.split()
        values[key] = np.array([float(v) for v in rest])
    values["seconds"] = float(values["seconds"][0])
    values["loglik"] = float(values["loglik"][0])
    return values


def ours(model):
    se = np.sqrt(np.diag(model.cov_))
    d, k1 = len(model.coef_), len(model.thresholds_)
    sd = np.asarray(model.result_.group_sd)
    terms = model.group_terms_ if isinstance(model.group_terms_, dict) else {"": model.group_terms_}
    corr, at = [], 0  # each factor's correlations (the factors' blocks of group_cov_)
    for names in terms.values():
        rows, cols = np.tril_indices(len(names), -1)
        corr += list(np.asarray(model.group_cov_)[rows + at, cols + at] / (sd[rows + at] * sd[cols + at]))
        at += len(names)
    return {"coef": model.coef_, "thresholds": model.thresholds_, "group_sd": sd, "group_corr": np.asarray(corr),
            "loglik": model.loglik_, "coef_se": se[:d], "thresholds_se": se[d:d + k1]}


def differences(a, b):
    est = max(np.max(np.abs(a["coef"] - b["coef"])), np.max(np.abs(a["thresholds"] - b["thresholds"])),
              np.max(np.abs(a["group_sd"] - b["group_sd"])),
              np.max(np.abs(a["group_corr"] - b["group_corr"]), initial=0.0))
    se = max(np.max(np.abs(a["coef_se"] - b["coef_se"])), np.max(np.abs(a["thresholds_se"] - b["thresholds_se"])))
    return float(est), float(se), float(abs(a["loglik"] - b["loglik"]))


def agreement(use_r, workdir):
    roots = [r for r in _default_roots() if (r / "wine.csv.gz").exists()]
    if not roots:
        print("part 1 skipped: no ../shared/datasets (wine.csv.gz, soup.csv.gz)")
        return []
    rows = []
    for name, formula, response, group in SETS:
        frame = pd.read_csv(roots[0] / f"{name}.csv.gz")
        for link in ("logit", "probit"):
            t0 = time.perf_counter()
            model = OrdinalMixed.from_formula(formula, frame, link=link)
            first = time.perf_counter() - t0
            t0 = time.perf_counter()
            model = OrdinalMixed.from_formula(formula, frame, link=link)
            again = time.perf_counter() - t0
            row = {"data": name, "group_terms": formula[formula.index("("):], "link": link, "n": len(frame),
                   "groups": "+".join(str(frame[g].nunique()) for g in group.split(",")),
                   "first_fit_s": first, "fit_s": again,
                   "loglik": model.loglik_, "group_sd": float(model.result_.group_sd[0])}
            if use_r:
                ref = run_clmm(frame, formula, response, group, link, workdir)
                est, se, ll = differences(ours(model), ref)
                row.update(clmm_s=ref["seconds"], max_abs_diff_estimate=est, max_abs_diff_se=se,
                           abs_diff_loglik=ll, clmm_loglik=ref["loglik"])
            rows.append(row)
    print("\nPart 1: agreement with clmm (Laplace), the shared grouped data sets")
    print_table(rows, ["data", "group_terms", "link", "n", "groups", "loglik", "group_sd", "max_abs_diff_estimate",
                       "max_abs_diff_se", "abs_diff_loglik", "first_fit_s", "fit_s", "clmm_s"])
    return rows


def simulate(n, q, d, seed=0):
    rng = np.random.default_rng(seed)
    g = rng.integers(0, q, size=n)
    X = rng.normal(size=(n, d))
    beta = rng.normal(scale=0.5, size=d)
    u = 0.7 * rng.normal(size=q)
    f = X @ beta + u[g] + rng.normal(size=n)
    y = np.digitize(f, np.quantile(f, [0.2, 0.45, 0.7, 0.9]))
    return X, y, g, 0.7


def nuts(X, y, g, q, warmup, samples):
    """NUTS on the same random-intercept probit (non-centred group effects)."""
    import numpyro
    import numpyro.distributions as dist
    from numpyro.infer import MCMC, NUTS

    from bayesord._likelihood import ordinal_loglik

    n_thr = int(y.max())

    def model(X, y, g):
        beta = numpyro.sample("beta", dist.Normal(0.0, 10.0).expand([X.shape[1]]))
        first = numpyro.sample("first", dist.Normal(0.0, 10.0))
        log_gaps = numpyro.sample("log_gaps", dist.Normal(0.0, 2.0).expand([n_thr - 1]))
        b = jax.numpy.concatenate([first[None], first + jax.numpy.cumsum(jax.numpy.exp(log_gaps))])
        tau = numpyro.sample("tau", dist.HalfNormal(5.0))
        v = numpyro.sample("v", dist.Normal(0.0, 1.0).expand([q]))
        numpyro.factor("loglik", ordinal_loglik(X @ beta + tau * v[g], y, b, 1.0, "probit"))

    mcmc = MCMC(NUTS(model), num_warmup=warmup, num_samples=samples, progress_bar=False)
    t0 = time.perf_counter()
    mcmc.run(jax.random.key(0), X, y, g)
    tau = np.asarray(mcmc.get_samples()["tau"])
    return time.perf_counter() - t0, float(tau.mean()), float(tau.std())


def scale(args, use_r, use_nuts, workdir):
    X, y, g, tau = simulate(args.rows, args.groups, args.features)
    t0 = time.perf_counter()
    OrdinalMixed().fit(X, y, g)
    first = time.perf_counter() - t0
    times = []
    for _ in range(3):
        t0 = time.perf_counter()
        model = OrdinalMixed().fit(X, y, g)
        times.append(time.perf_counter() - t0)
    fit_s = float(np.median(times))
    row = {"n": args.rows, "groups": args.groups, "features": args.features, "true_sd": tau,
           "group_sd": model.group_sd_, "first_fit_s": first, "compile_s": first - fit_s, "fit_s": fit_s}
    print(f"\nbayesord: first fit {first:.2f} s, compiled fit {fit_s:.3f} s", flush=True)
    if use_r:
        frame = pd.DataFrame(X, columns=[f"x{j}" for j in range(X.shape[1])]).assign(y=y, g=g)
        formula = "y ~ " + " + ".join(f"x{j}" for j in range(X.shape[1])) + " + (1 | g)"
        t0 = time.perf_counter()
        ref = run_clmm(frame, formula, "y", "g", "probit", workdir, timeout=args.r_timeout)
        if ref is None:  # not finished: the ratio is at least the time it was given
            waited = time.perf_counter() - t0
            print(f"clmm had not finished after {waited:.0f} s (R start-up and CSV reading included)")
            row.update(clmm_s=None, clmm_stopped_after_s=waited, clmm_over_fit_at_least=waited / fit_s)
        else:
            est, se, ll = differences(ours(model), ref)
            row.update(clmm_s=ref["seconds"], clmm_over_fit=ref["seconds"] / fit_s, max_abs_diff_estimate=est,
                       abs_diff_loglik=ll)
    if use_nuts:
        secs, tau_mean, tau_sd = nuts(X, y, g, args.groups, args.warmup, args.samples)
        row.update(nuts_s=secs, nuts_over_fit=secs / fit_s, nuts_group_sd=tau_mean, nuts_group_sd_sd=tau_sd,
                   group_sd_rel_diff=abs(tau_mean - model.group_sd_) / model.group_sd_)
    print(f"\nPart 2: random-intercept probit, {args.rows} rows, {args.groups} groups, "
          f"{args.features} covariates")
    print_table([row], ["group_sd", "first_fit_s", "compile_s", "fit_s", "clmm_s", "clmm_over_fit",
                        "clmm_stopped_after_s", "clmm_over_fit_at_least", "max_abs_diff_estimate",
                        "abs_diff_loglik"])
    if use_nuts:
        print_table([row], ["nuts_s", "nuts_over_fit", "nuts_group_sd", "nuts_group_sd_sd",
                            "group_sd_rel_diff"])
    return row


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--groups", type=int, default=1000)
    parser.add_argument("--features", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=500)
    parser.add_argument("--samples", type=int, default=500)
    parser.add_argument("--r-timeout", type=float, default=900.0,
                        help="seconds clmm gets on part 2's data; if it has not finished, the ratio is "
                             "reported as at least that time over bayesord's fit")
    parser.add_argument("--no-r", action="store_true")
    parser.add_argument("--no-nuts", action="store_true")
    parser.add_argument("--parts", default="agreement,speed",
                        help="comma-separated parts to run: agreement (part 1), speed (part 2)")
    args = parser.parse_args(argv)
    parts = set(args.parts.split(","))
    if not parts or not parts <= {"agreement", "speed"}:
        parser.error(f"--parts takes agreement and/or speed, got {args.parts!r}")
    use_r = not args.no_r and shutil.which("Rscript") is not None
    if not args.no_r and not use_r:
        print("Rscript not found: the clmm columns are left out (apt-get install r-base-core r-cran-ordinal)")
    use_nuts = not args.no_nuts
    if use_nuts:
        try:
            import numpyro  # noqa: F401
        except ImportError:
            print("numpyro not installed: the NUTS columns are left out (pip install numpyro)")
            use_nuts = False
    with tempfile.TemporaryDirectory() as workdir:
        rows = agreement(use_r, workdir) if "agreement" in parts else []
        big = scale(args, use_r, use_nuts, workdir) if "speed" in parts else None
    write_json("mixed", {"machine": machine(), "agreement": rows, "scale": big, "args": vars(args)})


if __name__ == "__main__":
    main()
