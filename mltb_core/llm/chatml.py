"""Requests for a server that renders tools as text (ChatML, no native tool role): the tool catalogue in
the first system message, tool turns as user turns, calls as JSON text, and the JSON schema one call must
follow. The embedded model's backend sends every request this way; the ``openai:`` backend does in its JSON
call formats (``MLTB_OPENAI_CALLS``), so the one home is here, below both."""
from __future__ import annotations

import contextlib
import json
from typing import Any

from mltb_core.llm import prompts
from mltb_core.toolkit.constraints import OBJECT_NAME

__all__ = ["tool_catalogue", "call_schema", "chatml_messages"]


def tool_catalogue(tools: list[dict[str, Any]], listed: bool = False) -> str:
    """What the local model is told about the offered tools, appended to the first system message: the reply
    format, after one ``name: summary`` line per tool unless ``listed`` (the shared preamble already names
    every tool; a second list would only add ~1,000 tokens to every cold prompt).

    No parameter lists here: the stage note (:func:`prompts.stage_tools_note`), a user turn of the request,
    carries them. Offered tools differ per subtask (Hierarchical MCTS masks them), and anything that
    varies with them in the first system message would break the cached prefix of every later call.
    """
    body = "" if listed else "\n\nTools:\n" + prompts.tool_catalogue(tools)
    return (body + '\n\nReply with exactly one JSON object: {"tool_name": "<tool>", "tool_args": '
                   '{"bindings": {...}, "func_kwargs": {...}, "output": "<name>"}}')


def call_schema(tools: list[dict[str, Any]]) -> dict[str, Any]:
    """JSON schema of one paper-format call to one of ``tools`` (becomes a llama.cpp grammar)."""
    names = [t.get("function", t)["name"] for t in tools]
    return {"type": "object", "properties": {
        "tool_name": {"type": "string", "enum": names},
        "tool_args": {"type": "object", "properties": {
            "bindings": {"type": "object", "additionalProperties": OBJECT_NAME},
            "func_kwargs": {"type": "object"},
            "output": OBJECT_NAME},
            "required": ["bindings", "func_kwargs", "output"]}},
        "required": ["tool_name", "tool_args"]}


def _text(content: Any) -> str:
    if isinstance(content, list):  # content parts
        return "\n".join(p.get("text", "") for p in content if isinstance(p, dict))
    return content or ""


def chatml_messages(messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> list[dict[str, str]]:
    """Messages the chatml template can render: tool turns as user turns, calls as JSON text,
    the tool catalogue at the end of the first system message (kept first and stable for prefix reuse)."""
    call_names: dict[str, str] = {}
    out: list[dict[str, str]] = []
    for message in messages:
        role, text = message.get("role"), _text(message.get("content"))
        if role == "assistant" and message.get("tool_calls"):
            calls = []
            for call in message["tool_calls"]:
                function = call.get("function", {})
                call_names[call.get("id", "")] = function.get("name", "")
                args = function.get("arguments") or "{}"
                with contextlib.suppress(TypeError, json.JSONDecodeError):
                    args = json.loads(args) if isinstance(args, str) else args
                calls.append(json.dumps({"tool_name": function.get("name"), "tool_args": args}))
            out.append({"role": "assistant", "content": "\n".join(filter(None, [text, *calls]))})
        elif role == "tool":
            name = message.get("name") or call_names.get(message.get("tool_call_id", ""), "the tool")
            out.append({"role": "user", "content": f"Result of {name}:\n{text}"})
        else:
            out.append({"role": role if role in ("system", "user", "assistant") else "user", "content": text})
    if tools:
        if out and out[0]["role"] == "system":
            listed = prompts.TOOLS_HEADER in out[0]["content"]  # the shared preamble's catalogue is there
            out[0] = {"role": "system", "content": out[0]["content"] + tool_catalogue(tools, listed=listed)}
        else:
            out.insert(0, {"role": "system", "content": tool_catalogue(tools).lstrip()})
    return out
