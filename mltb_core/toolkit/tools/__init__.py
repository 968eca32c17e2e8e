"""The toolset. Importing this package registers every tool in ``registry.REGISTRY``.

One module per workflow stage: loading, cleaning, features, modeling, evaluation.
"""
from mltb_core.toolkit.tools import loading, cleaning, features, modeling, evaluation  # noqa: F401  (registration)
from mltb_core.toolkit.registry import REGISTRY

__all__ = ["REGISTRY"]
