"""Where the bundled task specs, data, leaderboards, experts and prices live: the package data
``mltb_fixtures`` (the repository's top-level ``fixtures/``, mapped in pyproject.toml)."""
import importlib.resources
from pathlib import Path

PACKAGE = "mltb_fixtures"


class FixturesNotFoundError(RuntimeError):
    pass


def source_tree() -> Path | None:
    """The checkout this code runs from (an editable install or a checkout on PYTHONPATH), or None when it
    runs from an installed package."""
    root = Path(__file__).resolve().parents[2]
    if (root / "pyproject.toml").is_file() and (root / "fixtures" / "__init__.py").is_file():
        return root
    return None


def _source_tree_fixtures() -> Path | None:
    """fixtures/ beside this code when it runs from a source tree (a checkout on PYTHONPATH).

    Several checkouts can share one installed ``mltb_fixtures`` (an editable install points at one
    of them), so code run from a checkout reads that checkout's own fixtures: code and data agree."""
    root = source_tree()
    return root / "fixtures" if root is not None else None


def _installed_fixtures() -> Path:
    try:
        location = importlib.resources.files(PACKAGE)
    except ModuleNotFoundError as exc:
        raise FixturesNotFoundError(
            f"mltb's package data ({PACKAGE}) is not installed: reinstall mltb (pip install mltb)") from exc
    # Everything downstream opens files by path (pandas, tomllib, subprocesses), so the data must
    # be on the file system, which every pip install (wheel or editable) gives.
    if not isinstance(location, Path):
        raise FixturesNotFoundError(f"mltb's package data is not on the file system ({location!r}); "
                                    "install mltb unzipped (pip install)")
    return location


FIXTURES: Path = _source_tree_fixtures() or _installed_fixtures()
