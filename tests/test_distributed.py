"""Fits with rows or problems sharded over devices (bayesord.distributed, bayesord._mesh).

These need several devices: run them as CI does, with four CPU devices in each process,
``JAX_NUM_CPU_DEVICES=4 python -m pytest -m multidevice``.  Without them they skip.
References are the same fits on one device (to rounding: only the order of the sums
changes), the compiled programs' own text (which collectives they run, on what sizes) and
``memory_analysis`` (bytes per device).
"""

from __future__ import annotations

import dataclasses
import json
import os
import socket
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp
from jax.sharding import AxisType, NamedSharding, PartitionSpec

from bayesord import OrdinalProbit, _progress, distributed, load_model
from bayesord._sparse import to_padded_rows
from bayesord.datasets import kfold_masks
from bayesord._isbor import ISBORConfig, fit_isbor, fit_sbor
from bayesord._npsvor import NPSVORConfig, fit_npsvor
from bayesord._probit import _PILOT_MIN_ROWS, _SCALE_ROWS, ProbitConfig, fit_probit
from bayesord._redsvm import RedSVMConfig, fit_redsvm

DEVICES = 4
pytestmark = [
    pytest.mark.multidevice,
    pytest.mark.skipif(jax.device_count() < DEVICES,
                       reason=f"needs {DEVICES} devices: run with JAX_NUM_CPU_DEVICES={DEVICES}"),
]


def _raw_data(n, d=6, seed=0):
    """Columns as they arrive: offsets up to 1e3, scales from 1e-2 to 1e2; four classes."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d)) * np.geomspace(1e-2, 1e2, d) + np.linspace(-50, 1e3, d)
    z = (X - X.mean(0)) / X.std(0)
    y = np.digitize(z @ rng.normal(size=d) + rng.normal(size=n), [-1.0, 0.0, 1.0]).astype(np.int32)
    return X, y


def _mesh(kind, devices=DEVICES):
    types = (AxisType.Explicit,) if kind == "explicit" else (AxisType.Auto,)
    return jax.make_mesh((devices,), ("rows",), axis_types=types, devices=jax.devices()[:devices])


def _place(mesh, *arrays):
    return [jax.device_put(a, NamedSharding(mesh, PartitionSpec("rows", *([None] * (a.ndim - 1)))))
            for a in arrays]


# Explicit axes run the automatic program (bayesord._mesh): one mode checks that path (the
# joint fit on automatic axes runs in the communication and batch tests).
@pytest.mark.parametrize("mode, kind", [("evidence", "auto"), ("joint", "explicit")])
def test_row_sharded_fit_equals_the_single_device_fit(mode, kind):
    """Same arrays (1,004 rows: the last 6 weight zero), one device against four."""
    X, y = _raw_data(1004)
    w = np.concatenate([np.ones(998), np.zeros(6)])
    config = ProbitConfig(thresholds=mode)
    one = fit_probit(X, y, w, 1.0, 1e-10, config=config, n_classes=4)
    mesh = _mesh(kind)
    with jax.set_mesh(mesh):
        many = fit_probit(*_place(mesh, X, y, w), 1.0, 1e-10, config=config, n_classes=4)
    assert int(many.status) == 0 and int(many.n_iter) == int(one.n_iter)
    for field in ("coef", "coef_cov", "thresholds", "thresholds_cov", "cross_cov", "alpha"):
        np.testing.assert_allclose(getattr(many, field), getattr(one, field), rtol=1e-9, atol=1e-12,
                                   err_msg=field)
    # The rows of weight zero change nothing: the fit of the 998 rows alone.
    alone = fit_probit(X[:998], y[:998], w[:998], 1.0, 1e-10, config=config, n_classes=4)
    np.testing.assert_allclose(many.coef, alone.coef, rtol=1e-6)


def test_estimator_over_devices_equals_ordinal_probit_and_round_trips(tmp_path):
    """Raw DataFrame columns, text labels, 1,001 rows (padded to 1,004 over 4 devices)."""
    X, y = _raw_data(1001, seed=1)
    frame = pd.DataFrame(X, columns=[f"x{j}" for j in range(X.shape[1])])
    labels = np.array(["low", "mid", "high", "top"])[y]
    classes = ["low", "mid", "high", "top"]
    ref = OrdinalProbit(classes=classes).fit(frame, labels)
    model = distributed.fit_ordinal_probit(frame, labels, classes=classes)
    assert model.converged_ and list(model.feature_names_in_) == list(frame.columns)
    # Both stop within the evidence search's tolerance (the sums run in another order).
    np.testing.assert_allclose(model.coef_, ref.coef_, rtol=1e-6)
    np.testing.assert_allclose(model.predict_proba(frame), ref.predict_proba(frame), atol=1e-7)
    lo, hi, _ = model.predict_proba_interval(frame[:50])
    lo_ref, hi_ref, _ = ref.predict_proba_interval(frame[:50])
    np.testing.assert_allclose(hi - lo, hi_ref - lo_ref, atol=1e-6)
    model.save(tmp_path / "m.npz")
    again = load_model(tmp_path / "m.npz")
    np.testing.assert_array_equal(again.predict(frame), model.predict(frame))


def test_communication_is_a_few_d_squared_sums_and_memory_falls_with_devices():
    """In its loops the compiled fit exchanges all-reduces of O(d^2) numbers, never O(n) (an
    all-gather of rows would show here), and its input bytes per device fall as 1/devices.
    At this n the fit starts from a pilot fit on a strided subsample of ``_SCALE_ROWS``
    rows, the one thing collected outside the loops: at most ``_SCALE_ROWS (d + 2)``
    numbers once, whatever n is."""
    n, d, k = 40960, 6, 4
    X, y = _raw_data(n, d)
    w = np.ones(n)
    args = {}
    for devices in (2, 4):
        mesh = _mesh("auto", devices)
        placed = _place(mesh, X, y, w)
        # The joint fit: the Newton step that the evidence fit repeats (evidence adds its
        # gradient's all-reduce of two d x d blocks, measured in benchmarks/scaleout_bench.py).
        compiled = fit_probit.lower(*placed, 1.0, 1e-10, config=ProbitConfig(thresholds="joint"),
                                    n_classes=k).compile()
        args[devices] = compiled.memory_analysis().argument_size_in_bytes
        found = distributed.collectives(compiled)
        in_loops = [(op, size) for op, size, in_loop in found if in_loop]
        assert in_loops and all(op == "all-reduce" and size <= 2 * 8 * (d + k) ** 2
                                for op, size in in_loops), found
        # Once per fit: the pilot's subsample (an all-gather or, with jax 0.8, all-reduces).
        once = sum(size for _, size, in_loop in found if not in_loop)
        assert once <= 8 * _SCALE_ROWS * (d + 2), found
    full = X.nbytes + y.nbytes + w.nbytes
    assert n >= _PILOT_MIN_ROWS
    for devices, got in args.items():
        assert full / devices <= got <= full / devices + 1024, (devices, got)


@pytest.mark.parametrize("kind", ["auto", "explicit"])
def test_swapped_pairs_over_devices_fits_what_one_device_fits_and_moves_scores_not_rows(kind):
    """The linear swapped-pairs SVM on rows sharded over four devices (4,094 rows and two of
    weight zero): the single-device fit of the 4,094 rows, the same iterations; X stays on
    its devices (input bytes per device fall as 1/devices); in each cutting-plane iteration
    the largest collective is the gather of the 2n shifted scores that the
    most-violated-constraint search sorts, and before the loop a few vectors over the rows
    (scores, codes, weights) are gathered once: O(n) numbers, never the n x d rows."""
    from bayesord._rankpairs import RankPairsConfig, fit_rankpairs_linear

    n, d = 4096, 20
    X, y = _raw_data(n, d, seed=2)
    Z = (X - X.mean(0)) / X.std(0)
    w = np.concatenate([np.ones(n - 2), np.zeros(2)])
    config = RankPairsConfig(n_ranks=4)
    one = fit_rankpairs_linear(Z[:-2], y[:-2], w[:-2], 1.0, 1e-3, config)
    mesh = _mesh(kind)
    placed = _place(mesh, Z, y, w)
    with jax.set_mesh(mesh):
        many = fit_rankpairs_linear(*placed, 1.0, 1e-3, config)
        compiled = fit_rankpairs_linear.lower(*placed, 1.0, 1e-3, config).compile()
    assert int(many.status) == int(one.status) == 0 and int(many.n_iter) == int(one.n_iter)
    np.testing.assert_allclose(many.coef, one.coef, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(many.thresholds, one.thresholds, rtol=1e-9, atol=1e-12)
    found = distributed.collectives(compiled)
    in_loops = [size for _, size, in_loop in found if in_loop]
    once = [size for _, size, in_loop in found if not in_loop]
    assert in_loops and max(in_loops) <= 2 * 8 * n + 1024, found  # the 2n shifted scores
    assert max(once) <= 4 * 8 * n + 1024 < Z.nbytes, found      # scores, codes, weights; once
    full = Z.nbytes + y.nbytes + w.nbytes
    got = compiled.memory_analysis().argument_size_in_bytes
    assert full / DEVICES <= got <= full / DEVICES + 1024, got


def test_map_sharded_equals_vmap_and_exchanges_no_data():
    """Five bootstrap fits (padded to eight over four devices) against jax.vmap on one."""
    X, y = _raw_data(400, seed=2)
    draws = np.random.default_rng(3).dirichlet(np.ones(400), size=5) * 400
    config = ProbitConfig(thresholds="joint")

    def one(w):
        return fit_probit(X, y, w, 1.0, 1e-10, config=config, n_classes=4).coef

    got = distributed.map_sharded(one, draws)
    np.testing.assert_allclose(got, jax.vmap(one)(draws), rtol=1e-10)
    mesh = distributed.row_mesh()
    (placed,) = _place(mesh, np.concatenate([draws, draws[:3]]))
    found = distributed.collectives(jax.jit(jax.vmap(one)).lower(placed).compile())
    # Only the loops' stopping flags cross devices.
    assert all(op == "all-reduce" and size <= 8 for op, size, _ in found), found


def test_map_sharded_over_a_fit_that_batches_itself():
    """An NPSVOR grid (3 values of C x 2 folds, padded to 8) placed over four devices and
    solved by fit_npsvor's own batching (vmap=False) gives the unsharded grid's answer."""
    X, y = _raw_data(300, seed=5)
    X = (X - X.mean(0)) / X.std(0)
    rows = to_padded_rows(X)
    config = NPSVORConfig(n_features=X.shape[1])
    C = np.repeat([0.1, 1.0, 10.0], 2)
    W = np.tile(kfold_masks(y, 2, seed=0).astype(float), (3, 1))

    def grid(c, w):
        return fit_npsvor(rows, y, 4, c, c, 0.1, 0.1, jax.random.key(0), config, sample_weight=w).coef

    got = distributed.map_sharded(grid, C, W, vmap=False)
    np.testing.assert_allclose(got, grid(C, W), rtol=1e-12, atol=1e-14)


def test_isbor_with_rows_over_devices_selects_what_one_device_selects(monkeypatch):
    """ISBOR with rows (and weights) sharded over four devices, candidates replicated; its
    progress line is written once per iteration, not once per device."""
    X, y = _raw_data(1200, d=4, seed=6)
    config = ISBORConfig(n_classes=4, capacity=16, max_iter=40)
    cand = np.arange(1200, dtype=np.int32)
    args = (np.ones(1200), cand, np.ones(1200, bool), jax.random.key(0), 0.25)
    one = fit_isbor(X, y, *args, config=config)
    mesh = _mesh("auto")
    Xs, ys, ws = _place(mesh, X, y, args[0])
    lines = []
    monkeypatch.setattr(_progress, "_write", lambda text, final, throttle=True: lines.append(text))
    many = fit_isbor(Xs, ys, ws, *args[1:], config=dataclasses.replace(config, progress=True))
    jax.effects_barrier()  # host callbacks may still be running
    # One per iteration and the final line (jax 0.8 drops the final one, on one device too);
    # four devices writing would give four times as many.
    assert int(many.n_iter) <= len(lines) <= int(many.n_iter) + 1, lines
    np.testing.assert_array_equal(many.relevance_index, one.relevance_index)
    assert int(many.n_iter) == int(one.n_iter)
    # The threshold steps stop on the evidence's change (min_delta); sums in another order
    # move where they stop by far less than that.
    np.testing.assert_allclose(many.w, one.w, rtol=1e-5, atol=1e-8)
    np.testing.assert_allclose(many.log_evidence, one.log_evidence, rtol=1e-7)


def test_isbor_exchanges_per_block_products_and_memory_falls_with_devices():
    """At 20,480 rows (long rows: the candidate block's weighted squares run as blocks of
    matrix-vector products), compiled only: no all-gather, the loop's all-reduces at most a
    candidate block's products, and temporary bytes per device falling with the devices."""
    n, d = 20480, 4
    X, y = _raw_data(n, d, seed=7)
    config = ISBORConfig(n_classes=4, capacity=16)
    temp = {}
    for devices in (1, 4):
        mesh = _mesh("auto", devices)
        Xs, ys, ws = _place(mesh, X, y, np.ones(n))
        compiled = fit_isbor.lower(Xs, ys, ws, np.arange(n, dtype=np.int32), np.ones(n, bool),
                                   jax.random.key(0), 0.25, config=config).compile()
        temp[devices] = compiled.memory_analysis().temp_size_in_bytes
        found = distributed.collectives(compiled)
        assert {op for op, _, _ in found} <= {"all-reduce"}, found
        block = config.block_size * (config.capacity + 1 + d) * 8
        assert all(size <= block for _, size, in_loop in found if in_loop), found
    assert temp[4] < 0.3 * temp[1], temp


def test_sbor_with_rows_over_devices_prunes_what_one_device_prunes():
    """SBOR (every candidate starts in the model) with rows and weights sharded over four
    devices: the same relevance vectors and evidence as on one device; compiled at 20,480
    rows, its collectives are all-reduces no larger than the (M + 1)^2 Gram of the M
    candidates, never O(n), and temporary bytes per device fall with the devices."""
    X, y = _raw_data(1200, d=4, seed=6)
    config = ISBORConfig(n_classes=4, capacity=64, max_iter=60)
    cand = np.arange(0, 1200, 20, dtype=np.int32)
    args = (np.ones(1200), cand, np.ones(cand.size, bool), 0.25)
    one = fit_sbor(X, y, *args, config=config)
    many = fit_sbor(*_place(_mesh("auto"), X, y, args[0]), *args[1:], config=config)
    np.testing.assert_array_equal(many.relevance_index, one.relevance_index)
    assert int(many.n_iter) == int(one.n_iter)
    np.testing.assert_allclose(many.w, one.w, rtol=1e-5, atol=1e-8)
    np.testing.assert_allclose(many.log_evidence, one.log_evidence, rtol=1e-7)

    n, m = 20480, 256
    X, y = _raw_data(n, 4, seed=7)
    cand = np.arange(0, n, n // m, dtype=np.int32)
    temp = {}
    for devices in (1, 4):
        placed = _place(_mesh("auto", devices), X, y, np.ones(n))
        compiled = fit_sbor.lower(*placed, cand, np.ones(m, bool), 0.25, config=config).compile()
        temp[devices] = compiled.memory_analysis().temp_size_in_bytes
        found = distributed.collectives(compiled)
        assert {op for op, _, _ in found} <= {"all-reduce"}, found
        # The largest: the precision of the M weights and the K - 1 thresholds (and sigma).
        assert max((size for _, size, _ in found), default=0) <= 8 * (m + config.n_classes) ** 2, found
    assert temp[4] < 0.3 * temp[1], temp


def test_redsvm_grid_over_devices_fits_each_c_alone():
    """RED-SVM's dual coordinate descent visits rows one after another, so it is spread over
    devices by problems: a grid of C values over four devices gives each value's own fit (to
    the solver's tolerance) and its compiled program exchanges only the loops' stop flags."""
    rng = np.random.default_rng(0)
    n, d = 120, 3
    X = rng.normal(size=(n, d))
    y = np.digitize(X @ rng.normal(size=d) + 0.5 * rng.normal(size=n), [-0.5, 0.5]).astype(np.int32)
    config = RedSVMConfig(n_classes=3, max_epochs=200)
    Cs = np.array([0.1, 1.0, 10.0])

    def fit_c(c):
        res = fit_redsvm(X, y, c * jnp.ones(n), config, tol=1e-6)
        return res.objective, res.w

    objective, w = distributed.map_sharded(fit_c, Cs)
    for c, obj in zip(Cs, objective):
        alone = fit_redsvm(X, y, c * np.ones(n), config, tol=1e-6)
        np.testing.assert_allclose(obj, alone.objective, rtol=1e-5)
    assert w.shape == (Cs.size, d)
    padded = jax.device_put(np.r_[Cs, Cs[-1:]], NamedSharding(distributed.row_mesh(), PartitionSpec("rows")))
    found = distributed.collectives(jax.jit(jax.vmap(fit_c)).lower(padded).compile())
    assert all(op == "all-reduce" and size <= 1 for op, size, _ in found), found


@pytest.mark.parametrize("kind, slopes", [("auto", ()), ("explicit", ["b"])])
def test_mixed_model_over_devices_equals_the_single_device_fit(kind, slopes, tmp_path):
    """Raw columns, text group labels, 1,003 rows over four devices (so a group's rows lie
    on several of them), and a listed group with no rows: the estimator's fit to the
    solver's tolerance, the same predictions for known and new groups, and a model file;
    with a random intercept, and with a random slope too."""
    from bayesord import OrdinalMixed

    X, y = _raw_data(1003, d=3, seed=2)
    rng = np.random.default_rng(3)
    g = rng.integers(0, 30, 1003)
    y = np.clip(y + (rng.normal(size=30)[g] > 0.5), 0, 3)  # a group effect
    names = np.array([f"site{j:02d}" for j in range(31)])
    frame = pd.DataFrame(X, columns=["a", "b", "c"])
    ref = OrdinalMixed(link="logit", random_slopes=slopes).fit(frame, y, names[g])
    model = distributed.fit_ordinal_mixed(frame, y, names[g], classes=[0, 1, 2, 3], group_levels=names,
                                          mesh=_mesh(kind), link="logit", random_slopes=slopes)
    assert model.converged_ and list(model.groups_) == list(names) and model.group_terms_[1:] == list(slopes)
    np.testing.assert_allclose(model.coef_, ref.coef_, rtol=1e-6)
    np.testing.assert_allclose(model.group_sd_, ref.group_sd_, rtol=1e-6)
    np.testing.assert_allclose(model.group_effects_[:30], ref.group_effects_, atol=1e-7)
    new = names[np.r_[g[:20], [30] * 5]]  # site30 has no rows: predicted as a new group
    np.testing.assert_allclose(model.predict_proba(frame[:25], new), ref.predict_proba(frame[:25], new),
                               atol=1e-7)
    model.save(tmp_path / "m.npz")
    np.testing.assert_array_equal(load_model(tmp_path / "m.npz").predict(frame, names[g]),
                                  model.predict(frame, names[g]))
    with pytest.raises(ValueError, match="not in group_levels"):
        distributed.fit_ordinal_mixed(frame, y, names[g], classes=[0, 1, 2, 3], group_levels=names[1:])
    with pytest.raises(ValueError, match="each group label once"):
        distributed.fit_ordinal_mixed(frame, y, names[g], classes=[0, 1, 2, 3], group_levels=[*names, "site00"])


def test_float32_fits_over_devices_are_the_same_on_columns_far_from_zero():
    """Columns 10^5 sds from zero in float32: the sharded probit and mixed model centre them
    on the host as the estimators do (before: probabilities 1e-3 apart)."""
    from bayesord import OrdinalMixed

    X, y = _raw_data(403, d=3, seed=5)
    X = (X - X.mean(0)) / X.std(0)
    shift = 1e5 * np.array([1.0, -1.0, 1.0])
    g = np.arange(403) % 6
    with jax.enable_x64(False):
        ref = OrdinalProbit().fit(X, y)
        far = distributed.fit_ordinal_probit(X + shift, y, classes=[0, 1, 2, 3])
        np.testing.assert_allclose(far.predict_proba(X[:40] + shift), ref.predict_proba(X[:40]), atol=1e-4)
        ref = OrdinalMixed(random_slopes=[0]).fit(X, y, g)
        far = distributed.fit_ordinal_mixed(X + shift, y, g, classes=[0, 1, 2, 3], group_levels=list(range(6)),
                                            random_slopes=[0])
        np.testing.assert_allclose(far.predict_proba(X[:40] + shift, g[:40]), ref.predict_proba(X[:40], g[:40]),
                                   atol=1e-4)


@pytest.mark.parametrize("kind", ["auto", "explicit"])
def test_crossed_mixed_model_over_devices_equals_the_single_device_fit(kind):
    """Sites crossed with raters, a random slope per site, 1,003 rows over four devices:
    the single-device fit to the solver's tolerance, and the same predictions."""
    from bayesord import OrdinalMixed

    X, y = _raw_data(1003, d=3, seed=4)
    rng = np.random.default_rng(5)
    G = np.column_stack([rng.integers(0, 12, 1003), rng.integers(0, 5, 1003)])
    y = np.clip(y + (rng.normal(size=12)[G[:, 0]] + rng.normal(size=5)[G[:, 1]] > 0.8), 0, 3)
    frame = pd.DataFrame(X, columns=["a", "b", "c"])
    groups = pd.DataFrame({"site": [f"s{j}" for j in G[:, 0]], "rater": G[:, 1]})
    levels = {"site": [f"s{j}" for j in range(12)], "rater": list(range(5))}
    ref = OrdinalMixed(random_slopes={"site": ["b"]}).fit(frame, y, groups)
    model = distributed.fit_ordinal_mixed(frame, y, groups[["rater", "site"]], classes=[0, 1, 2, 3],
                                          group_levels=levels, mesh=_mesh(kind), random_slopes={"site": ["b"]})
    assert model.converged_ and model.group_factors_ == ["site", "rater"]
    assert model.loglik_ == pytest.approx(ref.loglik_, abs=1e-8)
    np.testing.assert_allclose(model.group_sd_, ref.group_sd_, rtol=1e-6)
    np.testing.assert_allclose(model.predict_proba(frame[:20], groups[:20]), ref.predict_proba(frame[:20], groups[:20]),
                               atol=1e-8)
    with pytest.raises(ValueError, match="column 'rater' holds labels not in group_levels"):
        distributed.fit_ordinal_mixed(frame, y, groups, classes=[0, 1, 2, 3], group_levels=dict(levels, rater=[0, 1]))


def test_bad_input_gets_a_clear_error():
    X, y = _raw_data(200)
    mesh = jax.make_mesh((DEVICES,), ("data",), axis_types=(AxisType.Auto,))
    with pytest.raises(ValueError, match="not 'rows'"):
        distributed.fit_ordinal_probit(X, y, classes=[0, 1, 2, 3], mesh=mesh)
    with pytest.raises(ValueError, match=r"classes \[4\] have no rows"):
        distributed.fit_ordinal_probit(X, y, classes=[0, 1, 2, 3, 4])
    with pytest.raises(ValueError, match="class_weight"):
        distributed.fit_ordinal_probit(X, y, classes=[0, 1, 2, 3], class_weight="balanced")
    with pytest.raises(ValueError, match="different numbers of rows"):
        distributed.shard_rows(distributed.row_mesh(), X, y[:10])
    with pytest.raises(TypeError, match="sparse"):
        distributed.fit_ordinal_probit(sp.csr_matrix(X), y, classes=[0, 1, 2, 3])
    with pytest.raises(ValueError, match="process_id must be in 0..1"):
        distributed.initialize("127.0.0.1:1", 2, 5)
    with pytest.raises(ValueError, match="one shared, non-empty first axis"):
        distributed.map_sharded(jnp.sum, np.ones((3, 2)), np.ones((4, 2)))
    other = jax.make_mesh((DEVICES,), ("data",), axis_types=(AxisType.Explicit,))
    a, = _place(_mesh("explicit"), X[:100])
    b = jax.device_put(y[:100], NamedSharding(other, PartitionSpec("data")))
    with pytest.raises(ValueError, match="two different meshes"):
        fit_probit(a, b, np.ones(100), 1.0, 1e-8, config=ProbitConfig(), n_classes=4)


_WORKER = textwrap.dedent("""
    import json, sys
    import jax
    import numpy as np
    from bayesord import distributed
    rank, port, data = int(sys.argv[1]), sys.argv[2], np.load(sys.argv[3])
    distributed.initialize(f"127.0.0.1:{port}", 2, rank, initialization_timeout=60)
    jax.config.update("jax_enable_x64", True)
    rows = slice(0, 601) if rank == 0 else slice(601, None)  # uneven shares
    model = distributed.fit_ordinal_probit(data["X"][rows], data["y"][rows], classes=[0, 1, 2, 3])
    try:  # process 1 names the classes in another order
        distributed.fit_ordinal_probit(data["X"][rows], data["y"][rows],
                                       classes=[0, 1, 2, 3] if rank == 0 else [0, 2, 1, 3])
        refused = ""
    except ValueError as err:
        refused = str(err)
    with jax.enable_x64(False):  # columns far from zero: process 0's offsets for both
        far = distributed.fit_ordinal_probit(data["X"][rows] + 1e6, data["y"][rows], classes=[0, 1, 2, 3])
        far_proba = far.predict_proba(data["X"][:20] + 1e6).tolist()
    print("RESULT", json.dumps({"coef": model.coef_.tolist(), "n_iter": model.n_iter_,
                                "devices": jax.device_count(), "refused": refused, "far_proba": far_proba}))
""")


def test_two_processes_fit_what_one_process_fits(tmp_path):
    """Two processes of two CPU devices each, over 127.0.0.1 with gloo collectives; then
    both refuse a fit in which they disagree on the order of the classes."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    X, y = _raw_data(1001, seed=4)
    np.savez(tmp_path / "data.npz", X=X, y=y)
    script = tmp_path / "worker.py"
    script.write_text(_WORKER)
    env = {**os.environ, "JAX_NUM_CPU_DEVICES": "2"}
    procs = [subprocess.Popen([sys.executable, str(script), str(rank), str(port),
                               str(tmp_path / "data.npz")], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for rank in (0, 1)]
    outs = []
    try:
        for p in procs:
            outs.append(p.communicate(timeout=240)[0])
    finally:
        for p in procs:
            p.kill()
    results = []
    for p, out in zip(procs, outs):
        assert p.returncode == 0, out[-3000:]
        line = [ln for ln in out.splitlines() if ln.startswith("RESULT ")]
        results.append(json.loads(line[-1][len("RESULT "):]))
    ref = distributed.fit_ordinal_probit(X, y, classes=[0, 1, 2, 3])
    assert results[0] == results[1] and results[0]["devices"] == 4
    assert "processes disagree on classes" in results[0]["refused"]
    np.testing.assert_allclose(results[0]["coef"], ref.coef_, rtol=1e-6)
    with jax.enable_x64(False):
        near = OrdinalProbit().fit(X, y).predict_proba(X[:20])
    np.testing.assert_allclose(results[0]["far_proba"], near, atol=1e-4)


def test_a_singular_sharded_mixed_fit_warns_as_the_estimator_does():
    """Ratings with no group effect: the group sd is fitted at 0, and the sharded fit says so
    in the estimator's words (lme4's 'boundary (singular) fit')."""
    rng = np.random.default_rng(0)
    g, x = rng.integers(0, 20, 401), rng.normal(size=(401, 1))
    y = np.digitize(x[:, 0] + rng.normal(size=401), [-1, 0, 1])
    with pytest.warns(UserWarning, match=r"singular fit.*: sd\(group\) = [0-9.e-]+\.  The data"):
        model = distributed.fit_ordinal_mixed(x, y, g, classes=[0, 1, 2, 3], group_levels=list(range(20)))
    assert model.group_sd_ < 1e-6
