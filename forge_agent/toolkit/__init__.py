"""The library's tool machinery, in one package: a tool is a Python function with a schema
(`schema`: the JSON schema of its signature, strict argument checks), a `ToolSet` runs an
env's tools for the policy's calls (`toolset`: checks, timeouts, output cuts, ``Error:``
observations, sandboxed tools), and `mcp` brings any Model Context Protocol server's tools in
as `ToolSet` tools. The tools the project ships (calculator, files, python, shell, repo) live
in the top-level `tools/` package; an env that serves MCP tools is
`forge_agent.env.MCPToolEnv`.

    from forge_agent.toolkit import ToolSet, tool

    @tool
    def add(a: int, b: int) -> int:
        "Add two integers."
        return a + b

    tools = ToolSet([add])
"""

from forge_agent.toolkit.schema import ToolSchemaError, tool_spec, validate_arguments
from forge_agent.toolkit.toolset import ToolError, ToolSet, tool

__all__ = ["ToolError", "ToolSchemaError", "ToolSet", "tool", "tool_spec", "validate_arguments"]
