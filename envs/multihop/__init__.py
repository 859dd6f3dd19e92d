"""Multi-hop lookups (`multihop`): follow references through a table of records with a tool."""

from envs.multihop.env import MultiHopEnv, demonstration, generate_tasks

__all__ = ["MultiHopEnv", "demonstration", "generate_tasks"]
