"""Stored fit programs (``bayesord._compile_cache.stored_fit_program``): a fit read back from
its ``jax.export`` serialisation equals the jitted fit, and the key tells programs apart."""

from __future__ import annotations

from pathlib import Path

import jax
import numpy as np
import pytest

from bayesord import OrdinalProbit, _compile_cache
from bayesord._probit import ProbitConfig, ProbitResult, _predict_probit, fit_probit
from bayesord._shapes import bucket_rows
from bayesord.datasets import make_ordinal_probit
from bayesord.estimators._probit import _fit_program, _predict_program


@pytest.mark.skipif(not _compile_cache._export_ready(), reason="jax.export serialisation needs flatbuffers")
def test_a_stored_fit_equals_the_jitted_fit_when_written_and_when_read_back():
    X, y, _ = make_ordinal_probit(37, 3, 4, seed=5)
    before = set(_fit_program(bucket_rows(37)).loaded)
    written = OrdinalProbit().fit(X, y)
    (key,) = set(_fit_program(bucket_rows(37)).loaded) - before
    stored = Path(jax.config.jax_compilation_cache_dir) / "exported" / f"{key}.bin"
    assert stored.is_file()
    mtime = stored.stat().st_mtime_ns
    _compile_cache._stored_fit_program.cache_clear()  # as a new process: nothing loaded
    program = _fit_program(bucket_rows(37))
    traced = program.fallback._cache_size()
    read_back = OrdinalProbit().fit(X, y)
    assert set(program.loaded) == {key} and stored.stat().st_mtime_ns == mtime  # read, not written again
    assert program.fallback._cache_size() == traced  # fit_probit was not traced
    ref = fit_probit(X, y - 1, np.ones(37), 1.0, 1e-10, config=written._config(), n_classes=4)
    for model in (written, read_back):  # the unpadded functional fit (padding: tested elsewhere)
        np.testing.assert_allclose(model.coef_, ref.coef, rtol=1e-7, atol=1e-10)
        np.testing.assert_allclose(model.coef_cov_, ref.coef_cov, rtol=1e-6)
    np.testing.assert_array_equal(read_back.coef_, written.coef_)
    np.testing.assert_array_equal(read_back.coef_cov_, written.coef_cov_)


@pytest.mark.skipif(not _compile_cache._export_ready(), reason="jax.export serialisation needs flatbuffers")
def test_the_probit_prediction_is_stored_too_and_equals_the_jitted_one():
    X, y, _ = make_ordinal_probit(41, 3, 4, seed=6)
    model = OrdinalProbit().fit(X, y)
    _compile_cache._stored_fit_program.cache_clear()  # as a new process: nothing loaded
    program = _predict_program(bucket_rows(41))
    proba = model.predict_proba(X)
    assert len(program.loaded) == 1  # the one-class check and predict_proba: one program
    res = jax.tree_util.tree_map(np.asarray, model.result_)
    ref = _predict_probit(res, X)
    np.testing.assert_allclose(proba, np.asarray(ref.proba), rtol=1e-12, atol=1e-15)
    # The key holds the fit's settings: another link is another program.
    logit = OrdinalProbit(link="logit").fit(X, y)
    logit.predict_proba(X)
    assert len(program.loaded) == 2


def test_the_key_depends_on_settings_shapes_and_source(monkeypatch):
    program = _compile_cache.stored_fit_program(fit_probit, 100, ("config", "n_classes"), ProbitResult)
    args = [np.zeros((8, 2)), np.zeros(8, np.int32), np.ones(8), np.float64(1.0), np.float64(1e-8)]
    tree = jax.tree_util.tree_structure(tuple(args))
    static = {"config": ProbitConfig(), "n_classes": 3}
    base = program._key(args, tree, static)
    assert base == program._key(args, tree, dict(static))
    assert base != program._key(args, tree, {"config": ProbitConfig(thresholds="joint"), "n_classes": 3})
    assert base != program._key([np.zeros((16, 2))] + args[1:], tree, static)
    assert base != program._key(args, jax.tree_util.tree_structure((tuple(args[:2]),) + tuple(args[2:])), static)
    monkeypatch.setattr(_compile_cache, "_source_digest", lambda: "edited")
    assert base != program._key(args, tree, static)


def test_without_the_cache_the_jitted_program_runs(monkeypatch):
    monkeypatch.setenv("BAYESORD_COMPILE_CACHE", "off")
    program = _compile_cache.stored_fit_program(fit_probit, 100, ("config", "n_classes"), ProbitResult)
    X, y, _ = make_ordinal_probit(24, 2, 3, seed=1)
    args = (X, (y - 1).astype(np.int32), np.ones(24), np.float64(1.0), np.float64(1e-8))
    assert program._program(list(args), jax.tree_util.tree_structure(args),
                            {"config": ProbitConfig(), "n_classes": 3}) is None


@pytest.mark.slow  # ISBOR's solver compiled twice: 6 s
@pytest.mark.skipif(not _compile_cache._export_ready(), reason="jax.export serialisation needs flatbuffers")
def test_isbor_fits_through_its_stored_solver_as_through_the_jitted_one():
    """ISBOR's fold fits and final fit share one stored program, kept optimised (not the quick
    variant); read back as in a new process it gives the jitted solver's fit."""
    from bayesord import ISBOR
    from bayesord._isbor import ISBORResult
    from bayesord.estimators._isbor import _isbor_solve

    X, y, _ = make_ordinal_probit(60, 2, 3, seed=9)
    model = ISBOR(theta="auto", theta_grid=(0.3, 1.0), cv=3, capacity=16, max_iter=60, random_state=0)
    program = _compile_cache.stored_fit_program(_isbor_solve, 60, ("config",), ISBORResult,
                                                compile="optimised")
    assert program.fallback is _isbor_solve and program.options is None
    program.loaded.clear()  # other tests in this process may have loaded the same program
    written = model.fit(X, y)
    assert len(program.loaded) == 1  # the fold fits' and the final fit's program
    _compile_cache._stored_fit_program.cache_clear()
    read_back = ISBOR(**model.get_params()).fit(X, y)
    np.testing.assert_array_equal(read_back.coef_, written.coef_)
    np.testing.assert_array_equal(read_back.predict_proba(X), written.predict_proba(X))
    # The jitted solver on the same standardised rows, candidates and key gives the same fit.
    res = written.result_
    Xs = (X - res.center) / res.scale
    config = written._config(60, 60, 3, Xs.dtype)
    key = jax.random.split(jax.random.PRNGKey(np.random.RandomState(0).randint(2**31 - 1)), 3)[0]
    jitted = written._solver(Xs, (y - 1).astype(np.int32), np.ones(60), np.arange(60, dtype=np.int32), key,
                             written.theta_, written.min_delta, config=config)
    np.testing.assert_allclose(np.asarray(jitted.w)[np.asarray(jitted.mask)], written.coef_, rtol=1e-6, atol=1e-9)


@pytest.mark.skipif(_compile_cache._map_limit() is None, reason="needs Linux's /proc memory map counts")
def test_programs_that_crowd_the_memory_maps_are_released_and_made_again(monkeypatch):
    # Each compiled program takes hundreds of memory map regions; a process that kept every
    # one crashed at the kernel's limit.  Here the limit is made just above the count.
    X, y, _ = make_ordinal_probit(300, 4, 3, seed=2)
    first = OrdinalProbit().fit(X, y)
    program = _fit_program(bucket_rows(300))
    assert program.loaded or program.fallback._cache_size()
    held = _compile_cache._map_count()
    monkeypatch.setattr(_compile_cache, "_map_limit", lambda: int(held / _compile_cache._MAP_SHARE) - 1)
    _compile_cache._NEW_PROGRAMS[0] = _compile_cache._CHECK_EVERY - 1
    assert not _compile_cache.release_programs_if_crowded()  # too few new programs to count
    _compile_cache._NEW_PROGRAMS[0] = _compile_cache._CHECK_EVERY
    assert _compile_cache.release_programs_if_crowded()
    assert not program.loaded and program.fallback._cache_size() == 0
    assert _compile_cache._map_count() < held  # their memory is unmapped
    again = OrdinalProbit().fit(X, y)  # made again (from the on-disk cache where it is on)
    np.testing.assert_array_equal(again.coef_, first.coef_)
    _compile_cache._NEW_PROGRAMS[0] = _compile_cache._CHECK_EVERY
    monkeypatch.setattr(_compile_cache, "_map_limit", lambda: 10**9)
    assert not _compile_cache.release_programs_if_crowded()  # far below the limit: kept


def test_the_answer_of_the_compiler_options_probe_is_kept_on_disk(monkeypatch, tmp_path):
    """The probe compiles once and writes its answer; a later process reads it (here: a
    kept 'refused', which a probe would contradict on XLA:CPU) without compiling."""
    if jax.default_backend() != "cpu":
        pytest.skip("the compiler options are XLA:CPU's")
    options = tuple(_compile_cache.QUICK_OPTIONS.items())
    marker = tmp_path / "options" / "probe"
    monkeypatch.setattr(_compile_cache, "_probe_marker", lambda _: marker)
    try:
        _compile_cache._options_accepted.cache_clear()
        assert _compile_cache._options_accepted(options)
        assert marker.read_text() == "accepted"
        marker.write_text("refused")
        _compile_cache._options_accepted.cache_clear()  # as a new process
        assert not _compile_cache._options_accepted(options)
        monkeypatch.setattr(_compile_cache, "_probe_marker", lambda _: None)  # the cache off
        _compile_cache._options_accepted.cache_clear()
        assert _compile_cache._options_accepted(options)
    finally:
        _compile_cache._options_accepted.cache_clear()
