"""Baseline save and compare at the end of a run, and the exit status the regression gate decides."""
from __future__ import annotations

from pathlib import Path

import pytest

__all__ = ["Gate"]


class Gate:
    """``--save-baseline`` / ``--compare`` / ``--fail-on-regression`` (controller side)."""

    def __init__(self, settings):
        self.settings = settings
        self.comparison = None
        self.baseline_written: Path | None = None

    @property
    def requested(self) -> bool:
        return bool(self.settings.save_baseline or self.settings.compare)

    def finish(self, session: pytest.Session, records: list, other_failures: int) -> None:
        """Write the baseline and run the comparison; a regression sets exit status 1 (an inconclusive
        comparison does not: the summary says so loudly, see mltb_core.analysis.compare)."""
        from mltb_core.analysis.compare import (compare_to_baseline, load_baseline, parse_regression_spec,
                                                save_baseline)

        settings = self.settings
        if settings.save_baseline and records:
            self.baseline_written = Path(settings.save_baseline)
            save_baseline(self.baseline_written, records, seed=settings.seed)
        if settings.compare:
            thresholds = parse_regression_spec(settings.fail_on_regression) if settings.fail_on_regression else {}
            self.comparison = compare_to_baseline(load_baseline(Path(settings.compare)), records, thresholds,
                                                  seed=settings.seed, lost_share=settings.gate_lost_share)
            # Under --compare the gate decides: planner failures are benchmark results (they are in
            # consistency), so they alone do not fail the session; errors and other failures do.
            if self.comparison.failed:
                session.exitstatus = pytest.ExitCode.TESTS_FAILED
            elif session.exitstatus == pytest.ExitCode.TESTS_FAILED and not other_failures:
                session.exitstatus = pytest.ExitCode.OK

    def summary(self, terminal) -> None:
        if self.baseline_written:
            terminal.write_line(f"\nbaseline written to {self.baseline_written}")
        if self.comparison is not None:
            # red: a regression shown (exit 1); yellow: some comparisons could not be decided (exit 0)
            failed, inconclusive = self.comparison.failed, bool(self.comparison.inconclusive)
            terminal.write_line("")
            terminal.write_line(self.comparison.render(), red=failed, yellow=inconclusive and not failed,
                                bold=failed or inconclusive)


# Code outside these trees cannot change a benchmark result (docs, tests, reports, benchmarks/).
_RESULT_TREES = ("mltb_core/", "pytest_mltb/", "suites/", "fixtures/")


def _planner_modules() -> dict[str, list[str]]:
    """Each module file under mltb_core/planners/ → the registered planners a change to it can affect: those
    whose class or one of its base classes is defined there, or whose class is imported there (in PLANNERS
    order). A base class's module (``mcts.py``'s TreeSearch, ``base.py``'s Planner) gates every planner built
    on it."""
    import inspect
    import sys

    from mltb_core.planners import PLANNERS

    gated: dict[str, list[str]] = {}

    def gate(module: str, name: str) -> None:
        if module.startswith("mltb_core.planners."):
            names = gated.setdefault(module.replace(".", "/") + ".py", [])
            if name not in names:
                names.append(name)

    for name, planner in PLANNERS.items():
        for cls in inspect.getmro(planner):
            gate(cls.__module__, name)
        for module_name, module in list(sys.modules.items()):
            if module_name.startswith("mltb_core.planners.") and planner in vars(module).values():
                gate(module_name, name)
    return gated


def planners_for_changes(paths: list[str]) -> str:
    """The ``--planner`` value that gates a change to ``paths`` (repository-relative files): the planners a
    changed planner module can affect (:func:`_planner_modules`), or ``all`` when a change reaches every planner
    or touches what they share outside their class hierarchy (the search tree, rewards, tools, the runner,
    data...). A change that touches no result tree gates nothing: ``""``."""
    from mltb_core.planners import PLANNERS

    gated = _planner_modules()
    chosen: list[str] = []
    for path in (p.strip().lstrip("./") for p in paths if p.strip()):
        if not path.startswith(_RESULT_TREES):
            continue
        if path not in gated:
            return "all"
        chosen += [name for name in gated[path] if name not in chosen]
    if chosen and set(chosen) == set(PLANNERS):
        return "all"
    return ",".join(name for name in PLANNERS if name in chosen)


if __name__ == "__main__":   # python -m pytest_mltb.gating FILE... (the CI workflow's changed files)
    import sys

    print(planners_for_changes(sys.argv[1:]))
