"""Compile + evaluate time of typical expressions in mltb's expression language, on a 10,000-row frame.

Each figure is the median of repeated runs, in milliseconds, of compile_expression(...).evaluate(df) (or
compile_lambda(...).apply(column)), beside plain pandas (Python's eval of the same text with the columns as
variables; trusted text, for scale only). ``--old FILE`` also times the allow-list evaluator the language
replaced (issue 20), loaded from a copy of its source, e.g.
``git show 6bc93b8:mltb_core/toolkit/safe_eval.py > /tmp/safe_eval.py``; it ran lambdas per value.
"""
from __future__ import annotations

import importlib.util
import statistics
import time

import numpy as np
import pandas as pd

from _bench import Figure, emit, load_average, parser

# (expression in the new language, the same in the old evaluator's pandas spelling)
EXPRESSIONS = (
    ("RoomService + FoodCourt + ShoppingMall + Spa + VRDeck", None),
    ("np.log1p(RoomService + FoodCourt)", None),
    ("Cabin.str.split('/').str[0].fillna('U')", None),
    ("np.where(Age > 30, 1, 0) + Age.fillna(Age.median())", None),
    ("str_contains(Cabin, '/P') and dt_year(Start) > 2020", "Cabin.str.contains('/P', regex=False) & "
                                                           "(pd.to_datetime(Start, format='mixed').dt.year > 2020)"),
)
CONDITION = "Age > 30 and HomePlanet == 'Earth' or CryoSleep == True"
LAMBDA = "lambda x: x.split('/')[0] if isinstance(x, str) else None"


def frame(rows: int = 10_000) -> pd.DataFrame:
    rng = np.random.default_rng(0)
    spend = {c: rng.integers(0, 500, rows).astype(float) for c in
             ("RoomService", "FoodCourt", "ShoppingMall", "Spa", "VRDeck")}
    return pd.DataFrame({
        "HomePlanet": rng.choice(["Earth", "Europa", "Mars"], rows),
        "CryoSleep": rng.random(rows) > 0.5,
        "Cabin": [f"{'ABF'[i % 3]}/{i}/{'PS'[i % 2]}" for i in range(rows)],
        "Age": np.where(np.arange(rows) % 7 == 0, np.nan, rng.integers(1, 80, rows).astype(float)),
        "Start": pd.date_range("2019-01-01", periods=rows, freq="h").astype(str),
        **spend,
    })


def median_ms(thunk, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        thunk()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000


def load_old(path: str):
    spec = importlib.util.spec_from_file_location("old_safe_eval", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main() -> None:
    from mltb_core.toolkit.expressions import compile_expression, compile_lambda, evaluate_condition
    cli = parser(__doc__)
    cli.add_argument("--old", metavar="FILE", help="the old safe_eval.py, to time it beside the language")
    args = cli.parse_args()
    old = load_old(args.old) if args.old else None
    df = frame()
    figures = [Figure("load average", load_average())]
    for expr, old_spelling in EXPRESSIONS:
        new = median_ms(lambda expr=expr: compile_expression(expr).evaluate(df), 30)
        note = ""
        if old is not None:
            old_text = old_spelling or expr
            note = f"; old evaluator {median_ms(lambda old_text=old_text: old.evaluate_expression(old_text, df), 30):.2f} ms"
        plain = median_ms(lambda text=old_spelling or expr: eval(text, {"np": np, "pd": pd, "df": df}, dict(df.items())), 30)  # noqa: S307
        figures.append(Figure(f"expression {expr!r}", f"{new:.2f} ms", note=f"plain pandas {plain:.2f} ms{note}"))
    note = ""
    if old is not None:
        note = f"old evaluator {median_ms(lambda: old.evaluate_condition(CONDITION, df), 30):.2f} ms"
    figures.append(Figure(f"condition {CONDITION!r}", f"{median_ms(lambda: evaluate_condition(CONDITION, df), 30):.2f} ms",
                          note=note))
    column = df["Cabin"]
    new = median_ms(lambda: compile_lambda(LAMBDA).apply(column), 10)
    note = "vectorised over the column"
    if old is not None:
        values = column.tolist()
        fn = old.compile_lambda(LAMBDA)
        note += f"; old evaluator, per value: {median_ms(lambda: [fn(v) for v in values], 5):.1f} ms"
    figures.append(Figure(f"lambda {LAMBDA!r} over 10,000 values", f"{new:.2f} ms", note=note))
    emit("expression language speed (10,000 rows; compile + evaluate; medians)", figures, args.json)


if __name__ == "__main__":
    main()
