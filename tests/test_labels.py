"""Label encoding against a class order, checked against a lookup of each label on its own."""

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bayesord._validation import encode_known_labels, encode_labels


def one_by_one(values, classes):
    """The reference: each label compared with each class in turn (numbers by value)."""
    def same(a, b):
        if isinstance(a, (bool, np.bool_)) or isinstance(b, (bool, np.bool_)):
            return type(a) is type(b) and a == b
        if isinstance(a, str) or isinstance(b, str):
            return isinstance(a, str) and isinstance(b, str) and a == b
        return float(a) == float(b)

    codes = []
    for v in values:
        hits = [k for k, c in enumerate(classes) if same(v, c)]
        codes.append(hits[0] if hits else -1)
    return np.array(codes)


label = st.one_of(st.integers(-3, 3), st.sampled_from([0.5, 2.0, -1.0]), st.sampled_from(["a", "b", "c"]))


@settings(max_examples=300, deadline=None)
@given(st.data(), st.lists(label, min_size=1, max_size=6, unique_by=repr), st.booleans())
def test_codes_equal_a_lookup_of_each_label(data, classes, as_array):
    """Labels drawn mostly from the classes (a few from outside), as a list of mixed types or
    as a NumPy array, encode as a label-by-label lookup does."""
    keys = [("s", c) if isinstance(c, str) else ("n", float(c)) for c in classes]
    values = data.draw(st.lists(st.one_of(st.sampled_from(classes), label), min_size=1, max_size=40))
    if as_array:
        values = np.asarray(values)  # a mixed list becomes strings: they must match as strings
        values_seen = values.tolist()
    else:
        values_seen = values
    if len(set(keys)) < len(keys):  # 2 and 2.0 are one class: the encoder refuses that order
        with pytest.raises(ValueError, match="twice"):
            encode_known_labels(values, classes)
        return
    expected = one_by_one(values_seen, classes)
    if np.any(expected < 0):
        with pytest.raises(ValueError, match="not in classes"):
            encode_known_labels(values, classes)
        return
    codes, _ = encode_known_labels(values, classes)
    np.testing.assert_array_equal(codes, expected)


@pytest.mark.parametrize("values", [
    np.array([3, 1, 2, 3, 1]),
    np.array([3.0, 1.0, 2.0, 3.0, 1.0]),
    np.array(["hi", "lo", "mid", "hi", "lo"]),
    pd.Series(["hi", "lo", "mid", "hi", "lo"]),
    pd.Categorical(["hi", "lo", "mid", "hi", "lo"]),
])
def test_arrays_series_and_categoricals_encode_as_lists_do(values):
    numeric = np.asarray(values).dtype.kind in "if"
    classes = [1, 2, 3] if numeric else ["lo", "mid", "hi"]
    codes, out = encode_known_labels(values, classes)
    np.testing.assert_array_equal(codes, [2, 0, 1, 2, 0])
    assert list(out) == classes


def test_unknown_labels_are_named_once_each():
    with pytest.raises(ValueError, match=r"y contains labels not in classes: 7, 9$"):
        encode_known_labels(np.array([1, 9, 7, 9, 2, 7]), [1, 2, 3])
    with pytest.raises(ValueError, match=r"y contains 1 missing label\(s\) \(first rows, 0-based: \[1\]\)"):
        encode_known_labels(np.array([1.0, np.nan]), [1.0, 2.0])


@pytest.mark.parametrize("labels", [
    np.array([1.0, np.nan, 2.0, np.nan]),
    np.array(["low", None, "high", np.nan], dtype=object),
    pd.Series(["low", None, "high", pd.NA], dtype=object),
    pd.Series(pd.Categorical(["low", None, "high", None], categories=["low", "high"], ordered=True)),
])
def test_missing_labels_are_named_by_their_rows_with_or_without_classes(labels):
    """A user's NaN label was reported as an unknown label ``nan``, without rows."""
    numeric = np.asarray(labels).dtype.kind == "f"
    for classes in ([1.0, 2.0] if numeric else ["low", "high"], None):
        if classes is None and not numeric and not hasattr(labels, "cat"):
            continue  # text without an order is refused for that first
        with pytest.raises(ValueError, match=r"y contains 2 missing label\(s\) \(first rows, 0-based: \[1, 3\]\)"):
            encode_labels(labels, classes)


def test_labels_that_match_the_classes_only_as_text_say_so():
    with pytest.raises(ValueError, match=r"not in classes: 1, 2, 5\.  They are classes written as another type "
                                         r"\(int labels, str classes\)"):
        encode_known_labels(np.array([1, 2, 5, 1]), ["1", "2", "5"])
    with pytest.raises(ValueError, match=r"not in classes: 1, 7$"):  # 7 is no class as text either
        encode_known_labels(np.array([1, 7]), ["1", "2"])


def test_an_ordered_categorical_and_classes_in_another_order_are_refused():
    y = pd.Categorical(["low", "mid", "high"], categories=["high", "mid", "low"], ordered=True)
    with pytest.raises(ValueError, match=r"order \(high < mid < low\) is not the order of classes "
                                         r"\(low < mid < high\): pass one order"):
        encode_labels(y, ["low", "mid", "high"])
    codes, classes = encode_labels(y, ["high", "mid", "low"])
    assert codes.tolist() == [2, 1, 0] and classes.tolist() == ["high", "mid", "low"]
    # An unordered one takes the order from classes.
    assert encode_labels(pd.Categorical(["low", "high"]), ["low", "mid", "high"])[0].tolist() == [0, 2]


@given(st.lists(st.integers(-(2**40), 2**40), min_size=1, max_size=60), st.integers(0, 3),
       st.sampled_from(["int8", "uint8", "int32", "int64", "uint64"]), st.integers(0, 2**40))
@settings(max_examples=200, deadline=None)
def test_numeric_labels_without_classes_are_their_sorted_distinct_values(values, scale, dtype, shift):
    # Narrow and wide ranges (a table of the range or a sort), every integer dtype: the
    # classes are the sorted distinct labels and each code a label's position among them.
    info = np.iinfo(dtype)
    values = np.asarray(values) // (2 ** (10 * scale)) + (shift if dtype.startswith("u") else 0)
    y = np.clip(values, info.min, info.max).astype(dtype)
    if np.unique(y).size < 2:
        y = np.r_[y, y[0] ^ 1].astype(dtype)
    codes, classes = encode_labels(y)
    np.testing.assert_array_equal(classes, np.unique(y))
    assert classes.dtype == y.dtype and codes.dtype == np.int32
    np.testing.assert_array_equal(classes[codes], y)


def test_text_labels_without_an_order_are_listed_in_the_error():
    with pytest.raises(ValueError, match=r"\(high, low, mid\) have no natural order; pass classes=\[\.\.\.\]"):
        encode_labels(np.array(["low", "high", "mid", "low"]))
    many = np.array([f"g{i:02d}" for i in range(12)])
    with pytest.raises(ValueError, match=r"\(g00, g01, .*, g09, \.\.\.\) have no natural order"):
        encode_labels(many)


def test_a_one_column_frame_of_labels_is_told_to_pass_the_column():
    """``y.ravel()`` was the advice, which a DataFrame does not have."""
    frame = pd.DataFrame({"label": [1, 2, 1]})
    with pytest.raises(ValueError, match=r"one-column DataFrame: pass the column itself, frame\['label'\]"):
        encode_labels(frame)
    with pytest.raises(ValueError, match=r"column vector of shape \(n, 1\): use y\.ravel\(\)"):
        encode_labels(frame.to_numpy())


def test_an_unused_category_of_the_labels_is_named_with_the_remedy():
    from bayesord import OrdinalProbit

    y = pd.Series(pd.Categorical(["lo", "mid"] * 10, categories=["lo", "mid", "hi"], ordered=True))
    X = np.random.default_rng(0).normal(size=(20, 1))
    with pytest.raises(ValueError, match=r"classes \['hi'\] have no training samples; they are categories of y "
                                         r"that no row holds .* y\.cat\.remove_unused_categories\(\) drops them"):
        OrdinalProbit().fit(X, y)
    assert OrdinalProbit().fit(X, y.cat.remove_unused_categories()).classes_.tolist() == ["lo", "mid"]
