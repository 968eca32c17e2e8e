"""The toolset. Importing this package registers every tool in ``registry.REGISTRY``.

One module per workflow stage: loading, cleaning, features, modeling, evaluation.
"""
from . import loading, cleaning, features, modeling, evaluation  # noqa: F401  (registration)
from ..registry import REGISTRY

__all__ = ["REGISTRY"]
