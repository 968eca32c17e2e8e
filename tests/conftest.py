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
