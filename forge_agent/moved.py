"""Modules that moved: importing one by its old path fails with its new home named.

A user's code or config (`env.id=forge_agent.env.gym_adapter:...`) written against an earlier
layout would otherwise get a bare `ModuleNotFoundError`. The finder sits last on
`sys.meta_path`, so it is asked only about modules nothing else found; it answers for the old
paths in `MOVED` alone, and finds nothing (it never imports the new module for the caller: the
old path is gone, and the message says where to go).
"""

from __future__ import annotations

import importlib.abc
import sys

__all__ = ["MOVED", "MovedModuleError", "install"]

MOVED = {
    "forge_agent.advantages": "forge_agent.algorithms.advantages",
    "forge_agent.algorithms.loss_config": "forge_agent.algorithms.config",
    "forge_agent.config": "forge_agent.run.config",
    "forge_agent.console": "forge_agent.observability.console",
    "forge_agent.env._worker_main": "forge_agent.env.worker_process",
    "forge_agent.env.adapters.reasoning_gym_scorers": "forge_agent.rewards.reasoning_gym_scorers",
    "forge_agent.env.adapters.verifiers_rubric": "forge_agent.rewards.verifiers_rubric",
    "forge_agent.env.gym_adapter": "forge_agent.env.adapters.gymnasium",
    "forge_agent.env.openenv_adapter": "forge_agent.env.adapters.openenv",
    "forge_agent.env.reasoning_gym_env": "forge_agent.env.adapters.reasoning_gym",
    "forge_agent.env.seam": "forge_agent.env.demonstrations",
    "forge_agent.env.textarena_env": "forge_agent.env.adapters.textarena",
    "forge_agent.env.verifiers_env": "forge_agent.env.adapters.verifiers",
    "forge_agent.env.verifiers_tools": "forge_agent.env.adapters.verifiers_tools",
    "forge_agent.env.worker": "forge_agent.env.pool",
    "forge_agent.generator.engine": "forge_agent.generator.vllm_engine",
    "forge_agent.generator.worker_ext": "forge_agent.generator.vllm_extension",
    "forge_agent.host_placement": "forge_agent.hosts.meshes",
    "forge_agent.loop_timing": "forge_agent.observability.loop_timing",
    "forge_agent.losses": "forge_agent.algorithms.losses",
    "forge_agent.mcp": "forge_agent.toolkit.mcp",
    "forge_agent.mcp.client": "forge_agent.toolkit.mcp.client",
    "forge_agent.mcp.config": "forge_agent.toolkit.mcp.config",
    "forge_agent.mcp.env": "forge_agent.env.adapters.mcp",
    "forge_agent.mcp.transport": "forge_agent.toolkit.mcp.transport",
    "forge_agent.mcp.warm": "forge_agent.toolkit.mcp.warm",
    "forge_agent.metrics": "forge_agent.observability.metrics",
    "forge_agent.netns": "forge_agent.hosts.netns",
    "forge_agent.placement": "forge_agent.hosts.placement",
    "forge_agent.plots": "forge_agent.observability.plots",
    "forge_agent.replay": "forge_agent.algorithms.replay",
    "forge_agent.rollout.chatml": "forge_agent.rollout.text_tools",
    "forge_agent.rollout.engine": "forge_agent.rollout.runner",
    "forge_agent.run.engines": "forge_agent.run.runners",
    "forge_agent.run.host_meshes": "forge_agent.hosts.meshes",
    "forge_agent.run.host_placement": "forge_agent.hosts.meshes",
    "forge_agent.run.placement": "forge_agent.hosts.placement",
    "forge_agent.run.rollouts": "forge_agent.run.runners",
    "forge_agent.run.slurm_compat": "forge_agent.hosts.slurm",
    "forge_agent.runtime": "forge_agent.hosts",
    "forge_agent.runtime.host_placement": "forge_agent.hosts.meshes",
    "forge_agent.runtime.hosts": "forge_agent.hosts.attach",
    "forge_agent.runtime.memory": "forge_agent.memory",
    "forge_agent.runtime.netns": "forge_agent.hosts.netns",
    "forge_agent.runtime.placement": "forge_agent.hosts.placement",
    "forge_agent.runtime.slurm_cluster": "forge_agent.hosts.slurm_cluster",
    "forge_agent.runtime.supervision": "forge_agent.run.supervision",
    "forge_agent.sandbox.eval_guard": "forge_agent.rewards.eval_guard",
    "forge_agent.sandbox.judge": "forge_agent.rewards.judge",
    "forge_agent.step_profile": "forge_agent.observability.step_profile",
    "forge_agent.supervision": "forge_agent.run.supervision",
    "forge_agent.tasks": "forge_agent.env.tasks",
    "forge_agent.tool_schema": "forge_agent.toolkit.schema",
    "forge_agent.tools": "forge_agent.toolkit",
    "forge_agent.tools.mcp": "forge_agent.toolkit.mcp",
    "forge_agent.tools.mcp.client": "forge_agent.toolkit.mcp.client",
    "forge_agent.tools.mcp.config": "forge_agent.toolkit.mcp.config",
    "forge_agent.tools.mcp.transport": "forge_agent.toolkit.mcp.transport",
    "forge_agent.tools.mcp.warm": "forge_agent.toolkit.mcp.warm",
    "forge_agent.tools.schema": "forge_agent.toolkit.schema",
    "forge_agent.tools.toolset": "forge_agent.toolkit.toolset",
    "forge_agent.toolset": "forge_agent.toolkit.toolset",
    "forge_agent.trace_html": "forge_agent.observability.trace_html",
    "forge_agent.traces": "forge_agent.observability.traces",
    "forge_agent.weight_layout": "forge_agent.weights.layout",
    "forge_agent.weight_relay": "forge_agent.weights.relay",
    "forge_agent.weight_store": "forge_agent.weights.store",
    "forge_agent.worker": "forge_agent.hosts.serve",
}
"""Old module path -> the module it lives in now (from `git log` renames)."""


class MovedModuleError(ModuleNotFoundError):
    """An import of a module by the path it had before it moved."""


class _MovedFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path=None, target=None):
        new = MOVED.get(fullname)
        if new is None:
            return None
        raise MovedModuleError(
            f"{fullname} has moved to {new}: import {new} instead", name=fullname
        )


def install() -> None:
    """Put the finder last on `sys.meta_path` (once)."""
    if not any(isinstance(f, _MovedFinder) for f in sys.meta_path):
        sys.meta_path.append(_MovedFinder())
