"""Test configuration: float64 everywhere (the library itself never flips this switch)."""

import os
from pathlib import Path

import jax
import pytest

jax.config.update("jax_enable_x64", True)

DATASETS = Path(__file__).resolve().parents[1].parent / "shared" / "datasets"


@pytest.fixture(scope="session")
def datasets_dir():
    """Path to the shared benchmark data, or skip when this checkout has none beside it."""
    if not DATASETS.is_dir():
        pytest.skip(f"shared datasets folder not found at {DATASETS} (expected ../shared/datasets)")
    return DATASETS


os.environ.setdefault("MPLBACKEND", "Agg")
