"""bayesord.datasets: loaders on temp files and the shared data, binning, splits, generators."""

import gzip
import warnings

import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import chi2, norm

from bayesord import datasets as D

# (n, d) and, for ordinal sets, the class counts published in ../shared/datasets/MANIFEST.md
MANIFEST = {
    "balance_scale": (625, 4, [288, 49, 288]),
    "swd": (1000, 10, [32, 352, 399, 217]),
    "era": (1000, 4, [92, 142, 181, 172, 158, 118, 88, 31, 18]),
    "esl": (488, 4, [2, 12, 38, 100, 116, 135, 62, 19, 4]),
    "tae": (151, 54, [49, 50, 52]),
    "pasture": (36, 25, [12, 12, 12]),
    "pyrim10": (74, 26, [8, 8, 8, 8, 7, 7, 7, 7, 7, 7]),
    "toy": (300, 2, [35, 87, 79, 68, 31]),
    "winequality_red": (1599, 11, [10, 53, 681, 638, 199, 18]),
    "marketing": (6876, 42, [1255, 529, 505, 618, 527, 846, 784, 1069, 743]),
    "machine_cpu": (209, 6, None),
    "auto_mpg": (392, 9, None),
    "boston_housing": (506, 13, None),
    "pyrimidines": (74, 26, None),
    "triazines": (186, 60, None),
    "wpbc": (194, 32, None),
    "stock": (950, 9, None),
    "abalone": (4177, 10, None),
    "diabetes": (43, 2, None),
    "bank8fm": (8192, 8, None),
    "cpu_small": (8192, 12, None),
    "california_housing": (20640, 8, None),
}


# ------------------------------------------------------------------------------ loaders


def write(path, text, compress=False):
    data = text.encode()
    path.write_bytes(gzip.compress(data) if compress else data)
    return path


@pytest.mark.parametrize("compress", [False, True])
def test_load_csv_plain_and_gzip(tmp_path, compress):
    p = write(tmp_path / "d.csv", "a,y,b\n1,2,3.5\n4,1,6\n", compress)
    X, y, names = D.load_csv(p)
    np.testing.assert_array_equal(X, [[1, 3.5], [4, 6]])
    assert X.dtype == np.float64
    np.testing.assert_array_equal(y, [2, 1])
    assert y.dtype == np.int64
    assert names == ["a", "b"]
    X32, _, _ = D.load_csv(p, dtype=np.float32)
    assert X32.dtype == np.float32


def test_load_csv_target_types(tmp_path):
    _, y, _ = D.load_csv(write(tmp_path / "f.csv", "x,score\n1,0.5\n2,1.0\n"), target="score")
    assert y.dtype == np.float64 and y.tolist() == [0.5, 1.0]
    _, y, _ = D.load_csv(write(tmp_path / "w.csv", "x,y\n1,2.0\n2,3.0\n"))
    assert y.dtype == np.int64 and y.tolist() == [2, 3]
    _, y, _ = D.load_csv(write(tmp_path / "s.csv", "x,y\n1,low\n2,high\n"))
    assert y.dtype == object and y.tolist() == ["low", "high"]


def test_load_csv_warns_of_a_column_without_a_name(tmp_path):
    """A DataFrame saved with its index (to_csv's default) has a column pandas calls
    'Unnamed: 0': a row number that would be fitted as a feature."""
    path = tmp_path / "indexed.csv"
    pd.DataFrame({"x": [0.5, 1.5, 2.5], "y": [1, 2, 3]}).to_csv(path)
    with pytest.warns(UserWarning, match=r"indexed.csv: column\(s\) \['Unnamed: 0'\] have no name in the header"):
        X, _, names = D.load_csv(path)
    assert names == ["Unnamed: 0", "x"] and X[:, 0].tolist() == [0, 1, 2]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        D.load_csv(write(tmp_path / "plain.csv", "x,y\n1,2\n2,3\n"))


def test_load_csv_errors(tmp_path):
    with pytest.raises(ValueError, match="no target column 'y'"):
        D.load_csv(write(tmp_path / "a.csv", "a,b\n1,2\n"))
    with pytest.raises(TypeError, match=r"\['c'\] are not numeric"):
        D.load_csv(write(tmp_path / "b.csv", "a,c,y\n1,red,2\n3,blue,1\n"))
    with pytest.raises(ValueError, match=r"c.csv contains 1 missing value\(s\), in column\(s\) \['a'\] "
                                         r"\(first rows, 0-based: \[1\]\)"):
        D.load_csv(write(tmp_path / "c.csv", "a,b,y\n1,2,3\n,5,6\n"))
    with pytest.raises(ValueError, match="missing value"):
        D.load_csv(write(tmp_path / "d.csv", "a,y\n1,NaN\n2,3\n"))
    with pytest.raises(ValueError, match="infinite"):
        D.load_csv(write(tmp_path / "e.csv", "a,y\ninf,1\n2,3\n"))
    with pytest.raises(ValueError, match="no rows"):
        D.load_csv(write(tmp_path / "f.csv", "a,y\n"))
    with pytest.raises(ValueError, match="no feature columns"):
        D.load_csv(write(tmp_path / "g.csv", "y\n1\n"))
    with pytest.raises(FileNotFoundError):
        D.load_csv(tmp_path / "absent.csv")
    with pytest.raises(TypeError, match="floating dtype"):
        D.load_csv(write(tmp_path / "h.csv", "a,y\n1.5,1\n"), dtype=np.int64)


LIBSVM_TEXT = "3 1:0.5 4:2\n1 2:-1 # comment\n2\n"
LIBSVM_DENSE = np.array([[0.5, 0, 0, 2], [0, -1, 0, 0], [0, 0, 0, 0]])


@pytest.mark.parametrize("compress", [False, True])
def test_load_libsvm_small(tmp_path, compress):
    X, y = D.load_libsvm(write(tmp_path / "d.svm", LIBSVM_TEXT, compress))
    assert sp.isspmatrix_csr(X) and X.dtype == np.float64 and X.has_sorted_indices
    np.testing.assert_array_equal(X.toarray(), LIBSVM_DENSE)
    np.testing.assert_array_equal(y, [3, 1, 2])
    assert y.dtype == np.int64
    X6, _ = D.load_libsvm(tmp_path / "d.svm", n_features=6)
    assert X6.shape == (3, 6)
    np.testing.assert_array_equal(X6.toarray()[:, :4], LIBSVM_DENSE)


def test_load_libsvm_errors(tmp_path):
    with pytest.raises(ValueError, match="n_features=3"):
        D.load_libsvm(write(tmp_path / "a.svm", LIBSVM_TEXT), n_features=3)
    with pytest.raises(ValueError, match="1-based"):
        D.load_libsvm(write(tmp_path / "b.svm", "1 0:1 2:3\n"))
    with pytest.raises(ValueError, match="1-based"):
        D.load_libsvm(write(tmp_path / "c.svm", "1 2:x\n"))
    with pytest.raises(ValueError, match="NaN"):
        D.load_libsvm(write(tmp_path / "d.svm", "1 2:nan\n"))
    with pytest.raises(ValueError, match="no samples"):
        D.load_libsvm(write(tmp_path / "e.svm", ""))
    with pytest.raises(FileNotFoundError):
        D.load_libsvm(tmp_path / "absent.svm")


def parse_libsvm_rows(path, rows):
    """First `rows` lines of a LIBSVM file parsed by hand: (label, {col: value})."""
    out = []
    with open(path) as fh:
        for _, line in zip(range(rows), fh):
            tokens = line.split()
            out.append((float(tokens[0]), {int(t.split(":")[0]) - 1: float(t.split(":")[1]) for t in tokens[1:]}))
    return out


def test_treebank(datasets_dir):
    ds = D.load_shared("treebank", root=datasets_dir)
    assert ds.X.shape == (9484, 8569) and ds.X_test.shape == (2371, 8569)
    assert sp.isspmatrix_csr(ds.X) and ds.X.has_sorted_indices and ds.X.dtype == np.float64
    assert sorted(set(ds.y.tolist())) == [1, 2, 3, 4, 5]
    assert sorted(set(ds.y_test.tolist())) == [1, 2, 3, 4, 5]
    for i, (label, feats) in enumerate(parse_libsvm_rows(datasets_dir / "treebank" / "treebank.train", 50)):
        assert ds.y[i] == label
        row = ds.X.getrow(i)
        assert dict(zip(row.indices.tolist(), row.data.tolist())) == feats
    with open(datasets_dir / "treebank" / "treebank.train") as fh:
        assert ds.X.nnz == sum(len(line.split()) - 1 for line in fh)


@pytest.mark.parametrize("name", sorted(MANIFEST))
def test_shared_dense_match_manifest(datasets_dir, name):
    n, d, counts = MANIFEST[name]
    ds = D.load_shared(name, root=datasets_dir)
    assert ds.X.shape == (n, d) and ds.y.shape == (n,) and len(ds.feature_names) == d
    assert ds.kind == ("ordinal" if counts else "continuous")
    if counts:
        assert np.bincount(ds.y, minlength=len(counts) + 1)[1:].tolist() == counts


def test_load_shared_errors(tmp_path):
    with pytest.raises(ValueError, match="unknown shared dataset"):
        D.load_shared("no_such_set")
    with pytest.raises(FileNotFoundError, match="'toy' not found"):
        D.load_shared("toy", root=tmp_path)
    with pytest.raises(FileNotFoundError, match="'treebank' not found"):
        D.load_shared("treebank", root=tmp_path)


# ------------------------------------------------------------------------------ binning


def test_equal_width_bins():
    y = np.array([0.0, 0.99, 1.0, 2.5, 3.0, 3.0])
    # edges 0, 1, 2, 3: [0,1) [1,2) [2,3]
    np.testing.assert_array_equal(D.equal_width_bins(y, 3), [1, 1, 2, 3, 3, 3])
    rng = np.random.default_rng(0)
    z = rng.normal(size=500)
    ref = np.clip(np.floor((z - z.min()) / (z.max() - z.min()) * 4), 0, 3) + 1
    np.testing.assert_array_equal(D.equal_width_bins(z, 4), ref)


def test_equal_frequency_bins_without_ties():
    rng = np.random.default_rng(1)
    z = rng.normal(size=103)
    c = D.equal_frequency_bins(z, 5)
    counts = np.bincount(c)[1:]
    assert counts.sum() == 103 and counts.max() - counts.min() <= 1
    order = np.argsort(z)
    assert np.all(np.diff(c[order]) >= 0)


def test_equal_frequency_bins_heavy_ties():
    y = np.r_[np.zeros(60), np.arange(1, 41)]  # 60% of the data tied at 0
    c = D.equal_frequency_bins(y, 4)
    assert set(c.tolist()) == {1, 2, 3, 4}
    assert np.all(c[:60] == 1)  # the tie is not split
    assert np.all(np.diff(c[60:]) >= 0)


@settings(max_examples=80, deadline=None)
@given(st.lists(st.integers(0, 12), min_size=1, max_size=60), st.integers(2, 6))
def test_equal_frequency_bins_properties(values, k):
    y = np.array(values, dtype=float)
    if np.unique(y).size < k:
        with pytest.raises(ValueError, match="distinct"):
            D.equal_frequency_bins(y, k)
        return
    c = D.equal_frequency_bins(y, k)
    assert set(c.tolist()) == set(range(1, k + 1))
    i, j = np.meshgrid(np.arange(y.size), np.arange(y.size))
    assert np.all(c[i][y[i] < y[j]] <= c[j][y[i] < y[j]])  # ordered
    assert np.all(c[i][y[i] == y[j]] == c[j][y[i] == y[j]])  # ties together


@pytest.mark.parametrize("fn", [D.equal_width_bins, D.equal_frequency_bins])
def test_binning_errors(fn):
    with pytest.raises(ValueError, match="at least 2"):
        fn([1.0, 2.0, 3.0], 1)
    with pytest.raises(ValueError, match="NaN"):
        fn([1.0, np.nan, 3.0], 2)
    with pytest.raises(ValueError, match="NaN"):
        fn([1.0, np.inf, 3.0], 2)
    with pytest.raises(ValueError, match="empty"):
        fn([], 2)
    with pytest.raises(TypeError):
        fn(["a", "b"], 2)
    with pytest.raises(ValueError, match="constant|distinct"):
        fn([2.0, 2.0, 2.0], 2)


# ------------------------------------------------------------------------------- splits


def test_stratified_split():
    y = np.r_[np.ones(70), 2 * np.ones(25), 3 * np.ones(4), 4]  # a class of one row
    tr, te = D.stratified_split(y, 30, seed=0)
    assert tr.size == 30 and te.size == 70
    np.testing.assert_array_equal(np.sort(np.r_[tr, te]), np.arange(100))
    counts = {c: int(np.sum(y[tr] == c)) for c in (1, 2, 3, 4)}
    assert set(counts) == set(y[tr].tolist())  # every class in train
    assert abs(counts[1] - 21) <= 1 and abs(counts[2] - 7.5) <= 1
    tr2, _ = D.stratified_split(y, 30, seed=0)
    np.testing.assert_array_equal(tr, tr2)
    tr3, _ = D.stratified_split(y, 30, seed=1)
    assert not np.array_equal(tr, tr3)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 5), min_size=2, max_size=80), st.data())
def test_stratified_split_properties(labels, data):
    y = np.array(labels)
    n = y.size
    n_train = data.draw(st.integers(1, n - 1))
    tr, te = D.stratified_split(y, n_train, seed=3)
    assert tr.size == n_train
    np.testing.assert_array_equal(np.sort(np.r_[tr, te]), np.arange(n))
    classes, counts = np.unique(y, return_counts=True)
    if n_train >= classes.size:
        assert set(y[tr].tolist()) == set(classes.tolist())
    share = counts * n_train / n
    got = np.array([np.sum(y[tr] == c) for c in classes])
    assert np.all(np.abs(got - share) < 1 + (n_train >= classes.size) + (n - n_train >= classes.size))


def test_split_errors():
    with pytest.raises(ValueError, match="n_train"):
        D.stratified_split([1, 2, 1], 3, seed=0)
    with pytest.raises(ValueError, match="n_train"):
        D.random_split(5, 0, seed=0)
    with pytest.raises(ValueError, match="NaN"):
        D.stratified_split([1.0, np.nan, 2.0], 1, seed=0)
    with pytest.raises(TypeError):
        D.random_split(5, 2.5, seed=0)


def test_random_split():
    tr, te = D.random_split(50, 20, seed=4)
    assert tr.size == 20 and te.size == 30
    np.testing.assert_array_equal(np.sort(np.r_[tr, te]), np.arange(50))
    np.testing.assert_array_equal(tr, D.random_split(50, 20, seed=4)[0])


def test_kfold_stratified_and_masks():
    rng = np.random.default_rng(5)
    y = rng.integers(1, 4, 103)
    folds = D.kfold_indices(y, k=5, seed=0)
    tests = np.concatenate([te for _, te in folds])
    np.testing.assert_array_equal(np.sort(tests), np.arange(103))
    sizes = [te.size for _, te in folds]
    assert max(sizes) - min(sizes) <= 1
    for c in (1, 2, 3):
        per_fold = [np.sum(y[te] == c) for _, te in folds]
        assert max(per_fold) - min(per_fold) <= 1
    for tr, te in folds:
        np.testing.assert_array_equal(np.sort(np.r_[tr, te]), np.arange(103))
    masks = D.kfold_masks(y, k=5, seed=0)
    assert masks.shape == (5, 103) and masks.dtype == bool
    for f, (tr, te) in enumerate(folds):
        np.testing.assert_array_equal(np.flatnonzero(masks[f]), tr)
        np.testing.assert_array_equal(np.flatnonzero(~masks[f]), te)


def test_kfold_unstratified_and_errors():
    folds = D.kfold_indices(10, k=3, seed=1)
    assert sorted(te.size for _, te in folds) == [3, 3, 4]
    a = D.kfold_masks(np.arange(10), k=3, seed=1, stratify=False)
    np.testing.assert_array_equal(a, D.kfold_masks(10, k=3, seed=1))
    with pytest.raises(ValueError, match="at least 2"):
        D.kfold_indices(10, k=1)
    with pytest.raises(ValueError, match="need at least"):
        D.kfold_indices(3, k=4)
    with pytest.warns(UserWarning, match="smallest class"):
        D.kfold_indices([1, 1, 1, 1, 2], k=3, seed=0)


# ---------------------------------------------------------------------------- synthetic


def isbor_class_probabilities():
    """P(class) for score 10 U V, U, V ~ Uniform(-5, 5), noise neglected (sd .5 vs gaps > 30).

    For w > 0, P(UV > w) = (1 - s + s log s) / 2 with s = w / 25; UV is symmetric.
    """
    def upper(w):
        s = abs(w) / 25.0
        return 0.5 * (1 - s + s * np.log(s))

    cdf = [upper(-6.0), upper(-0.9), 1 - upper(1.5), 1 - upper(6.0)]  # at -60, -9, 15, 60
    return np.diff(np.r_[0.0, cdf, 1.0])


def test_isbor_generator_counts():
    X, y = D.make_isbor_synthetic(seed=0)
    assert X.shape == (21000, 2) and X.min() >= 0 and X.max() <= 10
    counts = np.bincount(y, minlength=6)[1:]
    paper = np.array([4431, 4535, 3949, 3780, 4305])
    p = isbor_class_probabilities()
    # two independent multinomial samples: the difference has sd sqrt(2 n p (1 - p))
    assert np.all(np.abs(counts - paper) < 4 * np.sqrt(2 * 21000 * p * (1 - p)))
    # and the (x - 0.5) reading of the paper is far from those counts
    X_alt = X.copy()
    score_alt = 10 * (X_alt[:, 0] - 0.5) * (X_alt[:, 1] - 0.5)
    alt = np.bincount(np.searchsorted([-60, -9, 15, 60], score_alt) + 1, minlength=6)[1:]
    assert np.any(np.abs(alt - paper) > 2000)


def test_isbor_generator_analytic_frequencies():
    _, y = D.make_isbor_synthetic(n=400_000, seed=1)
    counts = np.bincount(y, minlength=6)[1:]
    expected = 400_000 * isbor_class_probabilities()
    stat = np.sum((counts - expected) ** 2 / expected)
    assert chi2.sf(stat, df=4) > 1e-4


def test_ordinal_probit_generator_frequencies():
    w = np.array([1.0, -0.5, 0.25])
    b = np.array([-1.0, 0.0, 1.5])
    X, y, truth = D.make_ordinal_probit(50_000, 3, 4, seed=2, w=w, thresholds=b, sigma=0.7)
    np.testing.assert_array_equal(truth.w, w)
    np.testing.assert_array_equal(truth.thresholds, b)
    assert truth.sigma == 0.7 and truth.link == "probit"
    # P(y = k | x) = Phi((b_k - xw)/s) - Phi((b_{k-1} - xw)/s), averaged over the sampled x
    edges = np.r_[-np.inf, b, np.inf]
    cdf = norm.cdf((edges[None, :] - (X @ w)[:, None]) / 0.7)
    prob = np.diff(cdf, axis=1)
    expected = prob.sum(axis=0)
    counts = np.bincount(y, minlength=5)[1:]
    stat = np.sum((counts - expected) ** 2 / expected)
    assert chi2.sf(stat, df=3) > 1e-4
    # the classes are ordered along the true w: class means of x^T w strictly increase
    proj = X @ w
    assert np.all(np.diff([proj[y == k].mean() for k in range(1, 5)]) > 0.3)


def test_ordinal_probit_default_thresholds_equiprobable():
    X, y, truth = D.make_ordinal_probit(60_000, 5, 5, seed=3)
    assert truth.thresholds.shape == (4,) and np.all(np.diff(truth.thresholds) > 0)
    counts = np.bincount(y, minlength=6)[1:]
    stat = np.sum((counts - 12_000) ** 2 / 12_000)
    assert chi2.sf(stat, df=4) > 1e-4


def test_ordinal_logit_generator():
    w = np.array([2.0, -1.0])
    b = np.array([-0.5, 0.5])
    X, y, truth = D.make_ordinal_probit(50_000, 2, 3, seed=4, w=w, thresholds=b, sigma=0.5, link="logit")
    assert truth.link == "logit"
    edges = np.r_[-np.inf, b, np.inf]
    z = (edges[None, :] - (X @ w)[:, None]) / 0.5
    prob = np.diff(1 / (1 + np.exp(-z)), axis=1)
    expected = prob.sum(axis=0)
    counts = np.bincount(y, minlength=4)[1:]
    assert chi2.sf(np.sum((counts - expected) ** 2 / expected), df=2) > 1e-4


def test_generators_are_seeded_and_validated():
    a = D.make_ordinal_probit(20, 2, 3, seed=7)
    b = D.make_ordinal_probit(20, 2, 3, seed=7)
    np.testing.assert_array_equal(a[0], b[0])
    np.testing.assert_array_equal(a[1], b[1])
    np.testing.assert_array_equal(D.make_isbor_synthetic(50, seed=1)[1], D.make_isbor_synthetic(50, seed=1)[1])
    with pytest.raises(ValueError, match="increasing"):
        D.make_ordinal_probit(10, 2, 3, seed=0, thresholds=[1.0, 0.0])
    with pytest.raises(ValueError, match="shape"):
        D.make_ordinal_probit(10, 2, 3, seed=0, thresholds=[0.0])
    with pytest.raises(ValueError, match="shape"):
        D.make_ordinal_probit(10, 2, 3, seed=0, w=[1.0, 2.0, 3.0])
    with pytest.raises(ValueError, match="sigma"):
        D.make_ordinal_probit(10, 2, 3, seed=0, sigma=0.0)
    with pytest.raises(ValueError, match="link"):
        D.make_ordinal_probit(10, 2, 3, seed=0, link="gompertz")
    with pytest.raises(ValueError, match="n_classes"):
        D.make_ordinal_probit(10, 2, 1, seed=0)
    with pytest.raises(ValueError, match="noise_sd"):
        D.make_isbor_synthetic(10, seed=0, noise_sd=-1.0)
