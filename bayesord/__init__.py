"""bayesord: ordinal regression in JAX that says how sure it is."""

__version__ = "0.1.0"

__all__ = ["__version__"]
