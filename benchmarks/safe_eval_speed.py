"""Speed of the expression evaluator (mltb_core.toolkit.safe_eval) on a 10,000-row frame.

The allow-list checks run once per call node, not per row: a vector expression costs about as
much as the pandas work it does. Per-row lambdas (apply_custom_function) pay the tree walk per row.
Figures are medians of repeated runs, in milliseconds.
"""
from __future__ import annotations

import statistics
import time

import numpy as np
import pandas as pd

from _bench import Figure, emit, parser, load_average

VECTOR_EXPRESSIONS = (
    "RoomService + FoodCourt + ShoppingMall + Spa + VRDeck",
    "np.log1p(RoomService + FoodCourt)",
    "Cabin.str.split('/').str[0].fillna('U')",
    "df.groupby('HomePlanet')['Spa'].transform('mean')",
    "np.where(Age > 30, 1, 0) + Age.fillna(Age.median()).to_numpy()",
)
CONDITION = "Age > 30 and HomePlanet == 'Earth' or CryoSleep == True"
ROW_LAMBDA = "lambda x: x.split('/')[0] if isinstance(x, str) else None"


def frame(rows: int = 10_000) -> pd.DataFrame:
    rng = np.random.default_rng(0)
    spend = {c: rng.integers(0, 500, rows).astype(float) for c in
             ("RoomService", "FoodCourt", "ShoppingMall", "Spa", "VRDeck")}
    return pd.DataFrame({
        "HomePlanet": rng.choice(["Earth", "Europa", "Mars"], rows),
        "CryoSleep": rng.random(rows) > 0.5,
        "Cabin": [f"{'ABF'[i % 3]}/{i}/{'PS'[i % 2]}" for i in range(rows)],
        "Age": np.where(np.arange(rows) % 7 == 0, np.nan, rng.integers(1, 80, rows).astype(float)),
        **spend,
    })


def median_ms(thunk, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        thunk()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000


def main() -> None:
    from mltb_core.toolkit.safe_eval import compile_lambda, evaluate_condition, evaluate_expression
    args = parser(__doc__).parse_args()
    df = frame()
    figures = [Figure("load average", load_average())]
    for expr in VECTOR_EXPRESSIONS:
        plain = median_ms(lambda: eval(expr, {"np": np, "df": df}, dict(df.items())), 30)  # noqa: S307 - our text
        safe = median_ms(lambda: evaluate_expression(expr, df), 30)
        figures.append(Figure(f"expression {expr!r}", f"{safe:.2f} ms (plain pandas eval {plain:.2f} ms)"))
    figures.append(Figure(f"condition {CONDITION!r}", f"{median_ms(lambda: evaluate_condition(CONDITION, df), 30):.2f} ms"))
    fn = compile_lambda(ROW_LAMBDA)
    values = df["Cabin"].tolist()
    figures.append(Figure(f"lambda {ROW_LAMBDA!r} over 10,000 values",
                          f"{median_ms(lambda: [fn(v) for v in values], 5):.1f} ms"))
    emit("safe_eval speed (10,000 rows; medians)", figures, args.json)


if __name__ == "__main__":
    main()
