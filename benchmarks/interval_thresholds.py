"""The fewest trials at which Newcombe's rate-difference intervals (unpaired, paired) are printed, and their exact
coverage over the 39 x 39 grid of true rates at each n (mltb_core/analysis/coverage.py).

The rule (issue 57): an approximate interval is printed from the smallest N such that at every n >= N (checked up
to --up-to) its mean coverage over the grid lies in [0.935, 0.965] and at most 5 % of the grid's points fall below
0.90; paired: at dependence 0 and 0.5 both. The result is ``stats.NEWCOMBE_MIN_TRIALS``;
tests/test_interval_coverage.py checks it at N and N - 1. docs/statistics.md quotes the table printed here.

With ``--gate N...``: the gate's consistency verdict on one cell at N trials per side, exactly (GateRule): the
largest chance over the grid of REGRESSION on a true zero change and of ok on a true drop of d, per gated
comparisons m = 1, 4, 48 (docs/statistics.md, "Measured error rates"; tests/test_gate_operating.py recomputes
every row).

    python benchmarks/interval_thresholds.py [--up-to 40] [--paired-up-to 20] [--gate 2 3 4 6 8 11 20]
"""
from __future__ import annotations

import argparse

from mltb_core.analysis.coverage import DEPENDENCES, GateRule, acceptable, paired_coverage, unpaired_coverage

GATE_DROPS = (0.05, 0.2)
GATE_COMPARISONS = (1, 4, 48)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--up-to", type=int, default=40, help="largest n checked, unpaired")
    parser.add_argument("--paired-up-to", type=int, default=20, help="largest n checked, paired (n^3 tables)")
    parser.add_argument("--gate", type=int, nargs="*", help="print the gate's measured error rates at these n")
    args = parser.parse_args()
    if args.gate:
        print(gate_table(args.gate))
        return
    print("| n | unpaired: mean | share < 0.90 | minimum | paired (dependence 0 / 0.5): mean | share < 0.90 | "
          "minimum |")
    print("|---|---|---|---|---|---|---|")
    rows = {n: ([unpaired_coverage(n)], [paired_coverage(n, d) for d in DEPENDENCES] if n <= args.paired_up_to
                else None) for n in range(1, args.up_to + 1)}
    print(_table(rows))
    print()
    print("first n from which every larger n checked meets the rule:", _first(rows, "unpaired", 0),
          "(unpaired),", _first(rows, "paired", 1), "(paired)")


def gate_table(ns: list[int]) -> str:
    lines = ["| n | seeds | d | " + " | ".join(f"m = {m}" for m in GATE_COMPARISONS) + " |",
             "|---|---|---|" + "---|" * len(GATE_COMPARISONS)]
    for n in ns:
        for paired in (True, False):
            for drop in GATE_DROPS:
                cells = []
                for m in GATE_COMPARISONS:
                    rates = GateRule(n, drop, m, paired).rates()
                    cells.append(f"{rates.false_regression:.4f} / {rates.false_ok:.4f}")
                lines.append(f"| {n} | {'same' if paired else 'differ'} | {drop:g} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _first(rows: dict, kind: str, column: int) -> int | None:
    first = None
    for n in sorted(rows, reverse=True):
        grids = rows[n][column]
        if grids is None:
            continue
        if not acceptable(grids):
            break
        first = n
    return first


def _table(rows: dict) -> str:
    lines = []
    for n in sorted(rows):
        unpaired, paired = rows[n]
        u = unpaired[0]
        cells = [str(n), f"{u.mean:.4f}", f"{u.low_share:.3f}", f"{u.minimum:.3f}"]
        if paired is None:
            cells += ["", "", ""]
        else:
            cells += [" / ".join(f"{g.mean:.4f}" for g in paired), " / ".join(f"{g.low_share:.3f}" for g in paired),
                      " / ".join(f"{g.minimum:.3f}" for g in paired)]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
