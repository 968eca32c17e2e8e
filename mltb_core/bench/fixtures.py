"""Where the bundled task specs, data, leaderboards, experts and prices live."""
from pathlib import Path

# fixtures/ lives at the repository root (the package is installed editable from there).
ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "fixtures"
