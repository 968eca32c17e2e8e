"""The paper's ten shaped-reward stages, checked on a node's scratchpad and tool log.

A stage pays once per trajectory and only after every earlier stage has paid.
When the next stage is not yet reached, :func:`advance` explains why in text the
model can act on (remaining categoricals, NaN counts, feature blow-up, an invalid
submission), which the MCTS planners feed back to the model.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, ClassVar

import numpy as np
import pandas as pd

# The stage list itself (names, titles, count) lives in the lowest layer: prompts and front ends read it too.
from mltb_core.stages.specs import REWARD_STAGES, Stage, by_stage, stage_index
from mltb_core.bench.tasks import SUBMISSION_FILE, TEST_FILE, TRAIN_FILE, graded_per_class
from mltb_core.llm.prompts import (FEEDBACK_ROLES, feedback_call, feedback_list, feedback_part,
                                   stage_feedback)
from mltb_core.toolkit import cvrecord
from mltb_core.toolkit.registry import ToolCall
from mltb_core.toolkit.scratchpad import Scratchpad
from mltb_core.toolkit.validation import MAX_CATEGORY_LEVELS, TRACKING_COLUMN, infinite_columns

__all__ = ["REWARD_STAGES", "Stage", "StageContext", "Progress", "PathLog", "advance", "stage_index"]

# the stage that offers the model fits (its spec says so): its reward is scaled by the cross-validated quality
_MODELING = next(s.number for s in REWARD_STAGES if s.tools.fits_models)
# Tools whose output holds the values of their one object input unchanged (a frame of a Series, columns renamed)
_KEEPS_VALUES = frozenset({"convert_to_dataframe"})


def _relabels(call: ToolCall, before: Scratchpad | None) -> bool:
    """Does ``call`` give several columns new names at once? Per-class predictions renamed so may hold each
    class's values under another's name, which the grader cannot see; one column's name it judges itself.
    Names restated as they are, in their order, rename nothing; only the data tells (``before``: the
    scratchpad the call read; without it every list of names counts as a renaming)."""
    columns = call.func_kwargs.get("columns")
    if not (isinstance(columns, (list, tuple)) and len(columns) > 1):
        return False
    data = call.bindings.get("data")
    if before is None or data is None or data not in before:
        return True
    current = getattr(before.get(data), "columns", None)
    return current is None or [str(c) for c in current] != [str(c) for c in columns]


# The tool whose outputs are a fitted model's predictions for the test rows (every other route to them,
# average_predictions or create_submission, starts from its outputs).
PREDICTION_TOOL = "predict_target"
NO_MODEL_REASON = stage_feedback("create_submission", "no_model")


@dataclass
class PathLog:
    """What the tool calls on the root→node path did (built incrementally per node)."""

    tools_used: frozenset[str] = frozenset()
    written: tuple[tuple[str, str], ...] = ()   # (object name, tool) in write order
    submission: bytes | None = None            # snapshot of the submission this path wrote last
    submission_check: tuple[bool, str] = (False, "")   # its validity and the reason when invalid
    # names holding predict_target's values as it gave them: its outputs, and a _KEEPS_VALUES tool's outputs of
    # them that relabel no columns (a model that converted its predictions under their own name lost them for
    # stage 10, issue 33)
    predictions: frozenset[str] = frozenset()

    def extend(self, call: ToolCall, ok: bool, written: list[str], submission: bytes | None = None,
               submission_check: tuple[bool, str] | None = None, before: Scratchpad | None = None) -> PathLog:
        """The log after ``call``, which wrote ``written``; a failed call changes nothing. ``before``, the
        scratchpad the call read, tells names restated as they were from a renaming (see :func:`_relabels`)."""
        if not ok:
            return self
        tool_name, new_sub = call.tool_name, submission is not None
        writes_predictions = tool_name == "predict_target" or (
            tool_name in _KEEPS_VALUES and not self.predictions.isdisjoint(call.bindings.values())
            and not _relabels(call, before))
        predictions = (self.predictions - set(written)) | (set(written) if writes_predictions else set())
        return PathLog(self.tools_used | {tool_name},
                       self.written + tuple((n, tool_name) for n in written),
                       submission if new_sub else self.submission,
                       (submission_check or (False, "")) if new_sub else self.submission_check,
                       predictions)

    @property
    def valid_submission(self) -> bool:
        """A valid submission file written on a path that predicted the test rows with a model: the paper's
        stage 10 pays "when the agent generates predictions on the test data and writes a valid submission
        CSV", and its consistency counts such trajectories; a constant column saved without a model is not one."""
        return self.submission is not None and self.submission_check[0] and self.predicted_by_model

    @property
    def predicted_by_model(self) -> bool:
        return PREDICTION_TOOL in self.tools_used

    def latest(self) -> list[str]:
        """Visible object names, most recently written first."""
        seen: dict[str, None] = {}
        for name, _ in reversed(self.written):
            seen.setdefault(name, None)
        return list(seen)

    def writer(self, name: str) -> str | None:
        for n, tool in reversed(self.written):
            if n == name:
                return tool
        return None


@dataclass
class StageContext:
    """Per-trial constants the checks compare against (loaded once, never per node).

    Built from the agent's own files (train.csv and test.csv): the search never holds a held-out
    label. Submission validity needs only the held-out ids (test.csv's id column) and the target's
    classes and type, which the training target gives.
    """

    task: Any
    n_train: int
    n_test: int
    held_out_ids: pd.Series       # the test rows' ids, in test.csv order
    train_target: pd.Series
    max_features: int = 1000
    original_features: int = 0
    cv_baseline: float | None = None
    # predictions object -> (it, the grader's verdict on it saved alone): checked once, though every node below
    # a prediction looks again (the object is kept so its id is not reused)
    _saved_alone: dict[int, tuple[Any, bool, str]] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_files(cls, task: Any, train_path: Path, test_path: Path, max_features: int = 1000) -> StageContext:
        train = pd.read_csv(train_path)
        ids = pd.read_csv(test_path, usecols=[task.id_column])[task.id_column]
        ctx = cls(task, len(train), len(ids), ids, train[task.target], max_features,
                  original_features=train.shape[1] - 1)
        ctx.cv_baseline = _constant_baseline(task, ctx.train_target)
        return ctx

    @classmethod
    def from_agent_data(cls, task: Any, data_dir: Path, max_features: int = 1000) -> StageContext:
        """From the agent's data dir (``train.csv`` and ``test.csv``, see trial.prepare_agent_data)."""
        return cls.from_files(task, Path(data_dir) / TRAIN_FILE, Path(data_dir) / TEST_FILE, max_features)

    def validity_reference(self) -> pd.DataFrame:
        """Held-out ids with a stand-in target column for :func:`grading.validate_submission`.

        Validity reads only the target's type (bool, numeric, text) and classes from this column, so
        training target values, repeated to the test length, stand in for the labels.
        """
        target = self.train_target.dropna()
        values = np.resize(target.to_numpy(), len(self.held_out_ids)) if len(target) else np.zeros(len(self.held_out_ids))
        return pd.DataFrame({self.task.id_column: self.held_out_ids.to_numpy(),
                             self.task.target: pd.Series(values, dtype=target.dtype if len(target) else float)})

    def saved_alone(self, predictions: Any) -> tuple[bool, str]:
        """Would ``predictions`` saved as they are (save_dataframe_to_csv, the paper's one-call finish) be a
        valid submission, and if not, the grader's reason."""
        key = id(predictions)
        if key not in self._saved_alone:
            self._saved_alone[key] = (predictions, *self._verdict(predictions))
        return self._saved_alone[key][1:]

    def saved_alone_as_target(self, frame: pd.DataFrame) -> bool:
        """Would a one-column ``frame``'s values be a valid submission under the target's name? Cached per frame,
        like :meth:`saved_alone` (the stage-10 check of every node below it asks again)."""
        key = -id(frame) - 1     # apart from saved_alone's keys (ids are positive)
        if key not in self._saved_alone:
            self._saved_alone[key] = (frame, *self._verdict(frame.iloc[:, 0].rename(self.task.target)))
        return self._saved_alone[key][1]

    def _verdict(self, predictions: Any) -> tuple[bool, str]:
        try:
            return check_submission(self, _saved_bytes(predictions))
        except Exception as exc:  # noqa: BLE001 - what the model made: a verdict, never a failed check
            return False, stage_feedback("create_submission", "unwritable", error=type(exc).__name__)

    def takes_classes(self, model: Any) -> bool:
        """Would the grader take ``model``'s classes as predicted labels (a classifier fitted on another target
        predicts values the task does not have)? Cached per model, like :meth:`saved_alone`."""
        classes = getattr(model, "classes_", None)
        if classes is None or not self.n_test:
            return False
        key = id(model)
        if key not in self._saved_alone:
            labels = pd.Series(np.resize(np.asarray(classes), self.n_test), name=self.task.target)
            self._saved_alone[key] = (model, *check_submission(self, _saved_bytes(labels)))
        return self._saved_alone[key][1]

    def graded_on_probabilities(self) -> bool:
        """The task's submission holds class probabilities (ROC AUC, log loss), not labels."""
        return self.task.prediction == "probability"

    def classes(self) -> list | None:
        """The training target's classes (None for regression)."""
        if self.task.problem_type == "regression":
            return None
        return sorted(pd.unique(self.train_target.dropna()).tolist())

    @property
    def feature_bound(self) -> int:
        """Stage 5's bound on the feature count: the configured one, or twice the raw width if wider."""
        return max(self.max_features, 2 * self.original_features)

    @property
    def n_total(self) -> int:
        return self.n_train + self.n_test


def _constant_baseline(task: Any, y: pd.Series) -> float | None:
    """Metric of the trivial constant prediction on the training target (normalises CV scores).

    The grader's own baseline (``grading.baseline_prediction``) scored with the task's configured metric
    (``metrics.task_metric``: e.g. forest cover's weighted accuracy with its [scoring] class weights), so
    stage 9's quality and the trial's normalized score share one zero.
    """
    try:
        from mltb_core.bench.grading import baseline_prediction, metric_inputs
        from mltb_core.bench.metrics import task_metric

        metric = task_metric(task)
        y = y.dropna()
        classes = None if task.problem_type == "regression" else sorted(pd.unique(y).tolist())
        y_true, y_pred = metric_inputs(task, y, baseline_prediction(task, y, len(y), classes), classes)
        return float(metric(y_true, y_pred))
    except Exception:  # noqa: BLE001 - normalisation is best effort; the stage still pays
        return None


@dataclass(frozen=True)
class Progress:
    stage: int = 0                    # last stage passed (0..10)
    reward: float = 0.0               # stage rewards earned on the path
    cv_quality: float | None = None   # normalised CV score of the model that passed stage 9
    feedback: str = ""                # why the next stage is not reached yet ("" when done)
    newly_passed: tuple[int, ...] = field(default=())
    predicted: bool = False           # stage 10 pending and the path holds predictions for the test rows

    @property
    def done(self) -> bool:
        return self.stage >= len(REWARD_STAGES)

    @property
    def stage_name(self) -> str:
        return REWARD_STAGES[self.stage - 1].name if self.stage else "none"


# --------------------------------------------------------------------------- checks
def _frames(pad: Scratchpad, log: PathLog) -> list[tuple[str, pd.DataFrame]]:
    out = []
    for name in log.latest():
        obj = pad.get(name) if name in pad else None
        if isinstance(obj, pd.DataFrame):
            out.append((name, obj))
    return out


def _unencoded(df: pd.DataFrame, skip: set[str]) -> list[str]:
    bad = []
    for i, col in enumerate(df.columns):   # by position: a repeated column name would select a frame
        if col in skip:
            continue
        s = df.iloc[:, i]
        if pd.api.types.is_bool_dtype(s) or pd.api.types.is_numeric_dtype(s):
            continue
        # the fits count a category's declared levels, not the ones present: so does the stage
        if isinstance(s.dtype, pd.CategoricalDtype) and s.cat.categories.size <= MAX_CATEGORY_LEVELS:
            continue
        bad.append(col)
    return bad


def _describe_unencoded(df: pd.DataFrame, cols: list[str]) -> str:
    shown = [feedback_part("unencoded_column", column=c, unique=df[c].nunique(), dtype=df[c].dtype) for c in cols[:12]]
    more = feedback_part("unencoded_more", count=len(cols) - 12) if len(cols) > 12 else ""
    return ", ".join(shown) + more


def _nan_report(df: pd.DataFrame) -> str:
    counts = df.isna().sum()
    counts = counts[counts > 0].sort_values(ascending=False)
    shown = [feedback_part("missing_column", column=c, count=n) for c, n in counts.head(12).items()]
    more = feedback_part("missing_more", count=len(counts) - 12) if len(counts) > 12 else ""
    return feedback_part("missing_values", total=int(counts.sum()), count=len(counts), columns=", ".join(shown),
                         more=more)


class _Checker:
    def __init__(self, ctx: StageContext, pad: Scratchpad, log: PathLog, progress_objects: dict[str, Any]):
        self.ctx, self.pad, self.log = ctx, pad, log
        self.task = ctx.task
        self.frames = _frames(pad, log)
        self.found = progress_objects  # objects identified by earlier stages on this path
        self.overwritten: list[tuple[str, str]] = []   # found names a feedback could not offer (see _name)
        self.predictions: str | None = None            # the test predictions stage 10 found on the path
        self.unsubmittable: tuple[str, str] | None = None   # newer test predictions the grader refuses, and why

    def _combined(self) -> list[tuple[str, pd.DataFrame]]:
        return [(n, f) for n, f in self.frames if TRACKING_COLUMN in f.columns and len(f) == self.ctx.n_total]

    def _skip(self) -> set[str]:
        return {TRACKING_COLUMN, self.task.target}

    # What each object an earlier stage found is, checked again before a feedback names it: the model may have
    # written another value under the same name since (get_features into 'X_train'), and a feedback that sends
    # it to fit on that name asks for a call the tool refuses. One home for each role, so a stage that finds
    # an object and a feedback that names it later agree on what it must be; what a feedback calls each role is
    # prompts.FEEDBACK_ROLES.

    def _holds(self, role: str, obj: Any) -> bool:
        """Does ``obj`` hold what ``role`` names (one predicate per role, :data:`_HOLDS`)?"""
        holds = self._HOLDS.get(role)
        if holds is None:
            raise ValueError(f"unknown role {role!r}")
        return holds(self, obj)

    def _frame_facts(self, obj: Any) -> tuple[bool, int, bool] | None:
        """A frame's tracking column, row count and target column (whether it has them); None for a non-frame."""
        if not isinstance(obj, pd.DataFrame):
            return None
        return TRACKING_COLUMN in obj.columns, len(obj), self.task.target in obj.columns

    def _complete_and_encoded(self, obj: pd.DataFrame, drop_target: bool = False) -> bool:
        """No unencoded column (the tracking column and the target aside) and no missing value (outside the
        target's column when ``drop_target``: the test rows' target is a placeholder)."""
        if _unencoded(obj, self._skip()):
            return False
        values = obj.drop(columns=[self.task.target], errors="ignore") if drop_target else obj
        return not values.isna().any().any()

    def _holds_y_train(self, obj: Any) -> bool:
        return (isinstance(obj, pd.Series) and len(obj) == self.ctx.n_train and obj.name == self.task.target
                and not obj.isna().any())

    def _holds_model(self, obj: Any) -> bool:
        return cvrecord.read(obj) is not None and self._fits_train_features(obj)

    def _holds_train(self, obj: Any) -> bool:
        facts = self._frame_facts(obj)
        return facts is not None and facts == (False, self.ctx.n_train, True)

    def _holds_test(self, obj: Any) -> bool:
        facts = self._frame_facts(obj)
        return facts is not None and facts == (False, self.ctx.n_test, False)

    def _holds_combined(self, obj: Any) -> bool:
        facts = self._frame_facts(obj)
        if facts is None or facts[:2] != (True, self.ctx.n_total) or obj.isna().any().any():
            return False
        return (not _unencoded(obj, self._skip())
                and 0 < obj.shape[1] - len(self._skip() & set(obj.columns)) <= self.ctx.feature_bound)

    def _holds_train_part(self, obj: Any) -> bool:
        facts = self._frame_facts(obj)
        return facts == (False, self.ctx.n_train, True) and self._complete_and_encoded(obj, drop_target=True)

    def _holds_test_part(self, obj: Any) -> bool:
        """Split from the encoded, complete frame; once stage 7 has passed, with the train features' columns."""
        facts = self._frame_facts(obj)
        if facts is None or facts[:2] != (False, self.ctx.n_test):
            return False
        want = self.found.get("X_train_columns")
        return (self._complete_and_encoded(obj, drop_target=True)
                and (want is None or set(obj.columns) - {self.task.target} == set(want)))

    def _features(self, obj: Any, rows: int) -> bool:
        """Features as every fit and predict_target take them, ``rows`` of them: some columns, encoded, complete
        and finite, with neither the target nor the tracking column."""
        facts = self._frame_facts(obj)
        if facts is None or facts[0] or facts[2] or obj.shape[1] == 0 or obj.isna().any().any():
            return False
        return not _unencoded(obj, set()) and not infinite_columns(obj) and facts[1] == rows

    def _holds_X_train(self, obj: Any) -> bool:
        """Once found, the same columns: stage 9 counts a fit on those."""
        want = self.found.get("X_train_columns")
        return self._features(obj, self.ctx.n_train) and (want is None or _same_features(list(obj.columns), want))

    def _holds_X_test(self, obj: Any) -> bool:
        return self._features(obj, self.ctx.n_test) and set(obj.columns) == set(self.found.get("X_train_columns") or [])

    _HOLDS: ClassVar[dict[str, Callable[[_Checker, Any], bool]]] = {
        "train": _holds_train, "test": _holds_test, "combined": _holds_combined, "train_part": _holds_train_part,
        "test_part": _holds_test_part, "X_train": _holds_X_train, "y_train": _holds_y_train,
        "X_test": _holds_X_test, "model": _holds_model}

    def _fits_train_features(self, model: Any) -> bool:
        from mltb_core.toolkit.tools.evaluation import model_feature_names

        want, names = self.found.get("X_train_columns"), model_feature_names(model)
        return want is None or names is None or _same_features(names, want)

    # Every feedback names the tool call(s) that complete the stage, with the path's own object names where
    # an earlier stage found them and they still hold what was found, so the model can act on it without the
    # catalogue. A name that no longer does is not offered; the feedback says what happened to it instead.
    def _name(self, role: str, default: str) -> str:
        name = self.found.get(role)
        if name is None:
            return default
        if name in self.pad and self._holds(role, self.pad.get(name)):
            return str(name)
        for newer in self.log.latest():   # the model made it again (under a new name, as the note asks)
            if newer in self.pad and self._holds(role, self.pad.get(newer)):
                self.found[role] = newer
                return newer
        if (role, name) not in self.overwritten:
            self.overwritten.append((role, name))
        return _placeholder(role)

    def overwritten_note(self) -> str:
        """Why a found name is not offered: what happened to it, and the call that makes it again."""
        notes, i = [], 0
        while i < len(self.overwritten):   # a remake call may name another overwritten object: it joins the list
            role, name = self.overwritten[i]
            writer = self.log.writer(name) if name in self.pad else None
            how = (feedback_part("last_written_by", tool=writer) if writer else "") if name in self.pad else (
                feedback_part("gone"))
            notes.append(feedback_part("overwritten", name=name, role=FEEDBACK_ROLES[role], how=how,
                                       remake=self._remake(role)))
            i += 1
        return ". ".join(notes) + "." if notes else ""

    # The calls that make each found object, shared by the stage that asks for it and by the note above.
    def _remake(self, role: str) -> str:
        if role in ("train", "test"):
            return feedback_call("read", filepath=TRAIN_FILE if role == "train" else TEST_FILE)
        if role == "combined":
            return feedback_call("remake_combined")
        if role in ("train_part", "test_part"):
            return self._split_call()
        if role == "model":
            return self._fit_call()
        return self._convert_call(train=role != "X_test")

    def _concatenate_call(self) -> str:
        return feedback_call("concatenate", train=self._name("train", "train"), test=self._name("test", "test"))

    def _split_call(self) -> str:
        return feedback_call("split", combined=self._name("combined", "combined"))

    def _convert_call(self, train: bool) -> str:
        part = self._name("train_part", "train_df") if train else self._name("test_part", "test_df")
        return feedback_call("convert", df=part, target=self.task.target, is_train="true" if train else "false")

    def _fit_call(self) -> str:
        kind = "regressor" if self.task.problem_type == "regression" else "classifier"
        return feedback_call("fit", kind=kind, X_train=self._name("X_train", "X_train"),
                             y_train=self._name("y_train", "y_train"))

    def _loaded(self, role: str, stage: str, rows: int) -> tuple[bool, str]:
        """A frame read_data wrote that holds the ``role`` ("train" or "test") data, or the stage's feedback."""
        for name, f in self.frames:
            if self.log.writer(name) == "read_data" and self._holds(role, f):
                self.found[role] = name
                return True, ""
        return False, stage_feedback(stage, "not_loaded", read=self._remake(role), rows=rows, target=self.task.target)

    def train_loaded(self) -> tuple[bool, str]:
        return self._loaded("train", "train_data_loading", self.ctx.n_train)

    def test_loaded(self) -> tuple[bool, str]:
        return self._loaded("test", "test_data_loading", self.ctx.n_test)

    def combined(self) -> tuple[bool, str]:
        if "concatenate_train_test" in self.log.tools_used and self._combined():
            return True, ""
        return False, stage_feedback("combine_train_test", "not_combined", concatenate=self._concatenate_call())

    def no_missing_values(self) -> tuple[bool, str]:
        combined = self._combined()
        for _, f in combined:
            if not f.isna().any().any():
                return True, ""
        if not combined:
            return False, stage_feedback("data_cleaning", "combined_gone", concatenate=self._concatenate_call())
        name, frame = combined[0]
        gaps = [c for c in frame.columns if frame[c].isna().any()]
        numeric = [c for c in gaps if pd.api.types.is_numeric_dtype(frame[c]) and not pd.api.types.is_bool_dtype(frame[c])]
        other = [c for c in gaps if c not in numeric]
        tools = []
        if numeric:
            tools.append(feedback_call("fill_median", df=name, columns=feedback_list(numeric)))
        if other:
            tools.append(feedback_call("fill_mode", df=name, columns=feedback_list(other)))
        return False, stage_feedback("data_cleaning", "missing_values", report=_nan_report(frame),
                                     fills=" and ".join(tools), name=name)

    def features_encoded(self) -> tuple[bool, str]:
        combined = [(n, f) for n, f in self._combined() if not f.isna().any().any()]
        if not combined:
            return False, stage_feedback("feature_engineering", "not_clean")
        notes = []
        for name, f in combined:
            if self._holds("combined", f):
                self.found["combined"] = name
                return True, ""
            bad = _unencoded(f, self._skip())
            n_features = f.shape[1] - len(self._skip() & set(f.columns))
            if bad:
                notes.append(stage_feedback("feature_engineering", "unencoded", described=_describe_unencoded(f, bad),
                                            name=name, columns=feedback_list(bad)))
            if n_features > self.ctx.feature_bound:
                notes.append(stage_feedback("feature_engineering", "too_many_features", count=n_features,
                                            bound=self.ctx.feature_bound, raw=self.ctx.original_features))
            break
        return False, " ".join(notes)

    def split_back(self) -> tuple[bool, str]:
        target = self.task.target
        split_call = self._split_call()
        if "split_combined_into_train_test" not in self.log.tools_used:
            return False, stage_feedback("split_train_test", "not_split", split=split_call)
        parts = [(n, f) for n, f in self.frames if self.log.writer(n) == "split_combined_into_train_test"
                 and TRACKING_COLUMN not in f.columns]
        trains = [(n, f) for n, f in parts if len(f) == self.ctx.n_train]
        tests = [(n, f) for n, f in parts if len(f) == self.ctx.n_test]
        ready_tests = [n for n, f in tests if self._holds("test_part", f)]
        for name, tr in trains:
            if self._holds("train_part", tr) and ready_tests:
                self.found["train_part"] = name
                self.found["test_part"] = ready_tests[0]
                return True, ""
        if trains and tests:
            if all(target not in tr.columns for _, tr in trains):
                return False, stage_feedback("split_train_test", "no_target", name=trains[0][0], target=target,
                                             split=split_call)
            return False, stage_feedback("split_train_test", "not_ready", split=split_call)
        return False, stage_feedback("split_train_test", "wrong_rows", n_train=self.ctx.n_train,
                                     n_test=self.ctx.n_test, split=split_call)

    def train_features_and_target(self) -> tuple[bool, str]:
        xs = [(n, f) for n, f in self.frames if self._holds("X_train", f)]
        ys = []
        for name in self.log.latest():
            obj = self.pad.get(name)
            if isinstance(obj, pd.Series) and len(obj) == self.ctx.n_train:
                ys.append((name, obj))
        good_y = [(n, y) for n, y in ys if self._holds("y_train", y)]
        convert = self._convert_call(train=True)
        if "convert_dataframe_to_features_target" in self.log.tools_used and xs and good_y:
            self.found["X_train_columns"] = list(xs[0][1].columns)
            self.found["X_train"] = xs[0][0]
            self.found["y_train"] = good_y[0][0]
            return True, ""
        if ys and not good_y:
            return False, stage_feedback("train_data_to_features_target", "wrong_target", name=ys[0][1].name,
                                         target=self.task.target, convert=convert)
        return False, stage_feedback("train_data_to_features_target", "not_converted", convert=convert)

    def test_features(self) -> tuple[bool, str]:
        want = set(self.found.get("X_train_columns") or [])
        convert = self._convert_call(train=False)
        candidates = [(n, f) for n, f in self.frames if len(f) == self.ctx.n_test
                      and self.task.target not in f.columns and TRACKING_COLUMN not in f.columns]
        for name, f in candidates:
            if self._holds("X_test", f):
                self.found["X_test"] = name
                return True, ""
        part_name = self.found.get("test_part")
        part = dict(self.frames).get(part_name) if part_name else None
        if isinstance(part, pd.DataFrame) and self.task.target in part.columns:
            rest = part.drop(columns=[self.task.target, TRACKING_COLUMN], errors="ignore")
            if set(rest.columns) == want and not rest.isna().any().any():
                # the split's test part is ready but for its target placeholder; the raw test.csv frame may have
                # the same columns with gaps, and naming it sent the model to clean what it had cleaned
                return False, stage_feedback("test_data_to_features", "holds_target", name=part_name,
                                             target=self.task.target, convert=convert)
        same_columns = [(n, f) for n, f in candidates if set(f.columns) == want]
        if same_columns:   # the columns match: what is wrong is in the values
            name, frame = same_columns[0]
            if frame.isna().any().any():
                cause = _nan_report(frame)
            elif text := _unencoded(frame, set()):
                cause = stage_feedback("test_data_to_features", "cause_unencoded",
                                       described=_describe_unencoded(frame, text))
            else:
                cause = stage_feedback("test_data_to_features", "cause_infinite",
                                       columns=feedback_list(infinite_columns(frame)))
            return False, stage_feedback("test_data_to_features", "bad_values", name=name, cause=cause,
                                         convert=convert)
        if candidates:   # the closest frame: fewest columns apart from the training features
            name, frame = min(candidates, key=lambda item: len(want ^ set(item[1].columns)))
            cols = set(frame.columns)
            missing, extra = sorted(map(str, want - cols)), sorted(map(str, cols - want))
            return False, stage_feedback("test_data_to_features", "mismatch", name=name,
                                         missing=feedback_list(missing), extra=feedback_list(extra), convert=convert)
        return False, stage_feedback("test_data_to_features", "not_converted", convert=convert)

    def model_fitted(self) -> tuple[bool, str]:
        other_features = None
        for name in self.log.latest():
            model = self.pad.get(name)
            record = cvrecord.read(model)
            if record is None:
                continue
            if not self._holds("model", model):
                other_features = other_features or name
                continue
            self.found["cv_score"], self.found["cv_metric"] = record.score, record.metric
            self.found["model"] = name
            self.found["target_copies"] = self._target_copies()
            return True, ""
        fit = self._fit_call()
        if other_features:
            return False, stage_feedback("modeling", "other_features", name=other_features, fit=fit)
        return False, stage_feedback("modeling", "no_model", fit=fit)

    def _target_copies(self) -> list[str]:
        """The columns of the train features stage 7 found that stand in for the target (:func:`target_copies`)."""
        x_name, y_name = self.found.get("X_train"), self.found.get("y_train")
        if not (isinstance(x_name, str) and isinstance(y_name, str) and x_name in self.pad and y_name in self.pad):
            return []
        X, y = self.pad.get(x_name), self.pad.get(y_name)
        if not (self._holds("X_train", X) and self._holds("y_train", y)):
            return []
        return target_copies(X, y, self.ctx.classes() is not None)

    def submission_written(self) -> tuple[bool, str]:
        predictions = self.predictions = self._test_predictions()
        save = _save_call(predictions or _placeholder("predictions"))
        submitted = self.log.submission_check if self.log.submission is not None else None
        if predictions is not None:
            finish = save
        elif self.unsubmittable is not None:
            name, reason = self.unsubmittable
            remedy = self._renamed_back(name) or self._remedy(save)
            # the saved file refused for the same reason as the predictions: the reason once, then the remedy
            finish = (remedy if submitted is not None and submitted[1] == reason else
                      stage_feedback("create_submission", "refused", name=name, reason=reason, remedy=remedy))
        else:
            # a model whose labels the grader cannot take: no call on predicting with it
            finish = (self._label_model_fix(save) or stage_feedback(
                "create_submission", "predict_and_save", predict=self._predict_call(self._name("model", "model")),
                save=save))
        from mltb_core.bench import grading

        columns = grading.submission_columns(self.task, self.ctx.classes() or [])
        per_class = stage_feedback("create_submission", "per_class") if graded_per_class(self.task) else ""
        form = stage_feedback("create_submission", "form", per_class=per_class,
                              columns=feedback_list(columns, limit=40))
        if self.log.submission is None:
            return False, stage_feedback("create_submission", "not_written", finish=finish, form=form)
        ok, reason = self.log.submission_check
        return (True, "") if ok else (False, stage_feedback("create_submission", "invalid", reason=reason,
                                                            finish=finish))

    def _predict_call(self, model: str, explicit: bool = False) -> str:
        """The predict_target call on the test features that gives what the task is graded on; ``explicit``
        spells out return_probabilities even at its default (false)."""
        wanted = self.ctx.graded_on_probabilities()
        flag = feedback_call("predict_flag", value="true" if wanted else "false") if wanted or explicit else ""
        return feedback_call("predict", model=model, X_test=self._name("X_test", "X_test"), flag=flag)

    def _remedy(self, save: str) -> str:
        """What gives a submission when the path's newest test predictions cannot be one. Saving them again,
        or predicting with a model that gives the same values, cannot finish: a classifier whose classes the
        grader takes predicts them (labels, or probabilities where graded on them); a model whose labels the
        grader cannot take gives way as :meth:`_label_model_fix` says; a model of the wrong kind is replaced by
        one of the task's kind; a model of the right kind whose values still do not fit (a regressor's negative
        values for RMSLE) by a fit on the train target with a tree ensemble, whose predictions stay within that
        target's range."""
        name, model = self._path_model()
        classification = self.task.problem_type != "regression"
        if classification and _model_kind(model) == "classifier" and self.ctx.takes_classes(model):
            what = "predict_probabilities" if self.ctx.graded_on_probabilities() else "predict_labels"
            return stage_feedback("create_submission", what, predict=self._predict_call(name, explicit=True), save=save)
        if fix := self._label_model_fix(save) or self._other_kind_refit(save):
            return fix
        return self._ensemble_refit(save)

    def _path_model(self) -> tuple[str, Any]:
        """The path's fitted model as the feedback names it (stage 9's, or the newest remade one) and the object
        on the scratchpad under that name (None when there is none)."""
        name = self._name("model", "model")
        return name, self.pad.get(name) if name in self.pad else None

    def _label_problem(self, model: Any) -> str | None:
        """Why ``model`` cannot give labels the grader takes, on a classification task graded on labels: a
        regressor's values are not classes ("kind"), a classifier fitted on another column predicts other
        classes ("classes"). None where predicting with it may finish: a regression task, probabilities (a
        regressor's values can be in range), a model whose kind scikit-learn cannot tell."""
        if self.task.problem_type == "regression" or self.ctx.graded_on_probabilities():
            return None
        kind = _model_kind(model)
        if kind == "regressor":
            return "kind"
        return "classes" if kind == "classifier" and not self.ctx.takes_classes(model) else None

    def _label_model_fix(self, save: str) -> str | None:
        """When the path's model cannot give labels the grader takes (:meth:`_label_problem`): predicting with a
        newer fitted model that can, if the path has one, else the fit that gives one."""
        name, model = self._path_model()
        problem = self._label_problem(model)
        if problem is None:
            return None
        for newer in self.log.latest():
            obj = self.pad.get(newer) if newer != name and newer in self.pad else None
            if obj is not None and self._holds("model", obj) and self._label_problem(obj) is None:
                return stage_feedback("create_submission", "newer_model", name=newer,
                                      predict=self._predict_call(newer), save=save)
        return self._other_kind_refit(save) if problem == "kind" else self._ensemble_refit(save)

    def _ensemble_refit(self, save: str) -> str:
        """A fit on the train target with a tree ensemble (its predictions stay within the target's values),
        then its predictions and the save."""
        kind = "classifier" if self.task.problem_type != "regression" else "regressor"
        fit = feedback_call("fit_ensemble", kind=kind, X_train=self._name("X_train", "X_train"),
                            y_train=self._name("y_train", "y_train"))
        return stage_feedback("create_submission", "ensemble_refit", fit=fit,
                              predict=self._predict_call(_placeholder("new_model")), save=save)

    def _other_kind_refit(self, save: str) -> str | None:
        """When the path's model is a regressor on a classification task or a classifier on a regression task:
        a fit of the task's kind, then its predictions and the save."""
        kind = _model_kind(self._path_model()[1])
        if kind is None or (kind == "classifier") == (self.task.problem_type != "regression"):
            return None
        return stage_feedback("create_submission", "kind_refit", fit=self._fit_call(),
                              predict=self._predict_call(_placeholder("new_model")), save=save)

    def _renamed_back(self, name: str) -> str | None:
        """For a one-column frame of the predictions the grader refuses for its name alone (a conversion that
        named it after the id): the conversion back under the target's name, then the save."""
        obj = self.pad.get(name)
        if self.log.writer(name) not in _KEEPS_VALUES or not (isinstance(obj, pd.DataFrame) and obj.shape[1] == 1):
            return None
        if not self.ctx.saved_alone_as_target(obj):
            return None
        return stage_feedback("create_submission", "rename",
                              convert=feedback_call("rename_to_target", data=name, target=self.task.target),
                              save=_save_call(name))

    def _test_predictions(self) -> str | None:
        """The latest object holding predict_target's values (``PathLog.predictions``), one per test row, that
        the grader takes saved as it is, if the path has one. Newer ones it refuses go to ``unsubmittable`` (the
        newest, with the reason)."""
        for name in self.log.latest():
            if name not in self.log.predictions or name not in self.pad:
                continue
            obj = self.pad.get(name)
            if not (isinstance(obj, (pd.Series, pd.DataFrame)) and len(obj) == self.ctx.n_test):
                continue
            ok, reason = self.ctx.saved_alone(obj)
            if ok:
                return name
            self.unsubmittable = self.unsubmittable or (name, reason)
        return None


def _model_kind(model: Any) -> str | None:
    """'classifier' or 'regressor' as scikit-learn tells estimators apart; None for anything else (a plug-in
    tool's own model object), whose kind no advice may rest on."""
    from sklearn.base import is_classifier, is_regressor

    if model is None:
        return None
    try:   # scikit-learn >= 1.6 raises on an object without estimator tags
        return "classifier" if is_classifier(model) else "regressor" if is_regressor(model) else None
    except AttributeError:
        return None


def _saved_bytes(obj: Any) -> bytes:
    """The bytes save_dataframe_to_csv writes for ``obj`` (the tool's own rule, imported when needed)."""
    from mltb_core.toolkit.tools.evaluation import csv_table

    return csv_table(obj).to_csv(index=False).encode()


def _same_features(names: list[Any], want: list[Any]) -> bool:
    from mltb_core.toolkit.tools.evaluation import same_features   # the tools' own rule, imported when needed

    return same_features(names, want)


def _placeholder(role: str) -> str:
    """What a feedback names an object by that the path does not hold (``<the fitted model>``)."""
    return feedback_part("placeholder", what=FEEDBACK_ROLES[role])


def _save_call(df: str) -> str:
    """The save_dataframe_to_csv call that writes ``df`` as the submission."""
    return feedback_call("save", df=df, filepath=SUBMISSION_FILE)


# Each stage's check, keyed by stage name (by_stage refuses, at import, a missing or unknown stage): passes, or
# fails with the feedback the model is shown.
CHECKS: dict[str, Callable[[_Checker], tuple[bool, str]]] = by_stage({
    "train_data_loading": _Checker.train_loaded,
    "test_data_loading": _Checker.test_loaded,
    "combine_train_test": _Checker.combined,
    "data_cleaning": _Checker.no_missing_values,
    "feature_engineering": _Checker.features_encoded,
    "split_train_test": _Checker.split_back,
    "train_data_to_features_target": _Checker.train_features_and_target,
    "test_data_to_features": _Checker.test_features,
    "modeling": _Checker.model_fitted,
    "create_submission": _Checker.submission_written,
}, "rewards.CHECKS")


def advance(ctx: StageContext, previous: Progress, pad: Scratchpad, log: PathLog,
            found: dict[str, Any] | None = None) -> tuple[Progress, dict[str, Any]]:
    """Pass as many further stages as this node's state allows, in order, once each.

    Returns the new progress and the objects identified along the way (carried to children).
    """
    found = dict(found or {})
    checker = _Checker(ctx, pad, log, found)
    stage, reward, quality = previous.stage, previous.reward, previous.cv_quality
    passed: list[int] = []
    feedback = ""
    while stage < len(REWARD_STAGES):
        checker.overwritten.clear()   # a note belongs to the stage whose feedback is shown, not to one that passed
        ok, why = CHECKS[REWARD_STAGES[stage].name](checker)
        if not ok:
            feedback = " ".join(part for part in (why, checker.overwritten_note()) if part)
            break
        stage += 1
        passed.append(stage)
        if stage == _MODELING:
            # a fit on a copy of the target scores its CV on the copy: no evidence of a model, no quality
            copies = found.get("target_copies") or []
            quality = 0.0 if copies else _quality(ctx, found.get("cv_score"), found.get("cv_metric"))
            reward += 0.5 + 0.5 * quality
        else:
            reward += 1.0
    copies = found.get("target_copies") or []
    if copies and _MODELING in passed:   # said once, where the fit is rewarded
        feedback = " ".join(part for part in (feedback, _copies_note(ctx, copies)) if part)
    predicted = stage == len(REWARD_STAGES) - 1 and checker.predictions is not None
    return Progress(stage, reward, quality, feedback, tuple(passed), predicted), found


# A feature stands in for the target when, alone, it predicts the training target this well: a k-class target
# from at most LEAK_BINS_PER_CLASS * k groups of the feature's values (ordered, equal-sized) with this skill
# (accuracy above the majority class's, as a share of what the majority leaves: an imbalanced task's every
# column is 96% accurate), or a regression target with this rank correlation. Met by a copy, a relabelling,
# arithmetic or a near-copy with noise of the target; far past the best single feature of every bundled expert
# pipeline (measured in docs/paper-deviations.md); an identifier cannot reach it (too few groups to memorise).
LEAK_SKILL = 0.95
LEAK_BINS_PER_CLASS = 4


def target_copies(X: pd.DataFrame, y: pd.Series, classification: bool) -> list[str]:
    """The columns of ``X`` that alone predict ``y`` (aligned by position) near perfectly (see LEAK_SKILL)."""
    return [str(column) for column, skill in single_feature_skill(X, y, classification).items()
            if skill >= LEAK_SKILL]


def single_feature_skill(X: pd.DataFrame, y: pd.Series, classification: bool) -> dict[Any, float]:
    """How well each numeric column of ``X`` alone predicts ``y`` (aligned by position): the skill of a few
    groups of its values (classification) or |Spearman ρ| (regression); O(n log n) per column."""
    n = len(y)
    if n == 0 or len(X) != n:
        return {}
    out: dict[Any, float] = {}
    if classification:
        codes, classes = pd.factorize(y.to_numpy())
        if (codes < 0).any():
            return {}
        k = max(len(classes), 2)
        bins = LEAK_BINS_PER_CLASS * k
        majority = np.bincount(codes, minlength=k).max() / n
    else:
        target = pd.Series(pd.to_numeric(y, errors="coerce").to_numpy(dtype=float))
    for column in X.columns:
        raw = X[column]
        values = pd.to_numeric(raw, errors="coerce")
        missing = values.isna().to_numpy()
        if not classification:
            # a missing value hides no copy: ρ over the rows that have one, when they are most rows
            if missing.mean() <= 0.5:
                rho = pd.Series(values.to_numpy(dtype=float)).corr(target, method="spearman")
                out[column] = abs(float(rho)) if np.isfinite(rho) else 0.0
            continue
        if missing.all() and raw.notna().any():   # text: its distinct values are the groups
            groups = pd.factorize(raw)[0].astype(np.int64)
            if groups.max() + 1 > bins:
                continue   # too many to group without an order (an identifier's kind)
            groups[groups < 0] = groups.max() + 1
        else:
            dense = values.rank(method="dense").to_numpy()   # 1..m; NaN where missing
            if np.nanmax(dense, initial=0) > bins:   # more values than groups: equal-sized groups in order
                ordered = (values.rank(method="first").to_numpy() - 1) * bins // n
            else:
                ordered = dense - 1
            groups = np.where(missing, bins, ordered).astype(np.int64)   # a missing value is a group of its own
        counts = np.zeros((int(groups.max()) + 1, k), dtype=np.int64)
        np.add.at(counts, (groups, codes), 1)
        accuracy = counts.max(axis=1).sum() / n
        out[column] = float((accuracy - majority) / (1 - majority)) if majority < 1 else 0.0
    return out


def _copies_note(ctx: StageContext, copies: list[str]) -> str:
    return stage_feedback("modeling", "target_copies", columns=feedback_list(copies), target=ctx.task.target)


def _quality(ctx: StageContext, cv: float | None, scored_in: str | None) -> float:
    """CV score normalised per task: 0 = constant baseline, 1 = perfect (clipped); 0.5 when the baseline is
    unknown, 0 when the folds gave no score. A model scored in another metric than the task's (a regressor on
    a classification task) counts as no better than the baseline: its RMSE was read as accuracy, so a worse
    fit scored higher, and an unknown 0.5 would outrank a weak model of the right kind."""
    if scored_in is not None and scored_in != ctx.task.metric:
        return 0.0
    if cv is None:   # the folds gave no score (NaN): no evidence the model beats the baseline
        return 0.0
    if ctx.cv_baseline is None:
        return 0.5
    try:
        from mltb_core.bench.metrics import get_metric

        metric = get_metric(ctx.task.metric)
        perfect, base = metric.perfect, ctx.cv_baseline
    except Exception:  # noqa: BLE001
        return 0.5
    if perfect == base:
        return 0.5
    return float(np.clip((cv - base) / (perfect - base), 0.0, 1.0))


def check_submission(ctx: StageContext, snapshot: bytes) -> tuple[bool, str]:
    """Is this submission valid (readable, columns, rows, ids, no gaps)? The grader's own rule
    (:func:`grading.check_submission`) on the held-out ids in test.csv's order, never label values."""
    from mltb_core.bench import grading

    ok, reason, _ = grading.check_submission(ctx.task, snapshot, ctx.validity_reference(), classes=ctx.classes())
    return bool(ok), "" if ok else reason


def read_submission_snapshot(sandbox: Path, before_mtime: float | None) -> bytes | None:
    """The submission bytes if the last tool call (re)wrote the file, else None."""
    path = Path(sandbox) / SUBMISSION_FILE
    try:
        stat = path.stat()
    except FileNotFoundError:
        return None
    if before_mtime is not None and stat.st_mtime_ns == before_mtime:
        return None
    return path.read_bytes()
