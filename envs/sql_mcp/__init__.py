"""The sql_mcp env: SQL questions answered through a sandboxed MCP server (mcp-server-sqlite)."""

from envs.sql_mcp.env import SqlMcpEnv, demonstration, extract_answer, sqlite_server
from envs.sql_mcp.tasks import generate_tasks

__all__ = ["SqlMcpEnv", "demonstration", "extract_answer", "generate_tasks", "sqlite_server"]
