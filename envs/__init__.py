"""Environments shipped with forge-agent, one folder each (env, tasks, OpenEnv server).

They register the way a user's package does: entry points of the `forge_agent.envs` group in
`pyproject.toml` ("calculator", "code_exec", "frozen_lake", "blackjack", "sql_mcp");
`forge_agent` itself imports nothing from here.
"""
