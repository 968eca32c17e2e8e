"""Seconds and tokens per call of the embedded local model (SmolLM2 via llama.cpp), and trials.

Run: ``python benchmarks/local_model.py [--calls 5] [--model local] [--trial-depth 8]``. Uses the
registered tool schemas when the toolset is importable (else a synthetic list of the same shape) and
a paper-like system prompt; the first call (server start, cold prompt) is reported apart. Then one
``react`` trials with ``--model local`` (``--trials 0`` skips them): wall time and tokens per trial.
"""
from __future__ import annotations

import argparse
import statistics
import tempfile
import time

from _bench import Figure, count, emit, load_average, sim_trial
from mltb_core.llm import make_backend

SYSTEM = ("You are an expert data scientist solving a Kaggle tabular challenge with tools. Each step, call "
          "exactly one tool. Objects live in a scratchpad: pass them by name in 'bindings', plain values in "
          "'func_kwargs', and name the result in 'output'. Load the data, clean it, engineer features, fit "
          "a model, evaluate it and write the submission file.")
TASK = ("Task: predict 'Transported' for the Spaceship Titanic test set (metric: accuracy). Training data: "
        "/data/train.csv, test data: /data/test.csv; write predictions to /out/submission.csv.")


def realistic_tools() -> list[dict]:
    try:
        import mltb_core.toolkit.tools  # noqa: F401 - registers the toolset
        from mltb_core.toolkit.registry import REGISTRY

        tools = [tool.schema() for tool in REGISTRY]
        if len(tools) >= 10:
            return tools
    except Exception:  # noqa: BLE001 - fall back to a synthetic toolset
        pass
    names = ["read_data", "concatenate_train_test", "split_combined_into_train_test", "get_missing_summary",
             "fillna_median", "fillna_mode", "drop_rows_with_missing", "create_ratio_feature",
             "one_hot_encode", "label_encode", "standard_scale", "drop_columns", "split_features_target",
             "fit_random_forest", "fit_lightgbm", "fit_xgboost", "fit_catboost", "fit_logistic_regression",
             "tune_lightgbm", "evaluate_model", "predict_target", "create_submission"]
    return [{"type": "function", "function": {
        "name": name, "description": f"{name.replace('_', ' ').capitalize()}.",
        "parameters": {"type": "object", "properties": {
            "bindings": {"type": "object", "properties": {"df": {"type": "string"}}},
            "func_kwargs": {"type": "object", "properties": {"columns": {"type": "array"}}},
            "output": {"type": "string"}}}}} for name in names]


def per_call(model: str, calls: int) -> list[Figure]:
    """Median seconds and tokens of ``calls`` warm calls (after one cold call)."""
    tools = realistic_tools()
    seconds, prompt, completion = [], [], []
    with tempfile.TemporaryDirectory() as cache_dir:
        # keep_server=False: the server's state lives in cache_dir, which is deleted below
        backend = make_backend(model, seed=0, cache_dir=cache_dir, keep_server=False)
        try:
            for i in range(calls + 1):
                messages = [{"role": "system", "content": SYSTEM},
                            {"role": "user", "content": f"{TASK}\nStep {i + 1}: what is your next tool call?"}]
                start = time.perf_counter()
                response = backend.complete(messages, tools, temperature=0.7, seed=i)
                elapsed = time.perf_counter() - start
                if i == 0:
                    cold = elapsed
                    print(f"first call (server start + cold prompt): {elapsed:.2f} s, "
                          f"{response.usage.prompt_tokens} prompt tokens")
                    continue
                seconds.append(elapsed)
                prompt.append(response.usage.prompt_tokens)
                completion.append(response.usage.completion_tokens)
                cand = response.candidates[0]
                print(f"call {i}: {elapsed:.2f} s, {response.usage.completion_tokens} completion tokens, "
                      + (f"calls {[c.tool_name for c in cand.tool_calls]}" if not cand.error else "parse error"),
                      flush=True)
        finally:
            backend.close()
    return [Figure("seconds per LLM call (median, warm)", f"{statistics.median(seconds):.2f} s",
                   note=f"{len(tools)} tools offered; {calls} calls; load {load_average()}"),
            Figure("first call (server start + cold prompt)", f"{cold:.2f} s"),
            Figure("tokens per call (median)", f"{statistics.median(prompt):.0f} prompt + "
                   f"{statistics.median(completion):.0f} completion")]


def trials(model: str, depth: int, count: int) -> list[Figure]:
    """``count`` react trials with the local model in this process: the first starts the server and
    evaluates the cold prompt, later ones find both warm (the server is kept per process)."""
    figures = []
    for trial in range(count):
        record = sim_trial("spaceship-titanic", "react", model=model, max_depth=depth, trial=trial)
        calls = max(record.llm_calls, 1)
        figures += [Figure(f"react trial {trial + 1}, {model}, max_depth={depth}", f"{record.wall_seconds:.1f} s wall",
                           note=f"{record.outcome}, stage {record.stage_reached}, {record.llm_calls} LLM calls "
                                f"({record.llm_seconds / calls:.2f} s each), {record.tool_calls} tool calls"),
                    Figure(f"tokens in trial {trial + 1}", f"{record.tokens_in} prompt + {record.tokens_out} completion",
                           note=f"{(record.tokens_in + record.tokens_out) / calls:.0f} per call")]
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=count, default=5)
    parser.add_argument("--model", default="local:smollm2")
    parser.add_argument("--trial-depth", type=count, default=8, help="max_depth of the react trials")
    parser.add_argument("--trials", type=int, default=2, help="react trials with the local model (0: none)")
    parser.add_argument("--json", action="store_true", help="also print a FIGURES line for run_all.py")
    args = parser.parse_args()
    figures = per_call(args.model, args.calls)
    figures += trials(args.model, args.trial_depth, args.trials)
    emit("Local model", figures, args.json)


if __name__ == "__main__":
    main()
