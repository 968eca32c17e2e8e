"""Task specs: one TOML (or YAML) file per challenge, loaded into frozen :class:`Task` objects.

The 15 challenges of the paper live in ``fixtures/tasks/``; users add their own by
pointing ``MLTB_TASKS_DIR`` (an ``os.pathsep`` list) or ``extra_dirs`` at directories
of specs. A spec whose slug an earlier directory already defines (a bundled task,
say) is an error naming both files, unless it says ``overrides = true``: replacing a
task must be deliberate. Slugs are identifiers (:data:`SLUG_PATTERN`) because paths
(splits, caches, data) are built from them. Every spec problem is a
:class:`TaskSpecError` naming the file and the field.
"""
from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import FIXTURES

__all__ = [
    "SUBMISSION_FILE", "TASKS_DIR", "PROBLEM_TYPES", "PREDICTIONS", "SOURCES", "KNOWN_METRICS",
    "Task", "TaskSpecError", "UnknownTaskError", "load_tasks", "get_task", "metric_directions", "SLUG_PATTERN",
    "is_slug",
]

SUBMISSION_FILE = "submission.csv"
TASKS_DIR = FIXTURES / "tasks"
TASKS_DIR_ENV = "MLTB_TASKS_DIR"

# Lower-case letters, digits and '-', first not '-', at most 80 characters (Kaggle's own slugs fit):
# no '/', '.' or '..' can reach a path built from a slug.
SLUG_PATTERN = re.compile(r"[a-z0-9][a-z0-9-]{0,79}")
SLUG_RULE = "lower-case letters, digits and '-', not starting with '-', at most 80 characters"

PROBLEM_TYPES = ("regression", "binary", "multiclass")
PREDICTIONS = ("label", "probability")
SOURCES = ("bundled", "replica", "kaggle")
# Fallback when mltb_core.metrics is not importable: metric name -> greater_is_better.
KNOWN_METRICS = {"accuracy": True, "macro_f1": True, "roc_auc": True, "gini": True, "mcc": True,
                 "rmse": False, "rmsle": False}

_REQUIRED_TEXT = ("slug", "title", "problem_type", "target", "id_column", "metric", "prediction",
                  "source", "summary")
_OPTIONAL_TEXT = ("leaderboard", "leaderboard_public", "builder", "data", "submission_values",
                  "kaggle_competition", "data_origin")


class TaskSpecError(ValueError):
    """A task spec file is unreadable or has a missing / invalid field."""

    def __init__(self, path: Path | str, field_name: str | None, problem: str):
        self.path = Path(path)
        self.field = field_name
        where = f"{self.path}" + (f": field '{field_name}'" if field_name else "")
        super().__init__(f"{where}: {problem}")


def is_slug(text: Any) -> bool:
    """Whether ``text`` is a well-formed task slug (safe to build a path from)."""
    return isinstance(text, str) and SLUG_PATTERN.fullmatch(text) is not None


class UnknownTaskError(KeyError):
    """No task spec has the requested slug."""

    def __init__(self, slug: str, valid: Iterable[str]):
        self.slug = slug
        self.valid = sorted(valid)
        super().__init__(f"unknown task {slug!r}; valid slugs: {', '.join(self.valid) or '(none)'}")

    def __str__(self) -> str:  # KeyError would repr() the message
        return self.args[0]


def metric_directions() -> dict[str, bool]:
    """Metric name -> greater_is_better, from mltb_core.metrics when it exists."""
    try:
        from .metrics import METRICS  # imported lazily: metrics.py is owned elsewhere
    except ImportError:
        return dict(KNOWN_METRICS)
    # Entries are Metric objects (greater_is_better attribute) or (function, greater_is_better) pairs.
    return {name: bool(entry.greater_is_better if hasattr(entry, "greater_is_better") else entry[1])
            for name, entry in METRICS.items()}


@dataclass(frozen=True)
class Task:
    """One benchmark challenge, as described by its spec file."""

    slug: str
    title: str
    problem_type: str
    target: str
    id_column: str
    metric: str
    prediction: str
    source: str
    leaderboard: str | None
    leaderboard_teams: int | None
    builder: str | None
    data: str | None
    summary: str
    fields: dict[str, str] = field(hash=False)
    spec_path: Path = field(compare=False)
    # Extras beyond the fixed interface (all optional in the spec).
    leaderboard_public: str | None = None
    submission_values: str | None = None       # e.g. "True or False"; shown in the prompt
    kaggle_competition: str | None = None      # defaults to the slug
    data_origin: str | None = None             # competition | competition-sample | original | replica
    provenance: dict[str, Any] = field(default_factory=dict, hash=False, compare=False)
    overrides: bool = field(default=False, compare=False)   # the spec replaces an earlier one on purpose

    def __post_init__(self) -> None:
        if not is_slug(self.slug):  # every path built from task.slug relies on this
            raise ValueError(f"task slug {self.slug!r} is not an identifier ({SLUG_RULE})")

    @property
    def greater_is_better(self) -> bool:
        return metric_directions()[self.metric]

    @property
    def has_offline_data(self) -> bool:
        """True when the labelled frame can be built without network (bundled files or a replica)."""
        return self.source in ("bundled", "replica") or self.data is not None

    @property
    def is_replica(self) -> bool:
        return self.source == "replica"

    @property
    def is_classification(self) -> bool:
        return self.problem_type in ("binary", "multiclass")

    @property
    def competition(self) -> str:
        """The Kaggle competition slug used by the Kaggle loader."""
        return self.kaggle_competition or self.slug

    @property
    def data_path(self) -> Path | None:
        """A user spec's own labelled CSV, resolved relative to the spec file."""
        if self.data is None:
            return None
        path = Path(os.path.expanduser(self.data))
        return path if path.is_absolute() else (self.spec_path.parent / path)

    def prompt(self, data_dir: Path, output_path: Path) -> str:
        """The task instruction in the paper's template (Appendix H), in our own words."""
        data_dir = Path(data_dir)
        lines: list[str] = []
        if self.is_replica:
            lines += [_REPLICA_NOTICE, ""]
        lines += [f"# {self.title}", "", self.summary.strip(), "", "## File and Data Field Descriptions", ""]
        lines += [f"- {name} – {text.strip()}" for name, text in self.fields.items()]
        if self.target not in self.fields:
            lines.append(f"- {self.target} – the target to predict.")
        lines += ["", "## Submission File Format", "",
                  f"- {self.id_column} – identifier of each row of the test set.",
                  f"- {self.target} – {self._submission_text()}", "",
                  "## Benchmark Instructions", "",
                  f"- The training data is located at {data_dir / 'train.csv'}.",
                  f"- The test data is located at {data_dir / 'test.csv'}.",
                  "- Load, clean, and perform feature engineering before fitting models.",
                  "- Concatenate train and test datasets before preprocessing to ensure consistent "
                  "transformations, then split back.",
                  "- Experiment with multiple models and hyperparameter tuning to find the best-performing "
                  "solution.",
                  "- Report evaluation results demonstrating model fit.",
                  f"- Save the predictions for the test set in CSV format to {output_path}.",
                  f"- Submissions are scored with {_METRIC_LABELS.get(self.metric, self.metric)} "
                  f"({'higher' if self.greater_is_better else 'lower'} is better)."]
        if self.is_replica:
            lines += ["", _REPLICA_NOTICE]
        return "\n".join(lines) + "\n"

    def _submission_text(self) -> str:
        if self.prediction == "probability":
            return f"predicted probability that {self.target} is 1 (a number between 0 and 1)."
        values = f" ({self.submission_values})" if self.submission_values else ""
        kind = "predicted value" if self.problem_type == "regression" else "predicted class label"
        return f"{kind}{values}, in the same form as the {self.target} column of train.csv."


_REPLICA_NOTICE = ("NOTE: the data for this task is a SYNTHETIC SCHEMA REPLICA generated by mltb: it has the "
                   "competition's columns and conventions but not its records, so scores are not comparable "
                   "to the Kaggle leaderboard.")
_METRIC_LABELS = {"accuracy": "accuracy", "macro_f1": "macro-averaged F1", "roc_auc": "ROC AUC",
                  "gini": "normalized Gini coefficient", "mcc": "Matthews correlation coefficient",
                  "rmse": "root mean squared error", "rmsle": "root mean squared logarithmic error"}


def _read_spec(path: Path) -> dict[str, Any]:
    try:
        if path.suffix == ".toml":
            with path.open("rb") as handle:
                raw = tomllib.load(handle)
        else:
            import yaml  # only reached for .yaml/.yml files, which are only listed when PyYAML exists

            with path.open(encoding="utf-8") as handle:
                raw = yaml.safe_load(handle)
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise TaskSpecError(path, None, f"cannot parse spec: {exc}") from exc
    except Exception as exc:  # yaml.YAMLError without importing yaml at module level
        if type(exc).__module__.startswith("yaml"):
            raise TaskSpecError(path, None, f"cannot parse spec: {exc}") from exc
        raise
    if not isinstance(raw, Mapping):
        raise TaskSpecError(path, None, "spec must be a table of fields")
    return dict(raw)


def _text(path: Path, raw: Mapping[str, Any], name: str, required: bool) -> str | None:
    value = raw.get(name)
    if value is None:
        if required:
            raise TaskSpecError(path, name, "missing required field")
        return None
    if not isinstance(value, str) or not value.strip():
        raise TaskSpecError(path, name, f"must be a non-empty string, got {value!r}")
    return value


def _choice(path: Path, name: str, value: str, allowed: Iterable[str]) -> str:
    allowed = sorted(allowed)
    if value not in allowed:
        raise TaskSpecError(path, name, f"unknown value {value!r}; expected one of {', '.join(allowed)}")
    return value


def parse_task(path: Path | str) -> Task:
    """Read and validate one spec file."""
    path = Path(path)
    raw = _read_spec(path)
    text = {name: _text(path, raw, name, True) for name in _REQUIRED_TEXT}
    text.update({name: _text(path, raw, name, False) for name in _OPTIONAL_TEXT})
    if not is_slug(text["slug"]):
        raise TaskSpecError(path, "slug", f"{text['slug']!r} is not a task slug ({SLUG_RULE})")
    overrides = raw.get("overrides", False)
    if not isinstance(overrides, bool):
        raise TaskSpecError(path, "overrides", f"must be true or false, got {overrides!r}")
    _choice(path, "problem_type", text["problem_type"], PROBLEM_TYPES)
    _choice(path, "metric", text["metric"], metric_directions())
    _choice(path, "prediction", text["prediction"], PREDICTIONS)
    _choice(path, "source", text["source"], SOURCES)
    if text["builder"] is None and text["data"] is None and text["source"] != "kaggle":
        raise TaskSpecError(path, "builder", "a spec needs a 'builder' or a 'data' CSV path "
                                            "(or source = \"kaggle\")")
    if text["builder"] is not None:
        from .datasources import BUILDERS  # lazy: datasources imports this module

        _choice(path, "builder", text["builder"], BUILDERS)
    teams = raw.get("leaderboard_teams")
    if teams is not None and (not isinstance(teams, int) or isinstance(teams, bool) or teams <= 0):
        raise TaskSpecError(path, "leaderboard_teams", f"must be a positive integer, got {teams!r}")
    fields = raw.get("fields", {})
    if not isinstance(fields, Mapping) or not all(isinstance(v, str) for v in fields.values()):
        raise TaskSpecError(path, "fields", "must be a table of column = \"description\" strings")
    provenance = raw.get("provenance", {})
    if not isinstance(provenance, Mapping):
        raise TaskSpecError(path, "provenance", "must be a table")
    return Task(leaderboard_teams=teams, fields={str(k): v for k, v in fields.items()}, spec_path=path.resolve(),
                provenance=dict(provenance), overrides=overrides, **text)


def _spec_dirs(extra_dirs: Iterable[Path | str]) -> list[Path]:
    """Bundled, then MLTB_TASKS_DIR, then extra dirs; a directory named twice is read once."""
    env = [p for p in os.environ.get(TASKS_DIR_ENV, "").split(os.pathsep) if p.strip()]
    dirs: dict[Path, Path] = {}
    for directory in [TASKS_DIR, *(Path(p).expanduser() for p in env), *(Path(p).expanduser() for p in extra_dirs)]:
        dirs.setdefault(directory.resolve(), directory)
    return list(dirs.values())


def _spec_files(directory: Path) -> list[Path]:
    patterns = ["*.toml"]
    try:
        import yaml  # noqa: F401  (YAML specs only when PyYAML is installed)

        patterns += ["*.yaml", "*.yml"]
    except ImportError:
        pass
    return sorted(p for pattern in patterns for p in directory.glob(pattern))


def load_tasks(extra_dirs: Iterable[Path | str] = ()) -> dict[str, Task]:
    """All task specs: bundled ones, then ``MLTB_TASKS_DIR`` dirs, then ``extra_dirs``.

    A slug defined again in a later directory is a :class:`TaskSpecError` naming both files unless
    the later spec says ``overrides = true`` (then it replaces the earlier one).
    """
    tasks: dict[str, Task] = {}
    for directory in _spec_dirs(extra_dirs):
        if not directory.is_dir():
            raise TaskSpecError(directory, None, "tasks directory does not exist")
        seen_here: dict[str, Path] = {}
        for path in _spec_files(directory):
            task = parse_task(path)
            if task.slug in seen_here:
                raise TaskSpecError(path, "slug", f"slug {task.slug!r} is also used by {seen_here[task.slug]}")
            seen_here[task.slug] = path
            earlier = tasks.get(task.slug)
            if earlier is not None and not task.overrides:
                raise TaskSpecError(path, "slug", f"slug {task.slug!r} is already defined by {earlier.spec_path}; "
                                                  "add 'overrides = true' to this spec to replace that task")
            tasks[task.slug] = task
    return dict(sorted(tasks.items()))


def get_task(slug: str, extra_dirs: Iterable[Path | str] = ()) -> Task:
    """The task with this slug; :class:`UnknownTaskError` lists the valid ones."""
    tasks = load_tasks(extra_dirs)
    try:
        if not is_slug(slug):  # never a dictionary key, let alone a path
            raise KeyError(slug)
        return tasks[slug]
    except KeyError:
        raise UnknownTaskError(slug, tasks) from None
