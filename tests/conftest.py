"""Load the core once for the whole test session.

The plugin imports the core lazily (inside hooks), and pytester's in-process runs drop every module
first imported during the run when they finish; numpy and scipy C extensions cannot be imported a
second time in one process. Imported here, they are in place before any in-process run.
"""
import mltb_core.analysis.compare  # noqa: F401
import mltb_core.analysis.tables  # noqa: F401
import mltb_core.bench.datasources  # noqa: F401
import mltb_core.bench.grading  # noqa: F401
import mltb_core.bench.splits  # noqa: F401
import mltb_core.llm.prices  # noqa: F401
import mltb_core.planners  # noqa: F401
import mltb_core.runner.trial  # noqa: F401

# The scripted test backend registers itself when its module is first imported; importing it here, before
# any test swaps the registry (test_backends' fresh_registry), keeps it registered whatever the test order.
import scripted  # noqa: F401,E402


import importlib  # noqa: E402
import sys  # noqa: E402

import pytest  # noqa: E402


def pytest_collection_modifyitems(config, items):
    """Items marked ``heavy`` (the rest of the planner grid, over an hour on 2 cores) are deselected, not
    skipped, unless MLTB_HEAVY_TESTS=1: a run's skips are then only the real ones (a missing browser or
    model), each with its reason, and the summary counts the rest as deselected."""
    import os

    if os.environ.get("MLTB_HEAVY_TESTS") == "1":
        return
    heavy = [item for item in items if item.get_closest_marker("heavy") is not None]
    if heavy:
        items[:] = [item for item in items if item.get_closest_marker("heavy") is None]
        config.hook.pytest_deselected(items=heavy)


@pytest.fixture
def hostile_tools():
    """Register the tools of ``hostile_tools.py`` (what escaped code could do) for one test; the tool
    worker imports the same file, so they run inside a real, confined worker."""
    from mltb_core.toolkit.registry import REGISTRY

    sys.modules.pop("hostile_tools", None)
    with REGISTRY.scoped():
        module = importlib.import_module("hostile_tools")
        yield module.NAMES
    sys.modules.pop("hostile_tools", None)


@pytest.fixture
def ctx(tmp_path):
    """The tool tests' context (tests/tool_calls.py); a test module needing a data dir, task or seed overrides it."""
    from tool_calls import tool_context

    return tool_context(tmp_path)


@pytest.fixture
def one_request_per_candidate(monkeypatch):
    """Backends made in the test pay one LLM call per candidate, as a server without ``n`` does (the local
    model): the sim policy's reply to ``n`` candidates counts ``n`` calls and says so."""
    import mltb_core.llm as llm_module

    real = llm_module.make_backend

    def make_backend(*args, **kwargs):
        backend = real(*args, **kwargs)
        generate = backend._generate

        def per_candidate(messages, tools, n, *rest, **kw):
            response = generate(messages, tools, n, *rest, **kw)
            response.usage.calls = n
            return response
        backend._generate, backend.calls_per_candidate = per_candidate, True
        return backend

    monkeypatch.setattr(llm_module, "make_backend", make_backend)
