"""What the tool tests (tests/test_tools_*.py) share: a tool context with its own sandbox, one call in the
paper's format, and the checks of a call's result."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from mltb_core.toolkit.registry import REGISTRY, ToolContext, ToolResult, execute
from mltb_core.toolkit.scratchpad import Scratchpad


def tool_context(tmp_path: Path, **fields: Any) -> ToolContext:
    """A context whose sandbox is ``tmp_path/sandbox`` (``fields``: data_dir, task, seed, ...)."""
    sandbox = tmp_path / "sandbox"
    sandbox.mkdir(exist_ok=True)
    return ToolContext(sandbox=sandbox, **fields)


def call_tool(pad: Scratchpad, ctx: ToolContext, tool: str, bindings: dict | None = None,
              kwargs: dict | None = None, output: str | list[str] | None = None) -> ToolResult:
    """Run ``tool`` as the model would call it."""
    args: dict[str, Any] = {"bindings": bindings or {}, "func_kwargs": kwargs or {}}
    if output is not None:
        args["output"] = output
    return execute({"tool_name": tool, "tool_args": args}, pad, ctx)


def ok(result: ToolResult) -> ToolResult:
    assert result.ok, result.message
    return result


def failed(result: ToolResult, *fragments: str) -> ToolResult:
    """A failed call as the model sees it: 'Error:' first, each fragment, then the tool's documentation."""
    assert not result.ok, result.message
    assert result.message.startswith("Error:"), result.message
    for fragment in fragments:
        assert fragment in result.message, result.message
    assert "Tool documentation for " in result.message, result.message
    tool = result.message.split("Tool documentation for ")[1].split("(")[0]
    assert REGISTRY.get(tool).doc in result.message
    return result
