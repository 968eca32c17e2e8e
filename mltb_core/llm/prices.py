"""Token prices (USD per 1M input/cached-input/output tokens) from an editable TOML table.

``cached_input`` is what the provider bills for prompt tokens served from its prompt cache (OpenAI:
``usage.prompt_tokens_details.cached_tokens``, a part of ``prompt_tokens``); without it in an entry,
cached tokens cost the full input rate.

The table is ``fixtures/prices.toml``, extended (entries replaced by name) by the table that
``MLTB_PRICES`` (or an explicit path) names. A model missing from the table is an error at backend
construction, so a run never silently reports $0 for a paid model.
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path

from mltb_core.bench.documents import read_document
from mltb_core.bench.fixtures import FIXTURES
from mltb_core.environment import read as read_environment

__all__ = ["Price", "PriceTable", "PriceTableError", "UnknownPriceError", "load_price_table",
           "DEFAULT_PRICES", "PRICES_ENV"]

DEFAULT_PRICES = FIXTURES / "prices.toml"
PRICE_FIELDS = ("input", "output", "cached_input")   # in Price's field order
PRICES_ENV = "MLTB_PRICES"


class PriceTableError(ValueError):
    """The price table file is missing or malformed."""


class UnknownPriceError(PriceTableError):
    """A model has no entry in the price table."""


@dataclass(frozen=True)
class Price:
    input_per_m: float
    output_per_m: float
    cached_input_per_m: float | None = None   # None: cached input costs the full input rate

    @property
    def cached_rate(self) -> float:
        return self.input_per_m if self.cached_input_per_m is None else self.cached_input_per_m

    def cost(self, prompt_tokens: int, completion_tokens: int, cached_input_tokens: int = 0) -> float:
        """USD for a call; ``cached_input_tokens`` are the part of ``prompt_tokens`` the server served
        from its prompt cache."""
        cached = min(max(cached_input_tokens, 0), prompt_tokens)
        return ((prompt_tokens - cached) * self.input_per_m + cached * self.cached_rate
                + completion_tokens * self.output_per_m) / 1_000_000


FREE = Price(0.0, 0.0)


class PriceTable:
    def __init__(self, prices: dict[str, Price], path: Path | None = None) -> None:
        self.prices = dict(prices)
        self.path = path

    def price(self, model: str) -> Price:
        """Price of ``model``: an exact entry, else the longest entry that prefixes a snapshot name."""
        if model in self.prices:
            return self.prices[model]
        prefixes = [name for name in self.prices if model.startswith(name + "-")]
        if prefixes:
            return self.prices[max(prefixes, key=len)]
        where = f" {self.path}" if self.path else ""
        raise UnknownPriceError(
            f"model {model!r} has no price in the price table{where}; add a [models.\"{model}\"] entry with "
            f"'input' and 'output' (USD per 1M tokens), or point {PRICES_ENV} at your own table. "
            f"Known: {', '.join(sorted(self.prices))}")

    def cost(self, model: str, prompt_tokens: int, completion_tokens: int, cached_input_tokens: int = 0) -> float:
        return self.price(model).cost(prompt_tokens, completion_tokens, cached_input_tokens)


def load_price_table(path: str | os.PathLike | None = None) -> PriceTable:
    """The bundled ``fixtures/prices.toml`` extended by the table at ``path``, else at ``$MLTB_PRICES``."""
    table = _read_table(DEFAULT_PRICES)
    extra = path or read_environment(PRICES_ENV)
    if not extra or Path(extra).resolve() == DEFAULT_PRICES.resolve():
        return table
    user = _read_table(Path(extra))
    return PriceTable({**table.prices, **user.prices}, user.path)


def _read_table(chosen: Path) -> PriceTable:
    data = read_document(chosen, "price table", "toml", PriceTableError)
    models = data.get("models")
    if not isinstance(models, dict):
        raise PriceTableError(f"price table {chosen} needs a [models.\"<name>\"] table per model")
    prices: dict[str, Price] = {}
    for name, entry in models.items():
        if not isinstance(entry, dict) or not {"input", "output"} <= set(entry) <= set(PRICE_FIELDS):
            raise PriceTableError(f"price table {chosen}: entry {name!r} must have 'input' and 'output' and may "
                                  f"have 'cached_input' (USD per 1M tokens), got {entry!r}")
        values = []
        for side in PRICE_FIELDS:
            if side not in entry:
                values.append(None)
                continue
            value = entry[side]
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
                    or value < 0:
                raise PriceTableError(f"price table {chosen}: entry {name!r} field {side!r} must be a "
                                      f"non-negative number, got {value!r}")
            values.append(float(value))
        prices[name] = Price(*values)
    return PriceTable(prices, chosen)
