"""What the agent acts with: the named-object scratchpad, the tool registry and tools, the safe
expression evaluator, the file sandbox and resource limits."""
