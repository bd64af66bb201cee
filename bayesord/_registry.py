"""The list of estimators, in one place.

The command line (``--model``), :func:`bayesord.load_model`, the package's lazy exports
and the documentation's tables read it.  Only names are held here (nothing is imported),
so the command line can list its models without starting JAX; the classes live in
:mod:`bayesord.estimators`.
"""

from __future__ import annotations

from typing import NamedTuple, Optional

__all__ = ["Entry", "ESTIMATORS", "COMMANDS"]


class Entry(NamedTuple):
    """One estimator."""

    name: str
    """Its class name in :mod:`bayesord.estimators`."""
    command: Optional[str]
    """Its ``bayesord fit --model`` name; None where the command line does not fit it
    (a model that needs more than a feature table, such as a grouping column)."""
    bayesian: bool
    """Whether it has a posterior of its own (else its probabilities and sets come from the
    calibration layer)."""


ESTIMATORS = (
    Entry("OrdinalProbit", "probit", True),
    Entry("OrdinalMixed", None, True),
    Entry("CumulativeLinkModel", None, True),
    Entry("ISBOR", "isbor", True),
    Entry("SBOR", "sbor", True),
    Entry("NPSVOR", "npsvor", False),
    Entry("CuSumRank", "cusum", False),
    Entry("PRank", "prank", False),
    Entry("SwappedPairsSVM", "swapped-pairs", False),
    Entry("RedSVM", "redsvm", False),
    Entry("TransductiveOrdinalRegression", "tor", False),
)

COMMANDS = {entry.command: entry for entry in ESTIMATORS if entry.command is not None}
"""``--model`` name -> :class:`Entry`."""
