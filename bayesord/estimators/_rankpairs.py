"""scikit-learn estimator for the swapped-pairs ranking SVM (numerics in ``bayesord._rankpairs``)."""

from __future__ import annotations

import numbers

import jax.numpy as jnp
import numpy as np
import scipy.sparse as sp

from .._rankpairs import (
    RankPairsConfig,
    RankPairsResult,
    fit_rankpairs_kernel,
    fit_rankpairs_linear,
    fit_rankpairs_nystroem,
    predict_rankpairs,
    sample_pairs,
    swapped_pairs_rate,
)
from .._basis import check_gamma, resolve_gamma
from .._sparse import as_rows
from .._status import check_status
from .._validation import check_sample_weight, float_dtype
from ._base import OrdinalEstimator, SnapshotSavableMixin, fit_key, fit_rng, fresh_fit, iteration_cap_hints
from ._proba_layer import ProbaLayerMixin

__all__ = ["SwappedPairsSVM"]

# The cutting-plane tolerance of the bootstrap refits at most (SwappedPairsSVM._draw_params).
_DRAW_EPSILON = 1e-5


class SwappedPairsSVM(ProbaLayerMixin, SnapshotSavableMixin, OrdinalEstimator):
    """Ranking SVM that minimises the share of swapped pairs (SVM-multi with Δ_SP).

    Learns a score f(x) whose order agrees with the order of the labels, by the 1-slack
    structural SVM of Díez, del Coz & Bahamonde (Eq. 9, Algorithms 1–2).  The training
    loss is the normalised pairwise hinge (1/N) Σ_{y_i > y_j} s_i s_j max(0, 1 − 2(f_i − f_j)),
    an upper bound on the swapped-pairs rate of Eq. (1).

    Args:
        C: trade-off between ½‖w‖² and the loss (> 0).  The loss is a fraction of pairs,
            so C = 100 here matches C = 1 of SVM-perf (which counts the loss in percent);
            10–1000 suits standardised features.
        kernel: ``"linear"`` (dense or CSR input) or ``"rbf"`` (Gaussian, dense input).
        gamma: Gaussian width g in exp(−g‖x − x'‖²) (``kernel="rbf"`` only): ``"scale"``
            (default) is ``1 / (n_features Var(X))`` on the training inputs, as
            scikit-learn's SVC; None is ``1 / n_features``; or a positive number.
        epsilon: cutting-plane tolerance ε on the loss, a share of pairs (> 0).
        pairs: ``"all"`` (every pair with different ranks, the method of the paper) or
            ``"herbrich"`` (Herbrich's pairwise SVM on ``n_partners`` random partners of a
            different rank per row: the Herbrich₅ baseline).
        n_partners: partners per row for ``pairs="herbrich"``.
        capacity: working-set slots (the trivial constraint included, at least 3).  When
            all are active, the active constraints are folded into one (their combination
            weighted by the dual solution, which keeps the solution) and the fit goes on.
            Each cutting-plane step solves a QP over all the slots, so its cost grows with
            the cube of ``capacity``: on ``tae`` (151 rows, 54 columns, standardised) 100 slots
            fold three times and reach the 400-slot fit's objective to 2e-4 relative, in
            0.22 s against 6.1 s (compiled, float64).
        max_iter: cap on cutting-plane iterations.
        counting: ``"auto"``, ``"classes"`` (O(n log n + n r)) or ``"bits"``
            (O(n log n ⌈log₂ r⌉)): how violated pairs are counted.
        kernel_approx: ``"auto"`` (exact up to ``exact_max_samples`` rows, else Nyström),
            ``"exact"`` or ``"nystroem"``.
        n_components: Nyström landmarks.
        exact_max_samples: row count above which ``"auto"`` switches to Nyström.
        classes: the labels in increasing order (needed for strings).
        random_state: seed for the Herbrich pair sample and the Nyström landmarks (None: 0; a
            ``RandomState`` or ``Generator`` is drawn from).
        calibration_cv: None (default), or a number of folds: ``fit`` then ends with
            ``calibrate(X, y, cv=calibration_cv)`` (folds seeded from ``random_state``), so
            the fitted model has conformal prediction sets, and a margin model
            ``predict_proba``, wherever it is fitted: in a ``Pipeline``, a grid search or
            ``cross_val_predict``.  Not with ``sample_weight`` (the copies are unweighted).

    Attributes:
        classes_: the ranks in order.
        coef_: weights (linear kernel only).
        dual_coef_, basis_: kernel expansion f(x) = k(x, basis_) · dual_coef_ (rbf only).
        thresholds_: cut-points on the score used by :meth:`predict`.
        n_iter_, converged_, status_, working_set_size_: how the solver ended.
        result_: the full :class:`bayesord._rankpairs.RankPairsResult`.

    Example:
        >>> import numpy as np
        >>> rng = np.random.default_rng(0)
        >>> X = rng.normal(size=(80, 3)); y = np.digitize(X @ [1.0, -1.0, 0.5], [-1, 0, 1])
        >>> model = SwappedPairsSVM(C=1.0).fit(X, y)
        >>> model.score(X, y) > 0.8
        True
    """

    _format = "bayesord.SwappedPairsSVM/2"
    _state_types = (RankPairsResult,)
    _accept_sparse = True
    _threshold_scores = True  # calibrate(score="distance")
    # A ranking SVM: every order relation of a continuous target is what it learns from
    # (notebooks/05_ranking.ipynb ranks 200 rows of 134 distinct prices).
    _ranks_any_target = True
    # Offsets cancel: the loss sees only differences of scores (f_i - f_j = w.(x_i - x_j)),
    # and the Gaussian kernel only differences of rows; scales still matter.
    _offset_sensitive = False
    # Exact sample weights (a pair weighs the product of its rows'): a weighted refit is a draw.
    _bootstrap_params = ("coef_", "thresholds_")

    def __init__(self, C=100.0, kernel="linear", gamma="scale", epsilon=1e-3, pairs="all", n_partners=5,
                 capacity=100, max_iter=1000, counting="auto", kernel_approx="auto", n_components=500,
                 exact_max_samples=5000, classes=None, random_state=None, calibration_cv=None):
        self.C = C
        self.kernel = kernel
        self.gamma = gamma
        self.epsilon = epsilon
        self.pairs = pairs
        self.n_partners = n_partners
        self.capacity = capacity
        self.max_iter = max_iter
        self.counting = counting
        self.kernel_approx = kernel_approx
        self.n_components = n_components
        self.exact_max_samples = exact_max_samples
        self.classes = classes
        self.random_state = random_state
        self.calibration_cv = calibration_cv

    def _check_params(self):
        check_gamma(self.gamma)
        for name in ("C", "epsilon"):
            v = getattr(self, name)
            if not isinstance(v, numbers.Real) or isinstance(v, bool) or not np.isfinite(v) or v <= 0:
                raise ValueError(f"{name} must be a positive finite number, got {v!r}")
        for name, allowed in (("kernel", ("linear", "rbf")), ("pairs", ("all", "herbrich")),
                              ("counting", ("auto", "classes", "bits")),
                              ("kernel_approx", ("auto", "exact", "nystroem"))):
            if getattr(self, name) not in allowed:
                raise ValueError(f"{name} must be one of {allowed}, got {getattr(self, name)!r}")
        for name, low in (("capacity", 3), ("max_iter", 1), ("n_partners", 1), ("n_components", 1),
                          ("exact_max_samples", 1)):
            v = getattr(self, name)
            if not isinstance(v, numbers.Integral) or isinstance(v, bool) or v < low:
                raise ValueError(f"{name} must be an integer >= {low}, got {v!r}")

    @fresh_fit
    def fit(self, X, y, sample_weight=None, classes=None):
        """Fit the ranking function.

        Args:
            X: (n, d) features, dense or scipy.sparse (linear kernel).
            y: (n,) ordered labels (ranks; ties share a rank).
            sample_weight: optional (n,) non-negative weights; pair (i, j) weighs their product.
            classes: the labels in increasing order, as the constructor's ``classes``
                (either may be given; if both are, they must agree).

        Raises:
            ValueError: bad parameters, fewer than two distinct ranks with positive weight
                (no pair to order), a declared class without training rows, and the input
                errors of the library.
            TypeError: sparse input with ``kernel="rbf"``.
        """
        self._check_params()
        X, codes, sw = self._validate_fit(X, y, sample_weight, classes)
        if sp.issparse(X) and self.kernel == "rbf":
            raise TypeError("kernel='rbf' needs a dense X; pass X.toarray() or use kernel='linear'")
        dtype = float_dtype()
        rs = fit_rng(self.random_state)
        pair_args = {}
        if self.pairs == "herbrich":
            pairs, pw = sample_pairs(codes, self.n_partners, np.random.default_rng(rs.randint(2**31)), sw)
            pair_args = dict(pairs=jnp.asarray(pairs), pair_weights=jnp.asarray(pw, dtype))
        Xj = as_rows(X, dtype)
        args = (jnp.asarray(codes), jnp.asarray(sw, dtype))
        approx = None if self.kernel == "linear" else self.kernel_approx
        if approx == "auto":
            approx = "exact" if X.shape[0] <= self.exact_max_samples else "nystroem"
        config = RankPairsConfig(n_ranks=len(self.classes_), capacity=self.capacity, max_iter=self.max_iter,
                                 counting=self.counting,
                                 n_components=min(self.n_components, X.shape[0]) if approx == "nystroem" else 0)
        if approx is None:
            res = fit_rankpairs_linear(Xj, *args, self.C, self.epsilon, config, **pair_args)
        elif approx == "exact":
            res = fit_rankpairs_kernel(Xj, *args, self.C, resolve_gamma(self.gamma, X), self.epsilon, config,
                                       **pair_args)
        else:
            key = fit_key(rs)
            res = fit_rankpairs_nystroem(Xj, *args, self.C, resolve_gamma(self.gamma, X), self.epsilon, key,
                                         config, **pair_args)
        check_status(res.status, "SwappedPairsSVM", iteration_cap_hints(self, X, res.status))
        self.result_ = res
        if self.kernel == "linear":
            self.coef_ = np.asarray(res.coef)
        else:
            self.dual_coef_ = np.asarray(res.coef)
            self.basis_ = np.asarray(res.basis)
        self.thresholds_ = np.asarray(res.thresholds)
        self.n_iter_ = int(res.n_iter)
        self.converged_ = bool(res.converged)
        self.working_set_size_ = int(res.working_set_size)
        return self

    def _draw_params(self):
        # At epsilon = 1e-3 a refit's coefficients lie up to 0.9 of the draws' sd from its
        # optimum (rms over 20 draws, 1,000 rows of the probit generator, float64; 0.28 on
        # winequality_red); at 1e-5, 0.12 and 0.02, at twice the cost (50 draws on those
        # 1,000 rows 5.4 -> 10.3 s, on tae's 151 10.7 -> 22.4 s).
        return {"epsilon": min(float(self.epsilon), _DRAW_EPSILON)}

    def decision_function(self, X):
        """Ranking scores f(x) (n,): a larger score means a higher rank."""
        return np.asarray(self._predict(X).scores)

    def _predict(self, X):
        X = self._validate_predict(X)
        dtype = self.result_.coef.dtype
        Xj = as_rows(X, dtype)
        return predict_rankpairs(self.result_, Xj)

    def predict(self, X):
        """Ranks by cutting the score at ``thresholds_``.

        The thresholds are fitted on the training scores so that the training rows fall in
        the ranks in the same (weighted) proportions as their labels: the k-th cut-point is
        midway between the training scores around the cumulative share of ranks ≤ k.
        """
        return self._decode(np.asarray(self._predict(X).labels))

    def score(self, X, y, sample_weight=None):
        """1 − the swapped-pairs rate of Eq. (1) (ties in the score count as swapped)."""
        f = self.decision_function(X)
        codes = self._encode_y(y, f.shape[0])
        sw = check_sample_weight(sample_weight, f.shape[0])
        return 1.0 - float(swapped_pairs_rate(jnp.asarray(f), jnp.asarray(codes), sw, len(self.classes_)))
