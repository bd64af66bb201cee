"""Label encoding against a class order, checked against a lookup of each label on its own."""

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bayesord._validation import encode_known_labels


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
    with pytest.raises(ValueError, match="not in classes: nan"):
        encode_known_labels(np.array([1.0, np.nan]), [1.0, 2.0])
