"""Environments shipped with forge-agent, one folder each (env, tasks, OpenEnv server).

Registered ids (see `forge_agent.env.registry`): "calculator", "code_exec", "frozen_lake",
"sql_mcp".
"""
