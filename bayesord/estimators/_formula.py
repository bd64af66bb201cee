"""Formulas for the estimators: R-like terms through formulaic, plus lme4's ``(1 + x | group)``."""

from __future__ import annotations

import re
import warnings

from .._validation import missing_cells_message

__all__ = ["SavedCoding", "check_formula_data", "coding_state", "design_matrix", "formula_response",
           "formula_rows", "group_columns", "has_group_term", "slope_columns", "split_formula"]

# ``(1 | group)``, ``(1 + x | group)``: a group term of a formula (lme4's notation, as ``clmm`` uses it).
_GROUP_TERM = re.compile(r"\(\s*([^()|]*?)\s*\|\s*([^()|]*?)\s*\)")


def has_group_term(formula):
    """Whether ``formula`` has a ``(... | group)`` term."""
    return bool(_GROUP_TERM.search(formula))


def check_formula_data(formula, data, *columns):
    """``data`` must be a DataFrame holding ``columns``, the ones ``formula`` names outside
    its terms (its response, its group)."""
    import pandas as pd

    if not isinstance(data, pd.DataFrame):
        raise TypeError(f"data must be a pandas DataFrame, got {type(data).__name__}")
    for name in columns:
        if name not in data.columns:
            raise ValueError(f"formula {formula!r} names column {name!r}, which the data do not have "
                             f"(columns: {list(data.columns)})")


def predictors(data, response):
    """The columns a formula's terms are built from: every column of ``data`` but the
    response, as in R, where ``y ~ .`` means every other column.  (The terms alone, built
    from every column, would make the response a predictor of itself.)"""
    return data.drop(columns=response)


def formula_response(formula):
    """The response column's name in ``"response ~ terms"``."""
    if not isinstance(formula, str):
        raise TypeError(f"formula must be a string such as 'rating ~ temp + contact', got "
                        f"{type(formula).__name__}")
    if formula.count("~") != 1:
        raise ValueError(f"formula {formula!r} needs one '~' between the response and the terms")
    lhs = formula.split("~")[0].strip()
    if not lhs:
        raise ValueError(f"formula {formula!r} has no response before '~'")
    if re.fullmatch(r"`[^`]+`", lhs):  # a response whose name is not a Python name
        lhs = lhs[1:-1]
    return lhs


def split_formula(formula, group_term=True):
    """``"y ~ a + b + (1 + a | g)"`` -> ``("y", "a + b", "g", "a")``.

    With ``group_term`` the formula must have a ``(1 | group)`` or ``(1 + terms | group)``
    term (the fourth value is then its slope terms, or None), or several such terms
    ``(1 + a | g) + (1 | h)`` (the last two values are then the tuple of their groups and the
    tuple of their slope terms, ``("a", None)``); without, it must have none (and the last two
    values are None).  As in lme4, ``(x | g)`` means ``(1 + x | g)``, and ``(1 + x | a/b)``
    means ``(1 + x | a) + (1 + x | a:b)``; a group term without its intercept (``0 +`` or
    ``- 1``) is refused.
    """
    lhs, rhs = formula_response(formula), formula.split("~")[1].strip()
    terms = _GROUP_TERM.findall(rhs)
    if not group_term:
        if terms:
            raise ValueError(f"formula {formula!r} has a group term; fit it with OrdinalMixed")
        return lhs, rhs or "1", None, None
    if not terms:
        raise ValueError(f"formula {formula!r} needs a group term such as '(1 | group)'")
    groups, slopes = [], []
    for expr, group in terms:
        names, joins = _group_names(formula, group)
        group = ("/" if "/" in joins else ":").join(names)
        parts = [t.strip() for t in re.split(r"\+", expr)] if expr.strip() else [""]
        if "" in parts or any(t in ("0", "-1") or t.startswith("-") or " - " in t for t in parts):
            raise ValueError(f"formula {formula!r}: the group term '({expr} | {group})' must keep its "
                             f"intercept and add slopes with '+', as '(1 | {group})' or '(1 + x | {group})'")
        # lme4's nesting: a/b is a and a:b, each with the term's slopes
        nested = [":".join(names[:k + 1]) for k in range(len(names))] if "/" in joins else [group]
        groups += nested
        slopes += [" + ".join(t for t in parts if t != "1") or None] * len(nested)
    if len(set(groups)) != len(groups):
        raise ValueError(f"formula {formula!r} names a group twice; give each grouping factor one term")
    fixed = _GROUP_TERM.sub(" ", rhs)
    fixed = re.sub(r"\+\s*(?=\+|$)", "", fixed.strip()).strip().lstrip("+").strip() or "1"
    if len(groups) == 1:
        return lhs, fixed, groups[0], slopes[0]
    return lhs, fixed, tuple(groups), tuple(slopes)


# A column name in a group term: a Python name, or a name in backticks without ':' or '/'
# (which join the names of a group).
_GROUP_NAME = r"(?:\w+|`[^`:/]+`)"


def _group_names(formula, group):
    """The column names of a group term's group (backticks removed) and the operators that
    join them (all ':' or all '/').

    Raises:
        ValueError: anything else, such as a name with a space outside backticks.
    """
    group = group.strip()
    if group and re.fullmatch(rf"{_GROUP_NAME}(?:\s*[:/]\s*{_GROUP_NAME})*", group):
        joins = re.findall(r"[:/]", group)  # a name in backticks holds neither
        if not (":" in joins and "/" in joins):
            names = [n.strip("`") for n in re.findall(_GROUP_NAME, group)]
            return names, joins
    bare = re.sub(r"`[^`]*`", "", group)
    spaced = " (a column name with spaces goes in backticks, e.g. `wine region`)" if re.search(r"\w\s+\w", bare) \
        else ""
    raise ValueError(f"formula {formula!r}: the group in '(1 | group)' must be one column name, "
                     f"columns joined by ':' (their combinations) or by '/' (nested factors){spaced}")


def group_columns(data, factors):
    """The grouping factors' labels from ``data``: one column per factor, a factor ``a:b``
    being the combination of columns ``a`` and ``b`` (labels ``"<a>:<b>"``; missing where
    either is).  The same for fitting and for prediction."""
    import pandas as pd

    out = {}
    for factor in factors:
        parts = [data[name] for name in factor.split(":")]
        if len(parts) == 1:
            out[factor] = parts[0]
            continue
        missing = pd.concat([p.isna() for p in parts], axis=1).any(axis=1)
        joined = parts[0].astype(str).str.cat([p.astype(str) for p in parts[1:]], sep=":")
        out[factor] = joined.mask(missing)
    return pd.DataFrame(out, index=data.index)


def slope_columns(formula, slope_terms, data, fixed_columns):
    """The columns of the fixed design (``fixed_columns``) that the group term's slope terms
    code, e.g. ``["temp[T.warm]"]`` for ``(1 + temp | judge)``; ``[]`` for None.

    Raises:
        ValueError: a slope term that codes a column the fixed terms do not have.
    """
    if slope_terms is None:
        return []
    from formulaic import model_matrix
    from formulaic.errors import FactorEvaluationError, FormulaParsingError

    try:
        columns = [c for c in model_matrix(slope_terms, data, na_action="raise").columns if c != "Intercept"]
    except FactorEvaluationError as err:
        raise ValueError(f"the formula's group term names something the data does not have: {err}") from None
    except FormulaParsingError as err:
        raise ValueError(_unparsed(slope_terms, err)) from None
    except ValueError as err:
        _refuse_missing(err, data, slope_terms)
    missing = [c for c in columns if c not in fixed_columns]
    if missing:
        raise ValueError(f"formula {formula!r}: the random slopes {missing} need the same terms among the "
                         f"fixed effects (add '{slope_terms}' before the group term)")
    return columns


# A categorical factor a saved coding can rebuild: a column, or ``C(column)``.
_PLAIN_FACTOR = re.compile(r"(?:C\(\s*(\w+)\s*\)|(\w+))")


def coding_state(spec):
    """What a model file keeps of a formula's coding (JSON): the formula, each text column's
    levels in their coding order, and the columns it made.

    Raises:
        ValueError: the coding holds more than that (a stateful transform such as
            ``center(x)``, or a categorical factor that is an expression rather than a
            column), which a saved model could not reproduce.
    """
    if isinstance(spec, SavedCoding):
        return {"formula": spec.formula, "levels": spec.levels, "columns": spec.columns}
    if spec.transform_state:
        raise ValueError(f"a model whose formula has stateful transforms ({sorted(spec.transform_state)}) "
                         "cannot be saved: transform the columns in the DataFrame instead")
    levels = {}
    for factor, name, categories in _categorical_levels(spec):
        if name is None:
            raise ValueError(f"a model whose formula codes the expression {factor!r} as categorical "
                             "cannot be saved: make it a column of the DataFrame")
        levels[name] = categories
    return {"formula": _formula_text(spec.formula), "levels": levels, "columns": list(spec.column_names)}


def _categorical_levels(spec):
    """``(factor, column, levels)`` of each categorical factor of a fitted ``ModelSpec``: the
    column it reads (a column, or ``C(column)``; None for another expression) and its levels
    in their coding order."""
    columns = {f.expr for term in spec.formula for f in term.factors if _is_lookup(f)}
    for factor, (kind, state) in spec.encoder_state.items():
        if getattr(kind, "value", kind) != "categorical":
            continue
        name = str(factor)
        if name not in columns:  # C(column), or an expression
            match = _PLAIN_FACTOR.fullmatch(name)
            name = None if match is None else match.group(1) or match.group(2)
        yield factor, name, [v.item() if hasattr(v, "item") else v for v in state["categories"]]


def _unseen_message(name, values, levels):
    """The refusal of a column ``name`` whose ``values`` hold a level not among the fitted
    ``levels``, naming them; None when there is none."""
    unseen = sorted(set(values.dropna().tolist()) - set(levels), key=str)
    if not unseen:
        return None
    return (f"the data have a category the model was not fitted with (column {name!r}: {unseen[:5]}; "
            f"fitted levels {levels})")


def _is_lookup(factor):
    """Whether a formulaic factor is a column read by name (not an expression or a literal)."""
    return getattr(factor.eval_method, "value", factor.eval_method) == "lookup"


def _formula_text(formula):
    """A fitted formula's terms as formulaic parses them back: column names in backticks, as
    formulaic's own rendering does not put them (``1 + fixed acidity`` does not parse, so a
    saved model of a CSV with spaces in its column names could not predict), expressions and
    literals as written."""
    def factor(f):
        return f"`{f.expr}`" if _is_lookup(f) else f.expr

    return " + ".join(":".join(factor(f) for f in term.factors) for term in formula)


class SavedCoding:
    """A formula's coding rebuilt from :func:`coding_state`: each text column is read as a
    categorical with the fitted levels, so the formula codes it as the fit did (the same
    reference level and columns), and a level the fit has not seen is refused."""

    def __init__(self, state):
        self.formula = state["formula"]
        self.levels = state["levels"]
        self.columns = list(state["columns"])

    def model_matrix(self, data):
        import pandas as pd
        from formulaic import model_matrix

        data = data.copy()
        for name, levels in self.levels.items():
            if name not in data.columns:
                raise ValueError(f"the formula names something the data do not have: column {name!r}")
            unseen = _unseen_message(name, data[name], levels)
            if unseen:
                raise ValueError(unseen)
            data[name] = pd.Categorical(data[name], categories=levels)
        mm = model_matrix(self.formula, data, na_action="raise")
        if list(mm.columns) != self.columns:
            raise ValueError(f"the saved formula {self.formula!r} codes these data into columns "
                             f"{list(mm.columns)}, not the fitted {self.columns}")
        return mm


# formulaic's message for a term with missing values (its na_action="raise").
_NULLS = re.compile(r"`([^`]+)` contains null values")


def _refuse_missing(err, data, formula):
    """Re-raise formulaic's ``err`` as it is, or, when it is about missing values, as the
    command line words them: every column of the data that ``formula`` reads and that has
    missing values (formulaic names the first term it happened to evaluate, which varied
    from run to run), and their first rows.  A formula model never drops rows (formulaic's
    default would, leaving ``X`` shorter than ``y`` in ``fit`` and fewer predictions than
    rows in ``predict``)."""
    from formulaic import Formula

    match = _NULLS.search(str(err))
    if match is None:
        raise err
    used = Formula(str(getattr(formula, "formula", formula))).required_variables
    columns = [c for c in data.columns if c in used and data[c].isna().any()]
    if columns:
        message = missing_cells_message(data[columns].isna().to_numpy(), columns, "the data")
    else:
        message = f"the formula's term {match.group(1)!r} has missing values; drop or impute them explicitly"
    raise ValueError(f"{message}: a formula model codes every row it is given and drops none") from None


def _unparsed(formula, err):
    """formulaic's parsing error as one line (its message goes on with the formula marked up
    in terminal colours), with the usual cause: a column name that is not a Python name."""
    first = str(err).strip().splitlines()[0]
    return (f"the formula's terms {str(formula)!r} do not parse: {first} Put a column name with spaces or "
            "symbols in backticks, e.g. `fixed acidity`")


def design_matrix(spec_or_formula, data):
    """The fixed-effects design matrix (a DataFrame without the intercept) and its spec.

    Raises ValueError for a formula naming a column that ``data`` lacks, a category the fit
    has not seen, missing values in a column it codes, or a formula without the intercept
    (the thresholds take its place).
    """
    from formulaic import ModelSpec, model_matrix
    from formulaic.errors import FactorEvaluationError, FormulaParsingError

    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("error", message=".*categories outside of the nominated levels.*")
            if isinstance(spec_or_formula, SavedCoding):
                mm = spec_or_formula.model_matrix(data)
            elif isinstance(spec_or_formula, ModelSpec):
                mm = spec_or_formula.get_model_matrix(data, na_action="raise")
            else:
                mm = model_matrix(spec_or_formula, data, na_action="raise")
    except FactorEvaluationError as err:
        raise ValueError(f"the formula names something the data does not have: {err}") from None
    except FormulaParsingError as err:
        raise ValueError(_unparsed(spec_or_formula, err)) from None
    except ValueError as err:
        _refuse_missing(err, data, spec_or_formula)
    except Warning as err:
        found = _unseen_levels(spec_or_formula, data)
        raise ValueError(found or f"the data have a category the model was not fitted with ({err})") from None
    if "Intercept" not in mm.columns:
        raise ValueError("keep the intercept in an ordinal formula (no '- 1' or '+ 0'): the "
                         "thresholds take its place, and without it a categorical term is coded "
                         "with one column too many")
    spec = spec_or_formula if isinstance(spec_or_formula, SavedCoding) else mm.model_spec
    return mm.drop(columns="Intercept"), spec


def _unseen_levels(spec, data):
    """The refusal naming a text column of ``data`` with a level that the fitted coding
    ``spec`` (a ``ModelSpec``; None for a formula not yet fitted) has not seen, or None."""
    if not hasattr(spec, "encoder_state"):
        return None
    for _, name, levels in _categorical_levels(spec):
        if name is not None and name in data.columns:
            unseen = _unseen_message(name, data[name], levels)
            if unseen:
                return unseen
    return None


def formula_rows(spec, data):
    """The design matrix of ``data`` under the coding a model was fitted with: ``spec``, or a
    tuple of specs (a model with several formulas) whose columns are joined, each name once."""
    import pandas as pd

    if not isinstance(data, pd.DataFrame):
        raise TypeError("this model was fitted from a formula: pass a DataFrame with the formula's columns")
    if not isinstance(spec, tuple):
        return design_matrix(spec, data)[0]
    A = pd.concat([design_matrix(s, data)[0] for s in spec], axis=1)
    return A.loc[:, ~A.columns.duplicated()]
