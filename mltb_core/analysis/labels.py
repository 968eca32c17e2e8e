"""How a model's figures are labelled wherever they are shown: the synthetic policy is never mistaken for an LLM."""
from __future__ import annotations

__all__ = ["SYNTHETIC_LABEL", "SYNTHETIC_BANNER", "model_label"]

# Shown wherever a synthetic (sim) model's figures appear, so nobody mistakes them for an LLM's.
SYNTHETIC_LABEL = "(synthetic policy, not an LLM)"
# The banner of every report page that holds sim rows (a sentence; the label above is a suffix to a model name).
SYNTHETIC_BANNER = ("Rows for sim models come from a synthetic policy, not an LLM: their figures measure the harness, "
                    "not a language model.")


def model_label(model: str, synthetic: bool) -> str:
    """The model name, marked when it is the synthetic policy."""
    return f"{model} {SYNTHETIC_LABEL}" if synthetic else model
