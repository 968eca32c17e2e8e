"""Every prompt mltb sends to a model, in one place.

The texts follow the paper's Appendix H. ``all_prompts()`` returns them all so a
run can write them next to its results (reproducibility: reviewers asked for the
exact prompts).

Every request starts with the same system message, :func:`shared_preamble`: the call format,
the task description and the tool catalogue, identical byte for byte for every planner, trial and
worker of one task and toolset. The planner's own instructions come second (a second system
message), then the path's history. A shared prefix is what lets llama.cpp reuse its KV cache and
what OpenAI bills at the cached-input rate (from 1,024 shared tokens).
"""
from __future__ import annotations

import json
import os.path
from typing import Any


# -- planners ------------------------------------------------------------------------
TOOL_CALL_FORMAT = (
    "Call exactly one tool per reply. Objects live on a named scratchpad: pass objects by name in "
    "'bindings', plain values in 'func_kwargs', and name the result in 'output'. If you cannot use "
    "native tool calls, reply with JSON only: "
    '{"tool_name": "fillna_with_median", "tool_args": {"bindings": {"df": "combined"}, '
    '"func_kwargs": {"columns": ["Age"]}, "output": "combined"}}'
)

# -- the shared preamble (first system message of every request) -----------------------
PREAMBLE_INTRO = ("This conversation is about the Kaggle competition described below and the tools listed after "
                  "it; the instructions for your role follow them. Relative file paths name files in your own "
                  "working directory (your sandbox), where files are written. When asked to act, "
                  + TOOL_CALL_FORMAT[0].lower() + TOOL_CALL_FORMAT[1:])
TASK_HEADER = "=== The competition ==="
TOOLS_HEADER = "=== The tools (name: what it does; its parameters come with the function schemas) ==="
PREAMBLE_END = "=== End of tools ==="
CATALOGUE_SUMMARY_CHARS = 90


def tool_summary(schema: dict[str, Any]) -> str:
    """The first sentence of a tool's description, at most CATALOGUE_SUMMARY_CHARS characters."""
    function = schema.get("function", schema)
    first = (function.get("description") or "").strip().split("\n")[0].split(". ")[0].rstrip(".")
    if len(first) > CATALOGUE_SUMMARY_CHARS:
        first = first[:CATALOGUE_SUMMARY_CHARS - 3].rstrip() + "..."
    return first


def tool_catalogue(schemas: list[dict[str, Any]]) -> str:
    """One ``- name: summary`` line per tool, in the registry's order (stable across calls)."""
    return "\n".join(f"- {s.get('function', s)['name']}: {tool_summary(s)}" for s in schemas)


def shared_preamble(task_prompt: str, schemas: list[dict[str, Any]]) -> str:
    """The first system message: identical for every planner, trial and worker of a task and toolset.

    ``schemas`` is the trial's whole toolset (never a masked subset: masking is in the ``tools`` of the
    request, after this prefix), so the preamble depends on the task and the toolset only.
    """
    return (f"{PREAMBLE_INTRO}\n\n{TASK_HEADER}\n{task_prompt.rstrip()}\n\n{TOOLS_HEADER}\n"
            f"{tool_catalogue(schemas)}\n{PREAMBLE_END}")


def task_section(preamble: str) -> str:
    """The task description inside a :func:`shared_preamble` (the whole text if it is not one)."""
    body = preamble.split(TASK_HEADER + "\n", 1)[-1]
    return body.split("\n\n" + TOOLS_HEADER, 1)[0]


def render_chat(messages: list[dict[str, Any]]) -> str:
    """The messages as one chatml-like text, in order (what a server's chat template evaluates; used to
    measure the prefix requests share). Tool calls are rendered as their JSON."""
    parts = []
    for message in messages:
        body = str(message.get("content") or "")
        if message.get("tool_calls"):
            body += json.dumps(message["tool_calls"], sort_keys=True, default=str)
        parts.append(f"<|im_start|>{message.get('role')}\n{body}<|im_end|>\n")
    return "".join(parts)


def shared_prefix_length(texts: list[str]) -> int:
    """Characters at the start that every text in ``texts`` shares."""
    return len(os.path.commonprefix(list(texts))) if texts else 0


# -- planner instructions (second system message) ---------------------------------------
REACT_SYSTEM = (
    "You are a Data Scientist tasked with solving the Kaggle competition provided above, with the tools "
    "available to you. Think step by step about what to do next, then act by calling a tool; you will see "
    "the tool's result before your next step."
)

EXPANSION_SYSTEM = (
    "You are a Data Scientist tasked with solving the Kaggle competition provided above, with the tools "
    "available to you. Propose tool candidates that would help solve the problem at the current stage."
)

LATS_EVALUATOR_SYSTEM = (
    "You are a Data Science judge, who evaluates the goodness of tool calling trajectories to solve Machine "
    "Learning tasks on Kaggle. Reflect and grade the agent's trajectory plan for the provided challenge. The "
    "trajectories should be aimed towards solving the challenge, i.e., generating a trained model and a valid "
    "submission file. Keep your reflections concise and to the point. End your answer with a line "
    "'Score: N' where N is an integer from 1 (no progress) to 10 (valid submission from a good model)."
)

LATS_REFLECTION_SYSTEM = (
    "You are a Data Science judge. The agent's trajectory below has not produced a valid submission. In two or "
    "three sentences, say what went wrong and what the agent should do differently next time."
)

REFLECTIONS_HEADER = "Reflections on earlier failed attempts (avoid these mistakes):"

# Hierarchical MCTS: one prefix per subtask (paper, Appendix H.3), keyed by stage name; each stage's spec
# (stages/specs.py) takes its prefix from here, and refuses (at import) a table that lacks a stage or names an
# unknown one.
SUBTASK_PREFIXES: dict[str, str] = {
    "train_data_loading": "You are a Data Scientist in the Data Loading stage of solving a Kaggle challenge, using only the tools available to you. This stage ends when you have loaded the train data successfully.",
    "test_data_loading": "You are a Data Scientist in the Data Loading stage of solving a Kaggle challenge, using only the tools available to you. This stage ends when you have loaded the test data successfully.",
    "combine_train_test": "You are a Data Scientist in the Data Loading stage of solving a Kaggle challenge, using only the tools available to you. This stage ends when you have combined the train and test data into a single dataframe successfully, to be used for downstream Data Cleaning and Feature Engineering.",
    "data_cleaning": "You are a Data Scientist in the Data Cleaning stage of solving a Kaggle challenge, using only the tools available to you. This stage ends when there are no missing values present in the data. This also includes the column corresponding to the target variable, that may have NaNs in the test partition since the target variable is not present in the test partition. You are allowed to be innovative in filling the missing values based on your understanding of the data.",
    "feature_engineering": "You are a Data Scientist in the Feature Engineering stage of solving a Kaggle challenge, using only the tools available to you. Create new features, or delete unimportant features or transform existing features as needed. You are not allowed to delete or modify features that indicate if the row in the data belongs to the train or test partition. You are also not allowed to augment the feature corresponding to the target variable. Use your understanding of the data to aid your decisions. This stage ends when the models feel that the features are good enough for modeling, and categorical and numerical features have been properly encoded. After the end of this stage, all the features should be (i) either int or float or (ii) int, float, category with the number of unique values in the category columns not being exorbitantly large.",
    "split_train_test": "You are a Data Scientist in the Split Train Test stage of solving a Kaggle challenge, using only the tools available to you. Split the combined train and test data into train and test dataframes. This stage ends when the train and test dataframes are successfully split from the combined dataframe.",
    "train_data_to_features_target": "You are a Data Scientist in the Converting the Train Data to Features and Target stage of solving a Kaggle challenge, using only the tools available to you. Convert the train data into features and target. This stage ends when the train data is successfully converted into features and target, for making downstream modeling upon.",
    "test_data_to_features": "You are a Data Scientist in the Converting the Test Data to Features stage of solving a Kaggle challenge, using only the tools available to you. Convert the test data into features. This stage ends when the test data is successfully converted into features, for making downstream predictions upon.",
    "modeling": "You are a Data Scientist in the Modeling stage of solving a Kaggle challenge, using only the tools available to you. Train and tune models. You might need to experiment with different model choices and properly tune your hyperparameters to get good performance. Use the provided evaluation tools to evaluate your trained models if needed. This stage ends when the agent has successfully created a model that it considers to be the best.",
    "create_submission": "You are a Data Scientist in the Create Submission stage of solving a Kaggle challenge, using only the tools available to you. Make predictions on the test data, and create a submission dataframe that contains the predictions in the requested format. This stage ends when the submission file in the correct format is written.",
}


def subtask_system(stage_name: str) -> str:
    """The paper's hierarchical system prompt: ``{subtask_description}. Propose tool candidates ...``."""
    return (f"{SUBTASK_PREFIXES[stage_name]} Propose tool candidates that would help solve the problem at the "
            "current stage.")


def scratchpad_note(names_and_kinds: str) -> str:
    """Shown after each tool result so the model knows which names it may bind."""
    return f"{SCRATCHPAD_HEADER}\n{names_and_kinds}" if names_and_kinds else ""


# -- context trimming (``--context trimmed``) ---------------------------------------------
# Tool schemas are sent with the first paragraph of their descriptions (compact_schema). The last TRIMMED_FULL_OBSERVATIONS tool results stay whole; older ones keep their first
# TRIMMED_FIRST_LINES lines (at most TRIMMED_LINE_CHARS characters each) and this marker.
TRIMMED_FULL_OBSERVATIONS = 3
# Prompt lengths estimated without a tokenizer (budgets, cost estimates): ~4 characters a token.
CHARS_PER_TOKEN = 4
TRIMMED_FIRST_LINES = 2
TRIMMED_LINE_CHARS = 200
TRIMMED_MARKER = "[... {lines} more lines cut: older result, trimmed context]"
SCRATCHPAD_HEADER = "Scratchpad objects now available:"


# -- a bounded context (``--context-budget N``) --------------------------------------------------------
# The last TRIMMED_FULL_OBSERVATIONS tool results are always whole; a request carries the older ones whole
# while they total at most N tokens (CHARS_PER_TOKEN characters a token). When a step takes them past N, the
# oldest are cut (trim_observation) until the whole ones total at most BOUNDED_LOW_WATER × N; the stage notes
# shown after cut steps go too. The cut point moves in such blocks and only forward along a path, so between two
# cuts each request still extends the previous one (a prefix cache evaluates only the new turn); a cut
# re-evaluates the path from its first newly cut step: the low-water mark L costs about L / (1 - L) of the
# results' own tokens again (a third at 0.25), a lower L fewer whole results after a cut.
BOUNDED_LOW_WATER = 0.25


def compact_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """A tool's function schema with its description cut to the first paragraph (the trimmed context).

    The parameters stay whole; the long part of a description is its worked example, and a failed call
    returns the tool's full documentation anyway.
    """
    function = dict(schema.get("function", schema))
    function["description"] = (function.get("description") or "").strip().split("\n\n")[0]
    return {**schema, "function": function} if "function" in schema else function


def trim_observation(text: str) -> str:
    """An older tool result cut to its first lines (the trimmed context). Deterministic, so a cut
    observation is the same text in every later request (the KV cache keeps it)."""
    lines = text.splitlines()
    kept = [line if len(line) <= TRIMMED_LINE_CHARS else line[:TRIMMED_LINE_CHARS] + "..."
            for line in lines[:TRIMMED_FIRST_LINES]]
    rest = len(lines) - len(kept)
    if rest <= 0 and all(len(line) <= TRIMMED_LINE_CHARS for line in lines):
        return text
    return "\n".join(kept + ([TRIMMED_MARKER.format(lines=rest)] if rest > 0 else []))


# -- the parameters of the next stage's tools (a user turn of every proposal request) ----------------------
# The preamble's catalogue names every tool in one line; a model that gets no function schemas (the local
# model reads the prompt only) would otherwise never see a parameter. The note changes with the node's
# stage, so it is never the request's tail: it follows the step after which it changed and stays there in
# every later request along the path (Episode.proposal_messages), so each request extends the previous one
# and a prefix cache evaluates only the new turn; a note the very next step's note replaces is dropped (the
# cache re-evaluates only that step's call, and a search that changes stage at most steps would otherwise
# carry a note per step).
# It lists the tools of the stage after the furthest one the node has passed (stages/masking.py:
# stage_tools, most relevant first) with their parameters, at most STAGE_TOOLS_BUDGET characters (what the
# local model's ~4,000-character catalogue budget was: ~1,000 tokens); tools past the budget by name only.
STAGE_TOOLS_HEADER = ("Parameters of the tools for the next step (bindings: names of scratchpad objects; "
                      "func_kwargs: plain values; output: the name to store the result under):")
STAGE_TOOLS_MORE = "More tools for this step: "
STAGE_TOOLS_BUDGET = 4_000
PARAMETER_DOC_CHARS = 160     # one parameter's description at most
_OBJECT_PREFIX = "name of a scratchpad object: "   # registry.Tool.schema's binding descriptions start so


def _parameter_doc(spec: Any) -> str:
    text = " ".join(str(spec.get("description", "") if isinstance(spec, dict) else "").split())
    text = text.removeprefix(_OBJECT_PREFIX)
    return text if len(text) <= PARAMETER_DOC_CHARS else text[:PARAMETER_DOC_CHARS - 3].rstrip() + "..."


def parameter_lines(schema: dict[str, Any]) -> list[str]:
    """A tool's parameters, one line each, from its function schema (``registry.Tool.schema()``)::

            bindings.df: (pd.DataFrame) The DataFrame to clean.
            func_kwargs.columns (default null): (str or list[str], optional) Numeric column(s) to fill; ...
            output: name to store the result under (defaults to the input object's name)
    """
    function = schema.get("function", schema)
    props = function.get("parameters", {}).get("properties", {})
    lines = []
    for part in ("bindings", "func_kwargs"):
        section = props.get(part, {})
        required = set(section.get("required", ()))
        for name, spec in section.get("properties", {}).items():
            if isinstance(spec, dict) and "default" in spec:
                tag = f" (default {json.dumps(spec['default'], default=str)})"
            else:
                tag = " (required)" if part == "func_kwargs" and name in required else ""
            lines.append(_line(f"{part}.{name}{tag}", spec))
    if "output" in props:
        lines.append(_line("output", props["output"]))
    return lines


def _line(label: str, spec: Any) -> str:
    doc = _parameter_doc(spec)
    return f"    {label}: {doc}" if doc else f"    {label}"


def stage_tools_note(schemas: list[dict[str, Any]], budget: int = STAGE_TOOLS_BUDGET) -> str:
    """:data:`STAGE_TOOLS_HEADER` and the :func:`parameter_lines` of ``schemas`` (most relevant first) while
    they fit ``budget`` characters; the rest by name on one line (cut to the budget too). Tools with the same
    parameters share one block (``- fit_a, fit_b`` then the lines). '' for no tools."""
    groups: dict[tuple[str, ...], list[str]] = {}   # parameter lines -> the tools that have them, first seen first
    for schema in schemas:
        groups.setdefault(tuple(parameter_lines(schema)), []).append(schema.get("function", schema)["name"])
    blocks = [("\n".join([f"- {', '.join(names)}", *lines]), names) for lines, names in groups.items()]
    if not blocks:
        return ""

    def more(rest: list[str]) -> str:
        return f"\n{STAGE_TOOLS_MORE}{', '.join(rest)}." if rest else ""

    text, rest = STAGE_TOOLS_HEADER, []
    for index, (block, _names) in enumerate(blocks):
        later = [name for _block, names in blocks[index + 1:] for name in names]
        if len(text) + 1 + len(block) + len(more(later)) > budget:
            rest = [name for _block, names in blocks[index:] for name in names]
            break
        text += "\n" + block
    while rest and len(text) + len(more(rest)) > budget:   # the names line itself is cut to the budget
        rest = rest[:-1]
    return text + more(rest)


def is_stage_tools_note(message: dict[str, Any]) -> bool:
    """Whether ``message`` is the note of :func:`stage_tools_note` (readers of a request skip it)."""
    return message.get("role") == "user" and str(message.get("content") or "").startswith(STAGE_TOOLS_HEADER)


NO_TOOL_CALL = "Your reply contained no valid tool call{detail}. Call exactly one tool using the required format."

EVALUATOR_REQUEST = "Grade the trajectory above for the challenge. Reply with a short reflection and 'Score: N'."
REFLECTION_REQUEST = "Reflect on this trajectory: it has no valid submission."


# -- whole-pipeline planners (AutoMind, MLE-STAR) and the staged scaffold (Agent K) ------------------
_PIPELINE_ROLE = ("You are a Data Scientist tasked with solving the Kaggle competition provided above, with the tools "
                  "available to you. ")

AUTOMIND_DRAFT_SYSTEM = (
    _PIPELINE_ROLE + "Draft a complete solution: a pipeline of tool calls from loading the data to writing the "
    "submission file. Call the pipeline's next tool now; the solution is scored by its model's cross-validation. "
)

AUTOMIND_IMPROVE_SYSTEM = (
    _PIPELINE_ROLE + "Improve a working solution with one atomic change. Your call replaces the pipeline's next "
    "step (call the same tool with other arguments, or a better tool writing the same object), is inserted before "
    "it (any other tool), or skips it (call the step after it); the rest of the pipeline is then re-run as it was. "
)

AUTOMIND_DEBUG_SYSTEM = (
    _PIPELINE_ROLE + "The solution below failed. Read the error, fix the failing step and continue the pipeline "
    "until the submission file is written. "
)


def _tried(tried: list[str]) -> str:
    return ("\nAlready tried here (propose something else):\n" + "\n".join(f"- {t}" for t in tried)) if tried else ""


def improve_request(pipeline: str, step: int, score: float | None, tried: list[str] | None = None) -> str:
    shown = f"{score:.4f}" if score is not None else "unknown"
    return (f"The working solution (CV score {shown}, higher is better) runs these calls:\n{pipeline}\n"
            f"Your next call edits step {step} of it.{_tried(tried or [])}")


def debug_request(error: str) -> str:
    return f"The previous attempt at this solution failed: {error}"


MLE_STAR_REFINE_SYSTEM = (
    _PIPELINE_ROLE + "An ablation study found the pipeline block named below to have the largest effect on the "
    "cross-validation score. Refine that block: your call replaces the block's next step or adds one to it; the "
    "rest of the pipeline is then re-run as it was. "
)


def refine_request(pipeline: str, block: str, effects: str, step: int, tried: list[str] | None = None) -> str:
    return (f"The pipeline:\n{pipeline}\nAblation (CV change when the block is removed or replaced by a "
            f"baseline): {effects}. Refine the {block} block; your next call edits step {step}.{_tried(tried or [])}")


AGENT_K_STAGE_SYSTEM = (
    "You are a Data Scientist following a staged plan for the Kaggle competition provided above, with the tools available to you. "
    "The current stage, its unit test and the test's last result are given below; call a tool that makes the "
    "test pass. "
)


def stage_request(title: str, number: int, count: int | str, last_result: str) -> str:
    return (f"Stage {number} of {count}: {title}. Unit test: the stage check for '{title}' passes. "
            f"Last test result: {last_result or 'not run yet'}")


MEMORY_HEADER = "What worked on earlier tasks of this run (pipelines whose submissions were valid):"


# -- stage feedback (why the next stage is not reached yet; shown to the model after a tool result) ------------
# The checks (stages/rewards.py) fill these in; every template is a str.format string with named fields.
# STAGE_FEEDBACK is keyed by stage name (stages/specs.py refuses, at import, a table that lacks a stage or
# names an unknown one), then by situation. FEEDBACK_CALLS are the tool calls the texts name, FEEDBACK_PARTS
# the fragments several texts share, FEEDBACK_ROLES what each object an earlier stage found is called.
FEEDBACK_CALLS: dict[str, str] = {
    "read": "read_data(filepath='{filepath}')",
    "concatenate": "concatenate_train_test(train_df={train!r}, test_df={test!r})",
    "remake_combined": "concatenate_train_test, then clean and encode the combined frame",
    "fill_median": "fillna_with_median(df={df!r}, columns={columns})",
    "fill_mode": "fillna_with_mode(df={df!r}, columns={columns})",
    "split": "split_combined_into_train_test(combined={combined!r})",
    "convert": "convert_dataframe_to_features_target(df={df!r}, target_column={target!r}, is_train={is_train})",
    "fit": "fit_lightgbm_{kind}(X_train={X_train!r}, y_train={y_train!r}) or another fit_* / tune_* {kind} tool",
    "fit_ensemble": "fit_random_forest_{kind}(X_train={X_train!r}, y_train={y_train!r})",
    "predict": "predict_target(model={model!r}, X_data={X_test!r}{flag})",
    "predict_flag": ", return_probabilities={value}",
    "rename_to_target": "convert_to_dataframe(data={data!r}, columns=[{target!r}], output={data!r})",
    "save": "save_dataframe_to_csv(df={df!r}, filepath={filepath!r})",
}

FEEDBACK_PARTS: dict[str, str] = {
    "placeholder": "<the {what}>",
    "list_more": ", ... ({count} in all)]",
    "missing_values": "{total} missing values remain in {count} column(s): {columns}{more}",
    "missing_column": "{column} ({count})",
    "missing_more": " and {count} more columns",
    "unencoded_column": "{column} ({unique} unique, {dtype})",
    "unencoded_more": " and {count} more",
    "overwritten": "{name!r} does not hold the {role} now{how}; make it again under a new name: {remake}",
    "last_written_by": " (last written by {tool})",
    "gone": " (it is gone)",
}

FEEDBACK_ROLES: dict[str, str] = {
    "train": "train data", "test": "test data", "combined": "encoded combined frame",
    "train_part": "split train part", "test_part": "split test part", "X_train": "train features",
    "y_train": "train target", "X_test": "test features", "model": "fitted model",
    "predictions": "predictions", "new_model": "new model",
}

STAGE_FEEDBACK: dict[str, dict[str, str]] = {
    "train_data_loading": {
        "not_loaded": "Train data not loaded yet: {read} (expect {rows} rows with the target column {target!r}).",
    },
    "test_data_loading": {
        "not_loaded": "Test data not loaded yet: {read} (expect {rows} rows without the target column {target!r}).",
    },
    "combine_train_test": {
        "not_combined": ("Train and test are not combined yet: {concatenate} so cleaning and encoding treat both "
                         "alike (it adds the tracking column '_is_train')."),
    },
    "data_cleaning": {
        "combined_gone": ("The combined train+test frame (with '_is_train') is gone; recombine train and test: "
                          "{concatenate}."),
        "missing_values": ("Data cleaning incomplete: {report}. Fill them: {fills}, or drop_feature(df={name!r}, "
                           "column=[...]) for columns not worth keeping."),
    },
    "feature_engineering": {
        "not_clean": ("Feature engineering needs a combined frame without missing values: fill the combined frame "
                      "(fillna_with_median / fillna_with_mode) and keep its '_is_train' column."),
        "unencoded": ("Categorical columns still unencoded: {described}. Encode them with label_encode(df={name!r}, "
                      "columns={columns}) (one_hot_encode for few levels), or drop identifiers and free text with "
                      "drop_feature(df={name!r}, column=[...])."),
        "too_many_features": ("Feature count blew up to {count} (bound {bound}; the raw data had {raw}): drop "
                              "high-cardinality columns (drop_feature) instead of one-hot encoding them."),
    },
    "split_train_test": {
        "not_split": "Split the encoded combined frame back into train and test: {split}.",
        "no_target": ("The split train part {name!r} has no target column {target!r}: it was dropped before the "
                      "split, so no model can learn it. Split a combined frame that still has {target!r} (from "
                      "before the drop): {split}."),
        "not_ready": ("The split frames still have missing values or unencoded columns: clean and encode the "
                      "combined frame before splitting, then {split}."),
        "wrong_rows": ("Split did not give {n_train} train and {n_test} test rows; split the combined frame that "
                       "has '_is_train': {split}."),
    },
    "train_data_to_features_target": {
        "wrong_target": "The extracted target is {name!r}, but the challenge's target column is {target!r}; {convert}.",
        "not_converted": ("Convert the train frame into features and target: {convert}; the features must be "
                          "encoded, complete and finite."),
    },
    "test_data_to_features": {
        "holds_target": ("The split test part {name!r} has the training features, complete, but still holds the "
                         "target column {target!r} (a placeholder on test rows): {convert}."),
        "bad_values": ("The test features {name!r} have the training columns, but {cause}. Clean and encode the "
                       "combined frame before splitting, so train and test are treated alike, then {convert}."),
        "cause_unencoded": "categorical columns are still unencoded: {described}",
        "cause_infinite": "column(s) {columns} hold infinite values",
        "mismatch": ("Test features do not match the training features (the test frame {name!r}: missing {missing}, "
                     "extra {extra}); {convert}."),
        "not_converted": "Convert the split test frame into features: {convert}.",
    },
    "modeling": {
        "other_features": ("The fitted model {name!r} was trained on other columns than the train features; fit on "
                           "them: {fit}."),
        "no_model": "No fitted model yet: {fit}.",
        "target_copies": ("The fit earns no CV quality: feature(s) {columns} alone predict the target {target!r} on "
                          "the training rows almost perfectly, so they were made from it (the test rows have no "
                          "target to make them from) and the CV score measures the copy, not a model. Drop them "
                          "from the train and test features and fit again."),
    },
    "create_submission": {
        "not_written": "No submission written yet: {finish}; {form}.",
        "invalid": "The submission is invalid: {reason}. To fix it: {finish}.",
        "form": ("the predictions alone (one row per test.csv row, in its order{per_class}) or a frame with the "
                 "columns {columns} are valid"),
        "per_class": ", one column per class named after it",
        "refused": "the predictions {name!r} cannot be the submission ({reason}). To finish, {remedy}",
        "predict_and_save": "predict the test features with {predict}, then {save}",
        "predict_labels": "predict labels: {predict}, then {save}",
        "predict_probabilities": "predict probabilities: {predict}, then {save}",
        "newer_model": "predict with the fitted model {name!r}: {predict}, then {save}",
        "ensemble_refit": ("fit on the train target with a tree ensemble, whose predictions stay within the target's "
                           "values: {fit}, then predict with it ({predict}) and {save}"),
        "kind_refit": "fit a model of the task's kind: {fit}, then predict with it ({predict}) and {save}",
        "rename": "name its column after the target: {convert}, then {save}",
        "unwritable": "they could not be written as CSV ({error})",
        # recorded as a trial's submission_reason too (runner/trial.py)
        "no_model": ("the submission file is valid, but no model predicted it (predict_target never ran on its "
                     "path): fit a model, predict the test rows with predict_target and save those predictions"),
    },
}


def stage_feedback(stage_name: str, situation: str, /, **fields: Any) -> str:
    """:data:`STAGE_FEEDBACK`'s text for ``situation`` of stage ``stage_name``, filled in with ``fields``."""
    return STAGE_FEEDBACK[stage_name][situation].format(**fields)


def feedback_call(name: str, /, **fields: Any) -> str:
    """A tool call the feedback names (:data:`FEEDBACK_CALLS`), filled in with ``fields``."""
    return FEEDBACK_CALLS[name].format(**fields)


def feedback_part(name: str, /, **fields: Any) -> str:
    """A fragment several feedback texts share (:data:`FEEDBACK_PARTS`), filled in with ``fields``."""
    return FEEDBACK_PARTS[name].format(**fields)


def feedback_list(names: list[Any], limit: int = 12) -> str:
    """A list of names (columns, mostly) for a feedback line: at most ``limit``, then how many in all."""
    shown = [str(n) for n in names]
    return repr(shown[:limit])[:-1] + (feedback_part("list_more", count=len(shown)) if len(shown) > limit else "]")


def all_prompts() -> dict[str, Any]:
    return {
        "shared_preamble": shared_preamble("{task description}", [{"name": "{tool}", "description": "{summary}"}]),
        "react_system": REACT_SYSTEM,
        "expansion_system": EXPANSION_SYSTEM,
        "lats_evaluator_system": LATS_EVALUATOR_SYSTEM,
        "lats_reflection_system": LATS_REFLECTION_SYSTEM,
        "reflections_header": REFLECTIONS_HEADER,
        "subtask_system": {name: subtask_system(name) for name in SUBTASK_PREFIXES},
        "no_tool_call": NO_TOOL_CALL,
        "evaluator_request": EVALUATOR_REQUEST,
        "reflection_request": REFLECTION_REQUEST,
        "stage_tools_note": {"header": STAGE_TOOLS_HEADER, "more": STAGE_TOOLS_MORE,
                             "budget_chars": STAGE_TOOLS_BUDGET, "parameter_doc_chars": PARAMETER_DOC_CHARS,
                             "example": stage_tools_note([{"name": "{tool}", "parameters": {"properties": {
                                 "bindings": {"properties": {"df": {"description": "{meaning}"}}},
                                 "func_kwargs": {"properties": {"columns": {"default": None,
                                                                            "description": "{meaning}"}}},
                                 "output": {"description": "{meaning}"}}}}])},
        "automind_draft_system": AUTOMIND_DRAFT_SYSTEM,
        "automind_improve_system": AUTOMIND_IMPROVE_SYSTEM,
        "automind_debug_system": AUTOMIND_DEBUG_SYSTEM,
        "improve_request": improve_request("1. read_data(...)", 1, None),
        "debug_request": debug_request("<error>"),
        "mle_star_refine_system": MLE_STAR_REFINE_SYSTEM,
        "refine_request": refine_request("1. read_data(...)", "<block>", "<effects>", 1),
        "agent_k_stage_system": AGENT_K_STAGE_SYSTEM,
        "stage_request": stage_request("<stage>", 1, "<count>", "<result>"),
        "memory_header": MEMORY_HEADER,
        "message_order": ["system: shared_preamble (task description and tool catalogue)",
                          "system: the planner's instructions (react_system, expansion_system, subtask_system, "
                          "lats_evaluator_system or lats_reflection_system)",
                          "user: reflections_header + reflections (LATS, when there are any)",
                          "the path's history: assistant tool calls and tool results; in proposal requests, "
                          "user: stage_tools_note (the parameters of the next stage's tools) before the first "
                          "step and after each step where the note changed along the path, kept there in "
                          "every later request unless the very next step's note replaces it (no note at the "
                          "end that changes with the stage)",
                          "user: evaluator_request or reflection_request (LATS judge and reflector)"],
        "trimmed_context": {"full_observations": TRIMMED_FULL_OBSERVATIONS, "first_lines": TRIMMED_FIRST_LINES,
                            "line_chars": TRIMMED_LINE_CHARS, "marker": TRIMMED_MARKER,
                            "rule": "older tool results cut to their first lines; the last result carries the "
                                    "whole scratchpad listing with columns; tool schemas keep the first paragraph "
                                    "of their descriptions; without --context trimmed, the same cut applies "
                                    "from the first request that outgrows the model's context window on"},
        "bounded_context": {"chars_per_token": CHARS_PER_TOKEN, "low_water": BOUNDED_LOW_WATER,
                            "full_observations": TRIMMED_FULL_OBSERVATIONS,
                            "rule": "with --context-budget N: the last full_observations tool results are "
                                    "whole; while the older ones total more than N tokens, the oldest are cut to "
                                    "their first lines (the trimmed context's cut) until the whole ones total at "
                                    "most low_water x N, and the stage notes after cut steps are dropped; the cut "
                                    "point only moves forward along a path"},
        "stage_feedback": {"stages": STAGE_FEEDBACK, "calls": FEEDBACK_CALLS, "parts": FEEDBACK_PARTS,
                           "roles": FEEDBACK_ROLES},
    }
