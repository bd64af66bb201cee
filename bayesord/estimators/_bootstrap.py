"""A bootstrap posterior for the margin models: the weighted-likelihood (Bayesian) bootstrap.

Rubin's Bayesian bootstrap (1981), as the weighted likelihood bootstrap of Newton &
Raftery (1994, J. R. Stat. Soc. B 56, 3-48): draw row weights ``n * Dirichlet(1, ..., 1)``
(mean 1) and refit the model with them as sample weights; the fitted parameters over many
draws approximate a posterior of the parameters under a non-informative prior on the data
distribution.  Each refit has the shape of the first fit, so the draws compile once.

Only solvers whose sample weights are exact (a weight of 2 is the row given twice) get it:
NPSVOR (a weight multiplies the row's C), RED-SVM and TOR (the labeled rows' C), and the
swapped-pairs SVM (a pair weighs the product of its rows' weights).  The perceptrons scale
a row's step by its weight, which is not the same as repeating the row, so a weighted refit
is not a bootstrap draw of their fit.  Draws are kept for the linear kernel, whose
coefficients are per feature.
"""

from __future__ import annotations

import numpy as np

from .._status import warn_user, warned_once
from ._base import check_is_fitted, clone, internal_fits, threshold_names
from ._uncertainty import UncertaintyMixin

__all__ = ["BootstrapMixin"]

# Refits fitted side by side in one call at most.  NPSVOR's 200 draws on 1,000 rows of
# winequality_red (compiled, float64) took 47 s in one batch, 34 s in batches of 50, 28 s
# of 25 and 31 s of 10: a batch's problems step together until the slowest has converged.
_DRAW_BATCH = 25


class BootstrapMixin(UncertaintyMixin):
    """``bootstrap``, ``summary`` and ``to_inference_data`` from bootstrap draws."""

    # Fitted attributes drawn by ``bootstrap``; empty for a model that has no bootstrap,
    # and then ``_no_bootstrap`` says why.
    _bootstrap_params = ()
    _no_bootstrap = ("it scales a row's update by its weight, which is not the same as "
                     "repeating the row, so a weighted refit is not a draw")

    def _check_bootstrap(self):
        check_is_fitted(self, "classes_")
        if not self._bootstrap_params:
            raise ValueError(f"{type(self).__name__} has no bootstrap: {self._no_bootstrap} "
                             "(calibrate() gives it probabilities and prediction sets)")

    def _draws(self, what):
        self._check_bootstrap()
        draws = getattr(self, "bootstrap_draws_", None)
        if draws is None:
            raise ValueError(f"{type(self).__name__}.{what} reads bootstrap draws: call "
                             "bootstrap(X_train, y_train) first")
        return draws

    def _weighted_refits(self, X, labels, weights):
        """Copies of this estimator, one fitted per row of ``weights`` (m, n), side by side
        where the model can (:meth:`_batched_copies`), else one after another.  Their
        warnings (an iteration cap, say) are shown once each, with how many refits gave them
        (:func:`~bayesord._status.warned_once`).  (Threads did not help: 12 RED-SVM draws on
        1,000 rows took 9.7 s on two threads against 9.4 s on one.)  Side by side, they go
        :data:`_DRAW_BATCH` at a time: a batch runs until its slowest problem has converged."""
        template = clone(self).set_params(**self._draw_params())
        with warned_once(f"{weights.shape[0]} weighted refits"), internal_fits():
            if self._batched_copies():
                return [model for start in range(0, weights.shape[0], _DRAW_BATCH)
                        for model in template._fit_copies(X, labels, weights[start:start + _DRAW_BATCH],
                                                          self.classes_)]
            return [clone(template).fit(X, labels, sample_weight=w, classes=self.classes_) for w in weights]

    def _draw_params(self):
        """Parameters a bootstrap refit changes from this estimator's (none by default): a
        solver stopped far from its optimum adds its own error to the spread of the draws."""
        return {}

    def bootstrap(self, X, y, n_draws=200, random_state=None):
        """Draw the fitted parameters by the weighted-likelihood (Bayesian) bootstrap.

        Refits the estimator ``n_draws`` times on ``X, y`` (the training rows) with row
        weights ``n * Dirichlet(1, ..., 1)``; keeps ``coef_`` and the intercepts or
        thresholds of every refit in ``bootstrap_draws_``, which :meth:`summary` and
        :meth:`to_inference_data` read.  The point estimates stay those of the fit.  Refits
        solve further than the fit where its default tolerance leaves an error about as
        large as the spread of the draws: NPSVOR to ``tol=min(tol, 1e-3)`` with ten times
        ``max_iter``, the swapped-pairs SVM to ``epsilon=min(epsilon, 1e-5)``; then the fit's
        own problem is solved that way too, and a warning says how many of the fit's
        parameters lie more than one draws' sd from it (``summary()``'s ``estimate`` column is
        the fit's).  A model
        whose C was chosen by cross-validation (NPSVOR's ``Cs``) is refitted at that C
        (``C_``): the draws are conditional on it.

        Args:
            X: (n, d) training features, as for ``fit``.
            y: (n,) training labels.
            n_draws: number of refits, at least 2.
            random_state: seed of the weights (an int, a ``Generator`` or a
                ``RandomState``); None reads the estimator's ``random_state``, whose None is
                the seed 0, so the draws repeat, as the fit does.

        Returns:
            self.

        Raises:
            ValueError: the model has no bootstrap (the perceptrons, whose sample weights
                are not exact, and TOR), its kernel is not linear, or ``n_draws`` < 2.

        Warns:
            ConvergenceWarning: once for the refits that stopped at their iteration cap,
                with how many did.
        """
        self._check_bootstrap()
        name = type(self).__name__
        if getattr(self, "kernel", "linear") != "linear":
            raise ValueError(f"the bootstrap keeps per-feature coefficients, so it needs kernel='linear' "
                             f"(this {name} has kernel={self.kernel!r})")
        if isinstance(n_draws, bool) or not isinstance(n_draws, (int, np.integer)) or n_draws < 2:
            raise ValueError(f"n_draws must be an integer >= 2, got {n_draws!r}")
        codes = self._encode_y(y, np.shape(X)[0])
        labels = np.asarray(self.classes_)[codes]
        X = self._copy_rows(X)  # a formula's coding and the input transform, as the fit's
        n = codes.shape[0]
        source = getattr(self, "random_state", None) if random_state is None else random_state
        rng = source if isinstance(source, np.random.RandomState) else np.random.default_rng(
            0 if source is None else source)
        weights = n * rng.dirichlet(np.ones(n), size=int(n_draws))
        tighter = {k: v for k, v in self._draw_params().items() if v != getattr(self, k)}
        if tighter:  # the fit's own problem, solved as the draws are
            weights = np.vstack([weights, np.ones(n)])
        models = self._weighted_refits(X, labels, weights)
        unit = models.pop() if tighter else None
        draws = {p: [np.asarray(getattr(model, p), dtype=np.float64) for model in models]
                 for p in self._bootstrap_params}
        self.bootstrap_draws_ = {p: np.stack(v) for p, v in draws.items()}
        if unit is not None:
            self._warn_if_estimate_off_draws(unit, tighter)
        return self

    def _warn_if_estimate_off_draws(self, unit, tighter):
        """Warn when the fit's parameters lie more than one draws' sd from ``unit``, the same
        problem solved at the refits' tighter settings ``tighter``: then :meth:`summary`'s
        ``estimate`` column (the fit's) can lie outside the draws' own interval."""
        off = total = 0
        for p, d in self.bootstrap_draws_.items():
            sd = d.std(axis=0).ravel()
            gap = np.abs(np.asarray(getattr(self, p), np.float64) - np.asarray(getattr(unit, p), np.float64)).ravel()
            off += int(np.count_nonzero(gap > np.maximum(sd, 1e-9)))
            total += gap.size
        if off:
            settings = ", ".join(f"{k}={v!r}" for k, v in tighter.items())
            now = ", ".join(f"{k}={getattr(self, k)!r}" for k in tighter)
            warn_user(f"{type(self).__name__}.bootstrap: the fit stopped at {now}, where {off} of its {total} "
                      f"parameters lie more than one draws' sd from the same problem solved as the draws are "
                      f"({settings}); summary()'s estimate column is the fit's and can lie outside the draws' "
                      f"interval.  Fit with {settings} for an estimate as precise as the draws")

    def _draw_names(self):
        """Row names of each drawn parameter's entries, in ``np.ravel`` order."""
        features = getattr(self, "feature_names_in_", None)
        features = [str(f) for f in features] if features is not None else [
            f"x{j}" for j in range(int(self.n_features_in_))]
        classes = [str(c) for c in self.classes_]
        names = {}
        for p, draws in self.bootstrap_draws_.items():
            shape = draws.shape[1:]
            if p == "thresholds_":
                names[p] = threshold_names(self.classes_)
            elif p == "coef_" and len(shape) == 2:
                rows = classes[: shape[0]] if shape[0] <= len(classes) else [str(k) for k in range(shape[0])]
                names[p] = [f"{f} [{c}]" for c in rows for f in features]
            elif p == "coef_":
                names[p] = features
            elif len(shape) == 1:
                names[p] = [f"{p.rstrip('_')} [{c}]" for c in classes[: shape[0]]]
            else:
                names[p] = [p.rstrip("_")]
        return names

    def summary(self, level=0.95):
        """The fitted parameters with their bootstrap sd and central ``level`` interval.

        Columns as the Bayesian models' ``summary()``: ``mean`` and ``sd`` over the draws
        and their percentile interval, then ``estimate``, the fit's own value.

        Returns:
            pandas DataFrame indexed by parameter name.

        Raises:
            ValueError: ``bootstrap`` has not been run, or ``level`` outside (0, 1).
        """
        import pandas as pd

        draws = self._draws("summary")
        if not 0 < level < 1:
            raise ValueError(f"level must lie strictly between 0 and 1, got {level!r}")
        names = self._draw_names()
        lo, hi = f"{100 * (1 - level) / 2:g}%", f"{100 * (1 + level) / 2:g}%"
        frames = []
        for p, d in draws.items():
            flat = d.reshape(d.shape[0], -1)
            q = np.quantile(flat, [(1 - level) / 2, (1 + level) / 2], axis=0)
            frames.append(pd.DataFrame({"mean": flat.mean(axis=0), "sd": flat.std(axis=0, ddof=1),
                                        lo: q[0], hi: q[1], "estimate": np.ravel(getattr(self, p))},
                                       index=names[p]))
        return pd.concat(frames)

    def to_inference_data(self):
        """The bootstrap draws as an ArviZ ``InferenceData`` (one chain of ``n_draws``).

        The draws are independent, not a Markov chain: read them with
        ``az.summary(idata, kind="stats")`` (means, sds, intervals).  ArviZ's convergence
        diagnostics do not apply, and warn (``RuntimeWarning``) on a parameter that is the
        same in every draw.

        Raises:
            ValueError: ``bootstrap`` has not been run.
        """
        import arviz as az

        draws = self._draws("to_inference_data")
        names = self._draw_names()
        posterior, dims, coords = {}, {}, {}
        for p, d in draws.items():
            var = p.rstrip("_")
            posterior[var] = d.reshape(1, d.shape[0], -1)
            dims[var] = [f"{var}_dim"]
            coords[f"{var}_dim"] = names[p]
        return az.from_dict(posterior=posterior, dims=dims, coords=coords)

    # ------------------------------------------------------------ persistence
    def _uncertainty_state(self):
        arrays, meta = super()._uncertainty_state()
        draws = getattr(self, "bootstrap_draws_", None)
        if draws is None:
            return arrays, meta
        return (dict(arrays, **{f"bootstrap.{p}": d for p, d in draws.items()}),
                dict(meta, bootstrap=list(draws)))

    def _restore_uncertainty(self, arrays, meta):
        super()._restore_uncertainty(arrays, meta)
        if "bootstrap" not in meta:
            return
        draws = {p: arrays[f"bootstrap.{p}"] for p in meta["bootstrap"]}
        for p, d in draws.items():
            if p not in self._bootstrap_params or d.shape[1:] != np.shape(getattr(self, p)):
                raise ValueError(f"bootstrap.{p} has shape {d.shape}, which does not match the model's {p}")
        self.bootstrap_draws_ = draws
