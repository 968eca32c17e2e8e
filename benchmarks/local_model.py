"""Seconds and tokens per call of the embedded local model (SmolLM2 via llama.cpp).

Run: ``python benchmarks/local_model.py [--calls 5] [--model local]``. Uses the registered tool
schemas when the toolset is importable (else a synthetic list of the same shape) and a
paper-like system prompt; the first call (server start, cold prompt) is reported apart.
"""
from __future__ import annotations

import argparse
import statistics
import tempfile
import time

from mltb_core.llm import make_backend

SYSTEM = ("You are an expert data scientist solving a Kaggle tabular challenge with tools. Each step, call "
          "exactly one tool. Objects live in a scratchpad: pass them by name in 'bindings', plain values in "
          "'func_kwargs', and name the result in 'output'. Load the data, clean it, engineer features, fit "
          "a model, evaluate it and write the submission file.")
TASK = ("Task: predict 'Transported' for the Spaceship Titanic test set (metric: accuracy). Training data: "
        "/data/train.csv, test data: /data/test.csv; write predictions to /out/submission.csv.")


def realistic_tools() -> list[dict]:
    try:
        import mltb_core.tools  # noqa: F401 - registers the toolset
        from mltb_core.registry import REGISTRY

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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=5)
    parser.add_argument("--model", default="local")
    args = parser.parse_args()
    tools = realistic_tools()
    with tempfile.TemporaryDirectory() as cache_dir:
        backend = make_backend(args.model, seed=0, cache_dir=cache_dir)
        try:
            seconds, prompt, completion = [], [], []
            for i in range(args.calls + 1):
                messages = [{"role": "system", "content": SYSTEM},
                            {"role": "user", "content": f"{TASK}\nStep {i + 1}: what is your next tool call?"}]
                start = time.perf_counter()
                response = backend.complete(messages, tools, temperature=0.7, seed=i)
                elapsed = time.perf_counter() - start
                if i == 0:
                    print(f"first call (server start + cold prompt): {elapsed:.2f} s, "
                          f"{response.usage.prompt_tokens} prompt tokens")
                    continue
                seconds.append(elapsed)
                prompt.append(response.usage.prompt_tokens)
                completion.append(response.usage.completion_tokens)
                cand = response.candidates[0]
                print(f"call {i}: {elapsed:.2f} s, {response.usage.completion_tokens} completion tokens, "
                      + (f"calls {[c.tool_name for c in cand.tool_calls]}" if not cand.error else "parse error"))
        finally:
            backend.close()
    print(f"\n{len(tools)} tools; median {statistics.median(seconds):.2f} s per LLM call; "
          f"tokens per call: {statistics.median(prompt):.0f} prompt + {statistics.median(completion):.0f} completion")


if __name__ == "__main__":
    main()
