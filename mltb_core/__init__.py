"""mltb core library: scratchpad, tools, tasks, grading, planners, LLM backends. No pytest here."""
from pathlib import Path

__version__ = "0.1.0"

# fixtures/ lives at the repository root (the package is installed editable from there).
ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"
