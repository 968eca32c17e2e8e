"""Hooks the mltb plugin calls, for conftest.py files and other plugins (added with ``pytest_addhooks``).

Implement them like any pytest hook, e.g. in a ``conftest.py`` next to the benchmark suite::

    import pytest

    @pytest.hookimpl(wrapper=True)
    def pytest_mltb_run_trial(case, config):
        record = yield              # the real trial (or the next implementation)
        record.extra["host"] = "ci-7"
        return record

Their names start with ``pytest_`` because pytest only looks for hook implementations under that
prefix (as ``pytest_benchmark_*`` and ``pytest_xdist_*`` do). A conftest in the rootdir is loaded by
xdist workers too, so the hooks run wherever the items run.
"""
from __future__ import annotations

import pluggy

hookspec = pluggy.HookspecMarker("pytest")


@hookspec(firstresult=True)
def pytest_mltb_trial_config(case, config):
    """Return a ``TrialConfig`` to use for ``case`` instead of ``config`` (built from the options), or None.

    Called once per case and process, when the case list is built. The records carry the hash of the
    config their trial used, and ``--resume`` matches records against it.
    """


@hookspec(firstresult=True)
def pytest_mltb_run_trial(case, task, config, out_dir, split):
    """Run one attempt of ``case``'s trial and return its ``TrialRecord``.

    ``task`` is the case's ``Task``, ``config`` its ``TrialConfig``, ``out_dir`` the attempt's work
    directory, ``split`` the prepared benchmark split. Called in the process that runs the item (an
    xdist worker), once per attempt (an ``infra_error`` record is retried up to ``--infra-retries``
    times). The plugin's own implementation runs last and calls ``mltb_core.runner.trial.run_trial``;
    return a record to replace it, or wrap it (``wrapper=True``) to act before or after.
    """


def pytest_mltb_report_sections(sections, config):
    """Change the sections of the report a ``--mltb-report`` run writes, in place: ``sections`` is the list of
    ``mltb_core.analysis.sections.Section`` objects in order (every registered one); append a ``Section``,
    replace one (same ``name``) or remove one. Called in the controller, once, before the report is written.
    (A plug-in package adds sections for ``mltb report`` too, through the ``mltb.report_sections`` entry points.)
    """


def pytest_mltb_record_written(record, run_dir):
    """``record`` (a ``TrialRecord``) was appended to ``<run_dir>/results.jsonl``.

    Called in the controller (the process that owns the run directory), after the trajectory was
    written beside it; ``record.trajectory`` is then relative to ``run_dir``. Also called for the
    infrastructure-error record of an item whose xdist worker crashed.
    """
